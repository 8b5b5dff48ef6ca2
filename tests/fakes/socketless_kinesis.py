"""A Kinesis stream of thousands of shards behind a real boto3 client and no socket: for planning at 10,000 shards.

The client is boto3's own: its parameters are serialised, the request signed, and the answer parsed by botocore, as
against Kinesis. Only the HTTP exchange is replaced: a ``before-send`` handler answers each request with an
``AWSResponse`` built here, so no socket, thread or process stands between the planner and the stream, and what a
plan costs is the planner's and botocore's (the handler's own CPU is counted apart, in ``cpu_seconds``).

The stream is arithmetic, held in O(shards) memory whatever its records: record ``k`` of a shard is the stream's
record slot ``first + k``, its sequence number ``BASE + slot * STEP + shard index * NOISE + noise`` (56 digits,
rising within a shard and unique in the stream; ``noise``, below NOISE, a hash of the shard and the slot, so that
the low 20 digits look random, as Kinesis's do, and what stores them compresses no better than it would), its arrival
``t0 + slot // per_millisecond`` milliseconds (records put together share a millisecond), its data ``record_bytes``
bytes that name it. ``expected_range`` gives what a plan must find.

Resharding: the stream was created with ``shards - 3`` shards; at slot ``reshard_slot`` shard 0 was split in two,
and shards 1 and 2 merged into one, so the stream lists ``shards`` shards: three closed parents (their
``EndingSequenceNumber`` above their last record and below their children's first), two children naming shard 0 as
``ParentShardId``, and one naming shards 1 and 2 as ``ParentShardId`` and ``AdjacentParentShardId``.

Kinesis's limits are kept on a virtual clock (``VirtualClock``), which the planner's budgets read too, so nothing
waits in real time: ListShards answers at most 1,000 shards a page and 100 calls a second; GetShardIterator and
GetRecords 5 calls a second a shard (in any second, counted from each call's instant); DescribeStreamSummary 20 a
second. A call past a limit is answered as Kinesis answers it: HTTP 400 with ``__type``
``ProvisionedThroughputExceededException`` (``LimitExceededException`` for the control-plane calls), which botocore
parses into a ClientError of that code. Not kept: the 2 MB a second a shard of reads (a plan reads KBs), iterator
expiry, ChildShards, trimming by retention, and writes (the stream is fixed; tests that put records use
tests/fakes/memory_kinesis.py).
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

from kinesis_replay.adapters import kinesis_client
from kinesis_replay.core.state import Batch, ReplayResult, ShardResult

MAX_HASH_KEY = 2**128 - 1
BASE = 49 * 10**54  # 56 digits, as Kinesis's
WIDTH = 10**6  # shards a record slot has room for
NOISE = 10**20  # the low digits of a sequence number: a hash of the shard and the slot
STEP = WIDTH * NOISE  # sequence numbers of one record slot
LIST_PAGE = 1_000  # the most shards a ListShards page holds (MaxResults above it is answered with 1,000)
SHARD_CALLS_PER_SECOND = 5  # GetShardIterator and GetRecords, each, a shard
LIST_SHARDS_PER_SECOND = 100
DESCRIBE_PER_SECOND = 20
TOLERANCE = 1e-9  # seconds: a call exactly one second after the fifth before it is within the limit
RESHARDED = 3  # shards added by the split (two children) and the merge (one)
REGION = "us-east-1"


class VirtualClock:
    """Seconds that pass only when someone sleeps: the endpoint keeps its limits by it, the planner its budgets.

    ``sleep(s)`` moves the clock to at least the instant its thread last read plus ``s`` (the time a waiting
    caller meant to reach), never back. Threads share it: a thread that sleeps moves the others on too, which can
    only space their calls further apart than they meant, never closer.
    """

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()
        self._read = threading.local()

    def __call__(self) -> float:
        now = self._now
        self._read.at = now
        return now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self._now = max(self._now, getattr(self._read, "at", self._now) + max(0.0, seconds))
            self._read.at = self._now


@dataclass(frozen=True)
class ShardSpec:
    """One shard of the arithmetic stream: its record slots ``first`` to ``first + count - 1``."""

    index: int
    hash_range: tuple[int, int]
    first: int  # the slot of its first record
    count: int  # its records
    closed: bool = False
    parents: tuple[str, ...] = ()

    @property
    def shard_id(self) -> str:
        return shard_id(self.index)

    def sequence_number(self, k: int) -> int:
        return slot_number(self.first + k, self.index)

    @property
    def starting_sequence_number(self) -> int:
        return self.sequence_number(0)

    @property
    def ending_sequence_number(self) -> int | None:
        """A closed shard's: above its last record (the rest of its slot row), below its children's first record."""
        return BASE + (self.first + self.count) * STEP + STEP - 1 if self.closed else None


def shard_id(index: int) -> str:
    return f"shardId-{index:012d}"


def slot_number(slot: int, index: int) -> int:
    """The sequence number of shard ``index``'s record in ``slot``."""
    noise = (slot * 0x9E3779B97F4A7C15 + index * 0xC2B2AE3D27D4EB4F + 0x165667B19E3779F9) ** 2 % NOISE
    return BASE + slot * STEP + index * NOISE + noise


def slot_of(number: int) -> int:
    """The record slot a sequence number falls in."""
    return (number - BASE) // STEP


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class SocketlessKinesis:
    """One arithmetic stream of ``shards`` shards (three of them from a split and a merge), answered behind botocore.

    ``records_per_shard``: what each shard the stream was created with holds (a split or merged parent the records
    before ``reshard_slot``, its children those after). ``newest_age``: how long before ``now`` the newest record arrived.
    """

    def __init__(
        self, stream: str = "wide", shards: int = 10_000, records_per_shard: int = 10_240, per_millisecond: int = 5,
        record_bytes: int = 1_024, newest_age: timedelta = timedelta(minutes=2), clock: VirtualClock | None = None,
        t0: datetime = datetime(2026, 11, 1, 12, tzinfo=UTC),
    ) -> None:  # fmt: skip
        if shards < RESHARDED + 3 or records_per_shard < 4:
            raise ValueError(f"a stream of {shards} shards of {records_per_shard} records has no room for a split and a merge")
        self.stream, self.per_millisecond, self.record_bytes = stream, per_millisecond, record_bytes
        self.clock = clock or VirtualClock()
        self.t0_ms = int(t0.timestamp() * 1000)
        self.created = t0 - timedelta(days=1)
        self.reshard_slot = records_per_shard // 2  # parents hold the slots before it; children those after it
        self.last_slot = records_per_shard - 1
        self.now = self.arrival(self.last_slot) + newest_age
        self.records_per_shard = records_per_shard
        self.shards = self._layout(shards, records_per_shard)
        self._lock = threading.Lock()
        n = len(self.shards)
        self.calls: dict[str, int] = {}  # by operation
        self.shard_calls = {op: [0] * n for op in ("GetShardIterator", "GetRecords")}  # by operation, a shard
        self.throttled = 0  # calls refused for a limit
        self._recent: dict[str, list[list[float]]] = {op: [[] for _ in range(n)] for op in self.shard_calls}
        self._stream_recent: dict[str, list[float]] = {"ListShards": [], "DescribeStreamSummary": []}
        self.cpu_seconds = 0.0  # the handler's own CPU (thread time), not the client's

    def _layout(self, shards: int, records: int) -> list[ShardSpec]:
        created = shards - RESHARDED
        width = (MAX_HASH_KEY + 1) // created
        ranges = [(i * width, MAX_HASH_KEY if i == created - 1 else (i + 1) * width - 1) for i in range(created)]
        parents = {0, 1, 2}
        after = self.reshard_slot + 1  # children's first slot: above the parents' ending sequence numbers
        layout = [ShardSpec(i, ranges[i], 0, self.reshard_slot if i in parents else records, closed=i in parents) for i in range(created)]
        low, high = ranges[0]
        middle = (low + high) // 2
        layout.append(ShardSpec(created, (low, middle - 1), after, records - after, parents=(shard_id(0),)))
        layout.append(ShardSpec(created + 1, (middle, high), after, records - after, parents=(shard_id(0),)))
        layout.append(ShardSpec(created + 2, (ranges[1][0], ranges[2][1]), after, records - after, parents=(shard_id(1), shard_id(2))))
        return layout

    def grow(self, records: int) -> None:
        """``records`` more records arrive in every open shard (the same time later in each), and ``now`` moves as far."""
        before = self.now - self.arrival(self.last_slot)
        self.records_per_shard += records
        self.last_slot += records
        self.now = self.arrival(self.last_slot) + before
        self.shards = self._layout(len(self.shards), self.records_per_shard)

    # -- the arithmetic ----------------------------------------------------------------------------------------------

    def arrival(self, slot: int) -> datetime:
        return datetime.fromtimestamp(self._arrival_ms(slot) / 1000, UTC)

    def _arrival_ms(self, slot: int) -> int:
        return self.t0_ms + slot // self.per_millisecond

    def expected_range(self, shard: ShardSpec) -> tuple[int, int, bool]:
        """What a first plan from TRIM_HORIZON must find: (start, end, closed); a closed shard's end is its ending
        sequence number, an open one's its newest record."""
        end = shard.ending_sequence_number
        return shard.starting_sequence_number, end if end is not None else shard.sequence_number(shard.count - 1), shard.closed

    def replayed(self, pipeline_name: str, batch: Batch) -> ReplayResult:
        """The manifest a replay of ``batch`` would write, from the arithmetic (no read): each range's records, the last
        one read (a closed shard's last record, below its ending sequence number), their bytes; for commits that need
        no files (a directory output's), and for sizing what the state table stores of it."""
        results = []
        for rng in batch.ranges:
            shard = self.shards[int(rng.shard_id.removeprefix("shardId-"))]
            last = shard.sequence_number(shard.count - 1) if rng.to_shard_end else rng.end
            records = slot_of(last) - slot_of(rng.start) + 1  # a record a slot
            # As long as a replay's: a 16-hex-digit checksum and digest (these are made up, not the rows'), the last arrival.
            made_up = f"{hash((shard.index, records)) % 2**64:016x}"
            results.append(ShardResult(
                rng.shard_id, records, records * self.record_bytes, rng.start, last, made_up,
                last_arrival=self.arrival(slot_of(last)),
                digest=f"xxh3:{made_up}",
            ))  # fmt: skip
        return ReplayResult(pipeline_name, batch.batch_id, tuple(results))

    def data(self, shard: ShardSpec, k: int) -> bytes:
        name = f"{shard.index}:{k}:".encode()
        return name + b"x" * max(0, self.record_bytes - len(name))

    # -- botocore ----------------------------------------------------------------------------------------------------

    def client(self, config: Config | None = None) -> Any:
        """A boto3 Kinesis client whose requests this stream answers, as the DAG's tasks make theirs: with the library's
        client config (``config``, else CLIENT_CONFIG pooled for the default plan_concurrency) and its retry policy."""
        made = boto3.client(
            "kinesis", region_name=REGION, aws_access_key_id="socketless", aws_secret_access_key="socketless",
            config=config or kinesis_client.CLIENT_CONFIG,
        )  # fmt: skip
        return kinesis_client.leave_throttling_to_call(self.attach(made))

    @property
    def pacing(self) -> kinesis_client.Pacing:
        """The shards' budgets kept by this stream's virtual clock: what plan_batch is given with its client."""
        return kinesis_client.Pacing(self.clock, self.clock.sleep)

    def attach(self, client: Any) -> Any:
        """Answer ``client``'s requests from this stream; returns the client."""
        client.meta.events.register("before-send.kinesis", self._answer)
        return client

    def _answer(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        started = time.thread_time()
        operation = str(request.headers.get("X-Amz-Target", b"")).split(".")[-1].rstrip("'")
        body = request.body
        params = json.loads(body.decode() if isinstance(body, bytes) else body or "{}")
        try:
            status, answer = 200, self._operation(operation, params)
        except _Refused as refused:
            status, answer = 400, {"__type": refused.code, "message": refused.message}
        data = json.dumps(answer).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1", "Content-Length": str(len(data)), "x-amzn-RequestId": "socketless"}
        with self._lock:
            self.cpu_seconds += time.thread_time() - started
        return AWSResponse(request.url, status, headers, _Raw(data))

    def _operation(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        at = self.clock()
        with self._lock:
            self.calls[operation] = self.calls.get(operation, 0) + 1
        if operation == "ListShards":
            return self._list_shards(params, at)
        if operation == "DescribeStreamSummary":
            return self._describe(params, at)
        if operation == "GetShardIterator":
            return self._get_shard_iterator(params, at)
        if operation == "GetRecords":
            return self._get_records(params, at)
        raise _Refused("UnknownOperationException", f"{operation} is not answered by the socketless stream")

    # -- limits ------------------------------------------------------------------------------------------------------

    def _within(self, recent: list[float], at: float, per_second: int) -> bool:
        """Whether a call at ``at`` keeps to ``per_second`` calls in any second; counts it if so."""
        with self._lock:
            while recent and recent[0] <= at - 1.0 + TOLERANCE:
                recent.pop(0)
            if len(recent) >= per_second:
                self.throttled += 1
                return False
            recent.append(at)
            return True

    def _shard_limit(self, operation: str, shard: ShardSpec, at: float) -> None:
        with self._lock:
            self.shard_calls[operation][shard.index] += 1
        if not self._within(self._recent[operation][shard.index], at, SHARD_CALLS_PER_SECOND):
            raise _Refused(
                "ProvisionedThroughputExceededException",
                f"Rate exceeded for shard {shard.shard_id} in stream {self.stream} under account 000000000000.",
            )

    def _stream_limit(self, operation: str, per_second: int, at: float) -> None:
        if not self._within(self._stream_recent[operation], at, per_second):
            raise _Refused("LimitExceededException", f"Rate exceeded for {operation} of stream {self.stream}.")

    # -- operations --------------------------------------------------------------------------------------------------

    def _check_stream(self, name: str | None) -> None:
        if name != self.stream:
            raise _Refused("ResourceNotFoundException", f"Stream {name} under account 000000000000 not found.")

    def _shard(self, shard: str) -> ShardSpec:
        index = int(shard.removeprefix("shardId-")) if shard.startswith("shardId-") and shard[8:].isdigit() else -1
        if not 0 <= index < len(self.shards):
            raise _Refused("ResourceNotFoundException", f"Shard {shard} in stream {self.stream} does not exist")
        return self.shards[index]

    def _list_shards(self, params: dict[str, Any], at: float) -> dict[str, Any]:
        token, name = params.get("NextToken"), params.get("StreamName")
        if (token is None) == (name is None):
            raise _Refused("InvalidArgumentException", "Either NextToken or StreamName should be provided, not both.")
        if token is not None:
            name, _, offset = str(token).rpartition("|")
            if not offset.isdigit():
                raise _Refused("InvalidArgumentException", "Invalid NextToken.")
            first = int(offset)
        else:
            first = 0
        self._check_stream(name)
        self._stream_limit("ListShards", LIST_SHARDS_PER_SECOND, at)
        size = min(int(params.get("MaxResults") or LIST_PAGE), LIST_PAGE)
        page: dict[str, Any] = {"Shards": [self._shard_dict(s) for s in self.shards[first : first + size]]}
        if first + size < len(self.shards):
            page["NextToken"] = f"{name}|{first + size}"
        return page

    @staticmethod
    def _shard_dict(shard: ShardSpec) -> dict[str, Any]:
        seq = {"StartingSequenceNumber": str(shard.starting_sequence_number)}
        if shard.ending_sequence_number is not None:
            seq["EndingSequenceNumber"] = str(shard.ending_sequence_number)
        found: dict[str, Any] = {
            "ShardId": shard.shard_id,
            "HashKeyRange": {"StartingHashKey": str(shard.hash_range[0]), "EndingHashKey": str(shard.hash_range[1])},
            "SequenceNumberRange": seq,
        }
        if shard.parents:
            found["ParentShardId"] = shard.parents[0]
        if len(shard.parents) > 1:
            found["AdjacentParentShardId"] = shard.parents[1]
        return found

    def _describe(self, params: dict[str, Any], at: float) -> dict[str, Any]:
        self._check_stream(params.get("StreamName"))
        self._stream_limit("DescribeStreamSummary", DESCRIBE_PER_SECOND, at)
        return {
            "StreamDescriptionSummary": {
                "StreamName": self.stream, "StreamARN": f"arn:aws:kinesis:{REGION}:000000000000:stream/{self.stream}",
                "StreamStatus": "ACTIVE", "StreamModeDetails": {"StreamMode": "PROVISIONED"}, "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": self.created.timestamp(), "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE", "OpenShardCount": sum(1 for s in self.shards if not s.closed), "ConsumerCount": 0,
            }
        }  # fmt: skip

    def _get_shard_iterator(self, params: dict[str, Any], at: float) -> dict[str, Any]:
        self._check_stream(params.get("StreamName"))
        shard = self._shard(str(params.get("ShardId")))
        self._shard_limit("GetShardIterator", shard, at)
        kind, seq = params.get("ShardIteratorType"), params.get("StartingSequenceNumber")
        if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            if seq is None or not str(seq).isdigit():
                raise _Refused("InvalidArgumentException", f"{kind} needs a StartingSequenceNumber")
            number, end = int(seq), shard.ending_sequence_number
            if number < shard.starting_sequence_number or (end is not None and number > end):
                raise _Refused("InvalidArgumentException", f"Invalid StartingSequenceNumber {seq}: not of shard {shard.shard_id}")
            # The first record at (after) the number: the one of its slot, if the number is not past it, else the next.
            slot = slot_of(number)
            mine = slot_number(slot, shard.index)
            k = slot - shard.first + (number > mine if kind == "AT_SEQUENCE_NUMBER" else number >= mine)
        elif seq is not None:
            raise _Refused("InvalidArgumentException", f"{kind} takes no StartingSequenceNumber")
        elif kind == "TRIM_HORIZON":
            k = 0
        elif kind == "LATEST":
            k = shard.count
        elif kind == "AT_TIMESTAMP":
            if params.get("Timestamp") is None:
                raise _Refused("InvalidArgumentException", "AT_TIMESTAMP needs a Timestamp")
            wanted = float(params["Timestamp"]) * 1000
            if wanted > self.now.timestamp() * 1000:
                raise _Refused("InvalidArgumentException", "The timestampInMillis parameter cannot be greater than the currentTimeMillis.")
            # The first record that arrived at or after the time: its millisecond's first slot.
            k = max(0, math.ceil(wanted - self.t0_ms - 1e-6)) * self.per_millisecond - shard.first
        else:
            raise _Refused("InvalidArgumentException", f"unknown ShardIteratorType {kind}")
        return {"ShardIterator": self._iterator(shard, max(0, min(k, shard.count)))}

    def _iterator(self, shard: ShardSpec, k: int) -> str:
        return base64.b64encode(f"{self.stream}|{shard.index}|{k}".encode()).decode()

    def _position(self, iterator: Any) -> tuple[ShardSpec, int]:
        try:
            stream, index, k = base64.b64decode(str(iterator)).decode().split("|")
            shard, position = self.shards[int(index)], int(k)
        except (ValueError, IndexError) as exc:
            raise _Refused("InvalidArgumentException", f"Invalid ShardIterator: {iterator}") from exc
        self._check_stream(stream)
        return shard, position

    def _get_records(self, params: dict[str, Any], at: float) -> dict[str, Any]:
        shard, k = self._position(params.get("ShardIterator"))
        self._shard_limit("GetRecords", shard, at)
        limit = int(params.get("Limit") or 10_000)
        if not 1 <= limit <= 10_000:
            raise _Refused("InvalidArgumentException", f"Limit {limit} is not between 1 and 10000")
        last = min(shard.count, k + limit)
        newest = self._arrival_ms(shard.first + shard.count - 1)
        if k >= last and shard.closed:  # a closed shard read to its end: no next iterator
            return {"Records": [], "MillisBehindLatest": max(0, int(self.now.timestamp() * 1000) - newest)}
        if k >= last:
            return {"Records": [], "NextShardIterator": self._iterator(shard, k), "MillisBehindLatest": 0}
        records = [
            {
                "SequenceNumber": str(shard.sequence_number(i)),
                "ApproximateArrivalTimestamp": self._arrival_ms(shard.first + i) / 1000,
                "Data": base64.b64encode(self.data(shard, i)).decode(),
                "PartitionKey": f"key-{shard.index}",
            }
            for i in range(k, last)
        ]
        behind = newest - self._arrival_ms(shard.first + last - 1)
        return {"Records": records, "NextShardIterator": self._iterator(shard, last), "MillisBehindLatest": behind}


class _Raw:
    """What AWSResponse reads a body from."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data
