"""The DynamoDB requests a boto3 client sends, as botocore serialised them, with what DynamoDB would bill for their writes.

``RequestLog.attach(client)`` records every request of a DynamoDB client (the operation and its JSON body) at
botocore's ``before-send``: what leaves the client, after the DynamoDBStateStore built it and botocore serialised
it. With ``answer_writes=True`` it also answers the writes (PutItem, UpdateItem, TransactWriteItems) with an empty
success, so a store's writes can be counted with no table at all (its reads are not answered: they would go on to
the endpoint). Without it, the client's requests go on as they would (to the moto server, or moto's in-process mock).

``item_size`` is DynamoDB's item size (attribute names plus values, by its documented rules), and ``write_units`` the
write capacity an item's write consumes: one unit a KB (rounded up), two for a write inside a transaction.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse

KB = 1024
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
EMPTY_READS = {"GetItem": b"{}", "Query": b'{"Items": [], "Count": 0, "ScannedCount": 0}'}


def value_size(value: dict[str, Any]) -> int:
    """The size of one attribute value (DynamoDB's rules: strings and binaries by their bytes, numbers by their digits)."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "B":  # bytes as boto3 gives them, or base64 as the request's JSON holds them
        return len(inner) if isinstance(inner, bytes) else len(base64.b64decode(inner))
    if kind == "N":
        digits = Decimal(inner).as_tuple().digits
        return math.ceil(len(digits) / 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "BS", "NS"):
        return sum(value_size({kind[0]: v}) for v in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: dict[str, dict[str, Any]]) -> int:
    """An item's size as DynamoDB counts it against its 400 KB limit and for capacity: names and values."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int, transactional: bool) -> int:
    """Write capacity units of one item's write: one a KB rounded up (at least one), doubled inside a transaction."""
    units = max(1, math.ceil(size / KB))
    return 2 * units if transactional else units


@dataclass(frozen=True)
class Request:
    operation: str
    body: dict[str, Any]
    size: int  # the request's bytes, as sent

    @property
    def actions(self) -> list[tuple[str, dict[str, Any]]]:
        """A write's item actions: (action, its parameters); one for PutItem and UpdateItem, each of a transaction's."""
        if self.operation == "TransactWriteItems":
            return [next(iter(a.items())) for a in self.body["TransactItems"]]
        if self.operation in ("PutItem", "UpdateItem", "DeleteItem"):
            return [(self.operation.removesuffix("Item").capitalize(), self.body)]
        return []


@dataclass
class RequestLog:
    """Every DynamoDB request of the clients attached, in order."""

    requests: list[Request] = field(default_factory=list)

    def attach(self, client: Any, answer_writes: bool = False, answer_reads: bool = False) -> Any:
        """Record the client's requests; ``answer_writes`` answers its writes with a success, ``answer_reads`` its item
        reads (GetItem, Query) as an empty table would."""

        def record(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
            target = request.headers.get("X-Amz-Target", b"")
            operation = (target.decode() if isinstance(target, bytes) else str(target)).rsplit(".", 1)[-1]
            body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
            self.requests.append(Request(operation, json.loads(body or b"{}"), len(body)))
            answer = EMPTY_READS.get(operation) if answer_reads else None
            if answer_writes and operation in WRITES:
                answer = b"{}"
            if answer is not None:
                return AWSResponse(request.url, 200, {"Content-Type": "application/x-amz-json-1.0"}, _Raw(answer))
            return None

        client.meta.events.register("before-send.dynamodb", record)
        return client

    def mark(self) -> int:
        """Where the log is now: ``since(mark)`` gives what was sent after it."""
        return len(self.requests)

    def since(self, mark: int) -> list[Request]:
        return self.requests[mark:]


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Any:
        yield self.data
