"""Kinesis through boto3: one retry policy for every client, each shard's call budget, listing shards and reading a stream's summary."""

from __future__ import annotations

import logging
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.retries import quota, standard

from kinesis_replay import __version__
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import (
    ACCESS_REFUSED_CODES,
    EndpointUnreachableError,
    RangeReadError,
    StreamNotFoundError,
    access_refused,
)
from kinesis_replay.core.ranges import ShardInfo, parse_sequence_number
from kinesis_replay.core.streams import address, is_arn

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
# botocore builds its default User-Agent from about 16 parts, twice a call: a fixed one saves 12% of a call's CPU
# (1.67 -> 1.48 ms here: 3,000 GetShardIterator and GetRecords(5) pairs each way against kinesalite, interleaved); a busy
# shard's plan is five such calls. It still carries botocore's version (the session adds it) and the Airflow hook's
# user_agent_extra after it. Parameter validation stays on: turning it off saved 1%.
USER_AGENT = f"kinesis-replay/{__version__} Python/{platform.python_version()}"
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": TRANSPORT_ATTEMPTS}, connect_timeout=10, read_timeout=60,
    max_pool_connections=POOL_CONNECTIONS, user_agent=USER_AGENT,
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
EMPTY_AT_TIP = 3

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
    subscriptions: int = 0  # enhanced fan-out: SubscribeToShard calls that were answered or refused
    renewals: int = 0  # of them, those that went on from where an ended subscription stopped
    in_use: int = 0  # ResourceInUseException: a subscribe within 5 s of the last, or a subscription taken over
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
    """Every shard of the stream, open and closed, paginated (ListShards returns at most 1,000 a call).

    ``stream`` is a name or an ARN (kinesis_replay.core.streams): the first call names it so, each later one sends only
    the page's NextToken, as ListShards requires."""
    limits = limits or ReadConfig()
    shards: list[ShardInfo] = []
    kwargs: dict[str, Any] = address(stream)
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
        kwargs = {"NextToken": token}  # with a NextToken, ListShards refuses the StreamName and the StreamARN


@dataclass(frozen=True)
class Pacing:
    """The clock a shard's budget is kept by, and how its calls wait: the machine's, but for a stream answered on a
    virtual clock (tests/fakes/socketless_kinesis.py), whose limits the budget must keep to on that clock."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


REAL_TIME = Pacing()


class ShardCalls:
    """One shard's GetShardIterator and GetRecords calls: kept within the budget, throttling waited out, counted."""

    def __init__(self, client: KinesisClient, stream: str, shard_id: str, limits: ReadConfig | None = None,
                 stats: ReadStats | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.client, self.stream, self.shard_id = client, stream, shard_id
        self.limits = limits or ReadConfig()
        self.stats = stats if stats is not None else ReadStats()
        self.sleep = sleep
        self.budget = ShardBudget(self.limits, self.stats, clock=clock, sleep=sleep)
        # GetRecords takes no StreamName (its iterator names the stream), but takes the StreamARN of a stream given by ARN,
        # which it is sent: every call then names the stream by its ARN, as a resource policy on it is checked against.
        self.records_address = address(stream) if is_arn(stream) else {}

    def iterator(self, **position: Any) -> str | None:
        self.budget.before_get_shard_iterator()
        response = call(
            self.client.get_shard_iterator,
            f"stream {self.stream}, shard {self.shard_id}: GetShardIterator({position['ShardIteratorType']})",
            self.limits, self.stats, self.sleep, **address(self.stream), ShardId=self.shard_id, **position,
        )  # fmt: skip
        iterator: str | None = response.get("ShardIterator")
        return iterator

    def get_records(self, iterator: str, what: str, limit: int | None = None) -> dict[str, Any]:
        self.budget.before_get_records()
        response = call(
            self.client.get_records, what, self.limits, self.stats, self.sleep,
            ShardIterator=iterator, Limit=limit or self.limits.max_records_per_call, **self.records_address,
        )  # fmt: skip
        page = cast(dict[str, Any], response)  # its records are read as plain dicts (Record) from here on
        self.stats.get_records_calls += 1
        self.stats.millis_behind_latest = page.get("MillisBehindLatest")
        self.budget.after_get_records(page["Records"])
        return page


def stream_retention(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> timedelta:
    """How long the stream keeps records (24 hours to 365 days)."""
    return timedelta(hours=int(_summary(client, stream, limits)["RetentionPeriodHours"]))


def stream_created(client: KinesisClient, stream: str, limits: ReadConfig | None = None) -> datetime:
    """When the stream was created: another time means another stream under the same name, its shard ids started over."""
    created: datetime = _summary(client, stream, limits)["StreamCreationTimestamp"]
    return created.astimezone(UTC)


_SEEN_ARNS: dict[str, str] = {}  # stream name -> its ARN, as this process's DescribeStreamSummary calls returned it


def _summary(client: KinesisClient, stream: str, limits: ReadConfig | None) -> dict[str, Any]:
    summary = call(client.describe_stream_summary, f"stream {stream}: DescribeStreamSummary", limits or ReadConfig(), **address(stream))
    found = dict(summary["StreamDescriptionSummary"])
    if found.get("StreamARN"):
        _SEEN_ARNS[stream] = str(found["StreamARN"])
    return found


def seen_stream_arn(stream: str) -> str | None:
    """The stream's ARN if this process has described it already (the plan's and a backfill's stream checks do), or it is
    given as one: what lineage names the stream by, at no call of its own (a new client costs a task about 180 ms)."""
    return stream if is_arn(stream) else _SEEN_ARNS.get(stream)


# Finding where an open shard's range ends reads a handful of records, whatever the backlog.
