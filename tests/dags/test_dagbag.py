"""Guard the DAGs: every DAG imports with no errors, has the expected tasks, and a bad config names its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def dagbag(config: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KINESIS_REPLAY_CONFIG", str(config))
    return DagBag(dag_folder=str(ROOT / "dags"))


def test_every_dag_imports_without_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    bag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch)
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    assert set(bag.dag_ids) == {"kinesis_replay_demo", "kinesis_replay_backfill_demo"}  # type: ignore[attr-defined]


def test_each_pipeline_dag_runs_plan_replay_verify_commit_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch).dags["kinesis_replay_demo"]  # type: ignore[attr-defined]
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "replay", "verify", "commit", "check"]
    assert dag.get_task("commit").upstream_task_ids == {"plan", "verify"}
    assert dag.get_task("check").trigger_rule == "none_failed"  # it runs after a skipped (idle) run too
    assert [a.name for a in dag.get_task("commit").outlets] == ["kinesis_replay_demo"]
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert dag.doc_md and "plan → replay → verify → commit" in dag.doc_md
    for t in dag.tasks:
        assert t.retries == (0 if t.task_id == "check" else 2) and t.retry_exponential_backoff
    assert set(dag.params.keys()) == {"dry_run", "acknowledge_data_loss"}


def test_each_pipeline_has_a_manual_backfill_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch).dags["kinesis_replay_backfill_demo"]  # type: ignore[attr-defined]
    assert type(dag.timetable).__name__ == "NullTimetable" and dag.max_active_runs == 1  # manual runs only
    assert [t.task_id for t in dag.topological_sort()] == ["select", "replay"]
    assert set(dag.params.keys()) == {"batches", "dry_run"}
    assert [a.name for a in dag.get_task("replay").outlets] == ["kinesis_replay_demo"]


def test_one_dag_per_configured_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [shipped, {**shipped, "name": "orders", "schedule": "@hourly"}]}))
    bag = dagbag(config, monkeypatch)
    assert set(bag.dag_ids) == {  # type: ignore[attr-defined]
        "kinesis_replay_demo", "kinesis_replay_orders", "kinesis_replay_backfill_demo", "kinesis_replay_backfill_orders",
    }  # fmt: skip


def test_a_malformed_config_is_an_import_error_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{**shipped, "initial_position": "OLDEST"}]}))
    errors = dagbag(config, monkeypatch).import_errors  # type: ignore[attr-defined]
    assert len(errors) == 1
    (message,) = errors.values()
    assert "pipelines[0] (demo).initial_position: must be one of TRIM_HORIZON, LATEST, AT_TIMESTAMP, got 'OLDEST'" in message


def emr_pipeline(tmp_path: Path, **emr: object) -> Path:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    spark = {"conf": {"spark.executor.memory": "4g"}, "emr_serverless": {
        "application_id": "00fabcdefgh12345",
        "execution_role_arn": "arn:aws:iam::123456789012:role/kinesis-replay-demo",
        "code_prefix": "s3://lake-code/kinesis-replay", **emr,
    }}  # fmt: skip
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [{**shipped, "spark": spark}]}))
    return config


def test_an_emr_serverless_pipeline_stages_its_batch_then_runs_it_as_a_job_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator

    bag = dagbag(emr_pipeline(tmp_path, poll_seconds=20), monkeypatch)
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    dag = bag.dags["kinesis_replay_demo"]  # type: ignore[attr-defined]
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "stage", "replay", "verify", "commit", "check"]
    replay = dag.get_task("replay")
    assert replay.operator_class is EmrServerlessStartJobOperator
    assert replay.partial_kwargs["application_id"] == "00fabcdefgh12345"
    assert replay.partial_kwargs["waiter_delay"] == 20 and replay.partial_kwargs["deferrable"] is False
    # A resumed batch that only needs its commit stages nothing: verify then runs after a replay with no job runs.
    assert dag.get_task("verify").trigger_rule == "none_failed_min_one_success"

    backfill = bag.dags["kinesis_replay_backfill_demo"]  # type: ignore[attr-defined]
    assert [t.task_id for t in backfill.topological_sort()] == ["select", "stage", "replay", "check"]
    assert [a.name for a in backfill.get_task("check").outlets] == ["kinesis_replay_demo"]


def test_deferring_without_aiobotocore_is_an_import_error_naming_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("aiobotocore") is not None:
        pytest.skip("aiobotocore is installed here, so deferring is possible")
    errors = dagbag(emr_pipeline(tmp_path, deferrable=True), monkeypatch).import_errors  # type: ignore[attr-defined]
    (message,) = errors.values()
    assert "pipeline demo: spark.emr_serverless.deferrable needs aiobotocore" in message
