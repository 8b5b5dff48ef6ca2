"""The steps DAG tasks call: plan (or resume) a batch, verify its output, commit it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kinesis_replay import kinesis, output
from kinesis_replay.config import PipelineConfig
from kinesis_replay.errors import StateConflictError, VerificationError
from kinesis_replay.ranges import SequenceRange, ShardInfo, parse_sequence_number, shards_to_plan
from kinesis_replay.state import Batch, BatchStatus, Manifest, ShardState, StartPosition, StateStore

log = logging.getLogger(__name__)

# What a run does with the batch its plan step returns.
REPLAY = "replay"  # read the ranges and (re)write the batch's output, then verify and commit
FINISH_COMMIT = "finish_commit"  # a previous run verified the output and began committing: finish that


@dataclass(frozen=True)
class PlanResult:
    batch: Batch | None  # None: no shard has anything new
    resumed: bool
    waiting: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (child shard, parents it waits for)

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


def plan_batch(pipeline: PipelineConfig, kinesis_client: Any, store: StateStore, run_id: str, now: datetime | None = None) -> PlanResult:
    """Resume the batch in flight, or fix the next batch's ranges and store it before anything is read."""
    now = now or datetime.now(UTC)
    head = store.get_head(pipeline.name)
    if head.in_flight is not None:
        batch = store.get_batch(pipeline.name, head.in_flight)
        log.info("pipeline %s: resuming batch %d (%s), ranges unchanged", pipeline.name, batch.batch_id, batch.status.value)
        return PlanResult(batch=batch, resumed=True)

    shards = kinesis.list_shards(kinesis_client, pipeline.stream, pipeline.read)
    states = store.get_shards(pipeline.name)
    finished = {sid: s.finished for sid, s in states.items()}
    ranges: list[SequenceRange] = []
    seen: set[str] = set()
    while True:
        # A closed shard found drained is finished at once, which may free its children in this same plan.
        ready, waiting = shards_to_plan(shards, finished)
        ready = [s for s in ready if s.shard_id not in seen]
        if not ready:
            break
        for shard in ready:
            seen.add(shard.shard_id)
            state = states.get(shard.shard_id) or store.put_shard_if_absent(
                pipeline.name,
                ShardState(shard.shard_id, parent_shard_ids=shard.parent_shard_ids, start_position=resolve_start(pipeline, shard, now)),
            )
            rng, drained = _plan_range(pipeline, kinesis_client, store, shard, state, now)
            if rng is not None:
                ranges.append(rng)
            finished[shard.shard_id] = drained
    waiting_ids = tuple((s.shard_id, tuple(parents)) for s, parents in waiting)
    if not ranges:
        log.info("pipeline %s: nothing new on stream %s", pipeline.name, pipeline.stream)
        return PlanResult(batch=None, resumed=False, waiting=waiting_ids)

    batch = Batch(
        pipeline=pipeline.name, batch_id=head.next_batch_id, status=BatchStatus.PLANNED, ranges=tuple(ranges),
        stream=pipeline.stream, run_id=run_id, created_at=now,
    )  # fmt: skip
    try:
        store.create_batch(batch, head)
    except StateConflictError as exc:
        raise StateConflictError(
            f"pipeline {pipeline.name!r}: another run planned a batch while this one was planning batch {batch.batch_id}; "
            f"this run stops and changes nothing ({exc})"
        ) from exc
    for rng in ranges:
        log.info("pipeline %s: batch %d plans %s", pipeline.name, batch.batch_id, rng.describe())
    return PlanResult(batch=batch, resumed=False, waiting=waiting_ids)


def _plan_range(
    pipeline: PipelineConfig, client: Any, store: StateStore, shard: ShardInfo, state: ShardState, now: datetime
) -> tuple[SequenceRange | None, bool]:
    """The shard's range in this batch (None: nothing new), and whether it was found drained and finished."""
    following = kinesis.first_record_after(
        client, pipeline.stream, shard.shard_id, state.checkpoint, state.start_position, pipeline.read, closed=shard.is_closed
    )
    if following.record is None:
        if following.shard_ended and shard.is_closed:
            # Closed, and nothing after the checkpoint: the shard is drained. Like the KCL's SHARD_END.
            store.mark_finished(pipeline.name, shard.shard_id, state.checkpoint)
            log.info("pipeline %s: shard %s is closed and fully read: finished", pipeline.name, shard.shard_id)
            return None, True
        return None, False
    first = following.record
    start = parse_sequence_number(first["SequenceNumber"])
    if shard.ending_sequence_number is not None:
        # A closed shard takes no more records: "up to SHARD_END" is already a fixed bound.
        return SequenceRange(shard.shard_id, start, shard.ending_sequence_number, state.checkpoint, to_shard_end=True), False
    end = kinesis.find_tip(client, pipeline.stream, shard.shard_id, first, now, pipeline.read)
    return SequenceRange(shard.shard_id, start, end, state.checkpoint), False


def verify_batch(pipeline: PipelineConfig, store: StateStore, batch_id: int) -> Batch:
    """Check the result manifest and the files against the plan; record the batch as WRITTEN.

    Nothing moves when anything disagrees: the error names the batch and shard, and the batch
    stays in flight to be replayed by the next run.
    """
    batch = store.get_batch(pipeline.name, batch_id)
    manifest = output.read_manifest(pipeline.output, batch_id)
    check_manifest(batch, manifest)
    where = f"pipeline {pipeline.name!r}, batch {batch_id}"
    for path, expected in (
        (output.batch_path(pipeline.output, batch_id), {s.shard_id: s.records for s in manifest.shards if s.records}),
        (output.quarantine_path(pipeline.output, batch_id), {s.shard_id: s.bad_records for s in manifest.shards if s.bad_records}),
    ):
        found = dict(output.count_rows_by_shard(path))
        if found != expected:
            raise VerificationError(
                f"{where}: rows per shard in {path} are {dict(sorted(found.items()))}, the manifest says {dict(sorted(expected.items()))}"
            )
    total = manifest.records + manifest.bad_records
    if manifest.bad_records and manifest.bad_records > pipeline.payload.max_bad_share * total:
        raise VerificationError(
            f"{where}: {manifest.bad_records} of {total} records ({manifest.bad_records / total:.1%}) could not be decoded, "
            f"more than payload.max_bad_share ({pipeline.payload.max_bad_share:.1%}); they are in "
            f"{output.quarantine_path(pipeline.output, batch_id)} with the reason in decode_error"
        )
    written = batch.with_status(BatchStatus.WRITTEN, manifest=manifest, attempts=batch.attempts + 1, error=None)
    store.update_batch(written, expected=batch.status)
    return written


def check_manifest(batch: Batch, manifest: Manifest) -> None:
    """The manifest covers exactly the batch's ranges, from each start to each end."""
    where = f"pipeline {batch.pipeline!r}, batch {batch.batch_id}"
    if manifest.batch_id != batch.batch_id or manifest.pipeline != batch.pipeline:
        raise VerificationError(f"{where}: the result manifest is for pipeline {manifest.pipeline!r}, batch {manifest.batch_id}")
    results = manifest.by_shard()
    planned = {r.shard_id for r in batch.ranges}
    if set(results) != planned:
        raise VerificationError(f"{where}: the manifest covers shards {sorted(results)}, the plan {sorted(planned)}")
    for rng in batch.ranges:
        got = results[rng.shard_id]
        if got.records + got.bad_records < 1 or got.first_sequence_number != rng.start:
            raise VerificationError(f"{where}, range {rng.describe()}: the output starts at {got.first_sequence_number}")
        last_ok = got.last_sequence_number <= rng.end if rng.to_shard_end else got.last_sequence_number == rng.end
        if not last_ok or got.last_sequence_number < got.first_sequence_number:
            raise VerificationError(f"{where}, range {rng.describe()}: the output ends at {got.last_sequence_number}")


def commit_batch(pipeline: PipelineConfig, store: StateStore, batch_id: int, now: datetime | None = None) -> Batch:
    """Advance every checkpoint of a verified batch, then mark it COMMITTED; resumable and idempotent.

    1. WRITTEN -> COMMITTING, conditioned on the batch being in flight and still WRITTEN;
    2. each shard's checkpoint from the range's previous checkpoint to its end, conditionally;
    3. COMMITTED and the head's in-flight id cleared, in one transaction.
    A run that finds the batch COMMITTING resumes at step 2.
    """
    batch = store.get_batch(pipeline.name, batch_id)
    where = f"pipeline {pipeline.name!r}, batch {batch_id}"
    if batch.status == BatchStatus.WRITTEN:
        committing = batch.with_status(BatchStatus.COMMITTING)
        try:
            store.update_batch(committing, expected=BatchStatus.WRITTEN)
        except StateConflictError as exc:
            raise StateConflictError(f"{where}: another run is committing this batch; this one moved nothing ({exc})") from exc
        batch = committing
    elif batch.status != BatchStatus.COMMITTING:
        raise StateConflictError(f"{where}: cannot commit a batch that is {batch.status.value}; it must be verified (WRITTEN) first")
    if batch.manifest is None:
        raise VerificationError(f"{where}: no verified manifest is stored with the batch")
    results = batch.manifest.by_shard()
    for rng in batch.ranges:
        # A closed shard read to SHARD_END: its checkpoint is the last record read, and it is finished.
        end = results[rng.shard_id].last_sequence_number if rng.to_shard_end else rng.end
        store.advance_checkpoint(pipeline.name, rng.shard_id, rng.previous_checkpoint, end, batch_id, finished=rng.to_shard_end)
    committed_at = now or datetime.now(UTC)
    try:
        store.complete_batch(batch, committed_at)
    except StateConflictError as exc:
        raise StateConflictError(f"{where}: another run completed this commit first ({exc})") from exc
    return replace(batch, status=BatchStatus.COMMITTED, committed_at=committed_at)


def record_failure(pipeline: PipelineConfig, store: StateStore, batch_id: int, error: str) -> None:
    """Note a failed replay on the batch (it stays in flight, and the next run replays the same ranges)."""
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status not in (BatchStatus.PLANNED, BatchStatus.FAILED, BatchStatus.WRITTEN):
        return  # a commit in progress is finished by the next run, never failed back
    store.update_batch(batch.with_status(BatchStatus.FAILED, attempts=batch.attempts + 1, error=error[:2000]), expected=batch.status)
