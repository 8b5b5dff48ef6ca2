"""The Kinesis calls the library makes, answered by the in-memory stream and by the local stack's kinesalite alike.

tests/fakes/memory_kinesis.py is what the steps' unit tests plan and read from; these tests hold it to kinesalite
(with the local stack's fixes), so the fake cannot drift: shard listings before and after splits and merges,
partition-key routing, every iterator type the library asks for, pages, MillisBehindLatest at the tip, and a closed
shard read to its end. Trimming by retention cannot be checked on kinesalite (a day at least), so tests that trim
use the fake's ``trim`` knowingly.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_replay.adapters import kinesis_client, range_bounds
from stack.producer import produce


def settle(client: Any, stream: str) -> None:
    """kinesalite takes a moment to finish a reshard (UPDATING); the fake is done at once."""
    if hasattr(client, "get_waiter"):
        client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def read_all(client: Any, stream: str, shard_id: str, **position: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every record from a position, and the pages read, until an empty page at the tip or the shard's end."""
    iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard_id, **(position or {"ShardIteratorType": "TRIM_HORIZON"}))
    records, pages = [], []
    for _ in range(100):
        page = client.get_records(ShardIterator=iterator["ShardIterator"] if isinstance(iterator, dict) else iterator, Limit=10_000)
        pages.append(page)
        records += page["Records"]
        iterator = page.get("NextShardIterator")
        if not iterator or (not page["Records"] and page["MillisBehindLatest"] == 0 and not _closed(client, stream, shard_id)):
            break
    return records, pages


def _closed(client: Any, stream: str, shard_id: str) -> bool:
    shard = next(s for s in client.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == shard_id)
    return "EndingSequenceNumber" in shard["SequenceNumberRange"]


def test_a_new_stream_lists_its_open_shards_covering_every_hash_key(stream_client: Any) -> None:
    client, stream = stream_client
    shards = client.list_shards(StreamName=stream)["Shards"]
    assert [s["ShardId"] for s in shards] == [f"shardId-{i:012d}" for i in range(4)]
    assert all("EndingSequenceNumber" not in s["SequenceNumberRange"] and "ParentShardId" not in s for s in shards)
    ranges = sorted((int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"])) for s in shards)
    assert ranges[0][0] == 0 and ranges[-1][1] == 2**128 - 1 and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    summary = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    assert summary["RetentionPeriodHours"] == 24 and summary["StreamCreationTimestamp"].tzinfo is not None
    listed = kinesis_client.list_shards(client, stream)
    assert [s.shard_id for s in listed] == [s["ShardId"] for s in shards] and not any(s.is_closed for s in listed)


def test_records_go_to_the_shard_whose_hash_range_holds_their_key_s_md5_and_read_back_in_order(stream_client: Any) -> None:
    client, stream = stream_client
    produced = produce(client, stream, 60)
    shards = client.list_shards(StreamName=stream)["Shards"]
    for p in produced:
        key = int(hashlib.md5(p.partition_key.encode()).hexdigest(), 16)
        (holder,) = [
            s["ShardId"] for s in shards if int(s["HashKeyRange"]["StartingHashKey"]) <= key <= int(s["HashKeyRange"]["EndingHashKey"])
        ]
        assert p.shard_id == holder
    for shard in shards:
        records, pages = read_all(client, stream, shard["ShardId"])
        mine = [p for p in produced if p.shard_id == shard["ShardId"]]
        assert [r["SequenceNumber"] for r in records] == [p.sequence_number for p in mine]
        assert [(r["PartitionKey"], r["Data"]) for r in records] == [(p.partition_key, p.data) for p in mine]
        seqs = [int(r["SequenceNumber"]) for r in records]
        assert {len(r["SequenceNumber"]) for r in records} == {56}
        assert seqs == sorted(seqs) and all(int(shard["SequenceNumberRange"]["StartingSequenceNumber"]) <= s for s in seqs)
        assert pages[-1]["Records"] == [] and pages[-1]["MillisBehindLatest"] == 0 and pages[-1]["NextShardIterator"]


def test_every_iterator_type_the_library_uses_starts_where_kinesis_says(stream_client: Any) -> None:
    client, stream = stream_client
    produce(client, stream, 40)
    time.sleep(0.05)
    later = produce(client, stream, 40, start_index=40)
    shard = later[0].shard_id
    records, _ = read_all(client, stream, shard)
    seqs = [r["SequenceNumber"] for r in records]
    middle = len(seqs) // 2

    def first(**position: Any) -> str | None:
        iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard, **position)["ShardIterator"]
        page = client.get_records(ShardIterator=iterator, Limit=1)
        return page["Records"][0]["SequenceNumber"] if page["Records"] else None

    assert first(ShardIteratorType="TRIM_HORIZON") == seqs[0]
    assert first(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[middle]) == seqs[middle]
    assert first(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[middle]) == seqs[middle + 1]
    assert first(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[-1]) is None
    assert first(ShardIteratorType="LATEST") is None
    cut = next(r for r in records if r["SequenceNumber"] == next(p.sequence_number for p in later if p.shard_id == shard))
    at = cut["ApproximateArrivalTimestamp"]
    assert first(ShardIteratorType="AT_TIMESTAMP", Timestamp=at) == next(
        r["SequenceNumber"] for r in records if r["ApproximateArrivalTimestamp"] >= at
    )
    time.sleep(0.05)
    after_all = records[-1]["ApproximateArrivalTimestamp"] + timedelta(milliseconds=1)
    iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="AT_TIMESTAMP", Timestamp=after_all)
    page = client.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)
    assert page["Records"] == [] and page["MillisBehindLatest"] == 0 and page["NextShardIterator"]  # the tip, not a wait
    with pytest.raises(ClientError) as raised:  # a time to come is refused
        client.get_shard_iterator(
            StreamName=stream, ShardId=shard, ShardIteratorType="AT_TIMESTAMP", Timestamp=after_all + timedelta(hours=1)
        )
    assert raised.value.response["Error"]["Code"] == "InvalidArgumentException"
    newer = produce(client, stream, 40, start_index=80)
    assert page["NextShardIterator"] and any(p.shard_id == shard for p in newer)
    following = client.get_records(ShardIterator=page["NextShardIterator"], Limit=10_000)["Records"]
    assert [r["SequenceNumber"] for r in following] == [p.sequence_number for p in newer if p.shard_id == shard]


def test_a_page_says_how_far_its_last_record_is_behind_the_shard_s_newest(stream_client: Any) -> None:
    client, stream = stream_client
    produce(client, stream, 40)
    time.sleep(0.3)
    produce(client, stream, 40, start_index=40)
    shard = "shardId-000000000000"
    records, _ = read_all(client, stream, shard)
    iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    page = client.get_records(ShardIterator=iterator, Limit=1)
    expected = (records[-1]["ApproximateArrivalTimestamp"] - page["Records"][0]["ApproximateArrivalTimestamp"]).total_seconds() * 1000
    assert abs(page["MillisBehindLatest"] - expected) <= 1 and page["MillisBehindLatest"] >= 250
    rest = client.get_records(ShardIterator=page["NextShardIterator"], Limit=10_000)
    assert rest["MillisBehindLatest"] == 0 and len(rest["Records"]) == len(records) - 1


def test_a_split_closes_the_parent_above_its_records_and_its_children_start_above_its_end(stream_client: Any) -> None:
    client, stream = stream_client
    before = produce(client, stream, 80)
    parent = client.list_shards(StreamName=stream)["Shards"][0]
    low, high = int(parent["HashKeyRange"]["StartingHashKey"]), int(parent["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=stream, ShardToSplit=parent["ShardId"], NewStartingHashKey=str((low + high) // 2))
    settle(client, stream)
    after = produce(client, stream, 80, start_index=80)
    shards = {s["ShardId"]: s for s in client.list_shards(StreamName=stream)["Shards"]}
    closed = shards[parent["ShardId"]]
    end = int(closed["SequenceNumberRange"]["EndingSequenceNumber"])
    children = [s for s in shards.values() if s.get("ParentShardId") == parent["ShardId"]]
    assert sorted(s["ShardId"] for s in children) == ["shardId-000000000004", "shardId-000000000005"]
    assert all("AdjacentParentShardId" not in s for s in children)
    assert sorted((s["HashKeyRange"]["StartingHashKey"], s["HashKeyRange"]["EndingHashKey"]) for s in children) == [
        (str(low), str((low + high) // 2 - 1)), (str((low + high) // 2), str(high)),
    ]  # fmt: skip
    assert all(int(s["SequenceNumberRange"]["StartingSequenceNumber"]) > end for s in children)
    mine = [p for p in before if p.shard_id == parent["ShardId"]]
    assert mine and all(int(p.sequence_number) < end for p in mine) and all(p.shard_id != parent["ShardId"] for p in after)
    records, pages = read_all(client, stream, parent["ShardId"])
    assert [r["SequenceNumber"] for r in records] == [p.sequence_number for p in mine]  # every record once
    assert "NextShardIterator" not in pages[-1] or pages[-1]["NextShardIterator"] is None  # then the shard's end
    assert pages[-1]["Records"] == []
    listed = {s.shard_id: s for s in kinesis_client.list_shards(client, stream)}
    assert listed[parent["ShardId"]].ending_sequence_number == end and listed["shardId-000000000004"].parent_shard_ids == (
        parent["ShardId"],
    )
    following = range_bounds.first_record_after(client, stream, parent["ShardId"], int(mine[-1].sequence_number), None, closed=True)
    assert following.record is None and following.shard_ended and not following.checkpoint_missing


def test_a_merge_closes_both_parents_and_names_them_in_the_child(stream_client: Any) -> None:
    client, stream = stream_client
    client.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000001", AdjacentShardToMerge="shardId-000000000002")
    settle(client, stream)
    shards = {s["ShardId"]: s for s in client.list_shards(StreamName=stream)["Shards"]}
    child = shards["shardId-000000000004"]
    assert (child.get("ParentShardId"), child.get("AdjacentParentShardId")) == ("shardId-000000000001", "shardId-000000000002")
    assert (child["HashKeyRange"]["StartingHashKey"], child["HashKeyRange"]["EndingHashKey"]) == (
        shards["shardId-000000000001"]["HashKeyRange"]["StartingHashKey"], shards["shardId-000000000002"]["HashKeyRange"]["EndingHashKey"],
    )  # fmt: skip
    ends = [int(shards[p]["SequenceNumberRange"]["EndingSequenceNumber"]) for p in ("shardId-000000000001", "shardId-000000000002")]
    assert int(child["SequenceNumberRange"]["StartingSequenceNumber"]) > max(ends)
    assert [s.shard_id for s in kinesis_client.list_shards(client, stream) if not s.is_closed] == [
        "shardId-000000000000", "shardId-000000000003", "shardId-000000000004",
    ]  # fmt: skip


def test_a_missing_stream_is_resource_not_found(stream_client: Any) -> None:
    client, _ = stream_client
    for call in (
        lambda: client.list_shards(StreamName="no-such-stream"),
        lambda: client.describe_stream_summary(StreamName="no-such-stream"),
        lambda: client.get_shard_iterator(StreamName="no-such-stream", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"),
    ):
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"
