"""A DAG cycle on a real Spark standalone cluster: a master and one worker on 127.0.0.1, started from the venv's pyspark."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stack import local_stack
from stack.harness import SUCCESS, check_exactly_once, load_dags, read_output, run_dag
from stack.producer import produce

BIN = Path(sys.executable).parent
# A JVM takes a few seconds to start; a worker registers with the master a few seconds after that.
START_TIMEOUT = 90


@dataclass(frozen=True)
class Worker:
    proc: subprocess.Popen[bytes]
    webui_url: str
    work_dir: Path  # one per worker: each executor's stdout and stderr land under <work_dir>/<app id>/<executor id>/


@dataclass(frozen=True)
class Cluster:
    master_url: str
    webui_url: str
    workers: tuple[Worker, ...]

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster: workers, running and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # A session of its own, so the finalizer can stop the JVM and every child it forked in one signal.
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process group at once, then wait: JVMs take seconds each to shut down."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_for(what: str, ready: Any, procs: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for name, (proc, log) in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"spark {name} exited with {proc.returncode} while waiting for {what}; {log}:\n{log.read_text()[-3000:]}"
                )
        try:
            if ready():
                return
        except OSError:
            pass  # the web UI is not listening yet
        time.sleep(0.5)
    logs = "\n".join(f"--- {log}:\n{log.read_text()[-2000:]}" for _, log in procs.values())
    raise RuntimeError(f"spark cluster: no {what} within {START_TIMEOUT}s\n{logs}")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, stack: local_stack.Stack, tmp_path: Path) -> Iterator[Cluster]:
    """A standalone master and 1-core workers (one, or as many as the test's indirect parameter says).

    The workers' environment carries the local stack's AWS settings: executors started by a standalone
    worker inherit the worker's environment, not spark-submit's. On a real cluster they would use their
    instance role; here they use the local stack's keys.
    """
    count: int = getattr(request, "param", 1)
    port, webui = local_stack.free_port(), local_stack.free_port()
    env = {
        **os.environ,
        **stack.env(),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-class finds SPARK_HOME through PATH
        "SPARK_LOCAL_IP": "127.0.0.1",  # else Spark may bind to an unroutable address
        "PYSPARK_PYTHON": sys.executable,
    }
    master_log = tmp_path / "spark-master.log"
    master = _spawn(
        [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
        env, master_log,
    )  # fmt: skip
    procs = {"master": (master, master_log)}
    master_url, webui_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui}"
    workers: list[Worker] = []
    try:
        _wait_for("master", lambda: Cluster(master_url, webui_url, ()).state().get("status") == "ALIVE", procs)
        for i in range(count):  # started together: N workers take no longer to register than one
            work_dir, worker_log, worker_webui = tmp_path / f"spark-work-{i}", tmp_path / f"spark-worker-{i}.log", local_stack.free_port()
            work_dir.mkdir()
            worker = _spawn(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", master_url,
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(worker_webui),
                 "--work-dir", str(work_dir)],
                env, worker_log,
            )  # fmt: skip
            procs[f"worker {i}"] = (worker, worker_log)
            workers.append(Worker(worker, f"http://127.0.0.1:{worker_webui}", work_dir))
        running = Cluster(master_url, webui_url, tuple(workers))
        _wait_for(f"{count} registered workers", lambda: running.state().get("aliveworkers", 0) >= count, procs)
        yield running
    finally:
        _stop([proc for proc, _ in reversed(procs.values())])


def test_a_cycle_replays_on_a_standalone_cluster_exactly_once(
    kinesis: Any, entry: dict[str, Any], cluster: Cluster, airflow_db: Path, tmp_path: Path
) -> None:
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.executor.memory": "512m",
        "spark.cores.max": "1",
        "spark.pyspark.python": sys.executable,
        # The driver runs in this process's spark-submit; the executors must reach it on a routable address.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    pipeline = {**entry, "spark": {"master": cluster.master_url, "conf": conf}}
    dag = load_dags(tmp_path / "cluster.yaml", pipeline)[f"kinesis_replay_{pipeline['name']}"]
    produced = produce(kinesis, pipeline["stream"], 300)

    assert run_dag(dag).tasks == SUCCESS

    result = check_exactly_once(produced, read_output(pipeline["output"]))
    assert result.ok, result
    apps = cluster.state()["completedapps"]
    ours = [a for a in apps if a["name"].startswith("kinesis-replay") and pipeline["name"] in a["name"]]
    assert [a["state"] for a in ours] == ["FINISHED"], apps
    work_dir = cluster.workers[0].work_dir
    assert list(work_dir.glob("app-*/*/stderr")), f"no executor ran on the worker (nothing under {work_dir})"
