"""A stream in another account, named by its ARN, reached through a role of that account: the DAG's tasks and the
replay job's executors both read it, while the state table and the output stay in the pipeline's account.

The stream is on the moto server's Kinesis, not kinesalite: kinesalite refuses every StreamARN parameter ("Value null at
'streamName'") and knows no accounts, while moto keeps each account's streams apart by the caller's credentials (a call
with account A's keys does not find account B's stream, by name or by ARN) and its STS issues a role's credentials in
the role's account. So a Kinesis call made with anything but the role's credentials fails: the plan (DAG side) and the
replay (Spark's executors) succeed only if each goes through the role. moto enforces no IAM policy and no resource
policy; what each account must grant is in docs/deploy-aws.md, untested here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack.harness import SUCCESS, check_exactly_once, load_dags, read_output, run_dag
from stack.local_stack import LOCAL_KEY, REGION
from stack.producer import produce

ACCOUNT_A = "123456789012"  # moto's account for the stack's keys: the state table and the output's
ACCOUNT_B = "210987654321"  # the stream's
ROLE_B = f"arn:aws:iam::{ACCOUNT_B}:role/kinesis-replay-reader"


def as_account_b(stack: Any, service: str) -> Any:
    """A client of account B on the moto server: the role's credentials from moto's STS, as the producer's account has."""
    sts = boto3.client("sts", endpoint_url=stack.moto_url, region_name=REGION, aws_access_key_id=LOCAL_KEY, aws_secret_access_key=LOCAL_KEY)
    found = sts.assume_role(RoleArn=ROLE_B, RoleSessionName="producer")["Credentials"]
    keys = {
        "aws_access_key_id": found["AccessKeyId"],
        "aws_secret_access_key": found["SecretAccessKey"],
        "aws_session_token": found["SessionToken"],
    }
    return boto3.client(service, endpoint_url=stack.moto_url, region_name=REGION, **keys)


@pytest.fixture
def stream_b(stack: Any) -> Iterator[tuple[Any, str]]:
    """A 2-shard stream of account B on moto's Kinesis, and its ARN; deleted after the test."""
    kinesis = as_account_b(stack, "kinesis")
    name = f"other-{uuid.uuid4().hex[:10]}"
    kinesis.create_stream(StreamName=name, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    assert arn == f"arn:aws:kinesis:{REGION}:{ACCOUNT_B}:stream/{name}"
    yield kinesis, arn
    kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


@pytest.fixture
def stream_connection(stack: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """aws_stream_b: the stack's keys (account A's), and account B's role to assume; Kinesis and STS on the moto server.
    aws_stream_a: the same without the role."""
    connection = stack.connection()
    connection["extra"]["service_config"] = {"kinesis": {"endpoint_url": stack.moto_url}, "sts": {"endpoint_url": stack.moto_url}}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_STREAM_A", json.dumps(connection))
    connection["extra"]["role_arn"] = ROLE_B
    monkeypatch.setenv("AIRFLOW_CONN_AWS_STREAM_B", json.dumps(connection))
    return "aws_stream_b"


def test_a_stream_of_another_account_lands_exactly_once_through_its_role_on_both_sides(
    tmp_path: Path,
    airflow_db: Path,
    stack: Any,
    stream_b: tuple[Any, str],
    stream_connection: str,
    entry: dict[str, Any],
    store: DynamoDBStateStore,
) -> None:
    kinesis_b, arn = stream_b
    produced = produce(kinesis_b, arn.rsplit("/", 1)[1], 60)
    entry = {**entry, "stream": arn}
    config = tmp_path / "pipelines.yaml"
    dag_id = f"kinesis_replay_{entry['name']}"

    # Without the role, account A's own credentials cannot find the stream: the plan fails, and nothing moved.
    alone = load_dags(config, {**entry, "stream_conn_id": "aws_stream_a"})[dag_id]
    assert run_dag(alone.partial_subset(task_ids=["plan"])).tasks == {"plan": "failed"}
    assert store.get_head(entry["name"]).next_batch_id == 1 and store.get_batches(entry["name"], [1]) == {}
    assert not Path(entry["output"]).exists() or not any(Path(entry["output"]).iterdir())

    # Through the role: planned and retention-checked by the DAG's tasks, read by the executors, in account B.
    result = run_dag(load_dags(config, {**entry, "stream_conn_id": stream_connection})[dag_id])
    assert result.tasks == SUCCESS, result
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok, landed
    batch = store.get_batch(entry["name"], 1)  # the ledger is in account A's state table
    assert batch is not None and batch.stream == arn and batch.status.value == "COMMITTED"
    assert store.table not in as_account_b(stack, "dynamodb").list_tables()["TableNames"]  # and not in account B
