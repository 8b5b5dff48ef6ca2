"""Rebuild: the table re-materialised under payload.next_schema while regular batches keep landing, then switched to it in
one snapshot. For the changes Iceberg cannot make to a column in place (core/schema_changes refuses them at the plan:
a narrowing, a change of kind such as int to string, a decimal's scale).

1. The user keeps the table's types in payload.schema (the regular batches keep decoding with them) and puts the new
   ones in payload.next_schema, then triggers the backfill DAG with ``rebuild: true`` and a selection, as often as it
   takes (each run replays at most backfill.MAX_BATCHES_PER_RUN batches). ``choose`` refuses before anything is read
   when a committed batch has left the stream's retention, naming every such batch: a rebuild reads each batch again.
2. Each chosen batch replays with the next schema (config.rebuilt) and its check stages the verified attempt in the
   ledger, as a re-decode's (redecode.py): what must match its first run is what the stream holds, shard by shard.
   Readers still see the table as it was; staged attempts are kept by orphan removal however long the rebuild takes.
3. The run's last task (``switch``) looks at every committed batch. While some have no attempt staged with the next
   schema (those committed since the rebuild began among them), it commits nothing and names them: the next run
   rebuilds them. Once all have one, one OVERWRITE snapshot (iceberg_table.switch_table) drops each replaced column,
   adds it again under its new type (a new field id) and replaces every batch's files with its rebuilt ones; the
   quarantine table follows, then each ledger entry and commit record, as a re-decode's commit does.
4. From that snapshot on, every task decodes with payload.next_schema (``as_decoded``: the switch's commit set the
   table property iceberg_table.REBUILT_TO_PROPERTY to its decoding's fingerprint), so the regular batches land under
   the new types with no config change; the user then moves next_schema into payload.schema at leisure.

The switch refuses while a regular batch is in flight (checked again before each try): one verified against the
table's columns before the switch could not commit after it, and a committing batch never replays. One committed
between the rebuild's last replay and the switch is named, and rebuilt by the next run; one that lands between the
switch's reading of the ledger and its table commit makes the table commit refuse (its files are not rebuilt). A
resumed switch finds its snapshot by the run id in its summary and never commits twice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kinesis_replay.adapters import commit_records, file_stats, files, iceberg_table, layout
from kinesis_replay.adapters.iceberg_table import TableCheck
from kinesis_replay.adapters.json_columns import arrow_type
from kinesis_replay.adapters.kinesis_client import stream_retention
from kinesis_replay.adapters.output_root import load_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig, rebuilt
from kinesis_replay.core.ddl import parse_ddl_schema
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import BackfillError
from kinesis_replay.core.holdings import Holdings, TableState, listed
from kinesis_replay.core.ledger import committed_batches
from kinesis_replay.core.refusals import refuse
from kinesis_replay.core.schema_changes import rebuild_changes
from kinesis_replay.core.state import Batch, BatchStatus, StateStore
from kinesis_replay.steps import in_flight, verify
from kinesis_replay.steps.commit import commit_staged, record_redecodes

if TYPE_CHECKING:
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

REBUILD_PROPERTY = "kinesis-replay.rebuild"  # a switch's snapshots name the rebuild run that made them


def as_decoded(pipeline: PipelineConfig) -> PipelineConfig:
    """The pipeline as its tasks decode now: with payload.next_schema as its schema once a rebuild switched the table to
    it, as configured before (and with no next schema, at no cost: nothing is loaded)."""
    if pipeline.payload.next_schema is None or pipeline.table is None:
        return pipeline
    return rebuilt(pipeline) if ownership.switched(pipeline, iceberg_table.rebuilt_to(iceberg_table.load_table(pipeline))) else pipeline


def next_decoding(pipeline: PipelineConfig) -> Decoding:
    """The decoding a rebuild stages its attempts with: payload.next_schema's."""
    payload = rebuilt(pipeline).payload
    return Decoding.of(payload.format, payload.schema)


def stage_copies(
    pipeline: PipelineConfig, kinesis_client: KinesisClient, store: StateStore, run_id: str, now: datetime | None = None
) -> list[int]:
    """A rebuild with ``copy_expired``: each committed batch the stream no longer holds whole is staged from its verified
    files instead of a replay, as the switch needs every committed batch staged. Its data files are copied into an attempt
    of their own with each replaced column cast to its new type (safely: a value that does not fit refuses the copy,
    naming the batch and the column), its quarantined records copied as they are, and the copy verified as a replay's
    attempt is (rows, keys and the row digest, per shard) before it is staged. Returns the batches staged so."""
    from pyarrow.lib import ArrowInvalid

    decoding = next_decoding(pipeline)
    retention = stream_retention(kinesis_client, pipeline.stream, pipeline.read)

    def rebuilt_already(batch: Batch) -> bool:  # switched, or staged by a rebuild's replay or copy
        return batch.verified_result().decoding == decoding or (batch.staged is not None and batch.staged.decoding == decoding)

    batches = [b for b in committed_batches(store, pipeline.name) if not rebuilt_already(b)]
    gone = [b for b, _ in in_flight.beyond_retention(pipeline, batches, retention, now or datetime.now(UTC))]
    if not gone:
        return []
    table = iceberg_table.load_table(pipeline)
    columns = iceberg_table.table_columns(table.metadata if table is not None else None)
    replaced = {f.name for f in rebuild_changes(pipeline, columns).replaced}
    declared = parse_ddl_schema(rebuilt(pipeline).payload.schema or "").children
    cast = {name: arrow_type(t) for name, t in declared if name in replaced}
    attempt = f"copy-{run_id}".replace(":", "-").replace("+", "-")
    target = rebuilt(pipeline)
    for batch in gone:
        result = batch.verified_result()
        copied = replace(result, attempt=attempt, decoding=decoding)
        for source in files.batch_files(pipeline, batch.batch_id, result):
            name = source.rsplit("/", 1)[-1]
            try:
                files.copy_parquet(source, f"{layout.data_path(pipeline.output, batch.batch_id, attempt)}/{name}", cast)
            except ArrowInvalid as exc:
                raise BackfillError(
                    f"pipeline {pipeline.name!r}, batch {batch.batch_id}: its file {source} cannot be copied under "
                    f"payload.next_schema's types ({', '.join(f'{c} {t}' for c, t in cast.items())}): {exc}. Nothing was "
                    "switched; the batch is past the stream's retention, so it can be neither rebuilt nor copied: keep "
                    "payload.schema and land the new type under a new column name instead"
                ) from exc
        for source in files.parquet_files(files.quarantine_folder(pipeline, batch.batch_id, result)):
            name = source.rsplit("/", 1)[-1]
            files.copy_parquet(source, f"{layout.quarantine_data_path(pipeline.output, batch.batch_id, attempt)}/{name}")
        verify.check_files(target, batch.batch_id, copied, fit=False)
        store.set_staged(replace(batch, staged=copied, staged_by=run_id), expected=BatchStatus.COMMITTED)
        log.warning("pipeline %s, batch %d: past the stream's retention, copied from attempt %s's files into attempt %s, "
                    "columns %s cast to payload.next_schema's types", pipeline.name, batch.batch_id, result.attempt, attempt,
                    sorted(cast))  # fmt: skip
    return [b.batch_id for b in gone]


@dataclass(frozen=True)
class Switch:
    """What a rebuild run's last task found: the batches switched (empty while some are not rebuilt yet), and those
    still to rebuild."""

    switched: tuple[Batch, ...]
    waiting: tuple[int, ...]

    def describe(self, pipeline: PipelineConfig) -> str:
        if self.waiting:
            return (
                f"pipeline {pipeline.name}: the table is not switched yet: batches {listed(list(self.waiting))} "
                f"({len(self.waiting)}) have no attempt rebuilt with payload.next_schema. Trigger the backfill DAG with "
                '{"rebuild": true, "batches": {"from_batch": ..., "to_batch": ...}} for them; it switches once every '
                "committed batch is rebuilt. Readers still see the table as it was"
            )
        return f"pipeline {pipeline.name}: switched to payload.next_schema, {len(self.switched)} batches rebuilt"


def switch(pipeline: PipelineConfig, store: StateStore, run_id: str) -> Switch:
    """The rebuild's last step: the table switched to payload.next_schema in one snapshot once every committed batch has
    an attempt staged with it; otherwise nothing is committed and the batches still to rebuild are named."""
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    decoding = next_decoding(pipeline)
    key = {iceberg_table.PIPELINE_PROPERTY: pipeline.name, REBUILD_PROPERTY: run_id}
    table = iceberg_table.load_table(pipeline)
    # Switched already (a resumed task): the batches committed since decode with the next schema, and wait for nothing.
    already = table is not None and iceberg_table.find_snapshot(table, key) is not None
    batches = committed_batches(store, pipeline.name)
    done = [b for b in batches if b.staged is None and b.redecoded_by == run_id]  # a resumed switch's finished ones
    pending = [b for b in batches if b.staged is not None and b.staged.decoding == decoding]
    settled = {b.batch_id for b in (*done, *pending)}
    waiting = tuple(b.batch_id for b in batches if b.batch_id not in settled)
    for batch in done:  # switched by this run, which may have been cut short before the batch's commit record
        commit_records.write_commit_record(pipeline.output, batch)
    if waiting and not done and not already:
        log.info("%s", Switch((), waiting).describe(pipeline))
        return Switch((), waiting)
    if pending:
        columns = iceberg_table.table_columns(table.metadata if table is not None else None)
        replaced = [(f.table_name, f.name) for f in rebuild_changes(pipeline, columns).replaced]

        def idle(state: TableState, check: TableCheck) -> Holdings | None:
            # Before each try: no regular batch in flight. One verified against the table's columns before the switch
            # could not be committed after it (its files decode as before), and a committing batch is never replayed.
            head = store.get_head(pipeline.name)
            if head.in_flight is not None and not already:
                raise BackfillError(
                    f"pipeline {pipeline.name!r}: regular batch {head.in_flight} is in flight; the rebuild's switch waits until "
                    "it is committed (the pipeline's next run finishes it). Nothing was switched: run the commit task again"
                )
            return check(state)

        def switch_table(
            to: PipelineConfig,
            replacements: Mapping[int, Sequence[str]],
            records: Mapping[int, tuple[int, int]],
            properties: Mapping[str, str],
            key: Mapping[str, str],
            check: TableCheck,
            *,
            known: file_stats.Known | None = None,
        ) -> int:
            # The switch reads its files' footers: it replaces columns as it adds them, and its sidecars are left unread.
            checked = functools.partial(idle, check=check)
            return iceberg_table.switch_table(
                to, replacements, records, properties, key, checked, replaced=replaced, rebuilt_to=decoding.fingerprint
            )

        done += commit_staged(rebuilt(pipeline), store, pending, run_id, key, switch_table)
    elif done:
        record_redecodes(pipeline, store, done[0].snapshot_id)  # a resumed switch, cut short before the head's write?
    return Switch(tuple(sorted(done, key=lambda b: b.batch_id)), ())
