"""Planning against kinesalite and the moto server: exact ranges, ends found by a few probes, resume, initial positions, bad input."""

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
from kinesis_replay.core.errors import ConfigError, EndpointUnreachableError, ParameterError, StateConflictError, StreamNotFoundError
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.steps.plan import plan_batch
from stack.producer import produce


def pipeline(entry: dict[str, Any], **changes: Any) -> Any:
    return parse_config({"pipelines": [{**entry, **changes}]})[0]


def ends_by_shard(produced: list[Any]) -> dict[str, tuple[int, int]]:
    ends: dict[str, tuple[int, int]] = {}
    for p in produced:
        seq = int(p.sequence_number)
        low, high = ends.get(p.shard_id, (seq, seq))
        ends[p.shard_id] = (min(low, seq), max(high, seq))
    return ends


def test_a_plan_covers_exactly_the_records_that_exist(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produced = produce(kinesis, entry["stream"], 500)
    result = plan_batch(pipeline(entry), kinesis, store, "run-1")
    assert result.batch is not None and not result.resumed and result.action == "replay"
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(produced)
    assert store.get_batch(entry["name"], 1).ranges == result.batch.ranges  # stored before anything is read


def test_nothing_new_plans_no_batch(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    result = plan_batch(pipeline(entry), kinesis, store, "run-1")
    assert result.batch is None and store.get_head(entry["name"]).next_batch_id == 1


def test_a_batch_in_flight_is_resumed_with_the_same_ranges(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produce(kinesis, entry["stream"], 100)
    first = plan_batch(pipeline(entry), kinesis, store, "run-1")
    produce(kinesis, entry["stream"], 100)  # more arrives; the batch in flight must not grow
    again = plan_batch(pipeline(entry), kinesis, store, "run-2")
    assert again.resumed and again.batch is not None and first.batch is not None
    assert (again.batch.batch_id, again.batch.ranges, again.batch.run_id) == (1, first.batch.ranges, "run-1")


def test_a_concurrent_plan_fails_and_names_the_pipeline(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produce(kinesis, entry["stream"], 50)

    class SlowStore:
        """The store as seen by a run that read the head just before another run planned."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def get_head(self, name: str) -> Any:
            head = store.get_head(name)
            plan_batch(pipeline(entry), kinesis, store, "the-other-run")
            return head

    with pytest.raises(StateConflictError, match=rf"pipeline '{entry['name']}': another run planned a batch"):
        plan_batch(pipeline(entry), kinesis, SlowStore(), "this-run")  # type: ignore[arg-type]
    assert [b.run_id for b in store.list_batches(entry["name"])] == ["the-other-run"]


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


def test_latest_starts_at_the_first_plan_and_stays_there(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produce(kinesis, entry["stream"], 100)  # before the pipeline started: LATEST skips these
    p = pipeline(entry, initial_position="LATEST")
    assert plan_batch(p, kinesis, store, "run-1").batch is None
    starts = {s.start_position for s in store.get_shards(entry["name"]).values()}
    assert len(starts) == 1 and next(iter(starts)).kind == "AT_TIMESTAMP"  # type: ignore[union-attr]
    time.sleep(1.1)  # arrival times have millisecond resolution; keep clear of the resolved start
    later = produce(kinesis, entry["stream"], 60)
    result = plan_batch(p, kinesis, store, "run-2")
    assert result.batch is not None
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(later)


def test_at_timestamp_starts_at_the_configured_time(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produce(kinesis, entry["stream"], 80)
    time.sleep(1.1)
    cut = datetime.now(UTC)
    time.sleep(0.1)
    later = produce(kinesis, entry["stream"], 40)
    result = plan_batch(pipeline(entry, initial_position="AT_TIMESTAMP", initial_timestamp=cut.isoformat()), kinesis, store, "run-1")
    assert result.batch is not None
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(later)


def test_an_initial_timestamp_to_come_is_refused_naming_it_and_stores_nothing(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]
) -> None:
    """Kinesis answers GetShardIterator(AT_TIMESTAMP) at a time to come with InvalidArgumentException: once a raw error."""
    produce(kinesis, entry["stream"], 20)
    typo = datetime.now(UTC).replace(year=2062)
    with pytest.raises(ConfigError, match=r"initial_timestamp 2062-.* is after this plan .*was the year mistyped") as caught:
        plan_batch(pipeline(entry, initial_position="AT_TIMESTAMP", initial_timestamp=typo.isoformat()), kinesis, store, "run-1")
    assert not caught.value.retryable
    assert store.get_shards(entry["name"]) == {} and store.list_batches(entry["name"]) == []


def test_a_missing_stream_fails_naming_it_and_writes_nothing(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    with pytest.raises(StreamNotFoundError, match="stream no-such-stream: ListShards"):
        plan_batch(pipeline(entry, stream="no-such-stream"), kinesis, store, "run-1")
    assert store.get_head(entry["name"]).version == 0 and store.list_batches(entry["name"]) == []


def test_an_unreachable_endpoint_fails_naming_it(store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    from botocore.config import Config

    dead = boto3.client("kinesis", endpoint_url="http://127.0.0.1:9", config=Config(retries={"max_attempts": 1}))
    with pytest.raises(EndpointUnreachableError, match=rf"stream {entry['stream']}: ListShards: cannot reach the Kinesis endpoint"):
        plan_batch(pipeline(entry), dead, store, "run-1")
    assert store.list_batches(entry["name"]) == []


def test_a_planned_batch_is_stored_as_planned(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]) -> None:
    produce(kinesis, entry["stream"], 20)
    plan_batch(pipeline(entry), kinesis, store, "run-1")
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.PLANNED and batch.run_id == "run-1" and store.get_head(entry["name"]).in_flight == 1


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


def test_a_shard_gone_from_the_stream_before_it_was_read_to_its_end_is_a_loss_to_acknowledge(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any]
) -> None:
    """Kinesis drops a closed shard once its records are past retention. A parent the pipeline had not drained then
    vanished from the listing, and its children were planned as if nothing had been lost."""
    from kinesis_replay.core.errors import DataLossError
    from kinesis_replay.core.state import Gap, ShardState

    store.put_shards_if_absent(entry["name"], [ShardState("shardId-000000000099", checkpoint=12345)])  # read up to 12345, then gone

    with pytest.raises(DataLossError, match=r"shards shardId-000000000099 \(checkpoint 12345\) are no longer in the stream") as caught:
        plan_batch(pipeline(entry), kinesis, store, "run-1")
    assert '{"acknowledge_data_loss": ["shardId-000000000099"]}' in str(caught.value) and not caught.value.retryable
    assert store.list_batches(entry["name"]) == [] and not store.get_shards(entry["name"])["shardId-000000000099"].finished
    with pytest.raises(ParameterError, match="acknowledge_data_loss names shardId-000000000098"):  # no shard of the pipeline's
        plan_batch(pipeline(entry), kinesis, store, "run-2", acknowledged=frozenset({"shardId-000000000098"}))

    # Acknowledged, with nothing new to plan: no batch to record the loss in, so the shard stays as it was.
    idle = plan_batch(pipeline(entry), kinesis, store, "run-3", acknowledged=frozenset({"shardId-000000000099"}))
    assert idle.batch is None and not store.get_shards(entry["name"])["shardId-000000000099"].finished

    produce(kinesis, entry["stream"], 40)
    result = plan_batch(pipeline(entry), kinesis, store, "run-3", acknowledged=frozenset({"shardId-000000000099"}))
    assert result.batch is not None and len(result.batch.ranges) == 4  # the stream's own shards, planned as ever
    gap = Gap("shardId-000000000099", 12345, None, acknowledged_by="run-3", detected="plan")
    assert result.batch.gaps == (gap,) and store.get_batch(entry["name"], 1).gaps == (gap,)  # in the ledger
    assert store.get_shards(entry["name"])["shardId-000000000099"].finished
