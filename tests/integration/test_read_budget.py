"""A backfill of many batches keeps within the stream's read budget: under Airflow's own scheduler, its replays take
the pipeline's one pool slot in turn, and a missing pool is named, with the command that creates it.

dag.test() cannot show either: it runs mapped tasks one after another in its own process and ignores pools, even
one that does not exist. So the backfill runs here as users run it, triggered over the REST API and scheduled by
`airflow scheduler` with the LocalExecutor, whose workers reach the api-server's execution API.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_dag import rows_of
from test_ui import login

from kinesis_replay.dynamodb_store import DynamoDBStateStore
from stack.harness import SUCCESS, check_exactly_once, load_dags, read_output, run_dag
from stack.local_stack import free_port, wait_for_http
from stack.producer import produce

BATCHES = 3  # enough for a backfill that, without the pool, runs its replays all at once


@dataclass(frozen=True)
class Services:
    base: str
    logs: Path
    procs: tuple[subprocess.Popen[bytes], ...]

    def ready(self) -> None:
        wait_for_http(f"{self.base}/api/v2/monitor/health", 120, "Airflow's api-server", self.procs[0], self.logs / "api-server.log")

    @property
    def scheduler_log(self) -> str:
        return (self.logs / "scheduler.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def served_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipelines config that the scheduler's workers and the api-server read."""
    return tmp_path_factory.mktemp("budget") / "pipelines.yaml"


@pytest.fixture(scope="module")
def services(stack: object, airflow_db: Path, served_config: Path) -> Iterator[Services]:
    """Airflow's api-server and scheduler (LocalExecutor, 4 task slots) on the session's database; started here and
    waited for only when the test needs them, so that they start while the regular runs build the batches.

    No DAG processor: dag.test() writes the DAGs of the served config to the database. The scheduler leaves alone
    the runs of paused DAGs, so it never touches the regular runs that dag.test() drives; only the backfill DAG
    is unpaused.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KINESIS_REPLAY_CONFIG": str(served_config),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    logs = served_config.parent
    commands = {"api-server": ["airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"], "scheduler": ["airflow", "scheduler"]}
    procs = tuple(
        subprocess.Popen(command, env=env, stdout=(logs / f"{name}.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        for name, command in commands.items()
    )
    try:
        yield Services(base, logs, procs)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def request(url: str, headers: dict[str, str], data: dict[str, Any] | None = None, method: str | None = None) -> tuple[int, bytes]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, method=method, headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 300) -> Any:
    """Poll until ``condition`` returns something true; the timeout only ends a test that would hang."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(1)
    return found


def replay_instances(dag_id: str, run_id: str) -> list[Any]:
    """The backfill run's replay task instances, as the scheduler recorded them in Airflow's metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == "replay")
        instances = list(session.scalars(query))
        session.expunge_all()
    return instances


def overlapping(instances: list[Any]) -> list[tuple[int, int]]:
    """The pairs of task instances (by map index) that ran at the same time."""
    spans = sorted((ti.start_date, ti.end_date, ti.map_index) for ti in instances)
    return [(a[2], b[2]) for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1]]


def test_a_backfill_replays_its_batches_one_at_a_time_and_names_a_missing_pool(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], served_config: Path, services: Services, airflow_db: Path
) -> None:
    dags = load_dags(served_config, entry)
    regular, backfill = dags[f"kinesis_replay_{entry['name']}"], dags[f"kinesis_replay_backfill_{entry['name']}"]
    produced = []
    for cycle in range(BATCHES):
        produced += produce(kinesis, entry["stream"], 100, start_index=100 * cycle)
        assert run_dag(regular).tasks == SUCCESS  # dag.test() ignores pools: the regular runs need none here
    output = Path(entry["output"])
    ids = [str(i) for i in range(1, BATCHES + 1)]
    first = {b: rows_of(output, b) for b in ids}
    shards, head = store.get_shards(entry["name"]), store.get_head(entry["name"])

    services.ready()
    auth = {"Authorization": f"Bearer {login(services.base, airflow_db)}"}
    status, body = request(f"{services.base}/api/v2/dags/{backfill.dag_id}", auth, {"is_paused": False}, method="PATCH")
    assert status == 200, body
    conf = {"batches": {"from_batch": 1, "to_batch": BATCHES}}
    status, body = request(f"{services.base}/api/v2/dags/{backfill.dag_id}/dagRuns", auth, {"logical_date": None, "conf": conf})
    assert status == 200, body
    run_id = json.loads(body)["dag_run_id"]

    # No pool yet: the chosen batches wait, and only the scheduler's log says why...
    pool = f"kinesis_replay_{entry['name']}"
    wait_until(
        lambda: f"Tasks using non-existent pool '{pool}' will not be scheduled" in services.scheduler_log, "the scheduler to find no pool"
    )
    waiting = replay_instances(backfill.dag_id, run_id)
    assert len(waiting) == BATCHES and {(ti.state, ti.start_date) for ti in waiting} == {("scheduled", None)}
    # ... and the Kinesis replay page, which names the pool and the command that creates it.
    status, body = request(f"{services.base}/kinesis-replay/api/pipelines", auth)
    (view,) = json.loads(body)
    assert view["pool"] == pool and f"Airflow pool '{pool}' does not exist" in view["pool_error"]
    status, body = request(f"{services.base}/kinesis-replay/", {**auth, "Accept": "text/html"})
    assert status == 200 and f"Airflow pool &#x27;{pool}&#x27; does not exist" in body.decode()
    command = re.search(r"Create it: (.*)$", view["pool_error"])
    assert command is not None and command[1].startswith(f"airflow pools set {pool} 1 ")
    subprocess.run(["bash", "-c", command[1]], env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
                   check=True, capture_output=True)  # fmt: skip

    def finished() -> str | None:
        _, body = request(f"{services.base}/api/v2/dags/{backfill.dag_id}/dagRuns/{run_id}", auth)
        state = json.loads(body)["state"]
        return state if state in ("success", "failed") else None

    assert wait_until(finished, "the backfill run") == "success", services.scheduler_log[-3000:]
    replays = replay_instances(backfill.dag_id, run_id)
    assert sorted((ti.map_index, ti.state, ti.pool) for ti in replays) == [(i, "success", pool) for i in range(BATCHES)]
    assert overlapping(replays) == []  # the pool's one slot: each replay started after the one before had ended

    assert {b: rows_of(output, b) for b in ids} == first
    assert check_exactly_once(produced, read_output(output)).ok
    assert store.get_shards(entry["name"]) == shards and store.get_head(entry["name"]) == head  # nothing moved
    status, body = request(f"{services.base}/kinesis-replay/api/pipelines", auth)
    assert [v["pool_error"] for v in json.loads(body)] == [None]
