"""The DynamoDB state store over HTTP (moto server): what only DynamoDB has.

Items of bounded size, the calls a read makes, its endpoint and its table's keys. What every StateStore does (each
conditional write and its refusal) is the contract suite's, run against this store and the in-memory one alike:
tests/contract/test_state_store_contract.py.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_replay.adapters.dynamodb_items import PROGRESS_SHARDS, SHARD_KEYS, part_sk, shard_item, shard_pk
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.errors import (
    ConfigError,
    EndpointUnreachableError,
    ProgressNotStoredError,
    StateConflictError,
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
    ShardState,
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


# -- the shard items' keys (docs/state-table.md, "At 10,000 shards") ---------------------------------------------------


def keys_of(dynamodb: Any, table: str) -> dict[str, set[str]]:
    """Each partition key of the table and the sort keys under it."""
    found: dict[str, set[str]] = {}
    for item in dynamodb.scan(TableName=table)["Items"]:
        found.setdefault(item["pk"]["S"], set()).add(item["sk"]["S"])
    return found


def shards(n: int) -> list[ShardState]:
    return [ShardState(f"shardId-{i:012d}") for i in range(n)]


def test_a_new_pipelines_shard_items_are_spread_over_16_keys_after_its_layout_and_read_and_moved_there(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    store.put_shards_if_absent("orders", shards(200))
    keys = keys_of(dynamodb, state_table)
    assert keys.pop("pipeline#orders") == {"layout"}
    assert sorted(keys) == sorted(f"pipeline#orders#shards#{k}" for k in range(SHARD_KEYS))
    assert sum(len(sks) for sks in keys.values()) == 200
    for key, sks in keys.items():  # each shard where its id's CRC-32 says
        assert {shard_pk("orders", sk.removeprefix("shard#"), SHARD_KEYS) for sk in sks} == {key}

    fresh = DynamoDBStateStore(dynamodb, state_table)  # another task's store: it reads the layout
    assert list(fresh.get_shards("orders")) == [s.shard_id for s in shards(200)]
    fresh.advance_checkpoint("orders", "shardId-000000000007", None, S + 5, 1, finished=False)
    fresh.mark_finished("orders", "shardId-000000000008", None)
    with pytest.raises(StateConflictError, match="the stored checkpoint is"):
        fresh.advance_checkpoint("orders", "shardId-000000000007", None, S + 6, 2, finished=False)
    read = store.get_shards("orders")
    assert (read["shardId-000000000007"].checkpoint, read["shardId-000000000008"].finished) == (S + 5, True)
    assert keys_of(dynamodb, state_table).keys() == {"pipeline#orders", *keys}  # nothing written under another key


def test_an_earlier_releases_shard_items_under_the_pipelines_key_are_read_and_written_there(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    """A pipeline of an earlier release has its shard items under pipeline#<name> and no layout item: it stays so."""
    for shard in shards(3):
        dynamodb.put_item(TableName=state_table, Item=shard_item("orders", shard))  # as 0.2.x wrote them
    assert list(store.get_shards("orders")) == [s.shard_id for s in shards(3)]
    store.advance_checkpoint("orders", "shardId-000000000001", None, S + 9, 4, finished=False)
    store.put_shards_if_absent("orders", shards(5))  # a reshard's new shards
    store.put_shard_if_absent("orders", ShardState("shardId-000000000009"))
    assert keys_of(dynamodb, state_table) == {
        "pipeline#orders": {f"shard#{s.shard_id}" for s in shards(5)} | {"shard#shardId-000000000009"}
    }
    assert DynamoDBStateStore(dynamodb, state_table).get_shards("orders")["shardId-000000000001"].checkpoint == S + 9


def test_two_first_plans_at_once_agree_on_one_layout_and_store_each_shard_once(dynamodb: Any, state_table: str) -> None:
    stores = [DynamoDBStateStore(dynamodb, state_table) for _ in range(2)]
    start = threading.Barrier(2)

    def plan(store: DynamoDBStateStore) -> dict[str, ShardState]:
        start.wait()
        return store.put_shards_if_absent("orders", shards(150))

    with ThreadPoolExecutor(2) as pool:
        stored = list(pool.map(plan, stores))
    assert stored[0].keys() == stored[1].keys() == {s.shard_id for s in shards(150)}
    keys = keys_of(dynamodb, state_table)
    assert keys.pop("pipeline#orders") == {"layout"} and sum(len(sks) for sks in keys.values()) == 150


def test_a_restore_writes_a_layout_first_for_a_pipeline_with_none_and_keeps_an_earlier_releases(
    store: DynamoDBStateStore, dynamodb: Any, state_table: str
) -> None:
    store.restore("orders", Head(next_batch_id=1), shards(40), [])
    keys = keys_of(dynamodb, state_table)
    assert keys.pop("pipeline#orders") == {"layout", "head"} and sum(len(sks) for sks in keys.values()) == 40
    assert len(DynamoDBStateStore(dynamodb, state_table).get_shards("orders")) == 40

    dynamodb.put_item(TableName=state_table, Item=shard_item("old", ShardState("shardId-000000000000")))  # an earlier release's
    store.restore("old", Head(next_batch_id=1), shards(2), [])
    assert keys_of(dynamodb, state_table)["pipeline#old"] == {"head", "shard#shardId-000000000000", "shard#shardId-000000000001"}


def test_a_layout_item_without_a_count_is_corrupt_state_named(store: DynamoDBStateStore, dynamodb: Any, state_table: str) -> None:
    dynamodb.put_item(TableName=state_table, Item={"pk": {"S": "pipeline#orders"}, "sk": {"S": "layout"}})
    with pytest.raises(StateCorruptError, match=r"pipeline 'orders': the layout item in state table kr-\w+ has no shard_keys number"):
        store.get_shards("orders")
    assert keys_of(dynamodb, state_table) == {"pipeline#orders": {"layout"}}  # nothing written past it
