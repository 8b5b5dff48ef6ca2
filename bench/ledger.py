"""`make bench-ledger`: reading a ledger of months, the way the page, the backfill and the stuck check read it.

A pipeline scheduled every five minutes writes about 100,000 batches a year. This writes that many straight
into a state table on the moto server (the store's own items), then times each read that runs on every
cycle, every page view or every backfill, next to reading the whole ledger, as all of them did before.
Writes BENCHMARKS.md's ledger section.

    python bench/ledger.py --entries 100000 --shards 4
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = timedelta(minutes=5)
RETENTION = timedelta(hours=24)
S = 10**55


def ledger_batch(batch_id: int, shards: int) -> Any:
    from kinesis_replay.core.ranges import SequenceRange
    from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult, ShardResult

    planned = T0 + batch_id * EVERY
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    first, last = S + 10 * batch_id, S + 10 * batch_id + 9
    ranges = tuple(SequenceRange(s, first, last, first - 1, False, planned - EVERY) for s in ids)
    result = ReplayResult("bench", batch_id, tuple(ShardResult(s, 10, 10_000, first, last, "ab", last_arrival=planned) for s in ids))
    return Batch("bench", batch_id, BatchStatus.COMMITTED, ranges, "stream", f"scheduled__{batch_id}", planned,
                 committed_at=planned + EVERY / 2, result=result, extra={"lag_millis": dict.fromkeys(ids, 1000)})  # fmt: skip


def timed(fn: Callable[[], Any], runs: int) -> float:
    """The median of ``runs`` timings, in seconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(entries: int, shards: int, runs: int, whole: bool) -> dict[str, Any]:
    import boto3

    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
    from kinesis_replay.core.config import parse_config
    from kinesis_replay.core.state import ShardState
    from kinesis_replay.steps import backfill, in_flight
    from kinesis_replay.steps.backfill import Selection
    from kinesis_replay.ui import status
    from stack import local_stack
    from stack.ledger import write_ledger

    state = Path(tempfile.mkdtemp(prefix="kinesis-replay-ledger-bench-"))
    stack = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    try:
        client = boto3.client("dynamodb", endpoint_url=stack.moto_url, region_name=local_stack.REGION,
                              aws_access_key_id="bench", aws_secret_access_key="bench")  # fmt: skip
        store = DynamoDBStateStore(client, f"kr-{uuid.uuid4().hex[:8]}")
        store.ensure_table()
        started = time.perf_counter()
        write_ledger(store, "bench", [ledger_batch(i, shards) for i in range(1, entries + 1)])
        written = time.perf_counter() - started
        for i in range(shards):
            store.put_shard_if_absent("bench", ShardState(f"shardId-{i:012d}"))
            store.advance_checkpoint("bench", f"shardId-{i:012d}", None, S + 10 * entries + 9, entries, finished=False)
        entry = {"name": "bench", "stream": "stream", "output": "/lake/bench", "schedule": "*/5 * * * *",
                 "initial_position": "TRIM_HORIZON", "state_table": store.table, "spark": {}}  # fmt: skip
        pipeline = parse_config({"pipelines": [entry]})[0]
        now = T0 + (entries + 1) * EVERY
        newest = entries
        window = Selection(start_time=T0 + (entries // 2) * EVERY, end_time=T0 + (entries // 2 + 12) * EVERY)  # one hour

        def select(selection: Selection) -> Callable[[], Any]:
            return lambda: backfill.select_batches(
                "bench", selection, backfill.candidates(store, "bench", selection, newest, RETENTION), newest
            )

        head = store.get_head("bench")
        reads = {
            "UI page (last 10 batches, a day of figures, every shard)": lambda: status.pipeline_view(pipeline, store, now),
            "of which the shard items (a Query of the shard# prefix)": lambda: store.get_shards("bench"),
            "of which a day of figures for the charts (288 batches)": lambda: status.last_day(store, "bench", head, now),
            "backfill by ids (3 ids)": select(Selection(batch_ids=(7, entries // 2, entries))),
            "backfill by id range (100 batches)": select(Selection(from_batch=entries // 2, to_batch=entries // 2 + 99)),
            "backfill by time window (1 hour, 24 h retention)": select(window),
            "stuck check": lambda: in_flight.staleness(pipeline, store, now),
        }
        figures: dict[str, Any] = {name: timed(fn, runs) for name, fn in reads.items()}
        if whole:
            figures["the whole ledger, as every one of these read it before"] = timed(lambda: store.list_batches("bench"), 1)
        return {"entries": entries, "shards": shards, "runs": runs, "written_seconds": written, "reads": figures}
    finally:
        local_stack.stop(state)


def render(result: dict[str, Any]) -> str:
    span_days = result["entries"] * EVERY / timedelta(days=1)
    lines = [
        "## Reading a ledger of months (make bench-ledger)",
        "",
        f"{result['entries']:,} ledger entries of {result['shards']} shards each (the batches of {span_days:.0f} days at a "
        f"five-minute schedule), written straight into a state table on the moto server in {result['written_seconds']:.0f} s, "
        f"on {platform.node() or 'this machine'}, {os.cpu_count()} cores. Each read is the median of {result['runs']} runs through the "
        "store, over HTTP. The reads name the ids they need (BatchGetItem, a key lookup on moto as on DynamoDB), or a "
        "sort-key prefix (a Query, which the local stack's moto answers from the prefix's items, as DynamoDB does: moto "
        "itself sorts every item of the table first, 1.9 s a Query of the 4 shard items here); reading the whole ledger "
        "is a Query of the batch# prefix.",
        "",
        "| read | seconds |",
        "|---|---|",
        *(f"| {name} | {seconds:.2f} |" for name, seconds in result["reads"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-whole", action="store_true", help="skip reading the whole ledger (minutes on moto)")
    args = parser.parse_args(argv)
    result = measure(args.entries, args.shards, args.runs, not args.no_whole)
    body = render(result)
    print(body)
    report.write_section(ROOT / "BENCHMARKS.md", report.LEDGER, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
