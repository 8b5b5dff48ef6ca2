"""Reading a closed range of one shard over enhanced fan-out: SubscribeToShard, renewed until the range's end.

The pages are the subscription's events' records, and they pass through the very checks the GetRecords reader's pages
do (range_reader.RangeChecker and checked_pages): the first record against the range's start, a gap, the retention,
the end record (an aggregate's sub-records share its sequence number, so a range ends at a whole KPL record), a closed
shard's end. What differs is how pages come:

- A subscription starts AT_SEQUENCE_NUMBER of the range's start and delivers events until Kinesis ends it (after 5
  minutes, or early: a connection cut, an InternalFailure event, another reader taking it over). It is then renewed
  AT_SEQUENCE_NUMBER of the last record read, whose first record must be that record again (dropped, as read already):
  the proof that the renewal skipped nothing, as for the GetRecords reader's reopened iterator. Kinesis's
  ContinuationSequenceNumber, which the KCL renews AFTER, is that record's number when the event had records; renewing
  after a number whose record retention trimmed meanwhile would start at the first record left without a word.
- A closed shard's last event has no ContinuationSequenceNumber (and names the child shards): SHARD_END.
- Kinesis's rules: at most one subscribe a second per consumer and shard (``read.subscribe_interval_seconds``, kept
  process-wide), a subscribe within 5 s of the last refused with ResourceInUseException (waited out:
  ``read.in_use_wait_seconds``), LimitExceededException waited out as throttling. Each is retried up to
  ``read.max_throttle_retries`` times in a row without a record read, then the range fails naming it.
- Memory: a thread reads each subscription's events into a queue of ``read.subscription_events``; while the queue is
  full it reads nothing more, and HTTP/2's flow control holds Kinesis back (efo_transport: a connection per
  subscription).

Another reader of the same consumer and shard (a retried or speculative attempt of the task) takes the subscription
over: this reader's subscription then ends with ResourceInUseException, it renews at its own last record (after the
5 s Kinesis requires), and its continuity checks fail the range rather than skip or repeat a record if a page is not
its own. The replay job refuses Spark speculation for a pipeline with a consumer (replay_job), so two attempts of one
task run at once only when a failed attempt's threads have not stopped yet; only the attempt that succeeds is
committed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError

from kinesis_replay.adapters.kinesis_client import RETRYABLE, ReadStats, ShardCalls, call
from kinesis_replay.adapters.range_reader import RangeChecker, Record, checked_pages
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import (
    ACCESS_REFUSED_CODES,
    ConsumerError,
    RangeReadError,
    StreamNotFoundError,
    SubscriptionCutError,
    access_refused,
)
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.streams import consumer_stream_refusal, is_arn

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)

IN_USE = "ResourceInUseException"
# A subscription that ends this way is renewed at the last record read: a connection cut or silent, Kinesis's own
# failure, or the subscription taken over (IN_USE, as an event).
_RENEWABLE_EVENTS = frozenset({IN_USE, "InternalFailureException"})
_CUT = (SubscriptionCutError, BotoConnectionError, EndpointConnectionError, ReadTimeoutError)


def iterate_range_efo(
    client: KinesisClient,
    stream: str,
    consumer_arn: str,
    rng: SequenceRange,
    limits: ReadConfig | None = None,
    stats: ReadStats | None = None,
    sleep: Callable[[float], None] = time.sleep,
    accept_gap: bool = False,
    retention: timedelta | None = None,
) -> Iterator[list[Record]]:
    """Yield the records of a closed range read over enhanced fan-out, page by page, exactly as range_reader.iterate_range
    does by GetRecords: the same records, in the same order, through the same checks. ``client`` must send
    SubscribeToShard over HTTP/2 (efo_transport.subscribe_over_http2)."""
    checker = RangeChecker(ShardCalls(client, stream, rng.shard_id, limits, stats, sleep), rng, accept_gap, retention)
    yield from checked_pages(checker, _Subscriptions(client, consumer_arn, checker).pages())


class _Pacer:
    """One subscribe a second per consumer and shard, across the process's readers (Kinesis's rule)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next: dict[tuple[str, str], float] = {}

    def wait(self, key: tuple[str, str], interval: float, stats: ReadStats, sleep: Callable[[float], None]) -> None:
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next.get(key, 0.0))
            self.next[key] = at + interval
        if at > now:
            stats.paced_seconds += at - now
            sleep(at - now)


PACER = _Pacer()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_ENDED = object()  # the subscription's event stream ended (its lifetime is over)


class Subscription:
    """One SubscribeToShard call's events, read by a thread of its own into a queue of at most ``held`` events."""

    def __init__(self, client: Any, consumer_arn: str, shard_id: str, position: dict[str, str], held: int) -> None:
        self.client, self.consumer_arn, self.shard_id, self.position = client, consumer_arn, shard_id, position
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=held)
        self.stopped = threading.Event()
        self.stream: Any = None
        self.thread = threading.Thread(target=self._run, name=f"kinesis-replay-subscription-{shard_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            response = self.client.subscribe_to_shard(ConsumerARN=self.consumer_arn, ShardId=self.shard_id, StartingPosition=self.position)
            self.stream = response["EventStream"]
            if self.stopped.is_set():
                return
            for event in self.stream:
                if "SubscribeToShardEvent" in event and not self._put(event["SubscribeToShardEvent"]):
                    return
            self._put(_ENDED)
        except BaseException as exc:  # carried to the reader, which decides
            if not self.stopped.is_set():
                self._put(_Failed(exc))
        finally:
            if self.stream is not None:
                self.stream.close()

    def _put(self, item: Any) -> bool:
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def events(self) -> Iterator[dict[str, Any]]:
        """The events as they come; returns when the subscription ended; raises what ended it otherwise."""
        while True:
            item = self.queue.get()
            if item is _ENDED:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def close(self) -> None:
        """Stop reading, without waiting: the thread lets go of the connection itself, at its next event (Kinesis
        sends one every few seconds at the latest) or its next try to queue one (twice a second). Closing the stream
        from here would wait for that anyway: httpx's connection is held by the thread's read until it returns."""
        self.stopped.set()
        self.thread.join(timeout=0.05)


class _Subscriptions:
    """The raw pages of one range: subscription after subscription, each renewed at the last record read."""

    def __init__(self, client: Any, consumer_arn: str, checker: RangeChecker) -> None:
        self.client, self.consumer_arn, self.checker = client, consumer_arn, checker
        self.shard, self.limits, self.stats = checker.shard, checker.shard.limits, checker.shard.stats
        self.failures = 0  # refusals and cuts in a row, with no record read between them

    def _position(self) -> dict[str, str]:
        last = self.checker.last
        if last is None:
            return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": str(self.checker.rng.start)}
        return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": str(last)}

    def pages(self) -> Iterator[list[Record]]:
        position = self._position()
        while True:
            PACER.wait((self.consumer_arn, self.shard.shard_id), self.limits.subscribe_interval_seconds, self.stats, self.shard.sleep)
            subscription = Subscription(self.client, self.consumer_arn, self.shard.shard_id, position, self.limits.subscription_events)
            self.stats.subscriptions += 1
            try:
                for event in subscription.events():
                    records: list[Record] = event["Records"]
                    self.stats.records += len(records)
                    self.stats.bytes += sum(len(r["Data"]) + len(r["PartitionKey"]) for r in records)
                    self.stats.millis_behind_latest = event.get("MillisBehindLatest")
                    ended = event.get("ContinuationSequenceNumber") is None
                    if records:
                        self.failures = 0
                        yield records
                        del records
                    elif not ended and self.checker.empty(event.get("MillisBehindLatest", 0) == 0):
                        return  # an acknowledged gap: nothing of the range is left
                    if ended:
                        return  # SHARD_END: a closed shard's last event
                    del event
            except ClientError as exc:
                renewed = self._refused(exc, position)
                if renewed is None:
                    return  # an acknowledged gap: the closed shard left the stream
                position = renewed
                continue
            except _CUT as exc:
                self._failed(f"the subscription was cut ({exc})")
            finally:
                subscription.close()
            if self.checker.wholly_gone:
                return
            position = self._renewal()

    def _renewal(self) -> dict[str, str]:
        """Where the next subscription starts: the range's start, or the last record read (which must come first)."""
        if self.checker.last is not None:
            self.checker.reopened(self.checker.last, "the subscription ended")
        self.stats.renewals += 1
        return self._position()

    def _failed(self, what: str) -> None:
        self.failures += 1
        if self.failures > self.limits.max_throttle_retries:
            raise RangeReadError(f"{self.checker.what}: SubscribeToShard: {what}, {self.failures} times in a row without a record read")
        log.info("%s: %s; subscribing again", self.checker.what, what)

    def _refused(self, exc: ClientError, position: dict[str, str]) -> dict[str, str] | None:
        """A subscribe refused, or a subscription ended by an error event: wait, and where to subscribe next (None:
        nowhere, the range is wholly gone and the loss acknowledged)."""
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", code)
        checker = self.checker
        if code == IN_USE or code in _RENEWABLE_EVENTS:
            self.stats.in_use += code == IN_USE
            self._failed(f"{code} ({message})")
            if code == IN_USE:
                self.shard.sleep(self.limits.in_use_wait_seconds)
                self.stats.throttled_seconds += self.limits.in_use_wait_seconds
            return self._renewal()
        if code in RETRYABLE:  # LimitExceededException: subscribed too often; waited out as throttling
            self._failed(f"throttled ({code})")
            wait = min(self.limits.throttle_max_seconds, self.limits.throttle_base_seconds * 2 ** (self.failures - 1))
            self.stats.throttled += 1
            self.stats.throttled_seconds += wait
            self.shard.sleep(wait)
            return position
        if code == "InvalidArgumentException" and checker.last is None and position.get("Type") == "AT_SEQUENCE_NUMBER":
            checker.start_refused(exc, "SubscribeToShard")  # raises unless the loss was acknowledged
            return {"Type": "TRIM_HORIZON"}
        if code == "InvalidArgumentException":
            raise checker.gone(f"Kinesis refused a subscription at it ({message})", "the subscription ended") from exc
        if code == "ResourceNotFoundException":
            if checker.last is None and checker.shard_gone():
                return None
            raise StreamNotFoundError(f"{checker.what}: SubscribeToShard with consumer {self.consumer_arn}: {message}") from exc
        if code in ACCESS_REFUSED_CODES:
            raise access_refused(f"{checker.what}: SubscribeToShard", code, message) from exc
        raise RangeReadError(f"{checker.what}: SubscribeToShard with consumer {self.consumer_arn} failed: {exc}") from exc


def resolve_consumer(
    client: KinesisClient,
    stream: str,
    consumer: str,
    limits: ReadConfig | None = None,
    sleep: Callable[[float], None] = time.sleep,
    register: bool = True,
    timeout_seconds: float = 300.0,
    pipeline: str | None = None,
) -> str:
    """The ARN of ``consumer`` (a name or an ARN) of ``stream``, once it is ACTIVE.

    A name not registered yet is registered (``register``), as the KCL does with its application's name, and tagged
    with the ``pipeline`` that registered it (PIPELINE_TAG), so that an operator can tell it from the stream's other
    consumers; kinesis-replay never deregisters it. Waiting for
    ACTIVE asks DescribeStreamConsumer at most twice a second (Kinesis allows 20 a second a stream, shared by every
    reader of it). Registration is refused with LimitExceededException when the stream has 20 consumers or 5 are being
    created: that fails at once, naming the limit, and is not retried.
    """
    limits = limits or ReadConfig()
    what = f"stream {stream}, consumer {consumer}"
    if consumer.startswith("arn:"):
        refused = consumer_stream_refusal(consumer, stream)
        if refused is not None:
            raise ConsumerError(f"{what}: read.consumer {refused}")
        query: dict[str, Any] = {"ConsumerARN": consumer}
    elif is_arn(stream):  # the stream's ARN is the consumer's stream's: no call to find it
        query = {"StreamARN": stream, "ConsumerName": consumer}
    else:
        summary = call(client.describe_stream_summary, f"stream {stream}: DescribeStreamSummary", limits, StreamName=stream)
        query = {"StreamARN": summary["StreamDescriptionSummary"]["StreamARN"], "ConsumerName": consumer}
    deadline = time.monotonic() + timeout_seconds
    while True:
        described = _describe(client, query, what, limits)
        if described is None:
            if "ConsumerARN" in query or not register:
                raise ConsumerError(f"{what}: no such consumer of the stream (read.consumer)")
            _register(client, query["StreamARN"], consumer, what, pipeline)
            continue
        status = described["ConsumerStatus"]
        if status == "ACTIVE":
            return str(described["ConsumerARN"])
        if status == "DELETING":
            raise ConsumerError(f"{what}: the consumer is being deregistered; wait until it is gone, then run again")
        if time.monotonic() > deadline:
            raise ConsumerError(f"{what}: still {status} after {timeout_seconds:.0f}s")
        sleep(0.5)


def _describe(client: Any, query: dict[str, Any], what: str, limits: ReadConfig) -> dict[str, Any] | None:
    try:
        return dict(call(client.describe_stream_consumer, f"{what}: DescribeStreamConsumer", limits, **query)["ConsumerDescription"])
    except StreamNotFoundError:
        return None


# The tag a consumer registered by kinesis-replay carries: the pipeline that registered it.
PIPELINE_TAG = "kinesis-replay:pipeline"


def _register(client: Any, stream_arn: str, name: str, what: str, pipeline: str | None) -> None:
    tags = {} if pipeline is None else {"Tags": {PIPELINE_TAG: pipeline}}  # Kinesis checks kinesis:TagResource for them
    try:
        client.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name, **tags)
        log.warning("%s: registered the consumer (it is never deregistered by kinesis-replay)", what)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == IN_USE:  # registered meanwhile by another run: described again
            return
        if code == "LimitExceededException":
            raise ConsumerError(
                f"{what}: Kinesis refused to register the consumer ({exc.response['Error'].get('Message', code)}): a stream "
                "has at most 20 consumers, and at most 5 being created at once. Deregister one you no longer use, or name "
                "an existing consumer in read.consumer"
            ) from exc
        if code in ACCESS_REFUSED_CODES:
            raise access_refused(f"{what}: RegisterStreamConsumer", code, exc.response["Error"].get("Message", "")) from exc
        raise
