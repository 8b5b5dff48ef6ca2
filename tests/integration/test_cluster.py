"""A DAG cycle on a real Spark standalone cluster: a master and one worker on 127.0.0.1, started from the venv's pyspark."""

from __future__ import annotations

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
class Cluster:
    master_url: str
    webui_url: str
    work_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster: workers, running and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # A session of its own, so the finalizer can stop the JVM and every child it forked in one signal.
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


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
def cluster(stack: local_stack.Stack, tmp_path: Path) -> Iterator[Cluster]:
    """A standalone master and one 1-core worker; the worker's environment carries the local stack's AWS settings.

    Executors started by a standalone worker inherit the worker's environment, not spark-submit's: on a
    real cluster they would use their instance role, here they use the local stack's keys.
    """
    port, webui, worker_webui = (local_stack.free_port() for _ in range(3))
    env = {
        **os.environ,
        **stack.env(),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-class finds SPARK_HOME through PATH
        "SPARK_LOCAL_IP": "127.0.0.1",  # else Spark may bind to an unroutable address
        "PYSPARK_PYTHON": sys.executable,
    }
    work_dir = tmp_path / "spark-work"
    work_dir.mkdir()
    master_log, worker_log = tmp_path / "spark-master.log", tmp_path / "spark-worker.log"
    master = _spawn(
        [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
        env, master_log,
    )  # fmt: skip
    procs = {"master": (master, master_log)}
    running = Cluster(master_url=f"spark://127.0.0.1:{port}", webui_url=f"http://127.0.0.1:{webui}", work_dir=work_dir)
    try:
        _wait_for("master", lambda: running.state().get("status") == "ALIVE", procs)
        worker = _spawn(
            [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", running.master_url,
             "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(worker_webui),
             "--work-dir", str(work_dir)],
            env, worker_log,
        )  # fmt: skip
        procs["worker"] = (worker, worker_log)
        _wait_for("registered worker", lambda: running.state().get("aliveworkers", 0) >= 1, procs)
        yield running
    finally:
        for proc, _ in reversed(procs.values()):
            _stop(proc)


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
    executor_logs = list(cluster.work_dir.glob("app-*/*/stderr"))
    assert executor_logs, f"no executor ran on the worker (nothing under {cluster.work_dir})"
