"""A test-only HTTP proxy in front of the local Kinesis endpoint that enforces Kinesis's read limits.

No emulator throttles, so this one does: per shard, GetRecords calls and bytes a second and
GetShardIterator calls a second, answering ProvisionedThroughputExceededException as Kinesis does.
It can also hide a shard's records below a sequence number, as retention trims them (from the start, or once a
shard's read has passed a record), report another retention, and refuse a session
token a set time after it first saw it, as Kinesis refuses expired credentials (no emulator checks expiry).

    proxy = KinesisProxy("http://127.0.0.1:4567", ProxyLimits(bytes_per_second=100_000)).start()
    ... point the Kinesis endpoint at proxy.url ...
    proxy.stop(); print(proxy.report())
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlparse


@dataclass(frozen=True)
class ProxyLimits:
    """Kinesis's per-shard limits by default."""

    get_records_per_second: int = 5
    bytes_per_second: float = 2 * 1024 * 1024
    get_shard_iterator_per_second: int = 5
    # Seconds after the proxy first sees a session token (X-Amz-Security-Token) that it refuses it as expired; None: never.
    token_lifetime: float | None = None
    # The most records a GetRecords call returns (Kinesis: 10,000); a limit scaled down with the byte rate keeps one
    # call's burst as many seconds of the shard's budget as on Kinesis. None: as many as the call asks for.
    max_records_per_call: int | None = None


@dataclass
class ShardCounters:
    get_records: int = 0
    get_shard_iterator: int = 0
    throttled: int = 0
    records: int = 0
    bytes: int = 0
    first_read: float | None = None
    last_read: float | None = None

    def rate(self) -> float:
        """Bytes a second served between the first and the last read."""
        if self.first_read is None or self.last_read is None or self.last_read <= self.first_read:
            return 0.0
        return self.bytes / (self.last_read - self.first_read)


@dataclass
class _Shard:
    calls: deque[float] = field(default_factory=deque)
    iterator_calls: deque[float] = field(default_factory=deque)
    tokens: float = 0.0  # bytes that may still be read; negative after a large read, refilled over time
    refilled: float = field(default_factory=time.monotonic)


class LocalServer:
    """An HTTP server on 127.0.0.1 in a daemon thread: what this proxy and the fault proxies share."""

    def _listen(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class KinesisProxy(LocalServer):
    def __init__(self, upstream: str, limits: ProxyLimits | None = None, port: int = 0) -> None:
        target = urlparse(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.limits = limits or ProxyLimits()
        self.counters: dict[str, ShardCounters] = defaultdict(ShardCounters)  # by shard id: tests read one stream's
        # shard id -> the sequence number of its first record left: records below it are gone, as if trimmed
        self.trim_below: dict[str, int] = {}
        # shard id -> (s, h): retention trims the shard while it is read: once a page after record s is asked for,
        # every record below h is gone (trim_below), that page's included
        self.trim_after: dict[str, tuple[int, int]] = {}
        # The RetentionPeriodHours DescribeStreamSummary reports, if set: 0 puts every record near the retention
        self.retention_hours: int | None = None
        # Limits are a shard's of a stream, as Kinesis's are: two streams' shardId-000000000000 do not share one.
        self._shards: dict[tuple[str, str], _Shard] = defaultdict(lambda: _Shard(tokens=self.limits.bytes_per_second))
        self._iterators: dict[str, tuple[str, str]] = {}  # iterator -> (stream, shard id)
        self.session_tokens: dict[str, float] = {}  # session token -> when the proxy first saw it
        self.expired = 0  # requests refused with ExpiredTokenException
        self.read_tokens: dict[str, set[str]] = defaultdict(set)  # shard id -> the session tokens its GetRecords calls carried
        self._lock = threading.Lock()
        self._upstream_connections = threading.local()  # one kept-alive connection to the emulator per handler thread
        self._clients: set[socket.socket] = set()  # kept-alive client connections, closed by stop()
        self._listen(self._handler(), port)

    def stop(self) -> None:
        """Stop listening and end every kept-alive connection: after stop, no call reaches the emulator through here."""
        super().stop()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

    def throttled(self) -> int:
        return sum(c.throttled for c in self.counters.values())

    def report(self) -> str:
        return "\n".join(
            f"{sid}: {c.get_records} GetRecords, {c.throttled} throttled, {c.records} records, "
            f"{c.bytes / 1024:.0f} KiB at {c.rate() / 1024:.0f} KiB/s (limit {self.limits.bytes_per_second / 1024:.0f})"
            for sid, c in sorted(self.counters.items())
        )

    # -- limits ----------------------------------------------------------------------------------

    def _admit(self, stream: str, shard_id: str, operation: str) -> bool:
        now = time.monotonic()
        with self._lock:
            shard = self._shards[stream, shard_id]
            calls, limit = (
                (shard.calls, self.limits.get_records_per_second)
                if operation == "GetRecords"
                else (shard.iterator_calls, self.limits.get_shard_iterator_per_second)
            )
            while calls and now - calls[0] >= 1.0:
                calls.popleft()
            if operation == "GetRecords":
                shard.tokens = min(self.limits.bytes_per_second, shard.tokens + (now - shard.refilled) * self.limits.bytes_per_second)
                shard.refilled = now
            if len(calls) >= limit or (operation == "GetRecords" and shard.tokens <= 0):
                self.counters[shard_id].throttled += 1
                return False
            calls.append(now)
            return True

    def _served(self, stream: str, shard_id: str, records: list[dict[str, Any]]) -> None:
        size = sum(len(base64.b64decode(r["Data"])) + len(r["PartitionKey"]) for r in records)
        now = time.monotonic()
        with self._lock:
            self._shards[stream, shard_id].tokens -= size
            c = self.counters[shard_id]
            c.get_records += 1
            c.records += len(records)
            c.bytes += size
            c.first_read = c.first_read if c.first_read is not None else now
            c.last_read = now

    def _trimmed_position(self, shard_id: str, request: dict[str, Any]) -> bytes | None:
        """As Kinesis does past its trim horizon: a position below it starts at the first record left."""
        horizon = self.trim_below[shard_id]
        kind = request["ShardIteratorType"]
        below = kind == "TRIM_HORIZON" or (
            kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER") and int(request["StartingSequenceNumber"]) < horizon
        )
        if not below:
            return None
        moved = {**request, "ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": str(horizon)}
        return json.dumps(moved).encode()

    def _token_expired(self, token: str | None) -> bool:
        """Whether the request's session token is past its lifetime; notes when each token was first seen."""
        if token is None:
            return False
        now = time.monotonic()
        with self._lock:
            first = self.session_tokens.setdefault(token, now)
            if self.limits.token_lifetime is None or now - first <= self.limits.token_lifetime:
                return False
            self.expired += 1
            return True

    # -- HTTP ------------------------------------------------------------------------------------

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send the call on, over this thread's kept-alive connection; once more on a new one if the emulator closed it."""
        for attempt in range(2):
            connection = getattr(self._upstream_connections, "connection", None)
            if connection is None:
                connection = self._upstream_connections.connection = http.client.HTTPConnection(*self.upstream, timeout=60)
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, dict(response.getheaders()), response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                connection.close()
                self._upstream_connections.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as Kinesis's endpoint does: a client reuses its connection, not a new one (and a thread here) a call.
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._clients.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._clients.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in {"content-length", "connection", "transfer-encoding", "date", "server"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _throttle(self, shard_id: str) -> None:
                body = {"__type": "ProvisionedThroughputExceededException",
                        "message": f"Rate exceeded for shard {shard_id} (kinesis-replay test proxy)."}  # fmt: skip
                self._reply(400, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(body).encode())

            def _expired_token(self) -> None:
                # As Kinesis answers (HTTP 400 and this body, as the KPL logged it in awslabs/amazon-kinesis-producer#49).
                body = {"__type": "ExpiredTokenException", "message": "The security token included in the request is expired"}
                self._reply(400, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(body).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if proxy._token_expired(self.headers.get("X-Amz-Security-Token")):
                    self._expired_token()
                    return
                operation = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
                # http.client sets Content-Length from the body forwarded, which the proxy may have rewritten.
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                if b'"StreamARN"' in body:
                    named, refusal = by_name(json.loads(body), self.headers.get("Authorization", ""))
                    if refusal is not None:
                        self._reply(400, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(refusal).encode())
                        return
                    body = json.dumps(named).encode()
                request = json.loads(body or b"{}") if operation in ("GetRecords", "GetShardIterator") else {}
                if "ShardId" in request:
                    stream = request.get("StreamName", "unknown")  # a StreamARN was made a StreamName above
                    shard_id = request["ShardId"]
                else:
                    stream, shard_id = proxy._iterators.get(request.get("ShardIterator", ""), ("unknown", "unknown"))
                if operation in ("GetRecords", "GetShardIterator") and not proxy._admit(stream, shard_id, operation):
                    self._throttle(shard_id)
                    return
                if operation == "GetShardIterator" and shard_id in proxy.trim_below:
                    body = proxy._trimmed_position(shard_id, request) or body
                cap = proxy.limits.max_records_per_call
                if operation == "GetRecords" and cap is not None and request.get("Limit", 10_000) > cap:
                    body = json.dumps({**request, "Limit": cap}).encode()
                status, response_headers, payload = proxy._forward("POST", self.path, headers, body)
                if status == 200 and operation == "GetShardIterator":
                    proxy.counters[shard_id].get_shard_iterator += 1
                    proxy._iterators[json.loads(payload)["ShardIterator"]] = (stream, shard_id)
                elif status == 200 and operation == "DescribeStreamSummary" and proxy.retention_hours is not None:
                    described = json.loads(payload)
                    described["StreamDescriptionSummary"]["RetentionPeriodHours"] = proxy.retention_hours
                    payload = json.dumps(described).encode()
                elif status == 200 and operation == "GetRecords":
                    page = json.loads(payload)
                    after = proxy.trim_after.get(shard_id)
                    if after and page["Records"] and int(page["Records"][0]["SequenceNumber"]) > after[0]:
                        proxy.trim_below[shard_id] = after[1]
                    if shard_id in proxy.trim_below:
                        page["Records"] = [r for r in page["Records"] if int(r["SequenceNumber"]) >= proxy.trim_below[shard_id]]
                        payload = json.dumps(page).encode()
                    if page.get("NextShardIterator"):
                        proxy._iterators[page["NextShardIterator"]] = (stream, shard_id)
                    proxy._served(stream, shard_id, page["Records"])
                    if token := self.headers.get("X-Amz-Security-Token"):
                        proxy.read_tokens[shard_id].add(token)
                self._reply(status, response_headers, payload)

        return Handler


# kinesalite's streams, as its own StreamARNs name them: one account, and the region each request is signed for.
KINESALITE_ACCOUNT = "000000000000"


def by_name(request: dict[str, Any], authorization: str) -> tuple[dict[str, Any], dict[str, str] | None]:
    """A request that names its stream by StreamARN, as kinesalite takes it: by StreamName (kinesalite 3.3.3 refuses
    every StreamARN: "Value null at 'streamName'"), or Kinesis's refusal. GetRecords takes the ARN beside its iterator,
    and no StreamName: the ARN is dropped. An ARN of another account than kinesalite's is a stream the caller cannot
    reach, and one of another region than the request is signed for is one the endpoint does not hold (botocore sends
    a call to its client's region whatever the ARN says: kinesis_replay.core.streams.check_region)."""
    arn = str(request.pop("StreamARN"))
    parts = arn.split(":", 5)
    if len(parts) != 6 or not parts[5].startswith("stream/"):
        return request, {"__type": "ValidationException", "message": f"1 validation error detected: Value '{arn}' at 'streamARN'"}
    region, account, name = parts[3], parts[4], parts[5].removeprefix("stream/")
    signed = authorization.split("Credential=", 1)[-1].split("/")[2:3]
    if account != KINESALITE_ACCOUNT:
        return request, {"__type": "AccessDeniedException", "message": f"User is not authorized to access {arn}"}
    if signed and signed[0] != region:
        return request, {"__type": "ResourceNotFoundException", "message": f"Stream {name} under account {account} not found."}
    if "ShardIterator" not in request:
        request["StreamName"] = name
    return request, None
