"""find_end against a shard held in memory: answers Kinesis may give that kinesalite never does.

Kinesis may answer fewer records than asked for, empty pages before the records, and no lag hint; the search
must still end at the newest record that arrived before the bound, reading a handful of records per probe.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis_replay.adapters import range_bounds
from kinesis_replay.core.config import ReadConfig

T0 = datetime(2026, 11, 1, tzinfo=UTC)
S = 10**50
FAST = ReadConfig(get_records_per_second=1e9, get_shard_iterator_per_second=1e9, bytes_per_second=1e12)


class MemoryShard:
    """One shard's records as (sequence number, arrival in ms after T0); GetShardIterator and GetRecords over them.

    ``short``: each page holds at most this many records, whatever the Limit (Kinesis may answer fewer).
    ``empty_first``: a new iterator's first page is empty, with the lag of what follows (as Kinesis may answer).
    """

    def __init__(self, arrivals_ms: list[int], short: int | None = None, empty_first: bool = False) -> None:
        self.records = [(S + i, ms) for i, ms in enumerate(arrivals_ms)]
        self.short, self.empty_first = short, empty_first
        self.iterators: dict[str, tuple[int, bool]] = {}
        self.read = 0

    def _iterator(self, index: int, fresh: bool) -> str:
        token = f"it-{len(self.iterators)}"
        self.iterators[token] = (index, fresh)
        return token

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        kind = kwargs["ShardIteratorType"]
        if kind == "AT_TIMESTAMP":
            at = (kwargs["Timestamp"] - T0) / timedelta(milliseconds=1)
            index = next((i for i, (_, ms) in enumerate(self.records) if ms >= at), len(self.records))
        else:
            seq = int(kwargs["StartingSequenceNumber"])
            index = next(i for i, (s, _) in enumerate(self.records) if s == seq) + (kind == "AFTER_SEQUENCE_NUMBER")
        return {"ShardIterator": self._iterator(index, fresh=self.empty_first)}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        index, fresh = self.iterators[ShardIterator]
        if fresh and index < len(self.records):
            return {"Records": [], "NextShardIterator": self._iterator(index, False), "MillisBehindLatest": self._behind(index)}
        page = self.records[index : index + min(Limit, self.short or Limit)]
        self.read += len(page)
        end = index + len(page)
        behind = self._behind(end - 1) if page else 0
        return {"Records": [self._record(r) for r in page], "NextShardIterator": self._iterator(end, False), "MillisBehindLatest": behind}

    def _behind(self, index: int) -> int:
        return max(0, self.records[-1][1] - self.records[max(index, 0)][1]) if self.records else 0

    @staticmethod
    def _record(r: tuple[int, int]) -> dict[str, Any]:
        return {
            "SequenceNumber": str(r[0]),
            "ApproximateArrivalTimestamp": T0 + timedelta(milliseconds=r[1]),
            "Data": b"x",
            "PartitionKey": "k",
        }

    def newest_before(self, bound_ms: int) -> int:
        """The answer: the last record of the prefix that arrived before the bound."""
        best = self.records[0][0]
        for seq, ms in self.records:
            if ms >= bound_ms:
                break
            best = seq
        return best


def search(shard: MemoryShard, bound_ms: int, hint: bool) -> range_bounds.RangeEnd:
    start = shard._record(shard.records[0])
    behind = shard._behind(0) if hint else None
    return range_bounds.find_end(shard, "s", "shardId-0", start, T0 + timedelta(milliseconds=bound_ms), FAST, behind)  # type: ignore[arg-type]


@pytest.mark.parametrize("hint", [True, False], ids=["hint", "no hint"])
@pytest.mark.parametrize("seed", range(20))
def test_a_sparse_shard_s_end_before_any_bound_is_found_by_a_few_probes(seed: int, hint: bool) -> None:
    rng = random.Random(seed)
    arrivals = sorted(rng.randrange(0, 7 * 24 * 3600 * 1000) for _ in range(rng.randint(1, 3000)))
    shard = MemoryShard(arrivals)
    bound = rng.choice([arrivals[-1] + 1, arrivals[-1] + 3_600_000, rng.randrange(arrivals[0] + 1, arrivals[-1] + 2)])
    found = search(shard, bound, hint)
    assert found.end == shard.newest_before(bound)
    assert found.probes <= 2 * 30 + 2 and shard.read <= range_bounds.PROBE_RECORDS * (found.probes + 1) + 10


@pytest.mark.parametrize(("short", "empty_first"), [(2, False), (1, False), (None, True), (3, True)])
def test_short_and_empty_pages_do_not_end_the_search_early(short: int | None, empty_first: bool) -> None:
    arrivals = [0, 0, 0, 5, 5, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9, 9]  # records put together share a millisecond
    shard = MemoryShard(arrivals, short=short, empty_first=empty_first)
    for bound in (10, 9, 6, 1):
        assert search(shard, bound, hint=True).end == shard.newest_before(bound), bound
        assert search(shard, bound, hint=False).end == shard.newest_before(bound), bound


def test_arrivals_out_of_order_end_the_range_at_the_first_one_past_the_bound() -> None:
    shard = MemoryShard([0, 10, 20, 1000, 30, 40])  # "approximate" arrival times: one out of order
    found = search(shard, 500, hint=False)
    assert found.end == S + 2 and found.more_after  # the prefix before the first record at or after the bound
