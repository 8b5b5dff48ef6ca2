"""A connection with no credentials: each task fails at once naming the pipeline, the connection and the service it
called, and that a retry will not help, rather than with botocore's bare NoCredentialsError (issue 44, point 6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters import files
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import CredentialsMissingError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus


@pytest.fixture(autouse=True)
def no_credentials_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection with a region and nothing else, on a worker whose default chain finds nothing either."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ROLE_ARN", "AWS_ENDPOINT_URL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role either (and no wait for one)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_EMPTY", json.dumps({"conn_type": "aws", "extra": {"region_name": "eu-west-1"}}))


def pipeline(**changes: Any) -> PipelineConfig:
    entry = {"name": "orders", "stream": "orders", "output": "/data/lake/orders", "output_format": "directory",
             "schedule": None, "initial_position": "LATEST", "state_table": "kr-state", "spark": {},
             "aws_conn_id": "aws_empty", **changes}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def refused(call: Callable[[], object], service: str) -> str:
    with pytest.raises(AirflowFailException) as failed:
        call()
    assert isinstance(failed.value.__cause__, CredentialsMissingError)
    message = str(failed.value)
    assert f"pipeline 'orders': no AWS credentials to call {service} with" in message
    assert "Airflow connection 'aws_empty'" in message and "A retry will not help until the connection has credentials" in message
    assert "not retried" in message  # failed at once, its retries not waited out
    return message


def test_the_plan_names_the_state_tables_service() -> None:
    refused(lambda: tasks.plan(pipeline(), "manual__1", {}), "DynamoDB")


def test_a_kinesis_call_names_kinesis() -> None:
    @tasks.fail_fast
    @tasks.through_connection
    def step(pipeline_config: PipelineConfig) -> object:
        return tasks.kinesis_client(pipeline_config).list_shards(StreamName=pipeline_config.stream)

    refused(lambda: step(pipeline()), "Kinesis")


def test_a_kinesis_call_through_the_streams_own_connection_names_that_connection_and_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_OTHER", json.dumps({"conn_type": "aws", "login": "AKIDOTHER", "password": "s"}))

    @tasks.fail_fast
    @tasks.through_connection
    def step(pipeline_config: PipelineConfig) -> object:
        return tasks.kinesis_client(pipeline_config).list_shards(StreamName=pipeline_config.stream)

    with pytest.raises(AirflowFailException) as failed:
        step(pipeline(aws_conn_id="aws_other", stream_conn_id="aws_empty"))
    message = str(failed.value)
    assert "no AWS credentials to call Kinesis with: Airflow connection 'aws_empty'" in message
    assert "or name another with stream_conn_id in the pipelines config" in message and "aws_other" not in message


def test_an_s3_call_wrapped_in_the_outputs_error_names_s3() -> None:
    glue = {"output": "s3://lake/orders", "output_format": "iceberg", "table": {"catalog_properties": {"type": "glue"}}}

    @tasks.fail_fast
    @tasks.through_connection
    def step(pipeline_config: PipelineConfig) -> object:
        return files.s3_list("lake", "orders/")

    refused(lambda: step(pipeline(**glue)), "S3")


def test_the_replay_jobs_credentials_from_a_role_with_nothing_to_assume_it_with_name_sts(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"region_name": "eu-west-1", "role_arn": "arn:aws:iam::123456789012:role/replay",
             "service_config": {"sts": {"endpoint_url": "http://127.0.0.1:1"}}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_EMPTY", json.dumps({"conn_type": "aws", "extra": extra}))
    batch = Batch("orders", 7, BatchStatus.PLANNED, (SequenceRange("shardId-000000000000", 1, 2),), "orders", "run", datetime.now(UTC))

    @tasks.fail_fast
    @tasks.through_connection
    def step(pipeline_config: PipelineConfig) -> object:
        return tasks.job_credentials(pipeline_config, batch, tasks.kinesis_hook(pipeline_config)).env

    refused(lambda: step(pipeline()), "STS")


def test_any_other_error_is_left_as_it_is() -> None:
    @tasks.through_connection
    def step(pipeline_config: PipelineConfig) -> object:
        raise KeyError("stream")

    with pytest.raises(KeyError):
        step(pipeline())
