"""Measuring processes: CPU time from a cgroup of their own (or /proc and wait4), peak memory of Spark's Python workers
by sampling RSS."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a running process has used so far (its own, not its children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def is_python_worker(cmdline: Sequence[str]) -> bool:
    """Spark's Python workers: the daemon (pyspark's, or the job's python_daemon) and the workers it forks (they keep its
    command line)."""
    return any(part in ("pyspark.daemon", "pyspark.worker", "python_daemon") or part.endswith("pyspark/daemon.py") for part in cmdline)


@dataclass(eq=False)  # a Thread must stay hashable
class TreeSampler(threading.Thread):
    """Samples a process tree every ``interval`` seconds: the largest RSS of any Python worker, and of all of them together."""

    root: int
    interval: float = 0.05
    worker_peak: int = 0  # bytes: the largest single Python worker seen
    workers_peak: int = 0  # bytes: all Python workers together, at the worst sample
    tree_peak: int = 0  # bytes: the whole tree (JVM, driver, workers)
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid: (kind, CPU seconds at its last sample)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        try:
            root = psutil.Process(self.root)
        except psutil.NoSuchProcess:
            return
        while not self.stop_event.is_set():
            workers = tree = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in procs:
                try:
                    rss, cmdline, times = proc.memory_info().rss, proc.cmdline(), proc.cpu_times()
                    tree += rss
                    if is_python_worker(cmdline):
                        workers += rss
                        self.worker_peak = max(self.worker_peak, rss)
                    kind = process_kind(cmdline) if cmdline or proc.pid not in self.cpu else self.cpu[proc.pid][0]
                    self.cpu[proc.pid] = (kind, times.user + times.system)  # an exiting process shows no command line
                except psutil.Error:
                    continue
            self.workers_peak = max(self.workers_peak, workers)
            self.tree_peak = max(self.tree_peak, tree)
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds by kind of process, as last sampled (a process's last 50 ms before it exits are missed)."""
        total: dict[str, float] = {}
        for kind, seconds in self.cpu.values():
            total[kind] = total.get(kind, 0.0) + seconds
        return total


def process_kind(cmdline: Sequence[str]) -> str:
    """jvm (the driver and, in local mode, the executors), python_workers, python_driver, or other."""
    if is_python_worker(cmdline):
        return "python_workers"
    if cmdline and cmdline[0].endswith("java"):
        return "jvm"
    if any(part.endswith(".py") for part in cmdline[:2]) or (cmdline and "python" in cmdline[0]):
        return "python_driver"
    return "other"


@dataclass(frozen=True)
class Finished:
    """A process run to its end: exit code, output, wall seconds, CPU seconds of it and every descendant it reaped."""

    code: int
    output: str
    seconds: float
    cpu: float
    worker_peak: int
    workers_peak: int
    tree_peak: int
    cpu_by_kind: dict[str, float] = field(default_factory=dict)
    cpu_counted_by: str = "wait4"  # or "cgroup" (run_tracked)


def children_cpu() -> float:
    """CPU seconds of every child this process has reaped, with the descendants each of them reaped."""
    usage = os.times()
    return usage.children_user + usage.children_system


class CpuGroup:
    """A cgroup of the process tree's own, counting the CPU of every process in it, to the nanosecond, whether or not
    anything waits for it: cgroup v1's cpuacct, where it is mounted and writable (as here), else None."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls) -> CpuGroup | None:
        path = cls.ROOT / f"kinesis-replay-bench-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def join(self) -> None:
        """Put the calling process in the group (run in the child, before exec: everything it starts is in it too)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        with contextlib.suppress(OSError):  # refused while a process is left in it: the group stays, empty once they end
            self.path.rmdir()


def run_tracked(command: list[str], env: Mapping[str, str], stdin: str | None = None) -> Finished:
    """Run a command to its end. Its CPU is its cgroup's (every process it started, whether or not it was waited for);
    where no cgroup can be made, what wait4 reports for it, or the sampled processes' sum where that is more."""
    group = CpuGroup.create()
    cpu_before, started = children_cpu(), time.monotonic()
    proc = subprocess.Popen(
        command, env=dict(env), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=group.join if group else None,
    )  # fmt: skip
    sampler = TreeSampler(proc.pid)
    sampler.start()
    output, _ = proc.communicate(stdin)
    seconds = time.monotonic() - started
    sampler.stop()
    reaped = children_cpu() - cpu_before  # runs are sequential: nothing else was reaped meanwhile
    by_kind = sampler.cpu_by_kind()
    if group is not None:
        time.sleep(0.2)  # pyspark's daemon and workers, killed as the JVM exits, may take a moment to go
        cpu = group.seconds()
        group.remove()
        if "python_workers" in by_kind:
            # The workers' samples miss what they used after the last one (the JVM kills them as it exits); the others
            # run to the end, sampled. The workers' figure is the group's CPU beyond the others'.
            others = sum(seconds for kind, seconds in by_kind.items() if kind != "python_workers")
            by_kind["python_workers"] = max(by_kind["python_workers"], cpu - others)
    else:
        # wait4 misses a descendant nobody waited for: pyspark's Python workers, whose daemon the JVM kills as it
        # exits, so their CPU never reaches this process. The sampled processes then hold more than wait4 reports: the
        # larger of the two is the job's CPU (the samples miss each one's last 50 ms).
        cpu = max(reaped, sum(by_kind.values()))
    peaks = (sampler.worker_peak, sampler.workers_peak, sampler.tree_peak)
    return Finished(proc.returncode, output, seconds, cpu, *peaks, by_kind, "cgroup" if group is not None else "wait4")


@dataclass(frozen=True)
class Spread:
    """min / median / max of one figure over the runs."""

    values: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def fmt(self, spec: str = ".1f") -> str:
        if not self.values:
            return "n/a"
        return f"{self.median:{spec}} ({self.min:{spec}} to {self.max:{spec}})"
