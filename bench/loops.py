"""The baselines, one worker process each: bare boto3 reads of closed ranges, and the naive exporter a user would write.

    python bench/loops.py bare  --job job.json --shards shardId-000000000000,shardId-000000000002 [--threads]
    python bench/loops.py naive --job job.json --out DIR [--deadline SECONDS]

``job.json`` holds the stream, the endpoint and the closed ranges (shard id, first and last sequence
number, inclusive). A bare worker imports and connects first, prints "ready", and starts reading when
a line arrives on stdin, so that parallel workers start together. Each worker prints one JSON line:
per-shard records, bytes, first and last sequence numbers, the loop's start and end (wall clock) and
the loop's CPU seconds. Nothing here imports the project: these are what the project is measured against.

Against a stream that throttles (`make bench-paced`), a throttled call is retried after a doubling wait, as a
user's reader would; ``--threads`` reads a bare worker's shards at once, a thread each, and ``--deadline`` stops
the naive exporter after that many seconds (at a page's end), reporting what it read by then.
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
THROTTLED = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})


def patiently(call: Any, **kwargs: Any) -> Any:
    """A call retried while the shard is throttled, after waits doubling from 0.1 s to 1 s."""
    from botocore.exceptions import ClientError

    wait = 0.1
    while True:
        try:
            return call(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in THROTTLED:
                raise
            time.sleep(wait)
            wait = min(1.0, wait * 2)


def client(endpoint_url: str, config: Any = None) -> Any:
    import boto3

    return boto3.client("kinesis", endpoint_url=endpoint_url, region_name="us-east-1", config=config)


def read_range(kinesis: Any, stream: str, shard_id: str, start: int, end: int) -> Iterator[list[dict[str, Any]]]:
    """GetShardIterator(AT_SEQUENCE_NUMBER start), then GetRecords pages until the record ``end`` (inclusive)."""
    iterator = patiently(
        kinesis.get_shard_iterator,
        StreamName=stream, ShardId=shard_id, ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(start),
    )["ShardIterator"]  # fmt: skip
    while iterator:
        page = patiently(kinesis.get_records, ShardIterator=iterator, Limit=GET_RECORDS_LIMIT)
        records = page["Records"]
        if not records:
            raise RuntimeError(f"{shard_id}: the shard ran dry before {end}")
        if int(records[-1]["SequenceNumber"]) >= end:
            yield [r for r in records if int(r["SequenceNumber"]) <= end]
            return
        yield records
        iterator = page.get("NextShardIterator")
    raise RuntimeError(f"{shard_id}: the shard ended before {end}")


def bare(job: dict[str, Any], shards: list[str], threads: bool = False) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from botocore.config import Config

    kinesis = client(job["endpoint_url"], Config(max_pool_connections=max(10, len(shards))))
    kinesis.list_shards(StreamName=job["stream"])  # connect before the clock starts
    print("ready", flush=True)
    sys.stdin.readline()
    ranges = [r for r in job["ranges"] if r["shard_id"] in shards]
    started, cpu = time.time(), time.process_time()

    def read(r: dict[str, Any]) -> dict[str, Any]:
        n = size = 0
        first = last = None
        for page in read_range(kinesis, job["stream"], r["shard_id"], int(r["start"]), int(r["end"])):
            n += len(page)
            size += sum(len(x["Data"]) for x in page)
            first = first or page[0]["SequenceNumber"]
            last = page[-1]["SequenceNumber"]
        return {"records": n, "bytes": size, "first": first, "last": last}

    if threads:
        with ThreadPoolExecutor(max_workers=len(ranges) or 1) as pool:
            result = dict(zip((r["shard_id"] for r in ranges), pool.map(read, ranges), strict=True))
    else:
        result = {r["shard_id"]: read(r) for r in ranges}
    return {"shards": result, "started": started, "ended": time.time(), "cpu": time.process_time() - cpu}


def naive(job: dict[str, Any], out: Path, deadline: float | None = None) -> dict[str, Any]:
    """Every shard in turn, each GetRecords page appended to that shard's Parquet file; until ``deadline`` seconds, if given."""
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
    size, complete = 0, True
    for r in job["ranges"]:
        shard_id, n = r["shard_id"], 0
        if deadline is not None and time.time() - started >= deadline:
            complete = False
            break
        with pq.ParquetWriter(out / f"{shard_id}.parquet", schema) as writer:
            for page in read_range(kinesis, job["stream"], shard_id, int(r["start"]), int(r["end"])):
                n += len(page)
                size += sum(len(x["Data"]) + len(x["PartitionKey"]) for x in page)
                columns = {
                    "shard_id": [shard_id] * len(page),
                    "sequence_number": [x["SequenceNumber"] for x in page],
                    "partition_key": [x["PartitionKey"] for x in page],
                    "approximate_arrival_timestamp": [x["ApproximateArrivalTimestamp"] for x in page],
                    "data": [x["Data"] for x in page],
                }
                writer.write_table(pa.table(columns, schema=schema))
                if deadline is not None and time.time() - started >= deadline:
                    complete = False
                    break
        result[shard_id] = {"records": n}
        if not complete:
            break
    ended = time.time()
    return {"shards": result, "started": started, "ended": ended, "cpu": time.process_time() - cpu, "bytes": size, "complete": complete}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["bare", "naive"])
    parser.add_argument("--job", type=Path, required=True)
    parser.add_argument("--shards", default="", help="bare: the shard ids this worker reads, comma-separated")
    parser.add_argument("--out", type=Path, help="naive: the output directory")
    parser.add_argument("--threads", action="store_true", help="bare: read this worker's shards at once, a thread each")
    parser.add_argument("--deadline", type=float, help="naive: stop after this many seconds, at a page's end")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    if args.mode == "bare":
        result = bare(job, args.shards.split(","), args.threads)
    else:
        assert args.out is not None, "naive needs --out"
        result = naive(job, args.out, args.deadline)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
