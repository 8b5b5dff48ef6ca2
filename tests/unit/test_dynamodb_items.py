"""The state table's item codec, without a table: every record of the ledger round-trips, and its stored shape holds.

The items' attribute names and keys are what deployed state tables hold: a change here must read the items an
older release wrote (the pins below), and tests/integration/test_dynamodb_store.py runs the same records through moto.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis_replay.adapters import dynamodb_items as items
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.errors import StateCorruptError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import (
    Batch,
    BatchStatus,
    Gap,
    Head,
    PlanNotes,
    Progress,
    ReplayResult,
    RunKind,
    ShardResult,
    ShardState,
    StartPosition,
)

BIG = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898  # wider than DynamoDB's 38 digits
AT = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def batch(shards: int = 2, **changes: object) -> Batch:
    ranges = tuple(SequenceRange(f"shardId-{i:012d}", BIG + i, BIG + i + 9, BIG + i - 1, False, AT) for i in range(shards))
    made = Batch("orders", 42, BatchStatus.WRITTEN, ranges, "orders-stream", "run-1", AT)
    result = ReplayResult("orders", 42, tuple(ShardResult(r.shard_id, 10, 100, r.start, r.end, "ab") for r in ranges), 1.5, "a1")
    fields = {
        "result": result,
        "attempts": 2,
        "gaps": (Gap(ranges[0].shard_id, BIG, BIG + 3, "run-1", detected="replay"),),
        "notes": PlanNotes(lag_millis={ranges[0].shard_id: 5}, capped={ranges[0].shard_id: 7}),
        "committed_at": AT + timedelta(minutes=1),
        "error": "an earlier try failed",
        "snapshot_id": 7_000_000_000_000_000_001,
    }
    fields.update(changes)
    return replace(made, **fields)  # type: ignore[arg-type]


def noisy_batch(shards: int) -> Batch:
    """A batch whose sequence numbers are as random as Kinesis's look, so that compressing its JSON gains what it would."""
    rnd = random.Random(49)
    ranges = []
    for i in range(shards):
        previous, start, end = sorted(rnd.randrange(BIG, 2 * BIG) for _ in range(3))
        ranges.append(SequenceRange(f"shardId-{i:012d}", start, end, previous, False, AT))
    return batch(ranges=tuple(ranges), result=None)


def pages_of(parts: list[dict[str, Any]]) -> dict[str, items.Page]:
    return {p["sk"]["S"]: items.page_of(p) for p in parts}


def test_a_batch_round_trips_through_its_item() -> None:
    original = batch()
    item, parts = items.batch_item(original)
    assert parts == []  # a batch of a few shards fits its item
    assert items.batch_from_item(item, {}) == original


def test_a_batch_item_keeps_the_attribute_names_deployed_tables_hold() -> None:
    item, _ = items.batch_item(batch())
    assert item["pk"] == {"S": "pipeline#orders"} and item["sk"] == {"S": "batch#000000000042"}
    assert {"status", "ranges", "stream", "run_id", "created_at", "manifest", "gaps", "extra", "figures", "snapshot_id"} <= set(item)
    assert json.loads(item["extra"]["S"]) == {"lag_millis": {"shardId-000000000000": 5}, "capped": {"shardId-000000000000": 7}}
    assert json.loads(item["ranges"]["S"])[0]["start"] == str(BIG)  # sequence numbers as strings, every digit kept


def test_a_wide_batch_is_cut_into_part_items_and_joined_again() -> None:
    wide = noisy_batch(4000)
    item, parts = items.batch_item(wide)
    assert int(item["ranges_parts"]["N"]) == len([p for p in parts if "#ranges#" in p["sk"]["S"]]) > 1
    assert "ranges" not in item and all(len(p["zlib"]["B"]) <= items.PART_BYTES for p in parts)
    assert all(p["pk"] == item["pk"] for p in parts)
    assert items.batch_from_item(item, pages_of(parts)) == wide


def test_a_wide_batch_s_parts_are_compressed_well_under_its_json() -> None:
    wide = noisy_batch(1000)
    _, parts = items.batch_item(wide)
    packed = sum(len(p["zlib"]["B"]) for p in parts if "#ranges#" in p["sk"]["S"])
    assert packed * 2 < len(json.dumps([r.to_dict() for r in wide.ranges]))


def test_parts_an_earlier_release_wrote_as_text_are_read_as_they_were() -> None:
    wide = batch(shards=1000)
    item, _ = items.batch_item(wide)
    text = json.dumps([r.to_dict() for r in wide.ranges])
    pages = [text[i : i + items.PART_BYTES] for i in range(0, len(text), items.PART_BYTES)]
    item["ranges_parts"] = {"N": str(len(pages))}
    earlier = {items.part_sk(42, "ranges", n): page for n, page in enumerate(pages)}
    _, parts = items.batch_item(wide)
    others = {sk: page for sk, page in pages_of(parts).items() if "#ranges#" not in sk}
    assert items.batch_from_item(item, earlier | others) == wide


def test_a_field_whose_parts_mix_text_and_compressed_pages_is_corrupt_state() -> None:
    item, parts = items.batch_item(batch(shards=1000))
    pages = pages_of(parts)
    item["ranges_parts"] = {"N": "2"}  # a second page, as an earlier release wrote pages: text
    pages[items.part_sk(42, "ranges", 1)] = "]"
    with pytest.raises(StateCorruptError, match=r"batch 42's part items of its ranges mix text and compressed pages"):
        items.batch_from_item(item, pages)


def test_a_missing_part_item_is_named() -> None:
    item, parts = items.batch_item(noisy_batch(4000))
    pages = pages_of(parts)
    lost = items.part_sk(42, "ranges", 1)
    del pages[lost]
    with pytest.raises(StateCorruptError, match=rf"pipeline 'orders': batch 42 lacks the part items {lost} of its ranges"):
        items.batch_from_item(item, pages)


def test_an_item_that_kinesis_replay_never_writes_is_corrupt_state_naming_it() -> None:
    item, _ = items.batch_item(batch())
    del item["stream"]
    with pytest.raises(StateCorruptError, match=r"pipeline 'orders': unreadable batch item .*batch#000000000042"):
        items.batch_from_item(item, {})


def test_a_batch_item_written_before_the_plan_notes_reads_as_no_notes() -> None:
    """An older release wrote no ``extra``, ``gaps`` or ``attempts``: the batch reads with their defaults."""
    item, _ = items.batch_item(batch(gaps=(), notes=PlanNotes(), attempts=0))
    assert "extra" not in item and "gaps" not in item
    del item["attempts"]
    read = items.batch_from_item(item, {})
    assert read.notes == PlanNotes() and read.gaps == () and read.attempts == 0


def test_a_shard_round_trips_through_its_item() -> None:
    shard = ShardState("shardId-000000000003", BIG, True, ("shardId-000000000001",), StartPosition("AT_TIMESTAMP", AT), 41, AT)
    item = items.shard_item("orders", shard)
    assert item["sk"] == {"S": "shard#shardId-000000000003"} and item["checkpoint"] == {"S": str(BIG)}
    read = items.shard_from_item(item)
    assert read.updated_at is not None and read == replace(shard, updated_at=read.updated_at)  # the write's own time
    fresh = items.shard_from_item(items.shard_item("orders", ShardState("shardId-000000000004")))
    assert fresh.checkpoint is None and fresh.start_position is None and fresh.last_batch_id is None


def test_the_head_and_a_summary_read_from_their_items() -> None:
    assert items.head_from_item({"next_batch_id": {"N": "8"}, "version": {"N": "12"}}) == Head(8, None, 12)
    assert items.head_from_item({"next_batch_id": {"N": "8"}, "in_flight": {"N": "7"}, "version": {"N": "12"}}).in_flight == 7
    item, _ = items.batch_item(batch())
    projected = {k: v for k, v in item.items() if k in DynamoDBStateStore.SUMMARY_ATTRIBUTES}  # what get_summaries reads
    assert "pk" not in projected
    summary = items.summary_from_item(projected, "orders", "kr-state")
    assert (summary.batch_id, summary.status, summary.attempts, summary.figures) == (42, BatchStatus.WRITTEN, 2, batch().figures())
    del projected["created_at"]
    with pytest.raises(StateCorruptError, match=r"pipeline 'orders': batch 42 in table kr-state is malformed"):
        items.summary_from_item(projected, "orders", "kr-state")


def test_progress_round_trips_and_the_pieces_written_last_win() -> None:
    shards = [f"shardId-{i:012d}" for i in range(250)]
    first = Progress(5, {s: 1 for s in shards}, frozenset(shards[:10]), AT, RunKind.REGULAR)
    chunks = [shards[i : i + items.PROGRESS_SHARDS] for i in range(0, len(shards), items.PROGRESS_SHARDS)]
    written = items.progress_items(first, "orders", chunks)
    assert [i["sk"]["S"] for i in written] == ["progress#regular#0000", "progress#regular#0001", "progress#regular#0002"]
    assert items.progress_from_items("orders", written) == {RunKind.REGULAR: first}
    later = Progress(6, {shards[0]: 9}, frozenset(), AT + timedelta(seconds=5), RunKind.REGULAR)
    mixed = [*items.progress_items(later, "orders", [[shards[0]]]), *written[1:]]  # an older, wider batch's pieces remain
    assert items.progress_from_items("orders", mixed) == {RunKind.REGULAR: later}


def test_an_unreadable_progress_item_is_named() -> None:
    with pytest.raises(StateCorruptError, match=r"pipeline 'orders': unreadable progress item"):
        items.progress_from_items("orders", [{"sk": {"S": "progress#nonesuch#0000"}, "batch_id": {"N": "1"}}])
