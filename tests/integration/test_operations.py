"""Operators' controls through the real DAGs: backfill, dry runs, the stuck-pipeline check, Asset events."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from test_pipeline_dag import rows_of

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters import file_stats, files
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.formats import path_batch_id
from kinesis_replay.core.state import BatchStatus
from stack.harness import (
    SUCCESS,
    TableReader,
    age_batch,
    batch_dirs,
    check_exactly_once,
    check_table_history,
    load_dags,
    output_table,
    read_output,
    run_dag,
)  # fmt: skip
from stack.producer import produce


@pytest.fixture
def dags(tmp_path: Path, airflow_db: Path, entry: dict[str, Any]) -> dict[str, Any]:
    built = load_dags(tmp_path / "pipelines.yaml", entry)
    return {"regular": built[f"kinesis_replay_{entry['name']}"], "backfill": built[f"kinesis_replay_backfill_{entry['name']}"]}


def asset_events(dag_id: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        events = session.scalars(select(AssetEvent).where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.id)).all()
        return [dict(e.extra) for e in events]


def table_files(output: str) -> list[str]:
    """Every file of the table's data, with its size: what a backfill that must write nothing would change."""
    data = Path(output) / "data"
    return sorted(f"{p.relative_to(data)} {p.stat().st_size}" for p in data.rglob("*") if p.is_file())


def live_attempts(output: str, batch_id: int) -> set[str]:
    """The attempts (``data/batch_id=<id>/attempt=<attempt>/``) whose files the table's current snapshot holds for a batch."""
    table = output_table(output)
    assert table is not None
    files = [task.file.file_path for task in table.scan(row_filter=f"batch_id = {batch_id}").plan_files()]
    return {f.split("/attempt=", 1)[1].split("/", 1)[0] for f in files}


def commit_record(output: str, batch_id: int) -> dict[str, Any]:
    """The batch's commit record in the output, as written (the ledger entry under ``batch``)."""
    record = json.loads((Path(output) / "_commits" / f"batch_id={path_batch_id(batch_id)}.json").read_text())
    return dict(record["batch"])


def test_a_backfill_rewrites_batches_identically_and_readers_never_see_one_missing_partial_or_twice(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    produced = produce(kinesis, entry["stream"], 200)
    assert run_dag(dags["regular"]).tasks == SUCCESS  # OpenLineage off, as without a transport: no listener, no event
    lineage_events = request.getfixturevalue("openlineage_events")  # on from here: the second batch and the backfill
    produced += produce(kinesis, entry["stream"], 100, start_index=200)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    first = {b: rows_of(Path(entry["output"]), b) for b in ("1", "2")}
    shards, head = store.get_shards(entry["name"]), store.get_head(entry["name"])
    snapshots = {i: store.get_batch(entry["name"], i).snapshot_id for i in (1, 2)}
    first_attempts = {i: commit_record(entry["output"], i)["manifest"]["attempt"] for i in (1, 2)}
    assert all({first_attempts[i]} == live_attempts(entry["output"], i) for i in (1, 2)), first_attempts

    reader = TableReader(lambda: output_table(entry["output"]), {1: 200, 2: 100})
    reader.start()
    try:
        result = run_dag(dags["backfill"], run_conf={"batches": {"from_batch": 1, "to_batch": 2}})
    finally:
        reader.stop()
    assert result.state == "success" and result.tasks == {"select": "success", "replay": "success", "commit": "skipped"}, result
    assert reader.problems == [] and reader.scans > 10 and len(reader.seen_snapshots) >= 2, (reader.scans, reader.seen_snapshots)
    assert check_table_history(entry["output"]) == []
    replaced = {i: store.get_batch(entry["name"], i).snapshot_id for i in (1, 2)}
    assert all(replaced[i] not in (None, snapshots[i]) for i in (1, 2))  # the ledger keeps each batch's new snapshot
    # The ledger and the commit records name the attempt whose files the current snapshot holds, not the first run's,
    # whose files expiry and orphan removal will delete: a recovery from the commit records rebuilds what the table holds.
    for i in (1, 2):
        live = live_attempts(entry["output"], i)
        ledger, record = store.get_batch(entry["name"], i), commit_record(entry["output"], i)
        assert live != {first_attempts[i]} and len(live) == 1, (live, first_attempts[i])
        assert ledger.result is not None and {ledger.result.attempt} == live, (ledger.result.attempt, live)
        assert {record["manifest"]["attempt"]} == live and record["snapshot_id"] == replaced[i], (record, live)
    assert {b: rows_of(Path(entry["output"]), b) for b in ("1", "2")} == first
    assert batch_dirs(entry["output"]) == ["batch_id=0000000001", "batch_id=0000000002"]
    assert check_exactly_once(produced, read_output(entry["output"])).ok
    assert store.get_shards(entry["name"]) == shards and store.get_head(entry["name"]) == head  # nothing moved

    regular = asset_events(dags["regular"].dag_id)
    assert [(e["kind"], e["batch_id"]) for e in regular] == [("regular", 1), ("regular", 2)]
    assert regular[0]["ranges"] == [r.to_dict() for r in store.get_batch(entry["name"], 1).ranges]
    backfilled = sorted(asset_events(dags["backfill"].dag_id), key=lambda e: e["batch_id"])
    assert [(e["kind"], e["batch_id"]) for e in backfilled] == [("backfill", 1), ("backfill", 2)]
    # A backfill's time is its own replay job's, not its batch's first plan to commit (once reported as it).
    for event in backfilled:
        replay = store.get_batch(entry["name"], event["batch_id"]).result
        assert replay is not None and event["seconds"] == round(replay.seconds, 3), (event["seconds"], replay.seconds)
    check_lineage(lineage_events(), entry, store, {1: snapshots[1], 2: snapshots[2]}, replaced)


def check_lineage(
    events: list[dict[str, Any]], entry: dict[str, Any], store: DynamoDBStateStore, first: dict[int, Any], replaced: dict[int, Any]
) -> None:
    """The OpenLineage events of the commits (docs/lineage.md) against the ledger: batch 2's regular commit, then the
    backfill of batches 1 and 2; none for batch 1's commit, made while OpenLineage was off."""
    commits = [e for e in events if e["eventType"] == "COMPLETE" and "kinesisReplayBatch" in e["run"]["facets"]]
    found = [(e["job"]["name"].rsplit(".", 1)[1], e["run"]["facets"]["kinesisReplayBatch"]["batch_id"]) for e in commits]
    # The regular commit first; then the backfill's two replays, in whichever order its mapped tasks took the pool's slot.
    emitted = [(e["job"]["name"], e["eventType"]) for e in events]
    assert found[:1] + sorted(found[1:]) == [("commit", 2), ("replay", 1), ("replay", 2)], emitted
    (stream,) = {json.dumps(e["inputs"], sort_keys=True) for e in commits}
    assert json.loads(stream) == [{"namespace": "arn:aws:kinesis:us-east-1:000000000000", "name": f"stream/{entry['stream']}",
                                   "facets": {}, "inputFacets": {}}], stream  # fmt: skip
    for event in commits:
        facet = event["run"]["facets"]["kinesisReplayBatch"]
        batch = store.get_batch(entry["name"], facet["batch_id"])
        assert batch.result is not None
        assert facet["_schemaURL"].endswith("KinesisReplayBatchRunFacet.json#/$defs/KinesisReplayBatchRunFacet"), facet
        assert facet["records"] == batch.result.records and facet["pipeline"] == entry["name"]
        assert facet["snapshot_id"] == (batch.snapshot_id if facet["kind"] == "backfill" else first[2]), facet
        # OpenLineage's client leaves nulls out of an event (a first range's previous_checkpoint)
        assert facet["ranges"] == [{k: v for k, v in r.to_dict().items() if v is not None} for r in batch.ranges]
        (output,) = event["outputs"]  # the table, named by its location (the embedded catalog): one dataset throughout
        assert (output["namespace"], output["name"]) == ("file", entry["output"]), output
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == batch.result.records
        assert output["facets"]["version"]["datasetVersion"] == str(facet["snapshot_id"])
        assert output["facets"]["catalog"]["framework"] == "iceberg"
    # A backfill names the same table, with the batch's new snapshot
    assert {c["run"]["facets"]["kinesisReplayBatch"]["batch_id"]: c["run"]["facets"]["kinesisReplayBatch"]["snapshot_id"]
            for c in commits[1:]} == replaced  # fmt: skip


def put_numbers(kinesis: Any, stream: str, count: int, wide: int = 0, start: int = 0) -> list[Any]:
    """``count`` JSON records whose ``n`` is their index from ``start``, the first ``wide`` of them past an INT's range
    (2**40 + i)."""
    from stack.producer import Produced

    records = [{"PartitionKey": f"u{i % 5}", "Data": json.dumps({"n": 2**40 + i if i < wide else i, "user": f"u{i}"}).encode()}
               for i in range(start, start + count)]  # fmt: skip
    answer = kinesis.put_records(StreamName=stream, Records=records)
    assert not answer.get("FailedRecordCount")
    return [
        Produced(r["ShardId"], r["SequenceNumber"], rec["PartitionKey"], rec["Data"])
        for r, rec in zip(answer["Records"], records, strict=True)
    ]


def test_a_redecode_through_the_dag_is_refused_without_asking_then_rescues_the_quarantined_records_then_a_rebuild_switches(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    """Issue 46: a backfill after payload.schema changed is refused before anything is read, naming both decodings;
    with redecode, the widened INT rescues the quarantined records: the table +10, the quarantine table -10, one new
    snapshot of each, the holdings' records equal to Iceberg's total-records, and the ledger names the re-decode."""
    from kinesis_replay.adapters import iceberg_table, quarantine_table
    from kinesis_replay.core.holdings import Holdings

    entry = {**entry, "payload": {"format": "json", "schema": "n INT, user STRING", "max_bad_share": 0.5}}
    built = load_dags(tmp_path / "pipelines.yaml", entry)
    produced = put_numbers(kinesis, entry["stream"], 40, wide=10)
    assert run_dag(built[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    pipeline = parse_config({"pipelines": [entry]})[0]
    table, quarantined = iceberg_table.load_table(pipeline), quarantine_table.load(pipeline)
    assert table is not None and quarantined is not None
    assert (len(read_output(entry["output"])), len(read_output(entry["output"], quarantine=True))) == (30, 10)
    snapshots = (len(table.metadata.snapshots), len(quarantined.metadata.snapshots))
    ledger, head, shards = store.list_batches(entry["name"]), store.get_head(entry["name"]), store.get_shards(entry["name"])

    changed = {**entry, "payload": {**entry["payload"], "schema": "n BIGINT, user STRING"}}
    backfill = load_dags(tmp_path / "changed.yaml", changed)[f"kinesis_replay_backfill_{entry['name']}"]
    refused = run_dag(backfill, run_conf={"batches": {"batch_ids": [1]}})
    assert refused.state == "failed" and refused.tasks["select"] == "failed", refused
    assert store.list_batches(entry["name"]) == ledger  # nothing was read, staged or committed

    result = run_dag(backfill, run_conf={"batches": {"batch_ids": [1]}, "redecode": True})

    assert result.state == "success" and result.tasks == {"select": "success", "replay": "success", "commit": "success"}, result
    rows, bad = read_output(entry["output"]), read_output(entry["output"], quarantine=True)
    assert (len(rows), len(bad)) == (40, 0) and sorted(rows.column("n").to_pylist()) == sorted(
        [*range(10, 40), *(2**40 + i for i in range(10))]
    )
    assert check_exactly_once(produced, rows).ok
    table, quarantined = iceberg_table.load_table(pipeline), quarantine_table.load(pipeline)
    assert table is not None and quarantined is not None and table.current_snapshot() is not None
    assert (len(table.metadata.snapshots), len(quarantined.metadata.snapshots)) == (snapshots[0] + 1, snapshots[1] + 1)
    summary = table.current_snapshot().summary.additional_properties
    # One re-decode made visible: counted in the snapshot's summary and on the ledger's head (a rollback past it shows).
    assert Holdings.from_summary(summary) == Holdings.of([1], 40, 1) and summary["total-records"] == "40"
    batch = store.get_batch(entry["name"], 1)
    assert batch.redecoded_by is not None and batch.staged is None and batch.snapshot_id == table.current_snapshot().snapshot_id
    assert batch.quarantine_snapshot_id == quarantined.current_snapshot().snapshot_id
    # The replay's check kept the statistics of the files Spark's tasks wrote beside them (its sidecar), for every file
    # the commit made the batch's, and they are the statistics the files' footers give.
    attempt = batch.verified_result().attempt or ""
    kept = file_stats.from_json(files.read_json(file_stats.sidecar_path(entry["output"], 1, attempt)))
    held = iceberg_table.batch_data_files(table, 1)
    assert held and {f.file_path for f in held} <= set(kept)
    footers = iceberg_table.read_footers(table.io, [f.file_path for f in held])
    fields = ("record_count", "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts", "lower_bounds", "upper_bounds")
    assert [[getattr(f, n) for n in fields] for f in held] == [
        [getattr(f, n) for n in fields] for f in iceberg_table.data_files(table.io, table.metadata, footers)
    ]
    assert commit_record(entry["output"], 1)["redecoded_by"] == batch.redecoded_by
    assert store.get_head(entry["name"]) == dataclasses.replace(head, redecodes=1)  # no batch planned, no checkpoint moved
    assert store.get_shards(entry["name"]) == shards
    # The replay's event says the batch is staged, with the re-decode's figures and no snapshot (nothing visible yet); the
    # commit's names the snapshot that made it visible.
    staged, committed = asset_events(backfill.dag_id)[-2:]
    assert (staged["kind"], staged["records"], staged["bad_records"], staged["snapshot_id"]) == ("staged", 40, 0, None)
    assert committed["kind"] == "redecode" and committed["batches"][0]["snapshot_id"] == batch.snapshot_id

    # Issue 46, point 6, through Airflow and Spark: BIGINT to STRING is no change Iceberg makes in place. A rebuild with
    # payload.next_schema decodes batch 1 anew and switches the table; the next regular run decodes with it unasked.
    nexted = {**changed, "payload": {**changed["payload"], "next_schema": "n STRING, user STRING"}}
    built = load_dags(tmp_path / "next.yaml", nexted)
    rebuilt = run_dag(built[f"kinesis_replay_backfill_{entry['name']}"], run_conf={"batches": {"batch_ids": [1]}, "rebuild": True})
    assert rebuilt.state == "success" and rebuilt.tasks == {"select": "success", "replay": "success", "commit": "success"}, rebuilt
    table = iceberg_table.load_table(pipeline)
    assert table is not None and str(table.schema().find_field("n").field_type) == "string"
    assert table.current_snapshot().summary.additional_properties["kinesis-replay.rebuild"]  # type: ignore[union-attr]
    switched = Holdings.from_summary(table.current_snapshot().summary.additional_properties)  # type: ignore[union-attr]
    assert switched is not None and switched.redecodes == 2 == store.get_head(entry["name"]).redecodes
    more = put_numbers(kinesis, entry["stream"], 20, start=100)
    assert run_dag(built[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    rows = read_output(entry["output"])
    assert rows.num_rows == 60 and check_exactly_once([*produced, *more], rows).ok
    assert sorted(rows.column("n").to_pylist()) == sorted(
        [*map(str, range(10, 40)), *(str(2**40 + i) for i in range(10)), *map(str, range(100, 120))]
    )
    assert store.get_batch(entry["name"], 2).verified_result().decoding.schema == "n STRING, user STRING"


def test_a_backfill_restores_a_lost_partition_of_a_directory_output_and_moves_no_checkpoint(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    """A directory output has no table to guard its files: an operator may delete a batch's partition by mistake."""
    entry = {**entry, "output_format": "directory"}
    built = load_dags(tmp_path / "pipelines.yaml", entry)
    produced = produce(kinesis, entry["stream"], 120)
    assert run_dag(built[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    first = rows_of(Path(entry["output"]), "1")
    shards, head = store.get_shards(entry["name"]), store.get_head(entry["name"])
    shutil.rmtree(Path(entry["output"]) / "batch_id=0000000001")  # the lost partition
    assert read_output(entry["output"]).num_rows == 0

    result = run_dag(built[f"kinesis_replay_backfill_{entry['name']}"], run_conf={"batches": {"batch_ids": [1]}})

    assert result.state == "success" and result.tasks == {"select": "success", "replay": "success", "commit": "skipped"}, result
    assert rows_of(Path(entry["output"]), "1") == first and batch_dirs(entry["output"]) == ["batch_id=0000000001"]
    assert check_exactly_once(produced, read_output(entry["output"])).ok
    assert store.get_shards(entry["name"]) == shards and store.get_head(entry["name"]) == head  # nothing moved


def test_a_backfill_of_a_directory_output_whose_schema_changed_is_refused_and_changes_nothing_readers_see(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    """Issue 44, case 4, and issue 46, point 1: a payload.schema changed since the batch's first run is refused, the
    folder kept whole. The batch records its decoding, so the refusal comes at select, before anything is read or
    staged; a batch of a release that recorded none is compared value by value on its staged attempt instead
    (tests/unit/test_backfill_decoded.py)."""
    entry = {**entry, "output_format": "directory", "payload": {"format": "json", "schema": "index INT, user STRING"}}
    built = load_dags(tmp_path / "pipelines.yaml", entry)
    produced = produce(kinesis, entry["stream"], 40)
    assert run_dag(built[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    folder = Path(entry["output"]) / "batch_id=0000000001"
    held = {p.name: p.read_bytes() for p in folder.iterdir()}
    ledger, head = store.list_batches(entry["name"]), store.get_head(entry["name"])
    indexes = sorted(read_output(entry["output"]).column("index").to_pylist())
    assert indexes == list(range(40))

    changed = {**entry, "payload": {"format": "json", "schema": "index STRING, user STRING"}}
    backfill = load_dags(tmp_path / "changed.yaml", changed)[f"kinesis_replay_backfill_{entry['name']}"]
    result = run_dag(backfill, run_conf={"batches": {"batch_ids": [1]}})

    assert result.state == "failed" and result.tasks["select"] == "failed" and result.tasks["replay"] != "success", result
    assert not [p for p in (Path(entry["output"]) / "_staging").rglob("*") if p.is_file()]  # nothing was read or staged
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == held  # readers see the first run's files, all of them
    assert sorted(read_output(entry["output"]).column("index").to_pylist()) == indexes
    assert check_exactly_once(produced, read_output(entry["output"])).ok
    assert store.list_batches(entry["name"]) == ledger and store.get_head(entry["name"]) == head


@pytest.mark.parametrize(
    "conf",
    [
        {"batches": {"from_batch": 1}},
        {"batches": {"batch_ids": [1], "from_batch": 1, "to_batch": 2}},
        {"batches": {"batch_ids": []}},
        {"batches": {"batch_ids": list(range(1, 102))}},  # more than MAX_BATCHES_PER_RUN
        {"batches": {"from_batch": 1, "to_batch": 10_000_000_000}},  # an id past the 10 digits of the paths
        {"batches": {"start_time": "2026-11-01T00:00:00." + "0" * 1_000_000 + "Z", "end_time": "2026-11-01T01:00:00Z"}},  # 1 MB
    ],
)
def test_invalid_backfill_parameters_create_no_run(dags: dict[str, Any], conf: dict[str, Any]) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with pytest.raises(ParamValidationError):
        dags["backfill"].test(run_conf=conf)
    with create_session() as session:
        assert session.scalar(select(func.count()).select_from(DagRun).where(DagRun.dag_id == dags["backfill"].dag_id)) == 0


def test_a_backfill_that_names_no_batch_and_no_restore_fails_at_once_saying_what_to_give(
    store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any]
) -> None:
    """batches may be left empty since the restore needs none: a run that gives neither fails in its first task."""
    (p,) = parse_config({"pipelines": [entry]})
    result = run_dag(dags["backfill"], run_conf={})
    assert result.state == "failed" and result.tasks == {"select": "failed", "replay": "upstream_failed", "commit": "upstream_failed"}, (
        result
    )
    with pytest.raises(AirflowFailException, match=r'name the batches to replay .* or restore the table \(\{"restore_table": true\}\)'):
        tasks.select_backfill(p, {"batches": None, "dry_run": False, "restore_table": False})
    assert store.list_batches(entry["name"]) == [] and not Path(entry["output"]).exists()


def test_dry_runs_write_and_read_nothing_and_a_backfill_is_refused_past_retention_or_while_a_batch_is_in_flight(
    kinesis: Any,
    dynamodb: Any,
    store: DynamoDBStateStore,
    entry: dict[str, Any],
    dags: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """One committed batch, and what operators may ask of it that must change nothing. The refusals' logic (and their
    messages) is tests/unit/test_backfill_steps.py's, on the fakes; here, that each reaches Airflow as a failed task."""
    produce(kinesis, entry["stream"], 120)
    dry = run_dag(dags["regular"], run_conf={"dry_run": True})
    assert dry.tasks["plan"] == "skipped" and dry.tasks["replay"] == "skipped"
    assert store.list_batches(entry["name"]) == [] and store.get_shards(entry["name"]) == {}
    assert not Path(entry["output"]).exists()
    # A first plan reads no range, and knows no shard's rate yet: what it would read is known only once read.
    assert "would plan batch 1 (PLANNED), 4 shard ranges" in caplog.text and "records and bytes: unknown until read" in caplog.text

    # Airflow 3.3.2 runs dag.test() tasks in this process, and its process_params() sets a run's conf on
    # the DAG's own Param objects: a later run of the same DAG object would inherit dry_run. Build it anew.
    fresh = load_dags(tmp_path / "again.yaml", entry)
    assert run_dag(fresh[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    caplog.clear()
    listing, ledger = table_files(entry["output"]), store.list_batches(entry["name"])
    dry = run_dag(dags["backfill"], run_conf={"batches": {"batch_ids": [1]}, "dry_run": True})
    assert dry.tasks == {"select": "skipped", "replay": "skipped", "commit": "skipped"}
    assert table_files(entry["output"]) == listing
    assert "would replay batch 1 (COMMITTED)" in caplog.text and "by GetRecords: " in caplog.text and "over enhanced fan-out" in caplog.text

    # A backfill of records past the stream's retention: refused before reading.
    age_batch(dynamodb, store.table, entry["name"], 1, timedelta(hours=30))  # batch 1's records are past 24h retention
    capfd.readouterr()
    backfill = fresh[f"kinesis_replay_backfill_{entry['name']}"]  # not the DAG object the dry run's conf was given to
    result = run_dag(backfill, run_conf={"batches": {"batch_ids": [1]}})
    assert result.tasks == {"select": "failed", "replay": "upstream_failed", "commit": "upstream_failed"}
    logged = "".join(capfd.readouterr())  # the task's error, as Airflow logged it
    assert "batch 1, range shardId-" in logged and "more than the stream's retention of 24h" in logged
    assert table_files(entry["output"]) == listing  # untouched

    # A backfill while a regular batch is in flight: refused.
    produce(kinesis, entry["stream"], 50, start_index=120)
    assert run_dag(fresh[f"kinesis_replay_{entry['name']}"].partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
    capfd.readouterr()
    result = run_dag(backfill, run_conf={"batches": {"batch_ids": [1]}})
    assert result.tasks["select"] == "failed" and result.tasks["replay"] == "upstream_failed"
    assert "regular batch 2 is in flight; a backfill waits until it is committed" in "".join(capfd.readouterr())
    assert table_files(entry["output"]) == listing
    assert [(b.batch_id, b.status) for b in store.list_batches(entry["name"])] == [(1, ledger[0].status), (2, BatchStatus.PLANNED)]


def test_the_check_fails_when_a_record_waits_too_long(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    dag = load_dags(tmp_path / "stuck.yaml", {**entry, "max_checkpoint_age_minutes": 30})[f"kinesis_replay_{entry['name']}"]
    produce(kinesis, entry["stream"], 20)
    assert run_dag(dag.partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
    age_batch(dynamodb, store.table, entry["name"], 1, timedelta(minutes=45))  # it waited in flight that long
    assert run_dag(dag.partial_subset(task_ids=["check"], include_upstream=False)).tasks == {"check": "failed"}
    assert run_dag(dag).tasks == SUCCESS  # committed: nothing waits any more
