"""The DAG end to end with dag.test(): kinesalite and moto over HTTP, spark-submit in local mode, output read with pyarrow."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import StateConflictError
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.steps.commit import commit_batch
from stack.harness import SUCCESS, batch_dirs, check_exactly_once, check_table_history, load_dags, read_output, run_dag
from stack.producer import produce


@pytest.fixture
def dag_for(tmp_path: Path, airflow_db: Path) -> Any:
    def build(entry: dict[str, Any]) -> Any:
        return load_dags(tmp_path / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]

    return build


def rows_of(output: Path, batch: str) -> set[tuple[Any, ...]]:
    table = read_output(output)
    return as_rows(table.filter(pc.equal(table.column("batch_id"), int(batch))))


def as_rows(table: Any) -> set[tuple[Any, ...]]:
    columns = ["shard_id", "sequence_number", "sub_sequence_number", "partition_key", "approximate_arrival_timestamp", "data"]
    return set(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def test_each_cycle_lands_what_is_new_exactly_once(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any) -> None:
    dag = dag_for(entry)
    produced = produce(kinesis, entry["stream"], 300)
    assert run_dag(dag).tasks == SUCCESS
    first = check_exactly_once(produced, read_output(entry["output"]))
    assert first.ok, first

    produced += produce(kinesis, entry["stream"], 200, start_index=300)
    assert run_dag(dag).tasks == SUCCESS
    second = check_exactly_once(produced, read_output(entry["output"]))
    assert second.ok and second.rows == 500, second
    assert batch_dirs(entry["output"]) == ["batch_id=0000000001", "batch_id=0000000002"]
    assert check_table_history(entry["output"]) == []
    snapshots = [store.get_batch(entry["name"], i).snapshot_id for i in (1, 2)]
    assert len(read_output(entry["output"], snapshot_id=snapshots[0])) == 300  # as of batch 1's snapshot

    idle = run_dag(dag)
    assert idle.skipped and idle.state == "success", idle
    assert [b.batch_id for b in store.list_batches(entry["name"])] == [1, 2]
    assert store.get_head(entry["name"]).next_batch_id == 3
    ends = {r.shard_id: r.end for r in store.get_batch(entry["name"], 2).ranges}
    assert {sid: s.checkpoint for sid, s in store.get_shards(entry["name"]).items() if sid in ends} == ends


def test_output_that_disagrees_with_the_plan_is_not_committed(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    produced = produce(kinesis, entry["stream"], 200)
    dag = dag_for(entry)
    assert run_dag(dag.partial_subset(task_ids=["replay"], include_upstream=True)).tasks["replay"] == "success"
    next(Path(entry["output"]).glob("data/batch_id=0000000001/attempt=*/part-*.parquet")).unlink()  # a lost file

    tampered = run_dag(dag, mark_success_pattern="^replay$")  # verify the damaged output as it is
    assert tampered.tasks["verify"] == "failed" and tampered.tasks["commit"] == "upstream_failed"
    failed = store.get_batch(entry["name"], 1)
    assert failed.status == BatchStatus.FAILED and "rows per shard" in (failed.error or "")
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())

    assert run_dag(dag).tasks == SUCCESS  # the next run replays the same batch and repairs it
    result = check_exactly_once(produced, read_output(entry["output"]))
    assert result.ok, result


def test_two_commits_racing_for_one_batch(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any) -> None:
    produced = produce(kinesis, entry["stream"], 200)
    dag = dag_for(entry)
    assert run_dag(dag.partial_subset(task_ids=["verify"], include_upstream=True)).tasks["verify"] == "success"
    pipeline = parse_config({"pipelines": [entry]})[0]
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def commit() -> None:
        start.wait()
        try:
            outcomes.append(commit_batch(pipeline, DynamoDBStateStore(store.client, store.table), 1))
        except StateConflictError as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=commit) for _ in range(2)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()

    # The loser meets the winner's conditional write: at WRITTEN -> COMMITTING, or, when it read the batch after the
    # winner's first write and resumed the commit, at COMMITTED. Exactly one commit completes (one Asset event).
    errors = [o for o in outcomes if isinstance(o, StateConflictError)]
    assert len(outcomes) == 2 and len(errors) == 1, outcomes
    assert f"pipeline '{entry['name']}', batch 1" in str(errors[0])
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED and store.get_head(entry["name"]).in_flight is None
    assert {sid: s.checkpoint for sid, s in store.get_shards(entry["name"]).items()} == {r.shard_id: r.end for r in batch.ranges}
    assert check_exactly_once(produced, read_output(entry["output"])).ok


def test_a_missing_stream_fails_the_run_and_writes_nothing(store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any) -> None:
    result = run_dag(dag_for({**entry, "stream": "no-such-stream"}))
    assert result.state == "failed" and result.tasks["plan"] == "failed" and result.tasks["commit"] == "upstream_failed"
    assert store.list_batches(entry["name"]) == [] and store.get_shards(entry["name"]) == {}
    assert not Path(entry["output"]).exists()
