"""The checkpoint and batch-ledger model, its legal transitions, and the StateStore protocol."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from kinesis_replay.core.decoding import EARLIER, Decoding
from kinesis_replay.core.errors import BatchSupersededError, StateCorruptError
from kinesis_replay.core.formats import COMMITS_DIR, RESULTS_DIR
from kinesis_replay.core.ranges import SequenceRange, ShardInfo, format_sequence_number, parse_sequence_number

if TYPE_CHECKING:  # a type hint only: the rules below read a pipeline's options
    from kinesis_replay.core.config import PipelineConfig


class BatchStatus(StrEnum):
    PLANNED = "PLANNED"  # ranges fixed and stored; nothing read yet, or a replay is (re)running
    WRITTEN = "WRITTEN"  # output verified against the plan; checkpoints not yet moved
    COMMITTING = "COMMITTING"  # checkpoints are being advanced; a resumed run finishes this, never replays
    COMMITTED = "COMMITTED"  # every checkpoint advanced, the batch no longer in flight
    FAILED = "FAILED"  # a run gave up on it; it is still in flight and the next run retries it


# What a run does with the batch its plan step returns (plan.PlanResult.action).
REPLAY = "replay"  # read the ranges and (re)write the batch's output, then verify and commit
FINISH_COMMIT = "finish_commit"  # a previous run verified the output and began committing: finish that


# Which status a batch may move to from which. A regular batch never leaves the ledger, so a
# COMMITTED batch stays COMMITTED: backfills replay it without touching its status.
TRANSITIONS: Mapping[BatchStatus, frozenset[BatchStatus]] = {
    BatchStatus.PLANNED: frozenset({BatchStatus.WRITTEN, BatchStatus.FAILED}),
    BatchStatus.FAILED: frozenset({BatchStatus.WRITTEN, BatchStatus.FAILED}),
    BatchStatus.WRITTEN: frozenset({BatchStatus.COMMITTING, BatchStatus.WRITTEN, BatchStatus.FAILED}),
    BatchStatus.COMMITTING: frozenset({BatchStatus.COMMITTED}),
    BatchStatus.COMMITTED: frozenset(),
}


def check_transition(pipeline_name: str, batch_id: int, current: BatchStatus, new: BatchStatus) -> None:
    if new not in TRANSITIONS[current]:
        raise StateCorruptError(f"pipeline {pipeline_name!r}: batch {batch_id} cannot go from {current.value} to {new.value}")


@dataclass(frozen=True)
class Head:
    """The pipeline's head item: the next batch id, the batch in flight, and a version for conditions."""

    next_batch_id: int = 1
    in_flight: int | None = None
    version: int = 0  # 0: the item does not exist yet
    # How many re-decodes (and rebuilds' switches) the ledger has made visible: a table whose current snapshot records
    # fewer was rolled back past one (holdings.compare). Only ever raised (StateStore.record_redecodes); 0 when absent.
    redecodes: int = 0


@dataclass(frozen=True)
class StartPosition:
    """Where a shard with no checkpoint starts: resolved once, then stored in the shard item."""

    kind: str  # TRIM_HORIZON or AT_TIMESTAMP (LATEST resolves to AT_TIMESTAMP of the first plan)
    timestamp: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "timestamp": None if self.timestamp is None else self.timestamp.isoformat()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartPosition:
        ts = data.get("timestamp")
        return cls(kind=str(data["kind"]), timestamp=None if ts is None else datetime.fromisoformat(ts))


def resolve_start(pipeline: PipelineConfig, shard: ShardInfo, now: datetime) -> StartPosition:
    """A new shard's start position, resolved once and stored.

    A child of a split or merge starts at its own first record, as the KCL does. LATEST becomes
    AT_TIMESTAMP of this plan, so it does not move at the next plan and nothing that arrives after
    the pipeline started is skipped.
    """
    if shard.parent_shard_ids or pipeline.initial_position == "TRIM_HORIZON":
        return StartPosition("TRIM_HORIZON")
    if pipeline.initial_position == "LATEST":
        return StartPosition("AT_TIMESTAMP", now)
    return StartPosition("AT_TIMESTAMP", pipeline.initial_timestamp)


@dataclass(frozen=True)
class ShardState:
    """A shard's stored progress: the sequence number of the last committed record, or None."""

    shard_id: str
    checkpoint: int | None = None
    finished: bool = False  # a closed shard read to SHARD_END and committed: never read again
    parent_shard_ids: tuple[str, ...] = ()
    start_position: StartPosition | None = None
    last_batch_id: int | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class ShardResult:
    """What the replay job wrote for one shard range, from its result manifest.

    ``records`` are rows in the batch's partition, ``bad_records`` rows in its quarantine partition;
    sequence numbers, bytes and the checksum cover both.
    """

    shard_id: str
    records: int
    bytes: int
    first_sequence_number: int
    last_sequence_number: int
    checksum: str
    bad_records: int = 0
    last_arrival: datetime | None = None  # when the shard's last record in the batch arrived
    # The row digest (records.row_digest summed over the shard's rows, "xxh3:<16 hex>", or md5's 16 digits alone in
    # results written before 2026-11-27): unlike ``checksum`` (Spark's xxhash64), verify recomputes it from the files
    # with pyarrow, with the hash it names. None in manifests of older releases still.
    digest: str | None = None
    # (the last record read, the first record after it; None: the closed shard's end) where the last record read was
    # gone once the next page was read, near the retention, so records between may have been trimmed unread: an
    # acknowledged loss, which verify records as a gap (range_reader.iterate_range).
    unconfirmed: tuple[tuple[int, int | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "records": self.records,
            "bytes": self.bytes,
            "first_sequence_number": format_sequence_number(self.first_sequence_number),
            "last_sequence_number": format_sequence_number(self.last_sequence_number),
            "checksum": self.checksum,
            "bad_records": self.bad_records,
            "last_arrival": None if self.last_arrival is None else self.last_arrival.isoformat(),
            **({"digest": self.digest} if self.digest is not None else {}),
            **({"unconfirmed": [_span_to_dict(span) for span in self.unconfirmed]} if self.unconfirmed else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardResult:
        shard_id = str(data["shard_id"])
        return cls(
            shard_id=shard_id,
            records=int(data["records"]),
            bytes=int(data["bytes"]),
            first_sequence_number=parse_sequence_number(data["first_sequence_number"], f"first of {shard_id}"),
            last_sequence_number=parse_sequence_number(data["last_sequence_number"], f"last of {shard_id}"),
            checksum=str(data["checksum"]),
            bad_records=int(data.get("bad_records", 0)),
            last_arrival=datetime.fromisoformat(data["last_arrival"]) if data.get("last_arrival") else None,
            digest=str(data["digest"]) if data.get("digest") is not None else None,
            unconfirmed=tuple(_span_from_dict(span, shard_id) for span in data.get("unconfirmed") or ()),
        )


def _span_to_dict(span: tuple[int, int | None]) -> dict[str, str | None]:
    after, first = span
    return {"after": format_sequence_number(after), "first": None if first is None else format_sequence_number(first)}


def _span_from_dict(data: Mapping[str, Any], shard_id: str) -> tuple[int, int | None]:
    first = data.get("first")
    return (
        parse_sequence_number(data["after"], f"unconfirmed span of {shard_id}"),
        None if first is None else parse_sequence_number(first, f"unconfirmed span of {shard_id}"),
    )


def range_checkpoint(rng: SequenceRange, results: Mapping[str, ShardResult]) -> int:
    """Where a committed range leaves its shard's checkpoint: its end; for a closed shard read to SHARD_END, the last
    record read (the shard is then finished). A range every record of which was gone (an acknowledged gap, no row)
    leaves it at its end as well: the loss is the gap's."""
    result = results.get(rng.shard_id)
    return result.last_sequence_number if rng.to_shard_end and result is not None else rng.end


@dataclass(frozen=True)
class ReplayResult:
    """What the replay job wrote for a batch: per-shard counts, bytes and row checksums (stored as the batch's result
    manifest, ``_manifests/batch_id=<id>.json``, then with its ledger entry)."""

    pipeline_name: str
    batch_id: int
    shards: tuple[ShardResult, ...]
    seconds: float = 0.0
    # The replay that wrote the batch's table files (layout.data_path): each run writes a folder of its own, and the
    # table's snapshot says which attempt is the batch's. None for a directory output.
    attempt: str | None = None
    # How the job decoded the batch's payloads; a manifest of release 0.1.0 or earlier records none (EARLIER).
    decoding: Decoding = EARLIER

    @property
    def records(self) -> int:
        return sum(s.records for s in self.shards)

    def digests(self) -> dict[str, str]:
        """The row digest of each shard that records one: every shard's, but in a manifest of a release before row
        digests, whose shards' counts and bounds are all there is to check."""
        return {s.shard_id: s.digest for s in self.shards if s.digest is not None}

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def bad_records(self) -> int:
        return sum(s.bad_records for s in self.shards)

    def by_shard(self) -> dict[str, ShardResult]:
        return {s.shard_id: s for s in self.shards}

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline_name,
            "batch_id": self.batch_id,
            "records": self.records,
            "bytes": self.bytes,
            "bad_records": self.bad_records,
            "seconds": self.seconds,
            "shards": [s.to_dict() for s in self.shards],
            **({"attempt": self.attempt} if self.attempt is not None else {}),
            **({"decoding": self.decoding.to_dict()} if self.decoding != EARLIER else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayResult:
        return cls(
            pipeline_name=str(data["pipeline"]),
            batch_id=int(data["batch_id"]),
            shards=tuple(ShardResult.from_dict(s) for s in data["shards"]),
            seconds=float(data.get("seconds", 0.0)),
            attempt=str(data["attempt"]) if data.get("attempt") else None,
            decoding=Decoding.from_dict(data.get("decoding")),
        )


@dataclass(frozen=True)
class Gap:
    """Records of a shard that were gone before they were read, lost with an operator's acknowledgement.

    Everything after ``after`` (a sequence number; None: the shard's start) and before
    ``first_available`` was trimmed from the stream (None: all of it: the shard itself left the stream before it was
    read to its end, or, detected at replay, every record of the range was gone); ``acknowledged_by`` names the run
    that accepted it.
    """

    shard_id: str
    after: int | None
    first_available: int | None
    acknowledged_by: str
    # "plan" (the checkpoint was gone), "replay" (the range start was gone) or "read" (records after ``after`` were
    # trimmed while the range was read, near the retention: ``after`` was gone once the page after it was read)
    detected: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "after": None if self.after is None else format_sequence_number(self.after),
            "first_available": None if self.first_available is None else format_sequence_number(self.first_available),
            "acknowledged_by": self.acknowledged_by,
            "detected": self.detected,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Gap:
        after, first = data.get("after"), data.get("first_available")
        return cls(
            shard_id=str(data["shard_id"]),
            after=None if after is None else parse_sequence_number(after),
            first_available=None if first is None else parse_sequence_number(first),
            acknowledged_by=str(data["acknowledged_by"]),
            detected=str(data["detected"]),
        )


@dataclass(frozen=True)
class PlanNotes:
    """What a plan notes about its batch beside the ranges, each per shard id; None for what the batch does not note.

    Stored as the batch's ``extra``, a JSON object under these keys, in the state table and in the output's commit
    record; keys this release does not know (a newer one's) are kept as they are (``other``).
    """

    lag_millis: Mapping[str, int] | None = None  # MillisBehindLatest after each shard's checkpoint, at planning time
    capped: Mapping[str, int] | None = None  # the ranges cut short: how far each one's end was behind the tip (ms)
    estimated_records: Mapping[str, int] | None = None  # the plan's estimate of each range's records, where it could tell
    estimated_bytes: Mapping[str, int] | None = None  # and of its bytes
    restored_from: str | None = None  # the commit record a recovery rebuilt the batch from
    other: Mapping[str, Any] = field(default_factory=dict)

    KEYS: ClassVar[tuple[str, ...]] = ("lag_millis", "capped", "estimated_records", "estimated_bytes", "restored_from")

    def __bool__(self) -> bool:
        return bool(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        known = {key: getattr(self, key) for key in self.KEYS if getattr(self, key) is not None}
        return {**self.other, **{k: v if k == "restored_from" else dict(v) for k, v in known.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanNotes:
        def shards(key: str) -> dict[str, int] | None:
            value = data.get(key)
            return None if value is None else dict(value)  # as stored: read as it always was, a bad value at its use

        restored = data.get("restored_from")
        return cls(
            lag_millis=shards("lag_millis"), capped=shards("capped"), estimated_records=shards("estimated_records"),
            estimated_bytes=shards("estimated_bytes"), restored_from=None if restored is None else str(restored),
            other={k: v for k, v in data.items() if k not in cls.KEYS},
        )  # fmt: skip


@dataclass(frozen=True)
class Batch:
    """One entry of the batch ledger: ranges fixed at planning time, never changed afterwards."""

    pipeline_name: str
    batch_id: int
    status: BatchStatus
    ranges: tuple[SequenceRange, ...]
    stream: str
    run_id: str
    created_at: datetime
    committed_at: datetime | None = None
    result: ReplayResult | None = None
    attempts: int = 0
    error: str | None = None
    gaps: tuple[Gap, ...] = ()
    notes: PlanNotes = field(default_factory=PlanNotes)  # stored as "extra"
    # The Iceberg snapshot that made the batch's rows the table's (its latest replay's, after a backfill); None
    # for a directory output, and until the commit's table step.
    snapshot_id: int | None = None
    # The snapshot of the pipeline's quarantine table that made the batch's undecodable records its own; None when it
    # holds none of them (no record quarantined), for a directory output, and in entries of releases before the table.
    quarantine_snapshot_id: int | None = None
    # A re-decode's verified attempt of a committed batch, waiting for its selection's one commit (``staged_by`` names
    # the backfill run); the batch's ``result`` stays the committed one until that commit replaces it.
    staged: ReplayResult | None = None
    staged_by: str | None = None
    # The backfill run whose re-decode made the batch's current rows, if one did.
    redecoded_by: str | None = None

    def verified_result(self) -> ReplayResult:
        """The manifest verify stored with the batch; a batch that should hold one and does not is corrupt state."""
        if self.result is None:
            raise StateCorruptError(
                f"pipeline {self.pipeline_name!r}: batch {self.batch_id} ({self.status.value}) holds no verified manifest"
            )
        return self.result

    @property
    def behind_seconds(self) -> float | None:
        """How far behind the tip its plan found the pipeline: how long the oldest record it reads had waited, at
        planning time (None when no range knows its start's arrival)."""
        arrivals = [r.start_arrival for r in self.ranges if r.start_arrival is not None]
        return max(0.0, (self.created_at - min(arrivals)).total_seconds()) if arrivals else None

    def figures(self) -> dict[str, Any]:
        """The few numbers the page charts, stored beside the batch so that a day of batches reads in a few calls,
        whatever the shard count (the ranges and the manifest grow with it)."""
        m = self.result
        behind = self.behind_seconds
        return {
            "shards": len(self.ranges),
            "behind_seconds": None if behind is None else round(behind, 3),
            "records": m.records if m else None,
            "bytes": m.bytes if m else None,
            "bad_records": m.bad_records if m else None,
            # How the batch was decoded, whether a re-decode made its rows, and a re-decode waiting for its commit: only
            # where there is something to say, so a day of plain batches stays as small as it was.
            **({"decoding": m.decoding.fingerprint} if m and m.decoding != EARLIER else {}),
            **({"redecoded": True} if self.redecoded_by is not None else {}),
            **({"staged": self.staged_by} if self.staged_by is not None else {}),
        }

    def with_status(self, status: BatchStatus, **changes: Any) -> Batch:
        check_transition(self.pipeline_name, self.batch_id, self.status, status)
        return replace(self, status=status, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The whole ledger entry as JSON-ready values (the output's commit record holds it)."""
        return {
            "pipeline": self.pipeline_name,
            "batch_id": self.batch_id,
            "status": self.status.value,
            "ranges": [r.to_dict() for r in self.ranges],
            "stream": self.stream,
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(),
            "committed_at": None if self.committed_at is None else self.committed_at.isoformat(),
            "manifest": None if self.result is None else self.result.to_dict(),
            "attempts": self.attempts,
            "error": self.error,
            "gaps": [g.to_dict() for g in self.gaps],
            "extra": self.notes.to_dict(),
            "snapshot_id": self.snapshot_id,
            **({"quarantine_snapshot_id": self.quarantine_snapshot_id} if self.quarantine_snapshot_id is not None else {}),
            **({"staged": self.staged.to_dict(), "staged_by": self.staged_by} if self.staged is not None else {}),
            **({"redecoded_by": self.redecoded_by} if self.redecoded_by is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Batch:
        committed_at, result = data.get("committed_at"), data.get("manifest")
        return cls(
            pipeline_name=str(data["pipeline"]),
            batch_id=int(data["batch_id"]),
            status=BatchStatus(data["status"]),
            ranges=tuple(SequenceRange.from_dict(r) for r in data["ranges"]),
            stream=str(data["stream"]),
            run_id=str(data["run_id"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            committed_at=None if committed_at is None else datetime.fromisoformat(committed_at),
            result=None if result is None else ReplayResult.from_dict(result),
            attempts=int(data.get("attempts", 0)),
            error=data.get("error"),
            gaps=tuple(Gap.from_dict(g) for g in data.get("gaps", ())),
            notes=PlanNotes.from_dict(data.get("extra") or {}),
            snapshot_id=int(data["snapshot_id"]) if data.get("snapshot_id") is not None else None,
            quarantine_snapshot_id=_int_or_none(data.get("quarantine_snapshot_id")),
            staged=ReplayResult.from_dict(data["staged"]) if data.get("staged") is not None else None,
            staged_by=None if data.get("staged_by") is None else str(data["staged_by"]),
            redecoded_by=None if data.get("redecoded_by") is None else str(data["redecoded_by"]),
        )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def superseded(pipeline: PipelineConfig, batch: Batch) -> BatchSupersededError:
    """The error of a run that finds its batch verified and committed by another run of the pipeline (the loser of two
    runs of one batch at once): it stops, changing nothing, and is not retried, as nothing is left for it to do."""
    return BatchSupersededError(
        f"pipeline {pipeline.name!r}, batch {batch.batch_id} is {batch.status.value}: it was verified and committed after this "
        "run replayed it (by a run replaying it at the same time, or by this run before this task was run again). This "
        f"run changes nothing: the ledger and the output's {COMMITS_DIR} "
        f"record describe the committed batch, and the output's {RESULTS_DIR} holds the last replay's result, "
        "which may be this run's. Nothing is left to do: the next run plans the next batch"
    )


@contextmanager
def committed_meanwhile(pipeline: PipelineConfig, store: StateStore, batch_id: int) -> Iterator[None]:
    """On a failure, the batch's status is read again: when another run verified it and began (or finished) committing it
    meanwhile, its commit removed this run's attempt, which is why this run failed (Spark's FileNotFoundException on an
    attempt file, files gone at verify, a conditional write refused). The run then fails with ``superseded``."""
    try:
        yield
    except Exception as exc:
        try:
            batch = store.get_batch(pipeline.name, batch_id)
        except Exception:
            raise exc from None  # the first failure is the one to report
        if batch.status in (BatchStatus.COMMITTING, BatchStatus.COMMITTED):
            raise superseded(pipeline, batch) from exc
        raise


@dataclass(frozen=True)
class BatchSummary:
    """A batch without its ranges and manifest: its status, times, failures and the figures of Batch.figures()."""

    batch_id: int
    status: BatchStatus
    created_at: datetime
    committed_at: datetime | None = None
    attempts: int = 0
    error: str | None = None  # the current failure, cleared when a later attempt verifies the batch
    figures: Mapping[str, Any] = field(default_factory=dict)  # empty for a batch written before figures were stored
    failures: int = 0  # how many of its attempts failed
    last_error: str | None = None  # the cause of the last of them, kept after a later attempt succeeded


class RunKind(StrEnum):
    """Which run replays a batch: the regular one (its in-flight batch) or a backfill (a committed batch, again)."""

    REGULAR = "regular"
    BACKFILL = "backfill"


@dataclass(frozen=True)
class Progress:
    """What the replay of a batch has read so far, per shard, as its job last reported it."""

    batch_id: int
    records: Mapping[str, int]  # shard id -> records read so far
    done: frozenset[str]  # the shards whose range the job has read to its end
    updated_at: datetime
    kind: RunKind = RunKind.REGULAR  # a backfill's progress is kept apart from the regular batch's


class StateStore(Protocol):
    """Where checkpoints and the batch ledger live; every mutation is conditional."""

    def ensure_table(self) -> None: ...

    def get_head(self, pipeline_name: str) -> Head: ...

    def get_shards(self, pipeline_name: str) -> dict[str, ShardState]: ...

    def put_shard_if_absent(self, pipeline_name: str, shard: ShardState) -> ShardState:
        """Store a newly seen shard; if a concurrent plan stored it first, return what it stored."""
        ...

    def put_shards_if_absent(self, pipeline_name: str, shards: Sequence[ShardState]) -> dict[str, ShardState]:
        """Store newly seen shards, each only if absent, in as few round trips as the table allows; returns each
        shard as stored (what a concurrent plan stored first, where one did)."""
        ...

    def create_batch(self, batch: Batch, head: Head) -> Head:
        """Write the batch and the new head in one transaction, conditioned on ``head`` being current."""
        ...

    def get_batch(self, pipeline_name: str, batch_id: int) -> Batch: ...

    def list_batches(self, pipeline_name: str) -> list[Batch]:
        """The whole ledger, in id order: for tests and recovery, never on a path that runs every cycle."""
        ...

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        """The named batches that exist, by id: reads those and no others, however long the ledger.

        Batch ids are dense (1 to the head's next id - 1; a restore may leave a few out), so the page, the
        backfill and the stuck check name what they need by id rather than read the ledger.
        """
        ...

    def get_summaries(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, BatchSummary]:
        """The named batches that exist, by id, without their ranges and manifest: the page's charts read a day of them."""
        ...

    def put_progress(self, progress: Progress, pipeline_name: str) -> None:
        """Store the replay's progress, replacing the last one of its kind (regular or backfill); nothing depends on
        it but the page. Stored in pieces of a bounded number of shards, so a wide stream's fits too."""
        ...

    def get_progress(self, pipeline_name: str) -> dict[RunKind, Progress]:
        """The last progress stored of each kind (regular, backfill), read together in one cheap call."""
        ...

    def update_batch(self, batch: Batch, expected: BatchStatus) -> None:
        """Replace the batch's status, manifest, attempts, error and gaps, conditioned on its current status."""
        ...

    def advance_checkpoint(self, pipeline_name: str, shard_id: str, previous: int | None, new: int, batch_id: int, finished: bool) -> None:
        """Move a checkpoint from ``previous`` to ``new``, conditioned on it still being ``previous``."""
        ...

    def set_replayed(self, batch: Batch, expected: BatchStatus, previous_snapshot: int | None = None) -> None:
        """Keep a backfill's replayed manifest and the table snapshots that hold its attempt (``snapshot_id``,
        ``quarantine_snapshot_id``) and ``redecoded_by``, and drop a staged re-decode, in one write conditioned on the
        batch's status being ``expected``: the ledger never names one attempt's files with another's snapshot. With
        ``previous_snapshot``, also on the entry still naming that snapshot: a compaction's write loses to a backfill, a
        re-decode or a restore of the batch that kept its own since."""
        ...

    def set_staged(self, batch: Batch, expected: BatchStatus) -> None:
        """Keep a re-decode's verified attempt (``staged``, ``staged_by``) beside the batch's committed result, conditioned
        on its status being ``expected``: it waits there for its selection's one commit (``set_replayed``)."""
        ...

    def record_redecodes(self, pipeline_name: str, redecodes: int) -> None:
        """Raise the head's count of re-decodes made visible to ``redecodes``; a head with as many or more keeps its own.
        Not a version change: it conditions no plan or commit, and a plan's write of the head keeps it."""
        ...

    def complete_batch(self, batch: Batch, committed_at: datetime) -> None:
        """Mark the batch COMMITTED (keeping its ``snapshot_id`` and ``quarantine_snapshot_id``, if any) and clear the
        head's in-flight id, in one transaction."""
        ...

    def mark_finished(self, pipeline_name: str, shard_id: str, checkpoint: int | None) -> None:
        """Mark a closed, drained shard finished, conditioned on its checkpoint still being ``checkpoint``."""
        ...

    def restore(self, pipeline_name: str, head: Head, shards: Sequence[ShardState], batches: Sequence[Batch]) -> None:
        """Write a pipeline's state rebuilt from its output: every item conditioned on the pipeline having no head.

        The head goes last, so a restore cut short leaves no head, and no run plans until it is done again.
        """
        ...
