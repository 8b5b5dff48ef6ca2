"""Compaction: maintenance writes each batch's files again as few files as its size needs, one snapshot for many batches.

A batch's rows are one partition of the table (``identity(batch_id)``), written by a replay as a file per Spark task.
Compaction chooses the committed batches whose partition holds more files than its bytes need at ``target_bytes`` a
file (adapters/compaction.files_needed), at most ``MAX_BATCHES_PER_RUN`` a run, oldest first, and for each:

1. writes the verified attempt's rows again as a compacted attempt of its own (adapters/compaction.rewrite), its
   quarantined records copied beside them, so the attempt is whole;
2. checks the files against the batch's ledger entry exactly as a backfill's are (verify.check_files: rows and bad rows
   per shard, each key once, the row digest);

then one OVERWRITE snapshot replaces every chosen batch's files (iceberg_table.replace_batches), its holdings unchanged
(the same batches, the same records, the same count of re-decodes), so the table guard, the restore and orphan removal
go on as before. Each try refuses, committing nothing, if a batch's files in the table are no longer the attempt it
read (a backfill, a re-decode or a restore replaced them since): those batches are dropped and the rest tried again
on the new state, so a compaction never puts back files another commit replaced. Last, each batch's ledger entry names
the compacted attempt and the snapshot, in a write conditioned on the entry still naming the snapshot it read (a
replay that committed meanwhile keeps its own), then its commit record. The replaced files stay for older snapshots
until snapshot expiry; orphan removal takes them after that (the ledger no longer names their attempt).

A run cut short is finished by the same run id: its snapshot is found by the run id in its summary, and the batches it
names are written to the ledger and their commit records. A run with a new id compacts what is left.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kinesis_replay.adapters import commit_records, compaction, iceberg_table, layout
from kinesis_replay.adapters.files import batch_files, remove_folder
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import FilesReplacedMeanwhileError, StateConflictError
from kinesis_replay.core.holdings import BATCHES_PROPERTY, Commit, Holdings, TableState, listed
from kinesis_replay.core.ledger import ledger_of
from kinesis_replay.core.refusals import refuse
from kinesis_replay.core.state import Batch, BatchStatus, StateStore
from kinesis_replay.steps import commit, verify

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

COMPACTION_PROPERTY = "kinesis-replay.compaction"  # a compaction's snapshot names its run here
COMPACTED_PROPERTY = "kinesis-replay.compacted"  # ... and the batches it compacted, as ranges
MAX_BATCHES_PER_RUN = 100  # a run's one snapshot replaces at most this many batches' files
ROUNDS = 3  # tries on a new state after losing batches to other commits, before the rest waits for the next run


@dataclass(frozen=True)
class Compaction:
    """What a compaction run did: the batches it compacted, those another commit replaced meanwhile (left as that commit
    made them), those whose files in the table are not their verified attempt's (left alone), and the files before
    and after."""

    pipeline_name: str
    compacted: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()
    files_before: int = 0
    files_after: int = 0
    snapshot_id: int | None = None
    waiting: int = 0  # batches beyond this run's MAX_BATCHES_PER_RUN that need it too

    def describe(self) -> str:
        text = f"pipeline {self.pipeline_name}: "
        if not self.compacted:
            text += "no batch compacted"
        else:
            text += (
                f"compacted batches {listed(self.compacted)} ({len(self.compacted)} in all) from {self.files_before} files to "
                f"{self.files_after}, in snapshot {self.snapshot_id}"
            )
        if self.lost:
            text += f"; batches {listed(self.lost)} were replaced by another commit meanwhile and kept as it made them"
        if self.skipped:
            text += f"; batches {listed(self.skipped)} hold files in the table that are not their verified attempt's: left alone"
        if self.waiting:
            text += f"; {self.waiting} more batches need compacting, for the next runs"
        return text


def compaction_attempt(run_id: str) -> str:
    """The attempt folder a compaction run writes: named for the run, so a retried run writes the same one again."""
    return "compacted-" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


def compact(
    pipeline: PipelineConfig, store: StateStore, run_id: str, target_bytes: int = compaction.TARGET_BYTES, dry_run: bool = False
) -> Compaction:
    """Compact the committed batches whose partitions hold more files than their size needs (see the module's text)."""
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    head = store.get_head(pipeline.name)
    table = iceberg_table.load_table(pipeline)
    if table is None or head.version == 0:
        return Compaction(pipeline.name)
    key = {iceberg_table.PIPELINE_PROPERTY: pipeline.name, COMPACTION_PROPERTY: run_id}
    found = iceberg_table.find_snapshot(table, key)
    if found is not None:  # this run committed its snapshot and was cut short: finish the ledger and the records
        return _finish(pipeline, store, run_id, found)
    last = (head.in_flight or head.next_batch_id) - 1
    counts = iceberg_table.partition_files(table)
    wanted = [b for b, (files, size) in sorted(counts.items()) if 1 <= b <= last and files > compaction.files_needed(size, target_bytes)]
    chosen_ids, waiting = wanted[:MAX_BATCHES_PER_RUN], max(0, len(wanted) - MAX_BATCHES_PER_RUN)
    if dry_run or not chosen_ids:
        files = sum(counts[b][0] for b in chosen_ids)
        log.info("pipeline %s: %d batches hold more files than their size needs (%d files)%s", pipeline.name, len(wanted),
                 files, "; dry run: nothing written" if dry_run else "")  # fmt: skip
        return Compaction(pipeline.name, tuple(chosen_ids), files_before=files, waiting=waiting)
    attempt = compaction_attempt(run_id)
    lost: list[int] = []
    batches = store.get_batches(pipeline.name, chosen_ids)
    ready, skipped = _ready(pipeline, table, batches, attempt)
    result = Compaction(pipeline.name, (), (), tuple(skipped), waiting=waiting)
    for round_no in range(1, ROUNDS + 1):
        if not ready:
            break
        try:
            snapshot_id = _commit(pipeline, store, run_id, ready, attempt, key)
        except FilesReplacedMeanwhileError as exc:
            log.warning("pipeline %s: %s (try %d); the rest is tried again on the new state", pipeline.name, exc, round_no)
            lost += exc.batch_ids
            ready = {b: batch for b, batch in ready.items() if b not in exc.batch_ids}
            continue
        done, raced = _to_ledger(pipeline, store, ready, attempt, snapshot_id)
        before = sum(counts[b][0] for b in ready)
        after = sum(len(batch_files(pipeline, b, _compacted(batch, attempt).verified_result())) for b, batch in ready.items())
        result = Compaction(pipeline.name, tuple(done), tuple(raced), tuple(skipped), before, after, snapshot_id, waiting)
        break
    unreferenced = lost if result.snapshot_id is not None else [*lost, *ready]  # no snapshot after ROUNDS tries: none kept
    for batch_id in unreferenced:  # their compacted files, which no snapshot references
        remove_folder(layout.data_path(pipeline.output, batch_id, attempt), missing_ok=True)
        remove_folder(layout.quarantine_data_path(pipeline.output, batch_id, attempt), missing_ok=True)
    result = replace(result, lost=tuple(sorted({*result.lost, *lost})))
    log.info("%s", result.describe())
    return result


def _ready(pipeline: PipelineConfig, table: Table, batches: dict[int, Batch], attempt: str) -> tuple[dict[int, Batch], list[int]]:
    """Of the chosen batches, those committed whose files in the table are all their verified attempt's: each one's
    compacted attempt written and checked. The others are left alone, named."""
    held = iceberg_table.selection_data_files(table, list(batches))
    ready: dict[int, Batch] = {}
    skipped: list[int] = []
    for batch_id, batch in sorted(batches.items()):
        # Only the ledger's verified attempt, when the table holds its files and no other's: another attempt there is a
        # backfill's (or a re-decode's, a restore's) whose ledger write is still to come, or one a rollback brought back.
        source = _one_attempt(pipeline, batch_id, [f.file_path for f in held.get(batch_id, [])])
        verified = batch.result.attempt if batch.result is not None else None
        if batch.status != BatchStatus.COMMITTED or source is None or source != verified or source == attempt:
            skipped.append(batch_id)
            continue
        compaction.rewrite(pipeline.output, batch_id, source, attempt)
        verify.check_files(pipeline, batch_id, _compacted(batch, attempt).verified_result())  # as a backfill's output
        ready[batch_id] = batch
    if skipped:
        log.warning("pipeline %s: batches %s are not compacted: not committed, or their files in the table are not their "
                    "verified attempt's", pipeline.name, listed(skipped))  # fmt: skip
    return ready, skipped


def _one_attempt(pipeline: PipelineConfig, batch_id: int, paths: list[str]) -> str | None:
    """The attempt folder all of the batch's files in the table are in (None: none, or several, or another layout's)."""
    prefix = iceberg_table.iceberg_location(layout.batch_data_path(pipeline.output, batch_id)) + "/attempt="
    found = {p[len(prefix) :].split("/", 1)[0] for p in paths if p.startswith(prefix)}
    return found.pop() if len(found) == 1 and all(p.startswith(prefix) for p in paths) else None


def _compacted(batch: Batch, attempt: str) -> Batch:
    result = batch.verified_result()
    return replace(batch, result=replace(result, attempt=attempt))


def _commit(pipeline: PipelineConfig, store: StateStore, run_id: str, ready: dict[int, Batch], attempt: str, key: dict[str, str]) -> int:
    """One OVERWRITE snapshot: each ready batch's compacted files in place of its verified attempt's, holdings unchanged."""
    ids = sorted(ready)
    replacements = {b: batch_files(pipeline, b, _compacted(ready[b], attempt).verified_result()) for b in ids}
    records = {b: (ready[b].verified_result().records,) * 2 for b in ids}
    replacing = {b: layout.data_path(pipeline.output, b, ready[b].verified_result().attempt or "") for b in ids}
    properties = {**key, iceberg_table.RUN_PROPERTY: run_id, COMPACTED_PROPERTY: Holdings.of(ids).to_summary()[BATCHES_PROPERTY]}

    def check(state: TableState) -> Holdings | None:
        ledger = ledger_of(store.get_head(pipeline.name), pipeline, store)  # read again before each try, as a re-decode's
        return commit.table_check(pipeline, Commit.BACKFILL, ids[0], ledger)(state)

    return iceberg_table.replace_batches(
        pipeline, replacements, records, properties, key, check, redecodes=lambda held: held, replacing=replacing
    )


def _to_ledger(
    pipeline: PipelineConfig, store: StateStore, ready: dict[int, Batch], attempt: str, snapshot_id: int
) -> tuple[list[int], list[int]]:
    """Each batch's ledger entry names the compacted attempt and the snapshot, conditioned on still naming the snapshot it
    was read with; then its commit record. Returns the batches written, and those a replay kept its own of meanwhile."""
    done, raced = [], []
    for batch_id, batch in sorted(ready.items()):
        compacted = replace(_compacted(batch, attempt), snapshot_id=snapshot_id)
        try:
            store.set_replayed(compacted, expected=BatchStatus.COMMITTED, previous_snapshot=batch.snapshot_id)
        except StateConflictError:
            log.warning("pipeline %s, batch %d: a backfill, re-decode or restore committed it meanwhile; the ledger keeps its "
                        "attempt", pipeline.name, batch_id)  # fmt: skip
            raced.append(batch_id)
            continue
        commit_records.write_commit_record(pipeline.output, store.get_batch(pipeline.name, batch_id))
        done.append(batch_id)
    return done, raced


def _finish(pipeline: PipelineConfig, store: StateStore, run_id: str, snapshot_id: int) -> Compaction:
    """A run whose snapshot is in the table, cut short after it: each batch it names whose files in the table are still
    the compacted ones gets its ledger entry (conditioned on the entry as read now) and its commit record."""
    table = iceberg_table.load_table(pipeline)
    snapshot = table.snapshot_by_id(snapshot_id) if table is not None else None
    summary = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary is not None else {}
    named = Holdings.from_summary({BATCHES_PROPERTY: summary.get(COMPACTED_PROPERTY, "")})
    ids = list(named.ids()) if named is not None else []
    attempt = compaction_attempt(run_id)
    held = iceberg_table.selection_data_files(table, ids) if table is not None and ids else {}
    batches = store.get_batches(pipeline.name, ids)
    pending, kept = {}, []
    for batch_id, batch in sorted(batches.items()):
        folder = iceberg_table.iceberg_location(layout.data_path(pipeline.output, batch_id, attempt)) + "/"
        if not held.get(batch_id) or not all(f.file_path.startswith(folder) for f in held[batch_id]):
            kept.append(batch_id)  # another commit replaced them since: the ledger keeps what it wrote
        elif batch.result is not None and batch.result.attempt == attempt:
            commit_records.write_commit_record(pipeline.output, batch)  # its ledger entry written, its record perhaps not
        else:
            pending[batch_id] = batch
    done, raced = _to_ledger(pipeline, store, pending, attempt, snapshot_id)
    finished = tuple(sorted({*done, *(b for b in batches if b not in pending and b not in kept)}))
    result = Compaction(pipeline.name, finished, tuple(sorted(raced + kept)), snapshot_id=snapshot_id)
    log.info("pipeline %s: the compaction of run %s was committed already; %s", pipeline.name, run_id, result.describe())
    return result
