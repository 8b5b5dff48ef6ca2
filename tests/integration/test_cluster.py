"""DAG cycles on a real Spark standalone cluster on 127.0.0.1, started from the venv's pyspark: one worker writing to S3
(the moto server), or two writing to a local folder and one killed."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack import local_stack
from stack.harness import SUCCESS, check_exactly_once, glue_table, glue_table_config, load_dags, read_output, run_dag, table_rows
from stack.producer import Produced, produce

BIN = Path(sys.executable).parent
# A JVM takes a few seconds to start; a worker registers with the master a few seconds after that.
START_TIMEOUT = 90
# Records on the kill test's stream before its cluster starts: about 30 a shard, 3 s of reading each at its budget.
BACKLOG = 120


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
        except (OSError, ValueError):
            pass  # the web UI is not listening yet, or answered before its JSON was ready (an empty body)
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


@pytest.fixture
def backlog(kinesis: Any, stream: str) -> list[Produced]:
    """Records produced before the cluster starts (request it before ``cluster``).

    By the time the DAG plans they are older than the 10 s the planner looks back to find each shard's
    tip, so planning reads only the few records the test adds last; only the replay reads them all.
    """
    return produce(kinesis, stream, BACKLOG)


def test_a_cycle_replays_on_a_standalone_cluster_to_s3_exactly_once(
    kinesis: Any, entry: dict[str, Any], cluster: Cluster, airflow_db: Path, tmp_path: Path, stack: local_stack.Stack, bucket: str
) -> None:
    """The executors write the batch's files to S3 themselves: with the workers' credentials (their environment here, an
    instance role on a real cluster), at the S3 endpoint the job spec carries from the connection. No environment names
    an S3 endpoint, the workers' included: an executor that did not take the spec's would not reach moto."""
    assert not any(k.startswith("AWS_ENDPOINT_URL_S3") or k == "AWS_ENDPOINT_URL" for k in {**os.environ, **stack.env()})
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
    name, namespace = entry["name"], f"raw_{uuid.uuid4().hex[:8]}"
    pipeline = {
        **entry, "output": f"s3://{bucket}/raw/{name}", "table": glue_table_config(stack.moto_url, namespace),
        "spark": {"master": cluster.master_url, "conf": conf},
    }  # fmt: skip
    dag = load_dags(tmp_path / "cluster.yaml", pipeline)[f"kinesis_replay_{name}"]
    produced = produce(kinesis, pipeline["stream"], 300)

    assert run_dag(dag).tasks == SUCCESS

    result = check_exactly_once(produced, table_rows(glue_table(stack.moto_url, namespace, name)))
    assert result.ok, result
    pages = local_stack.s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"raw/{name}/data/")
    written = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(".parquet")]
    assert written and all(k.split("/")[3] == "batch_id=0000000001" and k.split("/")[4].startswith("attempt=") for k in written), written
    apps = cluster.state()["completedapps"]
    ours = [a for a in apps if a["name"].startswith("kinesis-replay") and pipeline["name"] in a["name"]]
    assert [a["state"] for a in ours] == ["FINISHED"], apps
    work_dir = cluster.workers[0].work_dir
    assert list(work_dir.glob("app-*/*/stderr")), f"no executor ran on the worker (nothing under {work_dir})"


def _descendants(root: int) -> set[int]:
    """Every live process under ``root``, from /proc: a worker's executor JVMs and their Python daemons and workers."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the command name may hold spaces
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def kill_worker(worker: Worker) -> None:
    """SIGKILL a worker with everything it started, as a lost machine would vanish.

    PySpark's daemon puts itself in a process group of its own, so the worker's group is not enough:
    the whole tree is stopped first (a stopped process cannot fork), then killed.
    """
    stopped: set[int] = set()
    while new := ({worker.proc.pid} | _descendants(worker.proc.pid)) - stopped:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    worker.proc.wait(timeout=30)


# kinesis_source's log lines, in each executor's stderr: "<range>: N records read, ..." while reading, "<range>: done, ..." at the end.
_READER_LINE = re.compile(r"^(shardId-\d+ \[[^\]]*\]): (?:(\d+) records read|(done)),", re.MULTILINE)


@dataclass(frozen=True)
class Reads:
    """What one worker's executors have read so far, from their stderr: per executor, ranges begun and ranges done."""

    begun: dict[str, set[str]]
    done: dict[str, set[str]]

    @classmethod
    def of(cls, worker: Worker) -> Reads:
        begun: dict[str, set[str]] = {}
        done: dict[str, set[str]] = {}
        for stderr in worker.work_dir.glob("app-*/*/stderr"):
            executor = stderr.parent.name
            for rng, _, finished in _READER_LINE.findall(stderr.read_text(errors="replace")):
                (done if finished else begun).setdefault(executor, set()).add(rng)
        return cls(begun, done)

    def reading(self) -> dict[str, set[str]]:
        """Per executor, the ranges it has begun and not finished: tasks in progress."""
        reading = {executor: ranges - self.done.get(executor, set()) for executor, ranges in self.begun.items()}
        return {executor: ranges for executor, ranges in reading.items() if ranges}


@dataclass(frozen=True)
class Kill:
    worker: int
    executor: str  # the executor id on the killed worker
    reading: frozenset[str]  # the ranges its tasks were reading when it was killed


def kill_a_worker_mid_read(cluster: Cluster, finished: threading.Event) -> Kill | None:
    """Once every worker's executor is reading a range, kill a worker that has a read in progress.

    Returns None if the job finished first: then no kill happened mid-job, and the test must fail.
    """
    while not finished.wait(0.2):
        reads = [Reads.of(w) for w in cluster.workers]
        if not all(r.begun for r in reads):
            continue  # not every worker has an executor reading yet
        for i, r in enumerate(reads):
            for executor, ranges in r.reading().items():
                kill_worker(cluster.workers[i])
                return Kill(i, executor, frozenset(ranges))
    return None


def spark_events(event_dir: Path) -> list[dict[str, Any]]:
    """The one application's Spark event log (JSON lines, uncompressed)."""
    (log,) = (p for p in event_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("cluster", [2], indirect=True, ids=["two workers"])
def test_a_worker_killed_mid_read_is_survived_through_task_retry_exactly_once(
    kinesis: Any,
    entry: dict[str, Any],
    store: DynamoDBStateStore,
    backlog: list[Produced],
    cluster: Cluster,
    airflow_db: Path,
    tmp_path: Path,
) -> None:
    event_dir = tmp_path / "spark-events"
    event_dir.mkdir()
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.executor.memory": "512m",
        # One 1-core executor on each worker: the killed worker's tasks can only go to the other one.
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.pyspark.python": sys.executable,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        # The event log is the evidence: which task ran where, which was lost with its executor, and its retry.
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_dir.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # one file, not Spark 4's directory of rolled files
    }
    # A slow read budget makes each shard's range last seconds, so a worker can be killed in the middle of one:
    # 5 records a call, 2 calls a second.
    read = {"max_records_per_call": 5, "get_records_per_second": 2, "progress_seconds": 0.5}
    pipeline = {**entry, "spark": {"master": cluster.master_url, "conf": conf}, "read": read}
    dag = load_dags(tmp_path / "cluster.yaml", pipeline)[f"kinesis_replay_{pipeline['name']}"]
    # A few new records for the planner to find the tips by: its window looks back 10 s, and the backlog is older.
    produced = backlog + produce(kinesis, pipeline["stream"], 20, start_index=len(backlog))

    finished = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        killing = pool.submit(kill_a_worker_mid_read, cluster, finished)
        try:
            run = run_dag(dag)
        finally:
            finished.set()
        kill = killing.result()

    assert kill is not None, "the job finished before every worker was reading: no worker was killed mid-job"
    assert run.tasks == SUCCESS, run
    result = check_exactly_once(produced, read_output(pipeline["output"]))
    assert result.ok, result
    ends: dict[str, int] = {}
    for p in produced:
        ends[p.shard_id] = max(ends.get(p.shard_id, 0), int(p.sequence_number))
    assert {sid: s.checkpoint for sid, s in store.get_shards(pipeline["name"]).items()} == ends

    # The kill landed mid-job: tasks running on the killed worker's executor were lost with it, and each
    # was run again, to success, on the surviving worker's executor.
    events = spark_events(event_dir)
    task_ends = [e for e in events if e["Event"] == "SparkListenerTaskEnd"]
    lost = [
        e for e in task_ends
        if e["Task End Reason"]["Reason"] == "ExecutorLostFailure" and e["Task Info"]["Executor ID"] == kill.executor
    ]  # fmt: skip
    assert lost, f"no task was lost with executor {kill.executor}: the worker was killed after its tasks ended ({kill})"
    for e in lost:
        retried_on = [
            t["Task Info"]["Executor ID"] for t in task_ends
            if (t["Stage ID"], t["Task Info"]["Index"]) == (e["Stage ID"], e["Task Info"]["Index"])
            and t["Task End Reason"]["Reason"] == "Success"
        ]  # fmt: skip
        assert retried_on and kill.executor not in retried_on, (e["Task Info"], retried_on)
    removed = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorRemoved"]
    assert kill.executor in removed, removed
    jobs = [e["Job Result"]["Result"] for e in events if e["Event"] == "SparkListenerJobEnd"]
    assert jobs and set(jobs) == {"JobSucceeded"}, jobs
    apps = [a for a in cluster.state()["completedapps"] if pipeline["name"] in a["name"]]
    assert [a["state"] for a in apps] == ["FINISHED"], apps
