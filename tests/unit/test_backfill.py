"""Backfill selection and estimates: what may be replayed, what is refused and why, what it costs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest

from kinesis_replay.backfill import SELECTION_SCHEMA, BackfillError, estimate, parse_selection, select_batches
from kinesis_replay.config import ReadConfig
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.state import Batch, BatchStatus

T0 = datetime(2026, 11, 1, tzinfo=UTC)
S = 10**55


def batch(batch_id: int, status: BatchStatus = BatchStatus.COMMITTED, hour: int = 0) -> Batch:
    start = T0 + timedelta(hours=hour)
    ranges = (SequenceRange("s0", S + batch_id * 10, S + batch_id * 10 + 5, start_arrival=start),)
    return Batch("orders", batch_id, status, ranges, "stream", "run", created_at=start + timedelta(minutes=50))


LEDGER = [batch(1, hour=0), batch(2, hour=1), batch(3, hour=2), batch(4, BatchStatus.PLANNED, hour=3)]


@pytest.mark.parametrize(
    "value",
    [{"batch_ids": [1, 2]}, {"from_batch": 1, "to_batch": 3}, {"start_time": "2026-11-01T00:00:00Z", "end_time": "2026-11-01T01:00:00Z"}],
)
def test_each_way_of_choosing_is_valid(value: dict[str, Any]) -> None:
    jsonschema.validate(value, SELECTION_SCHEMA, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize(
    "value",
    [
        {},  # nothing chosen
        {"batch_ids": []},  # an empty list
        {"batch_ids": [1], "from_batch": 1, "to_batch": 2},  # two ways at once
        {"from_batch": 1},  # half a range
        {"start_time": "yesterday", "end_time": "2026-11-01T01:00:00Z"},  # not a timestamp
        {"batch_ids": [0]},  # ids start at 1
        {"batch": [1]},  # a misspelt key
    ],
)
def test_invalid_choices_are_refused_by_the_schema(value: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, SELECTION_SCHEMA, format_checker=jsonschema.FormatChecker())


def test_bounds_in_the_wrong_order_are_refused() -> None:
    with pytest.raises(BackfillError, match="from_batch 3 is after to_batch 1"):
        parse_selection({"from_batch": 3, "to_batch": 1})
    with pytest.raises(BackfillError, match=r"start_time .* is not before end_time"):
        parse_selection({"start_time": "2026-11-02T00:00:00Z", "end_time": "2026-11-01T00:00:00Z"})


def test_ids_and_ranges_select_committed_batches_in_order() -> None:
    assert [b.batch_id for b in select_batches("orders", parse_selection({"batch_ids": [3, 1]}), LEDGER)] == [1, 3]
    assert [b.batch_id for b in select_batches("orders", parse_selection({"from_batch": 1, "to_batch": 3}), LEDGER)] == [1, 2, 3]


def test_missing_and_uncommitted_batches_are_named() -> None:
    with pytest.raises(BackfillError, match=r"no batch 7, 9 in the ledger \(it holds 1 to 4\)"):
        select_batches("orders", parse_selection({"batch_ids": [1, 7, 9]}), LEDGER)
    with pytest.raises(BackfillError, match=r"not committed: 4 \(PLANNED\)"):
        select_batches("orders", parse_selection({"from_batch": 3, "to_batch": 4}), LEDGER)


def test_a_window_selects_the_batches_whose_records_may_have_arrived_in_it() -> None:
    window = {"start_time": "2026-11-01T01:10:00+00:00", "end_time": "2026-11-01T02:10:00+00:00"}
    assert [b.batch_id for b in select_batches("orders", parse_selection(window), LEDGER)] == [2, 3]
    empty = {"start_time": "2026-10-01T00:00:00+00:00", "end_time": "2026-10-02T00:00:00+00:00"}
    with pytest.raises(BackfillError, match="no committed batch holds records from 2026-10-01"):
        select_batches("orders", parse_selection(empty), LEDGER)


def test_an_estimate_counts_calls_and_time_at_the_read_limit() -> None:
    ranges = (SequenceRange("s0", S, S + 1), SequenceRange("s1", S, S + 1))
    est = estimate(ranges, {"s0": 25_000, "s1": 100}, {"s0": 25_000 * 1024, "s1": 100 * 1024}, ReadConfig())
    assert (est.shards, est.records, est.get_records_calls) == (2, 25_100, 3 + 1)
    assert est.seconds_at_limit == pytest.approx(25_000 * 1024 / (2 * 1024 * 1024))  # s0's bytes bound it: 12.2s
    assert estimate(ranges, None, None, ReadConfig()).records is None
