"""A backfill's steps on the fakes (an in-memory stream and state store, a directory output): what it may replay,
and that a replay must hold what the batch's first run held, moving no checkpoint and changing no ledger entry.

The backfill DAG running these steps with Spark is tested in tests/integration/test_operations.py.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from fakes.replay import replay
from fakes.world import World
from kinesis_replay.adapters import commit_records
from kinesis_replay.core.errors import BackfillError, DataLossError, VerificationError
from kinesis_replay.steps.backfill import check_replayed, choose, committed_batch


@pytest.fixture
def world(tmp_path: Path) -> World:
    built = World(tmp_path)
    for _ in range(3):
        built.produce(120)
        assert built.cycle() is not None
    return built


def test_a_backfill_replays_committed_batches_identically_and_moves_nothing(world: World) -> None:
    ledger, shards, head = world.store.list_batches("orders"), world.store.get_shards("orders"), world.store.get_head("orders")
    _, chosen = choose(world.pipeline, world.kinesis, world.store, {"from_batch": 1, "to_batch": 2}, now=world.clock())
    assert [b.batch_id for b in chosen] == [1, 2]
    for batch in chosen:
        again = committed_batch(world.pipeline, world.store, batch.batch_id)
        replay(world.pipeline, world.kinesis, again)
        checked = check_replayed(world.pipeline, world.store, batch.batch_id, run_id="backfill-1")
        assert checked.result is not None and batch.result is not None
        assert checked.result.shards == batch.result.shards
    assert world.store.list_batches("orders") == ledger and world.store.get_head("orders") == head
    assert world.store.get_shards("orders") == shards
    assert world.landed() == world.expected()  # every record once, the replayed batches' too


def test_a_backfill_that_writes_other_rows_than_the_first_run_is_refused_naming_the_shards(world: World) -> None:
    batch = world.store.get_batch("orders", 2)
    shard = batch.ranges[0]
    shorter = replace(batch, ranges=(replace(shard, end=shard.start), *batch.ranges[1:]))
    replay(world.pipeline, world.kinesis, shorter)
    with pytest.raises(
        VerificationError, match=rf"batch 2: the backfill wrote different rows than the batch's first run for shards {shard.shard_id}"
    ):
        check_replayed(world.pipeline, world.store, 2)
    assert world.store.get_batch("orders", 2) == batch  # the ledger keeps the first run's manifest


def test_a_backfill_waits_while_a_regular_batch_is_in_flight(world: World) -> None:
    world.produce(50)
    assert world.plan() is not None
    with pytest.raises(BackfillError, match="pipeline orders: regular batch 4 is in flight; a backfill waits until it is committed"):
        choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock())


def test_a_backfill_of_ranges_past_the_retention_is_refused_before_reading(world: World) -> None:
    calls = len(world.kinesis.calls)
    later = world.clock() + timedelta(hours=25)
    with pytest.raises(DataLossError, match=r"batch 1, range .*its start arrived 25h00m ago, more than the stream's retention of 24h00m"):
        choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [1]}, now=later)
    assert "GetRecords" not in world.kinesis.calls[calls:] and "GetShardIterator" not in world.kinesis.calls[calls:]
    assert commit_records.read_commit_record(world.pipeline.output, 1) == world.store.get_batch("orders", 1)


@pytest.mark.parametrize(("first_digest", "refused"), [("0123456789abcdef", False), ("xxh3:0123456789abcdef", True)])
def test_a_first_runs_digest_counts_where_it_names_the_backfills_hash(
    world: World, monkeypatch: pytest.MonkeyPatch, first_digest: str, refused: bool
) -> None:
    """A first run replayed before the row digest's hash changed holds md5's 16 digits alone: its rows, bounds and
    checksum are compared, and its digest was checked against its own files then. A digest of the same hash counts."""
    batch = world.store.get_batch("orders", 2)
    assert batch.result is not None
    earlier = replace(batch, result=replace(batch.result, shards=tuple(replace(s, digest=first_digest) for s in batch.result.shards)))
    stored = world.store.get_batch
    monkeypatch.setattr(world.store, "get_batch", lambda name, batch_id: earlier if batch_id == 2 else stored(name, batch_id))
    replay(world.pipeline, world.kinesis, committed_batch(world.pipeline, world.store, 2))
    if refused:
        with pytest.raises(VerificationError, match="batch 2: the backfill wrote different rows than the batch's first run"):
            check_replayed(world.pipeline, world.store, 2)
    else:
        checked = check_replayed(world.pipeline, world.store, 2)
        assert checked.result is not None and all(s.digest and s.digest.startswith("xxh3:") for s in checked.result.shards)
    assert stored("orders", 2) == batch  # the ledger's entry is not changed by a backfill
    assert world.landed() == world.expected()
