"""The state table's writes for a batch of 10,000 shards keep to DynamoDB's limits: no item over 350 KB (DynamoDB
refuses 400 KB), no transaction over 100 items or 4 MB.

DynamoDBStateStore's own requests, as botocore serialises them, are recorded and answered with an empty success
(tests/fakes/dynamodb_requests.py), so no table is needed: each item and transaction is sized by DynamoDB's rules.
The batch is a regular plan's at its widest (every range with a previous checkpoint, every shard's lag and estimates
noted) over the socketless stream of 10,000 shards, with random 56-digit sequence numbers; the manifest is a replay's,
as long as the job writes it. What
the writes cost in write units, and the time that takes on DynamoDB, is bench/wide_state.py's.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta
from typing import Any

import boto3
import pytest

from fakes.dynamodb_requests import Request, RequestLog, item_size
from fakes.socketless_kinesis import BASE, SocketlessKinesis
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, Head, PlanNotes, ReplayResult, ShardResult, ShardState, StartPosition

SHARDS = 10_000
ITEM_LIMIT = 350 * 1024
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 4 * 1024 * 1024


def widest_regular_batch(stream: SocketlessKinesis) -> Batch:
    """Batch 7 of a pipeline whose shards all have a checkpoint: a range for every shard that may be read, with notes.

    Its sequence numbers are drawn at random (56 digits, as Kinesis's), not the stream's arithmetic: what the state
    table stores is compressed, and Kinesis's numbers compress no better than random digits.
    """
    rnd = random.Random(49)
    ranges = []
    for shard in stream.shards:
        if not shard.parents:
            previous, start, end = sorted(BASE + rnd.randrange(10**54) for _ in range(3))
            ranges.append(SequenceRange(shard.shard_id, start, end, previous, shard.closed, stream.arrival(shard.first + 100)))
    ids = [r.shard_id for r in ranges]
    notes = PlanNotes(
        lag_millis={s: rnd.randrange(10**6) for s in ids}, capped={}, estimated_records={s: rnd.randrange(10**5) for s in ids},
        estimated_bytes={s: rnd.randrange(10**8) for s in ids},
    )  # fmt: skip
    return Batch("wide", 7, BatchStatus.PLANNED, tuple(ranges), "wide", "scheduled__2026-11-01T12:00:00+00:00", stream.now, notes=notes)


def manifest(batch: Batch, stream: SocketlessKinesis) -> ReplayResult:
    """A replay's manifest of the batch, as long as the job writes one: counts, bytes, a checksum and a digest a shard."""
    rnd = random.Random(7)
    results = []
    for r in batch.ranges:
        checksum = f"{rnd.getrandbits(64):016x}"
        records = rnd.randrange(1, 10**5)
        results.append(
            ShardResult(r.shard_id, records, records * 1024, r.start, r.end, checksum, 0, stream.now, f"xxh3:{rnd.getrandbits(64):016x}")
        )
    return ReplayResult("wide", batch.batch_id, tuple(results), 312.5, "attempt-1")


def item_sizes(request: Request) -> list[tuple[str, int]]:
    """Each action's item as the request holds it: a put's whole item, an update's key and the values it sets."""
    sizes = []
    for action, params in request.actions:
        values = params.get("ExpressionAttributeValues", {})
        item = params["Item"] if action == "Put" else {**params["Key"], **{name.lstrip(":"): v for name, v in values.items()}}
        sizes.append((action, item_size(item)))
    return sizes


def cycle(store: DynamoDBStateStore, stream: SocketlessKinesis) -> None:
    """What a pipeline's state table is sent for a batch of every shard: the shards stored (a first plan's), the batch
    planned, verify's write of its manifest, the commit's two status changes (the checkpoints' updates are one small
    item each, not transactions)."""
    batch = widest_regular_batch(stream)
    starts = StartPosition("AT_TIMESTAMP", stream.now - timedelta(days=1))
    store.put_shards_if_absent("wide", [ShardState(s.shard_id, parent_shard_ids=s.parents, start_position=starts) for s in stream.shards])
    store.create_batch(batch, Head(next_batch_id=7, version=12))
    written = batch.with_status(BatchStatus.WRITTEN, result=manifest(batch, stream))
    store.update_batch(written, BatchStatus.PLANNED)  # verify's write, with the manifest
    store.update_batch(written.with_status(BatchStatus.COMMITTING), BatchStatus.WRITTEN)
    store.complete_batch(written, stream.now)


@pytest.fixture(scope="module")
def transactions() -> list[Request]:
    """The transactions of a cycle at 10,000 shards, as DynamoDBStateStore sent them."""
    log = RequestLog()
    client: Any = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="rec", aws_secret_access_key="rec")
    cycle(
        DynamoDBStateStore(log.attach(client, answer_writes=True, answer_reads=True), "kr-wide"), SocketlessKinesis("wide", shards=SHARDS)
    )
    writes = [r for r in log.requests if r.operation not in ("GetItem", "Query")]  # the reads: is there a layout yet?
    assert [r.operation for r in writes] == ["PutItem"] + ["TransactWriteItems"] * (SHARDS // TRANSACTION_ITEMS + 4)
    assert writes[0].body["Item"]["sk"] == {"S": "layout"}  # the shard keys' count, written before the first shard item
    transactions = writes[1:]
    parts = [size for r in transactions for action, size in item_sizes(r) if action == "Put"]
    assert sum(parts) > SHARDS * 200  # every shard's item, and its range, notes and manifest (compressed), were written
    return transactions


def test_a_cycle_of_10000_shards_spreads_the_shard_items_over_16_keys_and_nothing_else(transactions: list[Request]) -> None:
    """The checkpoints' partition keys: each of the 16 holds about a sixteenth of the shards (CRC-32 of the id)."""
    keys = Counter(params["Item"]["pk"]["S"] for r in transactions for action, params in r.actions if action == "Put"
                   and params["Item"]["sk"]["S"].startswith("shard#"))  # fmt: skip
    assert sorted(keys) == sorted(f"pipeline#wide#shards#{k}" for k in range(16))
    assert sum(keys.values()) == SHARDS and max(keys.values()) < 1.1 * SHARDS / 16
    others = {params["Item"]["pk"]["S"] for r in transactions for action, params in r.actions if action == "Put"} - set(keys)
    assert others == {"pipeline#wide"}  # the head, the batch and its parts stay under the pipeline's key


def test_a_cycle_of_10000_shards_writes_no_item_over_350_kb_and_no_transaction_over_100_items(transactions: list[Request]) -> None:
    assert max(size for r in transactions for _, size in item_sizes(r)) <= ITEM_LIMIT
    assert max(len(r.actions) for r in transactions) <= TRANSACTION_ITEMS


def test_a_cycle_of_10000_shards_writes_no_transaction_over_4_mb(transactions: list[Request]) -> None:
    assert max(sum(size for _, size in item_sizes(r)) for r in transactions) <= TRANSACTION_BYTES
