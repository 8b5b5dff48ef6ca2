"""The DynamoDB state store over HTTP (moto server): what only DynamoDB has.

Items of bounded size, the calls a read makes, its endpoint and its table's keys. What every StateStore does (each
conditional write and its refusal) is the contract suite's, run against this store and the in-memory one alike:
tests/contract/test_state_store_contract.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_replay.adapters.dynamodb_items import PROGRESS_SHARDS, part_sk
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.errors import (
    ConfigError,
    EndpointUnreachableError,
    ProgressNotStoredError,
    StateCorruptError,
)
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import (
    Batch,
    BatchStatus,
    Head,
    PlanNotes,
    Progress,
    ReplayResult,
    RunKind,
    ShardResult,
)

S = 49680458800076825667891419458951111266169532991963922434
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def test_ensure_table_is_idempotent(dynamodb: Any, state_table: str) -> None:
    DynamoDBStateStore(dynamodb, state_table).ensure_table()
    assert dynamodb.describe_table(TableName=state_table)["Table"]["KeySchema"][0]["AttributeName"] == "pk"


def test_an_unreachable_dynamodb_endpoint_is_named() -> None:
    import boto3
    from botocore.config import Config

    dead = boto3.client("dynamodb", endpoint_url="http://127.0.0.1:9", config=Config(retries={"max_attempts": 1}))
    with pytest.raises(EndpointUnreachableError, match="state table kr-state: cannot reach DynamoDB"):
        DynamoDBStateStore(dead, "kr-state").ensure_table()


def wide(batch_id: int = 1, shards: int = 1_000) -> Batch:
    """A batch of a 1,000-shard stream: its ranges, manifest and lag measurements would not fit in one item."""
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    ranges = tuple(SequenceRange(s, S + 1, S + 50, S, False, NOW) for s in ids)
    lag = PlanNotes(lag_millis=dict.fromkeys(ids, 1234))
    return Batch("orders", batch_id, BatchStatus.PLANNED, ranges, "stream", "manual__1", NOW, notes=lag)


def item_sizes(dynamodb: Any, table: str) -> dict[str, int]:
    """Each item's size as DynamoDB counts it, near enough: its attribute names and values, as text (a binary's bytes)."""
    items = dynamodb.scan(TableName=table)["Items"]
    return {i["sk"]["S"]: sum(len(k) + (len(v["B"]) if "B" in v else len(json.dumps(v))) for k, v in i.items()) for i in items}


def test_a_batch_of_1000_shards_is_stored_in_items_of_bounded_size_and_reads_back_whole(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    batch = wide()
    store.create_batch(batch, Head())
    result = ReplayResult("orders", 1, tuple(ShardResult(r.shard_id, 50, 5_000, S + 1, S + 50, "0123456789abcdef") for r in batch.ranges))
    written = batch.with_status(BatchStatus.WRITTEN, result=result, attempts=1)
    store.update_batch(written, expected=BatchStatus.PLANNED)
    assert store.get_batch("orders", 1) == written
    assert store.get_batches("orders", [1]) == {1: written} and store.list_batches("orders") == [written]
    sizes = item_sizes(dynamodb, state_table)
    assert max(sizes.values()) < 350_000, sizes  # DynamoDB refuses items over 400 KB
    assert {sk.split("#")[2] for sk in sizes if sk.startswith("part#")} >= {"ranges", "manifest"}  # split, not refused
    committing = written.with_status(BatchStatus.COMMITTING)
    store.update_batch(committing, expected=BatchStatus.WRITTEN)
    store.complete_batch(committing, NOW)
    assert store.get_batch("orders", 1).status == BatchStatus.COMMITTED


def test_a_restore_writes_the_parts_of_wide_batches_and_a_listing_reads_them_together(store: DynamoDBStateStore) -> None:
    batches = [replace(wide(i), status=BatchStatus.COMMITTED, committed_at=NOW) for i in (1, 2)]
    store.restore("orders", Head(next_batch_id=3), [], batches)
    calls: list[str] = []
    store.client.meta.events.register("before-call.dynamodb.BatchGetItem", lambda **kwargs: calls.append("BatchGetItem"))
    assert store.list_batches("orders") == batches
    assert store.get_batches("orders", [1, 2]) == {1: batches[0], 2: batches[1]}
    assert calls == ["BatchGetItem"] * 3  # the listing's parts in one call; the two batches, then their parts, in two


def test_a_batch_missing_a_part_is_corrupt_state_named_by_its_key(store: DynamoDBStateStore, dynamodb: Any, state_table: str) -> None:
    store.create_batch(wide(), Head())
    dynamodb.delete_item(TableName=state_table, Key={"pk": {"S": "pipeline#orders"}, "sk": {"S": part_sk(1, "ranges", 0)}})
    with pytest.raises(StateCorruptError, match=r"pipeline 'orders': batch 1 lacks the part items part#0+1#ranges#0000 of its ranges"):
        store.get_batch("orders", 1)


def progress_of(batch_id: int, shards: int, kind: RunKind = RunKind.REGULAR, read: int = 7) -> Progress:
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    return Progress(batch_id, {s: read * i for i, s in enumerate(ids)}, frozenset(ids[::2]), NOW, kind)


def test_the_progress_of_1000_shards_is_stored_in_items_of_bounded_size_and_read_back_whole_in_one_query(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    progress = progress_of(3, 1_000)
    store.put_progress(progress, "orders")
    sizes = {sk: size for sk, size in item_sizes(dynamodb, state_table).items() if sk.startswith("progress#")}
    assert len(sizes) == 1_000 // PROGRESS_SHARDS and max(sizes.values()) < 10_000, sizes  # DynamoDB refuses items over 400 KB
    calls: list[str] = []
    store.client.meta.events.register("before-call.dynamodb.*", lambda event_name, **kwargs: calls.append(event_name.split(".")[-1]))
    assert store.get_progress("orders") == {RunKind.REGULAR: progress}
    assert calls == ["Query"]


def test_a_failed_progress_write_names_the_pipeline_batch_and_items_and_writes_the_rest(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    def refuse_the_second_item(params: dict[str, Any], **kwargs: Any) -> None:
        if params["Item"]["sk"]["S"] == "progress#regular#0001":
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem")

    store.client.meta.events.register("provide-client-params.dynamodb.PutItem", refuse_the_second_item)
    with pytest.raises(
        ProgressNotStoredError,
        match=r"pipeline 'orders', regular batch 3: 1 of 3 progress items not stored .*progress#regular#0001 "
        r"\(shards shardId-000000000100 to shardId-000000000199\)",
    ):
        store.put_progress(progress_of(3, 250), "orders")
    assert {sk for sk in item_sizes(dynamodb, state_table) if sk.startswith("progress#")} == {
        "progress#regular#0000",
        "progress#regular#0002",
    }


def test_a_state_table_with_another_application_s_keys_is_refused_naming_it(dynamodb: Any) -> None:
    """A typo in state_table may name another application's table: once a raw ValidationException at the first read."""
    dynamodb.create_table(
        TableName="kr-orders-of-another-app",
        AttributeDefinitions=[{"AttributeName": "order_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "order_id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    store = DynamoDBStateStore(dynamodb, "kr-orders-of-another-app")
    with pytest.raises(ConfigError, match=r"state table kr-orders-of-another-app exists with the keys order_id \(HASH, S\)") as caught:
        store.ensure_table()
    assert not caught.value.retryable
    assert dynamodb.scan(TableName="kr-orders-of-another-app")["Items"] == []  # nothing written into it
    DynamoDBStateStore(dynamodb, "kr-state-keys").ensure_table()  # a table of its own is created, then accepted as it is
    DynamoDBStateStore(dynamodb, "kr-state-keys").ensure_table()
