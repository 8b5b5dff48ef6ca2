"""Reading a closed range of one shard, page by page, checking every record against the range."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from kinesis_replay.adapters.kinesis_client import EMPTY_AT_TIP, RETENTION_MARGIN, ReadStats, ShardCalls
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import (
    DataLossError,
    RangeReadError,
    StreamNotFoundError,
)
from kinesis_replay.core.formats import duration
from kinesis_replay.core.ranges import SequenceRange, parse_sequence_number

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = dict[str, Any]  # a record exactly as boto3's GetRecords returns it


def page_limit(records: list[Record], limits: ReadConfig) -> int:
    """The next GetRecords Limit: as many records as fill ``limits.page_bytes`` at this page's mean size."""
    mean = max(1.0, sum(len(r["Data"]) for r in records) / len(records))
    return max(1, min(limits.max_records_per_call, int(limits.page_bytes / mean)))


def iterate_range(
    client: KinesisClient,
    stream: str,
    rng: SequenceRange,
    limits: ReadConfig | None = None,
    stats: ReadStats | None = None,
    sleep: Callable[[float], None] = time.sleep,
    accept_gap: bool = False,
    retention: timedelta | None = None,
) -> Iterator[list[Record]]:
    """Yield the records of a closed range, page by page, exactly: from ``start`` to ``end`` inclusive.

    The first fetch uses AT_SEQUENCE_NUMBER(start), later ones follow the next iterator; an expired
    iterator is re-opened AT_SEQUENCE_NUMBER of the last record read, which must come first again. A first record that is not
    ``start`` is a gap and fails, unless an operator acknowledged the loss (``accept_gap``): then reading starts at the
    first record left, and a range every record of which is gone (or whose closed shard left the stream) reads as
    empty. An open shard that runs dry before ``end`` fails; a closed shard is read until GetRecords returns no
    next iterator (SHARD_END).

    Near the stream's ``retention``, a page may also begin past records trimmed while the range was read: Kinesis
    starts a next iterator over trimmed records at the first record left, without an error. So once the last record
    read is within ``RETENTION_MARGIN`` of the retention, each page after it is checked: that record must still be in
    the stream (records are trimmed oldest first, so everything after it then was too). One that is gone fails the
    range, or with the loss acknowledged is noted in ``stats.unconfirmed`` for verify to record as a gap. Without a
    ``retention`` no page is checked.

    The checks are RangeChecker's, which the enhanced fan-out reader (efo_reader.iterate_range_efo) shares: this
    function only fetches the pages.
    """
    checker = RangeChecker(ShardCalls(client, stream, rng.shard_id, limits, stats, sleep), rng, accept_gap, retention)
    yield from checked_pages(checker, _GetRecordsPages(checker).pages())


def checked_pages(checker: RangeChecker, pages: Iterator[list[Record]]) -> Iterator[list[Record]]:
    """The range's records from ``pages``, a reader's raw pages in stream order (ending at SHARD_END, or when the
    reader found the range wholly gone), each page checked and cut at the range's end; the reader is closed as soon
    as the end record is read. A reader learns what was read from ``checker.last`` between pages."""
    rng = checker.rng
    try:
        for page in pages:
            records = checker.admit(page)
            if not records:
                continue
            tail = parse_sequence_number(records[-1]["SequenceNumber"])
            if tail > rng.end:
                kept = checker.up_to_end(records, tail)
                if kept:
                    yield kept
                return
            checker.last, checker.last_arrival = tail, records[-1]["ApproximateArrivalTimestamp"]
            yield records
            del records, page  # a reader holds one page at a time
            if tail == rng.end and not rng.to_shard_end:
                return
        if not checker.wholly_gone:  # else an acknowledged gap, found at an open shard's tip or a closed shard's end
            checker.at_shard_end()
    finally:
        close = getattr(pages, "close", None)
        if close is not None:
            close()


class _GetRecordsPages:
    """A range's pages by GetShardIterator and GetRecords: the iterator at the start, each next one, an expired one reopened."""

    def __init__(self, checker: RangeChecker) -> None:
        self.checker, self.shard = checker, checker.shard
        self.limit = min(self.shard.limits.first_page_records, self.shard.limits.max_records_per_call)
        self.iterator = self._open_at_start()

    def _open_at_start(self) -> str | None:
        """An iterator at the range's start; a start Kinesis no longer holds goes to RangeChecker.start_refused."""
        try:
            return self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(self.checker.rng.start))
        except StreamNotFoundError:
            if not self.checker.shard_gone():
                raise
            return None
        except ClientError as exc:
            self.checker.start_refused(exc, "GetShardIterator")
            return self.shard.iterator(ShardIteratorType="TRIM_HORIZON")

    def pages(self) -> Iterator[list[Record]]:
        while self.iterator is not None:
            records = self._next_page()
            if records:
                yield records
                self.limit = page_limit(records, self.shard.limits)
                del records

    def _next_page(self) -> list[Record]:
        """The next page's records, possibly none; the page itself is let go before they are returned."""
        assert self.iterator is not None
        try:
            page = self.shard.get_records(self.iterator, f"{self.checker.what}: GetRecords", limit=self.limit)
        except ClientError as exc:
            self._reopen(exc)
            return []
        records: list[Record] = page["Records"]
        self.iterator, at_tip = page.get("NextShardIterator"), page.get("MillisBehindLatest", 0) == 0
        if not records and self.iterator is not None and self.checker.empty(at_tip):
            self.iterator = None  # an acknowledged gap: nothing of the range is left
        return records

    def _reopen(self, exc: ClientError) -> None:
        """An expired iterator is opened again at the last record read; any other error fails the range."""
        checker = self.checker
        if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
            raise RangeReadError(f"{checker.what}: GetRecords failed: {exc}") from exc
        self.shard.stats.expired_iterators += 1
        log.info("%s: iterator expired after %s; re-opening", checker.what, checker.last)
        if checker.last is None:
            self.iterator = self._open_at_start()
            return
        # At the last record read, not after it: an iterator after a record that retention trimmed meanwhile starts at
        # the first record left, and every record between them would be skipped without a word. Its first record
        # must be the last one read (dropped, as read already); anything else means records are gone.
        try:
            self.iterator = self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(checker.last))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
                raise RangeReadError(f"{checker.what}: GetShardIterator after an expired iterator failed: {exc}") from exc
            raise checker.gone(f"Kinesis refused it ({exc})") from exc  # a sequence number it no longer holds
        checker.reopened(checker.last)


class RangeChecker:
    """What reading one range keeps between pages, and the checks each page must pass, whichever way it is read.

    Both readers (GetRecords here, SubscribeToShard in efo_reader) hand it their raw pages through ``checked_pages``,
    and tell it what they met: a start Kinesis refused (``start_refused``), a closed shard gone (``shard_gone``), an
    empty page (``empty``), a position reopened at the last record read (``reopened``). ``shard`` serves the checks'
    own calls (the retention check's GetShardIterator and GetRecords), and counts what was read.
    """

    def __init__(self, shard: ShardCalls, rng: SequenceRange, accept_gap: bool, retention: timedelta | None = None) -> None:
        self.shard, self.rng, self.accept_gap, self.retention = shard, rng, accept_gap, retention
        self.what = f"stream {shard.stream}, range {rng.describe()}"
        self.last: int | None = None  # the last record yielded
        self.last_arrival: datetime | None = None  # when it arrived: how near it is to the retention
        self.wholly_gone = False  # an acknowledged gap: every record of the range is gone
        self.reopened_at: int | None = None  # a position reopened at the last record read: it must come first, again
        self.reopened_why = "the iterator expired"
        self.empty_at_tip = 0

    def shard_gone(self) -> bool:
        """The shard is no longer in the stream. With the loss acknowledged, a closed shard's range reads as empty
        (Kinesis drops a closed shard once its records are past retention): True. Else False: the reader's error stands."""
        if not (self.accept_gap and self.rng.to_shard_end):
            return False
        self._wholly_gone("the closed shard is no longer in the stream")
        return True

    def start_refused(self, exc: ClientError, call: str) -> None:
        """Kinesis refused a position at the range's start. A sequence number it no longer holds (trimmed): with the
        loss acknowledged, the caller reads from the first record left (and the start check logs the gap); anything
        else fails the range."""
        if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
            raise RangeReadError(f"{self.what}: {call} at the range start failed: {exc}") from exc
        if self.accept_gap:
            return
        raise DataLossError(
            f"{self.what}: Kinesis refused the range start {self.rng.start} ({exc.response['Error'].get('Message', '')}): "
            "trimmed by retention? Records from it may be lost. Nothing was read. To accept the loss, trigger a run "
            f'with {{"acknowledge_data_loss": ["{self.rng.shard_id}"]}}'
        ) from exc

    def reopened(self, at: int, why: str = "the iterator expired") -> None:
        """The reader reopened at the record ``at``, the last one read, because of ``why``: its next page must begin with it."""
        self.reopened_at, self.reopened_why = at, why

    def admit(self, records: list[Record]) -> list[Record]:
        """A raw page's records that are new, after the page was checked: the first record against the range's start,
        a reopened position against the last record read, a page near the retention against the stream, and every
        page against the last record read (a page that does not follow it is not this range's reader's)."""
        if not records:
            return records
        self.empty_at_tip = 0
        reopened = self.reopened_at is not None
        if reopened:  # its first record was the last one read: nothing before the page was skipped
            records = self._after_reopened(records)
            if not records:
                return records
        first = parse_sequence_number(records[0]["SequenceNumber"])
        if self.last is None:
            self._check_start(first)
        elif first <= self.last:
            raise RangeReadError(
                f"{self.what}: a page begins at {first}, not after {self.last}, the last record read: the reader's "
                "position is not its own (a subscription taken over by another reader of the same shard?)"
            )
        elif not reopened and self._at_risk():
            self._confirm(first)
        return records

    def _after_reopened(self, records: list[Record]) -> list[Record]:
        """The first page after a reopen, without the last record read; failing when that record is gone."""
        first = parse_sequence_number(records[0]["SequenceNumber"])
        if first != self.reopened_at:
            raise self.gone(f"the reopened position's first record is {first}")
        self.reopened_at = None
        return records[1:]

    def gone(self, how: str, why: str | None = None) -> RangeReadError:
        return RangeReadError(
            f"{self.what}: record {self.last}, the last one read before {why or self.reopened_why}, is gone ({how}): records after "
            "it were trimmed by retention while the range was read, and may be lost. Nothing of this attempt is committed; "
            "the next run checks the range against the stream's retention"
        )

    def empty(self, at_tip: bool) -> bool:
        """An empty page of a shard that goes on. An open shard with nothing more at its tip, several times in a row,
        will never reach the range's end: that fails, or with the loss acknowledged and nothing read, the range is
        wholly gone (True: stop reading)."""
        if not at_tip or self.rng.to_shard_end:
            return False
        self.empty_at_tip += 1
        if self.empty_at_tip >= EMPTY_AT_TIP and self.last is None and self.accept_gap:
            self._wholly_gone("the shard holds nothing from its first record left to its tip")
            return True
        if self.empty_at_tip >= EMPTY_AT_TIP:
            raise RangeReadError(
                f"{self.what}: could not read until the end sequence number of the range: "
                f"the shard has nothing after {self.last if self.last is not None else 'the start'}"
            )
        return False

    def _check_start(self, first: int) -> None:
        if first == self.rng.start:
            return
        if not self.accept_gap:
            raise RangeReadError(
                f"{self.what}: the first record is {first}, not the range start {self.rng.start}: "
                "records between them are gone (trimmed by retention?)"
            )
        log.warning("%s: acknowledged gap: records from %d up to %d are gone", self.what, self.rng.start, first)

    def up_to_end(self, records: list[Record], tail: int) -> list[Record]:
        """A page that runs past the range's end: what is inside, which must end with the end record."""
        if self.rng.to_shard_end:
            raise RangeReadError(f"{self.what}: record {tail} lies past the shard's ending sequence number")
        keep = [r for r in records if parse_sequence_number(r["SequenceNumber"]) <= self.rng.end]
        if not keep and self.last is None and self.accept_gap:
            self._wholly_gone(f"the first record left is {tail}, after the range's end")
            return keep
        if not keep or parse_sequence_number(keep[-1]["SequenceNumber"]) != self.rng.end:
            raise RangeReadError(
                f"{self.what}: could not read until the end sequence number of the range: "
                f"no record has sequence number {self.rng.end} (the next after {self.last} is past it)"
            )
        return keep

    def at_shard_end(self) -> None:
        """No next iterator: the end of a closed shard's range, or an open shard that ended before the range did."""
        if not self.rng.to_shard_end:
            raise RangeReadError(
                f"{self.what}: could not read until the end sequence number of the range: the shard ended after {self.last}"
            )
        if self.last is None and not self.accept_gap:
            raise RangeReadError(f"{self.what}: reached SHARD_END without reading the range start")
        if self.last is None:
            self._wholly_gone("the closed shard holds none of it any more")
        elif self._at_risk():  # the pages since the last record read may have been emptied by retention
            self._confirm(None)

    def _at_risk(self) -> bool:
        """Whether records after the last one read could have been trimmed before the page after it was read."""
        if self.retention is None or self.last_arrival is None:
            return False
        return datetime.now(UTC) - self.last_arrival >= self.retention - RETENTION_MARGIN

    def _confirm(self, first: int | None) -> None:
        """After a page read near the retention: the last record read before it must still be in the stream.

        Kinesis trims a shard's records oldest first, so while that record is there, so is every record after it, and
        the page, read before this check, skipped none. Once it is gone, the page may have begun past records trimmed
        meanwhile (``first`` is the page's first record; None: the closed shard ended). That fails the range, unless
        an operator acknowledged the loss: then it is noted, for verify to record as a gap, and reading goes on.
        """
        assert self.last is not None and self.last_arrival is not None and self.retention is not None
        if self._holds(self.last):
            return
        after = "the shard's end" if first is None else f"{first}, the next page's first record,"
        if not self.accept_gap:
            age, kept = duration((datetime.now(UTC) - self.last_arrival).total_seconds()), duration(self.retention.total_seconds())
            raise DataLossError(
                f"{self.what}: record {self.last}, the last one read, arrived {age} ago and is "
                f"no longer in the stream, which keeps records {kept}: records between it and {after} may have "
                "been trimmed before they were read. Nothing of this attempt is committed. To accept the loss, trigger "
                f'a run with {{"acknowledge_data_loss": ["{self.rng.shard_id}"]}}'
            )
        self.shard.stats.unconfirmed.append((self.last, first))
        log.warning("%s: acknowledged gap: record %d is gone, so records between it and %s may be lost", self.what, self.last, after)

    def _holds(self, sequence_number: int) -> bool:
        """Whether the shard still holds ``sequence_number``: an iterator at it must begin with it."""
        try:
            iterator = self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(sequence_number))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
                raise RangeReadError(f"{self.what}: GetShardIterator at {sequence_number} failed: {exc}") from exc
            return False  # a sequence number Kinesis no longer holds
        for _ in range(EMPTY_AT_TIP):  # Kinesis may answer empty pages before the records
            if not iterator:
                return False
            page = self.shard.get_records(iterator, f"{self.what}: GetRecords at {sequence_number}", limit=1)
            if page["Records"]:
                return parse_sequence_number(page["Records"][0]["SequenceNumber"]) == sequence_number
            iterator = page.get("NextShardIterator")
        return False

    def _wholly_gone(self, how: str) -> None:
        """An acknowledged loss of the whole range: it reads as empty, and verify records the gap."""
        self.wholly_gone = True
        log.warning("%s: acknowledged gap: every record of the range is gone (%s)", self.what, how)
