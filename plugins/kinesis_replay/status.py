"""What the UI page shows of a pipeline: shards with checkpoint, lag and age, and the last batches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from kinesis_replay.config import PipelineConfig
from kinesis_replay.state import Batch, BatchStatus, StateStore

# The batch's extra key for its capped ranges: shard id -> how far the range's end was behind the tip (ms).
CAPPED = "capped"


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
    snapshot_id: int | None = None  # the table snapshot that holds the batch (None: not in a table, or not yet)


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
    # After the newest committed batch: how far behind the tip (time, records), and when caught up at its pace.
    behind: dict[str, Any] | None = None
    behind_text: str | None = None
    table: str | None = None  # the table's identity (table, namespace, catalog); None for a directory output

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
    newest = next((b for b in recent if b.status == BatchStatus.COMMITTED), None)
    behind = catch_up(newest, now) if newest is not None else None
    return PipelineView(
        name=p.name,
        stream=p.stream,
        output=p.output,
        dag_id=p.dag_id,
        backfill_dag_id=p.backfill_dag_id,
        in_flight=head.in_flight,
        shards=shards,
        batches=tuple(_batch_view(b) for b in recent),
        behind=behind.to_dict() if behind else None,
        behind_text=behind.describe() if behind else None,
        table=p.table.describe() if p.table is not None else None,
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
        snapshot_id=b.snapshot_id,
    )


@dataclass(frozen=True)
class CatchUp:
    """How far a pipeline is behind after a batch, and when it will have caught up at the rate that batch went.

    A batch with capped ranges (max_batch) leaves records for the next batches: the pipeline is behind by
    at least the worst capped shard's distance from the tip, which grows by the time since the plan while
    the shard keeps writing. Each batch moved the capped shards ``covered_seconds`` of arrival time forward in
    ``took_seconds`` of wall time, plan to commit; the stream meanwhile moved ``took_seconds`` forward.
    """

    capped_shards: tuple[str, ...]
    behind_seconds: float
    behind_records: int | None  # at the rate the capped shards wrote in this batch, where it could tell
    covered_seconds: float
    took_seconds: float

    @property
    def behind(self) -> bool:
        return bool(self.capped_shards)

    @property
    def eta_seconds(self) -> float | None:
        """Wall time until caught up at this batch's pace; None when it is not gaining on the tip."""
        gain = self.covered_seconds / self.took_seconds - 1 if self.took_seconds > 0 else 0.0
        return self.behind_seconds / gain if self.behind and gain > 0 else None

    def describe(self) -> str:
        if not self.behind:
            return "within one batch of the tip"
        records = f", about {self.behind_records:,} records" if self.behind_records is not None else ""
        eta = self.eta_seconds
        pace = f"{self.covered_seconds:.0f}s of the stream in {self.took_seconds:.0f}s"
        when = f"caught up in about {duration(eta)} at this pace ({pace})" if eta is not None else f"not gaining on the tip ({pace})"
        return f"{len(self.capped_shards)} capped shards are {duration(self.behind_seconds)} behind the tip{records}; {when}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "capped_shards": len(self.capped_shards), "behind_seconds": round(self.behind_seconds, 1),
            "behind_records": self.behind_records, "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds),
        }  # fmt: skip


def duration(seconds: float) -> str:
    """A span of time as people read it: 45s, 12m05s, 3h20m."""
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def catch_up(batch: Batch, now: datetime) -> CatchUp:
    """What a committed (or verified) batch says of the pipeline's distance from the tip; see CatchUp."""
    left: Mapping[str, int] = batch.extra.get(CAPPED) or {}
    results = batch.manifest.by_shard() if batch.manifest else {}
    since_plan = max(0.0, (now - batch.created_at).total_seconds())
    took = max(0.0, ((batch.committed_at or now) - batch.created_at).total_seconds())
    behind = max((ms / 1000 for ms in left.values()), default=0.0) + (since_plan if left else 0.0)
    spans, records = [], 0
    known = bool(left) and all(s in results for s in left)
    for rng in batch.ranges:
        got = results.get(rng.shard_id)
        if rng.shard_id not in left or got is None or got.last_arrival is None or rng.start_arrival is None:
            continue
        span = max((got.last_arrival - rng.start_arrival).total_seconds(), 1e-3)
        spans.append(span)
        records += round((got.records + got.bad_records) / span * (left[rng.shard_id] / 1000 + since_plan))
    # The slowest capped shard sets the pace: the pipeline has caught up when its last shard has.
    return CatchUp(tuple(sorted(left)), behind, records if known else None, min(spans, default=0.0), took)
