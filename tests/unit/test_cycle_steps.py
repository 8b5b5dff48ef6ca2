"""A pipeline's steps (plan, replay, verify, commit, recover) on the fakes, in milliseconds: what each leaves in the
ledger, the checkpoints and the output, across resumed commits, concurrent runs, resharding, trims and a lost state table.

The replay is tests/fakes/replay.py (the library's range reader, pyarrow instead of Spark); the fakes are held to
kinesalite and DynamoDB on moto by tests/contract. The DAGs, Spark and Airflow running these steps are tested in
tests/integration.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from fakes.memory_store import MemoryStateStore
from fakes.replay import replay
from fakes.world import World
from kinesis_replay.adapters import commit_records, files, layout
from kinesis_replay.core.errors import BatchSupersededError, DataLossError, RecoveryError, StateConflictError, VerificationError
from kinesis_replay.core.state import BatchStatus, Gap, Head
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.plan import plan_batch
from kinesis_replay.steps.recovery import recover
from kinesis_replay.steps.verify import verify_batch


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def newest_by_shard(produced: list[Any]) -> dict[str, int]:
    newest: dict[str, int] = {}
    for p in produced:
        newest[p.shard_id] = max(newest.get(p.shard_id, 0), int(p.sequence_number))
    return newest


def test_a_cycle_lands_every_record_once_and_moves_each_checkpoint_to_its_range_s_end(world: World) -> None:
    world.produce(300)
    committed = world.cycle("run-1")
    assert committed is not None and committed.status == BatchStatus.COMMITTED
    assert world.store.get_batch("orders", 1).status == BatchStatus.COMMITTED
    assert world.store.get_head("orders") == Head(next_batch_id=2, in_flight=None, version=2)
    assert world.checkpoints() == newest_by_shard(world.produced)
    assert commit_records.read_commit_record(world.pipeline.output, 1).ranges == committed.ranges  # the output's copy of the ledger
    world.produce(200)
    second = world.cycle("run-2")
    first_ends = {r.shard_id: r.end for r in world.store.get_batch("orders", 1).ranges}
    assert second is not None and {r.shard_id: r.previous_checkpoint for r in second.ranges} == first_ends
    assert world.landed() == world.expected() and world.checkpoints() == newest_by_shard(world.produced)
    assert world.cycle("run-3") is None  # nothing new


def test_verify_refuses_files_that_do_not_hold_the_manifest_s_rows_and_nothing_moves(world: World) -> None:
    world.produce(100)
    batch = world.plan()
    assert batch is not None
    replay(world.pipeline, world.kinesis, batch)
    part = next(Path(layout.batch_path(world.pipeline.output, 1)).glob("*.parquet"))
    table = pq.read_table(part)
    pq.write_table(table.slice(1), part)  # a row lost from the files
    with pytest.raises(VerificationError, match=r"pipeline 'orders', batch 1: rows per shard in the batch's files are"):
        verify_batch(world.pipeline, world.store, 1)
    assert world.store.get_batch("orders", 1).status == BatchStatus.PLANNED and world.store.get_head("orders").in_flight == 1
    assert set(world.checkpoints().values()) == {None}
    replay(world.pipeline, world.kinesis, batch)  # the next run replays the batch, with the same ranges
    verify_batch(world.pipeline, world.store, 1)
    commit_batch(world.pipeline, world.store, 1, now=world.clock())
    assert world.landed() == world.expected()


def test_a_manifest_that_ends_a_range_early_is_refused(world: World) -> None:
    world.produce(100)
    batch = world.plan()
    assert batch is not None
    shorter = replace(batch, ranges=(replace(batch.ranges[0], end=batch.ranges[0].start), *batch.ranges[1:]))
    replay(world.pipeline, world.kinesis, shorter)  # a replay that stopped at the first record of shard 0
    with pytest.raises(VerificationError, match=rf"range {batch.ranges[0].shard_id}.*: the output ends at {batch.ranges[0].start}"):
        verify_batch(world.pipeline, world.store, 1)
    assert world.store.get_batch("orders", 1).status == BatchStatus.PLANNED


class FailingOnce:
    """The store, whose named call fails once (a worker lost mid-commit)."""

    def __init__(self, store: MemoryStateStore, name: str) -> None:
        self.store, self.name, self.failed = store, name, False

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.store, name)
        if name != self.name or self.failed:
            return call

        def fail(*args: Any, **kwargs: Any) -> Any:
            self.failed = True
            raise ConnectionError("the worker was lost")

        return fail


@pytest.mark.parametrize("cut", ["advance_checkpoint", "complete_batch"])
def test_a_commit_cut_short_is_finished_by_the_next_run_moving_each_checkpoint_once(world: World, cut: str) -> None:
    world.produce(200)
    batch = world.plan()
    assert batch is not None
    replay(world.pipeline, world.kinesis, batch)
    verify_batch(world.pipeline, world.store, 1)
    with pytest.raises(ConnectionError):
        commit_batch(world.pipeline, FailingOnce(world.store, cut), 1, now=world.clock())  # type: ignore[arg-type]
    assert world.store.get_batch("orders", 1).status == BatchStatus.COMMITTING and world.store.get_head("orders").in_flight == 1
    resumed = plan_batch(world.pipeline, world.kinesis, world.store, "run-2", now=world.clock.advance(seconds=1))
    assert resumed.resumed and resumed.batch is not None and resumed.batch.ranges == batch.ranges
    commit_batch(world.pipeline, world.store, 1, now=world.clock())
    assert world.store.get_batch("orders", 1).status == BatchStatus.COMMITTED and world.store.get_head("orders").in_flight is None
    assert world.checkpoints() == newest_by_shard(world.produced)
    assert {s.last_batch_id for s in world.store.get_shards("orders").values()} == {1}


def test_the_run_that_replayed_a_batch_another_run_committed_changes_nothing(world: World) -> None:
    world.produce(100)
    batch = world.plan("run-a")
    assert batch is not None
    replay(world.pipeline, world.kinesis, batch)  # runs A and B both replayed it; A verifies and commits first
    verify_batch(world.pipeline, world.store, 1)
    commit_batch(world.pipeline, world.store, 1, now=world.clock())
    stored = world.store.get_batch("orders", 1)
    with pytest.raises(BatchSupersededError, match="pipeline 'orders', batch 1 is COMMITTED"):
        verify_batch(world.pipeline, world.store, 1)
    with pytest.raises(BatchSupersededError, match="pipeline 'orders', batch 1 is COMMITTED"):
        commit_batch(world.pipeline, world.store, 1, now=world.clock())
    assert world.store.get_batch("orders", 1) == stored and world.checkpoints() == newest_by_shard(world.produced)


def test_a_checkpoint_moved_by_another_run_fails_the_commit(world: World) -> None:
    world.produce(100)
    batch = world.plan()
    assert batch is not None
    replay(world.pipeline, world.kinesis, batch)
    verify_batch(world.pipeline, world.store, 1)
    rng = batch.ranges[0]
    world.store.advance_checkpoint("orders", rng.shard_id, None, rng.start, 99, finished=False)  # not this batch's doing
    with pytest.raises(StateConflictError, match=rf"shard {rng.shard_id}: advancing the checkpoint from None to {rng.end}"):
        commit_batch(world.pipeline, world.store, 1, now=world.clock())
    assert world.store.get_batch("orders", 1).status == BatchStatus.COMMITTING and world.checkpoints()[rng.shard_id] == rng.start


def test_splits_and_merges_read_parents_to_their_end_before_their_children(world: World) -> None:
    world.produce(200)
    assert world.cycle() is not None  # batch 1: shards 0-3
    world.kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**125))
    world.produce(200)
    second = world.cycle()  # shard 0 drained at once, so its children 4 and 5 join this batch
    assert second is not None and {r.shard_id for r in second.ranges} >= {"shardId-000000000004", "shardId-000000000005"}
    world.produce(100)
    world.kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000001", NewStartingHashKey=str(2**126 + 2**125))
    world.produce(100)
    third = world.cycle()  # shard 1 read to SHARD_END; its children 6 and 7 wait
    assert third is not None
    ranges = {r.shard_id: r for r in third.ranges}
    assert ranges["shardId-000000000001"].to_shard_end and "shardId-000000000006" not in ranges
    assert world.store.get_shards("orders")["shardId-000000000001"].finished
    world.kinesis.merge_shards(StreamName="orders", ShardToMerge="shardId-000000000004", AdjacentShardToMerge="shardId-000000000005")
    world.produce(100)
    for _ in range(4):
        if world.cycle() is None:
            break
    assert world.landed() == world.expected()
    first_batch: dict[str, int] = {}
    last_batch: dict[str, int] = {}
    for b in world.store.list_batches("orders"):
        for r in b.ranges:
            first_batch.setdefault(r.shard_id, b.batch_id)
            last_batch[r.shard_id] = b.batch_id
    shards = {s["ShardId"]: s for s in world.kinesis.list_shards(StreamName="orders")["Shards"]}
    for child, shard in shards.items():
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and child in first_batch and parent in last_batch:
                assert first_batch[child] > last_batch[parent], (child, parent)
    assert "shardId-000000000008" in first_batch  # the merged child was read
    finished = {sid for sid, s in world.store.get_shards("orders").items() if s.finished}
    assert finished == {"shardId-000000000000", "shardId-000000000001", "shardId-000000000004", "shardId-000000000005"}


def test_a_trimmed_checkpoint_is_a_loss_to_acknowledge_then_a_gap_in_the_ledger(world: World) -> None:
    world.produce(100)
    assert world.cycle() is not None
    world.produce(100)
    world.clock.advance(hours=1)
    gone = world.kinesis.trim("orders", before=world.clock())  # the pipeline paused past retention: everything left
    assert gone
    world.produce(40)
    with pytest.raises(DataLossError):
        world.plan("run-2")
    assert world.store.get_head("orders").next_batch_id == 2 and world.store.get_batches("orders", [2]) == {}
    shards = sorted(world.checkpoints())
    batch = world.plan("run-3", acknowledged=frozenset(shards))
    assert batch is not None and {g.shard_id for g in batch.gaps} == {r.shard_id for r in batch.ranges}
    assert all(g.detected == "plan" and g.acknowledged_by == "run-3" for g in batch.gaps)
    assert world.store.get_batch("orders", 2).gaps == batch.gaps


def test_a_lost_state_table_is_rebuilt_from_the_output_and_the_next_cycle_goes_on(world: World) -> None:
    world.produce(150)
    world.cycle()
    world.produce(150)
    world.cycle()
    ledger, shards = world.store.list_batches("orders"), world.store.get_shards("orders")
    world.store = MemoryStateStore()  # the table is gone; a new, empty one
    plan = recover(world.pipeline, world.kinesis, world.store, now=world.clock())
    assert plan.head.next_batch_id == 3 and world.store.get_head("orders").next_batch_id == 3
    assert [(b.batch_id, b.ranges, b.status) for b in world.store.list_batches("orders")] == [
        (b.batch_id, b.ranges, b.status) for b in ledger
    ]
    assert world.checkpoints() == {sid: s.checkpoint for sid, s in shards.items()}
    with pytest.raises(RecoveryError, match="already holds the pipeline's state"):
        recover(world.pipeline, world.kinesis, world.store, now=world.clock())
    world.produce(100)
    third = world.cycle()
    assert third is not None and third.batch_id == 3 and world.landed() == world.expected()


def test_a_recovery_keeps_a_drained_parent_finished_and_the_next_cycle_reads_its_children(world: World) -> None:
    """A parent read to its end before the state table was lost stays finished once the rebuilt state plans again: its
    children, not the parent, are what the next cycle reads (test_upgrades.py recovers through Airflow and Spark)."""
    world.produce(200)
    assert world.cycle() is not None
    world.kinesis.split_shard(StreamName="orders", ShardToSplit="shardId-000000000001", NewStartingHashKey=str(2**126 + 2**125))
    world.produce(100)
    assert world.cycle() is not None  # drains the parent; its children wait for the next plan
    assert world.store.get_shards("orders")["shardId-000000000001"].finished
    world.store = MemoryStateStore()  # the table is gone; a new, empty one
    recover(world.pipeline, world.kinesis, world.store, now=world.clock())
    world.produce(100)
    third = world.cycle()
    assert third is not None and third.batch_id == 3
    assert world.store.get_shards("orders")["shardId-000000000001"].finished  # the drained parent stays finished
    planned = {r.shard_id for r in third.ranges}
    assert "shardId-000000000001" not in planned and {"shardId-000000000004", "shardId-000000000005"} <= planned
    assert world.landed() == world.expected()


def test_a_recovery_reads_the_commit_records_concurrently_and_rebuilds_the_ledger_in_id_order(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 each commit record is a GET of its own, and a year of one-minute batches is 525,600 of them: read one after
    another, hours. The first record's read here waits until the second's has begun, so a recovery reading them in turn
    would fail; the ledger it rebuilds is the one that was lost, in id order."""
    for _ in range(3):
        world.produce(40)
        assert world.cycle() is not None
    lost = [(b.batch_id, b.ranges, b.status) for b in world.store.list_batches("orders")]
    read = commit_records.read_commit_record
    second_begun = threading.Event()
    task_access = files.S3Access(endpoint_url="http://s3.recovery.example", source="the task's connection")
    seen: list[files.S3Access] = []

    def read_commit_record(output: str, batch_id: int) -> Any:
        seen.append(files.s3_access())  # on S3, the way the task reaches it: its connection's, not the default chain's
        if batch_id == 2:
            second_begun.set()
        elif batch_id == 1 and not second_begun.wait(timeout=30):
            raise AssertionError("the commit record of batch 2 was not read while batch 1's was: the records were read in turn")
        return read(output, batch_id)

    monkeypatch.setattr(commit_records, "read_commit_record", read_commit_record)
    world.store = MemoryStateStore()
    with files.reaching_s3(task_access):
        plan = recover(world.pipeline, world.kinesis, world.store, now=world.clock())
    assert len(seen) == 3 and all(access is task_access for access in seen)  # make test's S3 recovery failed without
    assert [b.batch_id for b in plan.batches] == [1, 2, 3]
    assert [(b.batch_id, b.ranges, b.status) for b in world.store.list_batches("orders")] == lost
    world.produce(40)
    assert world.cycle() is not None and world.landed() == world.expected()


def test_gaps_found_at_replay_are_kept_with_the_plan_s(world: World) -> None:
    """A range whose first records were trimmed between plan and replay: verify accepts it only once acknowledged."""
    world.produce(50)
    world.clock.advance(seconds=5)
    world.produce(50)
    batch = world.plan("run-1")
    assert batch is not None
    world.kinesis.trim("orders", before=world.clock() - timedelta(seconds=4))  # the first 50 leave the stream
    replay(world.pipeline, world.kinesis, batch, accept_gap=frozenset(r.shard_id for r in batch.ranges))
    with pytest.raises(VerificationError, match="after the range start"):
        verify_batch(world.pipeline, world.store, 1)
    acknowledged = frozenset(r.shard_id for r in batch.ranges)
    written = verify_batch(world.pipeline, world.store, 1, acknowledged=acknowledged, run_id="run-2")
    assert {g.shard_id for g in written.gaps} == acknowledged and all(g.detected == "replay" for g in written.gaps)
    starts = {r.shard_id: r.start for r in batch.ranges}
    assert all(isinstance(g, Gap) and g.first_available is not None and g.first_available > starts[g.shard_id] for g in written.gaps)
    commit_batch(world.pipeline, world.store, 1, now=world.clock())
    assert world.store.get_batch("orders", 1).gaps == written.gaps


def test_a_batch_whose_ranges_are_wholly_gone_commits_once_acknowledged_and_the_next_plan_says_its_checkpoints_are_gone(
    world: World,
) -> None:
    """The batch waited in flight until retention took every record of its ranges. Once, the acknowledged run failed as
    every other did: the pipeline could never move. Its checkpoints are then the ranges' ends, themselves trimmed: the
    next plan says so, and records the gap from there to the first record left once acknowledged."""
    first = world.produce(60)
    batch = world.plan("run-1")
    assert batch is not None
    planned = {r.shard_id: r for r in batch.ranges}
    assert set(planned) == {p.shard_id for p in first}  # a range on each shard written to
    world.clock.advance(hours=1)
    later = world.produce(80)
    world.kinesis.trim("orders", before=world.clock() - timedelta(minutes=30))  # every record of batch 1 is gone
    shards = frozenset(planned)
    replay(world.pipeline, world.kinesis, batch, accept_gap=shards)
    with pytest.raises(VerificationError):
        verify_batch(world.pipeline, world.store, 1, run_id="run-1")  # unacknowledged: refused
    written = verify_batch(world.pipeline, world.store, 1, acknowledged=shards, run_id="run-2")
    assert sorted((g.shard_id, g.after, g.first_available, g.detected) for g in written.gaps) == [
        (s, None, None, "replay") for s in sorted(shards)
    ]
    committed = commit_batch(world.pipeline, world.store, 1, now=world.clock.advance(seconds=1), run_id="run-2")
    assert committed.status == BatchStatus.COMMITTED and committed.result is not None and committed.result.shards == ()
    assert world.checkpoints() == {s: r.end for s, r in planned.items()}  # the loss is the gap's

    with pytest.raises(DataLossError):
        world.plan("run-3")  # the checkpoints are trimmed too: records after them may have been lost as well
    assert [b.batch_id for b in world.store.list_batches("orders")] == [1]
    second = world.plan("run-4", acknowledged=shards)
    assert second is not None and second.batch_id == 2
    first_left = {s: min(int(p.sequence_number) for p in later if p.shard_id == s) for s in shards}
    assert sorted((g.shard_id, g.after, g.first_available, g.detected) for g in second.gaps) == [
        (s, planned[s].end, first_left[s], "plan") for s in sorted(shards)
    ]
    replay(world.pipeline, world.kinesis, second)
    verify_batch(world.pipeline, world.store, 2, acknowledged=shards, run_id="run-4")
    commit_batch(world.pipeline, world.store, 2, now=world.clock.advance(seconds=1), run_id="run-4")
    assert world.landed() == sorted((p.shard_id, p.sequence_number) for p in later)  # none of batch 1, all after
