"""Planning against kinesalite: ends found by a few probes, AT_TIMESTAMP as the local Kinesis answers it, an unreachable endpoint.

The plan's logic (exact ranges, resume, initial positions, conflicts, gone shards) is tested on the fakes, which
tests/contract holds to kinesalite and moto: tests/unit/test_plan_steps.py.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from kinesis_replay.adapters import range_bounds
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import EndpointUnreachableError
from kinesis_replay.steps.plan import plan_batch
from stack.producer import produce


def pipeline(entry: dict[str, Any], **changes: Any) -> Any:
    return parse_config({"pipelines": [{**entry, **changes}]})[0]


def arrivals(kinesis: Any, stream: str, shard: str) -> list[tuple[int, datetime]]:
    """Every record of a shard: sequence number and arrival (read in full, for the test's own answer)."""
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    found: list[tuple[int, datetime]] = []
    while iterator:
        page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
        found += [(int(r["SequenceNumber"]), r["ApproximateArrivalTimestamp"]) for r in page["Records"]]
        if not page["Records"]:
            break
        iterator = page.get("NextShardIterator")
    return found


def counting_reads(kinesis: Any) -> dict[str, int]:
    read = {"records": 0, "bytes": 0}
    real_get_records = kinesis.get_records

    def counting(**kwargs: Any) -> Any:
        page = real_get_records(**kwargs)
        read["records"] += len(page["Records"])
        read["bytes"] += sum(len(r["Data"]) for r in page["Records"])
        return page

    kinesis.get_records = counting
    return read


@pytest.mark.parametrize("hint", [True, False], ids=["with MillisBehindLatest", "by probes alone"])
def test_finding_the_end_reads_a_handful_of_records_not_the_backlog(kinesis: Any, stream: str, hint: bool) -> None:
    produce(kinesis, stream, 4000, payload_bytes=200)
    time.sleep(2.5)
    recent = produce(kinesis, stream, 8)
    shard = recent[-1].shard_id
    start = range_bounds.first_record_after(kinesis, stream, shard, None, None)
    assert start.record is not None and (start.millis_behind_latest or 0) > 2000  # kinesalite, fixed, says how far the tip is
    newest = max(seq for seq, _ in arrivals(kinesis, stream, shard))
    read = counting_reads(kinesis)
    found = range_bounds.find_end(
        kinesis, stream, shard, start.record, datetime.now(UTC), millis_behind=start.millis_behind_latest if hint else None
    )
    assert found.end == newest and not found.more_after
    backlog = sum(1 for p in recent if p.shard_id == shard) + 2000  # about half of the 4,000 are this shard's
    assert found.records_read == read["records"] <= range_bounds.PROBE_RECORDS * found.probes < backlog / 20
    assert found.probes <= (2 if hint else range_bounds.MAX_PROBES)


def test_a_capped_end_is_the_newest_record_before_the_cap(kinesis: Any, stream: str) -> None:
    for i in range(6):  # three seconds of records, in six puts
        produce(kinesis, stream, 10, start_index=10 * i)
        time.sleep(0.5)
    shard = "shardId-000000000000"
    records = arrivals(kinesis, stream, shard)
    first = range_bounds.first_record_after(kinesis, stream, shard, None, None)
    assert first.record is not None
    cap = records[0][1] + timedelta(seconds=1.5)
    found = range_bounds.find_end(kinesis, stream, shard, first.record, cap, millis_behind=first.millis_behind_latest)
    assert found.end == max(seq for seq, arrival in records if arrival < cap) and found.more_after
    assert found.end_arrival < cap and found.records_read <= range_bounds.PROBE_RECORDS * found.probes


def test_an_idle_shard_s_old_end_is_found_by_probes(kinesis: Any, stream: str) -> None:
    produced = produce(kinesis, stream, 40)
    time.sleep(3)  # the newest record is old by the time of the plan
    shard = produced[0].shard_id
    first = range_bounds.first_record_after(kinesis, stream, shard, None, None)
    assert first.record is not None
    found = range_bounds.find_end(kinesis, stream, shard, first.record, datetime.now(UTC))  # no hint: galloping back
    assert found.end == max(int(p.sequence_number) for p in produced if p.shard_id == shard) and not found.more_after


def test_an_unreachable_endpoint_fails_naming_it(store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    from botocore.config import Config

    dead = boto3.client("kinesis", endpoint_url="http://127.0.0.1:9", config=Config(retries={"max_attempts": 1}))
    with pytest.raises(EndpointUnreachableError, match=rf"stream {entry['stream']}: ListShards: cannot reach the Kinesis endpoint"):
        plan_batch(pipeline(entry), dead, store, "run-1")
    assert store.list_batches(entry["name"]) == []


def test_records_put_together_share_a_millisecond_and_the_end_is_still_the_newest(kinesis: Any, stream: str) -> None:
    produced = produce(kinesis, stream, 400)  # one PutRecords: a shard's records arrive a few to a millisecond
    shard = produced[0].shard_id
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator, Limit=10_000)["Records"]
    shared = [b for a, b in itertools.pairwise(records) if a["ApproximateArrivalTimestamp"] == b["ApproximateArrivalTimestamp"]]
    assert shared, "no two records share a millisecond"
    middle = shared[len(shared) // 2]  # a start whose millisecond an earlier record shares
    found = range_bounds.find_end(kinesis, stream, shard, middle, datetime.now(UTC), millis_behind=0)
    assert found.end == int(records[-1]["SequenceNumber"]) and not found.more_after


def test_the_local_kinesis_answers_at_timestamp_with_the_first_record_that_new(kinesis: Any, stream: str) -> None:
    """Planning's probes rely on AT_TIMESTAMP as Kinesis answers it; the local stack's kinesalite finds the record by a
    search over the shard's sequence index (local_stack.py, fix 1), so check it against the shard read in full."""
    for i in range(8):  # records over 8 puts a few milliseconds apart, some sharing a millisecond, on every shard
        produce(kinesis, stream, 12, start_index=12 * i)
        time.sleep(0.003 * i)
    shard = "shardId-000000000001"
    records = arrivals(kinesis, stream, shard)
    assert len({arrival for _, arrival in records}) > 4, "too few distinct arrivals to search"
    moments = sorted({arrival + delta for _, arrival in records for delta in (timedelta(0), timedelta(milliseconds=1))})
    moments.insert(0, records[0][1] - timedelta(seconds=5))
    for moment in moments:
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="AT_TIMESTAMP", Timestamp=moment)
        page = kinesis.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)
        expected = next((seq for seq, arrival in records if arrival >= moment), None)
        got = int(page["Records"][0]["SequenceNumber"]) if page["Records"] else None
        assert got == expected, f"AT_TIMESTAMP {moment.isoformat()}: {got}, not {expected}"
        if expected is None:
            assert page["MillisBehindLatest"] == 0 and page.get("NextShardIterator")  # the tip, not a wait for a record


def test_a_stream_named_by_its_arn_is_planned_and_read_through_the_proxy_as_by_its_name(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], stack: Any
) -> None:
    """kinesalite refuses StreamARN; the stack's proxy names the stream for it (tests/stack/kinesis_proxy.by_name) after
    the checks Kinesis makes: an ARN of another account, or of another region than the call is signed for, is refused."""
    from botocore.exceptions import ClientError

    from kinesis_replay.adapters.kinesis_client import list_shards
    from kinesis_replay.adapters.range_reader import iterate_range
    from stack.kinesis_proxy import KinesisProxy

    produced = produce(kinesis, entry["stream"], 120)
    arn = kinesis.describe_stream_summary(StreamName=entry["stream"])["StreamDescriptionSummary"]["StreamARN"]
    running = KinesisProxy(stack.kinesis_url).start()
    try:
        client = boto3.client("kinesis", endpoint_url=running.url)
        by_arn = pipeline(entry, stream=arn)
        batch = plan_batch(by_arn, client, store, "run-1").batch
        assert batch is not None and batch.stream == arn
        ends = {}
        for p in produced:
            low, high = ends.get(p.shard_id, (int(p.sequence_number),) * 2)
            ends[p.shard_id] = (min(low, int(p.sequence_number)), max(high, int(p.sequence_number)))
        assert {r.shard_id: (r.start, r.end) for r in batch.ranges} == ends
        read = [r["SequenceNumber"] for rng in batch.ranges for page in iterate_range(client, arn, rng, by_arn.read) for r in page]
        assert sorted(read) == sorted(p.sequence_number for p in produced)
        assert sum(c.get_records for c in running.counters.values()) > 0  # through the proxy, by ARN
        assert len(list_shards(client, arn)) == 4
        account, region = arn.replace(":000000000000:", ":210987654321:"), arn.replace(":us-east-1:", ":eu-west-1:")
        with pytest.raises(ClientError, match="AccessDenied"):
            client.describe_stream_summary(StreamARN=account)
        with pytest.raises(ClientError, match="ResourceNotFound"):
            client.describe_stream_summary(StreamARN=region)
    finally:
        running.stop()
