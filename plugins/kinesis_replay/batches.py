"""The steps DAG tasks call: plan (or resume) a batch, verify its output, commit it."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from kinesis_replay import guards, iceberg_table, kinesis, output, table_maintenance
from kinesis_replay.config import PipelineConfig
from kinesis_replay.errors import (
    BatchSupersededError,
    ConfigError,
    DataLossError,
    KinesisReplayError,
    ParameterError,
    StateConflictError,
    VerificationError,
)
from kinesis_replay.formats import duration
from kinesis_replay.holdings import Commit, Ledger
from kinesis_replay.ranges import SequenceRange, ShardInfo, parse_sequence_number, shards_to_plan
from kinesis_replay.records import format_digest
from kinesis_replay.state import Batch, BatchStatus, Gap, Manifest, PlanNotes, ShardResult, ShardState, StartPosition, StateStore

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

# What a run does with the batch its plan step returns.
REPLAY = "replay"  # read the ranges and (re)write the batch's output, then verify and commit
FINISH_COMMIT = "finish_commit"  # a previous run verified the output and began committing: finish that
_LOGGED_RANGES = 20  # a plan logs its first ranges one by one, then a summary


@dataclass(frozen=True)
class PlanResult:
    batch: Batch | None  # None: no shard has anything new
    resumed: bool
    waiting: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (child shard, parents it waits for)
    lag_millis: Mapping[str, int] = field(default_factory=dict)  # MillisBehindLatest after each checkpoint
    # Records and bytes per range, where planning could tell: each shard's rate on its last committed range.
    estimates: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def action(self) -> str | None:
        if self.batch is None:
            return None
        return FINISH_COMMIT if self.batch.status == BatchStatus.COMMITTING else REPLAY


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


def check_acknowledged(pipeline: PipelineConfig, acknowledged: frozenset[str], known: set[str], where: str) -> None:
    """Every shard of ``acknowledge_data_loss`` is one this run reads: a mistyped id would be ignored, and the run fail again."""
    unknown = sorted(acknowledged - known)
    if unknown:
        raise ParameterError(
            f"pipeline {pipeline.name!r}: acknowledge_data_loss names {', '.join(unknown)}, not among {where} "
            f"({', '.join(sorted(known)[:10])}{' ...' if len(known) > 10 else ''}); shard ids are written in full, such as "
            "shardId-000000000001. Nothing was acknowledged or changed"
        )


def plan_batch(
    pipeline: PipelineConfig,
    kinesis_client: KinesisClient,
    store: StateStore,
    run_id: str,
    now: datetime | None = None,
    acknowledged: frozenset[str] = frozenset(),
    dry_run: bool = False,
) -> PlanResult:
    """Resume the batch in flight, or fix the next batch's ranges and store it before anything is read.

    ``acknowledged`` names the shards whose lost records (a checkpoint trimmed by retention) an
    operator has accepted for this run; the loss is then recorded in the batch as a gap. A
    ``dry_run`` plans the same way and writes nothing: no batch, no new shard, no finished mark.
    """
    now = now or datetime.now(UTC)
    head = store.get_head(pipeline.name)
    guards.check_before_plan(pipeline, head)  # before anything is written, the output and the table agree
    if head.in_flight is not None:
        batch = store.get_batch(pipeline.name, head.in_flight)
        check_acknowledged(pipeline, acknowledged, {r.shard_id for r in batch.ranges}, f"the ranges of batch {batch.batch_id}")
        if not dry_run:  # an owner record deleted while the batch was in flight is written again (check_before_plan
            guards.claim_output(pipeline, now)  # found the root's commit records to be this pipeline's, if it has any)
        log.info("pipeline %s: resuming batch %d (%s), ranges unchanged", pipeline.name, batch.batch_id, batch.status.value)
        return PlanResult(batch=batch, resumed=True)

    shards = kinesis.list_shards(kinesis_client, pipeline.stream, pipeline.read)
    # Before the first write, the output is claimed for this stream (not a new one of the same name), and a start
    # resolved from now is never before the claim; a dry run only checks.
    guards.claim_output(pipeline, now, kinesis.stream_created(kinesis_client, pipeline.stream, pipeline.read), dry_run)
    planner = _Planner(pipeline, kinesis_client, store, now, dry_run)
    waiting = planner.plan_shards(shards, acknowledged, run_id)
    waiting_ids = tuple((s.shard_id, tuple(parents)) for s, parents in waiting)
    ranges, lag, estimates = planner.ranges, planner.lag, planner.estimates
    if not ranges:
        if planner.gaps:  # acknowledged gone shards: recorded with a batch only, so they stay unfinished until one is planned
            log.warning("pipeline %s: the acknowledged loss of shards %s is recorded with the next batch, once the stream has "
                        "records to plan; until then they stay as they are", pipeline.name, [g.shard_id for g in planner.gaps])  # fmt: skip
        log.info("pipeline %s: nothing new on stream %s", pipeline.name, pipeline.stream)
        return PlanResult(batch=None, resumed=False, waiting=waiting_ids, lag_millis=lag)

    batch = Batch(
        pipeline=pipeline.name, batch_id=head.next_batch_id, status=BatchStatus.PLANNED, ranges=tuple(ranges),
        stream=pipeline.stream, run_id=run_id, created_at=now, gaps=tuple(planner.gaps),
        notes=PlanNotes(lag_millis=lag, capped=dict(sorted(planner.left.items())),
                        estimated_records={shard: records for shard, (records, _) in sorted(estimates.items())},
                        estimated_bytes={shard: size for shard, (_, size) in sorted(estimates.items())}),
    )  # fmt: skip
    if dry_run:
        return PlanResult(batch, False, waiting_ids, lag, estimates)
    try:
        store.create_batch(batch, head)
    except StateConflictError as exc:
        raise StateConflictError(
            f"pipeline {pipeline.name!r}: another run planned a batch while this one was planning batch {batch.batch_id}; "
            f"this run stops and changes nothing ({exc})"
        ) from exc
    for gap in batch.gaps:
        if gap.first_available is None:  # a gone shard's acknowledged loss, now in the ledger: the shard is done with
            store.mark_finished(pipeline.name, gap.shard_id, gap.after)
    for rng in ranges[:_LOGGED_RANGES]:
        log.info("pipeline %s: batch %d plans %s%s", pipeline.name, batch.batch_id, rng.describe(),
                 " (capped by max_batch)" if rng.shard_id in planner.left else "")  # fmt: skip
    log.info("pipeline %s: batch %d plans %d ranges, %d of them capped by max_batch; finding their ends took %d probes",
             pipeline.name, batch.batch_id, len(ranges), len(planner.left), planner.probes)  # fmt: skip
    return PlanResult(batch, False, waiting_ids, lag, estimates)


class _Planner:
    """One plan's walk over the stream's shards: what it found for each, in the order resharding allows.

    The shards that may be planned together (every shard whose parents are finished) are planned
    concurrently, ``read.plan_concurrency`` at a time, each within its own call budget; what they found
    is gathered in the order ListShards gave them, so a plan does not depend on which answered first.
    """

    def __init__(self, pipeline: PipelineConfig, client: KinesisClient, store: StateStore, now: datetime, dry_run: bool) -> None:
        self.pipeline, self.client, self.store, self.now, self.dry_run = pipeline, client, store, now, dry_run
        self.ranges: list[SequenceRange] = []
        self.gaps: list[Gap] = []
        self.lag: dict[str, int] = {}
        self.estimates: dict[str, tuple[int, int]] = {}
        self.left: dict[str, int] = {}  # capped shards: how far each range's end is behind the tip (ms)
        self.probes = 0
        self.rates: dict[str, ShardRate] = {}

    def plan_shards(self, shards: list[ShardInfo], acknowledged: frozenset[str], run_id: str) -> list[tuple[ShardInfo, list[str]]]:
        """Plan every shard that may be read; returns those still waiting for their parents.

        A closed shard found drained is finished at once, which may free its children in this same plan.
        """
        states = self.store.get_shards(self.pipeline.name)
        listed = {s.shard_id for s in shards}
        gone = sorted(sid for sid, state in states.items() if not state.finished and sid not in listed)
        where = f"the shards of stream {self.pipeline.stream}"
        check_acknowledged(self.pipeline, acknowledged, listed | set(gone), where)
        if gone:
            states.update(self._shards_gone([states[sid] for sid in gone], acknowledged, run_id))
        self.rates = shard_rates(self.store, self.pipeline.name, states)
        finished = {sid: s.finished for sid, s in states.items()}
        seen: set[str] = set()
        with ThreadPoolExecutor(max_workers=self.pipeline.read.plan_concurrency, thread_name_prefix="plan") as pool:
            while True:
                ready, waiting = shards_to_plan(shards, finished)
                ready = [s for s in ready if s.shard_id not in seen]
                if not ready:
                    return waiting
                seen.update(s.shard_id for s in ready)
                states.update(self._store_new_shards([s for s in ready if s.shard_id not in states]))
                for state, planned in pool.map(lambda s: self._plan_shard(s, states[s.shard_id]), ready):
                    finished[state.shard_id] = self._gather(state, planned, acknowledged, run_id)

    def _shards_gone(self, gone: list[ShardState], acknowledged: frozenset[str], run_id: str) -> dict[str, ShardState]:
        """Shards the pipeline had not read to their end, no longer listed: Kinesis drops a closed shard once its records
        are past retention, and its unread records with it (a pipeline paused, or failing, longer than that across a
        split or merge). Refused until acknowledged; then recorded as gaps of the planned batch (plan_batch marks them finished)."""
        refused = [s for s in gone if s.shard_id not in acknowledged]
        if refused:
            shown = ", ".join(f"{s.shard_id} (checkpoint {s.checkpoint if s.checkpoint is not None else 'none'})" for s in refused[:10])
            raise DataLossError(
                f"pipeline {self.pipeline.name!r}, stream {self.pipeline.stream}: shards {shown}{' ...' if len(refused) > 10 else ''} "
                "are no longer in the stream, and were not read to their end: Kinesis removed them with their records, "
                "past the stream's retention (was the pipeline paused, or failing, longer than that across a split or "
                "merge?). Their records after those checkpoints are lost, if they had any (after a recovery from the "
                "output, a shard drained before the state was lost looks the same: the output cannot say it was drained). "
                "Nothing was read. To accept the loss, trigger a "
                f'run with {{"acknowledge_data_loss": {json.dumps([s.shard_id for s in refused])}}}'
            )
        for state in gone:
            log.warning("stream %s, shard %s: acknowledged loss of the gone shard after checkpoint %s", self.pipeline.stream,
                        state.shard_id, state.checkpoint)  # fmt: skip
            self.gaps.append(Gap(state.shard_id, state.checkpoint, None, acknowledged_by=run_id, detected="plan"))
        return {s.shard_id: replace(s, finished=True) for s in gone}  # marked finished once the batch holding the gaps is stored

    def _store_new_shards(self, shards: list[ShardInfo]) -> dict[str, ShardState]:
        """Fix the start of each shard seen for the first time, and store it (all at once) before its range is planned."""
        new = [
            ShardState(s.shard_id, parent_shard_ids=s.parent_shard_ids, start_position=resolve_start(self.pipeline, s, self.now))
            for s in shards
        ]
        self._refuse_a_start_to_come(new)
        if self.dry_run or not new:
            return {s.shard_id: s for s in new}
        return self.store.put_shards_if_absent(self.pipeline.name, new)

    def _refuse_a_start_to_come(self, new: list[ShardState]) -> None:
        """An initial_timestamp after this plan: Kinesis refuses such an iterator, and a mistyped year would wait for years."""
        starts = {s.shard_id: s.start_position.timestamp for s in new if s.start_position is not None}
        later = sorted(shard_id for shard_id, at in starts.items() if at is not None and at > self.now)
        if later:
            when = self.pipeline.initial_timestamp or self.now
            raise ConfigError(
                f"pipeline {self.pipeline.name!r}: initial_timestamp {when.isoformat()} is after this plan ({self.now.isoformat()}), "
                f"so the new shards {', '.join(later[:5])}{' ...' if len(later) > 5 else ''} of stream "
                f"{self.pipeline.stream} cannot start there: Kinesis refuses an iterator at a time to come. Nothing was "
                "stored. Set a time in the past (was the year mistyped?), or leave the pipeline unscheduled until then"
            )

    def _plan_shard(self, shard: ShardInfo, state: ShardState) -> tuple[ShardState, _ShardPlan]:
        """Plan one shard's range, if it has anything new (in a worker thread: it only reads)."""
        rate = self.rates.get(shard.shard_id)
        return state, _plan_range(self.pipeline, self.client, self.store, shard, state, self.now, self.dry_run, rate)

    def _gather(self, state: ShardState, planned: _ShardPlan, acknowledged: frozenset[str], run_id: str) -> bool:
        """Add one shard's plan to the batch; returns whether the shard is now drained."""
        shard_id = state.shard_id
        self.probes += planned.probes
        if planned.lag_millis is not None:
            self.lag[shard_id] = planned.lag_millis
        if planned.range is not None:
            if planned.checkpoint_missing:
                self.gaps.append(_acknowledged_gap(self.pipeline, state, planned.range, self.now, acknowledged, run_id))
            self.ranges.append(planned.range)
            if planned.estimate is not None:
                self.estimates[shard_id] = planned.estimate
            if planned.capped:
                self.left[shard_id] = planned.left_millis
        return planned.drained


class _ShardPlan(NamedTuple):
    range: SequenceRange | None  # None: nothing new
    drained: bool = False  # closed, read to its end, and now marked finished
    checkpoint_missing: bool = False  # the checkpoint was trimmed: records between it and the range may be lost
    lag_millis: int | None = None
    estimate: tuple[int, int] | None = None  # records and bytes in the range, where known
    capped: bool = False  # the range ends at its cap (max_batch): the shard holds more, for the next batches
    left_millis: int = 0  # a capped range: how far its end is behind the tip
    probes: int = 0  # what finding the end cost


def _plan_range(
    pipeline: PipelineConfig, client: KinesisClient, store: StateStore, shard: ShardInfo, state: ShardState, now: datetime,
    dry_run: bool, rate: ShardRate | None = None,
) -> _ShardPlan:  # fmt: skip
    calls = kinesis.ShardCalls(client, pipeline.stream, shard.shard_id, pipeline.read)  # one budget for all of the shard's calls
    following = kinesis.first_record_after(
        client, pipeline.stream, shard.shard_id, state.checkpoint, state.start_position, pipeline.read, shard.is_closed, calls
    )
    if following.record is None:
        if following.checkpoint_missing:
            log.warning("stream %s, shard %s: the checkpoint %s has been trimmed; nothing follows it yet",
                        pipeline.stream, shard.shard_id, state.checkpoint)  # fmt: skip
        elif following.shard_ended and shard.is_closed:
            # Closed, and nothing after the checkpoint: the shard is drained. Like the KCL's SHARD_END.
            if not dry_run:
                store.mark_finished(pipeline.name, shard.shard_id, state.checkpoint)
            log.info("pipeline %s: shard %s is closed and fully read: finished", pipeline.name, shard.shard_id)
            return _ShardPlan(None, drained=True)
        return _ShardPlan(None, lag_millis=following.millis_behind_latest)
    first = following.record
    start = parse_sequence_number(first["SequenceNumber"])
    arrival: datetime = first["ApproximateArrivalTimestamp"]
    behind = following.millis_behind_latest
    if shard.ending_sequence_number is not None:
        # A closed shard takes no more records: "up to SHARD_END" is already a fixed bound. It is never capped:
        # its children wait for it, and its records are bounded already.
        rng = SequenceRange(shard.shard_id, start, shard.ending_sequence_number, state.checkpoint, True, arrival)
        return _ShardPlan(rng, checkpoint_missing=following.checkpoint_missing, lag_millis=behind)
    cap = arrival + pipeline.max_batch.span_for(rate.bytes_per_second if rate else None, pipeline.read)
    found = kinesis.find_end(client, pipeline.stream, shard.shard_id, first, min(now, cap), pipeline.read, behind, calls, following.after)
    rng = SequenceRange(shard.shard_id, start, found.end, state.checkpoint, False, arrival)
    capped = cap < now and found.more_after
    # How far the range's end is from the tip: from the start page's MillisBehindLatest where Kinesis gave it.
    tip = arrival + timedelta(milliseconds=behind) if behind else now
    left = max(0, int((tip - found.end_arrival).total_seconds() * 1000)) if capped else 0
    span = (found.end_arrival - arrival).total_seconds()
    estimate = rate.estimate(span) if rate else None
    return _ShardPlan(rng, False, following.checkpoint_missing, behind, estimate, capped, left, found.probes)


@dataclass(frozen=True)
class ShardRate:
    """A shard's write rate, measured on its last committed range: bytes and records per second of arrival time."""

    bytes_per_second: float
    records_per_second: float

    def estimate(self, span_seconds: float) -> tuple[int, int]:
        """Records and bytes of a range spanning ``span_seconds`` (at least its one record)."""
        return max(1, round(self.records_per_second * span_seconds)), round(self.bytes_per_second * span_seconds)


_MIN_RATE_SPAN = 1.0  # seconds: a shorter range (a burst, one record) says nothing of its shard's rate


def shard_rates(store: StateStore, pipeline: str, states: Mapping[str, ShardState]) -> dict[str, ShardRate]:
    """Each shard's rate on its last committed range, from the ledger (one read of the batches they name)."""
    ids = {s.last_batch_id for s in states.values() if s.last_batch_id is not None and not s.finished}
    if not ids:
        return {}
    rates: dict[str, ShardRate] = {}
    for batch in store.get_batches(pipeline, sorted(ids)).values():
        results = batch.manifest.by_shard() if batch.manifest else {}
        for rng in batch.ranges:
            got = results.get(rng.shard_id)
            if got is None or got.last_arrival is None or rng.start_arrival is None:
                continue
            span = (got.last_arrival - rng.start_arrival).total_seconds()
            state = states.get(rng.shard_id)
            if span >= _MIN_RATE_SPAN and state is not None and state.last_batch_id == batch.batch_id:
                rates[rng.shard_id] = ShardRate(got.bytes / span, (got.records + got.bad_records) / span)
    return rates


def _acknowledged_gap(
    pipeline: PipelineConfig, state: ShardState, rng: SequenceRange, now: datetime, acknowledged: frozenset[str], run_id: str
) -> Gap:
    """A checkpoint trimmed away means records after it may be lost: fail, or record the acknowledged gap."""
    shard_id = rng.shard_id
    age = _age(rng.start_arrival, now)
    if shard_id not in acknowledged:
        raise DataLossError(
            f"pipeline {pipeline.name!r}, stream {pipeline.stream}, shard {shard_id}: the checkpoint "
            f"{state.checkpoint} is no longer in the stream (trimmed by retention), so records after it may be lost; "
            f"the first record left is {rng.start}, {age} old. Nothing was read. To accept the loss, trigger a run "
            f'with {{"acknowledge_data_loss": ["{shard_id}"]}}'
        )
    log.warning("stream %s, shard %s: acknowledged loss after checkpoint %s, up to %s", pipeline.stream, shard_id,
                state.checkpoint, rng.start)  # fmt: skip
    return Gap(shard_id, state.checkpoint, rng.start, acknowledged_by=run_id, detected="plan")


def _age(arrival: datetime | None, now: datetime) -> str:
    if arrival is None:
        return "of unknown age"
    return duration((now - arrival).total_seconds())


def batch_to_replay(
    pipeline: PipelineConfig,
    kinesis_client: KinesisClient,
    store: StateStore,
    batch_id: int,
    action: str | None,
    acknowledged: frozenset[str] = frozenset(),
    now: datetime | None = None,
) -> Batch | None:
    """The in-flight batch, checked before anything is read; None when there is nothing to replay.

    A previous run that verified the batch and began committing it leaves only the commit to finish
    (``action`` is FINISH_COMMIT). Otherwise the output must still be this pipeline's, and no range may
    have left the stream's retention (unless its shard is ``acknowledged``). A refusal is noted on the
    batch, which stays in flight.
    """
    if action == FINISH_COMMIT:
        log.info("batch %d was verified and is being committed: finishing the commit, not replaying", batch_id)
        return None
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status in (BatchStatus.COMMITTING, BatchStatus.COMMITTED):  # another run verified it since this run's plan
        raise superseded(pipeline, batch)
    with failure_recorded(pipeline, store, batch_id):
        guards.require_owner(pipeline)
        retention = kinesis.stream_retention(kinesis_client, pipeline.stream, pipeline.read)
        check_retention(pipeline, batch, retention, now or datetime.now(UTC), acknowledged)
    return batch


@contextmanager
def failure_recorded(pipeline: PipelineConfig, store: StateStore, batch_id: int) -> Iterator[None]:
    """Note any of the library's errors on the in-flight batch, then let it go on (see record_failure)."""
    try:
        yield
    except KinesisReplayError as exc:
        record_failure(pipeline, store, batch_id, str(exc))
        raise


def check_retention(
    pipeline: PipelineConfig, batch: Batch, retention: timedelta, now: datetime, acknowledged: frozenset[str] = frozenset()
) -> None:
    """Before anything is read: a range whose start is older than the stream's retention has lost records."""
    for rng in batch.ranges:
        if rng.start_arrival is None or now - rng.start_arrival <= retention or rng.shard_id in acknowledged:
            continue
        raise DataLossError(
            f"pipeline {pipeline.name!r}, stream {pipeline.stream}, batch {batch.batch_id}, range {rng.describe()}: "
            f"its start arrived {_age(rng.start_arrival, now)} ago, more than the stream's retention of "
            f"{duration(retention.total_seconds())}, so its first records are gone. Nothing was read. To accept "
            f'the loss, trigger a run with {{"acknowledge_data_loss": ["{rng.shard_id}"]}}'
        )


def verify_batch(
    pipeline: PipelineConfig, store: StateStore, batch_id: int, acknowledged: frozenset[str] = frozenset(), run_id: str = ""
) -> Batch:
    """Check the result manifest and the files against the plan; record the batch as WRITTEN.

    Nothing moves when anything disagrees: the error names the batch and shard, and the batch
    stays in flight to be replayed by the next run. A range whose first records were gone is
    accepted only for the ``acknowledged`` shards, and recorded in the ledger as a gap.
    """
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status in (BatchStatus.COMMITTING, BatchStatus.COMMITTED):
        # Two runs replayed the batch at once and the other verified it first: its commit removes this run's attempt.
        raise superseded(pipeline, batch)
    with committed_meanwhile(pipeline, store, batch_id):  # its commit may remove this run's files while they are checked
        manifest = output.read_manifest(pipeline.output, batch_id)
        gaps = check_manifest(batch, manifest, acknowledged, run_id)
        check_files(pipeline, batch_id, manifest)
        all_gaps = merge_gaps(batch.gaps, gaps)
        written = batch.with_status(BatchStatus.WRITTEN, manifest=manifest, attempts=batch.attempts + 1, error=None, gaps=all_gaps)
        store.update_batch(written, expected=batch.status)
    log.info("pipeline %s: batch %d verified: %d records, %d bytes", pipeline.name, batch_id, manifest.records, manifest.bytes)
    return written


def superseded(pipeline: PipelineConfig, batch: Batch) -> BatchSupersededError:
    """The error of a run that finds its batch verified and committed by another run of the pipeline (the loser of two
    runs of one batch at once): it stops, changing nothing, and is not retried, as nothing is left for it to do."""
    return BatchSupersededError(
        f"pipeline {pipeline.name!r}, batch {batch.batch_id} is {batch.status.value}: it was verified and committed after this "
        "run replayed it (by a run replaying it at the same time, or by this run before this task was run again). This "
        f"run changes nothing: the ledger and the output's {output.COMMITS_DIR} "
        f"record describe the committed batch, and the output's {output.MANIFESTS_DIR} holds the last replay's result, "
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


def merge_gaps(known: tuple[Gap, ...], found: list[Gap]) -> tuple[Gap, ...]:
    """The batch's gaps with those its replay found. A gap the plan found (the checkpoint trimmed, the range starting
    at the first record left) and one the replay found after the same checkpoint are one loss: the replay's, which
    reaches further (that first record was gone by the read, or every record of the range was), replaces it."""
    merged = {(g.shard_id, g.after): g for g in known}
    for gap in found:
        before = merged.get((gap.shard_id, gap.after))
        if before is None or _reaches_further(gap, before):
            merged[(gap.shard_id, gap.after)] = gap
    return tuple(merged.values())


def _reaches_further(gap: Gap, than: Gap) -> bool:
    """Whether ``gap`` lost more than ``than``, after the same record (a first_available of None: all of it)."""
    if than.first_available is None:
        return False
    return gap.first_available is None or gap.first_available > than.first_available


def batch_files(pipeline: PipelineConfig, batch_id: int, manifest: Manifest) -> list[str]:
    """The files that hold the batch's rows: its attempt's table files, or its directory's."""
    if pipeline.table is None:
        return output.parquet_files(output.batch_path(pipeline.output, batch_id))
    if manifest.attempt is None:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the result manifest names no attempt, so it was written by a "
            "replay job of another release (or for a directory output); deploy one release to both sides and run the batch again"
        )
    files = output.parquet_files(output.data_path(pipeline.output, batch_id, manifest.attempt))
    if not files and manifest.records:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the result manifest names attempt {manifest.attempt}, whose files "
            f"are gone from {output.data_path(pipeline.output, batch_id, manifest.attempt)}. A run that commits the batch "
            "removes the attempts it did not commit, so another run replaying the batch at the same time may have committed "
            "it; otherwise they were deleted. Nothing was committed by this run; the next run replays the batch if it is "
            "still in flight"
        )
    return files


def check_files(pipeline: PipelineConfig, batch_id: int, manifest: Manifest) -> None:
    """The batch's files hold exactly the rows the manifest describes, shard by shard, before anything is committed.

    Per shard: the rows (and bad rows in the quarantine) the manifest counts, each (sequence number, sub-sequence
    number) once, and the manifest's row digest recomputed from the files with pyarrow (records.row_digest).
    """
    where = f"pipeline {pipeline.name!r}, batch {batch_id}"
    quarantine = output.quarantine_path(pipeline.output, batch_id)
    data_files = batch_files(pipeline, batch_id, manifest)
    if pipeline.table is not None:
        # What would make the table commit fail every time fails here, while the batch can still be replayed.
        iceberg_table.check_files_fit(pipeline, batch_id, manifest.attempt or "", data_files)
    scanned = {}
    for files, expected, place in (
        (data_files, {s.shard_id: s.records for s in manifest.shards if s.records}, "the batch's files"),
        (output.parquet_files(quarantine), {s.shard_id: s.bad_records for s in manifest.shards if s.bad_records}, quarantine),
    ):
        rows = output.scan_rows(files)
        found = {shard: r.rows for shard, r in rows.items()}
        if found != expected:
            raise VerificationError(
                f"{where}: rows per shard in {place} are {dict(sorted(found.items()))}, the manifest says {dict(sorted(expected.items()))}"
            )
        repeated = {shard: r.duplicates for shard, r in rows.items() if r.duplicates}
        if repeated:
            raise VerificationError(
                f"{where}: {place} hold a (sequence number, sub-sequence number) more than once: {dict(sorted(repeated.items()))} rows "
                "repeated per shard"
            )
        scanned[place] = rows
    for shard in manifest.shards:
        if shard.digest is None:
            continue  # a manifest of a release before row digests: its counts and bounds were checked
        total = sum(rows[shard.shard_id].digest for rows in scanned.values() if shard.shard_id in rows)
        if format_digest(total) != shard.digest:
            raise VerificationError(
                f"{where}, shard {shard.shard_id}: the row digest of the files is {format_digest(total)}, the manifest says "
                f"{shard.digest}: the files do not hold the rows the replay job wrote"
            )
    total = manifest.records + manifest.bad_records
    if manifest.bad_records and manifest.bad_records > pipeline.payload.max_bad_share * total:
        raise VerificationError(
            f"{where}: {manifest.bad_records} of {total} records ({manifest.bad_records / total:.1%}) could not be decoded, "
            f"more than payload.max_bad_share ({pipeline.payload.max_bad_share:.1%}); they are in "
            f"{output.quarantine_path(pipeline.output, batch_id)} with the reason in decode_error"
        )


def pending_age(batch: Batch | None, now: datetime) -> float:
    """Seconds the oldest record not yet committed has waited (0 when nothing is pending)."""
    arrivals = [r.start_arrival for r in (batch.ranges if batch else ()) if r.start_arrival is not None]
    return max(0.0, (now - min(arrivals)).total_seconds()) if arrivals else 0.0


@dataclass(frozen=True)
class Staleness:
    """How long the oldest record not yet committed has waited, against the pipeline's limit."""

    age_seconds: float
    limit_seconds: int
    batch: Batch | None  # the batch in flight, if any

    def problem(self, pipeline: PipelineConfig) -> str | None:
        """Why the pipeline counts as stuck, or None while it is within its limit."""
        if self.age_seconds <= self.limit_seconds or self.batch is None:
            return None
        batch = self.batch
        return (
            f"pipeline {pipeline.name} is stuck: batch {batch.batch_id} ({batch.status.value}) holds records that arrived "
            f"{self.age_seconds / 60:.0f} minutes ago and are not committed (max_checkpoint_age_minutes is "
            f"{pipeline.max_checkpoint_age_minutes}); last error: {batch.error or 'none'}"
        )


def staleness(pipeline: PipelineConfig, store: StateStore, now: datetime | None = None) -> Staleness:
    """The pipeline's oldest uncommitted record: only the batch in flight can hold one."""
    head = store.get_head(pipeline.name)
    batch = store.get_batch(pipeline.name, head.in_flight) if head.in_flight is not None else None
    return Staleness(pending_age(batch, now or datetime.now(UTC)), pipeline.max_checkpoint_age_minutes * 60, batch)


def check_manifest(batch: Batch, manifest: Manifest, acknowledged: frozenset[str] = frozenset(), run_id: str = "") -> list[Gap]:
    """The manifest covers exactly the batch's ranges, from each start to each end; returns acknowledged gaps."""
    where = f"pipeline {batch.pipeline!r}, batch {batch.batch_id}"
    if manifest.batch_id != batch.batch_id or manifest.pipeline != batch.pipeline:
        raise VerificationError(f"{where}: the result manifest is for pipeline {manifest.pipeline!r}, batch {manifest.batch_id}")
    results = manifest.by_shard()
    planned = {r.shard_id for r in batch.ranges}
    # A range with no row: every record of it was gone when it was read, which only an acknowledged shard may be.
    wholly_gone = planned - set(results)
    if set(results) - planned or wholly_gone - acknowledged:
        raise VerificationError(f"{where}: the manifest covers shards {sorted(results)}, the plan {sorted(planned)}")
    gaps = []
    for rng in batch.ranges:
        if rng.shard_id in wholly_gone:
            gaps.append(Gap(rng.shard_id, rng.previous_checkpoint, None, run_id, detected="replay"))
            continue
        got = results[rng.shard_id]
        if got.records + got.bad_records < 1 or got.first_sequence_number < rng.start:
            raise VerificationError(f"{where}, range {rng.describe()}: the output starts at {got.first_sequence_number}")
        if got.first_sequence_number > rng.start:
            if rng.shard_id not in acknowledged:
                raise VerificationError(
                    f"{where}, range {rng.describe()}: the output starts at {got.first_sequence_number}, after the range start"
                )
            gaps.append(Gap(rng.shard_id, rng.previous_checkpoint, got.first_sequence_number, run_id, detected="replay"))
        gaps += read_gaps(where, rng, got, acknowledged, run_id)
        last_ok = got.last_sequence_number <= rng.end if rng.to_shard_end else got.last_sequence_number == rng.end
        if not last_ok or got.last_sequence_number < got.first_sequence_number:
            raise VerificationError(f"{where}, range {rng.describe()}: the output ends at {got.last_sequence_number}")
    return gaps


def read_gaps(where: str, rng: SequenceRange, got: ShardResult, acknowledged: frozenset[str], run_id: str) -> list[Gap]:
    """The range's unconfirmed spans as gaps: records the reader could not show it read (near the retention, trimmed)."""
    if got.unconfirmed and rng.shard_id not in acknowledged:
        after = got.unconfirmed[0][0]
        raise VerificationError(
            f"{where}, range {rng.describe()}: records after {after} may have been trimmed unread (the reader found {after} "
            f'gone near the retention); to accept the loss, trigger a run with {{"acknowledge_data_loss": ["{rng.shard_id}"]}}'
        )
    return [Gap(rng.shard_id, after, first, run_id, detected="read") for after, first in got.unconfirmed]


def commit_batch(pipeline: PipelineConfig, store: StateStore, batch_id: int, now: datetime | None = None, run_id: str = "") -> Batch:
    """Make a verified batch visible, advance every checkpoint, then mark it COMMITTED; resumable and idempotent.

    1. WRITTEN -> COMMITTING, conditioned on the batch being in flight and still WRITTEN;
    2. the batch's commit record into the output (rewritten by a resumed commit);
    3. for a table output, the batch's files into the table in one snapshot (found, not made again, by a resumed
       commit: its summary names the attempt), and the snapshot id into the commit record;
    4. each shard's checkpoint from the range's previous checkpoint to its end, conditionally;
    5. COMMITTED (with the snapshot id) and the head's in-flight id cleared, in one transaction.
    A run that finds the batch COMMITTING resumes at step 2. The output must be this pipeline's (its owner record).
    """
    guards.require_owner(pipeline)
    batch = store.get_batch(pipeline.name, batch_id)
    where = f"pipeline {pipeline.name!r}, batch {batch_id}"
    if batch.status == BatchStatus.WRITTEN:
        committing = batch.with_status(BatchStatus.COMMITTING)
        try:
            store.update_batch(committing, expected=BatchStatus.WRITTEN)
        except StateConflictError as exc:
            raise StateConflictError(f"{where}: another run is committing this batch; this one moved nothing ({exc})") from exc
        batch = committing
    elif batch.status == BatchStatus.COMMITTED:
        raise superseded(pipeline, batch)
    elif batch.status != BatchStatus.COMMITTING:
        raise StateConflictError(f"{where}: cannot commit a batch that is {batch.status.value}; it must be verified (WRITTEN) first")
    if batch.manifest is None:
        raise VerificationError(f"{where}: no verified manifest is stored with the batch")
    committed_at = now or datetime.now(UTC)
    committed = replace(batch, status=BatchStatus.COMMITTED, committed_at=committed_at)
    # The output's copy of the ledger entry, before any checkpoint moves: a lost state table is rebuilt from these.
    output.write_commit_record(pipeline.output, committed)
    if pipeline.table is not None:
        snapshot_id = commit_to_table(pipeline, batch, run_id or batch.run_id)
        batch, committed = replace(batch, snapshot_id=snapshot_id), replace(committed, snapshot_id=snapshot_id)
        output.write_commit_record(pipeline.output, committed)  # the output's copy names the snapshot before a checkpoint moves
    results = batch.verified_manifest().by_shard()

    def advance(rng: SequenceRange) -> None:
        end = range_checkpoint(rng, results)
        store.advance_checkpoint(pipeline.name, rng.shard_id, rng.previous_checkpoint, end, batch_id, finished=rng.to_shard_end)

    # Each checkpoint's write is conditional on its own previous value, so their order does not matter: they go
    # out concurrently (a 1,000-shard batch is 1,000 writes), and the first refusal fails the commit.
    with ThreadPoolExecutor(max_workers=pipeline.read.plan_concurrency, thread_name_prefix="commit") as pool:
        list(pool.map(advance, batch.ranges))
    try:
        store.complete_batch(batch, committed_at)
    except StateConflictError as exc:
        if (now_stored := store.get_batch(pipeline.name, batch_id)).status == BatchStatus.COMMITTED:
            raise superseded(pipeline, now_stored) from exc  # another run committed it first: nothing is left to do
        raise StateConflictError(f"{where}: another run completed this commit first ({exc})") from exc
    return committed


def range_checkpoint(rng: SequenceRange, results: Mapping[str, ShardResult]) -> int:
    """Where a committed range leaves its shard's checkpoint: its end; for a closed shard read to SHARD_END, the last
    record read (the shard is then finished). A range every record of which was gone (an acknowledged gap, no row)
    leaves it at its end as well: the loss is the gap's."""
    result = results.get(rng.shard_id)
    return result.last_sequence_number if rng.to_shard_end and result is not None else rng.end


def commit_to_table(
    pipeline: PipelineConfig, batch: Batch, run_id: str, kind: Commit = Commit.REGULAR, ledger: Ledger | None = None
) -> int:
    """Put the verified attempt's files in the table in one snapshot (or find the snapshot that did); its id.

    Before each try the table's current snapshot must hold what the ledger says for this ``kind`` of commit
    (guards.table_check; ``ledger`` is the head's for a backfill or a restore, the batches before this one for a
    regular commit). Only a pipeline's first batch and a restore create a missing table. A regular commit then
    removes the folders of the batch's other attempts: replays that failed before a commit, which no snapshot ever
    referenced. A backfill leaves the files it superseded to snapshot expiry: older snapshots still reference them.
    """
    manifest = batch.verified_manifest()
    files = batch_files(pipeline, batch.batch_id, manifest)
    attempt = manifest.attempt or ""  # batch_files refused a manifest without one
    # Every record quarantined: the table's columns come from a quarantine file, should this be its first batch.
    quarantined = [] if files else output.parquet_files(output.quarantine_path(pipeline.output, batch.batch_id))
    schema_file = quarantined[0] if quarantined else None
    ledger = ledger if ledger is not None and kind != Commit.REGULAR else Ledger(batch.batch_id - 1, batch.batch_id)
    check = guards.table_check(pipeline, kind, batch.batch_id, ledger)
    create = kind == Commit.RESTORE or (kind == Commit.REGULAR and ledger.last == 0)
    snapshot_id = iceberg_table.commit_batch(
        pipeline, batch.batch_id, attempt, files, run_id, manifest.records, check, create, schema_file=schema_file
    )
    first = kind == Commit.REGULAR
    if first:
        live = output.data_path(pipeline.output, batch.batch_id, attempt)
        table = iceberg_table.load_table(pipeline)
        held = [f.file_path for f in iceberg_table.batch_data_files(table, batch.batch_id)] if table is not None else []
        if held and all(f.startswith(iceberg_table.iceberg_location(live) + "/") for f in held):
            for other, path in output.attempt_paths(pipeline.output, batch.batch_id).items():
                if other != attempt:
                    log.info(
                        "pipeline %s, batch %d: removing attempt %s, which no snapshot references", pipeline.name, batch.batch_id, other
                    )
                    output.remove_folder(path)
    return snapshot_id


def record_failure(pipeline: PipelineConfig, store: StateStore, batch_id: int, error: str) -> None:
    """Note a failed replay on the batch (it stays in flight, and the next run replays the same ranges)."""
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status not in (BatchStatus.PLANNED, BatchStatus.FAILED, BatchStatus.WRITTEN):
        return  # a commit in progress is finished by the next run, never failed back
    store.update_batch(batch.with_status(BatchStatus.FAILED, attempts=batch.attempts + 1, error=error[:2000]), expected=batch.status)


def maintain_table(
    pipeline: PipelineConfig, store: StateStore, orphan_age: timedelta, dry_run: bool = False, now: datetime | None = None
) -> table_maintenance.Report | None:
    """Expire the table's old snapshots and remove its orphan files, keeping every file a commit still needs; None with no table.

    The ledger's batch in flight keeps its files, and so does every batch whose commit record names no snapshot yet.
    When the pipeline has no head item (its state table was lost, emptied or replaced, or ``state_table`` names another),
    no batch in flight is known: orphan removal is refused, with the reason in the report, and only the expiry runs.
    """
    head = store.get_head(pipeline.name)
    if head.version != 0:  # a table created anew would make every older batch's files orphans: refused, naming why
        guards.check_table(pipeline, guards.ledger_of(head))
    table = iceberg_table.load_table(pipeline)
    if table is None:
        return None
    refused = None
    if head.version == 0:
        refused = (
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} holds no head item for the pipeline, so the batch "
            f"in flight is unknown, and a commit cut short keeps files no snapshot references that a recovery needs; orphan "
            f"files of {iceberg_table.require_table(pipeline).describe()} are not removed until the state is back. "
            f"{guards.recovery_hint(pipeline)}"
        )
    return table_maintenance.maintain(
        table,
        orphan_age=orphan_age,
        in_flight=[head.in_flight] if head.in_flight is not None else [],
        now=now,
        dry_run=dry_run,
        committing=functools.partial(output.unfinished_commits, pipeline.output),
        refuse_orphans=refused,
        replayed=functools.partial(output.last_replayed_attempts, pipeline.output),
    )
