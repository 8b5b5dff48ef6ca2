"""The DynamoDB state store over HTTP (moto server): every change conditional, conflicts named."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_replay.adapters.dynamodb_items import PROGRESS_SHARDS, part_sk
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.errors import (
    ConfigError,
    EndpointUnreachableError,
    ProgressNotStoredError,
    StateConflictError,
    StateCorruptError,
    StateTableMissingError,
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
    StartPosition,
)

S = 49680458800076825667891419458951111266169532991963922434
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def planned(pipeline_name: str = "orders", batch_id: int = 1, previous: int | None = None) -> Batch:
    ranges = (SequenceRange("shardId-000000000000", S + 1, S + 50, previous), SequenceRange("shardId-000000000001", S + 2, S + 9, previous))
    return Batch(pipeline_name, batch_id, BatchStatus.PLANNED, ranges, "stream", "manual__1", NOW)


def test_ensure_table_is_idempotent(dynamodb: Any, state_table: str) -> None:
    DynamoDBStateStore(dynamodb, state_table).ensure_table()
    assert dynamodb.describe_table(TableName=state_table)["Table"]["KeySchema"][0]["AttributeName"] == "pk"


def test_a_planned_batch_round_trips_with_exact_sequence_numbers(store: DynamoDBStateStore) -> None:
    head = store.create_batch(planned(), Head())
    assert head == Head(next_batch_id=2, in_flight=1, version=1) == store.get_head("orders")
    assert store.get_batch("orders", 1) == planned()


def test_a_second_plan_from_the_same_head_loses(store: DynamoDBStateStore) -> None:
    store.create_batch(planned(), Head())
    with pytest.raises(StateConflictError, match="pipeline 'orders': planning batch 1: another run changed the state first"):
        store.create_batch(planned(), Head())


def test_no_batch_is_planned_while_one_is_in_flight(store: DynamoDBStateStore) -> None:
    head = store.create_batch(planned(), Head())
    with pytest.raises(StateConflictError, match="planning batch 2"):
        store.create_batch(planned(batch_id=2), head)


def test_pipelines_do_not_see_each_others_state(store: DynamoDBStateStore) -> None:
    store.create_batch(planned("orders"), Head())
    store.create_batch(planned("payments"), Head())
    assert [b.pipeline_name for b in store.list_batches("payments")] == ["payments"]


def test_a_checkpoint_moves_only_from_the_expected_previous_value(store: DynamoDBStateStore) -> None:
    store.put_shard_if_absent("orders", ShardState("shardId-000000000000"))
    store.advance_checkpoint("orders", "shardId-000000000000", None, S + 50, 1, finished=False)
    with pytest.raises(
        StateConflictError,
        match=rf"shard shardId-000000000000: advancing the checkpoint from None to {S + 60}.*stored checkpoint is {S + 50}",
    ):
        store.advance_checkpoint("orders", "shardId-000000000000", None, S + 60, 2, finished=False)
    store.advance_checkpoint("orders", "shardId-000000000000", S + 50, S + 60, 2, finished=True)
    shard = store.get_shards("orders")["shardId-000000000000"]
    assert (shard.checkpoint, shard.finished, shard.last_batch_id) == (S + 60, True, 2)


def test_advancing_again_for_the_same_batch_is_a_no_op(store: DynamoDBStateStore) -> None:
    store.put_shard_if_absent("orders", ShardState("shardId-000000000000"))
    store.advance_checkpoint("orders", "shardId-000000000000", None, S + 50, 1, finished=False)
    store.advance_checkpoint("orders", "shardId-000000000000", None, S + 50, 1, finished=False)  # a resumed commit
    assert store.get_shards("orders")["shardId-000000000000"].checkpoint == S + 50


def test_the_first_stored_start_position_wins(store: DynamoDBStateStore) -> None:
    first = ShardState("shardId-000000000000", start_position=StartPosition("AT_TIMESTAMP", NOW))
    later = ShardState("shardId-000000000000", start_position=StartPosition("AT_TIMESTAMP", datetime(2027, 1, 1, tzinfo=UTC)))
    assert store.put_shard_if_absent("orders", first) == first
    assert store.put_shard_if_absent("orders", later).start_position == first.start_position


def test_new_shards_are_stored_a_transaction_at_a_time_and_the_first_stored_start_wins(store: DynamoDBStateStore) -> None:
    """150 shards take two transactions; one shard a concurrent plan stored first fails the second, whose shards are
    then stored one by one: that shard keeps the start the other plan fixed, the rest get this plan's."""
    later = StartPosition("AT_TIMESTAMP", datetime(2027, 1, 1, tzinfo=UTC))
    shards = [ShardState(f"shardId-{i:012d}", start_position=later) for i in range(150)]
    first = ShardState("shardId-000000000120", start_position=StartPosition("AT_TIMESTAMP", NOW))
    store.put_shard_if_absent("orders", first)
    stored = store.put_shards_if_absent("orders", shards)
    assert stored["shardId-000000000120"].start_position == first.start_position
    assert all(stored[s.shard_id] == s for s in shards if s.shard_id != first.shard_id)
    in_table = store.get_shards("orders")
    assert len(in_table) == 150 and in_table["shardId-000000000120"].start_position == first.start_position
    assert {sid: s.start_position for sid, s in in_table.items() if sid != first.shard_id} == dict.fromkeys(
        (s.shard_id for s in shards if s.shard_id != first.shard_id), later
    )


def test_only_the_batch_in_flight_can_change_status(store: DynamoDBStateStore) -> None:
    store.create_batch(planned(), Head())
    with pytest.raises(StateConflictError, match="setting batch 2"):
        store.update_batch(planned(batch_id=2).with_status(BatchStatus.FAILED), expected=BatchStatus.PLANNED)


def test_completing_a_commit_clears_the_batch_in_flight(store: DynamoDBStateStore) -> None:
    store.create_batch(planned(), Head())
    batch = planned()
    for status, expected in ((BatchStatus.WRITTEN, BatchStatus.PLANNED), (BatchStatus.COMMITTING, BatchStatus.WRITTEN)):
        batch = batch.with_status(status)
        store.update_batch(batch, expected=expected)
    store.complete_batch(batch, NOW)
    assert store.get_head("orders").in_flight is None
    assert store.get_batch("orders", 1).status == BatchStatus.COMMITTED
    with pytest.raises(StateConflictError, match="completing the commit of batch 1"):
        store.complete_batch(batch, NOW)


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.get_head("orders"),
        lambda store: store.get_shards("orders"),
        lambda store: store.get_batches("orders", [1]),
        lambda store: store.create_batch(planned(), Head()),
        lambda store: store.put_shard_if_absent("orders", ShardState("shardId-000000000000")),
        lambda store: store.advance_checkpoint("orders", "shardId-000000000000", None, S, 1, False),
    ],
    ids=["get_head", "get_shards", "get_batches", "create_batch", "put_shard_if_absent", "advance_checkpoint"],
)
def test_a_missing_state_table_fails_at_once_naming_the_table_the_pipeline_and_what_creates_it(dynamodb: Any, call: Any) -> None:
    """Only the plan step creates the state table; every other step meeting none fails without a retry, and creates none."""
    table = f"kr-missing-{uuid.uuid4().hex[:8]}"
    store = DynamoDBStateStore(dynamodb, table)
    with pytest.raises(StateTableMissingError) as raised:
        call(store)
    message = str(raised.value)
    assert not raised.value.retryable
    assert message.startswith(f"pipeline 'orders': state table {table} does not exist"), message
    assert "Only the plan step of kinesis_replay_orders creates it" in message and "check state_table of pipeline 'orders'" in message
    assert table not in dynamodb.list_tables()["TableNames"]  # nothing but the plan creates it
    store.ensure_table()  # as the advice says: the plan creates it, and the same call then goes through
    call(store)


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
    """Each item's size as DynamoDB counts it, near enough: its attribute names and values, as text."""
    items = dynamodb.scan(TableName=table)["Items"]
    return {i["sk"]["S"]: sum(len(k) + len(json.dumps(v)) for k, v in i.items()) for i in items}


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


def test_a_wide_batchs_summary_reads_its_figures_and_failures_without_its_ranges(store: DynamoDBStateStore) -> None:
    batch = wide()
    store.create_batch(batch, Head())
    failed = batch
    for cause in ("first cause", "second cause"):
        failed = failed.with_status(BatchStatus.FAILED, attempts=failed.attempts + 1, error=cause)
        store.update_batch(failed, expected=BatchStatus.PLANNED if cause == "first cause" else BatchStatus.FAILED)
    result = ReplayResult("orders", 1, tuple(ShardResult(r.shard_id, 50, 5_000, S + 1, S + 50, "0123456789abcdef") for r in batch.ranges))
    store.update_batch(failed.with_status(BatchStatus.WRITTEN, result=result, attempts=3, error=None), expected=BatchStatus.FAILED)

    (summary,) = store.get_summaries("orders", [1, 2]).values()  # batch 2 does not exist
    assert (summary.batch_id, summary.status, summary.error, summary.failures, summary.last_error) == (
        1, BatchStatus.WRITTEN, None, 2, "second cause"
    )  # fmt: skip
    assert summary.figures == {"shards": 1_000, "behind_seconds": 0.0, "records": 50_000, "bytes": 5_000_000, "bad_records": 0}


def committed(batch: Batch, attempt: str) -> Batch:
    """The batch committed with a manifest of ``attempt``, as the ledger holds it after its first run."""
    result = ReplayResult(
        "orders",
        batch.batch_id,
        tuple(ShardResult(r.shard_id, 50, 5_000, S + 1, S + 50, "0123456789abcdef") for r in batch.ranges),
        1.0,
        attempt,
    )
    return replace(batch, status=BatchStatus.COMMITTED, committed_at=NOW, result=result, snapshot_id=1)


@pytest.mark.parametrize("make", [planned, wide], ids=["inline", "in-parts"])
def test_a_backfill_keeps_the_replayed_manifest_with_its_snapshot_in_one_conditional_write(store: DynamoDBStateStore, make: Any) -> None:
    first = committed(make(), "a")
    store.restore("orders", Head(next_batch_id=2), [], [first])
    assert first.result is not None
    replayed = replace(first, result=replace(first.result, attempt="b", seconds=2.0), snapshot_id=2)

    store.set_replayed(replayed, expected=BatchStatus.COMMITTED)

    stored = store.get_batch("orders", 1)
    assert stored == replayed and stored.result is not None and (stored.result.attempt, stored.snapshot_id) == ("b", 2)
    # Conditioned on the status: a batch that is not COMMITTED keeps its manifest and snapshot.
    with pytest.raises(StateConflictError, match=r"pipeline 'orders': keeping the replayed attempt c and snapshot 3 with batch 1"):
        store.set_replayed(replace(replayed, result=replace(first.result, attempt="c"), snapshot_id=3), expected=BatchStatus.WRITTEN)
    assert store.get_batch("orders", 1) == replayed


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


def test_a_backfills_progress_never_replaces_the_regular_batchs(store: DynamoDBStateStore) -> None:
    regular, backfill = progress_of(5, 250), progress_of(2, 300, RunKind.BACKFILL, read=3)
    store.put_progress(regular, "orders")
    store.put_progress(backfill, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: regular, RunKind.BACKFILL: backfill}
    assert store.get_progress("payments") == {}  # nor another pipeline's


def test_a_narrower_later_batch_reads_back_only_its_own_progress(store: DynamoDBStateStore) -> None:
    store.put_progress(progress_of(1, 250), "orders")  # three items; the next batch writes over the first only
    later = replace(progress_of(2, 50), updated_at=NOW + timedelta(minutes=5))
    store.put_progress(later, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: later}


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
