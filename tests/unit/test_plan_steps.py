"""Planning on the fakes (an in-memory stream and state store, a local directory output): exact ranges, resume,
initial positions, conflicts, resharding and shards gone before they were drained.

The fakes are held to kinesalite and DynamoDB on moto by tests/contract; what needs the real endpoints (the probes'
cost on kinesalite, an unreachable endpoint) is in tests/integration/test_planner.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fakes.memory_kinesis import ManualClock, MemoryKinesis
from fakes.memory_store import MemoryStateStore
from fakes.replay import directory_pipeline
from kinesis_replay.core.errors import ConfigError, DataLossError, ParameterError, StateConflictError, StreamNotFoundError
from kinesis_replay.core.state import BatchStatus, Gap, ShardState
from kinesis_replay.steps.plan import plan_batch
from stack.producer import produce

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def kinesis(clock: ManualClock) -> MemoryKinesis:
    client = MemoryKinesis(clock)
    client.create_stream(StreamName="orders", ShardCount=4)
    clock.advance(seconds=1)
    return client


@pytest.fixture
def store() -> MemoryStateStore:
    return MemoryStateStore()


def pipeline(tmp_path: Path, **changes: Any) -> Any:
    return directory_pipeline(tmp_path / "out", **changes)


def ends_by_shard(produced: list[Any]) -> dict[str, tuple[int, int]]:
    ends: dict[str, tuple[int, int]] = {}
    for p in produced:
        seq = int(p.sequence_number)
        low, high = ends.get(p.shard_id, (seq, seq))
        ends[p.shard_id] = (min(low, seq), max(high, seq))
    return ends


def test_a_plan_covers_exactly_the_records_that_exist(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    produced = produce(kinesis, "orders", 500)
    result = plan_batch(pipeline(tmp_path), kinesis, store, "run-1", now=clock.advance(seconds=1))
    assert result.batch is not None and not result.resumed and result.action == "replay"
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(produced)
    assert store.get_batch("orders", 1).ranges == result.batch.ranges  # stored before anything is read


def test_nothing_new_plans_no_batch(kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path) -> None:
    result = plan_batch(pipeline(tmp_path), kinesis, store, "run-1", now=clock())
    assert result.batch is None and store.get_head("orders").next_batch_id == 1


def test_a_batch_in_flight_is_resumed_with_the_same_ranges(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    produce(kinesis, "orders", 100)
    first = plan_batch(pipeline(tmp_path), kinesis, store, "run-1", now=clock.advance(seconds=1))
    produce(kinesis, "orders", 100)  # more arrives; the batch in flight must not grow
    again = plan_batch(pipeline(tmp_path), kinesis, store, "run-2", now=clock.advance(seconds=1))
    assert again.resumed and again.batch is not None and first.batch is not None
    assert (again.batch.batch_id, again.batch.ranges, again.batch.run_id) == (1, first.batch.ranges, "run-1")


def test_a_concurrent_plan_fails_and_names_the_pipeline(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    produce(kinesis, "orders", 50)
    now = clock.advance(seconds=1)

    class SlowStore:
        """The store as seen by a run that read the head just before another run planned."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def get_head(self, name: str) -> Any:
            head = store.get_head(name)
            plan_batch(pipeline(tmp_path), kinesis, store, "the-other-run", now=now)
            return head

    with pytest.raises(StateConflictError, match=r"pipeline 'orders': another run planned a batch"):
        plan_batch(pipeline(tmp_path), kinesis, SlowStore(), "this-run", now=now)  # type: ignore[arg-type]
    assert [b.run_id for b in store.list_batches("orders")] == ["the-other-run"]


def test_latest_starts_at_the_first_plan_and_stays_there(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    produce(kinesis, "orders", 100)  # before the pipeline started: LATEST skips these
    p = pipeline(tmp_path, initial_position="LATEST")
    assert plan_batch(p, kinesis, store, "run-1", now=clock.advance(seconds=1)).batch is None
    starts = {s.start_position for s in store.get_shards("orders").values()}
    assert len(starts) == 1 and next(iter(starts)).kind == "AT_TIMESTAMP"  # type: ignore[union-attr]
    clock.advance(seconds=1)
    later = produce(kinesis, "orders", 60)
    result = plan_batch(p, kinesis, store, "run-2", now=clock.advance(seconds=1))
    assert result.batch is not None
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(later)


def test_at_timestamp_starts_at_the_configured_time(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    produce(kinesis, "orders", 80)
    cut = clock.advance(seconds=1)
    clock.advance(milliseconds=100)
    later = produce(kinesis, "orders", 40)
    p = pipeline(tmp_path, initial_position="AT_TIMESTAMP", initial_timestamp=cut.isoformat())
    result = plan_batch(p, kinesis, store, "run-1", now=clock.advance(seconds=1))
    assert result.batch is not None
    assert {r.shard_id: (r.start, r.end) for r in result.batch.ranges} == ends_by_shard(later)


def test_an_initial_timestamp_to_come_is_refused_naming_it_and_stores_nothing(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    """Kinesis answers GetShardIterator(AT_TIMESTAMP) at a time to come with InvalidArgumentException: once a raw error."""
    produce(kinesis, "orders", 20)
    typo = clock().replace(year=2062)
    with pytest.raises(ConfigError, match=r"initial_timestamp 2062-.* is after this plan .*was the year mistyped") as caught:
        plan_batch(
            pipeline(tmp_path, initial_position="AT_TIMESTAMP", initial_timestamp=typo.isoformat()), kinesis, store, "run-1", now=clock()
        )
    assert not caught.value.retryable
    assert store.get_shards("orders") == {} and store.list_batches("orders") == []


def test_a_missing_stream_fails_naming_it_and_writes_nothing(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    with pytest.raises(StreamNotFoundError, match="stream no-such-stream: ListShards"):
        plan_batch(pipeline(tmp_path, stream="no-such-stream"), kinesis, store, "run-1", now=clock())
    assert store.get_head("orders").version == 0 and store.list_batches("orders") == []


def test_a_planned_batch_is_stored_as_planned(kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path) -> None:
    produce(kinesis, "orders", 20)
    plan_batch(pipeline(tmp_path), kinesis, store, "run-1", now=clock.advance(seconds=1))
    batch = store.get_batch("orders", 1)
    assert batch.status == BatchStatus.PLANNED and batch.run_id == "run-1" and store.get_head("orders").in_flight == 1


def test_a_shard_gone_from_the_stream_before_it_was_read_to_its_end_is_a_loss_to_acknowledge(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    """Kinesis drops a closed shard once its records are past retention. A parent the pipeline had not drained then
    vanished from the listing, and its children were planned as if nothing had been lost."""
    store.put_shards_if_absent("orders", [ShardState("shardId-000000000099", checkpoint=12345)])  # read up to 12345, then gone

    with pytest.raises(DataLossError, match=r"shards shardId-000000000099 \(checkpoint 12345\) are no longer in the stream") as caught:
        plan_batch(pipeline(tmp_path), kinesis, store, "run-1", now=clock())
    assert '{"acknowledge_data_loss": ["shardId-000000000099"]}' in str(caught.value) and not caught.value.retryable
    assert store.list_batches("orders") == [] and not store.get_shards("orders")["shardId-000000000099"].finished
    with pytest.raises(ParameterError, match="acknowledge_data_loss names shardId-000000000098"):  # no shard of the pipeline's
        plan_batch(pipeline(tmp_path), kinesis, store, "run-2", now=clock(), acknowledged=frozenset({"shardId-000000000098"}))

    # Acknowledged, with nothing new to plan: no batch to record the loss in, so the shard stays as it was.
    idle = plan_batch(pipeline(tmp_path), kinesis, store, "run-3", now=clock(), acknowledged=frozenset({"shardId-000000000099"}))
    assert idle.batch is None and not store.get_shards("orders")["shardId-000000000099"].finished

    produce(kinesis, "orders", 40)
    result = plan_batch(
        pipeline(tmp_path), kinesis, store, "run-3", now=clock.advance(seconds=1), acknowledged=frozenset({"shardId-000000000099"})
    )
    assert result.batch is not None and len(result.batch.ranges) == 4  # the stream's own shards, planned as ever
    gap = Gap("shardId-000000000099", 12345, None, acknowledged_by="run-3", detected="plan")
    assert result.batch.gaps == (gap,) and store.get_batch("orders", 1).gaps == (gap,)  # in the ledger
    assert store.get_shards("orders")["shardId-000000000099"].finished


def test_a_capped_plan_ends_each_range_at_the_newest_record_before_its_cap(
    kinesis: MemoryKinesis, store: MemoryStateStore, clock: ManualClock, tmp_path: Path
) -> None:
    """max_batch caps a range's span from its first record's arrival; the shard's newer records wait for later batches."""
    produced = []
    for i in range(6):  # records over 30 minutes
        produced += produce(kinesis, "orders", 20, start_index=20 * i)
        clock.advance(minutes=6)
    p = pipeline(tmp_path, max_batch={"span": "10m"})
    result = plan_batch(p, kinesis, store, "run-1", now=clock())
    assert result.batch is not None
    arrivals = {r.sequence_number: r.arrival for shard in kinesis.streams["orders"].shards for r in kinesis.records("orders", shard)}
    for rng in result.batch.ranges:
        mine = sorted(int(x.sequence_number) for x in produced if x.shard_id == rng.shard_id)
        cap = arrivals[mine[0]] + timedelta(minutes=10)
        assert rng.start == mine[0] and rng.end == max(s for s in mine if arrivals[s] < cap)
    assert result.batch.notes.capped and set(result.batch.notes.capped) == {r.shard_id for r in result.batch.ranges}
