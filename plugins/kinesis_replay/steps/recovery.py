"""Rebuild a pipeline's lost state from its output's commit records: checkpoints, finished shards, head, ledger.

Every batch whose commit began left a commit record in the output before any checkpoint moved
(``commit_records.write_commit_record``), so the records hold every range that was, or is being, committed.
A shard's checkpoint is the end of its range in the newest record that has one; a closed shard read to
its end is finished. The next batch id follows the newest record. Nothing is read from the stream but
its shard list (for parents, and to store the start of shards that never committed anything).

For a table output, each record names the snapshot that put its batch in the table. A record without one is of a
commit cut short between the record and the table commit: recovery finishes it (the batch's verified attempt goes
into the table in one snapshot, or the snapshot that did so is found by its summary), so that every batch the
rebuilt ledger calls committed is in the table. A record whose manifest names no attempt either was committed to a
directory output (its rows are in a batch_id=<id>/ folder, which no table commit can take): recovery refuses it
rather than skip it, as skipping would move the checkpoints past rows the table does not hold.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from kinesis_replay.adapters import commit_records, iceberg_table, layout
from kinesis_replay.adapters.kinesis_client import list_shards
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.adapters.owner import write_owner
from kinesis_replay.core import holdings, ownership  # holdings.listed: plan_recovery's argument is named listed
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import RecoveryError  # re-exported for recovery.RecoveryError
from kinesis_replay.core.holdings import Commit, Ledger
from kinesis_replay.core.output_root import Owner
from kinesis_replay.core.ranges import SequenceRange, ShardInfo
from kinesis_replay.core.refusals import RECOVER_PARAM, refuse
from kinesis_replay.core.state import Batch, BatchStatus, Head, ShardResult, ShardState, StateStore, range_checkpoint, resolve_start
from kinesis_replay.steps import commit

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovery:
    """What a recovery writes into the state table."""

    pipeline_name: str
    state_table: str
    output: str
    head: Head
    shards: tuple[ShardState, ...]
    batches: tuple[Batch, ...]

    def describe(self) -> str:
        ids = [b.batch_id for b in self.batches]
        lines = [
            f"pipeline {self.pipeline_name}: rebuild state table {self.state_table} from output {self.output}:",
            f"  {len(ids)} committed batches ({ids[0]} to {ids[-1]}), next batch id {self.head.next_batch_id}",
        ]
        for s in self.shards:
            state = "finished" if s.finished else "open"
            where = f"checkpoint {s.checkpoint} (batch {s.last_batch_id})" if s.checkpoint is not None else "no checkpoint"
            start = f", starts at {s.start_position.kind}" if s.start_position is not None and s.checkpoint is None else ""
            lines.append(f"  shard {s.shard_id}: {where}, {state}{start}")
        return "\n".join(lines)


def _checkpoint_after(where: str, batch: Batch, rng: SequenceRange, before: int | None, results: Mapping[str, ShardResult]) -> int:
    """Where a recorded range left its shard's checkpoint, once it is known to follow ``before`` (the batches before it)
    and to have a result, or the gap that says every record of it was gone."""
    if before != rng.previous_checkpoint:
        raise RecoveryError(
            f"{where}: batch {batch.batch_id}, range {rng.describe()} follows checkpoint {rng.previous_checkpoint}, but "
            f"the batches before it end shard {rng.shard_id} at {before}: the records disagree"
        )
    if rng.shard_id not in results and not any(g.shard_id == rng.shard_id and g.first_available is None for g in batch.gaps):
        raise RecoveryError(
            f"{where}: the commit record of batch {batch.batch_id} has no result for range {rng.describe()}, and no gap "
            "that says every record of it was gone: the record is not one a commit wrote"
        )
    return range_checkpoint(rng, results)


def plan_recovery(pipeline: PipelineConfig, records: Sequence[Batch], listed: Sequence[ShardInfo], claimed_at: datetime) -> Recovery:
    """The state the commit records imply; refused when they are not one unbroken chain of batches.

    ``claimed_at`` is when the pipeline first claimed its output: a LATEST pipeline's shards that never
    committed anything start there, which is no later than any start the lost table held.
    """
    where = f"pipeline {pipeline.name!r}, output {pipeline.output}"
    ids = [b.batch_id for b in records]
    missing = sorted(set(range(1, ids[-1] + 1)) - set(ids)) if ids else []
    if missing:
        raise RecoveryError(
            f"{where}: the commit records of batches {holdings.listed(missing)} are missing, so the checkpoints they moved can't be "
            "known; restore those files under _commits/ (from a backup or a versioned bucket) and recover again"
        )
    if pipeline.table is not None:
        check_table_records(pipeline, records)
    parents = {s.shard_id: s.parent_shard_ids for s in listed}
    shards: dict[str, ShardState] = {}
    for batch in records:
        if batch.pipeline_name != pipeline.name or batch.stream != pipeline.stream:
            raise RecoveryError(
                f"{where}: the commit record of batch {batch.batch_id} is of pipeline {batch.pipeline_name!r}, stream {batch.stream}"
            )
        if batch.result is None:
            raise RecoveryError(f"{where}: commit record of batch {batch.batch_id} has no manifest")
        results = batch.result.by_shard()
        for rng in batch.ranges:
            known = shards.get(rng.shard_id)
            end = _checkpoint_after(where, batch, rng, known.checkpoint if known else None, results)
            shards[rng.shard_id] = ShardState(
                rng.shard_id, checkpoint=end, finished=rng.to_shard_end,
                parent_shard_ids=parents.get(rng.shard_id, ()), last_batch_id=batch.batch_id,
            )  # fmt: skip
    started = min([claimed_at, *(b.created_at for b in records)])
    for info in listed:
        if info.shard_id not in shards:
            start = resolve_start(pipeline, info, started)
            shards[info.shard_id] = ShardState(info.shard_id, parent_shard_ids=info.parent_shard_ids, start_position=start)
    restored = tuple(
        replace(b, status=BatchStatus.COMMITTED, notes=replace(b.notes, restored_from=layout.commit_record_path(pipeline.output, i)))
        for i, b in zip(ids, records, strict=True)
    )
    head = Head(next_batch_id=(ids[-1] if ids else 0) + 1)
    ordered = tuple(sorted(shards.values(), key=lambda s: s.shard_id))
    return Recovery(pipeline.name, pipeline.state_table, pipeline.output, head, ordered, restored)


def check_table_records(pipeline: PipelineConfig, records: Sequence[Batch]) -> None:
    """For a table output: every record names its snapshot, or an attempt that a table commit can finish with.

    Refused, not skipped: the rebuilt ledger would call such a batch committed, and its checkpoints would move past
    records the table does not hold (invariant 5); a replay can't help either, as the batch's ranges may have left
    the stream's retention. Checked before anything is committed to the table, and in a dry run too.
    """
    directory = [b.batch_id for b in records if b.snapshot_id is None and b.result is not None and b.result.attempt is None]
    if not directory:
        return
    table = pipeline.table.describe() if pipeline.table is not None else "the table"
    raise RecoveryError(
        f"pipeline {pipeline.name!r}, output {pipeline.output}: the commit records of batch(es) {holdings.listed(directory)} "
        f"name no table snapshot, and their result manifests no attempt: they were committed to a directory output "
        f"(batch_id=<id>/ folders), and the pipeline's output_format is now iceberg ({table}). Recovering would call them "
        "committed while the table holds none of their rows. If the output is a directory output, set output_format: "
        f"directory for pipeline {pipeline.name!r} in the pipelines config and recover again. Nothing was written."
    )


def in_table(pipeline: PipelineConfig, batch: Batch) -> Batch:
    """A recovered batch with the snapshots that hold it in the table and the quarantine table, committing it first if its
    commit was cut short."""
    if batch.snapshot_id is not None:
        return batch
    # As a restore does: the table may lack earlier batches too (rolled back, dropped), which the plan then refuses
    # and the restore puts back; a regular commit's check would refuse this one, and no ledger would ever be written.
    ledger = Ledger(batch.batch_id)
    run_id = f"recovery of {batch.run_id}"
    snapshot_id = commit.commit_to_table(pipeline, batch, run_id, Commit.RESTORE, ledger)
    quarantined = commit.quarantine_to_table(pipeline, batch, run_id)  # the second table, as a resumed commit finishes it
    record = replace(batch, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined, notes=replace(batch.notes, restored_from=None))
    commit_records.write_commit_record(pipeline.output, record)
    log.info("pipeline %s: batch %d is in the table in snapshot %d", pipeline.name, batch.batch_id, snapshot_id)
    return replace(batch, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined)


def redecodes_made_visible(pipeline: PipelineConfig, batches: Sequence[Batch]) -> int:
    """The head's count of re-decodes made visible, as the recovered ledger implies it: the highest count recorded by a
    re-decoded batch's snapshot (its commit record names it), or the table's current one if higher. A re-decode's
    snapshot that was expired since leaves the table's count to stand for it."""
    table = iceberg_table.load_table(pipeline)
    counts = [iceberg_table.table_state(table).holdings.redecodes if table is not None else 0]
    for snapshot_id in sorted({b.snapshot_id for b in batches if b.redecoded_by is not None and b.snapshot_id is not None}):
        held = iceberg_table.snapshot_holdings(pipeline, snapshot_id)
        counts.append(held.redecodes if held is not None else 0)
    return max(counts)


def read_records(pipeline: PipelineConfig, batch_ids: Sequence[int]) -> list[Batch]:
    """The commit records of these batches, in their order. One read each, ``read.plan_concurrency`` at a time: a year of
    one-minute batches is 525,600 records, and on S3 each is a GET of its own (tens of milliseconds: hours one after
    another). The first record that cannot be read fails the recovery, as it did read in turn. Each read runs in a copy
    of the caller's context: the task's way to S3 (files.reaching_s3, a context variable) is the pool threads' too,
    which would otherwise reach for the default chain's S3."""
    read = functools.partial(commit_records.read_commit_record, pipeline.output)
    with ThreadPoolExecutor(max_workers=pipeline.read.plan_concurrency, thread_name_prefix="recover") as pool:
        # A copy each, made here (a Context is entered by one thread at a time), of this thread's context.
        return list(pool.map(lambda job: job[0].run(read, job[1]), [(contextvars.copy_context(), b) for b in batch_ids]))


def recover(pipeline: PipelineConfig, kinesis_client: KinesisClient, store: StateStore, now: datetime, dry_run: bool = False) -> Recovery:
    """Rebuild the pipeline's state in its (empty) state table from the output; a dry run only says what it would write.

    Refused while the table holds any state for the pipeline: recovery never overwrites a ledger.
    """
    root = load_root(pipeline, Head())  # loaded as for a lost state table: its commit records listed
    owner = root.owner
    # Without the owner record (deleted), the commit records say whose the root is (another pipeline's is refused), and
    # the recovery writes the record again. plan_recovery checks that every record is this pipeline's and stream's.
    refuse(ownership.unowned_refusal(pipeline, root) if owner is None else ownership.owner_refusal(pipeline, root, new_table=True))
    head = store.get_head(pipeline.name)
    if head.version != 0:
        raise RecoveryError(
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} already holds the pipeline's state (next batch "
            f"{head.next_batch_id}); recovery only fills a table that lost it, and never overwrites a ledger. Trigger without "
            f"{RECOVER_PARAM}."
        )
    ids = root.committed or ()
    if not ids:
        raise RecoveryError(
            f"pipeline {pipeline.name!r}: output {pipeline.output} holds no commit record, so there is nothing to recover; "
            f"a new pipeline starts without {RECOVER_PARAM}"
        )
    records = read_records(pipeline, ids)
    listed = list_shards(kinesis_client, pipeline.stream, pipeline.read)
    # Without the owner record, the first batch's plan stands for the first claim: a shard that committed nothing by the
    # last batch's plan had no record since the first plan, so any start between the two reads the same records.
    claimed_at = datetime.fromisoformat(owner.created_at) if owner is not None else min(b.created_at for b in records)
    plan = plan_recovery(pipeline, records, listed, claimed_at)
    log.info("%s%s", "dry run: would " if dry_run else "", plan.describe())
    if dry_run:
        return plan
    if pipeline.table is not None:
        batches = tuple(in_table(pipeline, b) for b in plan.batches)
        plan = replace(plan, batches=batches, head=replace(plan.head, redecodes=redecodes_made_visible(pipeline, batches)))
    store.restore(pipeline.name, plan.head, plan.shards, plan.batches)
    if owner is None:
        claim = Owner(pipeline.name, pipeline.stream, pipeline.state_table, claimed_at.isoformat(), 0, pipeline.output_format)
        claimed = write_owner(pipeline.output, claim)
        refuse(ownership.owner_refusal(pipeline, replace(root, owner=claimed)))  # unless another claimed it meanwhile
        log.info(
            "pipeline %s: output %s claimed again (owner record %s)", pipeline.name, pipeline.output, layout.owner_path(pipeline.output)
        )
    elif owner.state_table != pipeline.state_table or owner.output_format is None:
        # owner_refusal found the output's format (recorded, or shown by its folders) agrees with the pipeline's: record it.
        claim = replace(owner, state_table=pipeline.state_table, output_format=pipeline.output_format)
        write_owner(pipeline.output, claim, replace=True)
    log.info("pipeline %s: state rebuilt in %s; the next batch is %d", pipeline.name, pipeline.state_table, plan.head.next_batch_id)
    return plan
