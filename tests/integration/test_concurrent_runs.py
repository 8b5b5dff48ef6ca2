"""Two regular runs of one pipeline at once (a trigger while a run runs, max_active_runs bypassed): both work on the
batch in flight, one commits it, and the other fails with the documented message at whichever step it is in.

Once, the loser failed with Spark's raw FileNotFoundException on an attempt file (the winner's commit removes the
attempt folders it did not commit), or a retried verify that said files were gone. The steps are the DAG's own task
functions, called in an order that interleaves the two runs deterministically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters import commit_records, files, layout
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.launchers.spark_submit import SparkSubmitError
from stack.harness import check_exactly_once, check_table_history, output_table, read_output
from stack.producer import produce

DOCUMENTED = "batch 1 is COMMITTED: it was verified and committed after this run replayed it"


def lost(step: Any) -> str:
    """The losing run's step fails outright (not retried: nothing is left for it to do); what it says."""
    with pytest.raises(AirflowFailException) as raised:
        step()
    return str(raised.value)


def check_committed_once(pipeline: PipelineConfig, store: DynamoDBStateStore, produced: list[Any], attempt: str) -> None:
    """The ledger holds batch 1 committed, once, with the attempt the table holds; each record is in the table once."""
    (batch,) = store.list_batches(pipeline.name)
    assert batch.batch_id == 1 and batch.status == BatchStatus.COMMITTED and batch.error is None, batch
    assert batch.verified_result().attempt == attempt
    assert store.get_head(pipeline.name).in_flight is None and store.get_head(pipeline.name).next_batch_id == 2
    assert {sid: s.checkpoint for sid, s in store.get_shards(pipeline.name).items()} == {r.shard_id: r.end for r in batch.ranges}
    assert commit_records.read_commit_record(pipeline.output, 1).verified_result().attempt == attempt
    assert set(files.attempt_paths(pipeline.output, 1)) == {attempt}  # the commit removed every other attempt
    table = output_table(pipeline.output)
    assert table is not None and len(table.metadata.snapshots) == 1
    landed = check_exactly_once(produced, read_output(pipeline.output))
    assert landed.ok and landed.rows == len(produced), landed
    assert check_table_history(pipeline.output) == []


def test_the_run_that_replayed_a_batch_another_run_committed_fails_at_verify_and_commit_with_the_documented_message(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], airflow_db: Path
) -> None:
    produced = produce(kinesis, entry["stream"], 120)
    (pipeline,) = parse_config({"pipelines": [entry]})
    a = tasks.plan(pipeline, "manual__a", {})
    tasks.replay(pipeline, a, {})
    b = tasks.plan(pipeline, "manual__b", {})  # run B, triggered while A runs: it resumes A's batch
    assert (a["batch_id"], b["batch_id"], b["resumed"], b["action"]) == (1, 1, True, "replay")
    tasks.replay(pipeline, b, {})  # B's replay writes the result manifest last
    replayed = files.read_result(pipeline.output, 1).attempt
    assert replayed is not None and len(files.attempt_paths(pipeline.output, 1)) == 2
    tasks.verify(pipeline, a, {}, "manual__a")
    tasks.commit(pipeline, a, "manual__a")  # A commits the last replay's attempt (B's), and removes its own

    for step in (lambda: tasks.verify(pipeline, b, {}, "manual__b"), lambda: tasks.commit(pipeline, b, "manual__b")):
        message = lost(step)
        assert f"pipeline {pipeline.name!r}, {DOCUMENTED}" in message and "[not retried" in message, message
    # B's replay task run again (a retry, or a third run that planned before A's commit): refused before any read.
    message = lost(lambda: tasks.replay(pipeline, b, {}))
    assert DOCUMENTED in message and len(files.attempt_paths(pipeline.output, 1)) == 1, message
    check_committed_once(pipeline, store, produced, replayed)


def test_a_spark_job_that_fails_because_another_run_committed_its_batch_meanwhile_fails_with_the_documented_message(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], airflow_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's job runs while A verifies and commits: A's commit removes B's attempt folder under the job, which fails on a
    file of it. The test hook is spark-submit itself: B's job is A's verify and commit, then the failure Spark reports."""
    produced = produce(kinesis, entry["stream"], 120)
    (pipeline,) = parse_config({"pipelines": [entry]})
    a = tasks.plan(pipeline, "manual__a", {})
    tasks.replay(pipeline, a, {})
    won = files.read_result(pipeline.output, 1).attempt
    b = tasks.plan(pipeline, "manual__b", {})
    assert b["batch_id"] == 1 and b["resumed"]
    removed = f"{layout.data_path(pipeline.output, 1, 'attempt-of-b')}/part-00000.parquet"

    def b_job(command: list[str], env: Any, what: str, on_line: Any = None) -> None:
        tasks.verify(pipeline, a, {}, "manual__a")
        tasks.commit(pipeline, a, "manual__a")
        raise SparkSubmitError(f"{what}: spark-submit exited with 1: java.io.FileNotFoundException: File file:{removed} does not exist")

    monkeypatch.setattr(tasks.spark_submit, "run", b_job)
    message = lost(lambda: tasks.replay(pipeline, b, {}))
    assert f"pipeline {pipeline.name!r}, {DOCUMENTED}" in message and "[not retried" in message, message
    assert "FileNotFoundException" not in message  # the cause stays in the exception's chain and the task log
    assert won is not None
    check_committed_once(pipeline, store, produced, won)
