"""What the ledger says a table must hold, read from the state store: the batches committed, and their rows.

The reads a table check needs of the state store (``Ledger``'s ``verified``), through the StateStore port: the
decision itself (kinesis_replay.core.ownership.table_refusal) reads nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.holdings import Ledger, TableState, VerifiedRecords
from kinesis_replay.core.state import Batch, BatchStatus, Head, StateStore

log = logging.getLogger(__name__)

LEDGER_SLICE = 100  # a batch's figures are read a hundred at a time (DynamoDB's BatchGetItem reads at most 100 keys)


def ledger_of(head: Head, pipeline: PipelineConfig | None = None, store: StateStore | None = None) -> Ledger:
    """What the ledger says is committed: every batch before the one in flight (or the next), which is dense; with
    ``store``, how many rows it verified in each, read only when a table's snapshots do not record it."""
    verified = verified_records(store, pipeline.name) if store is not None and pipeline is not None else None
    return Ledger((head.in_flight or head.next_batch_id) - 1, head.in_flight, verified, head.redecodes)


def ledger_before(pipeline: PipelineConfig, store: StateStore, batch_id: int) -> Ledger:
    """What a regular commit of ``batch_id`` requires the ledger to have committed: every batch before it (and the head's
    count of re-decodes, which a commit records where no snapshot tells the table's)."""
    return Ledger(batch_id - 1, batch_id, verified_records(store, pipeline.name), store.get_head(pipeline.name).redecodes)


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
    """The ledger's rows of batches 1 to ``ledger.last``, when the table's state was read from its partitions (no
    snapshot of its ancestry records what it holds); None otherwise, and nothing is read."""
    if not state.derived or state.partitions is None or ledger.verified is None or ledger.last < 1:
        return None
    return dict(ledger.verified(range(1, ledger.last + 1)))


def committed_batches(store: StateStore, pipeline_name: str) -> list[Batch]:
    """Every committed batch of the ledger, in id order, read LEDGER_SLICE at a time (a rebuild looks at all of them:
    on a ledger of a year at a 5-minute schedule, about 1,000 reads)."""
    head = store.get_head(pipeline_name)
    last = (head.in_flight or head.next_batch_id) - 1
    found: list[Batch] = []
    for low in range(1, last + 1, LEDGER_SLICE):
        part = store.get_batches(pipeline_name, range(low, min(last, low + LEDGER_SLICE - 1) + 1))
        found += [part[b] for b in sorted(part) if part[b].status == BatchStatus.COMMITTED]
    return found
