"""Compaction: each batch's files written again as few files as its size needs, in one snapshot, never over another
commit's files, and every scan of the table meanwhile holding every record once (steps/compaction.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from fakes.replay import replay, table_pipeline
from fakes.world import World
from kinesis_replay.adapters import attempt_writer, commit_records, iceberg_table, layout
from kinesis_replay.adapters import compaction as compaction_files
from kinesis_replay.core.holdings import Holdings
from kinesis_replay.core.state import Batch
from kinesis_replay.steps import backfill, compaction

BATCHES = 3
RECORDS = 120  # a batch's records, over 4 shards


def put(world: World, count: int, low: int = 0) -> None:
    world.clock.advance(seconds=1)
    records = [{"PartitionKey": f"user-{i % 7}", "Data": json.dumps({"n": low + i}).encode()} for i in range(count)]
    world.kinesis.put_records(StreamName="orders", Records=records)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Three committed batches, each written as several files (a row group past 100 bytes of payload, a file past 150),
    as a replay of many tasks writes them."""
    built = World(tmp_path)
    built.pipeline = table_pipeline(tmp_path / "out", payload={"format": "json", "schema": "n BIGINT"})
    with monkeypatch.context() as small:
        small.setattr(attempt_writer, "FILE_BYTES", 150)
        small.setattr(attempt_writer, "ROW_GROUP_BYTES", 100)
        for b in range(BATCHES):
            put(built, RECORDS, RECORDS * b)
            assert built.cycle() is not None
    yield built


def table_files(world: World) -> dict[int, list[str]]:
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None
    return {b: sorted(f.file_path for f in files) for b, files in iceberg_table.selection_data_files(table, range(1, 10)).items()}


def keys(world: World) -> list[tuple[int, str, str, int]]:
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None
    rows = table.scan().to_arrow()
    columns = ("batch_id", "shard_id", "sequence_number", "sub_sequence_number")
    return sorted(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))


def summary(world: World) -> dict[str, str]:
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and table.current_snapshot() is not None
    return dict(table.current_snapshot().summary.additional_properties)  # type: ignore[union-attr]


def backfill_batch(world: World, batch_id: int, run_id: str) -> Batch:
    """A backfill of one committed batch, as the backfill DAG's replay and check tasks run it."""
    replay(world.pipeline, world.kinesis, backfill.committed_batch(world.pipeline, world.store, batch_id), attempt=run_id)
    return backfill.check_replayed(world.pipeline, world.store, batch_id, run_id=run_id)


def test_each_batch_becomes_one_file_in_one_snapshot_with_its_rows_holdings_and_ledger_checked(world: World) -> None:
    before, held_before, rows_before = table_files(world), summary(world), keys(world)
    assert all(len(files) >= 3 for files in before.values()), before
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None
    snapshots = len(table.metadata.snapshots)

    done = compaction.compact(world.pipeline, world.store, "maintenance-1")

    assert done.compacted == (1, 2, 3) and done.files_before == sum(map(len, before.values())) and done.files_after == 3
    after = table_files(world)
    attempt = compaction.compaction_attempt("maintenance-1")
    assert all(len(after[b]) == 1 and f"/attempt={attempt}/" in after[b][0] for b in (1, 2, 3))
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and len(table.metadata.snapshots) == snapshots + 1  # one snapshot for the three batches
    assert keys(world) == rows_before  # every record once, none more
    held = Holdings.from_summary(summary(world))
    assert held == Holdings.from_summary(held_before) and held is not None and held.records == BATCHES * RECORDS
    assert summary(world)["total-records"] == str(BATCHES * RECORDS)
    for batch_id in (1, 2, 3):
        stored = world.store.get_batch("orders", batch_id)
        assert stored.verified_result().attempt == attempt and stored.snapshot_id == done.snapshot_id
        assert commit_records.read_commit_record(world.pipeline.output, batch_id).verified_result().attempt == attempt
        # Row groups stay one shard's consecutive records, in sequence-number order.
        parquet = pq.ParquetFile(after[batch_id][0].removeprefix("file://"))
        for group in range(parquet.num_row_groups):
            rows = parquet.read_row_group(group, columns=["shard_id", "sequence_number"])
            assert len(set(rows.column("shard_id").to_pylist())) == 1
            numbers = [int(s) for s in rows.column("sequence_number").to_pylist()]
            assert numbers == sorted(numbers)
    # Nothing more to do; the pipeline goes on, its guard content with the compaction's snapshot.
    assert compaction.compact(world.pipeline, world.store, "maintenance-2").compacted == ()
    put(world, 40, 10_000)
    assert world.cycle() is not None and len(keys(world)) == BATCHES * RECORDS + 40


def test_a_target_smaller_than_a_batch_writes_as_many_files_as_its_size_needs() -> None:
    assert compaction_files.files_needed(0) == 1 and compaction_files.files_needed(512 * 2**20) == 1
    assert compaction_files.files_needed(512 * 2**20 + 1) == 2 and compaction_files.files_needed(10_000, 3_000) == 4


def test_a_compaction_that_loses_a_batch_to_a_backfill_keeps_the_backfills_files_and_compacts_the_rest(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows_before = keys(world)
    original = compaction._commit
    calls: list[int] = []

    def backfill_first(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        if len(calls) == 1:  # a backfill of batch 2 commits between the compaction's read and its commit
            backfill_batch(world, 2, "backfill-2")
        return original(*args, **kwargs)

    monkeypatch.setattr(compaction, "_commit", backfill_first)
    done = compaction.compact(world.pipeline, world.store, "maintenance-1")

    assert (done.compacted, done.lost, len(calls)) == ((1, 3), (2,), 2)  # retried on the new state, without batch 2
    after = table_files(world)
    assert (
        all("/attempt=backfill-2/" in f for f in after[2]) and world.store.get_batch("orders", 2).verified_result().attempt == "backfill-2"
    )
    assert len(after[1]) == len(after[3]) == 1
    assert keys(world) == rows_before
    # The compacted files of batch 2, which no snapshot references, are gone.
    attempt = compaction.compaction_attempt("maintenance-1")
    assert not Path(layout.data_path(world.pipeline.output, 2, attempt)).exists()


def test_a_backfill_committed_after_the_compactions_snapshot_keeps_its_attempt_in_the_ledger_and_the_table(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows_before = keys(world)
    original = compaction._commit

    def then_backfill(*args: Any, **kwargs: Any) -> int:
        snapshot_id = original(*args, **kwargs)
        backfill_batch(world, 1, "backfill-1")  # replaces the compacted files, and keeps its attempt in the ledger first
        return snapshot_id

    monkeypatch.setattr(compaction, "_commit", then_backfill)
    done = compaction.compact(world.pipeline, world.store, "maintenance-1")

    assert (done.compacted, done.lost) == ((2, 3), (1,))
    stored = world.store.get_batch("orders", 1)
    assert stored.verified_result().attempt == "backfill-1" and all("/attempt=backfill-1/" in f for f in table_files(world)[1])
    assert commit_records.read_commit_record(world.pipeline.output, 1).verified_result().attempt == "backfill-1"
    assert keys(world) == rows_before


def test_a_compaction_cut_short_after_its_snapshot_is_finished_by_the_same_run_without_a_second_snapshot(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cut(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the maintenance task died after the table's snapshot")

    with monkeypatch.context() as dying:
        dying.setattr(compaction, "_to_ledger", cut)
        with pytest.raises(RuntimeError, match="died"):
            compaction.compact(world.pipeline, world.store, "maintenance-1")
    table = iceberg_table.load_table(world.pipeline)
    assert table is not None
    snapshots = len(table.metadata.snapshots)
    attempt = compaction.compaction_attempt("maintenance-1")
    assert world.store.get_batch("orders", 1).verified_result().attempt != attempt  # the ledger not written yet

    done = compaction.compact(world.pipeline, world.store, "maintenance-1")

    table = iceberg_table.load_table(world.pipeline)
    assert table is not None and len(table.metadata.snapshots) == snapshots
    assert done.compacted == (1, 2, 3)
    assert all(world.store.get_batch("orders", b).verified_result().attempt == attempt for b in (1, 2, 3))
    assert all(commit_records.read_commit_record(world.pipeline.output, b).verified_result().attempt == attempt for b in (1, 2, 3))


def test_a_reader_scanning_in_a_loop_during_compaction_backfills_and_regular_commits_sees_every_record_once(world: World) -> None:
    produced = {1: RECORDS, 2: RECORDS, 3: RECORDS}
    problems: list[str] = []
    scans: list[int] = []
    done = threading.Event()

    def read() -> None:
        while True:
            finished = done.is_set()
            table = iceberg_table.load_table(world.pipeline)
            assert table is not None and table.current_snapshot() is not None
            rows = table.scan(snapshot_id=table.current_snapshot().snapshot_id).to_arrow()  # type: ignore[union-attr]
            found = list(zip(*(rows.column(c).to_pylist() for c in ("shard_id", "sequence_number", "sub_sequence_number")), strict=True))
            counts: dict[int, int] = {}
            for batch_id in rows.column("batch_id").to_pylist():
                counts[batch_id] = counts.get(batch_id, 0) + 1
            if len(set(found)) != len(found) or any(counts.get(b) != n for b, n in produced.items() if b in counts):
                problems.append(f"{counts}, {len(found) - len(set(found))} twice")  # a batch partly held, or twice
            if any(b not in counts for b in (1, 2, 3)):
                problems.append(f"a committed batch missing: {counts}")
            scans.append(len(found))
            if finished:
                return
            time.sleep(0.005)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        while not scans:
            time.sleep(0.01)
        backfill_batch(world, 2, "backfill-2")
        put(world, 40, 10_000)
        assert world.cycle() is not None
        produced[4] = 40
        compaction.compact(world.pipeline, world.store, "maintenance-1")
        backfill_batch(world, 1, "backfill-1")
        put(world, 30, 20_000)
        assert world.cycle() is not None
        produced[5] = 30
        compaction.compact(world.pipeline, world.store, "maintenance-2")
    finally:
        done.set()
        reader.join()

    assert problems == [] and len(scans) >= 2, problems[:3]
    assert len(keys(world)) == sum(produced.values()) and len(set(keys(world))) == sum(produced.values())
