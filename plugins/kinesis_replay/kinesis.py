"""Kinesis through boto3 only: list shards, find a range's start and a shard's tip, iterate a closed range."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from botocore.exceptions import ClientError, EndpointConnectionError

from kinesis_replay.config import ReadConfig
from kinesis_replay.errors import EndpointUnreachableError, RangeReadError, StreamNotFoundError
from kinesis_replay.ranges import SequenceRange, ShardInfo, parse_sequence_number
from kinesis_replay.state import StartPosition

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = dict[str, Any]  # a record exactly as boto3's GetRecords returns it

# Kinesis answers these when a shard's or an account's call rate is exceeded; they are the only
# errors worth waiting out. Everything else is wrapped with what was being done, and raised.
RETRYABLE = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})
# An empty response with MillisBehindLatest 0 means the iterator is at the tip. Planning takes the first
# one at its word; the range reader, which fails the batch on it, asks this many times in a row.
_EMPTY_AT_TIP = 3


@dataclass
class ReadStats:
    """What reading cost: calls, throttles waited out and iterators re-opened."""

    get_records_calls: int = 0
    throttled: int = 0
    throttled_seconds: float = 0.0
    expired_iterators: int = 0
    millis_behind_latest: int | None = None
    extra: dict[str, int] = field(default_factory=dict)


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


def list_shards(client: Any, stream: str, limits: ReadConfig | None = None) -> list[ShardInfo]:
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


def _iterator(client: Any, stream: str, shard_id: str, limits: ReadConfig, stats: ReadStats | None, **position: Any) -> str | None:
    response = call(
        client.get_shard_iterator,
        f"stream {stream}, shard {shard_id}: GetShardIterator({position['ShardIteratorType']})",
        limits,
        stats,
        StreamName=stream,
        ShardId=shard_id,
        **position,
    )
    iterator: str | None = response.get("ShardIterator")
    return iterator


def _position_after(checkpoint: int | None, start: StartPosition | None) -> dict[str, Any]:
    if checkpoint is not None:
        return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": str(checkpoint)}
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


def first_record_after(
    client: Any,
    stream: str,
    shard_id: str,
    checkpoint: int | None,
    start: StartPosition | None,
    limits: ReadConfig | None = None,
    closed: bool = False,
) -> NextRecord:
    """The first record after ``checkpoint`` (or at the start position when there is none).

    One GetShardIterator and, usually, one GetRecords(Limit=1): on real Kinesis an empty answer
    with MillisBehindLatest above 0 means "keep going", so the next iterator is followed until a
    record comes, the tip is reached, or the shard ends (no next iterator: SHARD_END). A closed
    shard can answer empty with a next iterator before the null one, so it is followed to the end.
    """
    limits = limits or ReadConfig()
    what = f"stream {stream}, shard {shard_id}: GetRecords"
    iterator = _iterator(client, stream, shard_id, limits, None, **_position_after(checkpoint, start))
    while iterator:
        page = call(client.get_records, what, limits, ShardIterator=iterator, Limit=1)
        if page["Records"]:
            return NextRecord(page["Records"][0])
        iterator = page.get("NextShardIterator")
        if iterator and not closed and page.get("MillisBehindLatest", 0) == 0:
            return NextRecord(None)
    return NextRecord(None, shard_ended=True)


def find_tip(
    client: Any,
    stream: str,
    shard_id: str,
    start: Record,
    now: datetime,
    limits: ReadConfig | None = None,
    window: timedelta = timedelta(seconds=10),
) -> int:
    """The sequence number of the newest record in an open shard, without reading its backlog.

    Reads from AT_TIMESTAMP(now - window) to the tip, doubling the window backwards while it is
    empty, and falls back to reading from ``start`` once the window reaches it. The cost is the
    last window's records, not the backlog. Records that arrive while this runs may extend the tip;
    any record seen is a valid end, so the clock decides only when reading stops.
    """
    limits = limits or ReadConfig()
    start_seq = parse_sequence_number(start["SequenceNumber"])
    start_arrival: datetime = start["ApproximateArrivalTimestamp"]
    what = f"stream {stream}, shard {shard_id}: finding the tip"
    while True:
        since = now - window
        if since <= start_arrival:
            position: dict[str, Any] = {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": str(start_seq)}
        else:
            position = {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": since}
        newest = _read_to_tip(client, stream, shard_id, position, limits, what)
        if newest is not None and newest >= start_seq:
            return newest
        if "StartingSequenceNumber" in position:
            # The start record exists (planning just read it); an empty read from it means it vanished.
            raise RangeReadError(f"{what}: the range start {start_seq} could not be read back")
        window *= 2


def _read_to_tip(client: Any, stream: str, shard_id: str, position: dict[str, Any], limits: ReadConfig, what: str) -> int | None:
    iterator = _iterator(client, stream, shard_id, limits, None, **position)
    newest: int | None = None
    while iterator:
        page = call(client.get_records, what, limits, ShardIterator=iterator, Limit=limits.max_records_per_call)
        records = page["Records"]
        if records:
            newest = parse_sequence_number(records[-1]["SequenceNumber"])
        elif page.get("MillisBehindLatest", 0) == 0:
            break
        iterator = page.get("NextShardIterator")
    return newest


def iterate_range(
    client: Any,
    stream: str,
    rng: SequenceRange,
    limits: ReadConfig | None = None,
    stats: ReadStats | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[Record]]:
    """Yield the records of a closed range, page by page, exactly: from ``start`` to ``end`` inclusive.

    The first fetch uses AT_SEQUENCE_NUMBER(start), later ones follow the next iterator; an expired
    iterator is re-opened AFTER_SEQUENCE_NUMBER of the last record read. A first record that is not
    ``start`` is a gap and fails. An open shard that runs dry before ``end`` fails; a closed shard is
    read until GetRecords returns no next iterator (SHARD_END).
    """
    limits = limits or ReadConfig()
    stats = stats if stats is not None else ReadStats()
    what = f"stream {stream}, range {rng.describe()}"
    iterator = _iterator(
        client, stream, rng.shard_id, limits, stats,
        ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(rng.start),
    )  # fmt: skip
    last: int | None = None
    empty_at_tip = 0
    while True:
        if iterator is None:
            if rng.to_shard_end:
                if last is None:
                    raise RangeReadError(f"{what}: reached SHARD_END without reading the range start")
                return
            raise RangeReadError(f"{what}: could not read until the end sequence number of the range: the shard ended after {last}")
        try:
            page = call(
                client.get_records, f"{what}: GetRecords", limits, stats, sleep, ShardIterator=iterator, Limit=limits.max_records_per_call
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                raise RangeReadError(f"{what}: GetRecords failed: {exc}") from exc
            stats.expired_iterators += 1
            log.info("%s: iterator expired after %s; re-opening", what, last)
            position = (
                {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": str(rng.start)}
                if last is None
                else {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": str(last)}
            )
            iterator = _iterator(client, stream, rng.shard_id, limits, stats, **position)
            continue
        stats.get_records_calls += 1
        stats.millis_behind_latest = page.get("MillisBehindLatest")
        records: list[Record] = page["Records"]
        iterator = page.get("NextShardIterator")
        if not records:
            if page.get("MillisBehindLatest", 0) == 0 and iterator is not None and not rng.to_shard_end:
                empty_at_tip += 1
                if empty_at_tip >= _EMPTY_AT_TIP:
                    raise RangeReadError(
                        f"{what}: could not read until the end sequence number of the range: "
                        f"the shard has nothing after {last if last is not None else 'the start'}"
                    )
            continue
        empty_at_tip = 0
        if last is None:
            first = parse_sequence_number(records[0]["SequenceNumber"])
            if first != rng.start:
                raise RangeReadError(
                    f"{what}: the first record is {first}, not the range start {rng.start}: "
                    "records between them are gone (trimmed by retention?)"
                )
        tail = parse_sequence_number(records[-1]["SequenceNumber"])
        if tail <= rng.end:
            last = tail
            yield records
            if tail == rng.end and not rng.to_shard_end:
                return
            continue
        # The page runs past the end: keep what is inside, and the end record must be among it.
        keep = [r for r in records if parse_sequence_number(r["SequenceNumber"]) <= rng.end]
        if rng.to_shard_end:
            raise RangeReadError(f"{what}: record {tail} lies past the shard's ending sequence number")
        if not keep or parse_sequence_number(keep[-1]["SequenceNumber"]) != rng.end:
            raise RangeReadError(
                f"{what}: could not read until the end sequence number of the range: "
                f"no record has sequence number {rng.end} (the next after {last} is past it)"
            )
        yield keep
        return
