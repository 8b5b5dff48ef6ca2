"""A Kinesis endpoint of the project's own that serves enhanced fan-out in front of the local stream (kinesalite).

    server = EfoServer(kinesis_url).start()      # then point a Kinesis client at server.url
    server.rules = Rules(lifetime_events=3)       # short subscriptions, faults: see Rules

kinesalite has no consumer API and no SubscribeToShard; moto registers consumers but does not subscribe. This endpoint
speaks both protocols on one port, as Kinesis's does: HTTP/2 (prior knowledge, the ``h2`` library over asyncio) for
SubscribeToShard, and any call over HTTP/1.1 (botocore's own transport). It keeps the stream's consumers itself
(RegisterStreamConsumer, DescribeStreamConsumer, ListStreamConsumers, DeregisterStreamConsumer), serves
SubscribeToShard by reading kinesalite with GetShardIterator and GetRecords, each page one SubscribeToShardEvent in
Kinesis's event-stream encoding (tests/stack/event_stream.py), and forwards every other call to kinesalite unchanged.

Kinesis's rules it keeps, each switchable for tests that are about something else (``Rules``): a subscription ends
after ``lifetime_events`` events (Kinesis: 5 minutes); a second subscribe of a consumer and shard within
``in_use_seconds`` of the last successful one is refused with ResourceInUseException, and a later one takes the
subscription over (the old one ends with a ResourceInUseException event); subscribes closer together than
``subscribe_interval`` are refused with LimitExceededException; a consumer is CREATING for ``creating_seconds`` after
it is registered, and a subscribe meanwhile is refused with ResourceInUseException. Faults on demand: ``throttle``
subscribes refused with LimitExceededException, ``cut_events`` (the n-th event of each subscription, counted across
subscriptions) sent half and the stream reset.

Kinesis pushes at most 2 MB/s to each consumer on each shard, whatever the shard's other readers take: with
``bytes_per_second`` set, each consumer and shard has a bucket of a second's bytes, refilled at that rate (``Pace``), and
an event waits while the bucket is in debt (the proxy's GetRecords budget, kinesis_proxy.py, works the same way, and
the two do not share: the server reads the backing stream directly unless it is pointed at the proxy). Unset, events
come as fast as the backing stream serves them, as the tests about something else want.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from botocore.exceptions import ClientError

from stack import event_stream

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TARGET = "Kinesis_20131202."
JSON = "application/x-amz-json-1.1"


@dataclass
class Rules:
    """What the endpoint enforces and injects; change ``EfoServer.rules`` between calls."""

    lifetime_events: int = 1_000_000  # events a subscription sends before it ends (Kinesis: 5 minutes' worth)
    event_records: int = 10_000  # the GetRecords Limit behind each event
    idle_seconds: float = 0.05  # the wait before the next event when the shard had nothing new
    event_seconds: float = 0.0  # the wait before the next event when it had records (a slower shard)
    in_use_seconds: float = 5.0  # ResourceInUseException for a subscribe within this of the last successful one
    subscribe_interval: float = 1.0  # LimitExceededException for subscribes of a consumer and shard closer than this
    creating_seconds: float = 0.0  # how long a registered consumer stays CREATING
    throttle: int = 0  # the next this many subscribes are refused with LimitExceededException
    max_consumers: int = 20  # a stream's consumers at most (Kinesis's limit); a registration beyond is LimitExceededException
    max_creating: int = 5  # consumers CREATING at once at most (Kinesis's limit), likewise
    cut_events: set[int] = field(default_factory=set)  # these events (counted from 1 over all subscriptions): half sent, then reset
    bytes_per_second: float | None = None  # each consumer's read rate on each shard (Kinesis: 2 MB/s); None: unpaced


class Pace:
    """A consumer's read rate on one shard: a bucket of a second's bytes, refilled at ``bytes_per_second``. An event may
    take it into debt (an event is sent whole); the next waits until the debt is repaid, so that over any stretch longer
    than a second the consumer gets the rate and no more."""

    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = bytes_per_second, clock
        self.tokens, self.refilled = bytes_per_second, clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now

    def wait_seconds(self) -> float:
        """How long the next event must wait: until the bucket is out of debt."""
        self._refill()
        return max(0.0, -self.tokens / self.rate)

    def spend(self, size: int) -> None:
        """An event of ``size`` bytes (its records' data and partition keys, as Kinesis counts them) was sent."""
        self._refill()
        self.tokens -= size


@dataclass
class Consumer:
    name: str
    arn: str
    stream_arn: str
    created: float
    tags: dict[str, str] = field(default_factory=dict)

    def status(self, creating_seconds: float) -> str:
        return "CREATING" if time.time() - self.created < creating_seconds else "ACTIVE"


class Refused(Exception):
    """A call refused with Kinesis's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Counts:
    """What the endpoint served, for tests to assert on."""

    subscribes: int = 0  # successful ones
    refused: dict[str, int] = field(default_factory=dict)  # by error code
    events: int = 0
    taken_over: int = 0
    http1_calls: int = 0
    paced: int = 0  # events that waited for their consumer's rate on the shard


class EfoServer:
    def __init__(self, kinesis_url: str, rules: Rules | None = None) -> None:
        self.kinesis_url = kinesis_url
        self.rules = rules or Rules()
        self.counts = Counts()
        self.consumers: dict[str, Consumer] = {}  # by ARN
        self.kinesis = boto3.client("kinesis", endpoint_url=kinesis_url)
        self.last_subscribe: dict[tuple[str, str], float] = {}  # (consumer ARN, shard) -> the last subscribe's time, any outcome
        self.last_success: dict[tuple[str, str], float] = {}
        self.active: dict[tuple[str, str], Callable[[], None]] = {}  # the live subscription's take-over
        self.paces: dict[tuple[str, str], Pace] = {}  # (consumer ARN, shard) -> its rate, kept across renewals, as Kinesis's
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, name="efo-server", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EfoServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._connection, "127.0.0.1", 0), self.loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Close the port and every connection, then the loop."""

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def reset(self, rules: Rules | None = None) -> None:
        """New rules and counts, the rate and in-use clocks forgotten (consumers stay)."""
        with self.lock:
            self.rules, self.counts = rules or Rules(), Counts()
            self.last_subscribe.clear()
            self.last_success.clear()
            self.paces.clear()

    # -- connections ---------------------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await reader.readexactly(len(PREFACE))
            if first == PREFACE:
                await _H2Connection(self, reader, writer, first).run()
            else:
                await self._http1(reader, writer, first)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _http1(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes) -> None:
        """botocore's HTTP/1.1 calls, kept alive: read each request whole, answer it."""
        buffered = first
        while True:
            while b"\r\n\r\n" not in buffered:
                more = await reader.read(65536)
                if not more:
                    return
                buffered += more
            head, buffered = buffered.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
            length = int(headers.get("content-length", "0"))
            while len(buffered) < length:
                more = await reader.read(65536)
                if not more:
                    return
                buffered += more
            body, buffered = buffered[:length], buffered[length:]
            self.counts.http1_calls += 1
            status, payload = await self._call(headers, body, http2=False)
            writer.write(
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Refused'}\r\nContent-Type: {JSON}\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()

    async def _call(self, headers: dict[str, str], body: bytes, http2: bool) -> tuple[int, bytes]:
        """A call other than a subscription: the consumer API here, everything else kinesalite's."""
        operation = headers.get("x-amz-target", "").removeprefix(TARGET)
        try:
            if operation == "SubscribeToShard" and not http2:  # Kinesis documents HTTP/1.1 as unsupported for it
                return 505, json.dumps(
                    {"__type": "HttpVersionNotSupported", "message": "SubscribeToShard is served over HTTP/2 only"}
                ).encode()
            handler = getattr(self, f"_op_{operation}", None)
            if handler is not None:
                return 200, json.dumps(handler(json.loads(body or b"{}"))).encode()
            return await asyncio.to_thread(self._forward, headers, body)
        except Refused as exc:
            return 400, json.dumps({"__type": exc.code, "message": exc.message}).encode()

    def _forward(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        keep = {k: v for k, v in headers.items() if k in {"x-amz-target", "content-type", "authorization", "x-amz-date"}}
        request = urllib.request.Request(self.kinesis_url, data=body, headers=keep, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    # -- consumers ---------------------------------------------------------------------------------------------------

    def _stream_arn(self, name: str) -> str:
        try:
            return str(self.kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"])
        except ClientError as exc:
            raise Refused(exc.response["Error"]["Code"], exc.response["Error"].get("Message", "")) from exc

    def _describe(self, c: Consumer) -> dict[str, Any]:
        return {"ConsumerName": c.name, "ConsumerARN": c.arn, "ConsumerStatus": c.status(self.rules.creating_seconds),
                "ConsumerCreationTimestamp": c.created, "StreamARN": c.stream_arn}  # fmt: skip

    def _op_RegisterStreamConsumer(self, body: dict[str, Any]) -> dict[str, Any]:
        stream_arn, name = body["StreamARN"], body["ConsumerName"]
        self._stream_arn(stream_arn.split("/", 1)[1])  # the stream exists
        with self.lock:
            if any(c.stream_arn == stream_arn and c.name == name for c in self.consumers.values()):
                raise Refused("ResourceInUseException", f"Consumer {name} already exists")
            mine = [c for c in self.consumers.values() if c.stream_arn == stream_arn]
            creating = [c for c in mine if c.status(self.rules.creating_seconds) == "CREATING"]
            if len(mine) >= self.rules.max_consumers or len(creating) >= self.rules.max_creating:
                self.counts.refused["LimitExceededException"] = self.counts.refused.get("LimitExceededException", 0) + 1
                raise Refused(
                    "LimitExceededException", f"{len(mine)} consumers, {len(creating)} of them CREATING: over the stream's limits"
                )
            created = time.time()
            consumer = Consumer(name, f"{stream_arn}/consumer/{name}:{int(created)}", stream_arn, created, dict(body.get("Tags", {})))
            self.consumers[consumer.arn] = consumer
        described = self._describe(consumer)
        return {"Consumer": {k: described[k] for k in ("ConsumerName", "ConsumerARN", "ConsumerStatus", "ConsumerCreationTimestamp")}}

    def _find(self, body: dict[str, Any]) -> Consumer:
        if body.get("ConsumerARN"):
            found = self.consumers.get(body["ConsumerARN"])
        else:
            found = next(
                (c for c in self.consumers.values() if c.stream_arn == body.get("StreamARN") and c.name == body.get("ConsumerName")), None
            )
        if found is None:
            raise Refused("ResourceNotFoundException", f"Consumer {body.get('ConsumerARN') or body.get('ConsumerName')} not found")
        return found

    def _op_DescribeStreamConsumer(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"ConsumerDescription": self._describe(self._find(body))}

    def _op_ListStreamConsumers(self, body: dict[str, Any]) -> dict[str, Any]:
        found = [c for c in self.consumers.values() if c.stream_arn == body["StreamARN"]]
        return {"Consumers": [{k: v for k, v in self._describe(c).items() if k != "StreamARN"} for c in found]}

    def _op_ListTagsForResource(self, body: dict[str, Any]) -> dict[str, Any]:
        tags = self._find({"ConsumerARN": body["ResourceARN"]}).tags
        return {"Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}

    def _op_DeregisterStreamConsumer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.consumers.pop(self._find(body).arn, None)
        return {}

    # -- subscriptions -----------------------------------------------------------------------------------------------

    def admit(self, body: dict[str, Any]) -> tuple[Consumer, str, str]:
        """Check a subscribe against the rules; the consumer, the stream's name and the first iterator."""
        consumer, shard = self._find({"ConsumerARN": body.get("ConsumerARN")}), body["ShardId"]
        key, now = (consumer.arn, shard), time.monotonic()
        with self.lock:
            rules, last = self.rules, self.last_subscribe.get(key)
            self.last_subscribe[key] = now
            if rules.throttle > 0:
                rules.throttle -= 1
                raise Refused("LimitExceededException", "Rate exceeded for consumer and shard (injected)")
            if last is not None and now - last < rules.subscribe_interval:
                raise Refused("LimitExceededException", f"Rate exceeded for consumer {consumer.arn} and shard {shard}")
            if consumer.status(rules.creating_seconds) != "ACTIVE":
                raise Refused("ResourceInUseException", f"Consumer {consumer.arn} is not ACTIVE")
            success = self.last_success.get(key)
            if success is not None and now - success < rules.in_use_seconds:
                raise Refused("ResourceInUseException", f"Another active subscription exists for consumer {consumer.arn} and shard {shard}")
        stream = consumer.stream_arn.split("/", 1)[1]
        position = body["StartingPosition"]
        kwargs: dict[str, Any] = {"ShardIteratorType": position["Type"]}
        if "SequenceNumber" in position:
            kwargs["StartingSequenceNumber"] = position["SequenceNumber"]
        if "Timestamp" in position:
            kwargs["Timestamp"] = position["Timestamp"]
        try:
            iterator = self.kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, **kwargs)["ShardIterator"]
        except ClientError as exc:
            raise Refused(exc.response["Error"]["Code"], exc.response["Error"].get("Message", "")) from exc
        with self.lock:
            self.last_success[key] = now
            self.counts.subscribes += 1
            previous = self.active.pop(key, None)
        if previous is not None:
            previous()  # a later subscribe takes the subscription over
            self.counts.taken_over += 1
        return consumer, stream, iterator

    def pace(self, key: tuple[str, str]) -> Pace | None:
        """The consumer's rate on the shard, if the rules pace subscriptions."""
        rate = self.rules.bytes_per_second
        if rate is None:
            return None
        with self.lock:
            pace = self.paces.get(key)
            if pace is None or pace.rate != rate:
                pace = self.paces[key] = Pace(rate)
            return pace

    def page(self, iterator: str, stream: str, shard: str) -> dict[str, Any]:
        """The next SubscribeToShardEvent (JSON-ready) from kinesalite, the next iterator under "_next", and the
        records' bytes (data and partition keys) under "_bytes"."""
        page = self.kinesis.get_records(ShardIterator=iterator, Limit=self.rules.event_records)
        records = [
            {"SequenceNumber": r["SequenceNumber"], "ApproximateArrivalTimestamp": r["ApproximateArrivalTimestamp"].timestamp(),
             "Data": base64.b64encode(r["Data"]).decode(), "PartitionKey": r["PartitionKey"]}
            for r in page["Records"]
        ]  # fmt: skip
        event: dict[str, Any] = {
            "Records": records,
            "MillisBehindLatest": page.get("MillisBehindLatest", 0),
            "_next": page.get("NextShardIterator"),
            "_bytes": sum(len(r["Data"]) + len(r["PartitionKey"]) for r in page["Records"]),
        }
        if records:
            event["ContinuationSequenceNumber"] = records[-1]["SequenceNumber"]
        if event["_next"] is None:  # the closed shard's end: its children, and no continuation
            shards = self.kinesis.list_shards(StreamName=stream)["Shards"]
            event["ChildShards"] = [
                {"ShardId": s["ShardId"], "ParentShards": [p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId")) if p],
                 "HashKeyRange": s["HashKeyRange"]}
                for s in shards if shard in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))
            ]  # fmt: skip
            event.pop("ContinuationSequenceNumber", None)
        return event


class _H2Connection:
    """One HTTP/2 connection: requests read whole, each answered by a task of its own; data sent within flow control."""

    def __init__(self, server: EfoServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.first = first
        self.requests: dict[int, tuple[dict[str, str], bytearray]] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.window = asyncio.Event()

    async def run(self) -> None:
        self.conn.initiate_connection()
        data = self.first
        while data:
            for event in self.conn.receive_data(data):
                self._on(event)
            await self._flush()
            data = await self.reader.read(65536)
        for task in self.tasks.values():
            task.cancel()

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.requests[event.stream_id] = ({str(k): str(v) for k, v in event.headers}, bytearray())
        elif isinstance(event, h2.events.DataReceived):
            self.requests[event.stream_id][1].extend(event.data)
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            headers, body = self.requests.pop(event.stream_id)
            self.tasks[event.stream_id] = asyncio.ensure_future(self._answer(event.stream_id, headers, bytes(body)))
        elif isinstance(event, h2.events.StreamReset):
            task = self.tasks.pop(event.stream_id, None)
            if task is not None:
                task.cancel()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self.window.set()

    async def _flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.writer.write(out)
            await self.writer.drain()

    async def _send(self, stream_id: int, data: bytes, end: bool = False) -> None:
        while data:
            room = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size, len(data))
            if room <= 0:
                self.window.clear()
                await self.window.wait()
                continue
            self.conn.send_data(stream_id, data[:room])
            data = data[room:]
            await self._flush()
        if end:
            self.conn.end_stream(stream_id)
            await self._flush()

    async def _respond(self, stream_id: int, status: int, content_type: str) -> None:
        self.conn.send_headers(stream_id, [(":status", str(status)), ("content-type", content_type)])
        await self._flush()

    async def _answer(self, stream_id: int, headers: dict[str, str], body: bytes) -> None:
        try:
            if headers.get("x-amz-target", "").removeprefix(TARGET) == "SubscribeToShard":
                await self._subscribe(stream_id, json.loads(body))
                return
            status, payload = await self.server._call(headers, body, http2=True)
            await self._respond(stream_id, status, JSON)
            await self._send(stream_id, payload, end=True)
        except (h2.exceptions.StreamClosedError, ConnectionError):
            pass
        finally:
            self.tasks.pop(stream_id, None)

    async def _subscribe(self, stream_id: int, body: dict[str, Any]) -> None:
        server = self.server
        try:
            consumer, stream, iterator = await asyncio.to_thread(server.admit, body)
        except Refused as exc:
            with server.lock:
                server.counts.refused[exc.code] = server.counts.refused.get(exc.code, 0) + 1
            await self._respond(stream_id, 400, JSON)
            await self._send(stream_id, json.dumps({"__type": exc.code, "message": exc.message}).encode(), end=True)
            return
        key = (consumer.arn, body["ShardId"])
        taken = asyncio.Event()

        def take_over() -> None:
            server.loop.call_soon_threadsafe(taken.set)

        server.active[key] = take_over
        pace = server.pace(key)
        try:
            await self._respond(stream_id, 200, "application/vnd.amazon.eventstream")
            await self._send(stream_id, event_stream.initial_response())
            for sent in itertools.count(1):
                if taken.is_set():
                    await self._send(
                        stream_id, event_stream.exception("ResourceInUseException", "the subscription was taken over"), end=True
                    )
                    return
                wait = pace.wait_seconds() if pace is not None else 0.0
                if wait > 0:
                    with server.lock:
                        server.counts.paced += 1
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(taken.wait(), wait)
                    if taken.is_set():
                        continue  # answered with the take-over's exception above
                try:
                    event = await asyncio.to_thread(server.page, iterator, stream, body["ShardId"])
                except ClientError as exc:  # kinesalite (or a proxy in front of it) refused a read: Kinesis's own failure
                    failure = event_stream.exception("InternalFailureException", f"reading the shard failed: {exc}")
                    await self._send(stream_id, failure, end=True)
                    return
                iterator = event.pop("_next")
                size = event.pop("_bytes")
                with server.lock:
                    server.counts.events += 1
                    cut = server.counts.events in server.rules.cut_events
                encoded = event_stream.subscribe_event(event)
                if cut:
                    await self._send(stream_id, encoded[: len(encoded) // 2])
                    self.conn.reset_stream(stream_id)
                    await self._flush()
                    return
                await self._send(stream_id, encoded)
                if pace is not None:
                    pace.spend(size)
                if iterator is None or sent >= server.rules.lifetime_events:
                    await self._send(stream_id, b"", end=True)
                    return
                pause = server.rules.event_seconds if event["Records"] else server.rules.idle_seconds
                if pause:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(taken.wait(), pause)
        finally:
            if server.active.get(key) is take_over:
                server.active.pop(key, None)
