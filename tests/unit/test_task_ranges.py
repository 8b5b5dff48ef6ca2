"""How the replay job deals a batch's ranges to its tasks, and how a task reads its ranges at once.

The reading is tested with ``read_partition`` replaced by a stand-in: which ranges are in flight together, and
what a failure does, are the task's own logic; reading a range is tested against the local stack.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

import kinesis_source
from kinesis_replay.core.config import ReadConfig, parse_config
from kinesis_replay.core.errors import RangeReadError
from kinesis_replay.core.job_spec import JobSpec
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, PlanNotes
from kinesis_source import RangePartition, balance, partitions, read_group, task_ranges

PLANNED = datetime(2026, 1, 1, 1, tzinfo=UTC)


def spec(spans: list[float | None], estimated: dict[str, int] | None = None, task_concurrency: int = 16) -> JobSpec:
    """A batch of one range per span (seconds of arrival time before the plan; None: not known)."""
    ranges = tuple(
        SequenceRange(f"shardId-{i:012d}", 10, 20, start_arrival=None if s is None else PLANNED - timedelta(seconds=s))
        for i, s in enumerate(spans)
    )
    return JobSpec("p", "s", 1, "/lake/p", ranges, planned_at=PLANNED, read=ReadConfig(task_concurrency=task_concurrency),
                   estimated_bytes=estimated or {})  # fmt: skip


def test_a_batch_of_no_more_ranges_than_cores_has_a_task_per_range() -> None:
    assert sorted(task_ranges(spec([60, 60, 60]), cores=4)) == [[0], [1], [2]]


def test_a_batch_of_more_ranges_than_cores_has_a_task_per_core_each_reading_several() -> None:
    groups = task_ranges(spec([60] * 8), cores=2)
    assert sorted(len(g) for g in groups) == [4, 4]
    assert sorted(i for g in groups for i in g) == list(range(8))


def test_ranges_are_balanced_by_planned_bytes_where_planning_estimated_them() -> None:
    # One shard wrote as much as the three others together: it gets a task of its own.
    estimated = {"shardId-000000000000": 300, "shardId-000000000001": 100, "shardId-000000000002": 100, "shardId-000000000003": 100}
    assert sorted(task_ranges(spec([60] * 4, estimated), cores=2)) == [[0], [1, 2, 3]]


def test_ranges_without_an_estimate_weigh_their_arrival_span_at_the_estimated_shards_rate() -> None:
    # Shard 0's estimate is 10 bytes a second of its span; shard 1, not estimated, spans 3 times as long: 1,800 bytes.
    weights = kinesis_source.range_weights(spec([60, 180, None], {"shardId-000000000000": 600}))
    assert weights == [600.0, 1800.0, 1200.0]  # shard 2's span is not known: the batch's median span, 120 s


def test_a_first_batch_with_no_estimate_is_balanced_by_arrival_span() -> None:
    assert sorted(task_ranges(spec([300, 100, 100, 100]), cores=2)) == [[0], [1, 2, 3]]


def test_balance_keeps_every_group_within_the_mean_plus_one_item_and_lists_each_group_largest_first() -> None:
    weights = [7.0, 1.0, 5.0, 3.0, 3.0, 9.0, 2.0, 4.0, 8.0, 6.0]
    groups = balance(weights, 3)
    assert sorted(i for g in groups for i in g) == list(range(10))
    mean = sum(weights) / 3
    assert all(sum(weights[i] for i in g) <= mean + max(weights) for g in groups)
    assert all([weights[i] for i in g] == sorted((weights[i] for i in g), reverse=True) for g in groups)
    assert balance([1.0], 4) == [[0]]


def test_a_batch_spec_carries_planning_estimates_from_the_ledger() -> None:
    pipeline = parse_config({"pipelines": [{"name": "p", "stream": "s", "output": "/lake/p", "schedule": None,
                                            "initial_position": "TRIM_HORIZON", "state_table": "t", "spark": {}}]})[0]  # fmt: skip
    batch = Batch(
        "p", 1, BatchStatus.PLANNED, spec([60]).ranges, "s", "run", PLANNED, notes=PlanNotes(estimated_bytes={"shardId-000000000000": 5})
    )
    from kinesis_replay.core.job_spec import KinesisEndpoint

    made = JobSpec.for_batch(pipeline, batch, KinesisEndpoint())
    assert made.estimated_bytes == {"shardId-000000000000": 5}
    assert JobSpec.from_json(made.to_json()) == made


# -- one task reading several ranges -------------------------------------------------------------------------------


def page(shard_id: str, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"shard_id": [shard_id], "n": [n]})


def test_a_task_reads_its_ranges_at_once_and_yields_every_page_of_each(monkeypatch: pytest.MonkeyPatch) -> None:
    group = partitions(spec([60] * 4))
    together = threading.Barrier(len(group), timeout=30)  # passes only when all four ranges are being read at once

    def read_partition(partition: RangePartition, first_call: Any = None, noted: Any = None) -> Iterator[pa.RecordBatch]:
        for n in range(3):
            if n == 1:
                together.wait()
            yield page(partition.range.shard_id, n)

    monkeypatch.setattr(kinesis_source, "read_partition", read_partition)
    got = sorted((b.column(0)[0].as_py(), b.column(1)[0].as_py()) for b in read_group(group))
    assert got == sorted((p.range.shard_id, n) for p in group for n in range(3))


def test_a_task_reads_no_more_ranges_at_once_than_read_task_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    group = partitions(spec([60] * 5, task_concurrency=2))
    active, most, lock = set(), 0, threading.Lock()

    def read_partition(partition: RangePartition, first_call: Any = None, noted: Any = None) -> Iterator[pa.RecordBatch]:
        nonlocal most
        with lock:
            active.add(partition.index)
            most = max(most, len(active))
        yield page(partition.range.shard_id, 0)
        with lock:
            active.discard(partition.index)

    monkeypatch.setattr(kinesis_source, "read_partition", read_partition)
    assert len(list(read_group(group))) == 5
    assert most <= 2


def test_spans_a_reader_thread_could_not_confirm_reach_the_tasks_notes_from_the_tasks_own_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's notes are added to from its own thread only: a reader thread's span is carried there."""
    group = partitions(spec([60] * 3))

    def read_partition(partition: RangePartition, first_call: Any = None, noted: Any = None) -> Iterator[pa.RecordBatch]:
        yield page(partition.range.shard_id, 0)
        noted((partition.range.shard_id, 10 + partition.index, None if partition.index else 20))

    class Accumulator:
        def __init__(self) -> None:
            self.value: list[Any] = []
            self.threads: set[str] = set()

        def add(self, spans: list[Any]) -> None:
            self.value += spans
            self.threads.add(threading.current_thread().name)

    monkeypatch.setattr(kinesis_source, "read_partition", read_partition)
    accumulator = Accumulator()
    assert len(list(read_group(group, None, accumulator))) == 3  # type: ignore[arg-type]
    assert sorted(accumulator.value) == [(p.range.shard_id, 10 + p.index, None if p.index else 20) for p in group]
    assert accumulator.threads == {threading.current_thread().name}


def test_a_span_a_read_has_nowhere_to_note_fails_it_in_a_reader_thread_as_in_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never dropped: a read without the accumulator (no caller of the job's own) fails on a span, however it is read."""
    from kinesis_replay.adapters import range_reader

    def iterate_range(client: Any, stream: str, rng: SequenceRange, limits: Any, stats: Any, **kwargs: Any) -> Iterator[list[Any]]:
        stats.unconfirmed.append((11, 13))
        yield [{"SequenceNumber": "10", "ApproximateArrivalTimestamp": PLANNED, "PartitionKey": "k", "Data": b"{}"}]

    monkeypatch.setattr(range_reader, "iterate_range", iterate_range)
    monkeypatch.setattr(kinesis_source, "kinesis_client", lambda endpoint, connections=0: None)
    for group in (partitions(spec([60]))[:1], partitions(spec([60, 60]))):  # the task's own thread; reader threads
        with pytest.raises(RuntimeError, match=r"stream s, range shardId-00000000000\d .*: records after 11 may be lost"):
            list(read_group(group))


def test_a_range_that_fails_fails_the_task_with_its_error_and_stops_the_other_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    group = partitions(spec([60] * 3))

    def read_partition(partition: RangePartition, first_call: Any = None, noted: Any = None) -> Iterator[pa.RecordBatch]:
        if partition.index == 1:
            raise RangeReadError(f"stream s, range {partition.range.describe()}: could not read until the end")
        for n in range(1_000_000):  # endless: only the failure ends it
            yield page(partition.range.shard_id, n)

    monkeypatch.setattr(kinesis_source, "read_partition", read_partition)
    with pytest.raises(RangeReadError, match="shardId-000000000001"):
        for _ in read_group(group):
            pass
    # read_group returned: every reader thread has been joined, the endless ones stopped by the failure.
    assert not [t for t in threading.enumerate() if t.name.startswith("kinesis-replay-reader-")]
