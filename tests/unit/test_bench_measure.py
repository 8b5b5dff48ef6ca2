"""The bench's CPU count: a process tree's CPU through a cgroup of its own, children nobody reaps included."""

from __future__ import annotations

import os
import sys

import pytest
from measure import CpuGroup, children_cpu, run_tracked

# The parent starts a child that does a fixed amount of work, waits until it is done, then kills it without reaping it
# and exits: as the JVM leaves pyspark's Python workers. wait4 never sees the child's CPU; its cgroup does.
ORPHAN = (
    "import subprocess, sys; "
    "child = subprocess.Popen([sys.executable, '-c', 'sum(range(30_000_000)); print(\"done\", flush=True); import time; time.sleep(60)'], "
    "stdout=subprocess.PIPE, text=True); child.stdout.readline(); child.kill(); import os; os._exit(0)"
)


def test_a_child_killed_unreaped_counts_in_the_cgroups_cpu_and_not_in_wait4s() -> None:
    group = CpuGroup.create()
    if group is None:
        pytest.skip("no writable cgroup v1 cpuacct here: the bench falls back to wait4 and samples")
    group.remove()
    before = children_cpu()
    done = run_tracked([sys.executable, "-c", ORPHAN], dict(os.environ))
    reaped = children_cpu() - before
    assert done.code == 0 and done.cpu_counted_by == "cgroup"
    # wait4 counted the parent alone; the child's sum (about a CPU-second here) is in the cgroup's count besides.
    assert done.cpu - reaped > 0.3, (done.cpu, reaped)
