"""Commit a verified batch: its commit record, its table snapshot, every checkpoint, then COMMITTED."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from kinesis_replay.adapters import commit_records, file_stats, files, iceberg_table, layout, quarantine_table
from kinesis_replay.adapters.files import attempt_paths, batch_files, parquet_files, quarantine_folder, remove_folder
from kinesis_replay.adapters.iceberg_table import TableCheck
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import (
    BackfillError,
    StateConflictError,
    VerificationError,
)
from kinesis_replay.core.holdings import Commit, Holdings, Ledger, TableState, listed
from kinesis_replay.core.ledger import ledger_before, ledger_of, ledger_rows
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.refusals import Refusal, refuse
from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult, StateStore, range_checkpoint, superseded

log = logging.getLogger(__name__)


def commit_batch(pipeline: PipelineConfig, store: StateStore, batch_id: int, now: datetime | None = None, run_id: str = "") -> Batch:
    """Make a verified batch visible, advance every checkpoint, then mark it COMMITTED; resumable and idempotent.

    1. WRITTEN -> COMMITTING, conditioned on the batch being in flight and still WRITTEN;
    2. the batch's commit record into the output (rewritten by a resumed commit);
    3. for a table output, the batch's files into the table in one snapshot (found, not made again, by a resumed
       commit: its summary names the attempt), then its quarantined records into the quarantine table the same way,
       and both snapshot ids into the commit record;
    4. each shard's checkpoint from the range's previous checkpoint to its end, conditionally;
    5. COMMITTED (with the snapshot id) and the head's in-flight id cleared, in one transaction.
    A run that finds the batch COMMITTING resumes at step 2. The output must be this pipeline's (its owner record).
    """
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
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
    if batch.result is None:
        raise VerificationError(f"{where}: no verified manifest is stored with the batch")
    committed_at = now or datetime.now(UTC)
    committed = replace(batch, status=BatchStatus.COMMITTED, committed_at=committed_at)
    # The output's copy of the ledger entry, before any checkpoint moves: a lost state table is rebuilt from these.
    commit_records.write_commit_record(pipeline.output, committed)
    if pipeline.table is not None:
        before = ledger_before(pipeline, store, batch_id)  # the batches before this one, and the ledger's rows of each
        snapshot_id = commit_to_table(pipeline, batch, run_id or batch.run_id, ledger=before)
        quarantined = quarantine_to_table(pipeline, batch, run_id or batch.run_id)
        batch = replace(batch, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined)
        committed = replace(committed, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined)
        commit_records.write_commit_record(pipeline.output, committed)  # the output's copy names the snapshots before a checkpoint moves
    results = batch.verified_result().by_shard()

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


def commit_to_table(
    pipeline: PipelineConfig, batch: Batch, run_id: str, kind: Commit = Commit.REGULAR, ledger: Ledger | None = None
) -> int:
    """Put the verified attempt's files in the table in one snapshot (or find the snapshot that did); its id.

    Before each try the table's current snapshot must hold what the ledger says for this ``kind`` of commit
    (``table_check``; ``ledger`` is the head's for a backfill or a restore, the batches before this one for a
    regular commit: ``ledger_before``). Only a pipeline's first batch and a restore create a missing table. A
    regular commit then removes the folders of the batch's other attempts: replays that failed before a commit, which
    no snapshot ever referenced. A backfill leaves the files it superseded to snapshot expiry: older snapshots still reference them.
    """
    result = batch.verified_result()
    files = batch_files(pipeline, batch.batch_id, result)
    attempt = result.attempt or ""  # batch_files refused a manifest without one
    # Every record quarantined: the table's columns come from a quarantine file, should this be its first batch.
    quarantined = [] if files else parquet_files(quarantine_folder(pipeline, batch.batch_id, result))
    schema_file = quarantined[0] if quarantined else None
    ledger = ledger if ledger is not None else Ledger(batch.batch_id - 1, batch.batch_id)
    check = table_check(pipeline, kind, batch.batch_id, ledger)
    create = kind == Commit.RESTORE or (kind == Commit.REGULAR and ledger.last == 0)
    snapshot_id = iceberg_table.commit_snapshot(
        pipeline, batch.batch_id, attempt, files, run_id, result.records, check, create, schema_file=schema_file
    )
    first = kind == Commit.REGULAR
    if first:
        live = layout.data_path(pipeline.output, batch.batch_id, attempt)
        table = iceberg_table.load_table(pipeline)
        held = [f.file_path for f in iceberg_table.batch_data_files(table, batch.batch_id)] if table is not None else []
        if held and all(f.startswith(iceberg_table.iceberg_location(live) + "/") for f in held):
            for other, path in attempt_paths(pipeline.output, batch.batch_id).items():
                if other != attempt:
                    log.info(
                        "pipeline %s, batch %d: removing attempt %s, which no snapshot references", pipeline.name, batch.batch_id, other
                    )
                    remove_folder(path)
                    remove_folder(layout.quarantine_data_path(pipeline.output, batch.batch_id, other), missing_ok=True)
    return snapshot_id


def quarantine_to_table(pipeline: PipelineConfig, batch: Batch, run_id: str) -> int | None:
    """Put the verified attempt's quarantined records in the quarantine table, replacing the batch's there, in one snapshot
    (or find the snapshot that did, by the attempt its summary names); its id, or None when the batch has none and had none.

    Committed after the pipeline's table, never before: the table is what the ledger's guards compare, and its
    snapshot is the batch's commit; a commit cut short between the two is finished here by the run that resumes it."""
    result = batch.verified_result()
    attempt = result.attempt or ""
    # The attempt's own folder: the quarantine folder of a batch replayed by a release before the table is kept as it is.
    quarantined = parquet_files(layout.quarantine_data_path(pipeline.output, batch.batch_id, attempt))
    properties = iceberg_table.snapshot_properties(pipeline.name, batch.batch_id, attempt, run_id)
    key = {k: properties[k] for k in (iceberg_table.PIPELINE_PROPERTY, iceberg_table.BATCH_PROPERTY, iceberg_table.ATTEMPT_PROPERTY)}
    return quarantine_table.commit(pipeline, {batch.batch_id: quarantined}, properties, key)


def table_check(pipeline: PipelineConfig, kind: Commit, batch_id: int, ledger: Ledger) -> iceberg_table.TableCheck:
    """The check iceberg_table.commit_snapshot makes of the table before each try: ownership.commit_verdict over the
    table's current state, with the ledger's rows of each batch where no snapshot records them (read once, however
    many tries the commit takes)."""
    read: list[dict[int, int] | None] = []

    def check(state: TableState) -> Holdings | None:
        if state.derived and not read:
            read.append(ledger_rows(state, ledger))
        verdict = ownership.commit_verdict(pipeline, kind, batch_id, ledger, state, read[0] if state.derived else None)
        if isinstance(verdict, Refusal):
            raise verdict.as_error()
        return verdict

    return check


class TableReplace(Protocol):
    """How the staged batches' files replace theirs in the pipeline's table, in one snapshot (iceberg_table.replace_batches,
    or a rebuild's switch_table); ``known``: the files' statistics their checks summarized (file_stats), if it takes them."""

    def __call__(
        self,
        pipeline: PipelineConfig,
        replacements: Mapping[int, Sequence[str]],
        records: Mapping[int, tuple[int, int]],
        properties: Mapping[str, str],
        key: Mapping[str, str],
        check: TableCheck,
        /,
        *,
        known: file_stats.Known | None = None,
    ) -> int: ...


def commit_staged(
    pipeline: PipelineConfig,
    store: StateStore,
    pending: Sequence[Batch],
    run_id: str,
    key: Mapping[str, str],
    replace_in_table: TableReplace,
) -> list[Batch]:
    """The staged attempts of ``pending`` made the batches' rows: one snapshot of the table (``replace_in_table``), one of
    the quarantine table, then each batch's commit record and ledger entry; returns the batches as the ledger holds them."""
    ids = [b.batch_id for b in pending]
    properties = {**key, iceberg_table.RUN_PROPERTY: run_id}
    data = {b.batch_id: files.batch_listing(pipeline, b.batch_id, _staged(b)) for b in pending}
    replacements = {batch_id: list(found) for batch_id, found in data.items()}
    quarantine = {b.batch_id: files.parquet_listing(layout.quarantine_data_path(pipeline.output, b.batch_id, _staged(b).attempt or ""))
                  for b in pending}  # fmt: skip
    # Each attempt's sidecar is read inside the tables' commits, once, for the files it lists as they are listed here.
    facts = {path: fact for found in (*data.values(), *quarantine.values()) for path, fact in found.items()}
    known = file_stats.known(pipeline.output, {b.batch_id: _staged(b).attempt or "" for b in pending}, facts)
    records = {b.batch_id: (b.verified_result().records, _staged(b).records) for b in pending}

    def check(state: TableState) -> Holdings | None:
        # The ledger read again before each try: regular batches keep committing while the selection waits, and a try
        # that lost the race to one of them must compare the table with the ledger that holds it.
        ledger = ledger_of(store.get_head(pipeline.name), pipeline, store)
        return table_check(pipeline, Commit.BACKFILL, ids[0], ledger)(state)

    snapshot_id = replace_in_table(pipeline, replacements, records, properties, key, check, known=known)
    quarantined = {batch_id: list(found) for batch_id, found in quarantine.items()}
    bad = {b.batch_id: _staged(b).bad_records for b in pending}
    quarantine_id = quarantine_table.commit(pipeline, quarantined, properties, key, bad, known=known)
    committed = []
    for batch in pending:
        redecoded = replace(
            batch, result=batch.staged, snapshot_id=snapshot_id, staged=None, staged_by=None, redecoded_by=run_id,
            quarantine_snapshot_id=quarantine_id if quarantine_id is not None else batch.quarantine_snapshot_id,
        )  # fmt: skip
        # The output's copy first: it names the snapshots the tables now hold whatever becomes of the ledger's write, and
        # a commit resumed after the ledger's write writes it again (commit_redecoded), so neither keeps the earlier attempt.
        commit_records.write_commit_record(pipeline.output, redecoded)
        store.set_replayed(redecoded, expected=BatchStatus.COMMITTED)
        files.remove_folder(layout.quarantine_path(pipeline.output, batch.batch_id), missing_ok=True)  # a release's before the table
        committed.append(redecoded)
    record_redecodes(pipeline, store, snapshot_id)
    table = iceberg_table.require_table(pipeline)
    log.info("pipeline %s: re-decoded batches %s are the table's in snapshot %d of %s (quarantine: %s)", pipeline.name,
             listed(ids), snapshot_id, table.describe(), quarantine_id)  # fmt: skip
    return committed


def record_redecodes(pipeline: PipelineConfig, store: StateStore, snapshot_id: int | None) -> None:
    """The ledger's head takes the count of re-decodes made visible that the re-decode's (or the switch's) snapshot
    records, once every batch's ledger entry names it: a table rolled back past it shows behind (holdings.compare).
    Written again by a resumed commit; a count the head has already, or a higher one, is kept."""
    held = iceberg_table.snapshot_holdings(pipeline, snapshot_id) if snapshot_id is not None else None
    if held is None:
        log.warning("pipeline %s: snapshot %s of the re-decode is not in the table (expired?); the ledger's head keeps its "
                    "count of re-decodes", pipeline.name, snapshot_id)  # fmt: skip
        return
    store.record_redecodes(pipeline.name, held.redecodes)


def _staged(batch: Batch) -> ReplayResult:
    if batch.staged is None:  # pragma: no cover - pending batches are staged
        raise BackfillError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: no staged re-decode")
    return batch.staged
