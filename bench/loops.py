"""The baselines, one worker process each: bare boto3 reads of closed ranges, and the naive exporter a user would write.

    python bench/loops.py bare  --job job.json --shards shardId-000000000000,shardId-000000000002
    python bench/loops.py naive --job job.json --out DIR

``job.json`` holds the stream, the endpoint and the closed ranges (shard id, first and last sequence
number, inclusive). A bare worker imports and connects first, prints "ready", and starts reading when
a line arrives on stdin, so that parallel workers start together. Each worker prints one JSON line:
per-shard records, bytes, first and last sequence numbers, the loop's start and end (wall clock) and
the loop's CPU seconds. Nothing here imports the project: these are what the project is measured against.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

GET_RECORDS_LIMIT = 10_000  # GetRecords returns at most 10,000 records a call


def client(endpoint_url: str) -> Any:
    import boto3

    return boto3.client("kinesis", endpoint_url=endpoint_url, region_name="us-east-1")


def read_range(kinesis: Any, stream: str, shard_id: str, start: int, end: int) -> Iterator[list[dict[str, Any]]]:
    """GetShardIterator(AT_SEQUENCE_NUMBER start), then GetRecords pages until the record ``end`` (inclusive)."""
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(start)
    )["ShardIterator"]
    while iterator:
        page = kinesis.get_records(ShardIterator=iterator, Limit=GET_RECORDS_LIMIT)
        records = page["Records"]
        if not records:
            raise RuntimeError(f"{shard_id}: the shard ran dry before {end}")
        if int(records[-1]["SequenceNumber"]) >= end:
            yield [r for r in records if int(r["SequenceNumber"]) <= end]
            return
        yield records
        iterator = page.get("NextShardIterator")
    raise RuntimeError(f"{shard_id}: the shard ended before {end}")


def bare(job: dict[str, Any], shards: list[str]) -> dict[str, Any]:
    kinesis = client(job["endpoint_url"])
    kinesis.list_shards(StreamName=job["stream"])  # connect before the clock starts
    print("ready", flush=True)
    sys.stdin.readline()
    ranges = [r for r in job["ranges"] if r["shard_id"] in shards]
    started, cpu = time.time(), time.process_time()
    result: dict[str, Any] = {}
    for r in ranges:
        n = size = 0
        first = last = None
        for page in read_range(kinesis, job["stream"], r["shard_id"], int(r["start"]), int(r["end"])):
            n += len(page)
            size += sum(len(x["Data"]) for x in page)
            first = first or page[0]["SequenceNumber"]
            last = page[-1]["SequenceNumber"]
        result[r["shard_id"]] = {"records": n, "bytes": size, "first": first, "last": last}
    return {"shards": result, "started": started, "ended": time.time(), "cpu": time.process_time() - cpu}


def naive(job: dict[str, Any], out: Path) -> dict[str, Any]:
    """Every shard in turn, each GetRecords page appended to that shard's Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("shard_id", pa.string()),
            ("sequence_number", pa.string()),
            ("partition_key", pa.string()),
            ("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC")),
            ("data", pa.binary()),
        ]
    )
    kinesis = client(job["endpoint_url"])
    out.mkdir(parents=True, exist_ok=True)
    started, cpu = time.time(), time.process_time()
    result: dict[str, Any] = {}
    for r in job["ranges"]:
        shard_id, n = r["shard_id"], 0
        with pq.ParquetWriter(out / f"{shard_id}.parquet", schema) as writer:
            for page in read_range(kinesis, job["stream"], shard_id, int(r["start"]), int(r["end"])):
                n += len(page)
                columns = {
                    "shard_id": [shard_id] * len(page),
                    "sequence_number": [x["SequenceNumber"] for x in page],
                    "partition_key": [x["PartitionKey"] for x in page],
                    "approximate_arrival_timestamp": [x["ApproximateArrivalTimestamp"] for x in page],
                    "data": [x["Data"] for x in page],
                }
                writer.write_table(pa.table(columns, schema=schema))
        result[shard_id] = {"records": n}
    return {"shards": result, "started": started, "ended": time.time(), "cpu": time.process_time() - cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["bare", "naive"])
    parser.add_argument("--job", type=Path, required=True)
    parser.add_argument("--shards", default="", help="bare: the shard ids this worker reads, comma-separated")
    parser.add_argument("--out", type=Path, help="naive: the output directory")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    if args.mode == "bare":
        result = bare(job, args.shards.split(","))
    else:
        assert args.out is not None, "naive needs --out"
        result = naive(job, args.out)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
