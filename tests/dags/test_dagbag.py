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
    assert set(bag.dag_ids) == {"kinesis_replay_demo", "kinesis_replay_backfill_demo", "kinesis_replay_maintenance_demo"}  # type: ignore[attr-defined]


def test_each_pipeline_dag_runs_plan_replay_verify_commit_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch).dags["kinesis_replay_demo"]  # type: ignore[attr-defined]
    order = [t.task_id for t in dag.topological_sort()]
    assert [t for t in order if t not in ("catch_up", "plan_next")] == ["plan", "replay", "verify", "commit", "check"]
    assert dag.get_task("commit").upstream_task_ids == {"plan", "verify"}
    assert dag.get_task("check").trigger_rule == "none_failed"  # it runs after a skipped (idle) run too
    # A capped batch queues the next run of the same DAG at once; an uncapped one skips plan_next.
    assert dag.get_task("catch_up").upstream_task_ids == {"commit"} and dag.get_task("plan_next").upstream_task_ids == {"catch_up"}
    assert dag.get_task("plan_next").trigger_dag_id == "kinesis_replay_demo"
    assert [a.name for a in dag.get_task("commit").outlets] == ["kinesis_replay_demo"]
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert dag.doc_md and "plan → replay → verify → commit" in dag.doc_md
    for t in dag.tasks:
        assert t.retries == (0 if t.task_id in ("check", "plan_next") else 2) and t.retry_exponential_backoff
    assert set(dag.params.keys()) == {"dry_run", "acknowledge_data_loss", "recover_from_output"}


def test_each_pipeline_has_a_manual_backfill_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch).dags["kinesis_replay_backfill_demo"]  # type: ignore[attr-defined]
    assert type(dag.timetable).__name__ == "NullTimetable" and dag.max_active_runs == 1  # manual runs only
    assert [t.task_id for t in dag.topological_sort()] == ["select", "replay", "commit"]  # commit: a re-decode's
    assert set(dag.params.keys()) == {"batches", "dry_run", "restore_table", "redecode", "rebuild", "copy_expired"}
    assert [a.name for a in dag.get_task("replay").outlets] == ["kinesis_replay_demo"]


def test_each_table_has_a_daily_maintenance_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    dag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch).dags["kinesis_replay_maintenance_demo"]  # type: ignore[attr-defined]
    assert dag.schedule == "@daily" and dag.max_active_runs == 1 and dag.catchup is False
    assert [t.task_id for t in dag.tasks] == ["maintain"]
    assert {k: dag.params[k] for k in dag.params} == {"dry_run": False, "orphan_age_hours": 72, "compact": True, "target_file_size_mb": 512}
    assert dag.doc_md and "history.expire.max-snapshot-age-ms" in dag.doc_md


def test_the_tasks_that_return_figures_push_each_key_as_an_xcom_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow infers multiple_outputs from a task's return type, a typed dict included: the XCom keys stay as they were."""
    bag = dagbag(ROOT / "dags" / "pipelines.yaml", monkeypatch)
    split = {
        (dag_id, t.task_id)
        for dag_id, dag in bag.dags.items()  # type: ignore[attr-defined]
        for t in dag.tasks
        if getattr(t, "multiple_outputs", False)
    }
    assert split == {
        ("kinesis_replay_demo", "plan"),
        ("kinesis_replay_demo", "commit"),
        ("kinesis_replay_backfill_demo", "replay"),
        ("kinesis_replay_maintenance_demo", "maintain"),
    }


def test_a_directory_output_has_no_maintenance_dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    config = tmp_path / "pipelines.yaml"
    shipped.pop("table", None)
    config.write_text(yaml.safe_dump({"pipelines": [{**shipped, "output_format": "directory"}]}))
    bag = dagbag(config, monkeypatch)
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    assert set(bag.dag_ids) == {"kinesis_replay_demo", "kinesis_replay_backfill_demo"}  # type: ignore[attr-defined]


def test_one_dag_per_configured_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    config = tmp_path / "pipelines.yaml"
    orders = {**shipped, "name": "orders", "schedule": "@hourly", "output": "/tmp/kinesis-replay/orders"}
    config.write_text(yaml.safe_dump({"pipelines": [shipped, orders]}))
    bag = dagbag(config, monkeypatch)
    assert set(bag.dag_ids) == {  # type: ignore[attr-defined]
        "kinesis_replay_demo", "kinesis_replay_orders", "kinesis_replay_backfill_demo", "kinesis_replay_backfill_orders",
        "kinesis_replay_maintenance_demo", "kinesis_replay_maintenance_orders",
    }  # fmt: skip


CHECK_FILE = "kinesis_replay_config_check.py"


def bag_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *entries: dict[str, object]) -> tuple[set[str], dict[str, str]]:
    """The DAG ids and the import errors (by file name) of a config holding ``entries``."""
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump({"pipelines": list(entries)}))
    bag = dagbag(config, monkeypatch)
    return set(bag.dag_ids), {Path(k).name: v for k, v in bag.import_errors.items()}  # type: ignore[attr-defined]


def shipped_entry(**overrides: object) -> dict[str, object]:
    shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
    return {**shipped, **overrides}


GOOD = {"kinesis_replay_good", "kinesis_replay_backfill_good", "kinesis_replay_maintenance_good"}


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"initial_position": "OLDEST"}, "pipelines[1] (bad).initial_position: must be one of TRIM_HORIZON, LATEST, AT_TIMESTAMP"),
        ({"stream": None}, "pipelines[1] (bad).stream: must be a non-empty string"),
        ({"colour": "blue"}, "pipelines[1] (bad): unknown key(s) colour"),
        ({"schedule": "61 * * * *"}, "pipeline bad: schedule: '61 * * * *' is not a valid schedule"),
        ({"output": "lake/bad"}, "pipelines[1] (bad).output: 'lake/bad' is relative"),
        ({"output": "/"}, "pipelines[1] (bad).output: '/' is the file system root"),
        ({"payload": {"format": "json", "schema": "user STRING, amount"}}, "pipelines[1] (bad).payload.schema"),
        # A type no JSON payload decodes into: refused by name, before any batch is planned.
        ({"payload": {"format": "json", "schema": "v VARIANT"}}, 'payload.schema: has types no JSON payload is decoded into: column "v"'),
        ({"stream": "s" * 129}, "pipelines[1] (bad).stream: 'sss"),  # the rest: "is neither a Kinesis stream name (1 to 128 ..."
        # A stream ARN is taken (tests/unit/test_streams.py); a consumer's ARN is not a stream's, and is refused naming so.
        (
            {"stream": "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/app:1"},
            (
                "pipelines[1] (bad).stream: 'arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/app:1' is not a Kinesis "
                "stream ARN: it is a stream consumer's ARN"
            ),
        ),
        # Once a raw OverflowError of the config reader, which stopped every pipeline's DAGs.
        ({"max_batch": {"span": "1000000000d"}}, "pipelines[1] (bad).max_batch.span: '1000000000d' is longer than any duration"),
        ({"read": {"bytes_per_second": float("inf")}}, "pipelines[1] (bad).read.bytes_per_second: must be a positive (finite) number"),
        ({"max_batch": {"read_minutes": float("nan")}}, "pipelines[1] (bad).max_batch.read_minutes: must be a positive (finite) number"),
    ],
)
def test_an_invalid_pipeline_is_an_import_error_naming_it_and_stops_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: dict[str, object], expected: str
) -> None:
    good = shipped_entry(name="good", output=str(tmp_path / "good"))
    dag_ids, errors = bag_of(tmp_path, monkeypatch, good, shipped_entry(**{"name": "bad", "output": str(tmp_path / "bad"), **bad}))
    assert dag_ids == GOOD  # the valid pipeline keeps its DAGs, and so its schedule
    assert set(errors) == {CHECK_FILE}, errors  # only the check file fails: the DAG file's DAGs are not marked stale
    assert expected in errors[CHECK_FILE] and str(tmp_path / "pipelines.yaml") in errors[CHECK_FILE]


def test_a_later_pipeline_that_repeats_a_name_or_shares_an_output_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = shipped_entry(name="good", output=str(tmp_path / "lake" / "good"))
    twin = shipped_entry(name="good", output=str(tmp_path / "twin"))
    same = shipped_entry(name="same", stream="other", output=f"file://{tmp_path}/lake/./good/")
    inside = shipped_entry(name="inside", output=str(tmp_path / "lake" / "good" / "sub"))
    dag_ids, errors = bag_of(tmp_path, monkeypatch, good, twin, same, inside)
    assert dag_ids == GOOD
    message = errors[CHECK_FILE]
    assert "pipelines[1].name: duplicate name 'good' (also pipelines[0])" in message
    root = f"{tmp_path}/lake/good"
    assert f"pipelines[2] (same).output: {root} is the same root as the output {root} of pipeline 'good'" in message
    assert f"pipelines[3] (inside).output: {tmp_path}/lake/good/sub is inside, or around, the output" in message


def test_an_error_of_the_whole_file_fails_the_dag_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pipelines.yaml"
    config.write_text("pipelines: [unclosed")
    bag = dagbag(config, monkeypatch)
    errors = {Path(k).name: v for k, v in bag.import_errors.items()}  # type: ignore[attr-defined]
    assert set(errors) == {"kinesis_replay_dags.py"} and "not valid YAML" in errors["kinesis_replay_dags.py"]
    assert bag.dag_ids == []  # type: ignore[attr-defined]


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
    order = [t.task_id for t in dag.topological_sort()]
    assert [t for t in order if t not in ("catch_up", "plan_next")] == ["plan", "stage", "replay", "verify", "commit", "check"]
    replay = dag.get_task("replay")
    assert replay.operator_class is EmrServerlessStartJobOperator
    assert replay.partial_kwargs["application_id"] == "00fabcdefgh12345"
    assert replay.partial_kwargs["waiter_delay"] == 20 and replay.partial_kwargs["deferrable"] is False
    # A resumed batch that only needs its commit stages nothing: verify then runs after a replay with no job runs.
    assert dag.get_task("verify").trigger_rule == "none_failed_min_one_success"

    backfill = bag.dags["kinesis_replay_backfill_demo"]  # type: ignore[attr-defined]
    assert [t.task_id for t in backfill.topological_sort()] == ["select", "stage", "replay", "check", "commit"]
    assert [a.name for a in backfill.get_task("check").outlets] == ["kinesis_replay_demo"]


def test_a_spark_conf_value_emr_serverless_cannot_pass_stops_only_its_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once refused only while the DAG file built its DAGs: an import error of that file, and every pipeline stopped."""
    emr = yaml.safe_load(emr_pipeline(tmp_path).read_text())["pipelines"][0]
    emr["spark"]["conf"] = {"spark.executor.extraJavaOptions": "-XX:+UseG1GC -XX:MaxGCPauseMillis=200"}
    good = shipped_entry(name="good", output=str(tmp_path / "good"))
    dag_ids, errors = bag_of(tmp_path, monkeypatch, good, {**emr, "name": "bad", "output": str(tmp_path / "bad")})
    assert dag_ids == GOOD and set(errors) == {CHECK_FILE}, errors
    expected = "pipelines[1] (bad).spark.conf: spark.executor.extraJavaOptions: EMR Serverless splits sparkSubmitParameters"
    assert expected in errors[CHECK_FILE]


def test_a_stream_name_of_kinesis_s_full_length_gets_dags_with_its_tag_cut_to_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow refuses a tag over 100 characters: once, a 96-character stream name was an import error of every DAG."""
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump({"pipelines": [shipped_entry(name="long", stream="s" * 128, output=str(tmp_path / "long"))]}))
    bag = dagbag(config, monkeypatch)
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    tags = bag.dags["kinesis_replay_long"].tags  # type: ignore[attr-defined]
    assert f"stream:{'s' * 93}" in tags


def test_deferring_without_aiobotocore_is_an_import_error_naming_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("aiobotocore") is not None:
        pytest.skip("aiobotocore is installed here, so deferring is possible")
    bag = dagbag(emr_pipeline(tmp_path, deferrable=True), monkeypatch)
    (message,) = bag.import_errors.values()  # type: ignore[attr-defined]
    assert "pipeline demo: spark.emr_serverless.deferrable needs aiobotocore" in message
    assert bag.dag_ids == []  # type: ignore[attr-defined]


def test_every_replay_of_a_pipeline_takes_a_slot_of_its_one_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-DAG limit (max_active_tis_per_dag) could not span the regular DAG and the backfill DAG; one pool does."""
    for config in (ROOT / "dags" / "pipelines.yaml", emr_pipeline(tmp_path)):
        bag = dagbag(config, monkeypatch)
        regular, backfill = (bag.dags[d] for d in ("kinesis_replay_demo", "kinesis_replay_backfill_demo"))  # type: ignore[attr-defined]
        pools = {(dag.dag_id, t.task_id): t.pool for dag in (regular, backfill) for t in dag.tasks if t.pool != "default_pool"}
        assert pools == {(regular.dag_id, "replay"): "kinesis_replay_demo", (backfill.dag_id, "replay"): "kinesis_replay_demo"}
        # When the slot frees, the regular batch goes before a backfill's remaining batches.
        assert regular.get_task("replay").priority_weight > backfill.get_task("replay").priority_weight
