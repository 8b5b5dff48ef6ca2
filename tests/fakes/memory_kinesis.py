"""A Kinesis stream held in memory: shards, records leaving retention, splits and merges, behind the boto3 calls the
library makes (ListShards, DescribeStreamSummary, GetShardIterator, GetRecords) and those tests put with.

It answers as the local stack's kinesalite does (tests/stack/local_stack.py, with its fixes), which
tests/contract/test_kinesis_contract.py checks call by call: sequence numbers are decimal strings that rise across
the stream, a closed shard's EndingSequenceNumber is above its records and below its children's, a page's
MillisBehindLatest is the shard's newest arrival less the page's last (0 at the tip), and a closed shard read to its
end answers an empty page without a NextShardIterator. Kinesis's ChildShards, which the library does not read, and
iterator expiry are not faked. Records leave retention when a test says so (``trim``), not with the clock.

Beside the shape of the answers, a test may make pages shorter than asked for (``page_limit``), as Kinesis may.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

MAX_HASH_KEY = 2**128 - 1
FIRST_SEQUENCE_NUMBER = 49 * 10**54  # 56 digits, as Kinesis's and kinesalite's
SEQUENCE_STEP = 1_000  # between two sequence numbers the stream hands out (records, shard starts and ends)
# The account and region the fake's streams live in (their ARNs say so; an ARN of another is refused).
ACCOUNT = "000000000000"
REGION = "us-east-1"


def _error(operation: str, code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


def _millisecond(at: datetime) -> datetime:
    """Kinesis keeps arrival times to the millisecond."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class StoredRecord:
    sequence_number: int
    arrival: datetime
    data: bytes
    partition_key: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "SequenceNumber": str(self.sequence_number),
            "ApproximateArrivalTimestamp": self.arrival,
            "Data": self.data,
            "PartitionKey": self.partition_key,
        }


@dataclass
class Shard:
    shard_id: str
    hash_range: tuple[int, int]  # inclusive, as HashKeyRange
    starting_sequence_number: int
    parent: str | None = None
    adjacent_parent: str | None = None
    ending_sequence_number: int | None = None  # set when the shard closes
    closed_at: datetime | None = None
    records: list[StoredRecord] = field(default_factory=list)  # in sequence order; trimmed ones removed

    @property
    def is_open(self) -> bool:
        return self.ending_sequence_number is None

    def to_dict(self) -> dict[str, Any]:
        seq: dict[str, str] = {"StartingSequenceNumber": str(self.starting_sequence_number)}
        if self.ending_sequence_number is not None:
            seq["EndingSequenceNumber"] = str(self.ending_sequence_number)
        shard: dict[str, Any] = {
            "ShardId": self.shard_id,
            "HashKeyRange": {"StartingHashKey": str(self.hash_range[0]), "EndingHashKey": str(self.hash_range[1])},
            "SequenceNumberRange": seq,
        }
        if self.parent is not None:
            shard["ParentShardId"] = self.parent
        if self.adjacent_parent is not None:
            shard["AdjacentParentShardId"] = self.adjacent_parent
        return shard


@dataclass
class Stream:
    name: str
    created: datetime
    retention_hours: int
    shards: dict[str, Shard] = field(default_factory=dict)  # in creation order: shard ids rise with it


@dataclass(frozen=True)
class _Iterator:
    stream: str
    shard_id: str
    at: int  # the next record is the first with a sequence number at or above this one


class ManualClock:
    """A clock a test moves: ``clock()`` is now, ``advance(...)`` moves it on."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


class MemoryKinesis:
    """A boto3 Kinesis client's calls over streams held in memory.

    ``clock``: when records arrive (default: the time of day). ``page_limit``: the most records a GetRecords page
    holds, whatever its Limit (Kinesis may answer fewer than asked for). ``list_page``: ListShards' page size.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None, page_limit: int | None = None, list_page: int = 1_000) -> None:
        self.clock = clock or (lambda: datetime.now(UTC))
        self.page_limit, self.list_page = page_limit, list_page
        self.streams: dict[str, Stream] = {}
        self._next = FIRST_SEQUENCE_NUMBER  # the next sequence number the stream hands out
        self._iterators: dict[str, _Iterator] = {}
        self._tokens: dict[str, tuple[str, int]] = {}
        self.calls: list[str] = []  # the operations called, in order
        self.addressed: list[tuple[str, str]] = []  # (operation, StreamName or StreamARN): how each reading call named the stream

    # -- the stream -----------------------------------------------------------------------------------------------

    def _named(self, operation: str, name: str | None, arn: str | None) -> str:
        """The stream a call names by StreamName or StreamARN (exactly one, as Kinesis requires); an ARN of another account
        or region is refused as Kinesis refuses a stream the caller may not reach."""
        if (name is None) == (arn is None):
            raise _error(operation, "InvalidArgumentException", "Exactly one of StreamName and StreamARN must be provided.")
        self.addressed.append((operation, "StreamName" if arn is None else "StreamARN"))
        if arn is None:
            return str(name)
        prefix = f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/"
        if not arn.startswith(prefix):
            raise _error(operation, "AccessDeniedException", f"User is not authorized to access {arn} (the fake is {ACCOUNT}, {REGION}).")
        return arn.removeprefix(prefix)

    def _stream(self, operation: str, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise _error(operation, "ResourceNotFoundException", f"Stream {name} under account 000000000000 not found.")
        return stream

    def _shard(self, operation: str, stream: Stream, shard_id: str) -> Shard:
        shard = stream.shards.get(shard_id)
        if shard is None:
            raise _error(operation, "ResourceNotFoundException", f"Shard {shard_id} in stream {stream.name} does not exist")
        return shard

    def _take(self) -> int:
        taken, self._next = self._next, self._next + SEQUENCE_STEP
        return taken

    def _new_shard(self, stream: Stream, hash_range: tuple[int, int], parent: str | None = None, adjacent: str | None = None) -> Shard:
        shard_id = f"shardId-{len(stream.shards):012d}"
        shard = Shard(shard_id, hash_range, self._take(), parent, adjacent)
        stream.shards[shard_id] = shard
        return shard

    def _close(self, shard: Shard) -> None:
        shard.ending_sequence_number, shard.closed_at = self._take(), _millisecond(self.clock())

    def create_stream(self, StreamName: str, ShardCount: int = 1, RetentionPeriodHours: int = 24) -> None:
        self.calls.append("CreateStream")
        if StreamName in self.streams:
            raise _error("CreateStream", "ResourceInUseException", f"Stream {StreamName} under account 000000000000 already exists.")
        stream = Stream(StreamName, _millisecond(self.clock()), RetentionPeriodHours)
        self.streams[StreamName] = stream
        width = (MAX_HASH_KEY + 1) // ShardCount
        for i in range(ShardCount):
            self._new_shard(stream, (i * width, MAX_HASH_KEY if i == ShardCount - 1 else (i + 1) * width - 1))

    def delete_stream(self, StreamName: str, EnforceConsumerDeletion: bool = False) -> None:
        self.calls.append("DeleteStream")
        self._stream("DeleteStream", StreamName)
        del self.streams[StreamName]

    def split_shard(self, StreamName: str, ShardToSplit: str, NewStartingHashKey: str) -> None:
        self.calls.append("SplitShard")
        stream = self._stream("SplitShard", StreamName)
        parent = self._shard("SplitShard", stream, ShardToSplit)
        split = int(NewStartingHashKey)
        if not parent.is_open or not parent.hash_range[0] < split <= parent.hash_range[1]:
            raise _error("SplitShard", "InvalidArgumentException", f"cannot split {ShardToSplit} at {NewStartingHashKey}")
        self._close(parent)
        self._new_shard(stream, (parent.hash_range[0], split - 1), parent.shard_id)
        self._new_shard(stream, (split, parent.hash_range[1]), parent.shard_id)

    def merge_shards(self, StreamName: str, ShardToMerge: str, AdjacentShardToMerge: str) -> None:
        self.calls.append("MergeShards")
        stream = self._stream("MergeShards", StreamName)
        shard, adjacent = self._shard("MergeShards", stream, ShardToMerge), self._shard("MergeShards", stream, AdjacentShardToMerge)
        low, high = sorted((shard.hash_range, adjacent.hash_range))
        if not (shard.is_open and adjacent.is_open and low[1] + 1 == high[0]):
            raise _error(
                "MergeShards", "InvalidArgumentException", f"{ShardToMerge} and {AdjacentShardToMerge} are not adjacent open shards"
            )
        self._close(shard)
        self._close(adjacent)
        self._new_shard(stream, (low[0], high[1]), shard.shard_id, adjacent.shard_id)

    def trim(self, StreamName: str, before: datetime) -> list[int]:
        """Records that arrived before ``before`` leave the stream, as retention takes them; a closed shard closed
        before then leaves the listing with them. Returns the sequence numbers removed."""
        stream = self._stream("Trim", StreamName)
        gone = []
        for shard in list(stream.shards.values()):
            gone += [r.sequence_number for r in shard.records if r.arrival < before]
            shard.records = [r for r in shard.records if r.arrival >= before]
            if shard.closed_at is not None and shard.closed_at < before:
                del stream.shards[shard.shard_id]
        return gone

    # -- putting records ------------------------------------------------------------------------------------------

    def _put(self, operation: str, stream: Stream, partition_key: str, data: bytes, explicit_hash_key: str | None) -> dict[str, str]:
        key = int(explicit_hash_key) if explicit_hash_key is not None else int(hashlib.md5(partition_key.encode()).hexdigest(), 16)
        shard = next((s for s in stream.shards.values() if s.is_open and s.hash_range[0] <= key <= s.hash_range[1]), None)
        if shard is None:
            raise _error(operation, "InvalidArgumentException", f"no open shard of stream {stream.name} holds hash key {key}")
        record = StoredRecord(self._take(), _millisecond(self.clock()), bytes(data), partition_key)
        shard.records.append(record)
        return {"ShardId": shard.shard_id, "SequenceNumber": str(record.sequence_number)}

    def put_record(self, StreamName: str, PartitionKey: str, Data: bytes, ExplicitHashKey: str | None = None) -> dict[str, str]:
        self.calls.append("PutRecord")
        return self._put("PutRecord", self._stream("PutRecord", StreamName), PartitionKey, Data, ExplicitHashKey)

    def put_records(self, StreamName: str, Records: Iterable[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append("PutRecords")
        stream = self._stream("PutRecords", StreamName)
        results = [self._put("PutRecords", stream, r["PartitionKey"], r["Data"], r.get("ExplicitHashKey")) for r in Records]
        return {"FailedRecordCount": 0, "Records": results}

    # -- reading --------------------------------------------------------------------------------------------------

    def list_shards(
        self, StreamName: str | None = None, NextToken: str | None = None, MaxResults: int | None = None, StreamARN: str | None = None
    ) -> dict[str, Any]:
        """Every shard still in the stream, in id order, ``list_page`` (or MaxResults) a page."""
        self.calls.append("ListShards")
        named = StreamName is not None or StreamARN is not None
        if named == (NextToken is not None):
            raise _error("ListShards", "InvalidArgumentException", "Either NextToken or StreamName/StreamARN should be provided, not both.")
        if NextToken is None:
            StreamName = self._named("ListShards", StreamName, StreamARN)
        if NextToken is not None:
            if NextToken not in self._tokens:
                raise _error("ListShards", "InvalidArgumentException", "Invalid NextToken.")
            StreamName, first = self._tokens.pop(NextToken)
        else:
            first = 0
        stream = self._stream("ListShards", StreamName)
        shards = sorted(stream.shards.values(), key=lambda s: s.shard_id)
        size = min(MaxResults or self.list_page, self.list_page)
        page: dict[str, Any] = {"Shards": [s.to_dict() for s in shards[first : first + size]]}
        if first + size < len(shards):
            token = f"token-{len(self._tokens)}-{first + size}-{StreamName}"
            self._tokens[token] = (StreamName, first + size)
            page["NextToken"] = token
        return page

    def describe_stream_summary(self, StreamName: str | None = None, StreamARN: str | None = None) -> dict[str, Any]:
        self.calls.append("DescribeStreamSummary")
        stream = self._stream("DescribeStreamSummary", self._named("DescribeStreamSummary", StreamName, StreamARN))
        return {
            "StreamDescriptionSummary": {
                "StreamName": stream.name,
                "StreamARN": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{stream.name}",
                "StreamStatus": "ACTIVE",
                "RetentionPeriodHours": stream.retention_hours,
                "StreamCreationTimestamp": stream.created,
                "OpenShardCount": sum(1 for s in stream.shards.values() if s.is_open),
            }
        }

    def get_shard_iterator(
        self,
        ShardId: str,
        ShardIteratorType: str,
        StartingSequenceNumber: str | None = None,
        Timestamp: datetime | None = None,
        StreamName: str | None = None,
        StreamARN: str | None = None,
    ) -> dict[str, str]:
        self.calls.append("GetShardIterator")
        StreamName = self._named("GetShardIterator", StreamName, StreamARN)
        shard = self._shard("GetShardIterator", self._stream("GetShardIterator", StreamName), ShardId)
        # After every record so far: the next one the stream hands out, or past a closed shard's end.
        tip = self._next if shard.ending_sequence_number is None else shard.ending_sequence_number + 1
        if ShardIteratorType in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            if StartingSequenceNumber is None:
                raise _error("GetShardIterator", "InvalidArgumentException", f"{ShardIteratorType} needs a StartingSequenceNumber")
            seq = int(StartingSequenceNumber)
            end = shard.ending_sequence_number
            if seq < shard.starting_sequence_number or (end is not None and seq > end):
                raise _error(
                    "GetShardIterator", "InvalidArgumentException",
                    f"Invalid StartingSequenceNumber {StartingSequenceNumber}: not of shard {ShardId}",
                )  # fmt: skip
            at = seq + (ShardIteratorType == "AFTER_SEQUENCE_NUMBER")
        elif StartingSequenceNumber is not None:
            raise _error("GetShardIterator", "InvalidArgumentException", f"{ShardIteratorType} takes no StartingSequenceNumber")
        elif ShardIteratorType == "TRIM_HORIZON":
            at = shard.starting_sequence_number
        elif ShardIteratorType == "LATEST":
            at = tip
        elif ShardIteratorType == "AT_TIMESTAMP":
            if Timestamp is None:
                raise _error("GetShardIterator", "InvalidArgumentException", "AT_TIMESTAMP needs a Timestamp")
            if Timestamp > self.clock():
                raise _error("GetShardIterator", "InvalidArgumentException", "The timestampInMillis parameter cannot be greater than now")
            first = next((r for r in shard.records if r.arrival >= Timestamp), None)
            at = first.sequence_number if first is not None else tip
        else:
            raise _error("GetShardIterator", "InvalidArgumentException", f"unknown ShardIteratorType {ShardIteratorType}")
        return {"ShardIterator": self._iterator(_Iterator(StreamName, ShardId, at))}

    def _iterator(self, position: _Iterator) -> str:
        token = f"iterator-{len(self._iterators)}"
        self._iterators[token] = position
        return token

    def get_records(self, ShardIterator: str, Limit: int = 10_000, StreamARN: str | None = None) -> dict[str, Any]:
        self.calls.append("GetRecords")
        position = self._iterators.get(ShardIterator)
        if position is None:
            raise _error("GetRecords", "InvalidArgumentException", "Invalid ShardIterator.")
        if StreamARN is None:
            self.addressed.append(("GetRecords", "ShardIterator"))  # the iterator names the stream: no StreamName here
        elif self._named("GetRecords", None, StreamARN) != position.stream:
            raise _error("GetRecords", "InvalidArgumentException", f"StreamARN {StreamARN} is not the stream of the iterator.")
        shard = self._shard("GetRecords", self._stream("GetRecords", position.stream), position.shard_id)
        # The shard's records are in sequence order: the page starts where a bisection puts the iterator, so that a read
        # costs the page, not the shard's whole history (a stream of a year's batches holds 100,000 records a shard).
        first = bisect.bisect_left(shard.records, position.at, key=lambda r: r.sequence_number)
        page = shard.records[first : first + min(Limit, self.page_limit or Limit)]
        if not page and not shard.is_open:  # a closed shard read to its end
            behind = max(0, int((self.clock() - shard.closed_at).total_seconds() * 1000)) if shard.closed_at else 0  # type: ignore[operator]
            return {"Records": [], "MillisBehindLatest": behind}
        if not page:
            return {"Records": [], "NextShardIterator": self._iterator(position), "MillisBehindLatest": 0}
        newest = shard.records[-1].arrival
        behind = max(0, round((newest - page[-1].arrival).total_seconds() * 1000))
        after = _Iterator(position.stream, position.shard_id, page[-1].sequence_number + 1)
        return {"Records": [r.to_dict() for r in page], "NextShardIterator": self._iterator(after), "MillisBehindLatest": behind}

    # -- for tests ------------------------------------------------------------------------------------------------

    def records(self, stream: str, shard_id: str) -> list[StoredRecord]:
        """What the shard holds now, in sequence order."""
        return list(self._shard("Records", self._stream("Records", stream), shard_id).records)
