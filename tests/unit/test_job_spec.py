"""The job spec, the one contract between Airflow's process and Spark's: exact round trips, clear refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kinesis_replay.core.config import PayloadConfig, ReadConfig, parse_config
from kinesis_replay.core.job_spec import VERSION, JobSpec, JobSpecError, KinesisEndpoint, S3Endpoint
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus

BIG = 10**55
PIPELINE = parse_config(
    {
        "pipelines": [
            {"name": "p", "stream": "stream", "output": "/lake/p", "schedule": None, "initial_position": "TRIM_HORIZON",
             "state_table": "t", "spark": {"master": "local[1]"}, "read": {"bytes_per_second": 524288},
             "payload": {"format": "json", "schema": "n INT"}}
        ]
    }
)[0]  # fmt: skip
BATCH = Batch(
    "p", 3, BatchStatus.PLANNED,
    (SequenceRange("shardId-000000000000", BIG, BIG + 9, BIG - 1, False, datetime(2026, 1, 1, tzinfo=UTC)),
     SequenceRange("shardId-000000000001", BIG, BIG + 5, None, True)),
    "stream", "run", datetime(2026, 1, 1, 0, 5, tzinfo=UTC),
)  # fmt: skip


def spec() -> JobSpec:
    kinesis = KinesisEndpoint("eu-west-1", "http://127.0.0.1:4567")
    return JobSpec.for_batch(
        PIPELINE, BATCH, kinesis, frozenset({"shardId-000000000000"}), s3=S3Endpoint("eu-west-1", "http://127.0.0.1:5000")
    )


def test_a_batch_spec_carries_the_ranges_and_the_pipelines_reading_rules_and_nothing_of_the_state_table() -> None:
    s = spec()
    assert (s.pipeline_name, s.stream, s.batch_id, s.output, s.planned_at) == ("p", "stream", 3, "/lake/p", BATCH.created_at)
    assert s.ranges == BATCH.ranges
    assert s.read == PIPELINE.read and s.read.bytes_per_second == 524288
    assert s.payload == PayloadConfig("json", "n INT")
    assert s.version == VERSION
    assert set(s.to_dict()) == {"version", "pipeline", "stream", "batch_id", "output", "ranges", "accept_gaps", "planned_at",
                                "kinesis", "s3", "read", "payload", "output_format", "estimated_bytes", "retention_seconds"}  # fmt: skip
    assert s.to_dict()["s3"] == {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:5000"}  # the job's writes go there


def test_the_json_round_trip_is_exact() -> None:
    s = spec()
    assert JobSpec.from_json(s.to_json()) == s
    bare = JobSpec("p", "stream", 1, "/lake/p", (SequenceRange("s0", 1, 2),))
    assert JobSpec.from_json(bare.to_json()) == bare
    assert bare.read == ReadConfig() and bare.kinesis == KinesisEndpoint() and bare.s3 == S3Endpoint() and bare.retention is None
    kept = JobSpec.for_batch(PIPELINE, BATCH, KinesisEndpoint(), retention=timedelta(hours=168))
    assert JobSpec.from_json(kept.to_json()) == kept and kept.to_dict()["retention_seconds"] == 168 * 3600


def test_an_endpoint_only_airflow_can_reach_is_replaced_not_mutated() -> None:
    s = spec()
    in_aws = replace(s, kinesis=replace(s.kinesis, endpoint_url=None))
    assert in_aws.kinesis == KinesisEndpoint("eu-west-1", None)
    assert s.kinesis.endpoint_url == "http://127.0.0.1:4567"


@pytest.mark.parametrize(
    ("version", "said"),
    [(None, "no version"), (VERSION - 1, f"version {VERSION - 1}"), (VERSION + 1, f"version {VERSION + 1}"), ("1", "version '1'")],
)
def test_a_spec_of_another_release_is_refused_naming_both_versions(version: object, said: str) -> None:
    data = spec().to_dict()
    if version is None:
        del data["version"]
    else:
        data["version"] = version
    with pytest.raises(JobSpecError, match=f"batch.json has {said}.*reads version {VERSION} only.*different kinesis-replay releases"):
        JobSpec.from_json(json.dumps(data), "batch.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("ranges"), "batch.json lacks ranges"),
        (lambda d: d.update(ranges=[]), "batch 3: the job spec has no ranges"),
        (lambda d: d["ranges"][0].update(start="x"), "batch.json is malformed: start of shardId-000000000000 must be a decimal"),
        (lambda d: d["read"].update(bytes_per_secnd=1), "batch.json: read has unknown field.s. bytes_per_secnd"),
        (lambda d: d.update(kinesis=[]), "batch.json: kinesis must be a JSON object, got list"),
    ],
)
def test_a_malformed_spec_is_refused_on_the_driver_naming_what_is_wrong(change: object, message: str) -> None:
    data = spec().to_dict()
    change(data)  # type: ignore[operator]
    with pytest.raises(JobSpecError, match=message):
        JobSpec.from_json(json.dumps(data), "batch.json")


def test_text_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(JobSpecError, match=r"batch\.json is not JSON"):
        JobSpec.from_json("{", "batch.json")
    with pytest.raises(JobSpecError, match=r"batch\.json must be a JSON object, got list"):
        JobSpec.from_json("[]", "batch.json")
