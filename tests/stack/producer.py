"""Demo producer: JSON events with a partition key, written to a Kinesis stream at a chosen rate and count.

python tests/stack/producer.py --stream demo --shards 4 --count 1000 --rate 500
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

PUT_RECORDS_MAX = 500  # PutRecords takes at most 500 records a call


@dataclass(frozen=True)
class Produced:
    """One user record as Kinesis acknowledged it: a plain record, or one user record of a KPL aggregate."""

    shard_id: str
    sequence_number: str
    partition_key: str
    data: bytes
    sub_sequence_number: int = 0


def kinesis_client(endpoint_url: str | None = None) -> Any:
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL_KINESIS"),
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        config=Config(retries={"mode": "standard", "max_attempts": 5}),
    )


def ensure_stream(client: Any, stream: str, shards: int) -> None:
    """Create the stream if it is missing and wait until it is ACTIVE."""
    with contextlib.suppress(client.exceptions.ResourceInUseException):
        client.create_stream(StreamName=stream, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def event(index: int, payload_bytes: int = 0) -> tuple[str, bytes]:
    """One demo event: a JSON object whose user id is its partition key."""
    user = f"user-{index % 97:03d}"
    body: dict[str, Any] = {"event_id": str(uuid.uuid4()), "index": index, "user": user, "action": "click", "ts": time.time()}
    if payload_bytes:
        body["pad"] = "x" * max(0, payload_bytes - len(json.dumps(body)) - 10)
    return user, json.dumps(body).encode()


def produce(
    client: Any, stream: str, count: int, rate: float | None = None, start_index: int = 0, payload_bytes: int = 0
) -> list[Produced]:
    """Put ``count`` events (at most ``rate`` a second), retrying the records PutRecords refuses."""
    produced: list[Produced] = []
    started = time.monotonic()
    index = start_index
    while index < start_index + count:
        n = min(PUT_RECORDS_MAX, start_index + count - index)
        pending = [event(i, payload_bytes) for i in range(index, index + n)]
        while pending:
            response = client.put_records(StreamName=stream, Records=[{"PartitionKey": k, "Data": d} for k, d in pending])
            retry = []
            for (key, data), result in zip(pending, response["Records"], strict=True):
                if "SequenceNumber" in result:
                    produced.append(Produced(result["ShardId"], result["SequenceNumber"], key, data))
                else:
                    retry.append((key, data))
            pending = retry
            if pending:
                time.sleep(0.1)
        index += n
        if rate:
            ahead = (index - start_index) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    return produced


def produce_to_every_shard(client: Any, stream: str, per_shard: int, payload_bytes: int = 0) -> list[Produced]:
    """Put ``per_shard`` events into every open shard (each aimed by an ExplicitHashKey at its shard's hash range)."""
    shards = [s for s in client.list_shards(StreamName=stream)["Shards"] if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    token = client.list_shards(StreamName=stream).get("NextToken")
    while token:
        page = client.list_shards(NextToken=token)
        shards += [s for s in page["Shards"] if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
        token = page.get("NextToken")
    wanted = [(s["HashKeyRange"]["StartingHashKey"], i) for i in range(per_shard) for s in shards]
    produced: list[Produced] = []
    for first in range(0, len(wanted), PUT_RECORDS_MAX):
        pending = [(hash_key, *event(first + n, payload_bytes)) for n, (hash_key, _) in enumerate(wanted[first : first + PUT_RECORDS_MAX])]
        while pending:
            records = [{"PartitionKey": k, "Data": d, "ExplicitHashKey": h} for h, k, d in pending]
            response = client.put_records(StreamName=stream, Records=records)
            retry = []
            for (hash_key, key, data), result in zip(pending, response["Records"], strict=True):
                if "SequenceNumber" in result:
                    produced.append(Produced(result["ShardId"], result["SequenceNumber"], key, data))
                else:
                    retry.append((hash_key, key, data))
            pending = retry
    return produced


def produce_aggregated(client: Any, stream: str, aggregates: int, per_aggregate: int, start_index: int = 0) -> list[Produced]:
    """Put ``aggregates`` KPL aggregated records of ``per_aggregate`` user records each, built by aws-kinesis-agg."""
    from aws_kinesis_agg.aggregator import RecordAggregator

    produced: list[Produced] = []
    index = start_index
    for _ in range(aggregates):
        aggregator = RecordAggregator()
        users = []
        for _ in range(per_aggregate):
            key, data = event(index)
            aggregator.add_user_record(key, data)
            users.append((key, data))
            index += 1
        key, explicit_hash_key, blob = aggregator.clear_and_get().get_contents()
        extra = {"ExplicitHashKey": explicit_hash_key} if explicit_hash_key else {}
        result = client.put_record(StreamName=stream, PartitionKey=key, Data=blob, **extra)
        produced += [Produced(result["ShardId"], result["SequenceNumber"], k, d, sub) for sub, (k, d) in enumerate(users)]
    return produced


def put_raw(client: Any, stream: str, partition_key: str, data: bytes) -> Produced:
    """Put one record exactly as given (for malformed payloads and aggregates)."""
    result = client.put_record(StreamName=stream, PartitionKey=partition_key, Data=data)
    return Produced(result["ShardId"], result["SequenceNumber"], partition_key, data)


def split_shard(client: Any, stream: str, shard_id: str) -> None:
    """Split a shard at the middle of its hash-key range."""
    shard = next(s for s in client.list_shards(StreamName=stream)["Shards"] if s["ShardId"] == shard_id)
    low, high = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high) // 2))
    client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def merge_shards(client: Any, stream: str, shard_id: str, adjacent_shard_id: str) -> None:
    client.merge_shards(StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_shard_id)
    client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", required=True)
    parser.add_argument("--shards", type=int, default=4, help="shards to create the stream with, if it is missing")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=None, help="records per second (default: as fast as possible)")
    parser.add_argument("--start-index", type=int, default=0)
    parser.add_argument("--payload-bytes", type=int, default=0, help="pad each event to about this size")
    args = parser.parse_args(argv)
    client = kinesis_client()
    ensure_stream(client, args.stream, args.shards)
    started = time.monotonic()
    produced = produce(client, args.stream, args.count, args.rate, args.start_index, args.payload_bytes)
    print(f"produced {len(produced)} records to {args.stream} in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
