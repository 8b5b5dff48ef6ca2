"""Kinesis through boto3 only: list shards, find a range's start and a shard's tip, iterate a closed range."""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.retries import quota, standard

from kinesis_replay.config import ReadConfig
from kinesis_replay.errors import (
    ACCESS_REFUSED_CODES,
    DataLossError,
    EndpointUnreachableError,
    RangeReadError,
    StreamNotFoundError,
    access_refused,
)
from kinesis_replay.formats import duration
from kinesis_replay.ranges import SequenceRange, ShardInfo, parse_sequence_number
from kinesis_replay.state import StartPosition

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = dict[str, Any]  # a record exactly as boto3's GetRecords returns it

# Kinesis answers these when a shard's or an account's call rate (or, for an encrypted stream, the KMS key's request
# quota) is exceeded; they are the only errors worth waiting out. Everything else is wrapped with what was being done, and raised.
RETRYABLE = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException", "KMSThrottlingException"})

# One retry policy for every Kinesis client, the DAG tasks' and the Spark job's, each error retried by one layer:
# - throttling (the codes above, HTTP 429) by call() alone, up to ReadConfig.max_throttle_retries times, with
#   waits that keep to the shard's budget, each one counted in ReadStats.throttled;
# - what the network or Kinesis's servers get wrong (connection errors, timeouts, 5xx) by botocore, in its
#   standard mode, up to TRANSPORT_ATTEMPTS calls in all, with its own backoff.
# botocore's standard mode would retry throttling too, hidden from call() and its count, and on top of it.
TRANSPORT_ATTEMPTS = 5
# Enough pooled connections for the threads that share one client: the planner's and the commit's (ReadConfig.plan_concurrency).
POOL_CONNECTIONS = ReadConfig().plan_concurrency
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": TRANSPORT_ATTEMPTS}, connect_timeout=10, read_timeout=60,
    max_pool_connections=POOL_CONNECTIONS,
)  # fmt: skip


def pooled(config: Config, threads: int) -> Config:
    """``config`` with a connection for each of ``threads`` threads sharing the client (a pipeline's
    ``read.plan_concurrency``): with fewer, urllib3 opens and drops a connection for each call beyond the pool."""
    return config.merge(Config(max_pool_connections=max(POOL_CONNECTIONS, threads)))


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

# Kinesis trims a record only once it is older than the stream's retention. A record younger than the retention less
# this margin, which covers the difference between Kinesis's clock (ApproximateArrivalTimestamp) and the reader's, is
# taken to be there still, and so is every record after it: the range reader checks a page only past that age.
RETENTION_MARGIN = timedelta(minutes=5)


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
    # Read near the retention, with the loss acknowledged: (the last record read, the first record of the page
    # after it, or None at a closed shard's end) where the last record read was gone once the page was read, so
    # records between the two may have been trimmed unread. Verify records each as a gap.
    unconfirmed: list[tuple[int, int | None]] = field(default_factory=list)


class ShardBudget:
    """Keeps one shard's reads within its budget: calls per second, and bytes per second averaged over calls.

    Before each call it waits until the call fits: at least 1/rate after the previous one began, and
    long enough after it began for the bytes that call returned to fit in the byte rate. Kinesis's own
    rule is the same in effect: a call that returns 10 MB is followed by 5 seconds in which reads are
    refused. Counting from the call's start, not its end, keeps the time the call itself took (the
    transfer, parsing the page) inside the interval rather than adding it to every one: a reader that
    paced from each call's end would read at most 1 s / (1 s + a call's time) of its budget.
    """

    def __init__(self, limits: ReadConfig, stats: ReadStats, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.limits, self.stats, self.clock, self.sleep = limits, stats, clock, sleep
        self.next_get_records = 0.0
        self.get_records_started = 0.0
        self.next_get_shard_iterator = 0.0

    def _wait_until(self, at: float) -> None:
        wait = at - self.clock()
        if wait > 0:
            self.stats.paced_seconds += wait
            self.sleep(wait)

    def before_get_records(self) -> None:
        self._wait_until(self.next_get_records)
        self.get_records_started = self.clock()

    def after_get_records(self, records: list[Record]) -> None:
        size = sum(len(r["Data"]) + len(r["PartitionKey"]) for r in records)
        self.stats.records += len(records)
        self.stats.bytes += size
        interval = max(1 / self.limits.get_records_per_second, size / self.limits.bytes_per_second)
        self.next_get_records = self.get_records_started + interval

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
            if code in ACCESS_REFUSED_CODES:
                raise access_refused(what, code, exc.response["Error"].get("Message", "")) from exc
            raise  # the callers handle the codes they expect (InvalidArgumentException, ExpiredIteratorException)
        except BotoConnectionError as exc:  # refused, timed out connecting, TLS, proxy
            raise EndpointUnreachableError(f"{what}: cannot reach the Kinesis endpoint: {exc}") from exc
        except ReadTimeoutError as exc:
            raise EndpointUnreachableError(f"{what}: the Kinesis endpoint did not answer in time: {exc}") from exc


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


def stream_retention(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> timedelta:
    """How long the stream keeps records (24 hours to 365 days)."""
    return timedelta(hours=int(_summary(client, stream, limits)["RetentionPeriodHours"]))


def stream_created(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> datetime:
    """When the stream was created: another time means another stream under the same name, its shard ids started over."""
    created: datetime = _summary(client, stream, limits)["StreamCreationTimestamp"]
    return created.astimezone(UTC)


def _summary(client: KinesisClient, stream: str, limits: ReadConfig | None) -> dict[str, Any]:
    summary = call(client.describe_stream_summary, f"stream {stream}: DescribeStreamSummary", limits or ReadConfig(), StreamName=stream)
    return dict(summary["StreamDescriptionSummary"])


# Finding where an open shard's range ends reads a handful of records, whatever the backlog.
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
                if page.get("MillisBehindLatest", 0) == 0 or empty >= _EMPTY_AT_TIP:
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
        for _ in range(_EMPTY_AT_TIP):
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
    """
    reader = _RangeReader(ShardCalls(client, stream, rng.shard_id, limits, stats, sleep), rng, accept_gap, retention)
    while reader.iterator is not None:
        records = reader.next_page()
        if not records:
            continue
        tail = parse_sequence_number(records[-1]["SequenceNumber"])
        if tail > rng.end:
            kept = reader.up_to_end(records, tail)
            if kept:
                yield kept
            return
        reader.last, reader.last_arrival = tail, records[-1]["ApproximateArrivalTimestamp"]
        yield records
        del records  # a reader holds one page at a time
        if tail == rng.end and not rng.to_shard_end:
            return
    if not reader.wholly_gone:  # else an acknowledged gap, found at an open shard's tip or a closed shard's end
        reader.at_shard_end()


class _RangeReader:
    """What reading one range keeps between pages, and the checks each page must pass."""

    def __init__(self, shard: ShardCalls, rng: SequenceRange, accept_gap: bool, retention: timedelta | None = None) -> None:
        self.shard, self.rng, self.accept_gap, self.retention = shard, rng, accept_gap, retention
        self.what = f"stream {shard.stream}, range {rng.describe()}"
        self.last: int | None = None  # the last record yielded
        self.last_arrival: datetime | None = None  # when it arrived: how near it is to the retention
        self.wholly_gone = False  # an acknowledged gap: every record of the range is gone
        self.reopened_at: int | None = None  # an iterator reopened at the last record read: it must come first, again
        self.empty_at_tip = 0
        self.limit = min(shard.limits.first_page_records, shard.limits.max_records_per_call)
        self.iterator = self._open_at_start()

    def _open_at_start(self) -> str | None:
        """An iterator at the range's start. Kinesis may refuse a sequence number it no longer holds (trimmed): with
        the loss acknowledged, reading starts at the first record left (and _check_start logs the gap). A closed
        shard no longer in the stream (Kinesis drops it once its records are past retention): with the loss
        acknowledged, none (the range reads as empty)."""
        try:
            return self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(self.rng.start))
        except StreamNotFoundError:
            if not (self.accept_gap and self.rng.to_shard_end):
                raise
            # Kinesis drops a closed shard once its records are past retention: acknowledged, nothing of it is left.
            self._wholly_gone("the closed shard is no longer in the stream")
            return None
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
                raise RangeReadError(f"{self.what}: GetShardIterator at the range start failed: {exc}") from exc
            if self.accept_gap:
                return self.shard.iterator(ShardIteratorType="TRIM_HORIZON")
            raise DataLossError(
                f"{self.what}: Kinesis refused the range start {self.rng.start} ({exc.response['Error'].get('Message', '')}): "
                "trimmed by retention? Records from it may be lost. Nothing was read. To accept the loss, trigger a run "
                f'with {{"acknowledge_data_loss": ["{self.rng.shard_id}"]}}'
            ) from exc

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
        reopened = self.reopened_at is not None
        if reopened:  # its first record was the last one read: nothing before the page was skipped
            records = self._after_reopened(records)
            if not records:
                return records
        if self.last is None:
            self._check_start(parse_sequence_number(records[0]["SequenceNumber"]))
        elif not reopened and self._at_risk():
            self._confirm(parse_sequence_number(records[0]["SequenceNumber"]))
        self.limit = page_limit(records, self.shard.limits)
        return records

    def _reopen(self, exc: ClientError) -> None:
        """An expired iterator is opened again at the last record read; any other error fails the range."""
        if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
            raise RangeReadError(f"{self.what}: GetRecords failed: {exc}") from exc
        self.shard.stats.expired_iterators += 1
        log.info("%s: iterator expired after %s; re-opening", self.what, self.last)
        if self.last is None:
            self.iterator = self._open_at_start()
            return
        # At the last record read, not after it: an iterator after a record that retention trimmed meanwhile starts at
        # the first record left, and every record between them would be skipped without a word. Its first record
        # must be the last one read (dropped, as read already); anything else means records are gone.
        try:
            self.iterator = self.shard.iterator(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(self.last))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidArgumentException":
                raise RangeReadError(f"{self.what}: GetShardIterator after an expired iterator failed: {exc}") from exc
            raise self._gone(f"Kinesis refused it ({exc})") from exc  # a sequence number it no longer holds
        self.reopened_at = self.last

    def _after_reopened(self, records: list[Record]) -> list[Record]:
        """The first page after a reopen, without the last record read; failing when that record is gone."""
        first = parse_sequence_number(records[0]["SequenceNumber"])
        if first != self.reopened_at:
            raise self._gone(f"the reopened iterator's first record is {first}")
        self.reopened_at = None
        return records[1:]

    def _gone(self, how: str) -> RangeReadError:
        return RangeReadError(
            f"{self.what}: record {self.last}, the last one read before the iterator expired, is gone ({how}): records after "
            "it were trimmed by retention while the range was read, and may be lost. Nothing of this attempt is committed; "
            "the next run checks the range against the stream's retention"
        )

    def _empty(self, at_tip: bool) -> None:
        """An open shard with nothing more at its tip, several times in a row, will never reach the range's end."""
        if not at_tip or self.iterator is None or self.rng.to_shard_end:
            return
        self.empty_at_tip += 1
        if self.empty_at_tip >= _EMPTY_AT_TIP and self.last is None and self.accept_gap:
            self._wholly_gone("the shard holds nothing from its first record left to its tip")
            self.iterator = None
            return
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
        for _ in range(_EMPTY_AT_TIP):  # Kinesis may answer empty pages before the records
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
