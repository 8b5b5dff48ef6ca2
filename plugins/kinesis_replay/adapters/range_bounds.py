"""Where a range starts and ends: the first record after a checkpoint, and a shard's newest record before a bound."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from kinesis_replay.adapters.kinesis_client import EMPTY_AT_TIP, ShardCalls
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.ranges import parse_sequence_number
from kinesis_replay.core.state import StartPosition

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = dict[str, Any]  # a record exactly as boto3's GetRecords returns it


def _position_after(start: StartPosition | None) -> dict[str, Any]:
    """Where a shard with no checkpoint starts reading."""
    if start is None or start.kind == "TRIM_HORIZON":
        return {"ShardIteratorType": "TRIM_HORIZON"}
    if start.kind == "AT_TIMESTAMP" and start.timestamp is not None:
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": start.timestamp}
    raise ValueError(f"unresolved start position {start}")


@dataclass(frozen=True)
class NextRecord:
    """What follows a checkpoint: the next record, or nothing yet, or nothing ever (a closed shard read to its end)."""

    record: Record | None
    shard_ended: bool = False
    # The checkpoint record itself is gone (trimmed): records after it may be gone too.
    checkpoint_missing: bool = False
    millis_behind_latest: int | None = None  # how far the position after the checkpoint is behind the tip
    after: str | None = None  # the iterator just after the record, when its page ended with it


def first_record_after(
    client: KinesisClient,
    stream: str,
    shard_id: str,
    checkpoint: int | None,
    start: StartPosition | None,
    limits: ReadConfig | None = None,
    closed: bool = False,
    calls: ShardCalls | None = None,
) -> NextRecord:
    """The first record after ``checkpoint`` (or at the start position when there is none).

    With a checkpoint, one GetShardIterator(AT_SEQUENCE_NUMBER, checkpoint) and GetRecords(Limit=2)
    answer two questions at once: does the checkpoint record still exist, and what follows it.
    On real Kinesis an empty answer with MillisBehindLatest above 0 means "keep going", so the next
    iterator is followed until a record comes, the tip is reached, or the shard ends (no next
    iterator: SHARD_END). A closed shard can answer empty with a next iterator before the null one,
    so it is followed to the end.
    """
    shard = calls or ShardCalls(client, stream, shard_id, limits)
    what = f"stream {stream}, shard {shard_id}: GetRecords"
    if checkpoint is None:
        return _next_record(shard, shard.iterator(**_position_after(start)), what, closed, look_for=None)
    try:
        iterator = shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(checkpoint))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
            raise
        # Kinesis may refuse a sequence number it no longer holds: the checkpoint is gone.
        following = _next_record(shard, shard.iterator(ShardIteratorType="TRIM_HORIZON"), what, closed, look_for=None)
        return NextRecord(following.record, following.shard_ended, True, following.millis_behind_latest)
    return _next_record(shard, iterator, what, closed, look_for=checkpoint)


def _next_record(shard: ShardCalls, iterator: str | None, what: str, closed: bool, look_for: int | None) -> NextRecord:
    """The first record from ``iterator``, after skipping the record ``look_for`` if it comes first."""
    while iterator:
        page = shard.get_records(iterator, what, limit=1 if look_for is None else 2)
        records = page["Records"]
        behind = page.get("MillisBehindLatest")
        if records and look_for is not None:
            if parse_sequence_number(records[0]["SequenceNumber"]) != look_for:
                return NextRecord(records[0], checkpoint_missing=True, millis_behind_latest=behind)
            records, look_for = records[1:], None
        if records:
            return NextRecord(records[0], millis_behind_latest=behind, after=page.get("NextShardIterator") if len(records) == 1 else None)
        iterator = page.get("NextShardIterator")
        if iterator and not closed and page.get("MillisBehindLatest", 0) == 0:
            # At the tip. A checkpoint never seen here is gone, but nothing readable follows it yet.
            return NextRecord(None, checkpoint_missing=look_for is not None, millis_behind_latest=0)
    return NextRecord(None, shard_ended=True, checkpoint_missing=look_for is not None)


PROBE_RECORDS = 5  # records each probe asks for: a few KB at typical record sizes
MAX_PROBES = 48  # a search that has not closed by then ends at the newest record it found (still a valid end)
_FIRST_STEP_MS = 10  # the first probe looks this far back from the bound; the steps grow fourfold from there
DONE = -1
_NEWEST_MILLISECOND_PAGE = 500  # records put together share a millisecond: at most a PutRecords call's 500


@dataclass(frozen=True)
class RangeEnd:
    """Where an open shard's range ends: the newest record found that arrived before the bound."""

    end: int
    end_arrival: datetime
    more_after: bool  # a record that arrived at or after the bound was seen: the shard holds more than the range
    probes: int  # GetShardIterator(AT_TIMESTAMP) and GetRecords pairs the search took
    records_read: int  # what it read: never the range's records, a handful per probe


def find_end(
    client: KinesisClient,
    stream: str,
    shard_id: str,
    start: Record,
    before: datetime,
    limits: ReadConfig | None = None,
    millis_behind: int | None = None,
    calls: ShardCalls | None = None,
    after_start: str | None = None,
) -> RangeEnd:
    """The newest record of an open shard that arrived before ``before``, at or after ``start``, found by probes.

    A probe is GetShardIterator(AT_TIMESTAMP, t) and one GetRecords of PROBE_RECORDS records: it tells whether
    any record arrived between t and the bound, and which. The search keeps the newest such record (at first
    ``start``, which arrived before the bound) and an instant after which none arrived before the bound, and
    narrows the two together: it probes first where MillisBehindLatest puts the tip (``millis_behind`` is the
    start page's), else just before the bound, stepping back fourfold while nothing is found, then halving.
    It stops when a probe's page reaches past the bound or ends at the tip, or when the two meet. The cost is a
    handful of records per probe and about log2 of the searched span in milliseconds probes at worst; it never
    reads the range. Records that arrive during the search arrive after the bound, so they cannot move the
    answer; the answer is a record that exists, so the range it ends is closed and fixed before any read.
    """
    search = _EndSearch(calls or ShardCalls(client, stream, shard_id, limits), start, before)
    return search.run(millis_behind, after_start)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class _EndSearch:
    """The state of one end search: the newest record known before the bound, and the window left to search."""

    def __init__(self, shard: ShardCalls, start: Record, before: datetime) -> None:
        self.shard = shard
        self.what = f"stream {shard.stream}, shard {shard.shard_id}: finding the range end"
        self.best: Record = start
        self.bound = max(_ms(before), _ms(start["ApproximateArrivalTimestamp"]) + 1)  # at least the start is before it
        self.lo = _ms(start["ApproximateArrivalTimestamp"])  # the best record arrived at lo
        self.hi = self.bound  # no record arrived in [hi, bound)
        self.more_after = False
        self.probes = 0
        self.records_before = shard.stats.records
        self.galloping = True  # nothing found after the start yet: step back from the bound

    def run(self, millis_behind: int | None, after_start: str | None = None) -> RangeEnd:
        if millis_behind == 0 and after_start is not None:
            # The start's page ended in the newest record's millisecond: read on from it, no probe needed.
            self._read_newest_millisecond(after_start)
            return self._result()
        hint = None if millis_behind is None else self.lo + millis_behind
        while self.probes < MAX_PROBES:
            if self.hi - self.lo <= 1:
                # No record arrived after the best one's millisecond and before the bound: what is left is that
                # millisecond's records after it (records put together share one).
                self._read_newest_millisecond(self.shard.iterator(
                    ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=self.best["SequenceNumber"]
                ))  # fmt: skip
                break
            hint = self._probe(self._next_probe(hint))
            if hint == DONE:
                break
        return self._result()

    def _next_probe(self, hint: int | None) -> int:
        if hint is not None and self.lo <= hint < self.hi:
            return hint  # where MillisBehindLatest puts the tip
        if self.galloping:
            step = _FIRST_STEP_MS << (2 * self.probes)  # fourfold each probe
            return max(self.lo + 1, self.bound - step)
        return (self.lo + self.hi) // 2

    def _probe(self, at: int) -> int | None:
        """Probe at ``at`` (ms) and narrow the window; returns where MillisBehindLatest puts the tip, or DONE."""
        self.probes += 1
        page = self._page_at(at)
        if page is None:
            self.hi = at  # nothing has arrived since ``at``
            return None
        records: list[Record] = page["Records"]
        below = self._keep(records)
        if len(below) < len(records):
            self.more_after = True
            if below:
                return DONE  # the page crossed the bound: its last record before it is the newest
            self.hi = at  # nothing arrived in [at, bound)
            return None
        self.galloping = False
        self.lo = _ms(self.best["ApproximateArrivalTimestamp"])
        behind: int = page.get("MillisBehindLatest", 0)
        if behind == 0:
            # The page ends in the newest record's millisecond. A short page is no proof that it is the newest
            # record: Kinesis may answer fewer records than asked for, and that millisecond may hold more.
            self._read_newest_millisecond(page.get("NextShardIterator"))
            return DONE
        return self.lo + behind

    def _read_newest_millisecond(self, iterator: str | None) -> None:
        """Read on from ``iterator``, which is in the newest record's millisecond, to that record.

        Records put together (one PutRecords call) can share a millisecond; this reads only those.
        """
        empty = 0
        while iterator:
            page = self.shard.get_records(iterator, f"{self.what}: GetRecords", limit=_NEWEST_MILLISECOND_PAGE)
            records = page["Records"]
            if not records:
                empty += 1
                if page.get("MillisBehindLatest", 0) == 0 or empty >= EMPTY_AT_TIP:
                    return  # the tip
                iterator = page.get("NextShardIterator")  # Kinesis may answer empty pages before the records
                continue
            empty = 0
            below = self._keep(records)
            if len(below) < len(records):
                self.more_after = True
                return
            iterator = page.get("NextShardIterator")

    def _keep(self, records: list[Record]) -> list[Record]:
        """The page's records before the first that arrived at or after the bound; the newest becomes the best.

        A page that starts in the start's millisecond may begin before the start (records put together share
        one): only a record after the best one replaces it.
        """
        below = list(itertools.takewhile(lambda r: _ms(r["ApproximateArrivalTimestamp"]) < self.bound, records))
        if below and parse_sequence_number(below[-1]["SequenceNumber"]) > parse_sequence_number(self.best["SequenceNumber"]):
            self.best = below[-1]
        return below

    def _page_at(self, at: int) -> dict[str, Any] | None:
        """The first records at or after ``at``; None when there are none yet."""
        try:
            iterator = self.shard.iterator(ShardIteratorType="AT_TIMESTAMP", Timestamp=datetime.fromtimestamp(at / 1000, UTC))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
                raise
            return None  # a timestamp ahead of Kinesis's clock
        for _ in range(EMPTY_AT_TIP):
            if not iterator:
                return None
            page = self.shard.get_records(iterator, f"{self.what}: GetRecords", limit=PROBE_RECORDS)
            if page["Records"] or page.get("MillisBehindLatest", 0) == 0:
                return page if page["Records"] else None
            iterator = page.get("NextShardIterator")  # Kinesis may answer empty pages before the records
        return None

    def _result(self) -> RangeEnd:
        return RangeEnd(
            end=parse_sequence_number(self.best["SequenceNumber"]), end_arrival=self.best["ApproximateArrivalTimestamp"],
            more_after=self.more_after, probes=self.probes, records_read=self.shard.stats.records - self.records_before,
        )  # fmt: skip
