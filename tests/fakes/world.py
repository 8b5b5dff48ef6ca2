"""A pipeline's world on the fakes: a four-shard stream in memory, a state store in memory, a directory output, a
clock the test moves, and the steps of one cycle (plan, replay without Spark, verify, commit)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from fakes.memory_kinesis import ManualClock, MemoryKinesis
from fakes.memory_store import MemoryStateStore
from fakes.replay import directory_pipeline, replay
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.state import Batch
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.plan import plan_batch
from kinesis_replay.steps.verify import verify_batch
from stack.producer import produce

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


class World:
    """A stream of four shards, a state store and a directory output, and the steps of one cycle."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock(T0)
        self.kinesis = MemoryKinesis(self.clock)
        self.kinesis.create_stream(StreamName="orders", ShardCount=4)
        self.store = MemoryStateStore()
        self.pipeline: PipelineConfig = directory_pipeline(tmp_path / "out")
        self.produced: list[Any] = []

    def produce(self, count: int) -> list[Any]:
        self.clock.advance(seconds=1)
        new = produce(self.kinesis, "orders", count, start_index=len(self.produced))
        self.produced += new
        return new

    def plan(self, run_id: str = "run", **kwargs: Any) -> Batch | None:
        return plan_batch(self.pipeline, self.kinesis, self.store, run_id, now=self.clock.advance(seconds=1), **kwargs).batch

    def cycle(self, run_id: str = "run") -> Batch | None:
        """Plan, replay, verify and commit one batch; None when there was nothing to plan."""
        batch = self.plan(run_id)
        if batch is None:
            return None
        replay(self.pipeline, self.kinesis, batch)
        verify_batch(self.pipeline, self.store, batch.batch_id, run_id=run_id)
        return commit_batch(self.pipeline, self.store, batch.batch_id, now=self.clock.advance(seconds=1), run_id=run_id)

    def landed(self) -> list[tuple[str, str]]:
        """(shard, sequence number) of every row in the output, in order."""
        table = ds.dataset(self.pipeline.output, format="parquet", partitioning="hive").to_table(columns=["shard_id", "sequence_number"])
        return sorted(zip(table.column("shard_id").to_pylist(), table.column("sequence_number").to_pylist(), strict=True))

    def expected(self) -> list[tuple[str, str]]:
        return sorted((p.shard_id, p.sequence_number) for p in self.produced)

    def checkpoints(self) -> dict[str, int | None]:
        return {sid: s.checkpoint for sid, s in self.store.get_shards("orders").items()}
