"""Verify a batch: the replay's result and files against the plan, before anything is committed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kinesis_replay.adapters import iceberg_table
from kinesis_replay.adapters.file_stats import Collector
from kinesis_replay.adapters.files import batch_files, parquet_files, quarantine_folder, read_result, scan_rows
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import (
    VerificationError,
)
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.records import DIGEST_HASH, digest_hash, format_digest
from kinesis_replay.core.state import Batch, BatchStatus, Gap, ReplayResult, ShardResult, StateStore, committed_meanwhile, superseded

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    pass

log = logging.getLogger(__name__)


def verify_batch(
    pipeline: PipelineConfig, store: StateStore, batch_id: int, acknowledged: frozenset[str] = frozenset(), run_id: str = ""
) -> Batch:
    """Check the replay's ``ReplayResult`` (read from its result manifest) and the files against the plan; record the
    batch as WRITTEN.

    Nothing moves when anything disagrees: the error names the batch and shard, and the batch
    stays in flight to be replayed by the next run. A range whose first records were gone is
    accepted only for the ``acknowledged`` shards, and recorded in the ledger as a gap.
    """
    batch = store.get_batch(pipeline.name, batch_id)
    if batch.status in (BatchStatus.COMMITTING, BatchStatus.COMMITTED):
        # Two runs replayed the batch at once and the other verified it first: its commit removes this run's attempt.
        raise superseded(pipeline, batch)
    with committed_meanwhile(pipeline, store, batch_id):  # its commit may remove this run's files while they are checked
        result = read_result(pipeline.output, batch_id)
        gaps = check_result(batch, result, acknowledged, run_id)
        check_files(pipeline, batch_id, result)
        all_gaps = merge_gaps(batch.gaps, gaps)
        written = batch.with_status(BatchStatus.WRITTEN, result=result, attempts=batch.attempts + 1, error=None, gaps=all_gaps)
        store.update_batch(written, expected=batch.status)
    log.info("pipeline %s: batch %d verified: %d records, %d bytes", pipeline.name, batch_id, result.records, result.bytes)
    return written


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


def check_files(
    pipeline: PipelineConfig,
    batch_id: int,
    result: ReplayResult,
    staged: bool = False,
    fit: bool = True,
    collector: Collector | None = None,
) -> None:
    """The batch's files hold exactly the rows the manifest describes, shard by shard, before anything is committed.

    Per shard: the rows (and bad rows in the quarantine) the manifest counts, each (sequence number, sub-sequence
    number) once, and the manifest's row digest recomputed from the files with pyarrow (records.row_digest), with the hash it names.
    ``staged``: the files the manifest's attempt staged (a backfill's), before they are swapped into the batch's folders.
    ``fit``: a table output's files fit the table's columns as they are (all but a rebuild's, whose switch changes them).
    ``collector``: takes each file's size and modification time before its read, then its footer as read (for the
    attempt's sidecar of statistics: adapters/file_stats.py).
    """
    where = f"pipeline {pipeline.name!r}, batch {batch_id}"
    quarantine = quarantine_folder(pipeline, batch_id, result, staged)
    data_files = batch_files(pipeline, batch_id, result, staged)
    if pipeline.table is not None and fit:
        # What would make the table commit fail every time fails here, while the batch can still be replayed.
        iceberg_table.check_files_fit(pipeline, batch_id, result.attempt or "", data_files)
    hashes = {digest_hash(digest, f"{where}, shard {shard_id}") for shard_id, digest in result.digests().items()}
    if len(hashes) > 1:
        named = ", ".join(sorted(hashes))
        raise VerificationError(f"{where}: the manifest's row digests name more than one hash ({named}); one job run writes one")
    hash_name = hashes.pop() if hashes else DIGEST_HASH
    scanned = {}
    quarantined = parquet_files(quarantine)
    if collector is not None:
        collector.list_files([*data_files, *quarantined])
    for files, expected, place in (
        (data_files, {s.shard_id: s.records for s in result.shards if s.records}, "the batch's files"),
        (quarantined, {s.shard_id: s.bad_records for s in result.shards if s.bad_records}, quarantine),
    ):
        rows = scan_rows(files, hash_name, collector.footers if collector is not None else None)
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
    for shard_id, digest in result.digests().items():
        total = sum(rows[shard_id].digest for rows in scanned.values() if shard_id in rows)
        if format_digest(total, hash_name) != digest:
            raise VerificationError(
                f"{where}, shard {shard_id}: the row digest of the files is {format_digest(total, hash_name)}, the manifest says "
                f"{digest}: the files do not hold the rows the replay job wrote"
            )
    total = result.records + result.bad_records
    if result.bad_records and result.bad_records > pipeline.payload.max_bad_share * total:
        raise VerificationError(
            f"{where}: {result.bad_records} of {total} records ({result.bad_records / total:.1%}) could not be decoded, "
            f"more than payload.max_bad_share ({pipeline.payload.max_bad_share:.1%}); they are in "
            f"{quarantine} with the reason in decode_error"
        )


def check_result(batch: Batch, result: ReplayResult, acknowledged: frozenset[str] = frozenset(), run_id: str = "") -> list[Gap]:
    """The manifest covers exactly the batch's ranges, from each start to each end; returns acknowledged gaps."""
    where = f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}"
    if result.batch_id != batch.batch_id or result.pipeline_name != batch.pipeline_name:
        raise VerificationError(f"{where}: the result manifest is for pipeline {result.pipeline_name!r}, batch {result.batch_id}")
    results = result.by_shard()
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
