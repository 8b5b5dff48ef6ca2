"""A rebuild under payload.next_schema (issue 46, point 6), on the fakes (the stream and the state table in memory, the
replay without Spark) and a real Iceberg table: the committed batches re-decoded with a type Iceberg cannot change in
place, regular batches landing meanwhile, then the table switched in one snapshot, and every task decoding with the
next schema from then on."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from fakes.replay import replay, table_pipeline
from fakes.world import World
from kinesis_replay.adapters import commit_records, iceberg_table, quarantine_table
from kinesis_replay.core.config import PipelineConfig, rebuilt
from kinesis_replay.core.errors import BackfillError, ConfigError, DataLossError, TableCommitRefusedError
from kinesis_replay.core.holdings import Holdings
from kinesis_replay.steps import backfill, rebuild
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.verify import verify_batch

SCHEMA = "n INT, user STRING"
NEXT = "n STRING, user STRING"  # int -> string: refused in place, made by the rebuild's switch


def put(world: World, count: int, start: int = 0) -> None:
    world.clock.advance(seconds=1)
    records = [
        {"PartitionKey": f"user-{i % 7}", "Data": json.dumps({"n": i, "user": f"u{i}"}).encode()} for i in range(start, start + count)
    ]
    world.kinesis.put_records(StreamName="orders", Records=records)


def regular(world: World, run_id: str) -> int:
    """A regular run as the DAG's tasks make it: each task with the pipeline as it decodes now (rebuild.as_decoded)."""
    configured = world.pipeline
    world.pipeline = rebuild.as_decoded(configured)  # the plan task's
    try:
        batch = world.plan(run_id)
    finally:
        world.pipeline = configured
    assert batch is not None
    replay(rebuild.as_decoded(configured), world.kinesis, batch, attempt=f"{run_id}-{batch.batch_id}")
    verify_batch(rebuild.as_decoded(configured), world.store, batch.batch_id, run_id=run_id)
    commit_batch(rebuild.as_decoded(configured), world.store, batch.batch_id, now=world.clock.advance(seconds=1), run_id=run_id)
    return batch.batch_id


def rebuild_run(world: World, ids: list[int], run_id: str) -> rebuild.Switch:
    """The backfill DAG with rebuild: select, replay and check each batch with the next schema, then switch."""
    pipeline = world.pipeline
    _, chosen = backfill.choose(pipeline, world.kinesis, world.store, {"batch_ids": ids}, now=world.clock.now, rebuild=True)
    for batch in chosen:
        replay(
            rebuilt(pipeline),
            world.kinesis,
            backfill.committed_batch(pipeline, world.store, batch.batch_id),
            attempt=f"{run_id}-{batch.batch_id}",
        )
        backfill.check_replayed(rebuilt(pipeline), world.store, batch.batch_id, run_id=run_id, rebuild=True)
    return rebuild.switch(pipeline, world.store, run_id)


def quarantine_rows(pipeline: PipelineConfig) -> dict[int, int]:
    table = quarantine_table.load(pipeline)
    if table is None:
        return {}
    ids = table.scan(selected_fields=("batch_id",)).to_arrow().column("batch_id").to_pylist()
    return {b: ids.count(b) for b in set(ids)}


def scan(pipeline: PipelineConfig) -> dict[int, list[object]]:
    table = iceberg_table.load_table(pipeline)
    assert table is not None
    found = table.scan(selected_fields=("batch_id", "n")).to_arrow()
    rows: dict[int, list[object]] = {}
    for batch_id, n in zip(found.column("batch_id").to_pylist(), found.column("n").to_pylist(), strict=True):
        rows.setdefault(batch_id, []).append(n)
    return {b: sorted(v) for b, v in rows.items()}  # type: ignore[type-var]  # one type a batch


@pytest.fixture
def world(tmp_path: Path) -> World:
    built = World(tmp_path)
    built.pipeline = table_pipeline(tmp_path / "out", payload={"format": "json", "schema": SCHEMA})
    for low in (0, 100, 200):
        put(built, 100, low)
        assert built.cycle() is not None
    built.pipeline = replace(built.pipeline, payload=replace(built.pipeline.payload, next_schema=NEXT))
    return built


def test_a_rebuild_with_regular_batches_landing_meanwhile_switches_the_table_in_one_snapshot(world: World) -> None:
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and str(table.schema().find_field("n").field_type) == "int"
    before = len(table.metadata.snapshots)

    waiting = rebuild_run(world, [1, 2], "rebuild-1")  # a first run: two of the three batches
    assert waiting.waiting == (3,) and not waiting.switched
    put(world, 100, 300)
    assert regular(world, "regular-4") == 4  # lands meanwhile, decoded as the table is (int)
    assert rebuild.as_decoded(world.pipeline) == world.pipeline
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and len(table.metadata.snapshots) == before + 1  # only batch 4's: readers see the old table
    assert scan(world.pipeline)[1] == list(range(100)) and world.store.get_batch("orders", 1).staged is not None

    waiting = rebuild_run(world, [3, 4], "rebuild-2")  # the rest, batch 4 among them

    assert waiting.waiting == () and [b.batch_id for b in waiting.switched] == [1, 2, 3, 4]
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and len(table.metadata.snapshots) == before + 2  # the switch is one snapshot
    assert str(table.schema().find_field("n").field_type) == "string"
    assert scan(world.pipeline) == {b: sorted(map(str, range(100 * (b - 1), 100 * b))) for b in (1, 2, 3, 4)}
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    # the switch, one re-decode made visible (the first run staged only), on the ledger's head as in the summary
    assert Holdings.from_summary(summary.additional_properties) == Holdings.of([1, 2, 3, 4], 400, 1)
    assert world.store.get_head(world.pipeline.name).redecodes == 1
    assert summary["total-records"] == "400" and summary.additional_properties[rebuild.REBUILD_PROPERTY] == "rebuild-2"
    for batch_id in (1, 2, 3, 4):
        batch = world.store.get_batch("orders", batch_id)
        assert batch.staged is None and batch.redecoded_by == "rebuild-2" and batch.snapshot_id == table.current_snapshot().snapshot_id  # type: ignore[union-attr]
        assert batch.verified_result().decoding == rebuild.next_decoding(world.pipeline)
        assert commit_records.read_commit_record(world.pipeline.output, batch_id).snapshot_id == batch.snapshot_id

    # A reader of a snapshot before the switch still reads it: every row, and the replaced column as null (the files of
    # then name it as the new column is named, and the name mapping gives the name to the new column's id).
    earlier = table.scan(snapshot_id=table.current_snapshot().parent_snapshot_id).to_arrow()  # type: ignore[union-attr]
    assert (earlier.num_rows, earlier.column("n").null_count, str(earlier.schema.field("n").type)) == (400, 400, "int32")
    assert sorted(earlier.column("user").to_pylist()) == sorted(f"u{i}" for i in range(400))
    # From the switch on, every task decodes with the next schema, with no config change.
    assert rebuild.as_decoded(world.pipeline).payload.schema == NEXT
    put(world, 100, 400)
    assert regular(world, "regular-5") == 5
    assert scan(world.pipeline)[5] == sorted(map(str, range(400, 500)))
    # The task resumed after its switch commits nothing again, and names no batch as waiting.
    again = rebuild.switch(world.pipeline, world.store, "rebuild-2")
    assert again.waiting == () and len(iceberg_table.load_table(world.pipeline).metadata.snapshots) == before + 3  # type: ignore[union-attr]


def test_a_switch_refuses_a_table_holding_a_batch_committed_after_its_check(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: a regular batch lands between the switch's reading of the ledger and its table commit."""
    staged = rebuild_run(world, [1, 2], "rebuild-1")
    assert staged.waiting == (3,)
    for batch_id in (3,):
        replay(
            rebuilt(world.pipeline), world.kinesis, backfill.committed_batch(world.pipeline, world.store, batch_id), attempt=f"r-{batch_id}"
        )
        backfill.check_replayed(rebuilt(world.pipeline), world.store, batch_id, run_id="rebuild-1", rebuild=True)
    committed = rebuild.committed_batches
    monkeypatch.setattr(rebuild, "committed_batches", lambda store, name: [b for b in committed(store, name) if b.batch_id <= 3])
    put(world, 100, 300)
    regular(world, "regular-4")
    before = iceberg_table.load_table(world.pipeline).metadata.snapshots  # type: ignore[union-attr]

    with pytest.raises(TableCommitRefusedError, match=r"holds batches 4 that have no rebuilt files"):
        rebuild.switch(world.pipeline, world.store, "rebuild-1")

    assert iceberg_table.load_table(world.pipeline).metadata.snapshots == before  # type: ignore[union-attr]
    assert world.store.get_batch("orders", 1).staged is not None and world.store.get_batch("orders", 4).staged is None


def test_a_rebuild_is_refused_before_anything_is_read_without_a_next_schema_or_once_switched(world: World) -> None:
    plain = replace(world.pipeline, payload=replace(world.pipeline.payload, next_schema=None))
    with pytest.raises(ConfigError, match=r"payload\.next_schema is not set"):
        backfill.choose(plain, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock.now, rebuild=True)
    assert all(world.store.get_batch("orders", b).staged is None for b in (1, 2, 3))
    rebuild_run(world, [1, 2, 3], "rebuild-1")
    with pytest.raises(ConfigError, match=r"switched to payload\.next_schema already"):
        backfill.choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock.now, rebuild=True)


def test_a_rebuild_names_every_committed_batch_beyond_the_streams_retention_before_anything_is_read(world: World) -> None:
    world.clock.advance(seconds=int(timedelta(hours=25).total_seconds()))  # the fake stream keeps 24 hours
    put(world, 10, 900)
    assert world.cycle() is not None  # batch 4, within the retention
    with pytest.raises(DataLossError, match=r"batches 1, 2, 3 \(3 in all\) cannot be read again"):
        backfill.choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [4]}, now=world.clock.now, rebuild=True)
    assert all(world.store.get_batch("orders", b).staged is None for b in (1, 2, 3, 4))


def test_a_rebuild_told_to_copies_the_expired_batches_from_their_files_casting_the_replaced_column(world: World) -> None:
    put(world, 97, 900)
    world.kinesis.put_records(StreamName="orders", Records=[{"PartitionKey": "k", "Data": b'{"n": "x"}'} for _ in range(3)])
    assert world.cycle() is not None  # batch 4: three of its records quarantined (n is no INT)
    world.clock.advance(seconds=int(timedelta(hours=25).total_seconds()))  # batches 1 to 4 leave the stream
    put(world, 100, 300)
    assert world.cycle() is not None  # batch 5, within the retention
    quarantined = quarantine_rows(world.pipeline)
    assert quarantined == {4: 3}

    _, chosen = backfill.choose(
        world.pipeline, world.kinesis, world.store, {"from_batch": 1, "to_batch": 5}, now=world.clock.now, rebuild=True, copy_expired=True
    )
    assert [b.batch_id for b in chosen] == [5]  # the others are copied, not replayed
    assert rebuild.stage_copies(world.pipeline, world.kinesis, world.store, "rebuild-1", now=world.clock.now) == [1, 2, 3, 4]
    copied = world.store.get_batch("orders", 1)
    assert copied.staged is not None and copied.staged.attempt == "copy-rebuild-1" and copied.result is not None
    assert copied.staged.records == copied.result.records and copied.staged.decoding == rebuild.next_decoding(world.pipeline)
    replay(rebuilt(world.pipeline), world.kinesis, backfill.committed_batch(world.pipeline, world.store, 5), attempt="rebuild-1-5")
    backfill.check_replayed(rebuilt(world.pipeline), world.store, 5, run_id="rebuild-1", rebuild=True)

    switched = rebuild.switch(world.pipeline, world.store, "rebuild-1")

    assert [b.batch_id for b in switched.switched] == [1, 2, 3, 4, 5]
    expected = {b: sorted(map(str, range(100 * (b - 1), 100 * b))) for b in (1, 2, 3)}
    assert scan(world.pipeline) == expected | {4: sorted(map(str, range(900, 997))), 5: sorted(map(str, range(300, 400)))}
    assert quarantine_rows(world.pipeline) == quarantined  # copied as they were
    # Copied again by a later run: nothing, each is staged no more.
    assert rebuild.stage_copies(world.pipeline, world.kinesis, world.store, "rebuild-2", now=world.clock.now) == []


def test_a_copy_whose_values_do_not_fit_the_new_type_is_refused_naming_the_batch(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.pipeline = table_pipeline(tmp_path / "out", payload={"format": "json", "schema": "n BIGINT, user STRING"})
    world.clock.advance(seconds=1)
    big = [{"PartitionKey": "k", "Data": json.dumps({"n": 2**40 + i, "user": "u"}).encode()} for i in range(10)]
    world.kinesis.put_records(StreamName="orders", Records=big)
    assert world.cycle() is not None
    world.pipeline = replace(world.pipeline, payload=replace(world.pipeline.payload, next_schema="n INT, user STRING"))  # a narrowing
    world.clock.advance(seconds=int(timedelta(hours=25).total_seconds()))

    with pytest.raises(BackfillError, match=r"batch 1: its file .* cannot be copied under payload\.next_schema's types \(n int32\)"):
        rebuild.stage_copies(world.pipeline, world.kinesis, world.store, "rebuild-1", now=world.clock.now)

    assert world.store.get_batch("orders", 1).staged is None


def test_the_next_schema_is_refused_where_a_switch_could_not_make_it_either(world: World) -> None:
    clash = replace(world.pipeline, payload=replace(world.pipeline.payload, next_schema="n STRING, User STRING"))
    with pytest.raises(ConfigError, match=r'payload.next_schema: column "User"'):
        backfill.choose(clash, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock.now, rebuild=True)


def test_a_switch_refuses_while_a_regular_batch_is_in_flight_and_switches_once_it_has_landed(world: World) -> None:
    _, chosen = backfill.choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [1, 2, 3]}, now=world.clock.now, rebuild=True)
    for batch in chosen:
        replay(
            rebuilt(world.pipeline),
            world.kinesis,
            backfill.committed_batch(world.pipeline, world.store, batch.batch_id),
            attempt=f"r-{batch.batch_id}",
        )
        backfill.check_replayed(rebuilt(world.pipeline), world.store, batch.batch_id, run_id="rebuild-1", rebuild=True)
    put(world, 100, 300)
    planned = world.plan("regular-4")  # in flight when the switch runs
    assert planned is not None
    before = iceberg_table.load_table(world.pipeline).metadata.snapshots  # type: ignore[union-attr]

    with pytest.raises(BackfillError, match=r"regular batch 4 is in flight; the rebuild's switch waits"):
        rebuild.switch(world.pipeline, world.store, "rebuild-1")

    assert iceberg_table.load_table(world.pipeline).metadata.snapshots == before  # type: ignore[union-attr]
    assert all(world.store.get_batch("orders", b).staged is not None for b in (1, 2, 3))
    replay(world.pipeline, world.kinesis, planned, attempt="regular-4")
    verify_batch(world.pipeline, world.store, 4, run_id="regular-4")
    commit_batch(world.pipeline, world.store, 4, now=world.clock.advance(seconds=1), run_id="regular-4")
    assert rebuild.switch(world.pipeline, world.store, "rebuild-1").waiting == (4,)  # landed with the old decoding
    assert [b.batch_id for b in rebuild_run(world, [4], "rebuild-2").switched] == [1, 2, 3, 4]


def test_a_narrowing_rebuild_stays_switched_though_the_old_schema_would_widen_the_column_back(tmp_path: Path) -> None:
    """BIGINT to INT: after the switch, payload.schema's BIGINT is a widening Iceberg would make in place, so the table's
    columns cannot say which schema the tasks take; the switch's table property does."""
    world = World(tmp_path)
    world.pipeline = table_pipeline(tmp_path / "out", payload={"format": "json", "schema": "n BIGINT, user STRING"})
    put(world, 50)
    assert world.cycle() is not None
    world.pipeline = replace(world.pipeline, payload=replace(world.pipeline.payload, next_schema="n INT, user STRING"))

    assert [b.batch_id for b in rebuild_run(world, [1], "rebuild-1").switched] == [1]
    assert rebuild.as_decoded(world.pipeline).payload.schema == "n INT, user STRING"
    put(world, 50, 50)
    assert regular(world, "regular-2") == 2

    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and str(table.schema().find_field("n").field_type) == "int"  # not widened back to long
    assert world.store.get_batch("orders", 2).verified_result().decoding == rebuild.next_decoding(world.pipeline)
    assert scan(world.pipeline) == {1: list(range(50)), 2: list(range(50, 100))}
