"""Re-decode: a backfill with ``redecode`` makes a selection's new decoding visible at once, in one snapshot.

Each chosen batch replays in its own job, as a backfill's do, and its check (backfill.check_replayed) verifies that it
read what the first run read (per shard: records decoded plus quarantined, keys, bytes, raw digest and checksum);
what may change is the decoding. The verified attempt then waits in the ledger (``Batch.staged``, ``staged_by`` the
backfill's run), beside the committed result, which readers still see. Its files are protected from orphan removal
however long the selection takes: its result manifest names its attempt (table_maintenance's ``replayed``).

When every batch of the selection is staged, ``commit_redecoded`` makes them visible:

1. one OVERWRITE snapshot of the pipeline's table replaces every chosen batch's files with its staged attempt's, its
   holdings recording the new counts (iceberg_table.replace_batches): a reader sees the old decoding or the new one
   for the whole selection, never a mix, never a gap;
2. one snapshot of the quarantine table does the same for the quarantined records (a record the new decoding
   rescues leaves it; one it cannot read joins it);
3. each batch's commit record is written again, naming them, and then its ledger entry takes the staged attempt as
   its result, both snapshot ids and ``redecoded_by``.

Each step finds its own work already done by the run id in its snapshot's summary, so a resumed commit (a retried
task, a crash between the two tables) finishes what is left and never commits twice. pyiceberg 0.12 has no branch
fast-forward and no multi-table commit: hence one snapshot per table, the pipeline's table first. A selection is at
most backfill.MAX_BATCHES_PER_RUN batches (100): a larger one is refused when selected, and is re-decoded in several
runs, each of them visible at once on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kinesis_replay.adapters import commit_records, iceberg_table
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import BackfillError
from kinesis_replay.core.holdings import listed
from kinesis_replay.core.refusals import refuse
from kinesis_replay.core.state import Batch, StateStore
from kinesis_replay.steps.commit import commit_staged, record_redecodes

log = logging.getLogger(__name__)

REDECODE_PROPERTY = "kinesis-replay.redecode"  # a re-decode's snapshots name its backfill run here


def commit_redecoded(pipeline: PipelineConfig, store: StateStore, batch_ids: Sequence[int], run_id: str) -> list[Batch]:
    """Make the staged re-decodes of ``batch_ids`` (staged by ``run_id``) the batches' rows, in one snapshot of each table;
    returns the batches as the ledger now holds them. Refused, changing nothing, when any of them is not staged by
    this run (its replay failed, or another run staged it since)."""
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    found = store.get_batches(pipeline.name, batch_ids)
    done = [b for b in found.values() if b.staged is None and b.redecoded_by == run_id]  # a resumed commit's finished ones
    pending = [found[b] for b in sorted(found) if found[b].staged_by == run_id and found[b].staged is not None]
    missing = sorted(set(batch_ids) - {b.batch_id for b in done} - {b.batch_id for b in pending})
    if missing:
        others = {b: found[b].staged_by for b in missing if b in found and found[b].staged_by is not None}
        raise BackfillError(
            f"pipeline {pipeline.name!r}: the re-decode of run {run_id} cannot commit: batches {listed(missing)} hold no "
            f"re-decoded attempt of this run{f' (staged by other runs: {others})' if others else ''}. Their replay or check "
            "failed, or another backfill staged them since. Nothing was committed: readers still see every batch of the "
            "selection as it was. Clear the failed tasks of this run to replay them, or trigger the re-decode again"
        )
    for batch in done:  # re-decoded by this run's commit, which may have been cut short before the batch's commit record
        commit_records.write_commit_record(pipeline.output, batch)
    if not pending:
        if done:  # cut short before the head's write?
            record_redecodes(pipeline, store, done[0].snapshot_id)
        log.info("pipeline %s: the re-decode of run %s is committed already", pipeline.name, run_id)
        return [found[b] for b in sorted(found)]
    key = {iceberg_table.PIPELINE_PROPERTY: pipeline.name, REDECODE_PROPERTY: run_id}
    committed = commit_staged(pipeline, store, pending, run_id, key, iceberg_table.replace_batches)
    return sorted([*done, *committed], key=lambda b: b.batch_id)
