"""Backfill selection and estimates: what may be replayed, what is refused and why, what it costs."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest

from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.formats import MAX_BATCH_ID, path_batch_id
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus
from kinesis_replay.steps.backfill import (
    ACKNOWLEDGE_DATA_LOSS_SCHEMA,
    MAX_ACKNOWLEDGED_SHARDS,
    MAX_BATCHES_PER_RUN,
    SELECTION_SCHEMA,
    BackfillError,
    Selection,
    candidates,
    describe,
    estimate,
    listed,
    parse_selection,
    select_batches,
)

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


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"from_batch": 3}, "'to_batch' is a dependency of 'from_batch'"),
        ({"end_time": "2026-11-01T01:00:00Z"}, "'start_time' is a dependency of 'end_time'"),
        ({"batch_ids": [1], "from_batch": 1, "to_batch": 2}, "has too many properties"),
        ({}, "should be non-empty"),
    ],
)
def test_a_refusal_says_what_is_wrong(value: dict[str, Any], reason: str) -> None:
    """Airflow shows the schema's first line: once "is not valid under any of the given schemas" for every mistake."""
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(value, SELECTION_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert reason in caught.value.message


class Ledger:
    """The one read ``candidates`` makes of a state store, over a list of batches."""

    def __init__(self, batches: list[Batch]) -> None:
        self.by_id = {b.batch_id: b for b in batches}

    def get_batches(self, pipeline_name: str, ids: Any) -> dict[int, Batch]:
        return {i: self.by_id[i] for i in ids if i in self.by_id}


def test_a_window_to_the_end_of_time_selects_up_to_the_newest_batch() -> None:
    """end_time 9999-12-31 ("until now") once overflowed adding the stream's retention: a raw OverflowError."""
    store: Any = Ledger(LEDGER)
    selection = parse_selection({"start_time": "2026-11-01T00:00:00Z", "end_time": "9999-12-31T23:59:59Z"})
    found = candidates(store, "p", selection, newest=4, retention=timedelta(days=7))
    assert [b.batch_id for b in select_batches("p", selection, found, newest=4)] == [1, 2, 3]


def test_an_empty_ledger_is_named_as_such() -> None:
    with pytest.raises(BackfillError, match=r"the ledger holds no batch yet .*does state_table name its table"):
        select_batches("p", Selection(batch_ids=(3,)), [], newest=0)


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


HUGE = 1_000_000  # characters or items: a parameter far past every cap
TIME = "2026-11-01T00:00:00Z"


@contextmanager
def allocations() -> Iterator[list[int]]:
    """The most memory Python allocated inside the block, in bytes (read after it): a refusal must not build what it refuses."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("value", "keyword"),
    [
        ({"batch_ids": list(range(1, MAX_BATCHES_PER_RUN + 2))}, "maxItems"),
        ({"batch_ids": [MAX_BATCH_ID + 1]}, "maximum"),
        ({"from_batch": 1, "to_batch": MAX_BATCH_ID + 1}, "maximum"),
        ({"from_batch": 10**400, "to_batch": 10**400}, "maximum"),
        ({"start_time": "2026-11-01T00:00:00." + "0" * 100 + "Z", "end_time": TIME}, "maxLength"),  # a valid RFC 3339 time
        ({"start_time": TIME, "end_time": "9" * HUGE}, "maxLength"),
    ],
)
def test_oversized_choices_are_refused_by_the_schema(value: dict[str, Any], keyword: str) -> None:
    errors = list(jsonschema.Draft202012Validator(SELECTION_SCHEMA, format_checker=jsonschema.FormatChecker()).iter_errors(value))
    assert keyword in {e.validator for e in errors}


def test_the_largest_choices_the_schema_takes() -> None:
    checker = jsonschema.FormatChecker()
    jsonschema.validate({"batch_ids": list(range(1, MAX_BATCHES_PER_RUN + 1))}, SELECTION_SCHEMA, format_checker=checker)
    jsonschema.validate({"from_batch": MAX_BATCH_ID, "to_batch": MAX_BATCH_ID}, SELECTION_SCHEMA, format_checker=checker)
    assert len(path_batch_id(MAX_BATCH_ID)) == len(path_batch_id(1))  # the largest id still fits the padded paths


def test_a_range_wider_than_one_run_is_refused_before_it_is_built() -> None:
    with allocations() as peak, pytest.raises(BackfillError) as refused:
        parse_selection({"from_batch": 1, "to_batch": MAX_BATCH_ID})
    message = str(refused.value)
    assert f"from_batch 1 to to_batch {MAX_BATCH_ID} is {MAX_BATCH_ID} batches, more than the {MAX_BATCHES_PER_RUN}" in message
    assert f"split the backfill into runs of at most {MAX_BATCHES_PER_RUN} batches (the first: from_batch 1, to_batch 100)" in message
    with allocations() as peak_too, pytest.raises(BackfillError, match=f"is {MAX_BATCH_ID} batches"):  # a Selection made by hand too
        select_batches("orders", Selection(from_batch=1, to_batch=MAX_BATCH_ID), LEDGER)
    assert peak[0] < 100_000 and peak_too[0] < 100_000


def test_a_range_of_exactly_one_run_is_taken() -> None:
    assert parse_selection({"from_batch": 5, "to_batch": 5 + MAX_BATCHES_PER_RUN - 1}) == Selection(from_batch=5, to_batch=104)
    with pytest.raises(BackfillError, match=f"is {MAX_BATCHES_PER_RUN + 1} batches"):
        parse_selection({"from_batch": 5, "to_batch": 5 + MAX_BATCHES_PER_RUN})


def test_more_ids_than_one_run_are_refused_before_they_are_copied() -> None:
    ids = list(range(1, HUGE + 1))  # the parameter itself, about 36 MB; the refusal must add nothing like it
    with (
        allocations() as peak,
        pytest.raises(BackfillError, match=f"batch_ids names {HUGE} batches, more than the {MAX_BATCHES_PER_RUN} one"),
    ):
        parse_selection({"batch_ids": ids})
    assert peak[0] < 100_000
    with pytest.raises(BackfillError, match=f"{MAX_BATCHES_PER_RUN + 1} batch ids, more than the {MAX_BATCHES_PER_RUN}"):
        select_batches("orders", Selection(batch_ids=tuple(range(1, MAX_BATCHES_PER_RUN + 2))), LEDGER)


def test_a_window_selecting_more_than_one_run_is_refused_with_its_count_and_ends() -> None:
    ledger = [batch(i, hour=i) for i in range(1, 151)]
    wide = {"start_time": T0.isoformat(), "end_time": (T0 + timedelta(hours=150)).isoformat()}
    with pytest.raises(BackfillError) as refused:
        select_batches("orders", parse_selection(wide), ledger)
    message = str(refused.value)
    assert f"selects 150 committed batches (1 to 150), more than the {MAX_BATCHES_PER_RUN} one backfill run replays" in message
    assert "give a narrower window, or from_batch and to_batch" in message
    exactly = {"start_time": (T0 + timedelta(hours=1)).isoformat(), "end_time": (T0 + timedelta(hours=100)).isoformat()}
    assert [b.batch_id for b in select_batches("orders", parse_selection(exactly), ledger)] == list(range(1, 101))


def test_a_refusal_lists_a_few_ids_then_a_count() -> None:
    with pytest.raises(BackfillError, match=r"no batch 7, 8, 9, 10, 11 and 95 more in the ledger \(it holds 1 to 4\)$"):
        select_batches("orders", parse_selection({"from_batch": 7, "to_batch": 106}), LEDGER)
    planned = [batch(i, BatchStatus.PLANNED) for i in range(1, 11)]
    with pytest.raises(BackfillError, match=r"not committed: 1 \(PLANNED\), 2 .*, 5 \(PLANNED\) and 5 more\. A batch"):
        select_batches("orders", parse_selection({"from_batch": 1, "to_batch": 10}), planned)
    assert listed([1, 2, 3, 4, 5]) == "1, 2, 3, 4, 5"
    assert listed(range(1, 7)) == "1, 2, 3, 4, 5 and 1 more"
    assert Selection(batch_ids=tuple(range(1, 101))).describe() == "batches 1, 2, 3, 4, 5 and 95 more"


@pytest.mark.parametrize(
    "value",
    [
        {"start_time": "x" * HUGE, "end_time": TIME},  # too long
        {"start_time": TIME, "end_time": ["2026"] * HUGE},  # not a string
        {"from_batch": "9" * HUGE, "to_batch": 1},  # not an integer
        {"from_batch": 1, "to_batch": 10**4000},  # past the largest id
        {"batch_ids": [1, "y" * HUGE]},
    ],
)
def test_a_value_echoed_in_a_refusal_is_cut_short(value: dict[str, Any]) -> None:
    with pytest.raises(BackfillError) as refused:
        parse_selection(value)
    assert len(str(refused.value)) < 300, str(refused.value)[:300]


@pytest.mark.parametrize(
    "value", [[], ["shardId-000000000000", "shardId-000000000001"], [f"shardId-{i:012d}" for i in range(MAX_ACKNOWLEDGED_SHARDS)]]
)
def test_acknowledged_shards_within_bounds_are_valid(value: list[str]) -> None:
    jsonschema.validate(value, ACKNOWLEDGE_DATA_LOSS_SCHEMA)


@pytest.mark.parametrize(
    ("value", "keyword"),
    [
        ([f"shardId-{i:012d}" for i in range(MAX_ACKNOWLEDGED_SHARDS + 1)], "maxItems"),
        (["shardId-" + "0" * HUGE], "maxLength"),
        (["shardId-000000000000", "shardId-000000000000"], "uniqueItems"),
        (["shard-1"], "pattern"),
    ],
)
def test_acknowledged_shards_past_the_bounds_are_refused(value: list[str], keyword: str) -> None:
    assert keyword in {e.validator for e in jsonschema.Draft202012Validator(ACKNOWLEDGE_DATA_LOSS_SCHEMA).iter_errors(value)}


def test_an_estimate_counts_calls_and_time_at_the_read_limit() -> None:
    ranges = (SequenceRange("s0", S, S + 1), SequenceRange("s1", S, S + 1))
    est = estimate(ranges, {"s0": 25_000, "s1": 100}, {"s0": 25_000 * 1024, "s1": 100 * 1024}, ReadConfig())
    assert (est.shards, est.records, est.get_records_calls) == (2, 25_100, 3 + 1)
    assert est.seconds_at_limit == pytest.approx(25_000 * 1024 / (2 * 1024 * 1024))  # s0's bytes bound it: 12.2s
    assert estimate(ranges, None, None, ReadConfig()).records is None
    # Over enhanced fan-out: the consumer's own 2 MiB/s a shard, a subscription a shard (each lasts under 5 minutes here),
    # and the bytes' retrieval price.
    assert est.efo_seconds == pytest.approx(25_000 * 1024 / (2 * 1024 * 1024)) and est.subscriptions == 2
    assert est.efo_retrieval_dollars == pytest.approx(25_100 * 1024 / 2**30 * 0.013)
    # A day of one shard's bytes at 2 MiB/s takes many subscriptions, renewed each 5 minutes.
    day = estimate(ranges[:1], {"s0": 1}, {"s0": 2 * 1024 * 1024 * 3600}, ReadConfig())
    assert day.efo_seconds == pytest.approx(3600) and day.subscriptions == 13


def test_a_dry_run_says_what_each_path_costs_the_pipelines_own_first() -> None:
    ranges = (SequenceRange("s0", S, S + 1), SequenceRange("s1", S, S + 1))
    est = estimate(ranges, {"s0": 25_000, "s1": 100}, {"s0": 25_000 * 1024, "s1": 100 * 1024}, ReadConfig())
    batch = Batch(
        pipeline_name="orders", batch_id=7, stream="orders", ranges=ranges, status=BatchStatus.COMMITTED, run_id="r", created_at=T0
    )
    plain = describe(batch, est).splitlines()
    assert plain[-2].startswith("  - by GetRecords: 4 calls") and "12.2s" in plain[-2]
    assert plain[-1].startswith("  - over enhanced fan-out (with read.consumer): about 12.2s") and "2 subscriptions" in plain[-1]
    assert "$0.72 a day for 2 shards" in plain[-1]
    efo = describe(batch, est, "replay").splitlines()
    assert efo[-2].startswith("  - over enhanced fan-out (consumer replay)") and efo[-1].startswith(
        "  - by GetRecords (without read.consumer)"
    )
