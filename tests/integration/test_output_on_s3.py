"""The output's owner record, commit records and the plan's checks of them on S3 (the moto server over HTTP), as on local disk.

The Airflow side, which claims the root, writes the commit records and checks them against the state table, goes
through pyarrow's S3 file system and boto3's S3 client, and that is what this tests, case by case (a whole pipeline
on S3: test_s3_end_to_end.py). The S3 endpoint is in the Airflow connection only, never in the
environment (local_stack.Stack.env has no AWS_ENDPOINT_URL_S3): the library reaches S3 the way a DAG task does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters import commit_records, files, layout, output_root
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import OutputOwnershipError, StateLostError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, Head, ReplayResult, ShardResult
from kinesis_replay.steps import plan
from kinesis_replay.steps.plan import check_before_plan
from kinesis_replay.steps.recovery import plan_recovery
from stack import local_stack

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def through_the_connection(stack: Any) -> Iterator[None]:
    """Every S3 call the library makes here goes where the aws_default connection says, as in a DAG task."""
    assert not any(k.startswith("AWS_ENDPOINT_URL_S3") or k == "AWS_ENDPOINT_URL" for k in os.environ), "S3's endpoint is the connection's"
    with files.reaching_s3(tasks.s3_access(pipeline("s3://any/root"))):
        yield


def s3(stack: Any) -> Any:
    return local_stack.s3_client()  # the test's own (the library's is the connection's)


def pipeline(output_root: str, **changes: object) -> PipelineConfig:
    entry = {
        "name": "orders", "stream": "orders-stream", "output": output_root, "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"}, "output_format": "directory", **changes,
    }  # fmt: skip
    (pipeline_config,) = parse_config({"pipelines": [entry]})
    return pipeline_config


def committed(pipeline_config: PipelineConfig, batch_id: int) -> Batch:
    previous = 10 * batch_id - 1 if batch_id > 1 else None
    rng = SequenceRange("shardId-000000000000", 10 * batch_id, 10 * batch_id + 9, previous)
    result = ReplayResult(pipeline_config.name, batch_id, (ShardResult(rng.shard_id, 10, 100, rng.start, rng.end, "00"),))
    return Batch(pipeline_config.name, batch_id, BatchStatus.COMMITTED, (rng,), pipeline_config.stream, "run", NOW, NOW, result)


def claim_output(pipeline_config: PipelineConfig, now: datetime, dry_run: bool = False) -> None:
    """The plan's claim of its root, loaded for a claim as the plan loads it."""
    plan.claim_output(pipeline_config, load_root(pipeline_config, claim=True), now, dry_run=dry_run)


def test_the_owner_record_and_commit_records_guard_an_s3_root(bucket: str, stack: Any) -> None:
    pipeline_config = pipeline(f"s3://{bucket}/raw/orders/")
    check_before_plan(pipeline_config, Head())
    claim_output(pipeline_config, NOW)
    key = "raw/orders/_kinesis_replay_owner.json"
    assert s3(stack).head_object(Bucket=bucket, Key=key)["ContentLength"] > 0

    intruder = pipeline(f"s3a://{bucket}/raw/./orders", name="payments", stream="payments-stream")
    with pytest.raises(OutputOwnershipError, match=f"may not write output s3a://{bucket}/raw/orders: it belongs to pipeline 'orders'"):
        claim_output(intruder, NOW)

    for batch_id in (1, 2):
        commit_records.write_commit_record(pipeline_config.output, committed(pipeline_config, batch_id))
    assert commit_records.committed_batch_ids(pipeline_config.output) == [1, 2]
    assert commit_records.read_commit_record(pipeline_config.output, 2) == committed(pipeline_config, 2)
    with pytest.raises(StateLostError, match="holds 2 committed batches"):
        check_before_plan(pipeline_config, Head())  # the table lost its state
    check_before_plan(pipeline_config, Head(next_batch_id=3, version=3))  # in step with the output

    rebuilt = plan_recovery(pipeline_config, [commit_records.read_commit_record(pipeline_config.output, i) for i in (1, 2)], [], NOW)
    assert rebuilt.head.next_batch_id == 3 and [s.checkpoint for s in rebuilt.shards] == [29]


def test_of_two_claims_racing_for_a_new_s3_root_the_first_wins_and_the_second_writes_nothing(bucket: str, stack: Any) -> None:
    # Both read "no owner" before either wrote: the conditional PUT alone decides, and the later one changes nothing.
    first, second = pipeline(f"s3://{bucket}/raw/orders"), pipeline(f"s3://{bucket}/raw/orders", name="payments")
    record = layout.owner_path(first.output)
    assert files.put_if_absent_on_s3(record, b'{"pipeline": "orders"}', "orders") is True
    assert files.put_if_absent_on_s3(record, b'{"pipeline": "payments"}', "payments") is False
    body = s3(stack).get_object(Bucket=bucket, Key="raw/orders/_kinesis_replay_owner.json")["Body"].read()
    assert body == b'{"pipeline": "orders"}'

    s3(stack).delete_object(Bucket=bucket, Key="raw/orders/_kinesis_replay_owner.json")
    claim_output(first, NOW)
    with pytest.raises(OutputOwnershipError, match="it belongs to pipeline 'orders'"):
        claim_output(second, NOW)
    assert output_root.read_owner(first.output).pipeline_name == "orders"  # type: ignore[union-attr]


def test_an_owner_record_in_a_missing_bucket_names_the_path(stack: Any) -> None:
    """S3 answers a missing bucket the same way every time: the task fails at once, saying what to check."""
    from kinesis_replay.core.errors import OutputRefusedError

    says = "pipeline 'orders': cannot write the owner record s3://no-such-bucket-kr/raw/orders/"
    with pytest.raises(OutputRefusedError, match=says) as raised:
        claim_output(pipeline("s3://no-such-bucket-kr/raw/orders"), NOW)
    assert not raised.value.retryable and "Check that the bucket exists" in str(raised.value)


def s3_keys(stack: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3(stack).list_objects_v2(Bucket=bucket).get("Contents", []))


def test_an_s3_root_inside_another_root_or_holding_one_is_refused_and_writes_nothing(bucket: str, stack: Any) -> None:
    """Another deployment's pipeline (another config file and state table) in the table's data/, or around its root."""
    a = pipeline(f"s3://{bucket}/lake/orders")  # a table's root on S3 needs Glue; the guard is the same for both formats
    claim_output(a, NOW)
    commit_records.write_commit_record(a.output, committed(a, 1))
    before = s3_keys(stack, bucket)
    other = {"name": "payments", "stream": "payments-stream", "state_table": "kr-state-2"}

    inside = pipeline(f"s3a://{bucket}/lake/orders/data/payments", **other)
    with pytest.raises(OutputOwnershipError) as raised:
        claim_output(inside, NOW)
    assert f"may not claim output {inside.output}: it is inside output s3a://{bucket}/lake/orders of pipeline 'orders'" in str(raised.value)
    assert f"an output root outside s3a://{bucket}/lake/orders, in its pipelines config. Nothing was written." in str(raised.value)

    around = pipeline(f"s3://{bucket}/lake", **other)
    holds = f"may not claim output s3://{bucket}/lake: it holds output s3://{bucket}/lake/orders of pipeline 'orders'"
    with pytest.raises(OutputOwnershipError, match=holds):
        claim_output(around, NOW, dry_run=True)
    with pytest.raises(OutputOwnershipError, match="Nothing was written"):
        claim_output(around, NOW)

    assert s3_keys(stack, bucket) == before  # no owner record, no folder marker: nothing
    beside = pipeline(f"s3://{bucket}/lake/orders-2", **other)
    claim_output(beside, NOW)  # a root that only starts like the other's name is not inside it
    claim_output(a, NOW)  # the owner's own root goes on as before
    assert s3_keys(stack, bucket) == sorted([*before, "lake/orders-2/_kinesis_replay_owner.json"])


def test_a_plan_task_claims_an_s3_root_through_the_connection_alone(
    bucket: str, stack: Any, kinesis: Any, store: Any, entry: dict[str, Any]
) -> None:
    """The task as a new user runs it: the connection's service_config names the S3 endpoint, the environment none."""
    kinesis.put_record(StreamName=entry["stream"], Data=b'{"n": 1}', PartitionKey="k")
    pipeline_config = pipeline(f"s3://{bucket}/raw/orders", stream=entry["stream"], state_table=store.table)
    with files.reaching_s3(files.S3Access()):  # the default chain, as outside a task: it knows no local endpoint
        planned = tasks.plan(pipeline_config, "manual__s3", {})
    assert planned["batch_id"] == 1 and planned["ranges"] == 1
    claimed = s3(stack).get_object(Bucket=bucket, Key="raw/orders/_kinesis_replay_owner.json")["Body"].read()
    assert b'"pipeline": "orders"' in claimed and len(store.get_batch("orders", 1).ranges) == 1


def test_an_s3_endpoint_that_does_not_answer_fails_naming_the_pipeline_the_output_and_the_connection(
    bucket: str, stack: Any, kinesis: Any, store: Any, entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from kinesis_replay.core.errors import OutputIOError

    kinesis.put_record(StreamName=entry["stream"], Data=b'{"n": 1}', PartitionKey="k")
    own = s3(stack)  # the test's, at the endpoint that answers
    connection = stack.connection()
    connection["extra"]["service_config"]["s3"] = {"endpoint_url": f"http://127.0.0.1:{local_stack.free_port()}"}  # nothing listens
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    pipeline_config = pipeline(f"s3://{bucket}/raw/orders", stream=entry["stream"], state_table=store.table)

    with pytest.raises(OutputIOError) as raised:
        tasks.plan(pipeline_config, "manual__s3", {})

    says = str(raised.value)
    assert says.startswith("pipeline 'orders': ") and f"s3://{bucket}/raw/orders" in says, says
    assert "through connection aws_default (S3 endpoint http://127.0.0.1:" in says and "service_config.s3.endpoint_url" in says, says
    assert raised.value.retryable  # an endpoint that is down may come back
    assert "Contents" not in own.list_objects_v2(Bucket=bucket) and store.get_head("orders").next_batch_id == 1  # nothing written
    # pyarrow's file system (owner record, commit records, verify's reads) says the same where boto3's client did.
    with (
        files.reaching_s3(tasks.s3_access(pipeline_config)),
        pytest.raises(OutputIOError, match=f"cannot reach s3://{bucket}/raw/orders/_kinesis"),
    ):
        output_root.read_owner(pipeline_config.output)
