"""Drive the real DAGs and check their output independently: shared by the integration tests and `make demo`."""

from __future__ import annotations

import copy
import json
import os
import runpy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stack.local_stack import LOCAL_KEY, REGION

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "dags" / "kinesis_replay_dags.py"
# The job's own defaults for local masters apply (no web UI, C1 only, and the class-data-sharing archive).
TEST_SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}
# Every task of a regular run that planned, replayed, verified and committed a batch that reached the tip
# (an uncapped batch: plan_next, which queues the next run at once after a capped batch, is skipped).
SUCCESS = {
    "plan": "success", "replay": "success", "verify": "success", "commit": "success", "check": "success",
    "catch_up": "success", "plan_next": "skipped",
}  # fmt: skip


def pipeline_entry(name: str, stream: str, output: Path | str, state_table: str, **overrides: Any) -> dict[str, Any]:
    """One pipelines-config entry for the local stack: manual schedule, local Spark, no task retries."""
    entry: dict[str, Any] = {
        "name": name,
        "stream": stream,
        "output": str(output),
        "schedule": None,
        "initial_position": "TRIM_HORIZON",
        "state_table": state_table,
        "retries": 0,
        "spark": {"master": "local[2]", "conf": dict(TEST_SPARK_CONF)},
    }
    entry.update(overrides)
    return entry


def load_dags(config_path: Path, *entries: Mapping[str, Any]) -> dict[str, Any]:
    """Write a pipelines config and build its DAGs with the real factory, as Airflow's DAG processor does."""
    from airflow.sdk import DAG

    config_path.write_text(yaml.safe_dump({"pipelines": [dict(e) for e in entries]}))
    os.environ["KINESIS_REPLAY_CONFIG"] = str(config_path)
    namespace = runpy.run_path(str(DAG_FILE))
    return {dag.dag_id: dag for dag in namespace.values() if isinstance(dag, DAG)}


@dataclass(frozen=True)
class RunResult:
    state: str
    tasks: dict[str, str]
    run_id: str

    @property
    def skipped(self) -> bool:
        """The run found nothing to do: its plan, and all that needs a batch, were skipped (check still runs)."""
        return all(s == "skipped" for t, s in self.tasks.items() if t != "check")


# dag.test() sleeps a second on each pass of its loop that finds no task to run. A run whose plan is skipped or fails
# makes one such pass per level of tasks below it (a skip or an upstream failure spreads a level a pass), and nothing
# outside this process changes a dag.test() run's tasks (no executor, no triggerer): the next pass needs no wait. A
# task up for retry still waits its retry delay, only in shorter steps. Only dag.test()'s own calls are shortened.
DAG_TEST_PASS_SECONDS = 0.05


def _shorten_dag_test_passes() -> None:
    import sys
    import time

    from airflow.sdk import DAG

    if getattr(time.sleep, "dag_test_passes", False):
        return
    loop, sleep = DAG.test.__code__, time.sleep

    def shortened(seconds: float) -> None:
        sleep(min(seconds, DAG_TEST_PASS_SECONDS) if sys._getframe(1).f_code is loop else seconds)

    shortened.dag_test_passes = True  # type: ignore[attr-defined]
    time.sleep = shortened


def run_dag(dag: Any, **kwargs: Any) -> RunResult:
    """One DAG run with dag.test(): tasks run in this process, against the real endpoints and local Spark.

    dag.test() merges the run's conf into each task's params in place, so a later run of the same DAG object would
    see them as its own (an acknowledge_data_loss given once would hold for every run after). The scheduler's runs
    load the DAG anew for each task: each run here starts from the params the DAG was built with, as they do.
    """
    built = {task_id: copy.deepcopy(task.params) for task_id, task in dag.task_dict.items()}
    _shorten_dag_test_passes()
    try:
        run = dag.test(**kwargs)
    finally:
        for task_id, params in built.items():
            dag.task_dict[task_id].params = params
    tasks = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    return RunResult(state=str(run.state), tasks=tasks, run_id=run.run_id)


def queued_runs(dag_id: str) -> list[Any]:
    """The DAG's runs that wait in the queue (created by a trigger, not yet started), oldest first."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.state == DagRunState.QUEUED).order_by(DagRun.id))
        return [(run.run_id, run.logical_date, run.conf, str(run.triggered_by)) for run in runs]


def run_queued(dag: Any, limit: int = 20) -> list[RunResult]:
    """What the scheduler does with runs a DAG queued for itself (max_active_runs=1): start each as the last ends.

    dag.test() runs one run in this process; given a queued run's logical date, it replaces that run with its own.
    """
    results: list[RunResult] = []
    while queued := queued_runs(dag.dag_id):
        if len(results) >= limit:
            raise AssertionError(f"{dag.dag_id} queued more than {limit} runs: {queued}")
        _, logical_date, conf, _ = queued[0]
        results.append(run_dag(dag, logical_date=logical_date, run_conf=conf))
    return results


def scheduler_asset_pass() -> None:
    """What the scheduler does on every loop and dag.test() never does: orphan the assets no DAG references, activate the rest.

    An Asset keeps its name when a pipeline's output moves, and Airflow activates a new URI under an active name only
    in this pass; until it runs, a task with the moved Asset as its outlet is refused as having an inactive asset.
    """
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    runner = SchedulerJobRunner.__new__(SchedulerJobRunner)  # the pass reads nothing of a running job
    with create_session() as session:
        runner._update_asset_orphanage(session=session)


def age_batch(dynamodb: Any, table: str, pipeline_name: str, batch_id: int, waited: Any) -> None:
    """Make a stored batch look as if it had waited in flight for ``waited``: its ranges' starts arrived that long ago.

    Test setup for what only time can do here: kinesalite keeps no records old enough to test retention or age.
    """
    import json
    from datetime import UTC, datetime

    from kinesis_replay.adapters.dynamodb_items import batch_sk, pk
    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore

    batch = DynamoDBStateStore(dynamodb, table).get_batch(pipeline_name, batch_id)
    aged = [{**r.to_dict(), "start_arrival": (datetime.now(UTC) - waited).isoformat()} for r in batch.ranges]
    dynamodb.update_item(
        TableName=table, Key={"pk": {"S": pk(pipeline_name)}, "sk": {"S": batch_sk(batch_id)}},
        UpdateExpression="SET #ranges = :ranges", ExpressionAttributeNames={"#ranges": "ranges"},
        ExpressionAttributeValues={":ranges": {"S": json.dumps(aged)}},
    )  # fmt: skip


def output_table(output: Path | str, quarantine: bool = False) -> Any | None:
    """The Iceberg table of an output on the embedded catalog, loaded with pyiceberg itself (not project code); None without one.
    ``quarantine``: the output's quarantine table instead, at ``<output>/quarantine``.

    The embedded catalog is pyiceberg's SQL catalog on ``<output>/_catalog/catalog.db``, holding the output's table and,
    once a record was quarantined, its quarantine table; each is told by its location (one whose metadata is gone, by
    its default name).
    """
    db = Path(output) / "_catalog" / "catalog.db"
    if not db.exists():
        return None
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("kinesis_replay", uri=f"sqlite:///{db}", warehouse=f"file://{db.parent}")
    where = f"file://{Path(output)}" + ("/quarantine" if quarantine else "")
    identifiers = [t for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)]
    found = []
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
        except FileNotFoundError:  # its metadata is gone (the fault schedules' lose_metadata): only its name says which
            if identifier[-1].endswith("_quarantine") == quarantine:
                raise
            continue
        if table.location().rstrip("/") == where:
            found.append(table)
    assert len(found) <= 1 and len(identifiers) <= 2, f"{db} holds more tables than an output's two: {identifiers}"
    return found[0] if found else None


def is_table_output(output: Path | str) -> bool:
    return any((Path(output) / d).exists() for d in ("_catalog", "metadata", "data"))


EMPTY_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number", "partition_key", "approximate_arrival_timestamp", "data", "batch_id")


def read_output(output: Path | str, quarantine: bool = False, snapshot_id: int | None = None) -> Any:
    """Every row the output holds, read with pyiceberg and pyarrow (not with project code).

    A table output: the rows of the table's current snapshot (or of ``snapshot_id``), as a reader of the table sees
    them. A directory output: every row under the root, batch_id from the path. ``quarantine``: the undecodable rows.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    if not quarantine and is_table_output(output):
        return table_rows(output_table(output), snapshot_id)
    root = Path(output) / "_quarantine" if quarantine else Path(output)
    folders = ds.dataset(str(root), format="parquet", partitioning="hive").to_table() if root.exists() else None
    if quarantine and is_table_output(output):  # the quarantine table, and the folders of a release before it
        held = table_rows(output_table(output, quarantine=True))
        return (
            held
            if folders is None
            else pa.concat_tables(
                [held, folders.select([c for c in folders.column_names if c in held.column_names])], promote_options="default"
            )
        )
    return folders if folders is not None else pa.table({c: [] for c in EMPTY_COLUMNS})


def table_rows(table: Any | None, snapshot_id: int | None = None) -> Any:
    """The rows of a table's current snapshot (or of ``snapshot_id``), read with pyiceberg; none without a table or snapshot."""
    import pyarrow as pa

    if table is None or table.current_snapshot() is None:
        return pa.table({c: [] for c in EMPTY_COLUMNS})
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def glue_table_config(moto_url: str, namespace: str) -> dict[str, Any]:
    """A pipeline's ``table`` entry for the Glue catalog on the moto server: the catalog an ``s3://`` output needs."""
    properties = {"type": "glue", "glue.endpoint": moto_url, "glue.region": REGION}
    return {"catalog": "glue", "namespace": namespace, "catalog_properties": properties}


def glue_table(moto_url: str, namespace: str, name: str) -> Any | None:
    """The table as a reader of its own loads it (not project code): Glue for the table, S3's endpoint and keys for its
    files, as a user's query engine is set up. None while Glue has no such table."""
    from pyiceberg.catalog.glue import GlueCatalog
    from pyiceberg.exceptions import NoSuchTableError

    s3 = {"s3.endpoint": moto_url, "s3.region": REGION, "s3.access-key-id": LOCAL_KEY, "s3.secret-access-key": LOCAL_KEY}
    catalog = GlueCatalog("reader", **{"glue.endpoint": moto_url, "glue.region": REGION}, **s3)
    try:
        return catalog.load_table(f"{namespace}.{name}")
    except NoSuchTableError:
        return None


def batch_dirs(output: Path | str) -> list[str]:
    """The batches the output holds, as their partitions (``batch_id=0000000001``).

    A table output: the batches of the table's current snapshot. A directory output: the partition directories
    under the root (Spark's file names differ per run; these must not).
    """
    from kinesis_replay.core.formats import path_batch_id

    if is_table_output(output):
        rows = read_output(output)
        return sorted({f"batch_id={path_batch_id(b)}" for b in rows.column("batch_id").to_pylist()})
    return sorted(p.name for p in Path(output).iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def check_table_history(output: Path | str) -> list[str]:
    """Every snapshot in the table's history holds each batch wholly or not at all, and never twice (``table_history``)."""
    return table_history(output_table(output))


def table_history(table: Any | None) -> list[str]:
    """Every snapshot in the table's history holds each batch wholly or not at all, and never twice.

    Wholly: a batch's rows in any snapshot are the rows it holds now (a batch's rows are deterministic, whichever
    attempt wrote them). Never twice: no (shard, sequence number, sub-sequence number) repeats in a snapshot.
    """
    if table is None or table.current_snapshot() is None:
        return []
    current = _keys_by_batch(table.scan().to_arrow())
    problems = []
    for snapshot in table.metadata.snapshots:
        held = _keys_by_batch(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow())
        for batch_id, keys in sorted(held.items()):
            if len(keys) != len(set(keys)):
                problems.append(f"snapshot {snapshot.snapshot_id}: batch {batch_id} holds {len(keys) - len(set(keys))} rows twice")
            elif batch_id in current and set(keys) != set(current[batch_id]):
                problems.append(f"snapshot {snapshot.snapshot_id}: batch {batch_id} holds {len(keys)} rows, {len(current[batch_id])} now")
    return problems


def _keys_by_batch(rows: Any) -> dict[int, list[tuple[Any, ...]]]:
    found: dict[int, list[tuple[Any, ...]]] = {}
    columns = [rows.column(c).to_pylist() for c in ("batch_id", "shard_id", "sequence_number", "sub_sequence_number")]
    for batch_id, *key in zip(*columns, strict=True):
        found.setdefault(batch_id, []).append(tuple(key))
    return found


@dataclass(frozen=True)
class ExactlyOnce:
    expected: int
    rows: int
    lost: int
    duplicated: int
    unexpected: int
    payload_mismatches: int

    @property
    def ok(self) -> bool:
        return self.rows == self.expected and not (self.lost or self.duplicated or self.unexpected or self.payload_mismatches)

    def __str__(self) -> str:
        return (
            f"expected {self.expected}, rows {self.rows}: lost {self.lost}, duplicated {self.duplicated}, "
            f"unexpected {self.unexpected}, payload mismatches {self.payload_mismatches}"
        )


def check_exactly_once(produced: Iterable[Any], table: Any) -> ExactlyOnce:
    """Compare what Kinesis acknowledged (shard, sequence number, payload) with the output rows."""
    expected = {(p.shard_id, p.sequence_number, p.sub_sequence_number): p.data for p in produced}
    keys = list(
        zip(
            table.column("shard_id").to_pylist(),
            table.column("sequence_number").to_pylist(),
            table.column("sub_sequence_number").to_pylist(),
            strict=True,
        )
    )
    counts = Counter(keys)
    data = dict(zip(keys, table.column("data").to_pylist(), strict=True))
    return ExactlyOnce(
        expected=len(expected),
        rows=len(keys),
        lost=sum(1 for k in expected if k not in counts),
        duplicated=sum(c - 1 for c in counts.values() if c > 1),
        unexpected=sum(1 for k in counts if k not in expected),
        payload_mismatches=sum(1 for k, v in expected.items() if k in data and data[k] != v),
    )


class TableReader(threading.Thread):
    """A reader of the table that scans it in a loop, as a query engine would, and notes every scan that is not whole."""

    def __init__(self, load: Callable[[], Any], expected: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.load, self.expected = load, expected  # load: the table as a reader loads it (through its catalog), or None
        self.scans, self.seen_snapshots, self.problems = 0, set(), []  # type: ignore[var-annotated]
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(0.2):  # a reader polling the table; it shares the two cores with the backfill
            try:
                self.scan()
            except Exception as exc:  # a scan that fails is a reader that could not read the table: note it
                self.problems.append(f"scan failed: {exc!r}")

    def scan(self) -> None:
        table = self.load()
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None:
            self.problems.append("no table, or no snapshot")
            return
        rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        columns = ("batch_id", "shard_id", "sequence_number", "sub_sequence_number")
        keys = list(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))
        found = dict(Counter(k[0] for k in keys))
        if found != self.expected or len(set(keys)) != len(keys):
            self.problems.append(f"snapshot {snapshot.snapshot_id}: rows per batch {found}, {len(keys) - len(set(keys))} twice")
        self.scans += 1
        self.seen_snapshots.add(snapshot.snapshot_id)

    def stop(self) -> None:
        self._halt.set()
        self.join()


REQUEST_SECONDS = 90  # how long a REST call may wait for Airflow's answer


def request_json(url: str, data: dict[str, Any] | None = None, method: str | None = None, token: str = "") -> tuple[int, Any]:
    """An HTTP request with a JSON body (and a bearer token), as Airflow's REST API takes one: the status and the body,
    parsed as JSON where it is JSON. An HTTP error is an answer too, not an exception."""
    import urllib.error
    import urllib.request

    body = json.dumps(data).encode() if data is not None else None
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        # A slow answer is no failure of what a test checks: under the whole suite's load (two workers, each with Spark
        # jobs and the upgrade suite's earlier release running) Airflow's api-server once took over 30 s to answer.
        with urllib.request.urlopen(req, timeout=REQUEST_SECONDS) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")
