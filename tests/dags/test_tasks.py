"""The Airflow side of the tasks: which errors fail a task at once, and which are left to its retries."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.core import errors
from kinesis_replay.core.errors import KinesisReplayError
from kinesis_replay.steps import in_flight

ERRORS = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, KinesisReplayError) and c is not KinesisReplayError]


@pytest.mark.parametrize("error", [c for c in ERRORS if not c.retryable], ids=lambda c: c.__name__)
def test_an_error_a_retry_cannot_fix_fails_the_task_at_once(error: type[KinesisReplayError]) -> None:
    @tasks.fail_fast
    def step() -> None:
        raise error("pipeline 'orders': what is wrong")

    with pytest.raises(AirflowFailException, match=r"pipeline 'orders': what is wrong .*not retried") as raised:
        step()
    assert isinstance(raised.value.__cause__, error)


@pytest.mark.parametrize("error", [c for c in ERRORS if c.retryable], ids=lambda c: c.__name__)
def test_an_error_a_retry_may_fix_is_left_to_the_task_retries(error: type[KinesisReplayError]) -> None:
    @tasks.fail_fast
    def step() -> None:
        raise error("batch 3: the state changed meanwhile")

    with pytest.raises(error) as raised:
        step()
    assert type(raised.value) is error and str(raised.value) == "batch 3: the state changed meanwhile"


def test_both_ways_are_tested() -> None:
    assert {c.retryable for c in ERRORS} == {True, False}


# The task functions the DAGs call (kinesis_replay_dags.py); each fails at once on an error a retry cannot fix.
TASKS = ["plan", "replay", "stage", "verify", "commit", "check_staleness", "select_backfill", "backfill_batch", "stage_backfill",
         "check_backfilled", "commit_redecode", "maintain_table"]  # fmt: skip


@pytest.mark.parametrize("name", TASKS)
def test_every_task_fails_at_once_on_an_error_a_retry_cannot_fix(name: str) -> None:
    assert getattr(getattr(tasks, name), "__wrapped__", None) is not None, f"{name} is not wrapped by fail_fast"


def test_the_dags_call_no_task_function_the_list_above_lacks() -> None:
    import ast
    from pathlib import Path

    source = (Path(tasks.__file__).parent / "kinesis_replay_dags.py").read_text()
    called = {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "tasks"
    }  # fmt: skip
    assert called - {"load_pipelines", "catch_up_needed", "stage_emr", "event_extra"} <= set(TASKS), called


def test_a_missing_state_table_fails_the_check_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """check raises AirflowFailException itself for a stale pipeline; a missing state table fails it at once too."""
    from kinesis_replay.core.config import parse_config

    def missing(*_: object) -> None:
        raise errors.StateTableMissingError("pipeline 'p': state table kr-state does not exist")

    monkeypatch.setattr(in_flight, "staleness", missing)
    monkeypatch.setattr(tasks, "state_store", lambda p: None)
    entry = {"name": "p", "stream": "s", "output": "/lake/p", "schedule": None, "initial_position": "LATEST",
             "state_table": "kr-state", "spark": {}}  # fmt: skip
    p = parse_config({"pipelines": [entry]})[0]
    with pytest.raises(AirflowFailException, match=r"state table kr-state does not exist .*not retried"):
        tasks.check_staleness(p)


def test_the_tasks_kinesis_client_leaves_throttling_to_kinesis_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection's client retries a 5xx itself, and hands a throttle straight back, for call() to pace and count."""
    import json

    from botocore.exceptions import ClientError

    from kinesis_replay.core.config import parse_config
    from stack.scripted_kinesis import OK, SERVER_ERROR, THROTTLE, ScriptedKinesis

    served = ScriptedKinesis([SERVER_ERROR, THROTTLE, OK])
    try:
        extra = {"region_name": "us-east-1", "service_config": {"kinesis": {"endpoint_url": served.url}}}
        conn = {"conn_type": "aws", "login": "x", "password": "x", "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(conn))
        entry = {"name": "p", "stream": "s", "output": "/lake/p", "schedule": None, "initial_position": "LATEST",
                 "state_table": "t", "spark": {}}  # fmt: skip
        client = tasks.kinesis_client(parse_config({"pipelines": [entry]})[0])
        with pytest.raises(ClientError, match="ProvisionedThroughputExceededException"):
            client.list_shards(StreamName="s")
        assert served.requests == 2  # the 5xx retried by botocore, the throttle not
    finally:
        served.stop()


def test_the_replay_jobs_credentials_are_read_from_the_pipelines_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A role connection gives the job a profile that assumes the role (no STS call yet); a keys connection, its keys."""
    import json
    from datetime import UTC, datetime

    from kinesis_replay.core.config import parse_config
    from kinesis_replay.core.ranges import SequenceRange
    from kinesis_replay.core.state import Batch, BatchStatus

    extra = {
        "region_name": "eu-west-1", "role_arn": "arn:aws:iam::123456789012:role/replay",
        "assume_role_kwargs": {"DurationSeconds": 7200}, "service_config": {"sts": {"endpoint_url": "http://127.0.0.1:1"}},
    }  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_ROLE", json.dumps({"conn_type": "aws", "login": "AKIDBASE", "password": "s", "extra": extra}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_KEYS",
        json.dumps({"conn_type": "aws", "login": "AKIDKEYS", "password": "s", "extra": {"region_name": "eu-west-1"}}),
    )
    entry = {
        "name": "orders",
        "stream": "s",
        "output": "/lake/p",
        "schedule": None,
        "initial_position": "LATEST",
        "state_table": "t",
        "spark": {},
    }
    batch = Batch("orders", 7, BatchStatus.PLANNED, (SequenceRange("shardId-000000000000", 1, 2),), "s", "run", datetime.now(UTC))

    role = parse_config({"pipelines": [{**entry, "aws_conn_id": "aws_role"}]})[0]
    given = tasks.job_credentials(role, batch, tasks.kinesis_hook(role))
    assert given.renews and given.config is not None and given.warning is None
    for line in ("role_arn = arn:aws:iam::123456789012:role/replay", "source_profile = kinesis-replay-source",
                 "role_session_name = kinesis-replay-orders-7", "duration_seconds = 7200", "region = eu-west-1",
                 "aws_access_key_id = AKIDBASE", "  endpoint_url = http://127.0.0.1:1"):  # fmt: skip
        assert f"{line}\n" in given.config

    keys = parse_config({"pipelines": [{**entry, "aws_conn_id": "aws_keys"}]})[0]
    given = tasks.job_credentials(keys, batch, tasks.kinesis_hook(keys))
    assert given.config is None and given.env["AWS_ACCESS_KEY_ID"] == "AKIDKEYS" and given.env["AWS_SESSION_TOKEN"] is None


def test_a_stream_arn_is_reached_in_its_own_region_through_the_streams_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's hook comes from stream_conn_id (else aws_conn_id); a connection naming a region other than the stream
    ARN's is refused naming both, before any call; one naming none gets the ARN's (not the environment's)."""
    import json
    from datetime import UTC, datetime

    from kinesis_replay.core.config import parse_config
    from kinesis_replay.core.errors import ConfigError
    from kinesis_replay.core.ranges import SequenceRange
    from kinesis_replay.core.state import Batch, BatchStatus

    role = {"role_arn": "arn:aws:iam::210987654321:role/stream-reader", "service_config": {"sts": {"endpoint_url": "http://127.0.0.1:1"}}}
    for conn_id, extra in (
        ("aws_us", {"region_name": "us-east-1"}),
        ("aws_none", {}),
        ("aws_stream", {"region_name": "eu-west-1", **role}),
    ):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "aws", "login": "AKIDBASE", "password": "s", "extra": extra})
        )
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    arn = "arn:aws:kinesis:eu-west-1:210987654321:stream/orders"
    entry = {"name": "orders", "stream": arn, "output": "/lake/p", "schedule": None, "initial_position": "LATEST",
             "state_table": "t", "spark": {}, "aws_conn_id": "aws_us"}  # fmt: skip

    wrong = parse_config({"pipelines": [entry]})[0]
    with pytest.raises(ConfigError) as refused:
        tasks.kinesis_client(wrong)
    assert f"pipeline 'orders': stream {arn} is in region eu-west-1, and Airflow connection 'aws_us' names region us-east-1" in str(
        refused.value
    )
    assert "give the stream a connection of its own with stream_conn_id. Nothing was read or written" in str(refused.value)
    unnamed = parse_config({"pipelines": [{**entry, "stream_conn_id": "aws_none"}]})[0]
    assert tasks.kinesis_client(unnamed).meta.region_name == "eu-west-1"

    crossed = parse_config({"pipelines": [{**entry, "stream_conn_id": "aws_stream"}]})[0]
    hook = tasks.kinesis_hook(crossed)
    assert hook.aws_conn_id == "aws_stream" and hook.conn_config.role_arn == role["role_arn"]  # the provider assumes it
    batch = Batch("orders", 7, BatchStatus.PLANNED, (SequenceRange("shardId-000000000000", 1, 2),), arn, "run", datetime.now(UTC))
    given = tasks.stream_credentials(crossed, batch)
    assert given is not None and given.renews
    assert f"role_arn = {role['role_arn']}\n" in given.config and "aws_access_key_id = AKIDBASE\n" in given.config
    assert tasks.job_credentials(crossed, batch, tasks.pipeline_hook(crossed)).env["AWS_ACCESS_KEY_ID"] == "AKIDBASE"  # aws_us's keys
    assert tasks.stream_credentials(parse_config({"pipelines": [entry]})[0], batch) is None  # no connection of its own
