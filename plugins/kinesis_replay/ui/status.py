"""What the UI page shows of a pipeline: shards with checkpoint, lag and age, the last batches, a day of batches'
figures, the in-flight batch's progress and the last failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.decoding import EARLIER, Decoding
from kinesis_replay.core.errors import KinesisReplayError
from kinesis_replay.core.formats import ProgressLine, duration
from kinesis_replay.core.state import Batch, BatchStatus, BatchSummary, Head, Progress, RunKind, StateStore

log = logging.getLogger(__name__)

HISTORY = timedelta(hours=24)  # the charts' window
HISTORY_MAX = 1440  # batches: a day of a pipeline scheduled every minute, read 100 to a call
FAILURES = 10  # the last failures listed
# A backfill's progress is shown while some shard is unread and its last report is recent: this many progress
# intervals, and at least BACKFILL_SHOWN_MIN (a backfill that failed or was killed stops reporting).
BACKFILL_SHOWN_INTERVALS = 10
BACKFILL_SHOWN_MIN = timedelta(minutes=10)
# A batch's decoding, where its release recorded none (0.1.0): what the page shows in place of a fingerprint.
NOT_RECORDED = "not recorded"


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
    # How the rows it holds were decoded: the decoding's fingerprint, NOT_RECORDED for a batch of a release that recorded
    # none, None while it has no verified result; ``decoding_text`` says it in full (Decoding.describe()).
    decoding: str | None = None
    decoding_text: str | None = None
    redecoded_by: str | None = None  # the backfill run whose re-decode made the batch's current rows
    # A re-decode's verified attempt waiting for its selection's one commit: the run, and how it decoded the batch.
    staged_by: str | None = None
    staged_decoding_text: str | None = None


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
    behind: CatchUpFigures | None = None
    behind_text: str | None = None
    history: tuple[dict[str, Any], ...] = ()  # the last day's batches, oldest first: what the charts draw
    failures: tuple[dict[str, Any], ...] = ()  # the batches of that day that failed at least once, newest first, and why
    progress: dict[str, Any] | None = None  # the in-flight batch's replay, per shard
    backfill_progress: dict[str, Any] | None = None  # a running backfill's replay of a committed batch, per shard
    table: str | None = None  # the table's identity (table, namespace, catalog); None for a directory output
    # Enhanced fan-out: the consumer the replays read through (read.consumer), registered by the pipeline on first use
    # and never deregistered by it: it costs a shard-hour for each of the stream's shards while it is registered.
    consumer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pipeline_view(pipeline: PipelineConfig, store: StateStore, now: datetime, last: int = 10) -> PipelineView:
    """The page's view of one pipeline: a few reads, however long the ledger (the last batches, and the batch
    that last moved each shard's checkpoint)."""
    head = store.get_head(pipeline.name)
    ids = range(head.next_batch_id - 1, max(0, head.next_batch_id - 1 - last), -1)
    found = store.get_batches(pipeline.name, ids)
    recent = [found[i] for i in ids if i in found]  # newest first
    lag: dict[str, int] = {}
    for batch in reversed(recent):  # every plan measures each shard it reads; the newest measurement wins
        lag.update(batch.notes.lag_millis or {})
    day = last_day(store, pipeline.name, head, now)
    states = sorted(store.get_shards(pipeline.name).values(), key=lambda s: s.shard_id)
    by_id = store.get_batches(pipeline.name, {s.last_batch_id for s in states if s.last_batch_id is not None})
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
    reported = store.get_progress(pipeline.name)  # one Query: the last progress of the regular run and of a backfill
    newest = next((b for b in recent if b.status == BatchStatus.COMMITTED), None)
    behind = catch_up(newest, now) if newest is not None else None
    return PipelineView(
        name=pipeline.name,
        stream=pipeline.stream,
        output=pipeline.output,
        dag_id=pipeline.dag_id,
        backfill_dag_id=pipeline.backfill_dag_id,
        in_flight=head.in_flight,
        shards=shards,
        batches=tuple(_batch_view(b) for b in recent),
        behind=behind.to_dict() if behind else None,
        behind_text=behind.describe() if behind else None,
        history=tuple(_history_point(b) for b in day),
        failures=tuple(_failure(b) for b in reversed(day) if b.last_error is not None)[:FAILURES],
        progress=_progress(found.get(head.in_flight), reported.get(RunKind.REGULAR)) if head.in_flight is not None else None,
        backfill_progress=_backfill_progress(store, pipeline, reported.get(RunKind.BACKFILL), now),
        table=pipeline.table.describe() if pipeline.table is not None else None,
        consumer=pipeline.read.consumer,
    )


def last_day(store: StateStore, pipeline_name: str, head: Head, now: datetime) -> list[BatchSummary]:
    """The batches planned within HISTORY of ``now`` (at most HISTORY_MAX), oldest first: read newest first, a hundred
    ids to a call, until one is older than the window; never the whole ledger."""
    newest, since = head.next_batch_id - 1, now - HISTORY
    found: list[BatchSummary] = []
    while newest >= 1 and len(found) < HISTORY_MAX:
        ids = range(newest, max(0, newest - 100), -1)
        chunk = store.get_summaries(pipeline_name, ids)
        found += [chunk[i] for i in ids if i in chunk]
        newest -= 100
        if any(b.created_at < since for b in chunk.values()):
            break
    return [b for b in reversed(found[:HISTORY_MAX]) if b.created_at >= since]


def _history_point(b: BatchSummary) -> dict[str, Any]:
    """A batch of the day as its stored figures say it: the fingerprint of its decoding, not the decoding itself (the
    figures keep a day of batches small; the whole decoding is in the ledger entry, read for the last batches only)."""
    f = b.figures
    return {
        "batch_id": b.batch_id, "status": b.status.value, "created_at": b.created_at.isoformat(timespec="seconds"),
        "seconds": (b.committed_at - b.created_at).total_seconds() if b.committed_at else None,
        "records": f.get("records"), "bytes": f.get("bytes"), "behind_seconds": f.get("behind_seconds"), "shards": f.get("shards"),
        "bad_records": f.get("bad_records"),
        # Figures name a decoding only where one was recorded: a batch with a result and none is of a release before.
        "decoding": f.get("decoding") or (NOT_RECORDED if f.get("records") is not None else None),
        "redecoded": bool(f.get("redecoded")), "staged_by": f.get("staged"),
    }  # fmt: skip


def _failure(b: BatchSummary) -> dict[str, Any]:
    return {"batch_id": b.batch_id, "status": b.status.value, "failures": b.failures,
            "created_at": b.created_at.isoformat(timespec="seconds"), "error": b.last_error}  # fmt: skip


def _progress(batch: Batch | None, reported: Progress | None) -> dict[str, Any] | None:
    """Each range of the in-flight batch: records read so far (as its replay last reported), against the plan's estimate."""
    if batch is None:
        return None
    current = reported if reported is not None and reported.batch_id == batch.batch_id else None
    return _progress_view(batch, current, batch.notes.estimated_records or {}, RunKind.REGULAR)


def _backfill_progress(store: StateStore, pipeline: PipelineConfig, reported: Progress | None, now: datetime) -> dict[str, Any] | None:
    """A running backfill's replay, against what the batch held when it was committed; None once it is read or silent."""
    if reported is None or (reported.records and reported.done >= set(reported.records)):
        return None
    if now - reported.updated_at > max(BACKFILL_SHOWN_MIN, timedelta(seconds=BACKFILL_SHOWN_INTERVALS * pipeline.read.progress_seconds)):
        return None
    batch = store.get_batches(pipeline.name, [reported.batch_id]).get(reported.batch_id)
    if batch is None:
        return None
    estimates = {r.shard_id: r.records + r.bad_records for r in batch.result.shards} if batch.result is not None else {}
    return _progress_view(batch, reported, estimates, RunKind.BACKFILL)


def _progress_view(batch: Batch, current: Progress | None, estimates: Mapping[str, int], kind: RunKind) -> dict[str, Any]:
    shards = [
        {
            "shard_id": r.shard_id,
            "read": current.records.get(r.shard_id, 0) if current else 0,
            "estimate": estimates.get(r.shard_id),
            "done": current is not None and r.shard_id in current.done,
        }
        for r in batch.ranges
    ]
    return {
        "batch_id": batch.batch_id,
        "kind": kind.value,
        "status": batch.status.value,
        "updated_at": current.updated_at.isoformat(timespec="seconds") if current else None,
        "read": sum(s["read"] for s in shards),
        "estimate": sum(e for s in shards if (e := s["estimate"]) is not None) if estimates else None,
        "shards": shards,
    }


class ReplayProgress:
    """Follows a replay job's log lines and publishes what each shard has read, at most every ``every_seconds`` (one
    publish for all shards, however many), and once more at the end (``close``).

    The shards of the batch are known from the start (``shards``), each at 0 until its first line, so every
    publish covers the same shards and the store cuts them into the same pieces. A publish that fails is not
    fatal (progress is for the page only): the first failure is logged with the pipeline and batch, later ones
    are counted, and ``close`` logs the count and returns it.
    """

    def __init__(
        self,
        pipeline_name: str,
        batch_id: int,
        publish: Callable[[Progress], None],
        every_seconds: float,
        *,
        shards: Iterable[str] = (),
        kind: RunKind = RunKind.REGULAR,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.pipeline_name, self.batch_id, self.kind = pipeline_name, batch_id, kind
        self._publish, self._every, self._clock = publish, every_seconds, clock
        self.records: dict[str, int] = dict.fromkeys(shards, 0)
        self.done: set[str] = set()
        self.writes = self.failures = 0
        self._published = clock()
        self._pending = False

    def line(self, text: str) -> None:
        found = ProgressLine.parse(text)  # the replay job's reader writes them, per range (formats.ProgressLine)
        if found is None:
            return
        self.records[found.shard_id] = found.records
        if found.done:
            self.done.add(found.shard_id)
        self._pending = True
        if self._clock() - self._published >= self._every:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        self._pending, self._published = False, self._clock()
        self.writes += 1
        try:
            self._publish(Progress(self.batch_id, dict(self.records), frozenset(self.done), datetime.now(UTC), self.kind))
        except KinesisReplayError as exc:
            self._pending = True  # tried again at the next interval, or at close
            self.failures += 1
            if self.failures == 1:
                log.warning(
                    "pipeline %s, %s batch %d: the replay's progress was not stored; the replay goes on, the page shows older "
                    "counts, and further failures are only counted: %s", self.pipeline_name, self.kind.value, self.batch_id, exc,
                )  # fmt: skip

    def close(self) -> int:
        """Publish what is left; log how many publishes failed, if any, and return that number."""
        self.flush()
        if self.failures:
            log.warning(
                "pipeline %s, %s batch %d: %d of %d writes of the replay's progress failed",
                self.pipeline_name, self.kind.value, self.batch_id, self.failures, self.writes,
            )  # fmt: skip
        return self.failures


def _checkpoint_age(batch: Batch | None, shard_id: str, now: datetime) -> float | None:
    if batch is None or batch.result is None:
        return None
    result = batch.result.by_shard().get(shard_id)
    if result is None or result.last_arrival is None:
        return None
    return max(0.0, (now - result.last_arrival).total_seconds())


def _batch_view(b: Batch) -> BatchView:
    m = b.result
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
        decoding=_fingerprint(m.decoding) if m else None,
        decoding_text=m.decoding.describe() if m else None,
        redecoded_by=b.redecoded_by,
        staged_by=b.staged_by,
        staged_decoding_text=b.staged.decoding.describe() if b.staged is not None else None,
    )


def _fingerprint(decoding: Decoding) -> str:
    return NOT_RECORDED if decoding == EARLIER else decoding.fingerprint


class CatchUpFigures(TypedDict):
    """CatchUp as the status page and the commit task's XCom carry it."""

    capped_shards: int
    behind_seconds: float
    behind_records: int | None
    eta_seconds: int | None


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

    def to_dict(self) -> CatchUpFigures:
        return CatchUpFigures(
            capped_shards=len(self.capped_shards), behind_seconds=round(self.behind_seconds, 1),
            behind_records=self.behind_records, eta_seconds=None if self.eta_seconds is None else round(self.eta_seconds),
        )  # fmt: skip


def catch_up(batch: Batch, now: datetime) -> CatchUp:
    """What a committed (or verified) batch says of the pipeline's distance from the tip; see CatchUp."""
    left: Mapping[str, int] = batch.notes.capped or {}
    results = batch.result.by_shard() if batch.result else {}
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
