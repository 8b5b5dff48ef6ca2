"""Keep a pipeline's table small: expire old snapshots and remove orphan files, keeping what a commit still needs."""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kinesis_replay.adapters import commit_records, iceberg_table, quarantine_table, table_maintenance
from kinesis_replay.adapters.output_root import load_table
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.ledger import ledger_of, ledger_rows
from kinesis_replay.core.refusals import recovery_hint, refuse
from kinesis_replay.core.state import StateStore

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def tidy_table(
    pipeline: PipelineConfig, store: StateStore, orphan_age: timedelta, dry_run: bool = False, now: datetime | None = None
) -> table_maintenance.Report | None:
    """Expire the table's old snapshots and remove its orphan files, keeping every file a commit still needs; None with no table.
    The quarantine table, once there is one, is maintained the same way, by the same rules (its report is logged; a
    refusal of its orphan removal is the returned report's too).

    The ledger's batch in flight keeps its files, and so does every batch whose commit record names no snapshot yet.
    When the pipeline has no head item (its state table was lost, emptied or replaced, or ``state_table`` names another),
    no batch in flight is known: orphan removal is refused, with the reason in the report, and only the expiry runs.
    """
    head = store.get_head(pipeline.name)
    if head.version != 0:  # a table created anew would make every older batch's files orphans: refused, naming why
        ledger, held = ledger_of(head, pipeline, store), load_table(pipeline, head)
        refuse(ownership.table_refusal(pipeline, held, ledger, ledger_rows(held.state, ledger) if held else None))
    table = iceberg_table.load_table(pipeline)
    if table is None:
        return None
    refused = None
    if head.version == 0:
        refused = (
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} holds no head item for the pipeline, so the batch "
            f"in flight is unknown, and a commit cut short keeps files no snapshot references that a recovery needs; orphan "
            f"files of {iceberg_table.require_table(pipeline).describe()} are not removed until the state is back. "
            f"{recovery_hint(pipeline)}"
        )

    def waiting(batch_ids: set[int]) -> dict[int, set[str]]:
        """The attempts of these batches that wait for a commit: each one's last replay, and a re-decode staged in the
        ledger however many replays of the batch came after it (one read of the ledger entries named)."""
        found = {b: {a} for b, a in commit_records.last_replayed_attempts(pipeline.output, batch_ids).items()}
        for batch in store.get_batches(pipeline.name, batch_ids).values():
            if batch.staged is not None and batch.staged.attempt is not None:
                found.setdefault(batch.batch_id, set()).add(batch.staged.attempt)
        return found

    def tidy(table: Table) -> table_maintenance.Report:
        return table_maintenance.expire_and_remove(
            table,
            orphan_age=orphan_age,
            in_flight=[head.in_flight] if head.in_flight is not None else [],
            now=now,
            dry_run=dry_run,
            committing=functools.partial(commit_records.unfinished_commits, pipeline.output),
            refuse_orphans=refused,
            replayed=waiting,
        )

    report = tidy(table)
    # The quarantine table's files are per attempt as the table's are: the same batches and attempts keep theirs.
    quarantined = quarantine_table.load(pipeline)
    if quarantined is not None:
        other = tidy(quarantined)
        if other.orphans_refused is not None and report.orphans_refused is None:
            report = replace(report, orphans_refused=other.orphans_refused)
    return report
