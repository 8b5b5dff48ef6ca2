"""The batch in flight: checked before it is read, its failures noted, and how long its records have waited."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from kinesis_replay.adapters.kinesis_client import stream_created, stream_retention
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import (
    DataLossError,
    KinesisReplayError,
)
from kinesis_replay.core.formats import arrival_age, duration
from kinesis_replay.core.output_root import RootSnapshot
from kinesis_replay.core.refusals import BeyondRetention, refuse
from kinesis_replay.core.state import FINISH_COMMIT, Batch, BatchStatus, StateStore, superseded
from kinesis_replay.core.state import committed_meanwhile as committed_meanwhile  # in_flight.committed_meanwhile: the DAG's tasks

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)


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
        root = load_root(pipeline)
        refuse(ownership.owner_refusal(pipeline, root))
        check_same_stream(pipeline, kinesis_client, root)
        retention = stream_retention(kinesis_client, pipeline.stream, pipeline.read)
        check_retention(pipeline, batch, retention, now or datetime.now(UTC), acknowledged)
    return batch


def check_same_stream(pipeline: PipelineConfig, kinesis_client: KinesisClient, root: RootSnapshot | None = None) -> None:
    """Before stored ranges are read (a regular batch's, a backfill's, a restore's): the stream under the pipeline's name is
    the one the output's batches came from, not one deleted and created again since, as the plan checks it
    (ownership.stream_refusal; ``root`` as loaded, or loaded here). Its ranges' shard ids and sequence numbers belong to
    the old stream: the replay would fail in Spark with a data-loss message, or read another stream's records, where this
    refuses naming the cause."""
    created = stream_created(kinesis_client, pipeline.stream, pipeline.read)
    owner = (root or load_root(pipeline)).owner
    refuse(ownership.stream_refusal(pipeline, created, owner))


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
            f"its start arrived {arrival_age(rng.start_arrival, now)} ago, more than the stream's retention of "
            f"{duration(retention.total_seconds())}, so its first records are gone. Nothing was read. To accept "
            f'the loss, trigger a run with {{"acknowledge_data_loss": ["{rng.shard_id}"]}}'
        )


def beyond_retention(pipeline: PipelineConfig, batches: Sequence[Batch], retention: timedelta, now: datetime) -> list[tuple[Batch, str]]:
    """The batches named that are no longer whole in the stream (a range's first records left its retention), each with
    the retention check's reason."""
    gone: list[tuple[Batch, str]] = []
    for batch in batches:
        try:
            check_retention(pipeline, batch, retention, now)
        except DataLossError as exc:
            gone.append((batch, str(exc).split(": ", 1)[-1].split(". Nothing was read")[0]))
    return gone


def check_all_retention(pipeline: PipelineConfig, batches: Sequence[Batch], retention: timedelta, now: datetime) -> None:
    """Before anything is read: every batch named is still whole in the stream, or all those that are not are named (a
    rebuild must read every committed batch again, unless it copies those it cannot)."""
    gone = beyond_retention(pipeline, batches, retention, now)
    if gone:
        refuse(BeyondRetention(pipeline, tuple(b.batch_id for b, _ in gone), gone[0][1]))


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


def record_failure(pipeline: PipelineConfig, store: StateStore, batch_id: int, error: str) -> None:
    """Note a failed replay on the batch (it stays in flight, and the next run replays the same ranges)."""
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status not in (BatchStatus.PLANNED, BatchStatus.FAILED, BatchStatus.WRITTEN):
        return  # a commit in progress is finished by the next run, never failed back
    store.update_batch(batch.with_status(BatchStatus.FAILED, attempts=batch.attempts + 1, error=error[:2000]), expected=batch.status)
