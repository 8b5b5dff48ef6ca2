"""The EMR Serverless job run built from a pipeline: staged files, the job driver field by field, and the real operator accepting it."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.launchers import emr_serverless

ROOT = Path(__file__).resolve().parents[2]
APP = "00fabcdefgh12345"
ROLE = "arn:aws:iam::123456789012:role/kinesis-replay-orders"
CODE = "s3://lake-code/kinesis-replay/code"
BATCH = f"{CODE}/orders/batch_id=0000000042"


@pytest.fixture
def pipeline() -> Any:
    entry = {
        "name": "orders",
        "stream": "orders",
        "output": "s3a://lake/raw/orders",
        "table": {"catalog": "glue", "catalog_properties": {"type": "glue"}},
        "schedule": None,
        "initial_position": "TRIM_HORIZON",
        "state_table": "kinesis-replay-state",
        "spark": {
            "conf": {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": 8},
            "submit_timeout_seconds": 3600,
            "emr_serverless": {
                "application_id": APP, "execution_role_arn": ROLE, "code_prefix": CODE + "/",
                "log_uri": "s3://lake-logs/emr/", "poll_seconds": 45,
            },
        },
    }  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


@pytest.fixture
def kwargs(pipeline: Any) -> dict[str, Any]:
    """What the DAG gives the operator for batch 42, built from the pipeline's config alone."""
    return emr_serverless.job_run_kwargs(pipeline, 42)


def submit_parameters(kwargs: dict[str, Any]) -> list[str]:
    return shlex.split(kwargs["job_driver"]["sparkSubmit"]["sparkSubmitParameters"])


def confs(parameters: list[str]) -> dict[str, str]:
    pairs = [parameters[i + 1] for i, p in enumerate(parameters) if p == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_uploads_stage_the_job_its_source_the_library_and_the_spec_under_the_batch_prefix(tmp_path: Path) -> None:
    zip_path, spec = tmp_path / "kinesis_replay.zip", tmp_path / "batch.json"
    staged = emr_serverless.uploads(CODE + "/", "orders", 42, ROOT / "spark_jobs", zip_path, spec)
    assert [(u.local, u.uri) for u in staged] == [
        (ROOT / "spark_jobs" / "replay_job.py", f"{BATCH}/replay_job.py"),
        (ROOT / "spark_jobs" / "kinesis_source.py", f"{BATCH}/kinesis_source.py"),
        (zip_path, f"{BATCH}/kinesis_replay.zip"),
        (spec, f"{BATCH}/batch.json"),
    ]
    assert {u.bucket for u in staged} == {"lake-code"}
    assert all(u.local.exists() for u in staged[:2]), "the job files the uploads name are not in spark_jobs/"


def test_the_job_runs_the_staged_job_file_on_the_staged_spec(kwargs: dict[str, Any]) -> None:
    driver = kwargs["job_driver"]["sparkSubmit"]
    assert driver["entryPoint"] == f"{BATCH}/replay_job.py"
    assert driver["entryPointArguments"] == ["--spec", f"{BATCH}/batch.json"]


def test_the_library_and_the_data_source_go_in_py_files(kwargs: dict[str, Any]) -> None:
    parameters = submit_parameters(kwargs)
    assert parameters[:2] == ["--py-files", f"{BATCH}/kinesis_replay.zip,{BATCH}/kinesis_source.py"]


def test_the_pipelines_spark_conf_is_passed_as_conf_flags(kwargs: dict[str, Any], pipeline: Any) -> None:
    assert confs(submit_parameters(kwargs)) == {
        "spark.log.level": "WARN", "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
        "spark.python.worker.faulthandler.enabled": "true", **pipeline.spark.conf
    }  # fmt: skip


def test_the_run_is_named_for_the_pipeline_and_batch_and_logs_to_the_log_prefix(kwargs: dict[str, Any]) -> None:
    assert kwargs["application_id"] == APP and kwargs["execution_role_arn"] == ROLE
    assert kwargs["name"] == "kinesis-replay-orders-batch-42"
    assert kwargs["configuration_overrides"] == {"monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": "s3://lake-logs/emr"}}}
    assert kwargs["deferrable"] is False  # the config's default: deferring needs aiobotocore


def test_the_run_is_polled_for_as_long_as_a_spark_submit_replay_may_take(kwargs: dict[str, Any]) -> None:
    assert kwargs["waiter_delay"] == 45
    assert kwargs["waiter_max_attempts"] == 80  # 3600 s / 45 s


def test_a_pipeline_without_emr_serverless_has_no_job_run() -> None:
    entry = {
        "name": "local",
        "stream": "s",
        "output": "/tmp/o",
        "schedule": None,
        "initial_position": "LATEST",
        "state_table": "t",
        "spark": {},
    }
    with pytest.raises(ConfigError, match=r"pipeline local: spark\.emr_serverless is not configured"):
        emr_serverless.job_run_kwargs(parse_config({"pipelines": [entry]})[0], 1)


def emr_pipeline(spark_conf: dict[str, Any] | None = None, **emr: Any) -> Any:
    """A pipeline run by EMR Serverless, with only the settings a test names beside the required ones."""
    spark = {"emr_serverless": {"application_id": APP, "execution_role_arn": ROLE, "code_prefix": CODE, **emr}, "conf": spark_conf or {}}
    entry = {"name": "orders", "stream": "orders", "output": "s3://lake/raw/orders", "output_format": "directory", "schedule": None,
             "initial_position": "TRIM_HORIZON", "state_table": "t", "spark": spark}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def test_without_a_log_prefix_nothing_is_overridden() -> None:
    assert emr_serverless.job_run_kwargs(emr_pipeline(), 1)["configuration_overrides"] is None


def test_a_virtualenv_archive_becomes_the_python_of_driver_and_executors() -> None:
    kwargs = emr_serverless.job_run_kwargs(emr_pipeline(venv_archive="s3://lake-code/venvs/kinesis-replay.tar.gz"), 1)
    conf = confs(submit_parameters(kwargs))
    assert conf["spark.archives"] == "s3://lake-code/venvs/kinesis-replay.tar.gz#environment"
    assert conf["spark.emr-serverless.driverEnv.PYSPARK_PYTHON"] == conf["spark.executorEnv.PYSPARK_PYTHON"] == "./environment/bin/python"


def test_waiting_in_a_worker_slot_is_the_default_and_the_triggerer_can_be_chosen() -> None:
    assert emr_serverless.job_run_kwargs(emr_pipeline(), 1)["deferrable"] is False
    assert emr_serverless.job_run_kwargs(emr_pipeline(deferrable=True), 1)["deferrable"] is True


@pytest.mark.parametrize(
    ("emr", "message"),
    [
        ({"code_prefix": "/tmp/code"}, r"spark\.emr_serverless\.code_prefix: .*must start with s3://"),
        ({"log_uri": "logs/"}, r"spark\.emr_serverless\.log_uri: .*must start with s3://"),
        ({"execution_role_arn": "kinesis-replay"}, r"spark\.emr_serverless\.execution_role_arn: must be an IAM role ARN"),
    ],
)
def test_the_config_reader_refuses_what_emr_serverless_could_not_run_naming_the_key(emr: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        emr_pipeline(**emr)


def test_a_conf_value_with_whitespace_is_refused_by_key() -> None:
    with pytest.raises(ConfigError, match=r"spark\.driver\.extraJavaOptions"):
        emr_serverless.job_run_kwargs(emr_pipeline({"spark.driver.extraJavaOptions": "-Xss4m -Dfoo=bar"}), 1)


def test_the_real_operator_accepts_the_arguments_inside_a_dag(kwargs: dict[str, Any]) -> None:
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator
    from airflow.sdk import DAG

    with DAG(dag_id="emr_serverless_kwargs", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        operator = EmrServerlessStartJobOperator(task_id="replay", aws_conn_id="aws_default", **kwargs)

    assert dag.get_task("replay") is operator
    assert operator.job_driver == kwargs["job_driver"]
    assert operator.configuration_overrides == kwargs["configuration_overrides"]
    assert (operator.application_id, operator.execution_role_arn, operator.name) == (APP, ROLE, "kinesis-replay-orders-batch-42")
    assert operator.deferrable is False
    assert (operator.waiter_delay, operator.waiter_max_attempts) == (45, 80)


def test_the_operator_gets_the_pipelines_arguments_once_and_each_batchs_job_run_from_its_stage_task(pipeline: Any) -> None:
    """partial() takes operator_args, the same for every batch; the stage task's XCom is job_run, keyed as JobRun says."""
    shared, run = emr_serverless.operator_args(pipeline), emr_serverless.job_run(pipeline, 42)
    assert set(shared) == emr_serverless.OperatorArgs.__required_keys__ and set(run) == emr_serverless.JobRun.__required_keys__
    assert not set(shared) & set(run) and emr_serverless.job_run_kwargs(pipeline, 42) == {**shared, **run}
    assert emr_serverless.operator_args(pipeline) == shared and emr_serverless.job_run(pipeline, 7) != run


# A stage task's XCom as release 0.1.0 stored it for batch 42 of the fixture's pipeline (a plain JSON object then):
# a run staged before an upgrade starts its job run under the new release.
STAGED_BY_0_1_0 = {
    "configuration_overrides": {"monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": "s3://lake-logs/emr"}}},
    "job_driver": {
        "sparkSubmit": {
            "entryPoint": f"{BATCH}/replay_job.py",
            "entryPointArguments": ["--spec", f"{BATCH}/batch.json"],
            "sparkSubmitParameters": f"--py-files {BATCH}/kinesis_replay.zip,{BATCH}/kinesis_source.py --conf spark.executor.memory=4g "
            "--conf spark.log.level=WARN --conf spark.sql.shuffle.partitions=8",
        }
    },
    "name": "kinesis-replay-orders-batch-42",
}


def test_a_job_run_staged_by_an_earlier_release_has_the_shape_of_this_ones_and_the_operator_takes_it(pipeline: Any) -> None:
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator
    from airflow.sdk import DAG

    run = emr_serverless.job_run(pipeline, 42)
    assert set(STAGED_BY_0_1_0) == set(run) and set(STAGED_BY_0_1_0["job_driver"]["sparkSubmit"]) == set(run["job_driver"]["sparkSubmit"])
    assert {k: v for k, v in STAGED_BY_0_1_0.items() if k != "job_driver"} == {k: v for k, v in run.items() if k != "job_driver"}
    with DAG(dag_id="emr_serverless_staged_earlier", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
        operator = EmrServerlessStartJobOperator(
            task_id="replay", aws_conn_id="aws_default", **emr_serverless.operator_args(pipeline), **STAGED_BY_0_1_0
        )
    assert operator.job_driver == STAGED_BY_0_1_0["job_driver"] and operator.name == "kinesis-replay-orders-batch-42"
