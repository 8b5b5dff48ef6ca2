"""A StateStore held in memory that refuses what DynamoDBStateStore refuses, the same way.

Every conditional write of kinesis_replay.adapters.dynamodb_store is kept with its condition and its error (the class, and the
message's words up to the reasons DynamoDB gives); what it stores reads back as the DynamoDB store's items read back
(a batch through its JSON, a shard with the time it was written). tests/contract/test_state_store_contract.py runs the
same tests against both, so this fake cannot drift from the real store. What the contract cannot check is not faked:
a write DynamoDB would turn into a half item (a checkpoint moved on a shard never stored) fails here loudly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kinesis_replay.adapters.dynamodb_store import CORRUPT_HINT, PROGRESS_SHARDS, TRANSACTION_ITEMS, progress_sk
from kinesis_replay.adapters.dynamodb_table import missing_table
from kinesis_replay.core.errors import (
    KinesisReplayError,
    ProgressNotStoredError,
    StateConflictError,
    StateCorruptError,
    StateTableMissingError,
)
from kinesis_replay.core.ranges import format_sequence_number
from kinesis_replay.core.state import Batch, BatchStatus, BatchSummary, Head, Progress, RunKind, ShardState, StartPosition

FAILED, PASSED = "ConditionalCheckFailed", "None"  # a cancelled transaction's reason for each of its items


def _now() -> datetime:
    return datetime.now(UTC)


def _copy(batch: Batch) -> Batch:
    """The batch as the state table gives it back: through its JSON (a deep copy that loses what the table's items lose)."""
    return Batch.from_dict(json.loads(json.dumps(batch.to_dict())))


def _conflict(what: str, reasons: Sequence[str]) -> StateConflictError:
    return StateConflictError(f"{what}: another run changed the state first ({', '.join(reasons)})")


@dataclass
class _BatchItem:
    """A batch item: the batch, and what the table keeps beside it (the page's figures, the failures counted)."""

    batch: Batch
    figures: dict[str, Any]
    failures: int = 0
    last_error: str | None = None

    @classmethod
    def of(cls, batch: Batch) -> _BatchItem:
        return cls(_copy(batch), json.loads(json.dumps(batch.figures())))


@dataclass(frozen=True)
class _ProgressPiece:
    """One progress item: PROGRESS_SHARDS shards of one replay's progress, as put_progress writes them."""

    batch_id: int
    records: dict[str, int]
    done: tuple[str, ...]
    updated_at: datetime


@dataclass
class _Pipeline:
    head: Head | None = None  # None: no head item (Head() is what get_head answers for it)
    shards: dict[str, ShardState] = field(default_factory=dict)
    batches: dict[int, _BatchItem] = field(default_factory=dict)
    progress: dict[str, _ProgressPiece] = field(default_factory=dict)  # by the item's sort key


class MemoryStateStore:
    """The StateStore protocol in memory, with DynamoDBStateStore's conditions and errors.

    ``exists=False``: the table is missing until ensure_table creates it (every other call fails as on DynamoDB).
    """

    def __init__(self, table: str = "kr-memory", exists: bool = True) -> None:
        self.table = table
        self.exists = exists
        self.pipelines: dict[str, _Pipeline] = {}

    def _state(self, pipeline_name: str, what: str) -> _Pipeline:
        if not self.exists:
            raise self.missing(pipeline_name, what)
        return self.pipelines.setdefault(pipeline_name, _Pipeline())

    def missing(self, pipeline_name: str, what: str) -> StateTableMissingError:
        return missing_table(self.table, pipeline_name, what)

    # -- table ----------------------------------------------------------------------------------------------------

    def ensure_table(self) -> None:
        self.exists = True

    # -- head -----------------------------------------------------------------------------------------------------

    def get_head(self, pipeline_name: str) -> Head:
        head = self._state(pipeline_name, f"reading head of pipeline {pipeline_name!r}").head
        return Head() if head is None else head

    # -- shards ---------------------------------------------------------------------------------------------------

    def get_shards(self, pipeline_name: str) -> dict[str, ShardState]:
        return dict(self._state(pipeline_name, f"reading shard#* of pipeline {pipeline_name!r}").shards)

    @staticmethod
    def _stored_shard(shard: ShardState) -> ShardState:
        start = shard.start_position
        return replace(
            shard,
            parent_shard_ids=tuple(shard.parent_shard_ids),
            start_position=None if start is None else StartPosition.from_dict(json.loads(json.dumps(start.to_dict()))),
            updated_at=_now(),
        )

    def put_shard_if_absent(self, pipeline_name: str, shard: ShardState) -> ShardState:
        state = self._state(pipeline_name, f"storing shard {shard.shard_id} of pipeline {pipeline_name!r}")
        if shard.shard_id in state.shards:
            return state.shards[shard.shard_id]
        state.shards[shard.shard_id] = self._stored_shard(shard)
        return shard

    def put_shards_if_absent(self, pipeline_name: str, shards: Sequence[ShardState]) -> dict[str, ShardState]:
        stored: dict[str, ShardState] = {}
        for first in range(0, len(shards), TRANSACTION_ITEMS):
            chunk = shards[first : first + TRANSACTION_ITEMS]
            what = f"storing shards {chunk[0].shard_id} to {chunk[-1].shard_id} of pipeline {pipeline_name!r}"
            state = self._state(pipeline_name, what)
            if any(shard.shard_id in state.shards for shard in chunk):  # the transaction fails: one by one instead
                stored.update((shard.shard_id, self.put_shard_if_absent(pipeline_name, shard)) for shard in chunk)
                continue
            for shard in chunk:
                state.shards[shard.shard_id] = self._stored_shard(shard)
                stored[shard.shard_id] = shard
        return stored

    def _existing_shard(self, state: _Pipeline, shard_id: str, checkpoint: int | None) -> ShardState | None:
        shard = state.shards.get(shard_id)
        if shard is None and checkpoint is None:
            # DynamoDB's condition (no checkpoint) holds for an absent item, and the update writes an item without its
            # shard id, which reads back as corrupt: the library never does it, and this fake does not pretend to.
            raise NotImplementedError(f"shard {shard_id} was never stored: DynamoDB would write half an item")
        return shard

    def advance_checkpoint(self, pipeline_name: str, shard_id: str, previous: int | None, new: int, batch_id: int, finished: bool) -> None:
        what = f"pipeline {pipeline_name!r}, shard {shard_id}: advancing the checkpoint from {previous} to {new} (batch {batch_id})"
        state = self._state(pipeline_name, what)
        shard = self._existing_shard(state, shard_id, previous)
        if shard is not None and shard.checkpoint == previous:
            state.shards[shard_id] = replace(shard, checkpoint=new, finished=finished, last_batch_id=batch_id, updated_at=_now())
            return
        checkpoint = None if shard is None or shard.checkpoint is None else format_sequence_number(shard.checkpoint)
        last_batch = None if shard is None or shard.last_batch_id is None else str(shard.last_batch_id)
        if checkpoint == format_sequence_number(new) and last_batch == str(batch_id):
            return  # this batch already moved it: a resumed commit is idempotent
        raise StateConflictError(f"{what}: the stored checkpoint is {checkpoint} (batch {last_batch})")

    def mark_finished(self, pipeline_name: str, shard_id: str, checkpoint: int | None) -> None:
        what = f"pipeline {pipeline_name!r}, shard {shard_id}: marking the drained shard finished at checkpoint {checkpoint}"
        state = self._state(pipeline_name, what)
        shard = self._existing_shard(state, shard_id, checkpoint)
        if shard is None or shard.checkpoint != checkpoint:
            raise StateConflictError(f"{what}: the checkpoint moved meanwhile")
        state.shards[shard_id] = replace(shard, finished=True, updated_at=_now())

    # -- batches --------------------------------------------------------------------------------------------------

    def create_batch(self, batch: Batch, head: Head) -> Head:
        what = f"pipeline {batch.pipeline_name!r}: planning batch {batch.batch_id}"
        state = self._state(batch.pipeline_name, what)
        current = state.head
        if head.version == 0:
            head_ok = current is None
        else:
            head_ok = current is not None and current.version == head.version and current.in_flight is None
        batch_ok = batch.batch_id not in state.batches
        if not (head_ok and batch_ok):
            raise _conflict(what, [PASSED if head_ok else FAILED, PASSED if batch_ok else FAILED])
        redecodes = current.redecodes if current is not None else 0  # an update of the item keeps what it does not set
        new_head = Head(next_batch_id=batch.batch_id + 1, in_flight=batch.batch_id, version=head.version + 1, redecodes=redecodes)
        state.head = new_head
        state.batches[batch.batch_id] = _BatchItem.of(batch)
        return new_head

    def get_batch(self, pipeline_name: str, batch_id: int) -> Batch:
        item = self._state(pipeline_name, f"reading batch {batch_id} of pipeline {pipeline_name!r}").batches.get(batch_id)
        if item is None:
            raise StateCorruptError(f"pipeline {pipeline_name!r}: batch {batch_id} is not in state table {self.table}. {CORRUPT_HINT}")
        return _copy(item.batch)

    def list_batches(self, pipeline_name: str) -> list[Batch]:
        batches = self._state(pipeline_name, f"reading batch#* of pipeline {pipeline_name!r}").batches
        return [_copy(batches[b].batch) for b in sorted(batches)]

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        ids = sorted(set(batch_ids))
        batches = self._state(pipeline_name, f"reading {len(ids)} batches of pipeline {pipeline_name!r}").batches
        return {b: _copy(batches[b].batch) for b in ids if b in batches}

    def get_summaries(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, BatchSummary]:
        ids = sorted(set(batch_ids))
        batches = self._state(pipeline_name, f"reading the figures of {len(ids)} batches of pipeline {pipeline_name!r}").batches
        summaries = {}
        for batch_id in (b for b in ids if b in batches):
            item = batches[batch_id]
            b = item.batch
            summaries[batch_id] = BatchSummary(
                batch_id=batch_id, status=b.status, created_at=b.created_at, committed_at=b.committed_at, attempts=b.attempts,
                error=b.error, figures=json.loads(json.dumps(item.figures)), failures=item.failures, last_error=item.last_error,
            )  # fmt: skip
        return summaries

    def update_batch(self, batch: Batch, expected: BatchStatus) -> None:
        what = f"pipeline {batch.pipeline_name!r}: setting batch {batch.batch_id} from {expected.value} to {batch.status.value}"
        state = self._state(batch.pipeline_name, what)
        head_ok = state.head is not None and state.head.in_flight == batch.batch_id
        item = state.batches.get(batch.batch_id)
        batch_ok = item is not None and item.batch.status == expected
        if item is None or not (head_ok and batch_ok):
            raise _conflict(what, [PASSED if head_ok else FAILED, PASSED if batch_ok else FAILED])
        stored = _copy(batch)  # only these fields change: the ranges, times, notes and snapshot stay as stored
        item.batch = replace(
            item.batch, status=stored.status, result=stored.result, attempts=stored.attempts, error=stored.error, gaps=stored.gaps
        )
        item.figures = json.loads(json.dumps(batch.figures()))
        if batch.status == BatchStatus.FAILED and batch.error is not None:
            item.failures, item.last_error = item.failures + 1, batch.error

    def set_replayed(self, batch: Batch, expected: BatchStatus, previous_snapshot: int | None = None) -> None:
        if batch.snapshot_id is None or batch.result is None:
            raise ValueError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: a replayed batch needs its manifest and snapshot")
        what = (
            f"pipeline {batch.pipeline_name!r}: keeping the replayed attempt {batch.result.attempt} and snapshot {batch.snapshot_id} "
            f"with batch {batch.batch_id}"
        )
        state = self._state(batch.pipeline_name, what)
        item = state.batches.get(batch.batch_id)
        if item is None or item.batch.status != expected:
            raise _conflict(what, [FAILED])
        if previous_snapshot is not None and item.batch.snapshot_id != previous_snapshot:
            raise _conflict(what, [FAILED])
        copied = _copy(batch)
        item.batch = replace(
            item.batch, result=copied.result, snapshot_id=batch.snapshot_id, quarantine_snapshot_id=batch.quarantine_snapshot_id,
            redecoded_by=batch.redecoded_by, staged=copied.staged, staged_by=batch.staged_by,
        )  # fmt: skip
        item.figures = json.loads(json.dumps(batch.figures()))

    def set_staged(self, batch: Batch, expected: BatchStatus) -> None:
        if batch.staged is None or batch.staged_by is None:
            raise ValueError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: a staged re-decode needs its manifest and run")
        what = f"pipeline {batch.pipeline_name!r}: staging the re-decoded attempt {batch.staged.attempt} of batch {batch.batch_id}"
        state = self._state(batch.pipeline_name, what)
        item = state.batches.get(batch.batch_id)
        if item is None or item.batch.status != expected:
            raise _conflict(what, [FAILED])
        item.batch = replace(item.batch, staged=_copy(batch).staged, staged_by=batch.staged_by)
        item.figures = json.loads(json.dumps(item.batch.figures()))

    def record_redecodes(self, pipeline_name: str, redecodes: int) -> None:
        what = f"pipeline {pipeline_name!r}: recording {redecodes} re-decodes made visible"
        state = self._state(pipeline_name, what)
        if state.head is None:
            raise _conflict(what, [FAILED])
        if state.head.redecodes < redecodes:
            state.head = replace(state.head, redecodes=redecodes)

    def complete_batch(self, batch: Batch, committed_at: datetime) -> None:
        what = f"pipeline {batch.pipeline_name!r}: completing the commit of batch {batch.batch_id}"
        state = self._state(batch.pipeline_name, what)
        item = state.batches.get(batch.batch_id)
        batch_ok = item is not None and item.batch.status == BatchStatus.COMMITTING
        head_ok = state.head is not None and state.head.in_flight == batch.batch_id
        if item is None or state.head is None or not (batch_ok and head_ok):
            raise _conflict(what, [PASSED if batch_ok else FAILED, PASSED if head_ok else FAILED])
        snapshot = item.batch.snapshot_id if batch.snapshot_id is None else batch.snapshot_id
        quarantine = item.batch.quarantine_snapshot_id if batch.quarantine_snapshot_id is None else batch.quarantine_snapshot_id
        at = datetime.fromisoformat(committed_at.isoformat())
        item.batch = replace(
            item.batch, status=BatchStatus.COMMITTED, committed_at=at, snapshot_id=snapshot, quarantine_snapshot_id=quarantine
        )
        state.head = replace(state.head, in_flight=None, version=state.head.version + 1)

    # -- progress -------------------------------------------------------------------------------------------------

    def put_progress(self, progress: Progress, pipeline_name: str) -> None:
        shards = sorted(set(progress.records) | progress.done)
        chunks = [shards[i : i + PROGRESS_SHARDS] for i in range(0, len(shards), PROGRESS_SHARDS)] or [[]]
        what = f"pipeline {pipeline_name!r}, {progress.kind.value} batch {progress.batch_id}"
        failed: list[str] = []
        for n, chunk in enumerate(chunks):
            sk = progress_sk(progress.kind, n)
            try:
                state = self._state(pipeline_name, f"{what}: storing the replay's progress (item {n})")
            except KinesisReplayError as exc:
                shown = f"shards {chunk[0]} to {chunk[-1]}" if chunk else "no shard yet"
                failed.append(f"{sk} ({shown}): {exc}")
                continue
            records = {s: int(progress.records.get(s, 0)) for s in chunk}
            done = tuple(s for s in chunk if s in progress.done)
            state.progress[sk] = _ProgressPiece(progress.batch_id, records, done, datetime.fromisoformat(progress.updated_at.isoformat()))
        if failed:
            raise ProgressNotStoredError(
                f"{what}: {len(failed)} of {len(chunks)} progress items not stored in state table {self.table}: {'; '.join(failed)}"
            )

    def get_progress(self, pipeline_name: str) -> dict[RunKind, Progress]:
        """As DynamoDBStateStore reads its pieces: those of the batch written last, a shard's later counts winning."""
        state = self._state(pipeline_name, f"reading progress#* of pipeline {pipeline_name!r}")
        latest: dict[RunKind, list[_ProgressPiece]] = {}
        for sk in sorted(state.progress):
            latest.setdefault(RunKind(sk.split("#")[1]), []).append(state.progress[sk])
        found: dict[RunKind, Progress] = {}
        for kind, pieces in latest.items():
            newest = max(pieces, key=lambda p: p.updated_at).batch_id
            records: dict[str, int] = {}
            done: set[str] = set()
            for piece in sorted((p for p in pieces if p.batch_id == newest), key=lambda p: p.updated_at):
                for shard, count in piece.records.items():
                    records[shard] = count
                    (done.add if shard in piece.done else done.discard)(shard)
            updated_at = max(p.updated_at for p in pieces if p.batch_id == newest)
            found[kind] = Progress(newest, records, frozenset(done), updated_at, kind)
        return found

    # -- recovery -------------------------------------------------------------------------------------------------

    def restore(self, pipeline_name: str, head: Head, shards: Sequence[ShardState], batches: Sequence[Batch]) -> None:
        """Every item put (replacing what is there) only while the pipeline has no head; the head last, at version 1."""
        items = len(batches) + len(shards)
        what = f"pipeline {pipeline_name!r}: restoring its state (items 1 to {min(items, TRANSACTION_ITEMS - 1)})" if items else (
            f"pipeline {pipeline_name!r}: restoring its head"
        )  # fmt: skip
        state = self._state(pipeline_name, what)
        if state.head is not None:
            raise _conflict(what, [FAILED])
        for batch in batches:
            state.batches[batch.batch_id] = _BatchItem.of(batch)
        for shard in shards:
            state.shards[shard.shard_id] = self._stored_shard(shard)
        state.head = Head(next_batch_id=head.next_batch_id, in_flight=head.in_flight, version=1, redecodes=head.redecodes)
