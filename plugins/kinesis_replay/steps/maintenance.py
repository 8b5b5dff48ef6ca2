"""Keep a pipeline's table small: expire old snapshots and remove orphan files, keeping what a commit still needs."""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kinesis_replay.adapters import commit_records, iceberg_table, table_maintenance
from kinesis_replay.adapters.output_root import load_table
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.ledger import ledger_of, ledger_rows
from kinesis_replay.core.refusals import recovery_hint, refuse
from kinesis_replay.core.state import StateStore

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    pass

log = logging.getLogger(__name__)


def tidy_table(
    pipeline: PipelineConfig, store: StateStore, orphan_age: timedelta, dry_run: bool = False, now: datetime | None = None
) -> table_maintenance.Report | None:
    """Expire the table's old snapshots and remove its orphan files, keeping every file a commit still needs; None with no table.

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
    return table_maintenance.expire_and_remove(
        table,
        orphan_age=orphan_age,
        in_flight=[head.in_flight] if head.in_flight is not None else [],
        now=now,
        dry_run=dry_run,
        committing=functools.partial(commit_records.unfinished_commits, pipeline.output),
        refuse_orphans=refused,
        replayed=functools.partial(commit_records.last_replayed_attempts, pipeline.output),
    )
