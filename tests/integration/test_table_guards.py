"""The table guards itself against Iceberg's own tools: a rollback, a drop, lost metadata, rows deleted by another writer.

Each mistake once lost committed batches while every run exited 0. Now each is refused before anything moves, the
ledger and the table are checked afterwards, and the one documented way back (the backfill DAG's restore, dry run
first) brings back exactly the committed batches the table lacks; the pipeline then goes on, every record once.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.iceberg_table import CATALOG_DIR
from kinesis_replay.core.config import parse_config
from stack.harness import SUCCESS, age_batch, check_exactly_once, check_table_history, load_dags, output_table, read_output, run_dag
from stack.producer import produce

RESTORE = {"restore_table": True}


@pytest.fixture
def dags(tmp_path: Path, airflow_db: Path, entry: dict[str, Any]) -> dict[str, Any]:
    built = load_dags(tmp_path / f"{entry['name']}-{uuid.uuid4().hex[:6]}.yaml", entry)
    return {"regular": built[f"kinesis_replay_{entry['name']}"], "backfill": built[f"kinesis_replay_backfill_{entry['name']}"]}


def ledger(store: DynamoDBStateStore, name: str) -> dict[str, Any]:
    return {
        "head": store.get_head(name),
        "shards": store.get_shards(name),
        "batches": [(b.batch_id, b.status) for b in store.list_batches(name)],
    }


def rows_by_batch(output: str) -> dict[int, int]:
    """Rows per batch in the table's current snapshot; none when there is no table, or its metadata is gone."""
    try:
        table = output_table(output)
    except FileNotFoundError:
        return {}
    if table is None:
        return {}
    rows = table.scan().to_arrow().group_by("batch_id").aggregate([([], "count_all")]).to_pylist()
    return dict(sorted((r["batch_id"], r["count_all"]) for r in rows))


def refused(entry: dict[str, Any], dag: Any, step: str = "plan", **run: Any) -> str:
    """Run the DAG, whose first task must fail outright, and return what it says (the task called again, in this process)."""
    result = run_dag(dag, **run)
    assert result.state == "failed" and result.tasks[step] == "failed", result
    (p,) = parse_config({"pipelines": [entry]})
    with pytest.raises(AirflowFailException) as raised:
        if step == "plan":
            tasks.plan(p, "manual__test", {})
        else:
            tasks.select_backfill(p, run.get("run_conf", {}))
    return str(raised.value)


def restore(dags: dict[str, Any], entry: dict[str, Any], store: DynamoDBStateStore) -> None:
    """The documented way back: a dry run that changes nothing, then the restore."""
    before, held = ledger(store, entry["name"]), rows_by_batch(entry["output"])
    dry = run_dag(dags["backfill"], run_conf={**RESTORE, "dry_run": True})
    assert dry.tasks["select"] == "skipped", dry
    assert ledger(store, entry["name"]) == before and rows_by_batch(entry["output"]) == held
    done = run_dag(dags["backfill"], run_conf=RESTORE)
    assert done.state == "success", done


def two_batches(kinesis: Any, entry: dict[str, Any], dags: dict[str, Any], first: int, second: int) -> list[Any]:
    """Two regular cycles, each committing the records produced just before it: batches 1 and 2."""
    produced = produce(kinesis, entry["stream"], first)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    produced += produce(kinesis, entry["stream"], second, start_index=first)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    return produced


def test_a_rollback_is_refused_until_restored_from_the_output(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    """Case 1: rolled back to batch 1's snapshot with pyiceberg, the next cycle committed batch 3 on top, batch 2 lost."""
    produced = two_batches(kinesis, entry, dags, 60, 40)
    table = output_table(entry["output"])
    first = next(s for s in table.metadata.snapshots if s.summary["kinesis-replay.batch-id"] == "1")
    table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    produced += produce(kinesis, entry["stream"], 30, start_index=100)
    before = ledger(store, entry["name"])

    message = refused(entry, dags["regular"])
    assert (
        "holds batch 1 in its current snapshot, and the ledger" in message
        and "says batches 1 to 2 are committed; it lacks batch 2" in message
    )
    assert "rolled back" in message and '"restore_table": true, "dry_run": true' in message and "Nothing was written" in message
    assert ledger(store, entry["name"]) == before and rows_by_batch(entry["output"]) == {1: 60}
    # A backfill of a batch the table holds is refused too: it would commit on top of the rolled-back table.
    message = refused(entry, dags["backfill"], "select", run_conf={"batches": {"batch_ids": [1]}})
    assert "it lacks batch 2" in message and rows_by_batch(entry["output"]) == {1: 60}

    lineage_events = request.getfixturevalue("openlineage_events")  # on from here: the restore's commit has its event
    restore(dags, entry, store)  # batch 2's files are still in the output: committed from them, nothing replayed
    assert rows_by_batch(entry["output"]) == {1: 60, 2: 40} and ledger(store, entry["name"])["head"] == before["head"]
    (event,) = [e for e in lineage_events() if e["eventType"] == "COMPLETE" and "kinesisReplayBatch" in e["run"]["facets"]]
    facet, (output,) = event["run"]["facets"]["kinesisReplayBatch"], event["outputs"]
    assert (event["job"]["name"].rsplit(".", 1)[1], facet["batch_id"], facet["kind"]) == ("select", 2, "restore")
    current = output_table(entry["output"]).current_snapshot()
    assert current is not None and facet["snapshot_id"] == store.get_batch(entry["name"], 2).snapshot_id == current.snapshot_id
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 40
    assert run_dag(dags["regular"]).tasks == SUCCESS  # batch 3 now commits on a table that holds 1 and 2
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok and landed.rows == 130, landed
    assert check_table_history(entry["output"]) == []


def test_a_dropped_table_is_not_recreated_by_a_backfill_and_is_restored_whole(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any]
) -> None:
    """Case 2: the table dropped from its catalog, then a backfill of the newest batch made a table holding only it."""
    produced = two_batches(kinesis, entry, dags, 50, 20)
    (p,) = parse_config({"pipelines": [entry]})
    from kinesis_replay.adapters import iceberg_table

    iceberg_table.load_catalog(p).drop_table(p.table.identifier)  # the metadata and data files stay
    before = ledger(store, entry["name"])

    message = refused(entry, dags["backfill"], "select", run_conf={"batches": {"batch_ids": [2]}})
    assert "does not exist, and the ledger" in message and "it lacks batches 1, 2" in message and "dropped" in message
    assert output_table(entry["output"]) is None and ledger(store, entry["name"]) == before  # no table made
    assert "it lacks batches 1, 2" in refused(entry, dags["regular"])

    restore(dags, entry, store)
    assert output_table(entry["output"]) is not None and rows_by_batch(entry["output"]) == {1: 50, 2: 20}
    produced += produce(kinesis, entry["stream"], 10, start_index=70)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok and landed.rows == 80, landed


def test_lost_metadata_and_rows_deleted_by_another_writer_are_restored_from_the_output_and_the_stream(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any]
) -> None:
    """Case 4: metadata/ deleted, and the message used to advise registering the table on the file that was deleted.
    Then rows deleted with Iceberg's own tools: the batch's files no longer hold them, so it is replayed from the stream."""
    from pyiceberg.expressions import EqualTo

    produced = produce(kinesis, entry["stream"], 40)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    shutil.rmtree(Path(entry["output"]) / "metadata")
    before = ledger(store, entry["name"])
    message = refused(entry, dags["regular"])
    assert "names a metadata file that cannot be read" in message and '"restore_table": true, "dry_run": true' in message
    assert "register the table again" not in message and ledger(store, entry["name"]) == before

    restore(dags, entry, store)  # the catalog's dangling entry is dropped, and the table made anew from the files
    assert rows_by_batch(entry["output"]) == {1: 40}
    assert (Path(entry["output"]) / CATALOG_DIR).exists()

    table = output_table(entry["output"])
    shard = table.scan(limit=1).to_arrow().column("shard_id")[0].as_py()
    table.delete(EqualTo("shard_id", shard))  # Iceberg's own tools: a snapshot that names no batch
    assert 0 < sum(rows_by_batch(entry["output"]).values()) < 40
    message = refused(entry, dags["regular"])
    assert "its files hold" in message and "its batches held 40 when committed" in message
    assert "Were rows deleted or rewritten outside kinesis-replay?" in message and '"restore_table": true' in message

    restore(dags, entry, store)  # batch 1's attempt files are held, with rows deleted: a new attempt replaces them
    assert rows_by_batch(entry["output"]) == {1: 40}
    produced += produce(kinesis, entry["stream"], 15, start_index=40)
    assert run_dag(dags["regular"]).tasks == SUCCESS
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok and landed.rows == 55, landed


def test_a_batch_whose_files_and_records_are_both_gone_is_named_and_the_others_are_restored(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dags: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The table dropped, batch 1's files deleted too, and its ranges past the stream's retention: nothing can bring it
    back. The restore puts back batch 2, fails batch 1's own task naming it, and the pipeline stays refused, saying so."""
    two_batches(kinesis, entry, dags, 30, 20)
    (p,) = parse_config({"pipelines": [entry]})
    from kinesis_replay.adapters import iceberg_table

    iceberg_table.load_catalog(p).drop_table(p.table.identifier)
    shutil.rmtree(Path(entry["output"]) / "data" / "batch_id=0000000001")
    age_batch(dynamodb, entry["state_table"], entry["name"], 1, timedelta(hours=48))  # kinesalite keeps 24 hours
    before = ledger(store, entry["name"])

    dry = run_dag(dags["backfill"], run_conf={**RESTORE, "dry_run": True})
    assert dry.tasks["select"] == "skipped" and "CANNOT be restored: 1 batches (1)" in caplog.text
    restored = run_dag(dags["backfill"], run_conf=RESTORE)
    assert restored.state == "failed", restored
    with pytest.raises(AirflowFailException) as raised:  # what batch 1's own task said (called again, in this process)
        tasks.backfill_batch(p, 1, "manual__test", restore=True)
    assert str(raised.value).startswith(f"pipeline {entry['name']!r}, batch 1 cannot be restored to table ")
    assert "its verified files are gone from" in str(raised.value) and "Put its attempt's files back" in str(raised.value)
    assert rows_by_batch(entry["output"]) == {2: 20} and ledger(store, entry["name"]) == before  # batch 2 back, nothing moved
    assert "it lacks batch 1" in refused(entry, dags["regular"])
