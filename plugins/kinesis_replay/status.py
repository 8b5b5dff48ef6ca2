"""What the UI page shows of a pipeline: shards with checkpoint, lag and age, and the last batches."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from kinesis_replay.config import PipelineConfig
from kinesis_replay.state import Batch, StateStore


@dataclass(frozen=True)
class ShardView:
    shard_id: str
    checkpoint: str | None
    finished: bool
    last_batch_id: int | None
    millis_behind_latest: int | None  # measured at the last plan that saw the shard
    checkpoint_age_seconds: float | None  # how old the last committed record is


@dataclass(frozen=True)
class BatchView:
    batch_id: int
    status: str
    shards: int
    records: int | None
    bad_records: int | None
    bytes: int | None
    seconds: float | None
    created_at: str
    gaps: int
    error: str | None


@dataclass(frozen=True)
class PipelineView:
    name: str
    stream: str
    output: str
    dag_id: str
    backfill_dag_id: str
    in_flight: int | None
    shards: tuple[ShardView, ...]
    batches: tuple[BatchView, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pipeline_view(p: PipelineConfig, store: StateStore, now: datetime, last: int = 10) -> PipelineView:
    """The page's view of one pipeline: a few reads, however long the ledger (the last batches, and the batch
    that last moved each shard's checkpoint)."""
    head = store.get_head(p.name)
    ids = range(head.next_batch_id - 1, max(0, head.next_batch_id - 1 - last), -1)
    found = store.get_batches(p.name, ids)
    recent = [found[i] for i in ids if i in found]  # newest first
    lag: dict[str, int] = {}
    for batch in reversed(recent):  # every plan measures each shard it reads; the newest measurement wins
        lag.update(batch.extra.get("lag_millis", {}))
    states = sorted(store.get_shards(p.name).values(), key=lambda s: s.shard_id)
    by_id = store.get_batches(p.name, {s.last_batch_id for s in states if s.last_batch_id is not None})
    shards = tuple(
        ShardView(
            shard_id=s.shard_id,
            checkpoint=None if s.checkpoint is None else str(s.checkpoint),
            finished=s.finished,
            last_batch_id=s.last_batch_id,
            millis_behind_latest=lag.get(s.shard_id),
            checkpoint_age_seconds=_checkpoint_age(by_id.get(s.last_batch_id or 0), s.shard_id, now),
        )
        for s in states
    )
    return PipelineView(
        name=p.name,
        stream=p.stream,
        output=p.output,
        dag_id=p.dag_id,
        backfill_dag_id=p.backfill_dag_id,
        in_flight=head.in_flight,
        shards=shards,
        batches=tuple(_batch_view(b) for b in recent),
    )


def _checkpoint_age(batch: Batch | None, shard_id: str, now: datetime) -> float | None:
    if batch is None or batch.manifest is None:
        return None
    result = batch.manifest.by_shard().get(shard_id)
    if result is None or result.last_arrival is None:
        return None
    return max(0.0, (now - result.last_arrival).total_seconds())


def _batch_view(b: Batch) -> BatchView:
    m = b.manifest
    return BatchView(
        batch_id=b.batch_id,
        status=b.status.value,
        shards=len(b.ranges),
        records=m.records if m else None,
        bad_records=m.bad_records if m else None,
        bytes=m.bytes if m else None,
        seconds=(b.committed_at - b.created_at).total_seconds() if b.committed_at else None,
        created_at=b.created_at.isoformat(timespec="seconds"),
        gaps=len(b.gaps),
        error=b.error,
    )
