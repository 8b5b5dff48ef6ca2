"""Faults for the chaos schedules: a state-table proxy that goes dark or loses an answer, a Spark job killer, and a task
that dies just before a call.

The first two act from outside the code under test, as the faults they stand for do: the proxy sits between the
Airflow tasks and DynamoDB on the wire, and the killer sends SIGKILL to the spark-submit process group. Between two
commits to the embedded catalog there is no wire to cut: ``dies_before`` stands in for the task process dying there.

    proxy = StateTableProxy("http://127.0.0.1:5000").start()
    proxy.arm(StateFault("lost_ack", write=3))  # the 3rd write is applied, and its answer never arrives
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from stack.kinesis_proxy import LocalServer

# DynamoDB operations that change the table; the faults count these.
WRITES = ("TransactWriteItems", "UpdateItem", "PutItem", "DeleteItem")


@dataclass(frozen=True)
class StateFault:
    """``unreachable``: from the ``write``-th write on, nothing is answered (nor forwarded) until disarmed.
    ``lost_ack``: the ``write``-th write is applied upstream, and its connection closed without an answer.
    With a ``marker``, only writes whose request body holds it count: ``TABLE_COMMITTED`` marks a commit's checkpoint
    writes, which come after the batch's table commit; the first of them is the first write after it."""

    kind: str
    write: int
    marker: bytes | None = None


# In the body of a checkpoint's advance (DynamoDBStateStore.advance_checkpoint), and of no other write: the commit's
# writes after its table commit. Dark from the first of them on, the batch is in the table and no checkpoint moved.
TABLE_COMMITTED = b'":new"'
# In the body of a re-decode's ledger update (DynamoDBStateStore.set_replayed of a batch with redecoded_by), and of no
# other write: a plain backfill's update removes the attribute, staging a re-decode never names it. The first such write
# comes after both of the re-decode's snapshots, the table's and the quarantine table's.
REDECODED = b'":redecoded_by"'


class StateTableProxy(LocalServer):
    """An HTTP proxy in front of the DynamoDB endpoint that injects one StateFault when armed."""

    def __init__(self, upstream: str) -> None:
        target = urlparse(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.fault: StateFault | None = None
        self.fired: str | None = None  # what the armed fault did, for the schedule's history
        self._writes = 0
        self._dark = False
        self._lock = threading.Lock()
        self._listen(self._handler())

    def arm(self, fault: StateFault | None) -> None:
        with self._lock:
            self.fault, self.fired, self._writes, self._dark = fault, None, 0, False

    def _decide(self, operation: str, body: bytes = b"") -> str:
        """forward, drop (no answer, not forwarded) or lose (forwarded, no answer)."""
        with self._lock:
            if self._dark:
                return "drop"
            if self.fault is None or operation not in WRITES:
                return "forward"
            if self.fault.marker is not None and self.fault.marker not in body:
                return "forward"
            self._writes += 1
            if self._writes != self.fault.write:
                return "forward"
            self.fired = f"{self.fault.kind} at write {self._writes} ({operation})"
            if self.fault.kind == "unreachable":
                self._dark = True
                return "drop"
            return "lose"

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
                decision = proxy._decide(operation, body)
                if decision == "drop":
                    self.close_connection = True
                    return
                status, headers, payload = proxy._forward(self.path, dict(self.headers), body)
                if decision == "lose":
                    self.close_connection = True
                    return
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def spark_jobs(pipeline_name: str) -> list[int]:
    """Process ids of the spark-submit JVMs running a batch of this pipeline (named kinesis-replay-<pipeline>-batch-<id>)."""
    marker = f"kinesis-replay-{pipeline_name}-batch-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and b"replay_job.py" in cmdline and b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            found.append(int(entry.name))
    return found


class SparkKiller(threading.Thread):
    """Wait for a replay job of the pipeline to start, then SIGKILL its process group once ``ready()`` says so.

    The group holds the JVM and its Python workers (spark_submit.run starts it in a session of its own). ``interval``:
    how often ``ready()`` is asked, once the job runs.
    """

    def __init__(self, pipeline_name: str, ready: Any, timeout: float = 300, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pipeline_name, self.ready, self.timeout, self.interval = pipeline_name, ready, timeout, interval
        self.fired: str | None = None
        self.started_at: float | None = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        pid = None
        while not self._cancelled.is_set() and time.monotonic() < deadline:
            if pid is None:
                jobs = spark_jobs(self.pipeline_name)
                if jobs:
                    pid, self.started_at = jobs[0], time.time()
            elif not Path(f"/proc/{pid}").exists():
                return  # the job ended before the moment came: the fault did not fire
            elif self.ready(self.started_at):
                try:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                    self.fired = f"SIGKILL to spark-submit {pid} after {time.time() - (self.started_at or 0):.1f}s"
                except ProcessLookupError:
                    pass
                return
            time.sleep(0.02 if pid is None else self.interval)


class TaskDied(Exception):
    """The task process died here (dies_before): the task fails, and nothing after this point ran."""


@contextmanager
def dies_before(module: Any, name: str, what: str) -> Iterator[list[str]]:
    """The first call of ``module.name`` while in the block raises TaskDied before it does anything, as if the task
    process had died just before it; later calls go through. Yields a list that names the call once it fired.

    Tasks run in this process (dag.test()), so the module is the one they call through: a call looked up on the module
    at call time (``quarantine_table.commit(...)``), as the project's steps make them, is cut here.
    """
    original, fired = getattr(module, name), []

    def cut(*args: Any, **kwargs: Any) -> Any:
        if fired:
            return original(*args, **kwargs)
        fired.append(f"the task died before {what}")
        raise TaskDied(f"chaos: the task process died before {what}")

    setattr(module, name, cut)
    try:
        yield fired
    finally:
        setattr(module, name, original)
