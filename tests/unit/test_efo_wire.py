"""The test endpoint's event-stream encoder (tests/stack/event_stream.py) held to botocore's own decoder and to the
Kinesis client's parser of SubscribeToShard, with no socket: what the endpoint sends is what botocore reads from Kinesis.
(tests/integration/test_efo_kinesis_mock.py holds the HTTP/2 client to a third-party server too.)"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.eventstream import EventStreamBuffer, EventStreamError

from stack import event_stream

RECORD = {
    "SequenceNumber": "4968",
    "ApproximateArrivalTimestamp": 1795936348.25,
    "Data": base64.b64encode(b"\x00kpl").decode(),
    "PartitionKey": "k",
}


def test_a_message_decodes_with_botocores_buffer_to_its_headers_and_payload() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(event_stream.initial_response() + event_stream.subscribe_event({"Records": [], "MillisBehindLatest": 0}))
    first, second = list(buffer)
    assert first.headers == {":message-type": "event", ":event-type": "initial-response", ":content-type": "application/json"}
    assert first.payload == b"{}"
    assert second.headers[":event-type"] == "SubscribeToShardEvent" and second.payload == b'{"Records":[],"MillisBehindLatest":0}'


def test_a_corrupt_message_is_refused_by_botocores_checksum() -> None:
    from botocore.eventstream import ChecksumMismatch

    encoded = bytearray(event_stream.subscribe_event({"Records": [RECORD], "MillisBehindLatest": 3}))
    encoded[-10] ^= 1
    buffer = EventStreamBuffer()
    buffer.add_data(bytes(encoded))
    with pytest.raises(ChecksumMismatch):
        list(buffer)


class _Raw:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        pass


def _subscribed(body: bytes, chunk: int = 7) -> Any:
    """A Kinesis client's SubscribeToShard whose response body is ``body``, fed to botocore in small chunks."""
    client = boto3.client("kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")

    def answer(request: Any, **_: Any) -> AWSResponse:
        headers = HTTPHeaders()
        headers["content-type"] = "application/vnd.amazon.eventstream"
        return AWSResponse(request.url, 200, headers, _Raw([body[i : i + chunk] for i in range(0, len(body), chunk)]))

    client.meta.events.register("before-send.kinesis.SubscribeToShard", answer)
    arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1"
    return client.subscribe_to_shard(ConsumerARN=arn, ShardId="shardId-000000000000", StartingPosition={"Type": "LATEST"})["EventStream"]


def test_the_kinesis_client_parses_the_endpoints_events_as_kinesis_events() -> None:
    child = {
        "ShardId": "shardId-000000000002",
        "ParentShards": ["shardId-000000000000"],
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9"},
    }
    body = (
        event_stream.initial_response()
        + event_stream.subscribe_event({"Records": [RECORD], "ContinuationSequenceNumber": "4968", "MillisBehindLatest": 3})
        + event_stream.subscribe_event({"Records": [], "MillisBehindLatest": 0, "ChildShards": [child]})
    )
    first, last = (e["SubscribeToShardEvent"] for e in _subscribed(body))
    assert first == {
        "Records": [{"SequenceNumber": "4968", "ApproximateArrivalTimestamp": datetime(2026, 11, 29, 7, 12, 28, 250000, UTC),
                     "Data": b"\x00kpl", "PartitionKey": "k"}],
        "ContinuationSequenceNumber": "4968", "MillisBehindLatest": 3,
    }  # fmt: skip
    assert "ContinuationSequenceNumber" not in last and last["ChildShards"] == [child]


def test_an_exception_in_the_stream_is_raised_with_its_kinesis_code() -> None:
    body = event_stream.initial_response() + event_stream.exception("ResourceInUseException", "taken over")
    with pytest.raises(EventStreamError) as raised:
        list(_subscribed(body))
    assert raised.value.response["Error"] == {"Code": "ResourceInUseException", "Message": "taken over"}
