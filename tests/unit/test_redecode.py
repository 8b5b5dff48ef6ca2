"""A table output's quarantine table and a re-decode of committed batches, on the fakes (the stream and the state table in
memory, the replay without Spark) and a real Iceberg table (pyiceberg's SQL catalog on a file under the output).

A re-decode's batches wait, verified, in the ledger; one snapshot of the table then replaces them all, and one of the
quarantine table their quarantined records; a crash between the two is finished by the resumed commit."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fakes.memory_store import MemoryStateStore
from fakes.replay import replay, table_pipeline
from fakes.world import World
from kinesis_replay.adapters import commit_records, iceberg_table, layout, quarantine_table
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import BackfillError, DecodedValuesChangedError, TableMismatchError
from kinesis_replay.core.holdings import Holdings
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.steps import backfill, maintenance, recovery, redecode
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.verify import verify_batch

SCHEMA = "n INT, user STRING"
BAD = 45  # records of batch 1 whose n is past an INT's range: quarantined by INT, decoded by BIGINT (Iceberg's int -> long)
WIDE = 2**40


def put(world: World, count: int, bad: int = 0) -> None:
    """``count`` JSON records, the first ``bad`` of them with an ``n`` too large for an INT."""
    world.clock.advance(seconds=1)
    records = [
        {"PartitionKey": f"user-{i % 7}", "Data": json.dumps({"n": WIDE + i if i < bad else i, "user": f"u{i}"}).encode()}
        for i in range(count)
    ]
    for low in range(0, count, 500):
        world.kinesis.put_records(StreamName="orders", Records=records[low : low + 500])


@pytest.fixture
def world(tmp_path: Path) -> World:
    built = World(tmp_path)
    built.pipeline = table_pipeline(tmp_path / "out", payload={"format": "json", "schema": SCHEMA, "max_bad_share": 0.5})
    for bad in (BAD, 0, 0):
        put(built, 200, bad)
        assert built.cycle() is not None
    return built


def with_schema(pipeline: PipelineConfig, schema: str) -> PipelineConfig:
    return replace(pipeline, payload=replace(pipeline.payload, schema=schema))


def rows(pipeline: PipelineConfig, quarantine: bool = False) -> dict[int, int]:
    """Rows per batch in the table (or the quarantine table) as a reader scans it now."""
    table = quarantine_table.load(pipeline) if quarantine else iceberg_table.load_table(pipeline)
    if table is None:
        return {}
    counts: dict[int, int] = {}
    for batch_id in table.scan(selected_fields=("batch_id",)).to_arrow().column("batch_id").to_pylist():
        counts[batch_id] = counts.get(batch_id, 0) + 1
    return counts


def snapshots(pipeline: PipelineConfig, quarantine: bool = False) -> list[int]:
    table = quarantine_table.load(pipeline) if quarantine else iceberg_table.load_table(pipeline)
    return [s.snapshot_id for s in table.metadata.snapshots] if table is not None else []


def redecode_replays(world: World, pipeline: PipelineConfig, ids: list[int], run_id: str) -> None:
    """What the backfill DAG's select and replay tasks do for a re-decode: choose, then replay and check each batch."""
    _, chosen = backfill.choose(pipeline, world.kinesis, world.store, {"batch_ids": ids}, now=world.clock.now, redecode=True)
    for batch in chosen:
        replay(
            pipeline, world.kinesis, backfill.committed_batch(pipeline, world.store, batch.batch_id), attempt=f"{run_id}-{batch.batch_id}"
        )
        backfill.check_replayed(pipeline, world.store, batch.batch_id, run_id=run_id, redecode=True)


def test_quarantined_records_are_the_quarantine_tables_committed_after_the_table_and_both_snapshots_kept(world: World) -> None:
    first = world.store.get_batch("orders", 1)
    assert rows(world.pipeline) == {1: 200 - BAD, 2: 200, 3: 200}
    assert rows(world.pipeline, quarantine=True) == {1: BAD}
    assert first.quarantine_snapshot_id == snapshots(world.pipeline, quarantine=True)[0]
    assert all(world.store.get_batch("orders", b).quarantine_snapshot_id is None for b in (2, 3))  # nothing quarantined
    assert commit_records.read_commit_record(world.pipeline.output, 1).quarantine_snapshot_id == first.quarantine_snapshot_id
    table = quarantine_table.load(world.pipeline)
    assert table is not None and table.name() == ("kinesis_replay", "orders_quarantine")
    scanned = table.scan().to_arrow()
    assert (
        set(scanned.column_names) >= {"shard_id", "sequence_number", "data", "decode_error", "batch_id"} and "n" not in scanned.column_names
    )
    assert all('field "n"' in e for e in scanned.column("decode_error").to_pylist()), scanned.column("decode_error")[0]
    assert not (Path(world.pipeline.output) / layout.QUARANTINE_DIR).exists()  # no folder of the earlier layout


def test_a_redecode_that_rescues_the_quarantined_records_moves_them_in_one_snapshot_of_each_table(world: World) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    main_before, quarantine_before = snapshots(world.pipeline), snapshots(world.pipeline, quarantine=True)

    redecode_replays(world, changed, [1, 2, 3], "backfill-1")
    # Staged: readers still see the old decoding, the ledger holds both.
    assert rows(world.pipeline) == {1: 200 - BAD, 2: 200, 3: 200} and snapshots(world.pipeline) == main_before
    staged = world.store.get_batch("orders", 1)
    assert staged.staged_by == "backfill-1" and staged.staged is not None and staged.result is not None
    assert (staged.result.records, staged.staged.records, staged.staged.bad_records) == (200 - BAD, 200, 0)

    done = redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")

    assert rows(changed) == {1: 200, 2: 200, 3: 200}  # +45
    assert rows(changed, quarantine=True) == {}  # -45
    main_after, quarantine_after = snapshots(changed), snapshots(changed, quarantine=True)
    assert len(main_after) == len(main_before) + 1 and len(quarantine_after) == len(quarantine_before) + 1
    assert {b.snapshot_id for b in done} == {main_after[-1]} and done[0].quarantine_snapshot_id == quarantine_after[-1]
    assert all(b.redecoded_by == "backfill-1" and b.staged is None and b.status == BatchStatus.COMMITTED for b in done)
    assert all(b.verified_result().decoding == Decoding.of("json", "n BIGINT, user STRING") for b in done)
    table = iceberg_table.load_table(changed)
    assert table is not None and table.current_snapshot() is not None
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    # the re-decode counted in the snapshot's summary and on the ledger's head: a rollback past it shows as behind
    assert Holdings.from_summary(summary) == Holdings.of([1, 2, 3], 600, 1) and summary["total-records"] == "600"
    assert world.store.get_head(changed.name).redecodes == 1
    assert commit_records.read_commit_record(changed.output, 1).redecoded_by == "backfill-1"
    assert set(table.scan().to_arrow().column("n").to_pylist()) >= {WIDE, WIDE + 44, 5}
    # Committed once: a second commit of the run finds its snapshots.
    assert redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1") == done
    assert snapshots(changed) == main_after and snapshots(changed, quarantine=True) == quarantine_after


def test_a_crash_between_the_two_tables_commits_is_finished_by_the_resumed_commit(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1, 2], "backfill-1")
    real = quarantine_table.commit

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the worker died")

    monkeypatch.setattr(quarantine_table, "commit", crash)
    with pytest.raises(OSError):
        redecode.commit_redecoded(changed, world.store, [1, 2], "backfill-1")
    after_crash = snapshots(changed)
    assert rows(changed) == {1: 200, 2: 200, 3: 200} and rows(changed, quarantine=True) == {1: BAD}  # between the two
    assert world.store.get_batch("orders", 1).staged_by == "backfill-1"  # the ledger still waits

    monkeypatch.setattr(quarantine_table, "commit", real)
    done = redecode.commit_redecoded(changed, world.store, [1, 2], "backfill-1")

    assert snapshots(changed) == after_crash  # no second snapshot on the table
    assert rows(changed, quarantine=True) == {} and done[0].quarantine_snapshot_id == snapshots(changed, quarantine=True)[-1]
    assert all(b.redecoded_by == "backfill-1" for b in done)


def test_a_backfill_with_other_payload_settings_and_no_redecode_is_refused_naming_both_before_anything_is_read(world: World) -> None:
    changed = with_schema(world.pipeline, "n INT, user STRING, action STRING")
    called = len(world.kinesis.calls)
    ledger = world.store.list_batches("orders")
    with pytest.raises(DecodedValuesChangedError) as refused:
        backfill.choose(changed, world.kinesis, world.store, {"batch_ids": [1, 3]}, now=world.clock.now)
    message = str(refused.value)
    old, new = Decoding.of("json", SCHEMA), Decoding.of("json", "n INT, user STRING, action STRING")
    assert old.fingerprint in message and new.fingerprint in message and "batches 1, 3" in message and '"redecode": true' in message
    assert world.store.list_batches("orders") == ledger
    assert not {"GetShardIterator", "GetRecords"} & set(world.kinesis.calls[called:])  # nothing was read


def test_a_redecode_commit_refuses_batches_its_run_did_not_stage_and_changes_nothing(world: World) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1], "backfill-1")
    before = snapshots(changed)
    with pytest.raises(BackfillError, match=r"batches 2, 3 hold no re-decoded attempt of this run"):
        redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")
    assert snapshots(changed) == before and rows(changed, quarantine=True) == {1: BAD}
    assert world.store.get_batch("orders", 1).staged_by == "backfill-1"


def test_a_staged_attempt_older_than_the_orphan_age_survives_maintenance(world: World) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1], "backfill-1")
    attempt = world.store.get_batch("orders", 1).staged.attempt  # type: ignore[union-attr]
    assert attempt is not None
    staged_files = sorted(p for p in Path(layout.data_path(changed.output, 1, attempt)).rglob("*.parquet"))
    assert staged_files
    later = world.clock.now + timedelta(days=30)
    report = maintenance.tidy_table(changed, world.store, orphan_age=timedelta(hours=1), now=later)
    assert report is not None
    assert all(p.exists() for p in staged_files)
    done = redecode.commit_redecoded(changed, world.store, [1], "backfill-1")
    assert rows(changed)[1] == 200 and done[0].redecoded_by == "backfill-1"


def test_a_reader_scanning_in_a_loop_sees_each_selection_wholly_old_or_wholly_new_and_every_record_once(world: World) -> None:
    """The issue's first test: the schema gains a field and widens an INT to a BIGINT; a re-decode of batches 1-3 while a
    reader scans the table in a loop. Every scan holds each record once, and all three batches decoded the old way or
    all the new way; one new snapshot; the holdings' records are Iceberg's total-records."""
    changed = with_schema(world.pipeline, "n BIGINT, user STRING, note STRING")
    redecode_replays(world, changed, [1, 2, 3], "backfill-1")
    old, new = {1: 200 - BAD, 2: 200, 3: 200}, {1: 200, 2: 200, 3: 200}
    before = snapshots(changed)
    scans: list[tuple[int, dict[int, int], int]] = []
    problems: list[str] = []
    done = threading.Event()

    def read() -> None:
        while True:
            finished = done.is_set()
            table = iceberg_table.load_table(world.pipeline)  # as a reader loads it: through the catalog, each time
            assert table is not None and table.current_snapshot() is not None
            snapshot = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
            rows_read = table.scan(snapshot_id=snapshot).to_arrow()
            keys = list(
                zip(*(rows_read.column(c).to_pylist() for c in ("shard_id", "sequence_number", "sub_sequence_number")), strict=True)
            )
            counts: dict[int, int] = {}
            for batch_id in rows_read.column("batch_id").to_pylist():
                counts[batch_id] = counts.get(batch_id, 0) + 1
            if len(set(keys)) != len(keys) or counts not in (old, new):
                problems.append(f"snapshot {snapshot}: {counts}, {len(keys) - len(set(keys))} twice")
            scans.append((snapshot, counts, len(keys)))
            if finished:
                return
            time.sleep(0.01)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        while len(scans) < 2:  # the reader has seen the old decoding before the commit starts
            time.sleep(0.01)
        redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")
    finally:
        done.set()
        reader.join()

    assert problems == [] and scans[0][1] == old and scans[-1][1] == new, (problems, scans[0], scans[-1])
    assert len(snapshots(changed)) == len(before) + 1 and {s for s, _, _ in scans} <= {before[-1], snapshots(changed)[-1]}
    table = iceberg_table.load_table(changed)
    assert table is not None and table.current_snapshot() is not None
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert Holdings.from_summary(summary) == Holdings.of([1, 2, 3], 600, 1) and int(summary["total-records"]) == 600
    schema = table.schema()
    assert str(schema.find_field("n").field_type) == "long" and "note" in schema.column_names


def test_regular_batches_landing_while_a_selection_waits_stay_and_the_commit_counts_them(world: World) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1, 2], "backfill-1")
    put(world, 100)
    world.pipeline = changed  # the pipeline's regular runs decode with the new settings too
    assert world.cycle() is not None  # batch 4 lands while 1 and 2 wait

    redecode.commit_redecoded(changed, world.store, [1, 2], "backfill-1")

    assert rows(changed) == {1: 200, 2: 200, 3: 200, 4: 100} and rows(changed, quarantine=True) == {}
    table = iceberg_table.load_table(changed)
    assert table is not None and table.current_snapshot() is not None
    summary = table.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert Holdings.from_summary(summary) == Holdings.of([1, 2, 3, 4], 700, 1) and int(summary["total-records"]) == 700


def test_a_regular_commit_cut_short_between_the_two_tables_is_finished_by_the_next_run(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(world, 100, bad=7)
    batch = world.plan()
    assert batch is not None
    replay(world.pipeline, world.kinesis, batch, attempt="a4")
    verify_batch(world.pipeline, world.store, batch.batch_id, run_id="run")
    real = quarantine_table.commit

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the worker died")

    monkeypatch.setattr(quarantine_table, "commit", crash)
    with pytest.raises(OSError):
        commit_batch(world.pipeline, world.store, batch.batch_id, run_id="run")
    after_crash = snapshots(world.pipeline)
    assert world.store.get_batch("orders", 4).status == BatchStatus.COMMITTING
    assert rows(world.pipeline)[4] == 93 and 4 not in rows(world.pipeline, quarantine=True)  # between the two commits

    monkeypatch.setattr(quarantine_table, "commit", real)
    committed = commit_batch(world.pipeline, world.store, batch.batch_id, run_id="run")

    assert snapshots(world.pipeline) == after_crash  # the table's snapshot found again, not made twice
    assert rows(world.pipeline, quarantine=True) == {1: BAD, 4: 7}
    stored = world.store.get_batch("orders", 4)
    assert stored.status == BatchStatus.COMMITTED and stored.quarantine_snapshot_id == committed.quarantine_snapshot_id
    assert stored.quarantine_snapshot_id == snapshots(world.pipeline, quarantine=True)[-1]
    assert commit_records.read_commit_record(world.pipeline.output, 4).quarantine_snapshot_id == stored.quarantine_snapshot_id


def test_a_redecode_commit_cut_short_around_a_batchs_commit_record_leaves_no_record_naming_the_earlier_attempt(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1, 2], "backfill-1")
    real = store_write = world.store.set_replayed
    calls: list[int] = []

    def dies_after_first(batch: Any, expected: Any) -> None:  # the worker dies after batch 1's ledger write
        store_write(batch, expected)
        calls.append(batch.batch_id)
        raise OSError("the worker died")

    monkeypatch.setattr(world.store, "set_replayed", dies_after_first)
    with pytest.raises(OSError):
        redecode.commit_redecoded(changed, world.store, [1, 2], "backfill-1")
    monkeypatch.setattr(world.store, "set_replayed", real)
    assert calls == [1] and world.store.get_batch("orders", 2).staged_by == "backfill-1"

    done = redecode.commit_redecoded(changed, world.store, [1, 2], "backfill-1")

    for batch in done:
        record = commit_records.read_commit_record(changed.output, batch.batch_id)
        assert (record.result, record.snapshot_id, record.redecoded_by) == (batch.result, batch.snapshot_id, "backfill-1")
        assert record.verified_result().decoding == Decoding.of("json", "n BIGINT, user STRING")


def test_a_redecode_commit_refuses_files_whose_rows_are_not_the_verified_attempts(world: World) -> None:
    """A file taken from or added to a staged attempt's folder after its check: the commit counts each batch's rows in the
    files it adds against the ledger's verified count, and refuses, naming the batch, before the table's snapshot."""
    import pyarrow.parquet as pq

    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    redecode_replays(world, changed, [1, 2, 3], "backfill-1")
    before, quarantine_before = snapshots(changed), snapshots(changed, quarantine=True)
    staged = world.store.get_batch("orders", 2).staged
    assert staged is not None
    (data_file,) = Path(layout.data_path(changed.output, 2, staged.attempt or "")).glob("*.parquet")
    pq.write_table(pq.read_table(data_file).slice(1), data_file)  # one row fewer than verified
    with pytest.raises(iceberg_table.TableCommitRefusedError, match=r"batch 2: 199 rows in its files, 200 verified"):
        redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")
    assert snapshots(changed) == before and snapshots(changed, quarantine=True) == quarantine_before
    assert rows(changed) == {1: 200 - BAD, 2: 200, 3: 200} and world.store.get_batch("orders", 2).staged_by == "backfill-1"

    # Batch 2 replayed and checked again; a quarantine file slipped into batch 1's attempt after its check (it
    # quarantined nothing) is refused in the quarantine table's commit, which comes after the table's.
    redecode_replays(world, changed, [2], "backfill-1")
    first = world.store.get_batch("orders", 1)
    (old_quarantine,) = Path(layout.quarantine_data_path(changed.output, 1, first.verified_result().attempt or "")).glob("*.parquet")
    slipped = Path(layout.quarantine_data_path(changed.output, 1, first.staged.attempt or ""))  # type: ignore[union-attr]
    slipped.mkdir(parents=True, exist_ok=True)
    (slipped / "part-slipped.parquet").write_bytes(old_quarantine.read_bytes())
    with pytest.raises(iceberg_table.TableCommitRefusedError, match=rf"quarantine files .*\(batch 1: {BAD} rows in its files, 0 verified"):
        redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")
    assert snapshots(changed, quarantine=True) == quarantine_before and rows(changed, quarantine=True) == {1: BAD}
    (slipped / "part-slipped.parquet").unlink()
    done = redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")  # resumed: the quarantine table's
    assert rows(changed) == {1: 200, 2: 200, 3: 200} and rows(changed, quarantine=True) == {}
    assert all(b.redecoded_by == "backfill-1" for b in done)


def test_a_rollback_past_a_redecode_refuses_the_next_plan_naming_it_and_the_restore_puts_the_decoding_back(world: World) -> None:
    """Batches 2 and 3 quarantine nothing, so their re-decode (int to long) keeps every count: only the count of re-decodes
    made visible, in the snapshot's summary and on the ledger's head, tells a rollback past it."""
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    before = snapshots(world.pipeline)
    redecode_replays(world, changed, [2, 3], "backfill-1")
    done = redecode.commit_redecoded(changed, world.store, [2, 3], "backfill-1")
    world.pipeline = changed
    table = iceberg_table.load_table(changed)
    assert table is not None and world.store.get_head("orders").redecodes == 1
    table.manage_snapshots().rollback_to_snapshot(before[-1]).commit()  # Iceberg's own tool, by an operator
    assert rows(changed) == {1: 200 - BAD, 2: 200, 3: 200}  # the counts agree: only the decoding is older
    head = world.store.get_head("orders")

    put(world, 100)
    with pytest.raises(TableMismatchError, match=r"records 0 re-decodes made visible, and the ledger 1.*rolled back past a re-decode"):
        world.plan()
    assert world.store.get_head("orders") == head  # nothing planned
    with pytest.raises(TableMismatchError, match="re-decodes"):
        backfill.choose(changed, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock.now)

    plan = backfill.plan_restore(changed, world.kinesis, world.store, now=world.clock.now)
    assert (plan.decodings, plan.from_files, plan.from_stream, plan.lost) == ((2, 3), (), (), ())
    assert "older decoding" in plan.describe()
    assert backfill.restore_from_files(changed, world.store, plan, "restore-1") == []

    restored = iceberg_table.load_table(changed)
    assert restored is not None and restored.current_snapshot() is not None
    summary = restored.current_snapshot().summary.additional_properties  # type: ignore[union-attr]
    assert Holdings.from_summary(summary) == Holdings.of([1, 2, 3], 600 - BAD, 1)
    for batch in done:  # the re-decoded attempts' files, and the ledger names the snapshot that holds them
        attempt = batch.verified_result().attempt or ""
        folder = iceberg_table.iceberg_location(layout.data_path(changed.output, batch.batch_id, attempt))
        held = iceberg_table.batch_data_files(restored, batch.batch_id)
        assert held and all(f.file_path.startswith(folder + "/") for f in held)
        assert world.store.get_batch("orders", batch.batch_id).snapshot_id == restored.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert rows(changed) == {1: 200 - BAD, 2: 200, 3: 200}
    # A second run of the same restore finds nothing to do, and the pipeline goes on.
    assert backfill.plan_restore(changed, world.kinesis, world.store, now=world.clock.now).decodings == ()
    assert world.cycle() is not None and rows(changed) == {1: 200 - BAD, 2: 200, 3: 200, 4: 100}


def test_a_ledger_recovered_from_the_output_keeps_the_count_of_redecodes_a_rolled_back_table_lacks(world: World) -> None:
    changed = with_schema(world.pipeline, "n BIGINT, user STRING")
    before = snapshots(world.pipeline)
    redecode_replays(world, changed, [2, 3], "backfill-1")
    redecode.commit_redecoded(changed, world.store, [2, 3], "backfill-1")
    table = iceberg_table.load_table(changed)
    assert table is not None
    table.manage_snapshots().rollback_to_snapshot(before[-1]).commit()  # and then the state table is lost too

    world.store = MemoryStateStore()
    recovery.recover(changed, world.kinesis, world.store, now=world.clock.now)
    # The re-decode's snapshot, which the commit records name, says 1; the rolled-back table says 0.
    assert world.store.get_head("orders").redecodes == 1
    world.pipeline = changed
    put(world, 100)
    with pytest.raises(TableMismatchError, match="rolled back past a re-decode"):
        world.plan()
