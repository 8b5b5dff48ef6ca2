"""Why a step refuses to touch an output root, as types: each refusal holds what it is about and writes its own message.

The decisions (kinesis_replay.core.ownership) return one of these, or None; the step that acts raises it
(``refuse``) as the error class it names, whose ``retryable`` tells Airflow whether to try again. The prose lives
here, next to the facts it names, and not in the control flow that decides: a unit test checks each text with no
file, no endpoint and no Spark. Every message names the pipeline and the root, table or batch at fault, says what
may have caused it, the one way back, and that nothing was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import (
    ConfigError,
    DataLossError,
    DecodedValuesChangedError,
    KinesisReplayError,
    OutputOwnershipError,
    StateLostError,
    TableMismatchError,
)
from kinesis_replay.core.formats import COMMITS_DIR, OWNER_FILE
from kinesis_replay.core.holdings import SHOWN_IDS, Ledger, Mismatch, TableState, listed
from kinesis_replay.core.output_root import LocationHolding, OtherRoot, Owner
from kinesis_replay.core.schema_changes import FieldChange

RECOVER_PARAM = "recover_from_output"  # the regular DAG's parameter that rebuilds a lost state table from the output
RESTORE_PARAM = "restore_table"  # the backfill DAG's parameter that restores the table from the output and the stream
NOTHING_WRITTEN = " Nothing was written."


def recovery_hint(pipeline: PipelineConfig) -> str:
    """The one documented way back for a lost state table: the regular DAG's recovery from the output."""
    return (
        f'To rebuild the state from the output, trigger {pipeline.dag_id} with {{"{RECOVER_PARAM}": true, "dry_run": true}} '
        f'to see what would be written, then with {{"{RECOVER_PARAM}": true}} (docs/operating.md: "Recovering a lost state table").'
    )


def restore_hint(pipeline: PipelineConfig) -> str:
    """The one documented way back for a table that lacks committed batches: the backfill DAG's restore."""
    return (
        f"to put back exactly the committed batches the table lacks, trigger {pipeline.backfill_dag_id} with "
        f'{{"{RESTORE_PARAM}": true, "dry_run": true}} to see what it would restore, then with {{"{RESTORE_PARAM}": true}} '
        '(docs/operating.md: "Restoring the table").'
    )


class Refusal:
    """A decision not to go on: ``error`` is the class it is raised as, ``message()`` its text."""

    error: ClassVar[type[KinesisReplayError]]

    def message(self) -> str:
        raise NotImplementedError

    def as_error(self) -> KinesisReplayError:
        return self.error(self.message())


def refuse(refusal: Refusal | None) -> None:
    """Raise the refusal, if there is one, as its error."""
    if refusal is not None:
        raise refusal.as_error()


# -- who owns the root ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoOwnerRecord(Refusal):
    pipeline: PipelineConfig
    error = OutputOwnershipError

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline.name!r}: output {self.pipeline.output} has no owner record ({OWNER_FILE}); the pipeline's "
            "plan writes it before anything else, so the output was moved or deleted since. If output is still where the "
            "pipeline's batches are, its next run's plan writes the record again (once the output's commit records are "
            "found to be the pipeline's); else point output back to where they are. Nothing was written."
        )


@dataclass(frozen=True)
class OwnedByAnotherPipeline(Refusal):
    pipeline: PipelineConfig
    owner: Owner
    error = OutputOwnershipError

    def message(self) -> str:
        owner = self.owner
        return (
            f"pipeline {self.pipeline.name!r} may not write output {self.pipeline.output}: it belongs to pipeline "
            f"{owner.pipeline_name!r} (stream {owner.stream}, state table {owner.state_table}, since {owner.created_at}). Both "
            "would number their batches from 1 and replace each other's. Give each pipeline an output root of its own." + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class OfAnotherStream(Refusal):
    pipeline: PipelineConfig
    stream: str  # the stream the root holds
    error = OutputOwnershipError

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline.name!r}: output {self.pipeline.output} holds stream {self.stream}, and the config now "
            f"names stream {self.pipeline.stream}; shard ids of two streams would share one set of checkpoints. Give the new "
            "stream a new pipeline and output root." + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class KeptWithAnotherStateTable(Refusal):
    pipeline: PipelineConfig
    state_table: str  # the owner record's
    error = StateLostError

    def message(self) -> str:
        pipeline, kept = self.pipeline, self.state_table
        return (
            f"pipeline {pipeline.name!r}: output {pipeline.output} is kept with state table {kept}, and the config now "
            f"names state table {pipeline.state_table}. A new table would start the pipeline over and replace committed "
            f"batches. Point state_table back to {kept}, or, if the table was moved on purpose, rebuild its "
            f"state in {pipeline.state_table}. {recovery_hint(pipeline)}" + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class FormatChanged(Refusal):
    """output_format's default became iceberg: a directory pipeline that does not set it would otherwise start a table at
    its next batch, while its history stays in batch_id=<id>/ folders that the table's readers never see."""

    pipeline: PipelineConfig
    created: str  # the format the root was created in
    why: str  # what says so
    error = OutputOwnershipError

    def message(self) -> str:
        pipeline, configured, created = self.pipeline, self.pipeline.output_format, self.created
        default = " (output_format's default, when a pipeline does not set it)" if configured == "iceberg" else ""
        consequence = (
            "start an Iceberg table at the next batch, while the batches before it stay in batch_id=<id>/ folders the table's "
            "readers never see"
            if configured == "iceberg"
            else "write batch_id=<id>/ folders beside the table, which its readers never see, and commit nothing to the table"
        )
        return (
            f"pipeline {pipeline.name!r}: output {pipeline.output} was created as a {created} output ({self.why}), and the "
            f"pipeline's output_format is now {configured}{default}. Writing it so would {consequence}. Set output_format: "
            f"{created} for pipeline {pipeline.name!r} in the pipelines config to go on as before; a {configured} output needs "
            "a new output root (a new pipeline)." + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class CommitRecordsOfAnother(Refusal):
    """A root whose owner record is gone, and whose newest commit record names another pipeline or stream."""

    pipeline: PipelineConfig
    newest_id: int
    pipeline_name: str  # what the newest commit record names
    stream: str
    error = OutputOwnershipError

    def message(self) -> str:
        pipeline, root = self.pipeline, self.pipeline.output
        gone = (
            f"output {root} has no owner record ({OWNER_FILE}: deleted?), and its commit records ({COMMITS_DIR}, up to batch "
            f"{self.newest_id})"
        )
        if self.pipeline_name != pipeline.name:
            return (
                f"pipeline {pipeline.name!r} may not write output {root}: {gone} are of pipeline {self.pipeline_name!r} (stream "
                f"{self.stream}), whose output it is. Both would number their batches from 1 and replace each other's. Give "
                f"pipeline {pipeline.name!r} an output root of its own; pipeline {self.pipeline_name!r}'s next run writes its "
                "owner record again." + NOTHING_WRITTEN
            )
        return (
            f"pipeline {pipeline.name!r}: {gone} hold stream {self.stream}, and the config now names stream {pipeline.stream}; "
            "shard ids of two streams would share one set of checkpoints. Give the new stream a new pipeline and output root."
            + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class StreamCreatedAgain(Refusal):
    pipeline: PipelineConfig
    created: str  # ISO 8601: the stream's now
    recorded: str  # the owner record's
    error = OutputOwnershipError

    def message(self) -> str:
        pipeline = self.pipeline
        return (
            f"pipeline {pipeline.name!r}: stream {pipeline.stream} was created at {self.created}, but output "
            f"{pipeline.output} holds batches of a stream of that name created at {self.recorded}: the stream was "
            "deleted and created again (or the connection now reaches another account or region). A new stream starts its "
            "shard ids over, so the pipeline's checkpoints and finished shards would skip or misread its records. Land it "
            "as a new pipeline, with an output root and state of its own." + NOTHING_WRITTEN
        )


def who(other: OtherRoot) -> str:
    """The pipeline another root's owner record names, or why it cannot be read."""
    if other.owner is None:
        return f"a pipeline whose owner record {other.record} cannot be read here ({other.unreadable})"
    owner = other.owner
    return f"pipeline {owner.pipeline_name!r} (stream {owner.stream}, state table {owner.state_table}; owner record {other.record})"


@dataclass(frozen=True)
class InsideAnotherRoot(Refusal):
    pipeline: PipelineConfig
    other: OtherRoot  # the outermost root that holds this one
    error = OutputOwnershipError

    def message(self) -> str:
        name, other = self.pipeline.name, self.other
        return (
            f"pipeline {name!r} may not claim output {self.pipeline.output}: it is inside output {other.root} of {who(other)}. "
            "A pipeline treats everything under its root as its own: that pipeline's table maintenance, replays and "
            f"backfills could remove or replace this pipeline's output. Give pipeline {name!r} an output root "
            f"outside {other.root}, in its pipelines config." + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class HoldsAnotherRoot(Refusal):
    pipeline: PipelineConfig
    inside: OtherRoot  # the nearest root under this one
    error = OutputOwnershipError

    def message(self) -> str:
        name, inside = self.pipeline.name, self.inside
        return (
            f"pipeline {name!r} may not claim output {self.pipeline.output}: it holds output {inside.root} of {who(inside)}. "
            f"A pipeline treats everything under its root as its own: pipeline {name!r}'s table maintenance, "
            f"replays and backfills could remove or replace that pipeline's output. Give pipeline {name!r} an "
            f"output root outside {inside.root} that does not hold it either (one beside it), in its pipelines config." + NOTHING_WRITTEN
        )


# -- the state table against the output ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StateMissingButOutputHolds(Refusal):
    """No head item, and the output holds committed batches (``committed``: their ids; empty: only 0.x _manifests)."""

    pipeline: PipelineConfig
    committed: Sequence[int]
    error = StateLostError

    def message(self) -> str:
        pipeline = self.pipeline
        if self.committed:
            held = f"{len(self.committed)} committed batches (up to batch {self.committed[-1]})"
            advice = recovery_hint(pipeline)
        else:  # nothing a recovery could rebuild the state from
            held = "results of batches written before it kept commit records (_manifests)"
            advice = (
                "A recovery needs the commit records (_commits) that this output has none of: restore the state table "
                "from a backup, or land the stream in a new output root (a new pipeline)."
            )
        return (
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} holds no state for the pipeline, but its output "
            f"{pipeline.output} holds {held}. The table was deleted, emptied or replaced; planning now would start the stream "
            f"over and replace those batches. {advice}" + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class OutputLacksCommitted(Refusal):
    pipeline: PipelineConfig
    last: int  # the newest batch the state table says is committed
    error = StateLostError

    def message(self) -> str:
        pipeline = self.pipeline
        return (
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} says batches up to {self.last} are committed, but "
            f"output {pipeline.output} does not hold batch {self.last}. The output was changed in the config, moved or "
            "deleted. Point output back to where the batches are, or move all of it (with its _commits, _manifests and owner "
            "record) to the new root." + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class StateBehindOutput(Refusal):
    pipeline: PipelineConfig
    next_batch_id: int
    error = StateLostError

    def message(self) -> str:
        pipeline, batch_id = self.pipeline, self.next_batch_id
        return (
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} is behind output {pipeline.output}: the table would "
            f"plan batch {batch_id} anew, and the output already holds it committed (a table restored from an old "
            f"backup?). Planning would replace it. Delete the pipeline's items from the table (those under "
            f"pipeline#{pipeline.name} and pipeline#{pipeline.name}#shards#<k>: docs/state-table.md), then recover. "
            f"{recovery_hint(pipeline)}" + NOTHING_WRITTEN
        )


# -- the table against the ledger ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableDisagrees(Refusal):
    """The table's current snapshot does not hold what the ledger says; ``then`` says what the refusing step left undone."""

    pipeline: PipelineConfig
    state: TableState
    ledger: Ledger
    mismatch: Mismatch
    taken: LocationHolding | None = None  # what the table's location holds, read when the table does not exist
    then: str = NOTHING_WRITTEN.strip()
    error = TableMismatchError

    def message(self) -> str:
        return f"{describe_mismatch(self.pipeline, self.state, self.ledger, self.mismatch, self.taken)} {self.then}"


def describe_mismatch(
    pipeline: PipelineConfig, state: TableState, ledger: Ledger, mismatch: Mismatch, taken: LocationHolding | None = None
) -> str:
    """How the table and the ledger disagree, what may have caused it, and the one way back."""
    config = pipeline.table
    assert config is not None, "only a table output's holdings are compared"
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
    behind, behind_causes = _redecodes_behind(mismatch)
    text, causes = text + behind, causes + behind_causes
    if state.derived:
        causes.append(
            "no snapshot of the table's current ancestry records what it holds (a table of an older release, or snapshot "
            "expiry by another tool kept only another writer's snapshots), so its partition statistics were compared "
            "with the ledger's record counts, batch by batch."
        )
    fix = recovery_hint(pipeline) if mismatch.extra else restore_hint(pipeline)
    if taken is not None and not state.exists:  # one location, one table: what is there decides the way back
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


def _redecodes_behind(mismatch: Mismatch) -> tuple[str, list[str]]:
    """What describe_mismatch says of a table behind the ledger's count of re-decodes made visible: text and causes."""
    if mismatch.redecodes is None:
        return "", []
    held, counted = mismatch.redecodes
    text = (
        f"; its current snapshot records {held} re-decodes made visible, and the ledger {counted}: it holds an older "
        "decoding of batches the ledger says were re-decoded"
    )
    return text, ["was it rolled back past a re-decode (or a rebuild's switch), or its metadata restored from an older file?"]


# -- the replay job's own check ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodingChanged(Refusal):
    """A backfill of batches decoded otherwise than the pipeline's payload settings decode now, without ``redecode``:
    refused before anything is read, naming both decodings (and each one's batches)."""

    error: ClassVar[type[KinesisReplayError]] = DecodedValuesChangedError
    pipeline_name: str
    now: Decoding
    recorded: tuple[tuple[Decoding, tuple[int, ...]], ...]  # each recorded decoding that differs, and its batches

    def message(self) -> str:
        was = "; ".join(f"batches {listed(ids)} were decoded with {d.describe()}" for d, ids in self.recorded)
        return (
            f"pipeline {self.pipeline_name!r}: {was}; the pipeline's payload settings now decode with {self.now.describe()}. "
            "A backfill writes a batch's rows again as they were, so it is refused before anything is read. To decode the "
            'batches anew, trigger the backfill again with "redecode": true in its conf (docs/operating.md: "Fixing the '
            'data"); to keep their values, put back the payload settings that decoded them.' + NOTHING_WRITTEN
        )


@dataclass(frozen=True)
class JobRootOfAnother(Refusal):
    """The replay job was pointed at a root whose owner record names another pipeline or stream."""

    pipeline_name: str
    batch_id: int
    output: str
    owner: Owner
    error = OutputOwnershipError

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline_name!r}, batch {self.batch_id}: output {self.output} belongs to pipeline "
            f"{self.owner.pipeline_name!r} (stream {self.owner.stream}); nothing was written"
        )


@dataclass(frozen=True)
class JobLayoutDiffers(Refusal):
    pipeline_name: str
    batch_id: int
    output: str
    recorded: str
    asked: str
    error = OutputOwnershipError

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline_name!r}, batch {self.batch_id}: output {self.output} holds the {self.recorded} layout and "
            f"the job was asked for output_format {self.asked}; nothing was written"
        )


# -- the table's schema against payload.schema ---------------------------------------------------------------------

SCHEMA_RUNBOOK = 'docs/operating.md: "We changed a type"'


def schema_way_out(refused: Sequence[FieldChange]) -> str:
    """The ways out for each refused column; for a type, the rebuild too."""
    fixes = "; ".join(f'for "{f.name}", {f.fix}' for f in refused if f.fix)
    text = f"Either {fixes}. " if fixes else ""
    if any(f.before is not None and f.after is not None for f in refused):
        text += (
            "Or keep the new types and rebuild the table under them, while regular batches keep landing: put the table's "
            "schema back in payload.schema, the new one in payload.next_schema, and trigger the backfill DAG with "
            f"rebuild: true until it switches (see {SCHEMA_RUNBOOK}). "
        )
    return text + 'What the table takes as it is: docs/table.md: "Schema changes".'


@dataclass(frozen=True)
class SchemaChangeRefused(Refusal):
    """payload.schema changes the table's columns in a way Iceberg cannot (core/schema_changes): refused at the plan and at
    a backfill's choice, before anything is read."""

    pipeline: PipelineConfig
    refused: tuple[FieldChange, ...]
    error = ConfigError

    def message(self) -> str:
        pipeline = self.pipeline
        where = pipeline.table.describe() if pipeline.table is not None else f"the table of output {pipeline.output}"
        changes = "; ".join(f.describe() for f in self.refused)
        return (
            f"pipeline {pipeline.name!r}: payload.schema changes column(s) of {where} in a way Iceberg does not: {changes}. "
            f"{schema_way_out(self.refused)} Nothing was read or written."
        )


# -- a rebuild under payload.next_schema ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RebuildRefused(Refusal):
    """A rebuild that cannot start (or switch): refused before anything is read, with the reason and the way out."""

    pipeline: PipelineConfig
    why: str
    error = ConfigError

    def message(self) -> str:
        pipeline = self.pipeline
        where = pipeline.table.describe() if pipeline.table is not None else f"the output {pipeline.output}"
        return f"pipeline {pipeline.name!r}: no rebuild of {where}: {self.why}. Nothing was read or written."


@dataclass(frozen=True)
class BeyondRetention(Refusal):
    """Committed batches a rebuild cannot read again: their first records have left the stream's retention."""

    pipeline: PipelineConfig
    batch_ids: tuple[int, ...]
    first: str  # the first one's range and age, as the retention check says it
    error = DataLossError

    def message(self) -> str:
        return (
            f"pipeline {self.pipeline.name!r}: a rebuild re-decodes every committed batch from the stream, and batches "
            f"{listed(list(self.batch_ids))} ({len(self.batch_ids)} in all) cannot be read again: their records have left "
            f"the stream's retention (the first: {self.first}). Nothing was read or written. To copy them from their files "
            'instead, each replaced column cast to its new type, trigger the rebuild with "copy_expired": true; or keep '
            f"payload.schema and land the new type under a new column name (an added column), see {SCHEMA_RUNBOOK}"
        )
