"""Planning a stream of 10,000 busy shards, a split and a merge among them, through the planner the DAG's plan task calls
and a real boto3 client answered with no socket (tests/fakes/socketless_kinesis.py), at Kinesis's limits on a virtual
clock, with the in-memory state store: what each shard costs in calls, and every range against the stream's arithmetic.

The planner's CPU, memory and wall time at this width are measured by `make bench-planning`, not here.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fakes.memory_store import MemoryStateStore
from fakes.replay import directory_pipeline
from fakes.socketless_kinesis import LIST_PAGE, ShardSpec, SocketlessKinesis, VirtualClock
from kinesis_replay.adapters import kinesis_client, range_bounds
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.state import Batch, BatchStatus
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.plan import plan_batch

SHARDS = 10_000
CALLS_A_SHARD = 5  # GetShardIterator and GetRecords together, the most a shard's plan may take


def wide_pipeline(tmp_path: Path, stream: str) -> PipelineConfig:
    """The pipeline as deployed: Kinesis's per-shard budgets and the default plan_concurrency (no UNPACED reads)."""
    return directory_pipeline(tmp_path / "out", name="wide", stream=stream, read={})


def expected_ranges(stream: SocketlessKinesis, shards: list[ShardSpec]) -> dict[str, tuple[int, int, bool]]:
    return {s.shard_id: stream.expected_range(s) for s in shards}


def planned(batch: Batch | None) -> dict[str, tuple[int, int, bool]]:
    assert batch is not None
    return {r.shard_id: (r.start, r.end, r.to_shard_end) for r in batch.ranges}


def children_of(stream: SocketlessKinesis) -> dict[str, tuple[str, ...]]:
    return {s.shard_id: s.parents for s in stream.shards if s.parents}


def test_10000_busy_shards_are_planned_within_kinesis_limits_and_every_range_is_the_stream_s(tmp_path: Path) -> None:
    stream = SocketlessKinesis("wide", shards=SHARDS)
    store = MemoryStateStore()
    result = plan_batch(wide_pipeline(tmp_path, "wide"), stream.client(), store, "run-1", now=stream.now, pacing=stream.pacing)

    assert stream.throttled == 0
    assert stream.calls["ListShards"] == SHARDS // LIST_PAGE
    per_shard = [a + b for a, b in zip(stream.shard_calls["GetShardIterator"], stream.shard_calls["GetRecords"], strict=True)]
    assert max(per_shard) <= CALLS_A_SHARD
    children = children_of(stream)
    readable = [s for s in stream.shards if s.shard_id not in children]
    assert planned(result.batch) == expected_ranges(stream, readable)  # the split and merged parents to their ends
    assert sum(1 for s in readable if s.closed) == 3
    assert dict(result.waiting) == children  # the children wait for their parents to be drained
    assert min(per_shard[: len(readable)]) >= 2 and sum(per_shard[len(readable) :]) == 0
    assert result.batch is not None and store.get_batch("wide", 1).ranges == result.batch.ranges


def commit_as_read(pipeline: PipelineConfig, store: Any, stream: SocketlessKinesis, batch: Batch) -> None:
    """Commit the batch as if replayed (no Spark): verify's write of the manifest the arithmetic gives, then the commit."""
    written = batch.with_status(BatchStatus.WRITTEN, result=stream.replayed(pipeline.name, batch))
    store.update_batch(written, BatchStatus.PLANNED)
    commit_batch(pipeline, store, batch.batch_id, now=stream.now)


def test_once_the_parents_are_committed_the_next_plan_finishes_them_and_plans_their_children(tmp_path: Path) -> None:
    stream = SocketlessKinesis("narrow", shards=12, records_per_shard=40)
    pipeline, store = wide_pipeline(tmp_path, "narrow"), MemoryStateStore()
    first = plan_batch(pipeline, stream.client(), store, "run-1", now=stream.now, pacing=stream.pacing)
    assert first.batch is not None
    commit_as_read(pipeline, store, stream, first.batch)

    second = plan_batch(pipeline, stream.client(), store, "run-2", now=stream.now, pacing=stream.pacing)

    children = children_of(stream)
    assert planned(second.batch) == expected_ranges(stream, [s for s in stream.shards if s.shard_id in children])
    assert second.waiting == () and stream.throttled == 0
    shards = store.get_shards("wide")
    assert {sid for sid, s in shards.items() if s.finished} == {p for parents in children.values() for p in parents}
    assert {sid: shards[sid].parent_shard_ids for sid in children} == children


def test_the_listing_is_kinesis_s_after_a_split_and_a_merge(tmp_path: Path) -> None:
    stream = SocketlessKinesis("narrow", shards=2_003, records_per_shard=40)
    client = stream.client()
    listed = kinesis_client.list_shards(client, "narrow")
    assert [s.shard_id for s in listed] == [s.shard_id for s in stream.shards] and stream.calls["ListShards"] == 3
    page = client.list_shards(StreamName="narrow")
    assert len(page["Shards"]) == LIST_PAGE and page["NextToken"]
    with pytest.raises(ClientError) as refused:  # Kinesis refuses a StreamName beside a NextToken
        client.list_shards(StreamName="narrow", NextToken=page["NextToken"])
    assert refused.value.response["Error"]["Code"] == "InvalidArgumentException"
    open_ranges = sorted(s.hash_range for s in stream.shards if not s.closed)
    assert open_ranges[0][0] == 0 and open_ranges[-1][1] == 2**128 - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(open_ranges))  # every hash key once
    by_id = {s.shard_id: s for s in listed}
    for child, parents in children_of(stream).items():
        assert by_id[child].parent_shard_ids == parents
        for parent in parents:
            end = by_id[parent].ending_sequence_number
            assert end is not None and by_id[child].starting_sequence_number > end
            shard = stream.shards[int(parent.removeprefix("shardId-"))]
            assert shard.sequence_number(shard.count - 1) < end
            drained = range_bounds.first_record_after(client, "narrow", parent, shard.sequence_number(shard.count - 1), None, closed=True)
            assert drained.record is None and drained.shard_ended and not drained.checkpoint_missing


def test_a_sixth_call_within_a_second_is_throttled_as_kinesis_throttles_and_the_library_waits_it_out() -> None:
    clock = VirtualClock()
    stream = SocketlessKinesis("narrow", shards=8, records_per_shard=40, clock=clock)
    client = stream.client()
    iterator = client.get_shard_iterator(StreamName="narrow", ShardId="shardId-000000000005", ShardIteratorType="TRIM_HORIZON")
    for _ in range(5):
        client.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)
    with pytest.raises(ClientError) as throttled:
        client.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)
    assert throttled.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400 and stream.throttled == 1
    stats = kinesis_client.ReadStats()
    page: Any = kinesis_client.call(
        client.get_records, "a sixth GetRecords", kinesis_client.ReadConfig(), stats, clock.sleep, ShardIterator=iterator["ShardIterator"]
    )
    assert stats.throttled >= 1 and page["Records"][0]["SequenceNumber"] == str(stream.shards[5].starting_sequence_number)
