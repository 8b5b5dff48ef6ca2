"""A stream named by its ARN: the ARN's form, the region check, and every Kinesis call of a cycle addressing it by
StreamARN (the in-memory stream refuses a call that names it both ways, and a ListShards page that sends more than its
NextToken, as Kinesis does)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fakes.memory_kinesis import ACCOUNT, REGION
from fakes.replay import directory_pipeline
from fakes.world import World
from kinesis_replay.core import streams
from kinesis_replay.core.config import parse_pipelines
from kinesis_replay.core.errors import AccessRefusedError
from kinesis_replay.core.job_spec import JobSpec, JobSpecError, KinesisEndpoint
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.streams import StreamArn, address, check_region, check_stream, parse_arn, stream_name

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def test_an_arn_gives_the_streams_partition_region_account_and_name() -> None:
    assert parse_arn(ARN) == StreamArn("aws", "eu-west-1", "123456789012", "orders")
    assert parse_arn("arn:aws-us-gov:kinesis:us-gov-west-1:123456789012:stream/a.b_c-1").region == "us-gov-west-1"
    assert parse_arn(ARN).arn == ARN
    assert stream_name(ARN) == "orders" and stream_name("orders") == "orders"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("arn:aws:kinesis:eu-west-1:123456789012", "not an ARN: a stream ARN has six ':'-separated parts"),
        ("arn:aws:sqs:eu-west-1:123456789012:stream/orders", "its service is 'sqs', not kinesis"),
        ("arn:amazon:kinesis:eu-west-1:123456789012:stream/orders", "its partition 'amazon' is not an AWS partition"),
        ("arn:aws:kinesis::123456789012:stream/orders", "it names no region"),
        ("arn:aws:kinesis:Ireland:123456789012:stream/orders", "its region 'Ireland' is not a region name"),
        ("arn:aws:kinesis:eu-west-1:1234:stream/orders", "its account '1234' is not a 12-digit account id"),
        ("arn:aws:kinesis:eu-west-1:123456789012:table/orders", "it is a 'table' resource's ARN, not a data stream's"),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/app:1700000000", "it is a stream consumer's ARN"),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/", "its stream name '' is not 1 to 128 letters"),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/or ders", "its stream name 'or ders' is not 1 to 128"),
    ],
)
def test_a_malformed_arn_is_refused_naming_the_part_that_is_wrong(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=f"{said}.*arn:<partition>:kinesis:<region>:<account>:stream/<name>"):
        check_stream(value)


def test_the_config_takes_a_name_or_an_arn_and_refuses_anything_else_naming_the_key(tmp_path: Path) -> None:
    assert directory_pipeline(tmp_path, stream=ARN).stream == ARN
    assert directory_pipeline(tmp_path, stream="orders").stream == "orders"
    entry = {"name": "p", "stream": "arn:aws:kinesis:eu-west-1:123:stream/orders", "output": str(tmp_path), "schedule": None,
             "initial_position": "TRIM_HORIZON", "state_table": "t", "spark": {}}  # fmt: skip
    loaded = parse_pipelines({"pipelines": [entry]})
    assert loaded.pipelines == () and "pipelines[0] (p).stream: " in loaded.errors[0].message
    assert "its account '123' is not a 12-digit account id" in loaded.errors[0].message
    loaded = parse_pipelines({"pipelines": [{**entry, "stream": "orders:1"}]})
    assert "is neither a Kinesis stream name" in loaded.errors[0].message


def test_a_stream_is_addressed_by_its_arn_or_its_name() -> None:
    assert address(ARN) == {"StreamARN": ARN}
    assert address("orders") == {"StreamName": "orders"}


def test_the_region_is_the_arns_and_another_one_is_refused_naming_both() -> None:
    assert check_region("orders", "us-east-1", "connection c") is None  # by name: the connection's, as ever
    assert check_region(ARN, None, "connection c") == "eu-west-1"  # the connection names none: the ARN's
    assert check_region(ARN, "eu-west-1", "connection c") == "eu-west-1"
    with pytest.raises(ValueError, match=r"stream .*orders is in region eu-west-1, and connection c names region us-east-1"):
        check_region(ARN, "us-east-1", "connection c")


def test_a_job_spec_carries_the_arn_and_refuses_a_kinesis_region_other_than_its_own() -> None:
    ranges = (SequenceRange("shardId-000000000000", 1, 2),)
    spec = JobSpec("p", ARN, 1, "/lake/p", ranges, kinesis=KinesisEndpoint("eu-west-1", None, "kinesis-replay-stream", "/w/cfg"))
    assert JobSpec.from_json(spec.to_json()) == spec
    with pytest.raises(
        JobSpecError, match=r"batch 1: stream .* is in region eu-west-1, and the job spec's kinesis.region_name names region us-east-1"
    ):
        replace(spec, kinesis=KinesisEndpoint("us-east-1"))
    data = spec.to_dict()
    data["stream"] = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/c:1"
    with pytest.raises(JobSpecError, match="stream consumer's ARN"):
        JobSpec.from_dict(data)


def test_a_cycle_addresses_the_stream_by_its_arn_in_every_call_and_lists_shards_page_by_token(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.pipeline = directory_pipeline(tmp_path / "out", stream=f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/orders")
    world.kinesis.list_page = 1  # four pages: three of them by NextToken alone
    world.produce(200)
    batch = world.cycle()
    assert batch is not None and batch.stream == world.pipeline.stream
    assert world.landed() == world.expected()
    assert {how for _, how in world.kinesis.addressed} == {"StreamARN"}  # GetRecords' too: it takes the ARN, not a name
    assert {op for op, _ in world.kinesis.addressed} == {"ListShards", "DescribeStreamSummary", "GetShardIterator", "GetRecords"}
    assert world.kinesis.calls.count("ListShards") >= 4


def test_an_arn_the_credentials_cannot_reach_is_refused_and_nothing_is_planned(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.pipeline = directory_pipeline(tmp_path / "out", stream=f"arn:aws:kinesis:{REGION}:210987654321:stream/orders")
    world.produce(20)
    with pytest.raises(AccessRefusedError, match="210987654321"):
        world.plan()
    assert world.store.get_head("orders").next_batch_id == 1 and world.store.get_head("orders").in_flight is None
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("consumer", "stream", "refused"),
    [
        ("orders-replay", "orders", None),  # a name: registered on, or found in, the pipeline's stream
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/r:1700000000", "orders", None),
        ("arn:aws:kinesis:eu-west-1:123456789012:stream/other/consumer/r:1700000000", "orders", "of stream 'other'"),
        (
            "arn:aws:kinesis:eu-west-1:123456789012:stream/orders/consumer/r:1700000000",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/orders",
            None,
        ),
        # The same stream's name in another account, or another region: another stream.
        (
            "arn:aws:kinesis:eu-west-1:210987654321:stream/orders/consumer/r:1700000000",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/orders",
            "of stream arn:aws:kinesis:eu-west-1:210987654321:stream/orders, not",
        ),
        (
            "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/r:1700000000",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/orders",
            "of stream arn:aws:kinesis:us-east-1:123456789012:stream/orders, not",
        ),
    ],
)
def test_a_consumers_arn_must_be_of_the_pipelines_stream_by_name_or_by_arn(consumer: str, stream: str, refused: str | None) -> None:
    found = streams.consumer_stream_refusal(consumer, stream)
    assert (found is None) if refused is None else (found is not None and refused in found), found
