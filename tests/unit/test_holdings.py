"""The table's holdings as a snapshot summary records them, and their comparison with the ledger."""

from __future__ import annotations

import pytest

from kinesis_replay.core.holdings import Holdings, Ledger, Mismatch, TableState, compare


def test_holdings_round_trip_through_a_summary_as_ranges() -> None:
    held = Holdings.of([1, 2, 3, 5, 7, 8], records=60, redecodes=2)
    assert held.ranges == ((1, 3), (5, 5), (7, 8)) and held.count == 6 and held.through == 8
    summary = held.to_summary()
    assert summary == {
        "kinesis-replay.batches": "1-3,5,7-8", "kinesis-replay.records": "60", "kinesis-replay.committed-through": "8",
        "kinesis-replay.redecodes": "2",
    }  # fmt: skip
    assert Holdings.from_summary(summary) == held
    assert held.add(9, 5).redecodes == 2  # every commit carries the count forward
    assert Holdings.from_summary({"operation": "append"}) is None  # another writer's snapshot
    # a release's summary before re-decodes were counted: none
    assert Holdings.from_summary({"kinesis-replay.batches": "1", "kinesis-replay.records": "3"}) == Holdings.of([1], 3)
    with pytest.raises(ValueError, match=r"kinesis-replay.redecodes='x' is not a count"):
        Holdings.from_summary({"kinesis-replay.batches": "1", "kinesis-replay.redecodes": "x"})


def test_a_summary_of_a_thousand_batches_stays_one_range() -> None:
    held = Holdings()
    for batch_id in range(1, 1001):
        held = held.add(batch_id, 10)
    assert held.to_summary()["kinesis-replay.batches"] == "1-1000" and held.records == 10_000
    assert held.add(500, 99) == held  # a batch held already keeps its count (a backfill replaces the same rows)


def test_a_malformed_summary_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"kinesis-replay.batches='1-x'"):
        Holdings.from_summary({"kinesis-replay.batches": "1-x"})


def test_missing_and_outside_ids() -> None:
    held = Holdings.of([2, 3, 6, 9])
    assert held.missing_from(1, 7) == [1, 4, 5, 7]
    assert held.outside(1, 5) == [6, 9] and held.outside(3, 6) == [2, 9]
    assert Holdings().missing_from(1, 3) == [1, 2, 3] and Holdings().outside(1, 3) == []


@pytest.mark.parametrize(
    ("state", "ledger", "expected"),
    [
        (TableState(Holdings.of(range(1, 4), 30), 30), Ledger(3), None),
        # a rollback to batch 1's snapshot: batches 2 and 3 are missing, and the snapshot agrees with itself
        (TableState(Holdings.of([1], 10), 10), Ledger(3), Mismatch([2, 3], [], False)),
        # a dropped table
        (TableState(Holdings(), 0, exists=False), Ledger(2), Mismatch([1, 2], [], False)),
        # a table created anew by a backfill of batch 6 alone
        (TableState(Holdings.of([6], 70), 70), Ledger(6), Mismatch([1, 2, 3, 4, 5], [], False)),
        # rows deleted by another writer
        (TableState(Holdings.of([1, 2], 20), 15, ("9 (delete)",)), Ledger(2), Mismatch([], [], True)),
        # a table ahead of the ledger: extra, except the batch in flight (its table commit may be done)
        (TableState(Holdings.of([1, 2, 3], 30), 30), Ledger(2), Mismatch([], [3], False)),
        (TableState(Holdings.of([1, 2, 3], 30), 30), Ledger(2, in_flight=3), None),
        # nothing committed yet, no table
        (TableState(Holdings(), 0, exists=False), Ledger(0, in_flight=1), None),
        # Iceberg's total-records absent (another writer's snapshot without totals): unknown, not 0
        (TableState(Holdings.of([1], 10), None, ("7 (overwrite)",)), Ledger(1), None),
        # delete files hide rows without changing total-records: only another writer makes them
        (TableState(Holdings.of([1], 10), 10, ("8 (overwrite)",), deletes=2), Ledger(1), Mismatch([], [], True)),
        # rolled back past a re-decode: the same batches and counts, and fewer re-decodes than the ledger made visible
        (TableState(Holdings.of([1, 2], 20, 1), 20), Ledger(2, redecodes=2), Mismatch([], [], False, redecodes=(1, 2))),
        # a re-decode's commit cut short before the head's write: the table ahead of the ledger is not refused
        (TableState(Holdings.of([1, 2], 20, 3), 20), Ledger(2, redecodes=2), None),
        # holdings read from the partitions cannot tell the count: not compared
        (TableState(Holdings.of([1], 10), 10, derived=True), Ledger(1, redecodes=2), None),
    ],
)
def test_compare_with_the_ledger(state: TableState, ledger: Ledger, expected: Mismatch | None) -> None:
    assert compare(state, ledger) == expected
