"""A backfill or restore on a stream deleted and created again under its name is refused before Spark starts, as the
regular run refuses it (issue 44, point 6): its stored ranges are the old stream's shard ids and sequence numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from fakes.world import World
from kinesis_replay.core.errors import OutputOwnershipError
from kinesis_replay.steps import in_flight
from kinesis_replay.steps.plan import FINISH_COMMIT, plan_batch

RECREATED = (
    r"stream orders was created at .*, but output .* holds batches of a stream of that name created at .*: the stream was "
    "deleted and created again"
)


@pytest.fixture
def world(tasks_world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """Two committed batches, then the stream deleted and created again; the tasks' clients and store are the fakes'."""
    built = tasks_world
    built.kinesis.delete_stream(StreamName="orders")
    built.clock.advance(seconds=60)
    built.kinesis.create_stream(StreamName="orders", ShardCount=4)
    built.produce(10)

    def no_spark(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the replay job was started")

    monkeypatch.setattr(tasks, "submit", no_spark)
    monkeypatch.setattr(tasks, "stage_emr", no_spark)
    return built


def snapshot(world: World) -> tuple[Any, ...]:
    files = sorted((p.relative_to(world.pipeline.output), p.stat().st_mtime_ns) for p in Path(world.pipeline.output).rglob("*"))
    return world.store.get_head("orders"), world.store.get_shards("orders"), world.store.list_batches("orders"), files


def regular_refusal(world: World) -> str:
    with pytest.raises(OutputOwnershipError, match=RECREATED) as refused:
        plan_batch(world.pipeline, world.kinesis, world.store, "scheduled__1", now=world.clock())
    return str(refused.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda p: tasks.select_backfill(p, {"batches": {"batch_ids": [1, 2]}, "dry_run": False}, "manual__1"),
        lambda p: tasks.select_backfill(p, {"batches": {"from_batch": 1, "to_batch": 2}, "dry_run": True}, "manual__1"),
        lambda p: tasks.select_backfill(p, {"restore_table": True, "dry_run": True}, "manual__1"),
        lambda p: tasks.backfill_batch(p, 1, "manual__1"),
        lambda p: tasks.backfill_batch(p, 2, "manual__1", restore=True),
        lambda p: tasks.stage_backfill(p, 1),
    ],
    ids=["select", "select-dry-run", "restore", "replay", "restore-replay", "stage"],
)
def test_a_backfill_or_restore_on_a_recreated_stream_is_refused_as_the_regular_run_is(world: World, call: Any) -> None:
    before = snapshot(world)
    with pytest.raises(AirflowFailException, match=RECREATED) as refused:
        call(world.pipeline)
    assert isinstance(refused.value.__cause__, OutputOwnershipError)
    assert str(refused.value.__cause__) == regular_refusal(world)  # the same refusal, word for word
    assert snapshot(world) == before


def test_a_regular_batch_planned_before_the_stream_was_recreated_is_refused_before_its_replay(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.produce(40)
    batch = world.plan()
    assert batch is not None
    world.kinesis.delete_stream(StreamName="orders")
    world.clock.advance(seconds=60)
    world.kinesis.create_stream(StreamName="orders", ShardCount=4)
    with pytest.raises(OutputOwnershipError, match=RECREATED):
        in_flight.batch_to_replay(world.pipeline, world.kinesis, world.store, batch.batch_id, None, now=world.clock())
    assert world.store.get_batch("orders", batch.batch_id).error is not None  # noted on the batch, which stays in flight
    assert in_flight.batch_to_replay(world.pipeline, world.kinesis, world.store, batch.batch_id, FINISH_COMMIT) is None
