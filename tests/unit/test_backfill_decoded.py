"""A backfill of a directory output on the fakes, whose payload.schema changed since the batch's first run: refused before
anything readers see changes (the batch's folder, its quarantine, the ledger), and accepted only with ``redecode``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from fakes.replay import directory_pipeline, replay
from fakes.world import World
from kinesis_replay.adapters import files, layout
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import DecodedValuesChangedError, VerificationError
from kinesis_replay.steps.backfill import check_replayed, committed_batch

SCHEMA = "index INT, user STRING"


@pytest.fixture
def world(tmp_path: Path) -> World:
    built = World(tmp_path)
    built.pipeline = directory_pipeline(tmp_path / "out", payload={"format": "json", "schema": SCHEMA})
    for _ in range(2):
        built.produce(40)
        assert built.cycle() is not None
    return built


def with_schema(pipeline: PipelineConfig, schema: str) -> PipelineConfig:
    return replace(pipeline, payload=replace(pipeline.payload, schema=schema))


def tree(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def column(folder: str, name: str) -> list[Any]:
    table = ds.dataset(folder, format="parquet").to_table(columns=["sequence_number", name]).sort_by("sequence_number")
    return list(table.column(name).to_pylist())


def test_a_changed_schema_is_refused_and_the_batch_its_quarantine_and_the_ledger_stay_as_they_were(world: World) -> None:
    output = world.pipeline.output
    folder, quarantine = layout.batch_path(output, 1), layout.quarantine_path(output, 1)
    held, ledger = tree(folder), world.store.list_batches("orders")
    assert held and column(folder, "index") and all(isinstance(v, int) for v in column(folder, "index"))
    changed = with_schema(world.pipeline, "index STRING, user STRING")

    replay(changed, world.kinesis, committed_batch(changed, world.store, 1), attempt="b")
    assert tree(folder) == held  # staged, not swapped in
    with pytest.raises(DecodedValuesChangedError) as refused:
        check_replayed(changed, world.store, 1, run_id="backfill-1")

    message = str(refused.value)
    assert "batch 1" in message and "field 'index'" in message and f"{len(column(folder, 'index'))} of" in message
    assert "decoder or payload.schema change" in message and '"redecode": true' in message
    assert tree(folder) == held and tree(quarantine) == {}  # readers see the batch as it was
    assert world.store.list_batches("orders") == ledger
    assert world.landed() == world.expected()

    # Asked to re-decode, the same check swaps the verified attempt in; the ledger keeps the first run's manifest.
    check_replayed(changed, world.store, 1, run_id="backfill-2", redecode=True)
    assert all(isinstance(v, str) for v in column(folder, "index")) and column(folder, "index")
    assert world.store.list_batches("orders") == ledger and world.landed() == world.expected()
    assert tree(layout.staging_path(output, 1)) == {}


def test_records_quarantined_by_a_changed_schema_are_refused_as_a_decoding_change(world: World) -> None:
    output = world.pipeline.output
    held = tree(layout.batch_path(output, 2))
    changed = with_schema(world.pipeline, "index INT, user INT")  # no "user-012" decodes as an INT
    changed = replace(changed, payload=replace(changed.payload, max_bad_share=1.0))

    replay(changed, world.kinesis, committed_batch(changed, world.store, 2))
    with pytest.raises(DecodedValuesChangedError) as refused:
        check_replayed(changed, world.store, 2)

    message = str(refused.value)
    assert "batch 2: " in message and "40 of 40 rows differ; field 'decode_error' (other fields that differ: index, user)" in message
    assert """None before, 'field "user": expected INT""" in message  # quarantined now, and why

    assert tree(layout.batch_path(output, 2)) == held and tree(layout.quarantine_path(output, 2)) == {}


def test_a_backfill_that_fails_its_raw_check_leaves_the_batch_folder_whole(world: World) -> None:
    output = world.pipeline.output
    held, batch = tree(layout.batch_path(output, 2)), world.store.get_batch("orders", 2)
    shard = batch.ranges[0]
    shorter = replace(batch, ranges=(replace(shard, end=shard.start), *batch.ranges[1:]))  # fewer rows than the first run's

    replay(world.pipeline, world.kinesis, shorter)
    with pytest.raises(VerificationError, match=rf"different rows than the batch's first run for shards {shard.shard_id}"):
        check_replayed(world.pipeline, world.store, 2)

    assert tree(layout.batch_path(output, 2)) == held and world.store.get_batch("orders", 2) == batch
    assert world.landed() == world.expected()
    # The batch's next replay (the same schema) finds the refused attempt's staging, removes it, and passes.
    replay(world.pipeline, world.kinesis, committed_batch(world.pipeline, world.store, 2), attempt="c")
    check_replayed(world.pipeline, world.store, 2)
    assert world.landed() == world.expected() and tree(layout.staging_path(output, 2)) == {}


def test_an_unchanged_schema_backfills_and_a_check_cut_short_while_swapping_is_finished_by_its_rerun(world: World) -> None:
    output = world.pipeline.output
    replay(world.pipeline, world.kinesis, committed_batch(world.pipeline, world.store, 1), attempt="d")
    staged = layout.staged_data_path(output, 1, "d")
    moves = [(staged, layout.batch_path(output, 1)), (layout.staged_quarantine_path(output, 1, "d"), layout.quarantine_path(output, 1))]
    files.begin_swap(layout.swap_record_path(output, 1), moves)  # the check passed and recorded its swap, then was cut short

    check_replayed(world.pipeline, world.store, 1)  # its rerun finishes the swap

    assert not Path(staged).exists() and not Path(layout.swap_record_path(output, 1)).exists()
    assert world.landed() == world.expected()
