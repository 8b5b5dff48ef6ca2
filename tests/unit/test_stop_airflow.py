"""`make up`'s and the live test's teardown: one SIGTERM to every process Airflow's components started, never two.

A second SIGTERM tells Airflow's scheduler not to wait for its LocalExecutor workers; arriving while it shuts them
down, it left the scheduler and its workers waiting on each other until SIGKILL (CI, 2026-11-24).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from stack import up

# Logs the SIGTERMs it handles, and exits half a second after the first (time for a second to arrive). Two signals
# sent close together are handled once (the kernel keeps one pending), so the test also records what was sent.
# With an argument it first starts its own copy in a session of its own, as a task process or spark-submit is.
COUNTER = """
import signal, subprocess, sys, time
log, child = sys.argv[1], sys.argv[2:]
if child:
    subprocess.Popen([sys.executable, __file__, child[0]], start_new_session=True)
got = []
def term(*_):
    open(log, "a").write("TERM\\n")
    got.append(time.monotonic())
signal.signal(signal.SIGTERM, term)
open(log + ".ready", "w").close()
while not got or time.monotonic() - got[0] < 0.5:
    time.sleep(0.01)
"""


def test_each_process_gets_one_sigterm_and_none_needs_sigkill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    component, child = tmp_path / "component", tmp_path / "child"
    proc = subprocess.Popen([sys.executable, str(script), str(component), str(child)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (Path(f"{component}.ready").exists() and Path(f"{child}.ready").exists()):
        assert time.monotonic() < deadline, "the counters did not start"
        time.sleep(0.05)
    family = {p.pid: os.getpgid(p.pid) for p in (psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True))}
    sent: list[int] = []  # the pid each SIGTERM reached, a group's counted for each of its members
    killpg, send_signal = os.killpg, psutil.Process.send_signal

    def to_group(pgid: int, sig: int) -> None:
        sent.extend(pid for pid, group in family.items() if group == pgid)
        killpg(pgid, sig)

    def to_process(self: psutil.Process, sig: int) -> None:
        sent.append(self.pid)
        send_signal(self, sig)

    monkeypatch.setattr(os, "killpg", to_group)
    monkeypatch.setattr(psutil.Process, "send_signal", to_process)

    killed = up.stop_airflow([proc.pid])

    assert killed == [] and proc.wait(timeout=10) == 0
    assert sorted(sent) == sorted(family), f"SIGTERMs sent to {sent}; the processes: {family}"
    assert component.read_text() == "TERM\n" and child.read_text() == "TERM\n"  # both stopped on their one SIGTERM
