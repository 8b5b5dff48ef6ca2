"""The rules between a pipeline's output root and its state table, as decisions over what was loaded: no I/O.

Each function takes the config, the state table's head and the root's snapshot (kinesis_replay.core.output_root), and
returns None to go on, or the refusal (kinesis_replay.core.refusals) that the acting step raises:

- a root owned by another pipeline or stream is never written (``owner_refusal``);
- a root is written in the format it was created in (``format_refusal``): a directory output never grows a table, nor
  a table batch_id= folders;
- a head that is missing, or behind the output, is never taken as a fresh start (that would plan batch 1 again from the
  stream's start, and replace committed batches); nor one ahead of it, the output moved or deleted (``before_plan``);
- a new root inside another pipeline's root, or holding one, is never claimed, whatever config file or deployment the
  other comes from (``claim``);
- a table output's current snapshot holds exactly the batches the ledger says are committed (``table_refusal``);
- a table output's columns change only as Iceberg changes a column in place (``schema_refusal``, by the rules of
  kinesis_replay.core.schema_changes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from kinesis_replay.core.config import PipelineConfig, rebuilt
from kinesis_replay.core.decoding import EARLIER, Decoding
from kinesis_replay.core.holdings import Commit, Holdings, Ledger, Mismatch, TableState, compare, ledger_holdings
from kinesis_replay.core.output_root import Owner, RecordedFormat, RootSnapshot, TableSnapshot
from kinesis_replay.core.refusals import (
    CommitRecordsOfAnother,
    DecodingChanged,
    FormatChanged,
    HoldsAnotherRoot,
    InsideAnotherRoot,
    JobLayoutDiffers,
    JobRootOfAnother,
    KeptWithAnotherStateTable,
    NoOwnerRecord,
    OfAnotherStream,
    OutputLacksCommitted,
    OwnedByAnotherPipeline,
    RebuildRefused,
    Refusal,
    SchemaChangeRefused,
    StateBehindOutput,
    StateMissingButOutputHolds,
    StreamCreatedAgain,
    TableDisagrees,
    who,
)
from kinesis_replay.core.schema_changes import payload_changes, rebuild_changes
from kinesis_replay.core.state import Batch, Head


def format_refusal(pipeline: PipelineConfig, recorded: RecordedFormat | None) -> Refusal | None:
    """The pipeline writes its output in the format the root was created in (a new or empty root: any)."""
    if recorded is None or recorded.format == pipeline.output_format:
        return None
    return FormatChanged(pipeline, recorded.format, recorded.why)


def owner_refusal(pipeline: PipelineConfig, root: RootSnapshot, new_table: bool = False) -> Refusal | None:
    """The output root is this pipeline's: same pipeline, same stream, same format, and (unless ``new_table``) same
    state table. Before a replay, backfill or commit writes, and at every plan."""
    owner = root.owner
    if owner is None:
        return NoOwnerRecord(pipeline)
    if owner.pipeline_name != pipeline.name:
        return OwnedByAnotherPipeline(pipeline, owner)
    if owner.stream != pipeline.stream:
        return OfAnotherStream(pipeline, owner.stream)
    if refusal := format_refusal(pipeline, root.format):
        return refusal
    if owner.state_table != pipeline.state_table and not new_table:
        return KeptWithAnotherStateTable(pipeline, owner.state_table)
    return None


def records_refusal(pipeline: PipelineConfig, root: RootSnapshot) -> Refusal | None:
    """A root whose owner record is gone: its newest commit record (a ledger entry, naming pipeline and stream) must be
    this pipeline's and stream's, or the root is another's, which a claim or a recovery must never take over."""
    newest = root.newest
    if newest is None or (newest.pipeline_name, newest.stream) == (pipeline.name, pipeline.stream):
        return None
    return CommitRecordsOfAnother(pipeline, newest.batch_id, newest.pipeline_name, newest.stream)


def unowned_refusal(pipeline: PipelineConfig, root: RootSnapshot) -> Refusal | None:
    """A root with no owner record (one written before owner records, or whose record was deleted): its folders say its
    format, and its commit records whose it is."""
    return format_refusal(pipeline, root.format) or records_refusal(pipeline, root)


def before_plan(pipeline: PipelineConfig, head: Head, root: RootSnapshot) -> Refusal | None:
    """Before a plan writes anything: the output is this pipeline's (or no one's yet), and agrees with the state table's
    head. A renamed state table is accepted only while the output holds no batch: then the new table is a fresh start.
    The table's holdings are the next decision (``table_refusal``)."""
    if root.owner is not None:
        new_table_allowed = root.owner.state_table != pipeline.state_table and not root.holds_commits()
        refusal = owner_refusal(pipeline, root, new_table=new_table_allowed)
    else:
        refusal = unowned_refusal(pipeline, root)
    if refusal is not None:
        return refusal
    if head.version == 0:
        return StateMissingButOutputHolds(pipeline, root.committed or ()) if root.holds_commits() else None
    last = (head.in_flight or head.next_batch_id) - 1  # every batch before the next (or in-flight) one is committed
    if last >= 1 and root.holds_last is False:
        return OutputLacksCommitted(pipeline, last)
    if head.in_flight is None and root.holds_next:
        return StateBehindOutput(pipeline, head.next_batch_id)
    return None


def stream_refusal(pipeline: PipelineConfig, created: datetime, owner: Owner | None) -> Refusal | None:
    """The stream is the one the output's batches came from (``owner`` recorded), not another created since under its name."""
    if owner is None or owner.stream_created is None or owner.stream_created == created.isoformat():
        return None
    return StreamCreatedAgain(pipeline, created.isoformat(), owner.stream_created)


@dataclass(frozen=True)
class Claim:
    """What a plan's claim of its root writes: ``record`` (None: nothing), over an existing one when ``replace``, and
    what to warn of. ``filled``: the record is the owner's, with what its release did not record filled in."""

    record: Owner | None = None
    replace: bool = False
    filled: bool = False
    warnings: tuple[str, ...] = ()


def claim(
    pipeline: PipelineConfig, root: RootSnapshot, now: datetime, stream_created: datetime | None = None, dry_run: bool = False
) -> Refusal | Claim:
    """Record this pipeline as the output root's owner, if no one is yet; before the plan's first write.

    With ``stream_created``, the stream must be the one the owner record names; a ``dry_run`` only checks that, and
    that the root is neither inside another pipeline's root nor holds one (``nesting``). A root claimed already has
    what its record lacks filled in: its format (whose folders agree with the config, or show none), and the stream's
    creation time, so that a later change of either is refused without a listing.
    """
    owner = root.owner
    if stream_created is not None and (refusal := stream_refusal(pipeline, stream_created, owner)):
        return refusal
    nested = nesting(pipeline, root)
    if isinstance(nested, Refusal):
        return nested
    if dry_run:
        return Claim(warnings=nested)
    created = stream_created.isoformat() if stream_created is not None else None
    if owner is not None and owner.state_table == pipeline.state_table:
        if refusal := owner_refusal(pipeline, root):  # a claim never takes over another pipeline's root
            return refusal
        if owner.output_format is None or (owner.stream_created is None and created is not None):
            fmt, stream_created_at = owner.output_format or pipeline.output_format, owner.stream_created or created
            return Claim(replace(owner, output_format=fmt, stream_created=stream_created_at), True, True, nested)
        return Claim(warnings=nested)
    if owner is not None:
        # A new state table only while nothing in the output is committed (else owner_refusal says how to recover).
        refusal = owner_refusal(pipeline, root, new_table=not root.holds_commits())
    else:
        refusal = format_refusal(pipeline, root.format)
    if refusal is not None:
        return refusal
    adopted = owner.adopted if owner is not None else max(root.results or (), default=0)
    record = Owner(pipeline.name, pipeline.stream, pipeline.state_table, now.isoformat(), adopted, pipeline.output_format, created)
    return Claim(record, replace=owner is not None, warnings=nested)


def nesting(pipeline: PipelineConfig, root: RootSnapshot) -> Refusal | tuple[str, ...]:
    """A root no one owns yet is claimed only if no other pipeline's root holds it or is inside it; else what to warn of.

    The config's own check (``config.outputs_overlap``) sees one config file; this one sees the output itself, so it
    holds across config files and deployments. Each pipeline treats everything under its root as its own: a root in
    another's ``data/`` folder once lost its whole output to that table's orphan-file removal. A root claimed before
    this check whose parent is owned is not refused (its batches and table cannot move by moving files): a warning.
    Two claims at the same instant of a root and a root inside it can both pass: each finds no record of the other.
    """
    found = root.nesting
    if found is None:
        return ()
    if found.around and root.owner is not None:
        other = found.around[0]
        return (
            f"pipeline {pipeline.name}: output {root.root} is inside output {other.root} of {who(other)}, claimed before "
            "roots in other roots were refused. That pipeline's replays and backfills may replace what is under its root; "
            "its table maintenance leaves this root alone",
        )
    if found.around:
        return InsideAnotherRoot(pipeline, found.around[-1])  # the outermost: what to stay out of
    if root.owner is not None:
        return ()
    if found.inside is not None:
        return HoldsAnotherRoot(pipeline, found.inside)
    if not found.complete:
        return (
            f"pipeline {pipeline.name}: output {root.root} holds more folders than a claim looks through; another pipeline's "
            "output root deeper in it was not looked for",
        )
    return ()


def table_refusal(
    pipeline: PipelineConfig, table: TableSnapshot | None, ledger: Ledger, verified: dict[int, int] | None = None
) -> Refusal | None:
    """A table output: the table's current snapshot holds exactly the batches the ledger says are committed (with
    ``verified``, the ledger's rows of each, compared with the partitions' where no snapshot records them). None when
    no table was loaded: a directory output, or a ledger with nothing committed."""
    if table is None:
        return None
    mismatch = compare(table.state, ledger, verified)
    return TableDisagrees(pipeline, table.state, ledger, mismatch, table.taken) if mismatch is not None else None


def schema_refusal(pipeline: PipelineConfig, table: TableSnapshot | None) -> Refusal | None:
    """payload.schema asks of the table's columns only what Iceberg does in place: add, widen, rename (each applied by the
    batch's commit), or keep a column it no longer declares. None when no table was loaded, or it has no columns yet."""
    if table is None or not table.columns:
        return None
    refused = payload_changes(pipeline, table.columns).refused
    return SchemaChangeRefused(pipeline, refused) if refused else None


def switched(pipeline: PipelineConfig, rebuilt_to: str | None) -> bool:
    """Whether a rebuild's switch made payload.next_schema the table's: the switch records the next decoding's fingerprint
    as a table property (``rebuilt_to``). Not read from the columns: a narrowing's switched column (long to int) is one
    payload.schema would widen back in place, and a rebuild that only adds one leaves nothing refused either way."""
    payload = rebuilt(pipeline).payload
    return pipeline.payload.next_schema is not None and rebuilt_to == Decoding.of(payload.format, payload.schema).fingerprint


def rebuild_refusal(pipeline: PipelineConfig, table: TableSnapshot | None) -> Refusal | None:
    """A rebuild re-decodes a table output's committed batches with payload.next_schema, then switches the table to it:
    refused before anything is read with no next schema, no table to rebuild, a table switched already, or a next schema
    that a switch cannot make either (a name that clashes in case, or that a rename still maps)."""
    if pipeline.payload.next_schema is None:
        why = (
            "payload.next_schema is not set: a rebuild decodes with it (payload.schema keeps the table's types, next_schema "
            "the new), unless the table was switched to it already, and the pipeline decodes with it now"
        )
        return RebuildRefused(pipeline, why)
    if pipeline.table is None or table is None or not table.columns:
        return RebuildRefused(pipeline, "a rebuild re-decodes the batches of an Iceberg table, and there is no table with columns yet")
    if switched(pipeline, table.rebuilt_to):
        why = "the table was switched to payload.next_schema already: make it payload.schema, and remove payload.next_schema"
        return RebuildRefused(pipeline, why)
    refused = rebuild_changes(pipeline, table.columns).refused
    if refused:
        return RebuildRefused(pipeline, "payload.next_schema: " + "; ".join(f"{f.describe()} ({f.fix})" for f in refused))
    return None


def commit_verdict(
    pipeline: PipelineConfig, kind: Commit, batch_id: int, ledger: Ledger, state: TableState, verified: dict[int, int] | None
) -> Refusal | Holdings | None:
    """What a commit of ``batch_id`` requires of the table, before each try (iceberg_table.commit_snapshot):

    - a regular batch: the table holds batches 1 to the one before it (or it, by another attempt of a cut-short commit);
    - a backfill: the table holds exactly the ledger's committed batches, this one among them;
    - a restore: the table holds no batch the ledger has not committed (it may lack any: it is being restored).

    Where no snapshot records the holdings (``verified`` given), the holdings as the ledger counts them, for the
    commit's snapshot to record: never the table's own count of rows, which would hide rows another writer deleted.
    """
    mismatch = compare(state, ledger, verified)
    if kind == Commit.RESTORE:
        mismatch = Mismatch([], mismatch.extra, False) if mismatch is not None and mismatch.extra else None
    if mismatch is not None:
        then = f"Batch {batch_id} was not committed to the table, and no checkpoint moved."
        return TableDisagrees(pipeline, state, ledger, mismatch, None, then)
    return ledger_holdings(state, ledger, verified) if verified is not None else None


def job_refusal(pipeline_name: str, batch_id: int, stream: str, output_format: str, root: RootSnapshot) -> Refusal | None:
    """The replay job writes nothing into a root whose owner record names another pipeline or stream, or the other layout
    (a table's root holds no batch folders, a directory output's no table files). A root with no owner record is one the
    job was pointed at by hand (the warm-up's, a test's). The Airflow side checks both too, with the whole config."""
    owner = root.owner
    if owner is None:
        return None
    if (owner.pipeline_name, owner.stream) != (pipeline_name, stream):
        return JobRootOfAnother(pipeline_name, batch_id, root.root, owner)
    if root.format is not None and root.format.format != output_format:
        return JobLayoutDiffers(pipeline_name, batch_id, root.root, root.format.format, output_format)
    return None


def decoding_refusal(pipeline: PipelineConfig, batches: Iterable[Batch], redecode: bool) -> Refusal | None:
    """A backfill writes a batch's rows again as they were: refused before anything is read when a batch's recorded
    decoding is not the one the pipeline's payload settings make now, unless it was asked to re-decode. A batch of a
    release that recorded none (``EARLIER``) is compared after its replay instead, value by value (core.decoded)."""
    if redecode:
        return None
    now = Decoding.of(pipeline.payload.format, pipeline.payload.schema)
    differing: dict[Decoding, list[int]] = {}
    for batch in batches:
        recorded = batch.result.decoding if batch.result is not None else EARLIER
        if recorded not in (EARLIER, now):
            differing.setdefault(recorded, []).append(batch.batch_id)
    if not differing:
        return None
    return DecodingChanged(pipeline.name, now, tuple((d, tuple(ids)) for d, ids in differing.items()))
