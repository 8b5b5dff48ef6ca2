"""Kinesis through boto3 only: list shards, find a range's start and a shard's tip, iterate a closed range."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.retries import quota, standard

from kinesis_replay.config import ReadConfig
from kinesis_replay.errors import EndpointUnreachableError, RangeReadError, StreamNotFoundError
from kinesis_replay.ranges import SequenceRange, ShardInfo, parse_sequence_number
from kinesis_replay.state import StartPosition

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = dict[str, Any]  # a record exactly as boto3's GetRecords returns it

# Kinesis answers these when a shard's or an account's call rate is exceeded; they are the only
# errors worth waiting out. Everything else is wrapped with what was being done, and raised.
RETRYABLE = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})

# One retry policy for every Kinesis client, the DAG tasks' and the Spark job's, each error retried by one layer:
# - throttling (the codes above, HTTP 429) by call() alone, up to ReadConfig.max_throttle_retries times, with
#   waits that keep to the shard's budget, each one counted in ReadStats.throttled;
# - what the network or Kinesis's servers get wrong (connection errors, timeouts, 5xx) by botocore, in its
#   standard mode, up to TRANSPORT_ATTEMPTS calls in all, with its own backoff.
# botocore's standard mode would retry throttling too, hidden from call() and its count, and on top of it.
TRANSPORT_ATTEMPTS = 5
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": TRANSPORT_ATTEMPTS}, connect_timeout=10, read_timeout=60)


def leave_throttling_to_call(client: KinesisClient) -> KinesisClient:
    """Give a Kinesis client made with CLIENT_CONFIG the policy above; returns the client.

    Its standard retry handler is swapped for one with the same backoff and retry quota whose conditions
    leave throttling out: botocore's transient-error checks only.
    """
    events, name = client.meta.events, client.meta.service_model.service_id.hyphenize()
    adapter = standard.RetryEventAdapter()
    detector = standard.ThrottlingErrorDetector(adapter)
    retry_quota = standard.RetryQuotaChecker(quota.RetryQuota(), detector)
    handler = standard.RetryHandler(
        retry_policy=standard.RetryPolicy(
            retry_checker=_AllOf(standard.MaxAttemptsChecker(TRANSPORT_ATTEMPTS), standard.TransientRetryableChecker()),
            retry_backoff=standard.ExponentialBackoff(service_name=name, throttling_detector=detector),
        ),
        retry_event_adapter=adapter,
        retry_quota=retry_quota,  # type: ignore[arg-type]  # the stubs say RetryQuota; botocore passes the checker, as here
        service_name=name,
    )
    events.unregister(f"needs-retry.{name}", unique_id=f"retry-config-{name}")
    events.register(f"needs-retry.{name}", handler.needs_retry, unique_id=f"retry-config-{name}")  # type: ignore[arg-type]
    events.register(f"after-call.{name}", retry_quota.release_retry_quota)
    return client


class _AllOf(standard.BaseRetryableChecker):
    """Retryable when every checker says so (botocore has OrRetryChecker only)."""

    def __init__(self, *checkers: Any) -> None:
        self.checkers = checkers

    def is_retryable(self, context: Any) -> bool:
        return all(c.is_retryable(context) for c in self.checkers)


# An empty response with MillisBehindLatest 0 means the iterator is at the tip. Planning takes the first
# one at its word; the range reader, which fails the batch on it, asks this many times in a row.
_EMPTY_AT_TIP = 3


@dataclass
class ReadStats:
    """What reading cost: calls, bytes, throttles waited out, time spent keeping to the budget."""

    get_records_calls: int = 0
    records: int = 0
    bytes: int = 0
    throttled: int = 0
    throttled_seconds: float = 0.0
    paced_seconds: float = 0.0
    expired_iterators: int = 0
    millis_behind_latest: int | None = None


class ShardBudget:
    """Keeps one shard's reads within its budget: calls per second, and bytes per second averaged over calls.

    Before each call it waits until the call fits: at least 1/rate after the previous one, and long
    enough after it for the bytes that call returned to fit in the byte rate. Kinesis's own rule is
    the same in effect: a call that returns 10 MB is followed by 5 seconds in which reads are refused.
    """

    def __init__(self, limits: ReadConfig, stats: ReadStats, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.limits, self.stats, self.clock, self.sleep = limits, stats, clock, sleep
        self.next_get_records = 0.0
        self.next_get_shard_iterator = 0.0

    def _wait_until(self, at: float) -> None:
        wait = at - self.clock()
        if wait > 0:
            self.stats.paced_seconds += wait
            self.sleep(wait)

    def before_get_records(self) -> None:
        self._wait_until(self.next_get_records)

    def after_get_records(self, records: list[Record]) -> None:
        size = sum(len(r["Data"]) + len(r["PartitionKey"]) for r in records)
        self.stats.records += len(records)
        self.stats.bytes += size
        now = self.clock()
        self.next_get_records = now + max(1 / self.limits.get_records_per_second, size / self.limits.bytes_per_second)

    def before_get_shard_iterator(self) -> None:
        self._wait_until(self.next_get_shard_iterator)
        self.next_get_shard_iterator = self.clock() + 1 / self.limits.get_shard_iterator_per_second


def call(
    fn: Callable[..., T],
    what: str,
    limits: ReadConfig,
    stats: ReadStats | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **kwargs: Any,
) -> T:
    """Call one Kinesis API, waiting out throttling with doubling, jittered waits (as Spark's retryOrTimeout)."""
    attempt = 0
    while True:
        try:
            return fn(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in RETRYABLE and attempt < limits.max_throttle_retries:
                wait = min(limits.throttle_max_seconds, limits.throttle_base_seconds * 2**attempt)
                wait = random.uniform(wait / 2, wait)  # full jitter would let many shards retry in step
                attempt += 1
                if stats is not None:
                    stats.throttled += 1
                    stats.throttled_seconds += wait
                log.info("%s: throttled (%s), retry %d in %.2fs", what, code, attempt, wait)
                sleep(wait)
                continue
            if code == "ResourceNotFoundException":
                raise StreamNotFoundError(f"{what}: {exc.response['Error'].get('Message', code)}") from exc
            if code in RETRYABLE:
                raise RangeReadError(f"{what}: still throttled after {attempt} retries ({code})") from exc
            raise
        except EndpointConnectionError as exc:
            raise EndpointUnreachableError(f"{what}: cannot reach the Kinesis endpoint: {exc}") from exc


def list_shards(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> list[ShardInfo]:
    """Every shard of the stream, open and closed, paginated (ListShards returns at most 1,000 a call)."""
    limits = limits or ReadConfig()
    shards: list[ShardInfo] = []
    kwargs: dict[str, Any] = {"StreamName": stream}
    while True:
        page = call(client.list_shards, f"stream {stream}: ListShards", limits, **kwargs)
        for s in page["Shards"]:
            seq = s["SequenceNumberRange"]
            parents = tuple(p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId")) if p)
            ending = seq.get("EndingSequenceNumber")
            shards.append(
                ShardInfo(
                    shard_id=s["ShardId"],
                    parent_shard_ids=parents,
                    starting_sequence_number=parse_sequence_number(seq["StartingSequenceNumber"]),
                    ending_sequence_number=None if ending is None else parse_sequence_number(ending),
                )
            )
        token = page.get("NextToken")
        if not token:
            return shards
        kwargs = {"NextToken": token}  # with a NextToken, ListShards refuses the StreamName


class ShardCalls:
    """One shard's GetShardIterator and GetRecords calls: kept within the budget, throttling waited out, counted."""

    def __init__(self, client: KinesisClient, stream: str, shard_id: str, limits: ReadConfig | None = None,
                 stats: ReadStats | None = None, sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.client, self.stream, self.shard_id = client, stream, shard_id
        self.limits = limits or ReadConfig()
        self.stats = stats if stats is not None else ReadStats()
        self.sleep = sleep
        self.budget = ShardBudget(self.limits, self.stats, sleep=sleep)

    def iterator(self, **position: Any) -> str | None:
        self.budget.before_get_shard_iterator()
        response = call(
            self.client.get_shard_iterator,
            f"stream {self.stream}, shard {self.shard_id}: GetShardIterator({position['ShardIteratorType']})",
            self.limits, self.stats, self.sleep, StreamName=self.stream, ShardId=self.shard_id, **position,
        )  # fmt: skip
        iterator: str | None = response.get("ShardIterator")
        return iterator

    def get_records(self, iterator: str, what: str, limit: int | None = None) -> dict[str, Any]:
        self.budget.before_get_records()
        response = call(
            self.client.get_records, what, self.limits, self.stats, self.sleep,
            ShardIterator=iterator, Limit=limit or self.limits.max_records_per_call,
        )  # fmt: skip
        page = cast(dict[str, Any], response)  # its records are read as plain dicts (Record) from here on
        self.stats.get_records_calls += 1
        self.stats.millis_behind_latest = page.get("MillisBehindLatest")
        self.budget.after_get_records(page["Records"])
        return page


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


def first_record_after(
    client: KinesisClient,
    stream: str,
    shard_id: str,
    checkpoint: int | None,
    start: StartPosition | None,
    limits: ReadConfig | None = None,
    closed: bool = False,
) -> NextRecord:
    """The first record after ``checkpoint`` (or at the start position when there is none).

    With a checkpoint, one GetShardIterator(AT_SEQUENCE_NUMBER, checkpoint) and GetRecords(Limit=2)
    answer two questions at once: does the checkpoint record still exist, and what follows it.
    On real Kinesis an empty answer with MillisBehindLatest above 0 means "keep going", so the next
    iterator is followed until a record comes, the tip is reached, or the shard ends (no next
    iterator: SHARD_END). A closed shard can answer empty with a next iterator before the null one,
    so it is followed to the end.
    """
    shard = ShardCalls(client, stream, shard_id, limits)
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
        return NextRecord(following.record, following.shard_ended, checkpoint_missing=True)
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
            return NextRecord(records[0], millis_behind_latest=behind)
        iterator = page.get("NextShardIterator")
        if iterator and not closed and page.get("MillisBehindLatest", 0) == 0:
            # At the tip. A checkpoint never seen here is gone, but nothing readable follows it yet.
            return NextRecord(None, checkpoint_missing=look_for is not None, millis_behind_latest=0)
    return NextRecord(None, shard_ended=True, checkpoint_missing=look_for is not None)


def stream_retention(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> timedelta:
    """How long the stream keeps records (24 hours to 365 days)."""
    summary = call(client.describe_stream_summary, f"stream {stream}: DescribeStreamSummary", limits or ReadConfig(), StreamName=stream)
    return timedelta(hours=int(summary["StreamDescriptionSummary"]["RetentionPeriodHours"]))


@dataclass(frozen=True)
class Tip:
    """An open shard's newest record, and what the last window read on the way (for estimates)."""

    end: int
    end_arrival: datetime
    window_records: int  # records read in the last window
    window_bytes: int
    window_since: datetime  # where that window began (the range start's arrival if it reached back to it)
    from_start: bool  # the window began at the range start: its counts are the range's exactly

    def estimate(self, start_arrival: datetime) -> tuple[int, int]:
        """Records and bytes of the whole range: exact from the start, else the window's rate over the range's span."""
        if self.from_start:
            return self.window_records, self.window_bytes
        span = (self.end_arrival - start_arrival).total_seconds()
        window = max((self.end_arrival - self.window_since).total_seconds(), 1e-3)
        scale = max(1.0, span / window)
        return round(self.window_records * scale), round(self.window_bytes * scale)


def find_tip(
    client: KinesisClient,
    stream: str,
    shard_id: str,
    start: Record,
    now: datetime,
    limits: ReadConfig | None = None,
    window: timedelta = timedelta(seconds=10),
) -> Tip:
    """The sequence number of the newest record in an open shard, without reading its backlog.

    Reads from AT_TIMESTAMP(now - window) to the tip, doubling the window backwards while it is
    empty, and falls back to reading from ``start`` once the window reaches it. The cost is the
    last window's records, not the backlog. Records that arrive while this runs may extend the tip;
    any record seen is a valid end, so the clock decides only when reading stops.
    """
    shard = ShardCalls(client, stream, shard_id, limits)
    start_seq = parse_sequence_number(start["SequenceNumber"])
    start_arrival: datetime = start["ApproximateArrivalTimestamp"]
    what = f"stream {stream}, shard {shard_id}: finding the tip"
    while True:
        since = now - window
        if since <= start_arrival:
            position: dict[str, Any] = {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": str(start_seq)}
        else:
            position = {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": since}
        before = (shard.stats.records, shard.stats.bytes)
        newest = _read_to_tip(shard, position, what)
        if newest is not None and newest[0] >= start_seq:
            from_start = "StartingSequenceNumber" in position
            return Tip(
                end=newest[0], end_arrival=newest[1],
                window_records=shard.stats.records - before[0], window_bytes=shard.stats.bytes - before[1],
                window_since=start_arrival if from_start else since, from_start=from_start,
            )  # fmt: skip
        if "StartingSequenceNumber" in position:
            # The start record exists (planning just read it); an empty read from it means it vanished.
            raise RangeReadError(f"{what}: the range start {start_seq} could not be read back")
        window *= 2


def _read_to_tip(shard: ShardCalls, position: dict[str, Any], what: str) -> tuple[int, datetime] | None:
    """The newest record's sequence number and arrival, reading from ``position`` to the tip."""
    iterator = shard.iterator(**position)
    newest: tuple[int, datetime] | None = None
    while iterator:
        page = shard.get_records(iterator, what)
        records = page["Records"]
        if records:
            newest = parse_sequence_number(records[-1]["SequenceNumber"]), records[-1]["ApproximateArrivalTimestamp"]
        elif page.get("MillisBehindLatest", 0) == 0:
            break
        iterator = page.get("NextShardIterator")
    return newest


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
) -> Iterator[list[Record]]:
    """Yield the records of a closed range, page by page, exactly: from ``start`` to ``end`` inclusive.

    The first fetch uses AT_SEQUENCE_NUMBER(start), later ones follow the next iterator; an expired
    iterator is re-opened AFTER_SEQUENCE_NUMBER of the last record read. A first record that is not
    ``start`` is a gap and fails, unless an operator acknowledged the loss (``accept_gap``). An open
    shard that runs dry before ``end`` fails; a closed shard is read until GetRecords returns no
    next iterator (SHARD_END).
    """
    reader = _RangeReader(ShardCalls(client, stream, rng.shard_id, limits, stats, sleep), rng, accept_gap)
    while reader.iterator is not None:
        records = reader.next_page()
        if not records:
            continue
        tail = parse_sequence_number(records[-1]["SequenceNumber"])
        if tail > rng.end:
            yield reader.up_to_end(records, tail)
            return
        reader.last = tail
        yield records
        del records  # a reader holds one page at a time
        if tail == rng.end and not rng.to_shard_end:
            return
    reader.at_shard_end()


class _RangeReader:
    """What reading one range keeps between pages, and the checks each page must pass."""

    def __init__(self, shard: ShardCalls, rng: SequenceRange, accept_gap: bool) -> None:
        self.shard, self.rng, self.accept_gap = shard, rng, accept_gap
        self.what = f"stream {shard.stream}, range {rng.describe()}"
        self.last: int | None = None  # the last record yielded
        self.empty_at_tip = 0
        self.limit = min(shard.limits.first_page_records, shard.limits.max_records_per_call)
        self.iterator = shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(rng.start))

    def next_page(self) -> list[Record]:
        """The next page's records, possibly none; the page itself is let go before they are returned."""
        if self.iterator is None:
            return []
        try:
            page = self.shard.get_records(self.iterator, f"{self.what}: GetRecords", limit=self.limit)
        except ClientError as exc:
            self._reopen(exc)
            return []
        records: list[Record] = page["Records"]
        self.iterator, at_tip = page.get("NextShardIterator"), page.get("MillisBehindLatest", 0) == 0
        if not records:
            self._empty(at_tip)
            return records
        self.empty_at_tip = 0
        if self.last is None:
            self._check_start(parse_sequence_number(records[0]["SequenceNumber"]))
        self.limit = page_limit(records, self.shard.limits)
        return records

    def _reopen(self, exc: ClientError) -> None:
        """An expired iterator is opened again just after the last record read; any other error fails the range."""
        if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
            raise RangeReadError(f"{self.what}: GetRecords failed: {exc}") from exc
        self.shard.stats.expired_iterators += 1
        log.info("%s: iterator expired after %s; re-opening", self.what, self.last)
        if self.last is None:
            self.iterator = self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(self.rng.start))
        else:
            self.iterator = self.shard.iterator(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=str(self.last))

    def _empty(self, at_tip: bool) -> None:
        """An open shard with nothing more at its tip, several times in a row, will never reach the range's end."""
        if not at_tip or self.iterator is None or self.rng.to_shard_end:
            return
        self.empty_at_tip += 1
        if self.empty_at_tip >= _EMPTY_AT_TIP:
            raise RangeReadError(
                f"{self.what}: could not read until the end sequence number of the range: "
                f"the shard has nothing after {self.last if self.last is not None else 'the start'}"
            )

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
