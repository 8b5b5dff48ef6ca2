"""AWS event-stream messages, encoded: what Kinesis's SubscribeToShard response body is made of.

botocore ships the decoder (``botocore.eventstream.EventStreamBuffer``) and no encoder, so the test endpoint encodes
with this one; tests/unit/test_efo_wire.py holds it to botocore's decoder and to the Kinesis client's parser.

A message: a prelude (total length, headers' length, both big-endian uint32, then the prelude's CRC32), the headers
(each: name length as one byte, the name, a type byte, and for a string (type 7) its uint16 length and bytes), the
payload, and the CRC32 of everything before it.
"""

from __future__ import annotations

import binascii
import json
import struct
from typing import Any

_STRING = 7


def _headers(headers: dict[str, str]) -> bytes:
    out = b""
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        out += struct.pack(">B", len(n)) + n + struct.pack(">BH", _STRING, len(v)) + v
    return out


def message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = _headers(headers)
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    head = prelude + struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF) + encoded + payload
    return head + struct.pack(">I", binascii.crc32(head) & 0xFFFFFFFF)


def initial_response() -> bytes:
    """The first message of a SubscribeToShard body (the operation's output other than its stream: none)."""
    return message({":message-type": "event", ":event-type": "initial-response", ":content-type": "application/json"}, b"{}")


def subscribe_event(event: dict[str, Any]) -> bytes:
    """A SubscribeToShardEvent: ``event`` holds Records (JSON-ready: Data base64, ApproximateArrivalTimestamp in epoch
    seconds), ContinuationSequenceNumber, MillisBehindLatest, and ChildShards at a closed shard's end."""
    payload = json.dumps(event, separators=(",", ":")).encode()
    headers = {":message-type": "event", ":event-type": "SubscribeToShardEvent", ":content-type": "application/json"}
    return message(headers, payload)


def exception(code: str, text: str) -> bytes:
    """An error in the stream, as Kinesis sends one inside a 200 response (ResourceInUseException, InternalFailure...)."""
    headers = {":message-type": "exception", ":exception-type": code, ":content-type": "application/json"}
    return message(headers, json.dumps({"message": text}).encode())
