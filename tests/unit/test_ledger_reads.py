"""A long ledger, read in slices: the page, the backfill's selection and the stuck check never read all of it.

The ledger is written into the in-memory state store with its restore, as a recovery would: thousands of batches,
one every five minutes. Every way of reading a part of it must give what reading the whole ledger gives, and read a
bounded part, counted at the StateStore's methods (what DynamoDB does per method is tests/contract's and
tests/integration/test_dynamodb_store.py's).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fakes.memory_store import MemoryStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, BatchSummary, Head, PlanNotes, ReplayResult, ShardResult, ShardState
from kinesis_replay.steps import backfill, in_flight
from kinesis_replay.steps.backfill import BackfillError, Selection
from kinesis_replay.ui import status

S = 10**55
T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = timedelta(minutes=5)
SHARDS = ("shardId-000000000000", "shardId-000000000001")
LEDGER = 3_000  # about ten days of a pipeline scheduled every five minutes
RETENTION = timedelta(hours=24)


def ledger_batch(batch_id: int) -> Batch:
    planned = T0 + batch_id * EVERY
    first, last = S + 10 * batch_id, S + 10 * batch_id + 9
    ranges = tuple(SequenceRange(s, first, last, first - 1, False, planned - EVERY) for s in SHARDS)
    result = ReplayResult("orders", batch_id, tuple(ShardResult(s, 10, 100, first, last, "ab", last_arrival=planned) for s in SHARDS))
    committed = batch_id % 500 != 0  # a few never committed
    return Batch(
        "orders", batch_id, BatchStatus.COMMITTED if committed else BatchStatus.FAILED, ranges, "stream", f"scheduled__{batch_id}",
        planned, committed_at=planned + EVERY / 2 if committed else None, result=result,
        notes=PlanNotes(lag_millis={s: batch_id for s in SHARDS}),
    )  # fmt: skip


class CountingStore:
    """The store, counting the batches each read returns; reading the whole ledger is refused outright."""

    def __init__(self, store: MemoryStateStore) -> None:
        self.store, self.read, self.summaries = store, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def list_batches(self, pipeline_name: str) -> list[Batch]:
        raise AssertionError("the whole ledger was read")

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        found = self.store.get_batches(pipeline_name, batch_ids)
        self.read += len(found)
        return found

    def get_summaries(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, BatchSummary]:
        found = self.store.get_summaries(pipeline_name, batch_ids)
        self.summaries += len(found)
        return found


@pytest.fixture(scope="module")
def long_ledger() -> MemoryStateStore:
    store = MemoryStateStore()
    for shard in SHARDS:
        store.put_shard_if_absent("orders", ShardState(shard))
        store.advance_checkpoint("orders", shard, None, S + 10 * LEDGER + 9, LEDGER, finished=False)
    store.restore("orders", Head(next_batch_id=LEDGER + 1), [], [ledger_batch(i) for i in range(1, LEDGER + 1)])
    return store


@pytest.fixture(scope="module")
def whole_ledger(long_ledger: MemoryStateStore) -> list[Batch]:
    """What the old way read each time: every batch."""
    return long_ledger.list_batches("orders")


def pipeline() -> Any:
    entry = {"name": "orders", "stream": "stream", "output": "/lake/orders", "schedule": "*/5 * * * *",
             "initial_position": "TRIM_HORIZON", "state_table": "t", "spark": {}}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


@pytest.mark.parametrize(
    "selection",
    [
        Selection(batch_ids=(7, 1_234, 2_999)),
        Selection(from_batch=2_401, to_batch=2_499),
        Selection(start_time=T0 + 1_000 * EVERY, end_time=T0 + 1_050 * EVERY),
        Selection(start_time=T0 + 2_990 * EVERY, end_time=T0 + 4_000 * EVERY),  # up to the newest
        Selection(start_time=T0 - timedelta(days=1), end_time=T0 + 20 * EVERY),  # from the oldest
    ],
    ids=["ids", "range", "window", "window at the newest", "window at the oldest"],
)
def test_a_selection_reads_a_slice_and_chooses_what_the_whole_ledger_would(
    long_ledger: MemoryStateStore, whole_ledger: list[Batch], selection: Selection
) -> None:
    whole = backfill.select_batches("orders", selection, whole_ledger)
    counting: Any = CountingStore(long_ledger)
    part = backfill.candidates(counting, "orders", selection, LEDGER, RETENTION)
    assert backfill.select_batches("orders", selection, part, LEDGER) == whole
    # The window's slice: the batches of the window and of one retention after it (288), the bisection's probes,
    # and the slice it reads them in.
    assert counting.read <= 2 * backfill.WINDOW_SLICE + 64, counting.read


def test_refusals_name_the_whole_ledger_from_a_slice(long_ledger: MemoryStateStore) -> None:
    counting: Any = CountingStore(long_ledger)
    refusals = {(500, 3_005): r"no batch 3005 in the ledger \(it holds 1 to 3000\)", (500,): r"not committed: 500 \(FAILED\)"}
    for named, refusal in refusals.items():
        selection = Selection(batch_ids=named)
        with pytest.raises(BackfillError, match=refusal):
            backfill.select_batches("orders", selection, backfill.candidates(counting, "orders", selection, LEDGER, None), LEDGER)
    assert counting.read <= 2


def test_the_page_and_the_stuck_check_read_a_few_batches(long_ledger: MemoryStateStore) -> None:
    counting: Any = CountingStore(long_ledger)
    now = T0 + (LEDGER + 1) * EVERY
    view = status.pipeline_view(pipeline(), counting, now)
    assert [b.batch_id for b in view.batches] == list(range(LEDGER, LEDGER - 10, -1))
    assert [s.millis_behind_latest for s in view.shards] == [LEDGER, LEDGER]
    assert [s.checkpoint_age_seconds for s in view.shards] == [(now - (T0 + LEDGER * EVERY)).total_seconds()] * 2
    assert counting.read == 10 + 1  # the last ten, and the batch that last moved both checkpoints
    # The charts: the last day's figures (288 batches at five minutes), read a hundred to a call until one is older.
    assert [h["batch_id"] for h in view.history] == list(range(LEDGER - 287, LEDGER + 1)) and counting.summaries == 300
    assert view.history[-2] == {
        "batch_id": LEDGER - 1, "status": "COMMITTED", "created_at": (T0 + (LEDGER - 1) * EVERY).isoformat(),
        "seconds": EVERY.total_seconds() / 2, "records": 20, "bytes": 200, "behind_seconds": EVERY.total_seconds(), "shards": 2,
        "bad_records": 0, "decoding": status.NOT_RECORDED, "redecoded": False, "staged_by": None,
    }  # fmt: skip
    assert view.history[-1]["status"] == "FAILED" and view.history[-1]["seconds"] is None  # batch 3000 never committed
    found = in_flight.staleness(pipeline(), counting, now)
    assert (found.age_seconds, found.batch) == (0.0, None)
