"""The range reader on the in-memory stream: exact inclusive ranges, and the faults it must survive or name.

The stream answers as kinesalite does (tests/contract/test_kinesis_contract.py); the faults are injected around it.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fakes.memory_kinesis import MemoryKinesis
from kinesis_replay.adapters.kinesis_client import ReadStats
from kinesis_replay.adapters.range_reader import iterate_range
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import DataLossError, RangeReadError, StreamNotFoundError
from kinesis_replay.core.ranges import SequenceRange
from stack.producer import produce


@pytest.fixture
def kinesis() -> MemoryKinesis:
    client = MemoryKinesis()
    client.create_stream(StreamName="orders", ShardCount=4)
    return client


@pytest.fixture
def stream(kinesis: MemoryKinesis) -> str:
    return "orders"


def split_shard(kinesis: MemoryKinesis, stream: str, shard_id: str) -> None:
    """Split a shard at the middle of its hash-key range."""
    shard = next(s for s in kinesis.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == shard_id)
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2))


def shard_sequence_numbers(kinesis: Any, stream: str, count: int = 300) -> tuple[str, list[int]]:
    """Produce ``count`` records; return the busiest shard and its records' sequence numbers, in order."""
    produced = produce(kinesis, stream, count)
    shard, _ = Counter(p.shard_id for p in produced).most_common(1)[0]
    return shard, sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)


def read(kinesis: Any, stream: str, rng: SequenceRange, limits: ReadConfig | None = None, stats: ReadStats | None = None) -> list[int]:
    return [int(r["SequenceNumber"]) for page in iterate_range(kinesis, stream, rng, limits, stats, sleep=lambda s: None) for r in page]


class FaultyKinesis:
    """The real client, with chosen GetRecords calls answered by an injected error or a trimmed page."""

    def __init__(
        self, client: Any, errors: dict[int, str] | None = None, drop_first_record: bool = False, trim: dict[int, int] | None = None
    ) -> None:
        self.client, self.errors, self.drop_first_record, self.calls = client, errors or {}, drop_first_record, 0
        self.trim = trim or {}  # call number -> records cut from the front of its page, as retention would have
        self.refuse_start = False  # the first GetShardIterator(AT_SEQUENCE_NUMBER) is refused, as for a trimmed record
        self.limits: list[int] = []  # the Limit of each GetRecords call
        self.iterators = 0  # GetShardIterator calls
        # (s, h): once a page after record s is asked for, retention has trimmed every record below h: that page and
        # later ones leave them out, and an iterator at one of them is refused
        self.trim_after: tuple[int, int] | None = None
        self.horizon: int | None = None

    def get_shard_iterator(self, **kwargs: Any) -> Any:
        self.iterators += 1
        trimmed = self.horizon is not None and int(kwargs.get("StartingSequenceNumber", self.horizon)) < self.horizon
        if (self.refuse_start or trimmed) and kwargs["ShardIteratorType"] == "AT_SEQUENCE_NUMBER":
            self.refuse_start = False
            message = "StartingSequenceNumber used in ShardIterator has expired (trimmed)"
            raise ClientError({"Error": {"Code": "InvalidArgumentException", "Message": message}}, "GetShardIterator")
        return self.client.get_shard_iterator(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_records(self, **kwargs: Any) -> Any:
        self.calls += 1
        self.limits.append(kwargs["Limit"])
        code = self.errors.get(self.calls)
        if code:
            raise ClientError({"Error": {"Code": code, "Message": f"injected {code}"}}, "GetRecords")
        page = self.client.get_records(**kwargs)
        if self.drop_first_record and self.calls == 1:
            page["Records"] = page["Records"][1:]  # as if retention had trimmed the range's first record
        page["Records"] = page["Records"][self.trim.get(self.calls, 0) :]
        if self.trim_after and page["Records"] and int(page["Records"][0]["SequenceNumber"]) > self.trim_after[0]:
            self.horizon = self.trim_after[1]
        if self.horizon is not None:
            page["Records"] = [r for r in page["Records"] if int(r["SequenceNumber"]) >= self.horizon]
        return page


def test_reads_exactly_the_inclusive_range_with_56_digit_sequence_numbers(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    rng = SequenceRange(shard, seqs[10], seqs[-10])
    # Pages of 7 records, so that the end falls inside a page and what follows it must be cut off.
    assert read(kinesis, stream, rng, ReadConfig(max_records_per_call=7)) == seqs[10:-9]
    assert {len(str(s)) for s in seqs} == {56}


def test_a_single_record_range_reads_one_record(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    assert read(kinesis, stream, SequenceRange(shard, seqs[3], seqs[3])) == [seqs[3]]


def test_reading_stops_at_the_end_without_fetching_more(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    counting = FaultyKinesis(kinesis)
    read(counting, stream, SequenceRange(shard, seqs[0], seqs[19]), ReadConfig(max_records_per_call=10))
    assert counting.calls == 2  # 2 pages of 10: the second ends exactly at the end, and reading stops there


def test_each_call_asks_for_about_page_bytes_of_records_so_a_reader_holds_one_small_page(kinesis: Any, stream: str) -> None:
    produced = produce(kinesis, stream, 200, payload_bytes=1000)
    shard, _ = Counter(p.shard_id for p in produced).most_common(1)[0]
    seqs = sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)
    counting = FaultyKinesis(kinesis)
    limits = ReadConfig(page_bytes=10_000, first_page_records=3)
    pages = list(iterate_range(counting, stream, SequenceRange(shard, seqs[0], seqs[-1]), limits, sleep=lambda s: None))
    assert [int(r["SequenceNumber"]) for page in pages for r in page] == seqs
    # The first call asks for first_page_records; each later one for page_bytes at the last page's mean size.
    assert counting.limits[0] == 3 and len(counting.limits) == len(pages)
    for page, limit in zip(pages, counting.limits[1:], strict=False):
        assert limit == int(10_000 / (sum(len(r["Data"]) for r in page) / len(page))) in (9, 10)  # records of about 1 KB
    assert max(len(page) for page in pages) <= 10


def test_an_expired_iterator_is_reopened_after_the_last_record_read(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    faulty = FaultyKinesis(kinesis, errors={3: "ExpiredIteratorException"})
    stats = ReadStats()
    assert read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]), ReadConfig(max_records_per_call=5), stats) == seqs
    assert stats.expired_iterators == 1


def test_records_trimmed_while_an_iterator_was_expired_fail_the_range_not_skip_it(kinesis: Any, stream: str) -> None:
    """Once reopened after the last record read: an iterator after a trimmed record starts at the first record left, and
    the records between were skipped, with first and last records (all the manifest checks) as planned."""
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    faulty = FaultyKinesis(kinesis, errors={3: "ExpiredIteratorException"}, trim={4: 3})  # the last read and 2 more gone
    with pytest.raises(RangeReadError, match=rf"record {seqs[9]}, the last one read before the iterator expired, is gone"):
        read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]), ReadConfig(max_records_per_call=5))


# A retention every record is near: each page after the first is checked.
NEAR = timedelta(seconds=1)


def read_near_retention(faulty: FaultyKinesis, stream: str, rng: SequenceRange, accept_gap: bool = False, stats: ReadStats | None = None,
                        retention: timedelta = NEAR) -> list[int]:  # fmt: skip
    pages = iterate_range(
        faulty, stream, rng, ReadConfig(max_records_per_call=5, first_page_records=5), stats, lambda s: None, accept_gap, retention
    )
    return [int(r["SequenceNumber"]) for page in pages for r in page]


def test_near_the_retention_each_page_is_checked_and_one_that_skipped_nothing_passes(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 120)
    counting, stats = FaultyKinesis(kinesis), ReadStats()
    assert read_near_retention(counting, stream, SequenceRange(shard, seqs[0], seqs[-1]), stats=stats) == seqs
    pages = -(-len(seqs) // 5)
    # One iterator at the start, then one for each page after the first: at the last record read, which is still there.
    assert counting.iterators == pages and stats.unconfirmed == []
    far = FaultyKinesis(kinesis)  # the stream's real retention (24 hours), which no record here is near: no check
    assert read_near_retention(far, stream, SequenceRange(shard, seqs[0], seqs[-1]), retention=timedelta(hours=24)) == seqs
    assert far.iterators == 1 and far.calls == pages


def test_records_trimmed_between_two_pages_near_the_retention_fail_the_range_not_skip_it(kinesis: Any, stream: str) -> None:
    """Kinesis starts the next page at the first record left: without the check, seqs[10] to seqs[12] were skipped
    silently, with the range's first and last records, all the manifest checks, as planned."""
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    rng = SequenceRange(shard, seqs[0], seqs[-1])
    faulty = FaultyKinesis(kinesis)
    faulty.trim_after = (seqs[9], seqs[13])  # the second page's last record, and the two after it, are trimmed
    expected = rf"record {seqs[9]}, the last one read, .* no longer in the stream.* between it and {seqs[13]}, the next page's first"
    with pytest.raises(DataLossError, match=expected + rf'.*"acknowledge_data_loss": \["{shard}"\]'):
        read_near_retention(faulty, stream, rng)
    acknowledged, stats = FaultyKinesis(kinesis), ReadStats()
    acknowledged.trim_after = (seqs[9], seqs[13])
    assert read_near_retention(acknowledged, stream, rng, accept_gap=True, stats=stats) == seqs[:10] + seqs[13:]
    assert stats.unconfirmed == [(seqs[9], seqs[13])]  # for verify to record as the gap


def test_a_closed_shard_emptied_by_retention_while_read_fails_at_its_end(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 120)
    split_shard(kinesis, stream, shard)  # the shard closes: it is read to its end, SHARD_END
    rng = SequenceRange(shard, seqs[0], seqs[-1], to_shard_end=True)
    faulty = FaultyKinesis(kinesis)
    faulty.trim_after = (seqs[9], seqs[-1] + 1)  # everything after the second page is trimmed: empty pages, then SHARD_END
    with pytest.raises(DataLossError, match=rf"record {seqs[9]}, the last one read, .* between it and the shard's end"):
        read_near_retention(faulty, stream, rng)
    acknowledged, stats = FaultyKinesis(kinesis), ReadStats()
    acknowledged.trim_after = (seqs[9], seqs[-1] + 1)
    assert read_near_retention(acknowledged, stream, rng, accept_gap=True, stats=stats) == seqs[:10]
    assert stats.unconfirmed == [(seqs[9], None)]


def test_a_range_start_kinesis_refuses_is_a_loss_to_acknowledge_then_read_from_the_first_record_left(kinesis: Any, stream: str) -> None:
    """Once a raw ClientError, the same for an acknowledged gap: a pipeline stuck on every run."""
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    faulty = FaultyKinesis(kinesis)
    faulty.refuse_start = True
    with pytest.raises(DataLossError, match=rf'Kinesis refused the range start {seqs[0]} .*"acknowledge_data_loss": \["{shard}"\]'):
        read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]))
    faulty.refuse_start = True
    pages = iterate_range(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]), sleep=lambda s: None, accept_gap=True)
    assert [int(r["SequenceNumber"]) for page in pages for r in page] == seqs  # from TRIM_HORIZON: here, the start itself


def test_a_range_every_record_of_which_is_gone_reads_as_empty_only_when_acknowledged(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    rng = SequenceRange(shard, seqs[0], seqs[4])
    for accept_gap in (False, True):
        faulty = FaultyKinesis(kinesis, trim={1: 10})  # the first record left is seqs[10], past the range's end
        faulty.refuse_start = True
        pages = iterate_range(faulty, stream, rng, ReadConfig(max_records_per_call=20), sleep=lambda s: None, accept_gap=accept_gap)
        if not accept_gap:
            with pytest.raises(DataLossError, match=rf"Kinesis refused the range start {seqs[0]}"):
                list(pages)
        else:
            assert list(pages) == []
    # Nothing left at all, up to the tip: an open shard whose every record was trimmed, and none written since.
    everything = FaultyKinesis(kinesis, trim=dict.fromkeys(range(1, 20), 10_000))
    everything.refuse_start = True
    assert list(iterate_range(everything, stream, rng, ReadConfig(max_records_per_call=20), sleep=lambda s: None, accept_gap=True)) == []
    everything = FaultyKinesis(kinesis, trim=dict.fromkeys(range(1, 20), 10_000))
    with pytest.raises(RangeReadError, match="could not read until the end sequence number of the range"):
        read(everything, stream, rng, ReadConfig(max_records_per_call=20))


def test_a_closed_shard_gone_from_the_stream_reads_as_empty_only_when_acknowledged(kinesis: Any, stream: str) -> None:
    # Kinesis drops a closed shard once its records are past retention; a batch in flight may still name it.
    gone = SequenceRange("shardId-000000000099", 10**50, 10**51, to_shard_end=True)
    with pytest.raises(StreamNotFoundError, match=rf"stream {stream}, shard shardId-000000000099"):
        list(iterate_range(kinesis, stream, gone, sleep=lambda s: None))
    assert list(iterate_range(kinesis, stream, gone, sleep=lambda s: None, accept_gap=True)) == []
    open_range = SequenceRange("shardId-000000000099", 10**50, 10**51)  # an open shard does not leave the stream
    with pytest.raises(StreamNotFoundError):
        list(iterate_range(kinesis, stream, open_range, sleep=lambda s: None, accept_gap=True))


def test_throttling_is_waited_out_and_counted(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream)
    faulty = FaultyKinesis(kinesis, errors={1: "ProvisionedThroughputExceededException", 2: "ProvisionedThroughputExceededException"})
    stats = ReadStats()
    assert read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]), stats=stats) == seqs
    assert stats.throttled == 2 and stats.throttled_seconds > 0


def test_throttling_past_the_budget_fails_naming_the_range(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    faulty = FaultyKinesis(kinesis, errors=dict.fromkeys(range(1, 10), "ProvisionedThroughputExceededException"))
    with pytest.raises(RangeReadError, match=rf"stream {stream}, range {shard} .*still throttled after 2 retries"):
        read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]), ReadConfig(max_throttle_retries=2))


def test_an_end_beyond_the_newest_record_fails_naming_stream_shard_and_range(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    rng = SequenceRange(shard, seqs[0], seqs[-1] + 10**20)
    with pytest.raises(RangeReadError, match=rf"stream {stream}, range {shard} \[{seqs[0]} .. .*could not read until the end"):
        read(kinesis, stream, rng)


def test_an_end_between_two_records_fails(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    with pytest.raises(RangeReadError, match=rf"no record has sequence number {seqs[2] + 1}"):
        read(kinesis, stream, SequenceRange(shard, seqs[0], seqs[2] + 1))


def test_a_first_record_that_is_not_the_start_is_a_gap_not_a_skip(kinesis: Any, stream: str) -> None:
    shard, seqs = shard_sequence_numbers(kinesis, stream, 40)
    faulty = FaultyKinesis(kinesis, drop_first_record=True)
    with pytest.raises(RangeReadError, match=rf"the first record is {seqs[1]}, not the range start {seqs[0]}"):
        read(faulty, stream, SequenceRange(shard, seqs[0], seqs[-1]))


def test_a_missing_stream_is_named(kinesis: Any) -> None:
    with pytest.raises(StreamNotFoundError, match="stream no-such-stream"):
        read(kinesis, "no-such-stream", SequenceRange("shardId-000000000000", 1, 2))
