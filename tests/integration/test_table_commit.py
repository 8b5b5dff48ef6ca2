"""The commit's table step under faults, through the real DAG: a run that dies after the table commit and before any
checkpoint moves is finished by the next run, which finds its own snapshot and adds nothing twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.adapters.commit_records import read_commit_record
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.files import attempt_paths, read_result
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import StateConflictError
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.steps.verify import verify_batch
from stack.faults import TABLE_COMMITTED, StateFault, StateTableProxy
from stack.harness import check_exactly_once, check_table_history, load_dags, output_table, read_output, run_dag
from stack.producer import produce


def test_a_commit_cut_after_the_table_commit_is_finished_by_the_next_run_without_a_second_snapshot(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path, stack: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    produced = produce(kinesis, entry["stream"], 120)
    dag_id = f"kinesis_replay_{entry['name']}"
    verified = run_dag(load_dags(tmp_path / "a.yaml", entry)[dag_id].partial_subset(task_ids=["verify"], include_upstream=True))
    assert verified.tasks == {"plan": "success", "replay": "success", "verify": "success"}

    proxy = StateTableProxy(stack.moto_url).start()
    try:
        # The state table goes dark at the first checkpoint's advance: the first write after the table commit.
        proxy.arm(StateFault("unreachable", 1, marker=TABLE_COMMITTED))
        connection = stack.connection()
        connection["extra"]["service_config"]["dynamodb"]["endpoint_url"] = proxy.url
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
        cut = run_dag(load_dags(tmp_path / "b.yaml", entry)[dag_id], mark_success_pattern="^(replay|verify)$")
        assert proxy.fired is not None and "UpdateItem" in proxy.fired, proxy.fired
    finally:
        proxy.stop()
    assert cut.tasks["commit"] == "failed", cut
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTING and batch.snapshot_id is None
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())  # no checkpoint moved
    table = output_table(entry["output"])
    assert table is not None and len(table.metadata.snapshots) == 1  # the batch is in the table already
    (snapshot,) = table.metadata.snapshots
    assert read_commit_record(entry["output"], 1).snapshot_id == snapshot.snapshot_id  # the output's copy names it
    assert check_exactly_once(produced, read_output(entry["output"])).ok

    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(stack.connection()))
    finished = run_dag(load_dags(tmp_path / "c.yaml", entry)[dag_id])
    assert finished.state == "success" and finished.tasks["commit"] == "success", finished
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED and batch.snapshot_id == snapshot.snapshot_id
    table = output_table(entry["output"])
    assert table is not None and [s.snapshot_id for s in table.metadata.snapshots] == [snapshot.snapshot_id]  # none added
    assert {sid: s.checkpoint for sid, s in store.get_shards(entry["name"]).items()} == {r.shard_id: r.end for r in batch.ranges}
    assert check_exactly_once(produced, read_output(entry["output"])).ok and check_table_history(entry["output"]) == []


def test_a_replay_that_lost_the_race_to_a_concurrent_run_is_refused_at_verify_and_the_committed_batch_stands(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    """Two runs replay batch 1 at once (chaos seed 127162729): the first verifies and commits its attempt, and its
    commit removes the second's; the second replay wrote the result manifest last. The second run's verify refuses,
    naming the batch, and changes nothing: the ledger, the commit record and the table keep the first attempt."""
    produced = produce(kinesis, entry["stream"], 120)
    (pipeline,) = parse_config({"pipelines": [entry]})
    dag_id = f"kinesis_replay_{entry['name']}"
    first = run_dag(load_dags(tmp_path / "a.yaml", entry)[dag_id].partial_subset(task_ids=["verify"], include_upstream=True))
    assert first.tasks == {"plan": "success", "replay": "success", "verify": "success"}
    won = store.get_batch(entry["name"], 1).verified_result().attempt
    second = run_dag(load_dags(tmp_path / "b.yaml", entry)[dag_id].partial_subset(task_ids=["replay"], include_upstream=True))
    assert second.tasks == {"plan": "success", "replay": "success"}
    lost = read_result(entry["output"], 1).attempt  # the second replay's result manifest is the last written
    assert lost is not None and won is not None and lost != won and set(attempt_paths(entry["output"], 1)) == {won, lost}

    committed = run_dag(load_dags(tmp_path / "c.yaml", entry)[dag_id], mark_success_pattern="^(replay|verify)$")
    assert committed.tasks["commit"] == "success", committed
    assert set(attempt_paths(entry["output"], 1)) == {won}  # the commit removed the attempt it did not commit
    with pytest.raises(StateConflictError, match=r"batch 1 is COMMITTED: it was verified and committed after this run replayed it"):
        verify_batch(pipeline, store, 1)  # the second run's verify, after the first run's commit

    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED and batch.verified_result().attempt == won
    assert read_commit_record(entry["output"], 1).verified_result().attempt == won
    assert {sid: s.checkpoint for sid, s in store.get_shards(entry["name"]).items()} == {r.shard_id: r.end for r in batch.ranges}
    assert check_exactly_once(produced, read_output(entry["output"])).ok and check_table_history(entry["output"]) == []
