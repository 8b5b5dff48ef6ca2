"""A replay job that fails, on its driver or in its tasks' own writes: the ledger, the task's exception and the stuck alert
give its root cause, not py4j frames."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.layout import commit_record_path, result_path
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.ui import status
from stack.harness import SUCCESS, age_batch, check_exactly_once, load_dags, read_output, run_dag
from stack.producer import produce


@pytest.fixture
def dag_for(tmp_path: Path, airflow_db: Path) -> Any:
    def build(entry: dict[str, Any]) -> Any:
        return load_dags(tmp_path / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]

    return build


def test_a_failure_on_the_driver_is_reported_by_its_root_cause_and_the_rerun_lands_the_batch_once(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = {**entry, "payload": {"format": "json", "schema": "user STRING, index BIGINT"}}  # decoded by the tasks
    produced = produce(kinesis, entry["stream"], 20)
    output = Path(entry["output"])
    blocker = Path(result_path(str(output), 1))  # the driver writes the batch's manifest there, last
    (blocker / "kept").mkdir(parents=True)  # a folder, not empty, where the job needs a file
    root_cause = "IsADirectoryError: [Errno 21] Is a directory: "

    raised: list[BaseException] = []  # what the replay task raised, as Airflow got it
    real_replay = tasks.replay

    def replay(*args: Any, **kwargs: Any) -> None:
        try:
            real_replay(*args, **kwargs)
        except BaseException as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(tasks, "replay", replay)  # the DAG's task looks it up when it runs
    dag = dag_for(entry)
    failed = run_dag(dag)
    assert failed.tasks["replay"] == "failed" and failed.tasks["commit"] == "upstream_failed", failed

    (exc,) = raised
    assert f"spark-submit exited with 2: kinesis-replay: replay failed: {root_cause}" in str(exc), str(exc)
    assert str(exc).endswith(f"'{blocker}'"), str(exc)
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.FAILED and batch.error == str(exc)
    assert root_cause in batch.error and "py4j" not in batch.error.lower() and "at org.apache" not in batch.error
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())
    assert not blocker.is_file() and not Path(commit_record_path(str(output), 1)).exists()  # no manifest, no commit

    # The status page lists the failure with its cause, and the batch in flight with each of its ranges.
    pipeline = parse_config({"pipelines": [entry]})[0]
    view = status.pipeline_view(pipeline, store, datetime.now(UTC))
    assert [(f["batch_id"], f["status"], f["failures"], f["error"]) for f in view.failures] == [(1, "FAILED", 1, batch.error)]
    assert view.progress is not None and view.progress["batch_id"] == 1
    assert sorted(s["shard_id"] for s in view.progress["shards"]) == sorted(r.shard_id for r in batch.ranges)

    # The stuck alert quotes the ledger's error once the batch has waited too long.
    age_batch(dynamodb, store.table, entry["name"], 1, timedelta(minutes=pipeline.max_checkpoint_age_minutes + 60))
    with pytest.raises(AirflowFailException) as alert:
        tasks.check_staleness(pipeline)
    assert str(alert.value).endswith(f"last error: {batch.error}") and "py4j" not in str(alert.value).lower()

    shutil.rmtree(blocker)
    assert run_dag(dag).tasks == SUCCESS
    assert store.get_batch(entry["name"], 1).status == BatchStatus.COMMITTED
    (failure,) = status.pipeline_view(pipeline, store, datetime.now(UTC)).failures  # still listed, with its cause
    assert (failure["status"], failure["failures"], failure["error"]) == ("COMMITTED", 1, batch.error)
    result = check_exactly_once(produced, read_output(output))
    assert result.ok and result.rows == 20, result


def test_a_task_that_cannot_write_its_files_fails_the_job_with_the_path_and_the_rerun_lands_the_batch_once(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    """The tasks write a table's files themselves (pyarrow): a write they cannot make fails the batch with its cause."""
    produced = produce(kinesis, entry["stream"], 20)
    output = Path(entry["output"])
    output.mkdir(parents=True, exist_ok=True)
    blocker = output / "data"  # a file where the table's data folder goes
    blocker.write_text("a file where the job needs a directory")

    failed = run_dag(dag_for(entry))

    assert failed.tasks["replay"] == "failed" and failed.tasks["commit"] == "upstream_failed", failed
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.FAILED and batch.error is not None
    assert str(blocker) in batch.error and "py4j" not in batch.error.lower() and "Traceback" not in batch.error, batch.error
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())
    assert not list(output.rglob("*.parquet")) and not (output / "_manifests").exists()  # nothing written, no manifest

    blocker.unlink()
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    assert check_exactly_once(produced, read_output(output)).ok
