"""Guards between a pipeline's output and its state table: who owns the output, and whether the two agree.

The output root carries an owner record (pipeline, stream, state table) and one commit record per batch
whose commit began. Before a plan writes anything it checks both against the state table's head:

- a root owned by another pipeline or stream is never written;
- a root is written in the format it was created in (the owner record says which; for a record of a release that
  recorded none, the root's folders say): a directory output never grows a table, nor a table batch_id= folders;
- a head that is missing, or behind the output, is never taken as a fresh start (that would plan batch 1
  again from the stream's start, and replace committed batches): the run stops and says how to recover;
- a head that is ahead of the output (the output moved or was deleted) stops the run too;
- a new root inside another pipeline's root, or holding one, is never claimed, whatever config file or deployment
  the other comes from (``check_nesting``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from kinesis_replay.adapters import commit_records, files, iceberg_table
from kinesis_replay.adapters.layout import COMMITS_DIR, OWNER_FILE, owner_path
from kinesis_replay.adapters.output_root import layout_format, owner_record_inside, owner_records_around
from kinesis_replay.adapters.owner import Owner, read_owner, write_owner
from kinesis_replay.core.output_root import OtherRoot
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import OutputOwnershipError, StateLostError, TableMismatchError
from kinesis_replay.core.holdings import (
    SHOWN_IDS,
    Commit,
    Holdings,
    Ledger,
    Mismatch,
    TableState,
    VerifiedRecords,
    compare,
    ledger_holdings,
    listed,
)
from kinesis_replay.core.state import Head, StateStore

log = logging.getLogger(__name__)

RECOVER_PARAM = "recover_from_output"
LEDGER_SLICE = 100  # a batch's figures are read a hundred at a time (DynamoDB's BatchGetItem reads at most 100 keys)


def recovery_hint(pipeline: PipelineConfig) -> str:
    return (
        f'To rebuild the state from the output, trigger {pipeline.dag_id} with {{"{RECOVER_PARAM}": true, "dry_run": true}} '
        f'to see what would be written, then with {{"{RECOVER_PARAM}": true}} (docs/operating.md: "Recovering a lost state table").'
    )


def check_owner(pipeline: PipelineConfig, owner: Owner | None, new_table: bool = False) -> None:
    """The output root is this pipeline's: same pipeline, same stream, and (unless ``new_table``) same state table."""
    root = pipeline.output
    if owner is None:
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r}: output {root} has no owner record ({OWNER_FILE}); the pipeline's plan "
            "writes it before anything else, so the output was moved or deleted since. If output is still where the "
            "pipeline's batches are, its next run's plan writes the record again (once the output's commit records are "
            "found to be the pipeline's); else point output back to where they are. Nothing was written."
        )
    if owner.pipeline_name != pipeline.name:
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r} may not write output {root}: it belongs to pipeline {owner.pipeline_name!r} "
            f"(stream {owner.stream}, state table {owner.state_table}, since {owner.created_at}). Both would number their "
            "batches from 1 and replace each other's. Give each pipeline an output root of its own. Nothing was written."
        )
    if owner.stream != pipeline.stream:
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r}: output {root} holds stream {owner.stream}, and the config now names stream "
            f"{pipeline.stream}; shard ids of two streams would share one set of checkpoints. Give the new stream a new "
            "pipeline and output root. Nothing was written."
        )
    check_format(pipeline, owner)
    if owner.state_table != pipeline.state_table and not new_table:
        raise StateLostError(
            f"pipeline {pipeline.name!r}: output {root} is kept with state table {owner.state_table}, and the config now "
            f"names state table {pipeline.state_table}. A new table would start the pipeline over and replace committed "
            f"batches. Point state_table back to {owner.state_table}, or, if the table was moved on purpose, rebuild its "
            f"state in {pipeline.state_table}. {recovery_hint(pipeline)} Nothing was written."
        )


def recorded_format(root: str, owner: Owner | None) -> tuple[str, str] | None:
    """The format the output root was created in, and what says so; None while nothing does (a new or empty root)."""
    if owner is not None and owner.output_format is not None:
        return owner.output_format, f"as its owner record {owner_path(root)} says"
    # An owner record of a release that recorded no format, or none at all (a release before owner records).
    layout = layout_format(root)
    if layout == "directory":
        return layout, "it holds batch_id=<id>/ folders"
    if layout == "iceberg":
        return layout, "it holds the table's metadata/ or data/ folder"
    return None


def check_format(pipeline: PipelineConfig, owner: Owner | None) -> None:
    """The pipeline writes its output in the format the root was created in.

    output_format's default became iceberg: a directory pipeline that does not set it would otherwise start a table at
    its next batch, while its history stays in batch_id=<id>/ folders that the table's readers never see.
    """
    root, configured = pipeline.output, pipeline.output_format
    recorded = recorded_format(root, owner)
    if recorded is None or recorded[0] == configured:
        return
    created, why = recorded
    default = " (output_format's default, when a pipeline does not set it)" if configured == "iceberg" else ""
    consequence = (
        "start an Iceberg table at the next batch, while the batches before it stay in batch_id=<id>/ folders the table's readers never see"
        if configured == "iceberg"
        else "write batch_id=<id>/ folders beside the table, which its readers never see, and commit nothing to the table"
    )
    raise OutputOwnershipError(
        f"pipeline {pipeline.name!r}: output {root} was created as a {created} output ({why}), and the pipeline's "
        f"output_format is now {configured}{default}. Writing it so would {consequence}. Set output_format: {created} "
        f"for pipeline {pipeline.name!r} in the pipelines config to go on as before; a {configured} output needs a new output root "
        "(a new pipeline). Nothing was written."
    )


def require_owner(pipeline: PipelineConfig) -> None:
    """Before a replay, backfill or commit writes: the output's owner record names this pipeline."""
    check_owner(pipeline, read_owner(pipeline.output))


def check_before_plan(pipeline: PipelineConfig, head: Head, store: StateStore | None = None) -> None:
    """Before a plan writes anything: the output is this pipeline's (or no one's yet), and agrees with the state table's head.

    A renamed state table is accepted only while the output holds no batch: then the new table is a fresh start. With
    the ``store``, a table none of whose snapshots records its holdings is compared with the ledger batch by batch.
    """
    owner = read_owner(pipeline.output)
    root, table = pipeline.output, pipeline.state_table
    if owner is not None:
        # Listing the commit records costs a call per thousand batches: only when the table is not the owner's.
        new_table_allowed = owner.state_table != table and not _holds_commits(root, owner)
        check_owner(pipeline, owner, new_table=new_table_allowed)
    else:
        check_format(pipeline, None)  # a root written before owner records: its folders say its format
        check_records_owner(pipeline)  # or one whose record was deleted: its commit records say whose it is
    if head.version == 0:
        if _holds_commits(root, owner):
            committed = commit_records.committed_batch_ids(root)
            if committed:
                held, advice = f"{len(committed)} committed batches (up to batch {committed[-1]})", recovery_hint(pipeline)
            else:  # nothing a recovery could rebuild the state from
                held = "results of batches written before it kept commit records (_manifests)"
                advice = (
                    "A recovery needs the commit records (_commits) that this output has none of: restore the state table "
                    "from a backup, or land the stream in a new output root (a new pipeline)."
                )
            raise StateLostError(
                f"pipeline {pipeline.name!r}: state table {table} holds no state for the pipeline, but its output {root} "
                f"holds {held}. The table was deleted, emptied or replaced; planning now would start the stream over and "
                f"replace those batches. {advice} Nothing was written."
            )
        check_table(pipeline, Ledger(0))
        return
    last = (head.in_flight or head.next_batch_id) - 1  # every batch before the next (or in-flight) one is committed
    if last >= 1 and not (commit_records.has_commit_record(root, last) or files.has_result(root, last)):
        raise StateLostError(
            f"pipeline {pipeline.name!r}: state table {table} says batches up to {last} are committed, but output "
            f"{root} does not hold batch {last}. The output was changed in the config, moved or deleted. Point output back "
            "to where the batches are, or move all of it (with its _commits, _manifests and owner record) to the new "
            "root. Nothing was written."
        )
    if head.in_flight is None and commit_records.has_commit_record(root, head.next_batch_id):
        raise StateLostError(
            f"pipeline {pipeline.name!r}: state table {table} is behind output {root}: the table would plan batch "
            f"{head.next_batch_id} anew, and the output already holds it committed (a table restored from an old "
            f"backup?). Planning would replace it. Delete the pipeline's items from the table, then recover. "
            f"{recovery_hint(pipeline)} Nothing was written."
        )
    check_table(pipeline, ledger_of(head, pipeline, store))  # the output holds the batches, so its embedded catalog is where they are


def ledger_of(head: Head, pipeline: PipelineConfig | None = None, store: StateStore | None = None) -> Ledger:
    """What the ledger says is committed: every batch before the one in flight (or the next), which is dense; with
    ``store``, how many rows it verified in each, read only when a table's snapshots do not record it."""
    verified = verified_records(store, pipeline.name) if store is not None and pipeline is not None else None
    return Ledger((head.in_flight or head.next_batch_id) - 1, head.in_flight, verified)


def ledger_before(pipeline: PipelineConfig, store: StateStore, batch_id: int) -> Ledger:
    """What a regular commit of ``batch_id`` requires the ledger to have committed: every batch before it."""
    return Ledger(batch_id - 1, batch_id, verified_records(store, pipeline.name))


def verified_records(store: StateStore, pipeline_name: str) -> VerifiedRecords:
    """The ledger's rows of each named batch: its figures (a projection without ranges or manifests, a hundred batches
    a read), or, for a batch written before figures were stored, its verified manifest. A batch with neither is left out.

    Asked only where no snapshot records what the table holds (a table of an older release, or one whose recording
    snapshots were expired by hand): once, as the next commit records the holdings again. On a ledger of a year at a
    5-minute schedule that is about 1,000 reads of the figures, as the page's charts read them.
    """

    def read(batch_ids: Sequence[int]) -> dict[int, int]:
        ids = sorted(set(batch_ids))
        found: dict[int, int] = {}
        for low in range(0, len(ids), LEDGER_SLICE):
            chunk = ids[low : low + LEDGER_SLICE]
            summaries = store.get_summaries(pipeline_name, chunk)
            older = []
            for batch_id in chunk:
                records = summaries[batch_id].figures.get("records") if batch_id in summaries else None
                if isinstance(records, int):
                    found[batch_id] = records
                elif batch_id in summaries:
                    older.append(batch_id)
            for batch in store.get_batches(pipeline_name, older).values() if older else ():
                if batch.result is not None:
                    found[batch.batch_id] = batch.result.records
        log.info("pipeline %s: read the ledger's rows of %d batches, to compare with the table's partitions", pipeline_name, len(ids))
        return found

    return read


def ledger_rows(state: TableState, ledger: Ledger) -> dict[int, int] | None:
    """The ledger's rows of batches 1 to ``ledger.last``, when the table's state was read from its partitions."""
    if not state.derived or state.partitions is None or ledger.verified is None or ledger.last < 1:
        return None
    return dict(ledger.verified(range(1, ledger.last + 1)))


def check_records_owner(pipeline: PipelineConfig) -> None:
    """A root whose owner record is gone: its newest commit record (a ledger entry, naming pipeline and stream) must be
    this pipeline's and stream's, or the root is another's, which a claim or a recovery must never take over."""
    root = pipeline.output
    ids = commit_records.committed_batch_ids(root)
    if not ids:
        return
    newest = commit_records.read_commit_record(root, ids[-1])
    if newest.pipeline_name == pipeline.name and newest.stream == pipeline.stream:
        return
    gone = f"output {root} has no owner record ({OWNER_FILE}: deleted?), and its commit records ({COMMITS_DIR}, up to batch {ids[-1]})"
    if newest.pipeline_name != pipeline.name:
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r} may not write output {root}: {gone} are of pipeline {newest.pipeline_name!r} (stream "
            f"{newest.stream}), whose output it is. Both would number their batches from 1 and replace each other's. Give "
            f"pipeline {pipeline.name!r} an output root of its own; pipeline {newest.pipeline_name!r}'s next run writes its owner "
            "record again. Nothing was written."
        )
    raise OutputOwnershipError(
        f"pipeline {pipeline.name!r}: {gone} hold stream {newest.stream}, and the config now names stream {pipeline.stream}; "
        "shard ids of two streams would share one set of checkpoints. Give the new stream a new pipeline and output root. "
        "Nothing was written."
    )


def check_table(pipeline: PipelineConfig, ledger: Ledger) -> None:
    """A table output: the table's current snapshot holds exactly the batches the ledger says are committed.

    Read from the current snapshot's summary (kinesis_replay.core.holdings): no data or manifest file is read. A table that
    lacks batches, holds others, or whose rows another writer changed, is refused before anything moves. With nothing
    committed, a catalog of the config's (not the embedded one, which the first commit creates under the output root)
    is loaded all the same: one that can't load fails the plan before the root is claimed or the stream read, rather
    than the verify after the whole batch was (iceberg_table.load_catalog says whether it is retried).
    """
    if pipeline.table is None:
        return
    if ledger.last < 1:
        if not pipeline.table.embedded:
            iceberg_table.load_catalog(pipeline)
        return
    state = iceberg_table.table_state(iceberg_table.existing_table(pipeline))
    mismatch = compare(state, ledger, ledger_rows(state, ledger))
    if mismatch is not None:
        raise TableMismatchError(f"{describe_mismatch(pipeline, state, ledger, mismatch)} Nothing was written.")


def table_check(pipeline: PipelineConfig, kind: Commit, batch_id: int, ledger: Ledger) -> iceberg_table.TableCheck:
    """What a commit of ``batch_id`` requires of the table, checked before each try (iceberg_table.commit_snapshot).

    - a regular batch: the table holds batches 1 to the one before it (or it, by another attempt of a cut-short commit);
    - a backfill: the table holds exactly the ledger's committed batches, this one among them;
    - a restore: the table holds no batch the ledger has not committed (it may lack any: it is being restored).

    Where no snapshot records the holdings, the check returns them as the ledger counts them (``ledger_holdings``), for
    the commit's snapshot to record: never the table's own count of rows, which would hide rows another writer deleted.
    """
    read: list[dict[int, int] | None] = []  # the ledger's rows, read once whatever the number of tries

    def check(state: TableState) -> Holdings | None:
        if state.derived and not read:
            read.append(ledger_rows(state, ledger))
        verified = read[0] if state.derived and read else None
        mismatch = compare(state, ledger, verified)
        if kind == Commit.RESTORE:
            mismatch = Mismatch([], mismatch.extra, False) if mismatch is not None and mismatch.extra else None
        if mismatch is not None:
            raise TableMismatchError(
                f"{describe_mismatch(pipeline, state, ledger, mismatch)} Batch {batch_id} was not committed to the table, and "
                "no checkpoint moved."
            )
        return ledger_holdings(state, ledger, verified) if verified is not None else None

    return check


def describe_mismatch(pipeline: PipelineConfig, state: TableState, ledger: Ledger, mismatch: Mismatch) -> str:
    """How the table and the ledger disagree, what may have caused it, and the one way back."""
    config = iceberg_table.require_table(pipeline)
    held = f"holds {state.holdings.describe()} in its current snapshot" if state.exists else "does not exist"
    text = (
        f"pipeline {pipeline.name!r}: {config.describe()} (output {pipeline.output}) {held}, and the ledger (state table "
        f"{pipeline.state_table}) says batches 1 to {ledger.last} are committed"
    )
    causes = []
    if mismatch.missing:
        n = len(mismatch.missing)
        text += f"; it lacks batch{'es' if n > 1 else ''} {listed(mismatch.missing)}" + (f" ({n} in all)" if n > SHOWN_IDS else "")
        causes.append(
            "was it dropped or renamed, table.* changed in the config, or the embedded catalog (_catalog/) deleted?"
            if not state.exists
            else "was it rolled back to an older snapshot, its metadata restored from an older file, or created anew?"
        )
    if mismatch.extra:
        text += f"; it holds batch(es) {listed(mismatch.extra)}, which the ledger has not committed"
        causes.append("was the state table restored from an older backup, or does table.* name another pipeline's table?")
    if mismatch.differing:
        shown = "; ".join(
            f"batch {b} holds {held} rows in its partition"
            + (f", and the ledger verified {counted}" if counted >= 0 else ", and the ledger has no entry of it")
            for b, held, counted in mismatch.differing[:SHOWN_IDS]
        )
        more = f" ({len(mismatch.differing)} batches in all)" if len(mismatch.differing) > SHOWN_IDS else ""
        text += f"; its partition statistics disagree with the ledger: {shown}{more}"
        causes.append("were rows deleted or rewritten outside kinesis-replay?")
    elif mismatch.records and not mismatch.missing:
        foreign = f" (snapshots made since by another writer: {', '.join(state.foreign[:5])})" if state.foreign else ""
        if state.deletes:
            text += f"; it holds {state.deletes} deleted rows in delete files, which kinesis-replay never writes{foreign}"
        else:
            text += f"; its files hold {state.total_records} rows, and its batches held {state.holdings.records} when committed{foreign}"
        causes.append("were rows deleted or rewritten outside kinesis-replay?")
    if state.derived:
        causes.append(
            "no snapshot of the table's current ancestry records what it holds (a table of an older release, or snapshot "
            "expiry by another tool kept only another writer's snapshots), so its partition statistics were compared "
            "with the ledger's record counts, batch by batch."
        )
    fix = recovery_hint(pipeline) if mismatch.extra else iceberg_table.restore_hint(pipeline)
    taken = iceberg_table.location_tables(pipeline) if not state.exists else None
    if taken is not None:  # one location, one table: what is there decides the way back
        text += f"; {taken.describe(pipeline)}"
        if taken.in_catalog:
            fix = (
                "a restore would not create a second table there (it is refused); fix table.name, and the next run goes on "
                f"with {taken.in_catalog[0]}."
            )
        elif not taken.own(pipeline):
            fix = (
                "a restore would not create a second table there (it is refused): point output of pipeline "
                f"{pipeline.name!r} to where its own table is, or to a new root for a new table."
            )
        else:
            fix = f"the restore registers that table again from {taken.newest}, then puts back what it lacks: {fix}"
    fix = fix[0].upper() + fix[1:]
    return (
        f"{text}. {' '.join(c[0].upper() + c[1:] for c in causes)} Nothing is planned, committed or removed while the two "
        f"disagree: a commit would build on a table without those batches, and maintenance would delete their files. {fix}"
    )


def check_stream_created(pipeline: PipelineConfig, created: datetime, owner: Owner | None) -> None:
    """The stream is the one the output's batches came from (``owner`` recorded), not another created since under its name."""
    if owner is None or owner.stream_created is None or owner.stream_created == created.isoformat():
        return
    raise OutputOwnershipError(
        f"pipeline {pipeline.name!r}: stream {pipeline.stream} was created at {created.isoformat()}, but output "
        f"{pipeline.output} holds batches of a stream of that name created at {owner.stream_created}: the stream was "
        "deleted and created again (or the connection now reaches another account or region). A new stream starts its "
        "shard ids over, so the pipeline's checkpoints and finished shards would skip or misread its records. Land it "
        "as a new pipeline, with an output root and state of its own. Nothing was written."
    )


def _who(other: OtherRoot) -> str:
    if other.owner is None:
        return f"a pipeline whose owner record {other.record} cannot be read here ({other.unreadable})"
    owner = other.owner
    return f"pipeline {owner.pipeline_name!r} (stream {owner.stream}, state table {owner.state_table}; owner record {other.record})"


def check_nesting(pipeline: PipelineConfig, owner: Owner | None) -> None:
    """A root no one owns yet is claimed only if no other pipeline's root holds it or is inside it.

    The config's own check (``config.outputs_overlap``) sees one config file; this one sees the output itself, so it
    holds across config files and deployments. Each pipeline treats everything under its root as its own: a root in
    another's ``data/`` folder once lost its whole output to that table's orphan-file removal.

    What is looked at, and what it costs: every parent folder of the root, up to the file system's or the bucket's
    top, for an owner record (on S3 one ListObjectsV2 per parent: ``s3://bucket/raw/orders`` costs 2 requests; a stat
    each on local disk), at every claim; and, while the root has no owner record of its own (the claim that writes
    one), the folders under it, breadth first and bounded (``owner_record_inside``: an empty new root costs one
    request on S3). A root claimed already was looked under when it was claimed, and listing a grown root at every plan
    is what this avoids; whichever of two nested roots is claimed second is refused, as it finds the first's record.
    A root claimed before this check (``owner`` given) whose parent is owned is not refused: its batches and table
    cannot move by moving files. That is logged as a warning, as are the bounds of a search that stopped short.
    Two claims at the same instant of a root and a root inside it can both pass: each finds no record of the other.
    """
    root = pipeline.output
    around = owner_records_around(root)
    if around and owner is not None:
        log.warning(
            "pipeline %s: output %s is inside output %s of %s, claimed before roots in other roots were refused. That "
            "pipeline's replays and backfills may replace what is under its root; its table maintenance leaves this root "
            "alone", pipeline.name, root, around[0].root, _who(around[0]),
        )  # fmt: skip
        return
    if around:
        other = around[-1]  # the outermost: what to stay out of
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r} may not claim output {root}: it is inside output {other.root} of {_who(other)}. "
            "A pipeline treats everything under its root as its own: that pipeline's table maintenance, replays and "
            f"backfills could remove or replace this pipeline's output. Give pipeline {pipeline.name!r} an output root "
            f"outside {other.root}, in its pipelines config. Nothing was written."
        )
    if owner is not None:
        return
    inside, complete = owner_record_inside(root)
    if inside is not None:
        raise OutputOwnershipError(
            f"pipeline {pipeline.name!r} may not claim output {root}: it holds output {inside.root} of {_who(inside)}. "
            f"A pipeline treats everything under its root as its own: pipeline {pipeline.name!r}'s table maintenance, "
            f"replays and backfills could remove or replace that pipeline's output. Give pipeline {pipeline.name!r} an "
            f"output root outside {inside.root} that does not hold it either (one beside it), in its pipelines config. "
            "Nothing was written."
        )
    if not complete:
        log.warning(
            "pipeline %s: output %s holds more folders than a claim looks through; another pipeline's output root deeper "
            "in it was not looked for", pipeline.name, root,
        )  # fmt: skip


def claim_output(pipeline: PipelineConfig, now: datetime, stream_created: datetime | None = None, dry_run: bool = False) -> None:
    """Record this pipeline as the output root's owner, if no one is yet; before the plan's first write.

    With ``stream_created``, the stream must be the one the owner record names; a ``dry_run`` only checks that, and
    that the root is neither inside another pipeline's root nor holds one (``check_nesting``).
    """
    root = pipeline.output
    owner = read_owner(root)
    if stream_created is not None:
        check_stream_created(pipeline, stream_created, owner)
    check_nesting(pipeline, owner)
    if dry_run:
        return
    created = stream_created.isoformat() if stream_created is not None else None
    if owner is not None:
        if owner.state_table == pipeline.state_table:
            check_owner(pipeline, owner)  # a claim never takes over another pipeline's root
            if owner.output_format is None or (owner.stream_created is None and created is not None):
                # A record of a release that recorded no format (whose folders agree with the config, or show none), or
                # no stream creation time: recorded now, so that a later change of output_format, or of the stream
                # behind the name, is refused without a listing.
                fmt, stream_created_at = owner.output_format or pipeline.output_format, owner.stream_created or created
                filled = replace(owner, output_format=fmt, stream_created=stream_created_at)
                write_owner(root, filled, replace=True)
                log.info("pipeline %s: output %s recorded as a %s output of stream %s created at %s", pipeline.name, root,
                         filled.output_format, pipeline.stream, filled.stream_created)  # fmt: skip
            return
        # A new state table only while nothing in the output is committed (else check_owner says how to recover).
        check_owner(pipeline, owner, new_table=not _holds_commits(root, owner))
    else:
        check_format(pipeline, None)
    # No owner yet, or (check_before_plan allowed it: nothing in the output is committed) a new state table.
    adopted = owner.adopted if owner is not None else max(commit_records.result_batch_ids(root), default=0)
    claim = Owner(pipeline.name, pipeline.stream, pipeline.state_table, now.isoformat(), adopted, pipeline.output_format, created)
    claimed = write_owner(root, claim, replace=owner is not None)
    check_owner(pipeline, claimed)  # another pipeline may have claimed it first
    log.info("pipeline %s: claimed output %s (owner record %s)", pipeline.name, root, owner_path(root))


def _holds_commits(output: str, owner: Owner | None) -> bool:
    if owner is not None:
        return owner.adopted > 0 or bool(commit_records.committed_batch_ids(output))
    return bool(commit_records.result_batch_ids(output))
