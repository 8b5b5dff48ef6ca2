"""Plan a batch: snapshot a closed sequence-number range of every shard and store it before anything is read."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from kinesis_replay.adapters import range_bounds
from kinesis_replay.adapters.kinesis_client import REAL_TIME, Pacing, ShardCalls, list_shards, stream_created
from kinesis_replay.adapters.layout import owner_path
from kinesis_replay.adapters.output_root import load_root, load_table
from kinesis_replay.adapters.owner import write_owner
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import (
    ConfigError,
    DataLossError,
    ParameterError,
    StateConflictError,
)
from kinesis_replay.core.formats import arrival_age
from kinesis_replay.core.ledger import ledger_of, ledger_rows
from kinesis_replay.core.output_root import RootSnapshot
from kinesis_replay.core.ranges import SequenceRange, ShardInfo, parse_sequence_number, shards_to_plan
from kinesis_replay.core.refusals import Refusal, refuse
from kinesis_replay.core.state import FINISH_COMMIT as FINISH_COMMIT  # plan.FINISH_COMMIT as well, for the DAG's tasks
from kinesis_replay.core.state import REPLAY, Batch, BatchStatus, Gap, Head, PlanNotes, ShardState, StateStore, resolve_start

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)


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
    pacing: Pacing = REAL_TIME,
) -> PlanResult:
    """Resume the batch in flight, or fix the next batch's ranges and store it before anything is read.

    ``acknowledged`` names the shards whose lost records (a checkpoint trimmed by retention) an
    operator has accepted for this run; the loss is then recorded in the batch as a gap. A
    ``dry_run`` plans the same way and writes nothing: no batch, no new shard, no finished mark.
    ``pacing``: the clock each shard's call budget is kept by (a stream answered on a virtual clock gives its own).
    """
    now = now or datetime.now(UTC)
    head = store.get_head(pipeline.name)
    root = check_before_plan(pipeline, head, store, claim=not (head.in_flight is not None and dry_run))
    if head.in_flight is not None:
        batch = store.get_batch(pipeline.name, head.in_flight)
        check_acknowledged(pipeline, acknowledged, {r.shard_id for r in batch.ranges}, f"the ranges of batch {batch.batch_id}")
        if not dry_run:  # an owner record deleted while the batch was in flight is written again (before_plan found
            claim_output(pipeline, root, now)  # the root's commit records to be this pipeline's, if it has any)
        log.info("pipeline %s: resuming batch %d (%s), ranges unchanged", pipeline.name, batch.batch_id, batch.status.value)
        return PlanResult(batch=batch, resumed=True)

    shards = list_shards(kinesis_client, pipeline.stream, pipeline.read)
    # Before the first write, the output is claimed for this stream (not a new one of the same name), and a start
    # resolved from now is never before the claim; a dry run only checks.
    claim_output(pipeline, root, now, stream_created(kinesis_client, pipeline.stream, pipeline.read), dry_run)
    planner = _Planner(pipeline, kinesis_client, store, now, dry_run, pacing)
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
        pipeline_name=pipeline.name, batch_id=head.next_batch_id, status=BatchStatus.PLANNED, ranges=tuple(ranges),
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


def check_before_plan(pipeline: PipelineConfig, head: Head, store: StateStore | None = None, claim: bool = True) -> RootSnapshot:
    """Before a plan writes anything: the output root is this pipeline's (or no one's yet), it and its table agree with
    the state table's ``head`` (ownership.before_plan, ownership.table_refusal), and payload.schema changes the table's
    columns only as Iceberg can (ownership.schema_refusal); the root as loaded, for the claim."""
    root = load_root(pipeline, head, claim=claim)
    refuse(ownership.before_plan(pipeline, head, root))
    root = replace(root, table=load_table(pipeline, head))  # read once the root is known to be the pipeline's
    ledger = ledger_of(head, pipeline, store)
    refuse(ownership.table_refusal(pipeline, root.table, ledger, ledger_rows(root.table.state, ledger) if root.table else None))
    refuse(ownership.schema_refusal(pipeline, root.table))  # before anything is read: the commit could not take the batch
    return root


def claim_output(
    pipeline: PipelineConfig, root: RootSnapshot, now: datetime, stream_created: datetime | None = None, dry_run: bool = False
) -> None:
    """Record this pipeline as the output root's owner, if no one is yet, before the plan's first write (ownership.claim
    decides what, from the ``root`` loaded for a claim); then the record written is checked: another may have won."""
    verdict = ownership.claim(pipeline, root, now, stream_created, dry_run)
    if isinstance(verdict, Refusal):
        raise verdict.as_error()
    for warning in verdict.warnings:
        log.warning("%s", warning)
    if verdict.record is None:
        return
    claimed = write_owner(pipeline.output, verdict.record, replace=verdict.replace)
    if verdict.filled:
        log.info("pipeline %s: output %s recorded as a %s output of stream %s created at %s", pipeline.name, pipeline.output,
                 claimed.output_format, pipeline.stream, claimed.stream_created)  # fmt: skip
        return
    refuse(ownership.owner_refusal(pipeline, replace(root, owner=claimed)))  # another pipeline may have claimed it first
    log.info("pipeline %s: claimed output %s (owner record %s)", pipeline.name, pipeline.output, owner_path(pipeline.output))


class _Planner:
    """One plan's walk over the stream's shards: what it found for each, in the order resharding allows.

    The shards that may be planned together (every shard whose parents are finished) are planned
    concurrently, ``read.plan_concurrency`` at a time, each within its own call budget; what they found
    is gathered in the order ListShards gave them, so a plan does not depend on which answered first.
    """

    def __init__(
        self, pipeline: PipelineConfig, client: KinesisClient, store: StateStore, now: datetime, dry_run: bool, pacing: Pacing = REAL_TIME
    ) -> None:  # fmt: skip
        self.pipeline, self.client, self.store, self.now, self.dry_run = pipeline, client, store, now, dry_run
        self.pacing = pacing
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
        """Plan one shard's range, if it has anything new (in a worker thread). It reads the stream, and writes only a
        drained shard's finished mark (store.mark_finished, not in a dry run), which no other shard's plan touches."""
        rate = self.rates.get(shard.shard_id)
        return state, _plan_range(self.pipeline, self.client, self.store, shard, state, self.now, self.dry_run, rate, self.pacing)

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
    dry_run: bool, rate: ShardRate | None = None, pacing: Pacing = REAL_TIME,
) -> _ShardPlan:  # fmt: skip
    # One budget for all of the shard's calls.
    calls = ShardCalls(client, pipeline.stream, shard.shard_id, pipeline.read, sleep=pacing.sleep, clock=pacing.clock)
    following = range_bounds.first_record_after(
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
    found = range_bounds.find_end(
        client,
        pipeline.stream,
        shard.shard_id,
        first,
        min(now, cap),
        pipeline.read,
        behind,
        calls,
        following.after,
    )
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


def shard_rates(store: StateStore, pipeline_name: str, states: Mapping[str, ShardState]) -> dict[str, ShardRate]:
    """Each shard's rate on its last committed range, from the ledger (one read of the batches they name)."""
    ids = {s.last_batch_id for s in states.values() if s.last_batch_id is not None and not s.finished}
    if not ids:
        return {}
    rates: dict[str, ShardRate] = {}
    for batch in store.get_batches(pipeline_name, sorted(ids)).values():
        results = batch.result.by_shard() if batch.result else {}
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
    age = arrival_age(rng.start_arrival, now)
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
