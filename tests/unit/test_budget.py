"""The per-shard read budget, on a fake clock: calls per second, bytes per second, iterators per second."""

from __future__ import annotations

from kinesis_replay.adapters.kinesis_client import ReadStats, ShardBudget
from kinesis_replay.core.config import ReadConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def budget(**limits: float) -> tuple[ShardBudget, Clock, ReadStats]:
    clock, stats = Clock(), ReadStats()
    return ShardBudget(ReadConfig(**limits), stats, clock=clock, sleep=clock.sleep), clock, stats  # type: ignore[arg-type]


def records(n: int, size: int) -> list[dict[str, object]]:
    return [{"Data": b"x" * (size - 1), "PartitionKey": "k"} for _ in range(n)]


def test_small_reads_are_spaced_by_the_call_rate() -> None:
    shard, clock, stats = budget()
    for _ in range(3):
        shard.before_get_records()
        shard.after_get_records(records(10, 100))
    assert clock.slept == [0.2, 0.2]  # 5 GetRecords a second
    assert (stats.records, stats.bytes, round(stats.paced_seconds, 6)) == (30, 3000, 0.4)


def test_a_large_read_waits_for_its_bytes() -> None:
    shard, clock, _ = budget(bytes_per_second=1000.0)
    shard.before_get_records()
    shard.after_get_records(records(4, 1000))  # 4,000 bytes at 1,000 a second
    shard.before_get_records()
    assert clock.slept == [4.0]


def test_time_already_spent_elsewhere_counts_toward_the_wait() -> None:
    shard, clock, _ = budget()
    shard.before_get_records()
    shard.after_get_records(records(1, 10))
    clock.now += 1.0  # converting and writing took longer than the budget asks for
    shard.before_get_records()
    assert clock.slept == []


def test_the_time_a_call_takes_counts_toward_its_interval() -> None:
    shard, clock, _ = budget(bytes_per_second=1000.0)
    shard.before_get_records()
    clock.now += 1.5  # the call itself: the transfer and parsing the page
    shard.after_get_records(records(4, 1000))  # 4,000 bytes: the next call may begin 4 s after this one began
    shard.before_get_records()
    assert clock.slept == [2.5]


def test_shard_iterators_are_spaced_too() -> None:
    shard, clock, _ = budget(get_shard_iterator_per_second=2.0)
    for _ in range(3):
        shard.before_get_shard_iterator()
    assert clock.slept == [0.5, 0.5]
