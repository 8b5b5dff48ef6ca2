"""`make bench-state-wide`: the state table's writes at 10,000 shards, counted, and their time modelled on DynamoDB.

Two cycles of a pipeline over a stream of 10,000 busy shards (tests/fakes/socketless_kinesis.py: a split and a merge
among them), each a plan, verify's write of the manifest and the commit, through the steps and DynamoDBStateStore on
moto's DynamoDB in process (with the local stack's fixes of it, tests/stack/moto_keepalive.py: its conditions are
checked, and items over 400 KB refused). The first cycle's plan is the pipeline's first (an item for every shard);
the second's is a regular plan, after every open shard took 1,024 more records, and finishes the split and merged
parents and plans their children. Each request is recorded as botocore sent it (tests/fakes/dynamodb_requests.py),
and counted: items written, transactions, their largest (actions and bytes), the largest item, and write units as
DynamoDB bills them (one a KB of the item, rounded up, two inside a transaction; an update's item size is the stored
item's after the cycle).

The model: a partition key takes at most 1,000 write units a second, and a new on-demand table 4,000 (AWS: "new
on-demand tables can sustain up to 4,000 writes per second", more once it has served more), so a step's writes take at
least the larger of its busiest key's units / 1,000 and all its units / 4,000 seconds, whatever else it does. The
shard items are spread over SHARD_KEYS keys of their own (dynamodb_items.py); beside each figure, the same writes under
one key, as every earlier release stores them (and still does for a pipeline it created).

    python bench/wide_state.py --shards 10000 --no-write
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402

from kinesis_replay.adapters.dynamodb_items import SHARD_KEYS  # noqa: E402

PARTITION_WCU = 1_000  # write units a second one partition takes
NEW_TABLE_WCU = 4_000  # write units a second a new on-demand table takes (more once it has served more)
ITEM_LIMIT = 350 * 1024  # ours: DynamoDB refuses 400 KB; an item is kept well under it
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 4 * 1024 * 1024
GROWTH = 1_024  # records each open shard takes between the two cycles


@dataclass(frozen=True)
class Phase:
    """What one step sent the state table."""

    name: str
    calls: dict[str, int]
    items: int  # items written (puts and updates, a transaction's each), condition checks apart
    checks: int
    transactions: int
    largest_transaction_items: int
    largest_transaction_bytes: int  # the items' sizes, as DynamoDB sums them against its 4 MB
    largest_item: int
    wcu: int
    wcu_by_key: dict[str, int]  # write units by the item's sort-key kind (head, shard, batch, part, progress)
    shard_wcu: int  # of which the shard items'
    wcu_by_pk: dict[str, int]  # write units by partition key

    def seconds(self) -> float:
        """At least how long the writes take: the busiest key's at PARTITION_WCU, all of them at NEW_TABLE_WCU."""
        return max(max(self.wcu_by_pk.values(), default=0) / PARTITION_WCU, self.wcu / NEW_TABLE_WCU)

    def seconds_one_key(self) -> float:
        """The same writes under one partition key, as every earlier release stores a pipeline's items."""
        return self.wcu / PARTITION_WCU


def summarise(name: str, requests: list[Any], stored: dict[tuple[str, str], dict[str, Any]]) -> Phase:
    """Count a step's requests; an update's or a check's item is sized as stored after the cycle."""
    from fakes.dynamodb_requests import item_size, write_units

    calls = Counter(r.operation for r in requests)
    items = checks = transactions = largest_items = largest_bytes = largest = wcu = shard_wcu = 0
    by_kind: Counter[str] = Counter()
    by_pk: Counter[str] = Counter()
    for r in requests:
        transactional = r.operation == "TransactWriteItems"
        total = 0
        for action, params in r.actions:
            if action == "Put":
                size = item_size(params["Item"])
                key = (params["Item"]["pk"]["S"], params["Item"]["sk"]["S"])
            else:
                key = (params["Key"]["pk"]["S"], params["Key"]["sk"]["S"])
                size = item_size(stored.get(key, params["Key"]))
            units = 2 * max(1, -(-size // 1024)) if action == "ConditionCheck" else write_units(size, transactional)
            checks += action == "ConditionCheck"
            items += action != "ConditionCheck"
            largest = max(largest, size)
            total += size
            wcu += units
            kind = key[1].split("#")[0]
            by_kind[kind] += units
            by_pk[key[0]] += units
            shard_wcu += units if kind == "shard" else 0
        if transactional:
            transactions += 1
            largest_items = max(largest_items, len(r.actions))
            largest_bytes = max(largest_bytes, total)
    return Phase(
        name, dict(calls), items, checks, transactions, largest_items, largest_bytes, largest, wcu, dict(by_kind), shard_wcu, dict(by_pk)
    )


def measure(shards: int) -> list[Phase]:
    import boto3
    from moto import mock_aws

    import stack.moto_keepalive  # noqa: F401  # moto's DynamoDB as the local stack runs it (one table backup a transaction)
    from fakes.dynamodb_requests import RequestLog
    from fakes.replay import directory_pipeline
    from fakes.socketless_kinesis import SocketlessKinesis
    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
    from kinesis_replay.core.state import BatchStatus
    from kinesis_replay.steps.commit import commit_batch
    from kinesis_replay.steps.plan import plan_batch

    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    phases: list[tuple[str, list[Any]]] = []
    with mock_aws(config={"core": {"passthrough": {"services": ["kinesis"]}}}):  # Kinesis is the socketless stream's
        log = RequestLog()
        client = log.attach(boto3.client("dynamodb", region_name="us-east-1"))
        store = DynamoDBStateStore(client, "kr-wide")
        store.ensure_table()
        stream = SocketlessKinesis("wide", shards=shards)
        pipeline = directory_pipeline(Path(tempfile.mkdtemp(prefix="kr-wide-state-")) / "out", name="wide", stream="wide", read={})
        for cycle in ("first", "regular"):
            mark = log.mark()
            result = plan_batch(pipeline, stream.client(), store, f"run-{cycle}", now=stream.now, pacing=stream.pacing)
            assert result.batch is not None
            phases.append((f"{cycle} plan ({len(result.batch.ranges):,} ranges)", log.since(mark)))
            mark = log.mark()
            written = result.batch.with_status(BatchStatus.WRITTEN, result=stream.replayed(pipeline.name, result.batch))
            store.update_batch(written, BatchStatus.PLANNED)  # as verify writes it, the manifest with it
            phases.append((f"{cycle} verify (the manifest)", log.since(mark)))
            mark = log.mark()
            commit_batch(pipeline, store, result.batch.batch_id, now=stream.now)
            phases.append((f"{cycle} commit", log.since(mark)))
            stream.grow(GROWTH)
            print(f"{cycle} cycle: {len(result.batch.ranges):,} ranges", flush=True)
        stored = {(i["pk"]["S"], i["sk"]["S"]): i for i in _scan(client, "kr-wide")}
    return [summarise(name, requests, stored) for name, requests in phases]


def _scan(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def render(phases: list[Phase], shards: int) -> str:
    lines = [
        f"## The state table at {shards:,} shards (make bench-state-wide)",
        "",
        f"Two cycles of a pipeline over a stream of {shards:,} busy shards (a split and a merge among them), each a plan, "
        "verify's write and the commit, through the steps and `DynamoDBStateStore` on moto's DynamoDB (conditions checked, "
        "items over 400 KB refused); the second plan is a regular one, after every open shard took 1,024 more records. "
        "Each request is counted as botocore sent it: items written (puts and updates; a transaction's each), transactions, "
        "the largest transaction (its actions, and its items' sizes summed as DynamoDB sums them against 4 MB), the largest "
        "item, and write units as DynamoDB bills them: one a KB of the item rounded up, two inside a transaction (a "
        "condition check too); an update is billed at the stored item's size after the cycle.",
        "",
        "| step | calls | items written (+ checks) | transactions | largest transaction: items, KB | largest item, KB | write units "
        "| of which shard items' |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        calls = ", ".join(f"{op} {n:,}" for op, n in sorted(p.calls.items()))
        lines.append(
            f"| {p.name} | {calls} | {p.items:,} (+ {p.checks}) | {p.transactions:,} | {p.largest_transaction_items}, "
            f"{p.largest_transaction_bytes / 1024:,.0f} | {p.largest_item / 1024:,.1f} | {p.wcu:,} | {p.shard_wcu:,} |"
        )
    largest_item = max(p.largest_item for p in phases)
    largest_items = max(p.largest_transaction_items for p in phases)
    largest_bytes = max(p.largest_transaction_bytes for p in phases)
    lines += [
        "",
        f"Limits: the largest item {largest_item / 1024:,.1f} KB (under 350 KB: {_yes(largest_item <= ITEM_LIMIT)}); the largest "
        f"transaction {largest_items} items (at most 100: {_yes(largest_items <= TRANSACTION_ITEMS)}) and "
        f"{largest_bytes / 1024 / 1024:.2f} MB (under 4 MB: {_yes(largest_bytes <= TRANSACTION_BYTES)}).",
        "",
        f"The model: a partition key takes at most {PARTITION_WCU:,} write units a second and a new on-demand table "
        f"{NEW_TABLE_WCU:,} (more once it has served more), so each step's writes take at least the larger of its busiest "
        f"key's units / {PARTITION_WCU:,} and all its units / {NEW_TABLE_WCU:,} seconds on DynamoDB, whatever the code "
        f"around them does. The shard items are under {SHARD_KEYS} keys of their own (`pipeline#<name>#shards#<k>`), every "
        "other item under the pipeline's key; beside it, the same writes under one key, as every earlier release stores "
        "them (and still does for a pipeline it created: docs/state-table.md).",
        "",
        "| step | keys written | busiest key's write units | at least, s | under one key (earlier releases), s |",
        "|---|---|---|---|---|",
    ]
    for p in phases:
        busiest = max(p.wcu_by_pk.values(), default=0)
        lines.append(f"| {p.name} | {len(p.wcu_by_pk)} | {busiest:,} | {p.seconds():.1f} | {p.seconds_one_key():.1f} |")
    return "\n".join(lines)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    body = render(measure(args.shards), args.shards)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.STATE_WIDE, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
