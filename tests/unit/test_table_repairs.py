"""A table pipeline's steps on the fakes (an in-memory stream and state store, the embedded SQL catalog, no Spark) after
repairs done by hand with Iceberg's own tools: the guard compares with the ledger, and the restore puts back the rows.

Issue 44, case 5: another writer deleted some of a batch's rows, then every other snapshot was expired by hand, so that
no snapshot records what the table holds. The guard used to read the holdings from the table itself, and the next
commit recorded the rows left as the ledger's. Now the table's partition statistics are compared with the ledger's
record counts, batch by batch: the next plan or commit is refused, naming the batch, and the restore puts it back.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fakes.replay import UNPACED
from fakes.world import World
from kinesis_replay.adapters import files, iceberg_table, layout, range_reader
from kinesis_replay.adapters import table_maintenance as tm
from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine, page_rows
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import BackfillError, TableLocationTakenError, TableMismatchError
from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult
from kinesis_replay.steps.backfill import choose, plan_restore, restore_from_files
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.maintenance import tidy_table
from kinesis_replay.steps.verify import verify_batch

LATER = timedelta(days=30)


def table_pipeline(root: Path, name: str = "orders", **changes: Any) -> PipelineConfig:
    """A pipeline landing in an Iceberg table in the embedded catalog under ``root``, its reads unpaced."""
    entry = {
        "name": name, "stream": "orders", "output": str(root), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": f"kr-{name}", "spark": {}, "read": dict(UNPACED), **changes,
    }  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def replay_into_table(pipeline: PipelineConfig, client: Any, batch: Batch, attempt: str) -> ReplayResult:
    """The batch's ranges read and written as the replay job's tasks write a table output's: an attempt folder of its
    own (batch_id in every file), the quarantine swapped in, the result manifest naming the attempt."""
    staging = f"{layout.staging_path(pipeline.output, batch.batch_id)}/attempt={attempt}"
    writer = AttemptWriter(
        layout.data_path(pipeline.output, batch.batch_id, attempt), f"{staging}/quarantine", "part-00000-t0", batch.batch_id
    )
    for rng in batch.ranges:
        for page in range_reader.iterate_range(client, pipeline.stream, rng, pipeline.read):
            writer.write(page_rows(pipeline.stream, rng.shard_id, page))
    _, results = combine([writer.close()])
    files.replace_folder(f"{staging}/quarantine", layout.quarantine_path(pipeline.output, batch.batch_id))
    files.remove_folder(layout.staging_path(pipeline.output, batch.batch_id), missing_ok=True)
    result = ReplayResult(pipeline.name, batch.batch_id, tuple(results), 0.1, attempt)
    files.write_json(layout.result_path(pipeline.output, batch.batch_id), result.to_dict())
    return result


class TableWorld(World):
    """The fakes' world with a table output: each cycle's replay writes an attempt folder, its commit a snapshot."""

    def __init__(self, tmp_path: Path, **changes: Any) -> None:
        super().__init__(tmp_path)
        self.pipeline = table_pipeline(tmp_path / "out", **changes)

    def replay_and_verify(self, batch: Batch, run_id: str = "run") -> None:
        replay_into_table(self.pipeline, self.kinesis, batch, f"a{batch.batch_id}-{self.clock().timestamp():.0f}")
        verify_batch(self.pipeline, self.store, batch.batch_id, run_id=run_id)

    def commit(self, batch_id: int, run_id: str = "run") -> Batch:
        return commit_batch(self.pipeline, self.store, batch_id, now=self.clock.advance(seconds=1), run_id=run_id)

    def cycle(self, run_id: str = "run") -> Batch | None:
        batch = self.plan(run_id)
        if batch is None:
            return None
        self.replay_and_verify(batch, run_id)
        return self.commit(batch.batch_id, run_id)

    def table(self) -> Any:
        table = iceberg_table.load_table(self.pipeline)
        assert table is not None
        return table

    def rows(self) -> list[tuple[str, str]]:
        """(shard, sequence number) of every row the table's current snapshot holds, in order (duplicates kept)."""
        scanned = self.table().scan(selected_fields=("shard_id", "sequence_number")).to_arrow()
        return sorted(zip(scanned.column("shard_id").to_pylist(), scanned.column("sequence_number").to_pylist(), strict=True))

    def by_batch(self) -> dict[int, int]:
        return iceberg_table.partition_counts(self.table())

    def ledger(self) -> tuple[Any, ...]:
        """Everything the state table holds for the pipeline: head, shards (checkpoints), each batch's status."""
        name = self.pipeline.name
        return self.store.get_head(name), self.store.get_shards(name), [(b.batch_id, b.status) for b in self.store.list_batches(name)]


def delete_some_and_expire_the_rest(world: TableWorld, batch_id: int) -> int:
    """Another writer deletes one shard's rows of the batch (pyiceberg rewrites its file), then every snapshot but the
    current one is expired by hand, as Iceberg's expire_snapshots does: no snapshot left records the holdings.
    Returns how many rows were deleted."""
    from pyiceberg.expressions import And, EqualTo

    table = world.table()
    before = world.by_batch()[batch_id]
    shard = table.scan(row_filter=f"batch_id = {batch_id}", limit=1).to_arrow().column("shard_id")[0].as_py()
    table.delete(And(EqualTo("batch_id", batch_id), EqualTo("shard_id", shard)))
    table = world.table()
    current = table.current_snapshot().snapshot_id
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]).commit()
    table = world.table()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [current]
    state = iceberg_table.table_state(table)
    assert state.derived and state.total_records == sum(world.by_batch().values())  # the table agrees with itself
    return before - world.by_batch()[batch_id]


@pytest.fixture
def world(tmp_path: Path) -> TableWorld:
    built = TableWorld(tmp_path)
    for _ in range(3):
        built.produce(60)
        assert built.cycle() is not None
    assert built.rows() == built.expected()
    return built


def test_a_partial_delete_then_expiry_by_hand_refuses_the_next_plan_and_the_restore_puts_the_rows_back(world: TableWorld) -> None:
    deleted = delete_some_and_expire_the_rest(world, 2)
    assert deleted > 0
    world.produce(30)
    ledger, rows = world.ledger(), world.rows()

    with pytest.raises(TableMismatchError) as refused:
        world.plan()
    message = str(refused.value)
    assert f"batch 2 holds {60 - deleted} rows in its partition, and the ledger verified 60" in message
    assert "batch 1 holds" not in message and "batch 3 holds" not in message
    assert "No snapshot of the table's current ancestry records what it holds" in message
    assert '"restore_table": true, "dry_run": true' in message and "Nothing was written" in message
    assert world.ledger() == ledger and world.rows() == rows  # no batch planned, no checkpoint moved, the table as it was

    plan = plan_restore(world.pipeline, world.kinesis, world.store, now=world.clock())
    assert (plan.from_files, plan.from_stream, plan.lost) == ((2,), (), ())  # pyiceberg rewrote the file: the attempt's is unreferenced
    assert world.ledger() == ledger and world.rows() == rows  # planning a restore writes nothing
    assert restore_from_files(world.pipeline, world.store, plan, "restore") == []
    assert world.by_batch() == {1: 60, 2: 60, 3: 60}
    state = iceberg_table.table_state(world.table())
    assert not state.derived and state.holdings.records == state.total_records == 180  # the restore recorded the ledger's count

    assert world.cycle() is not None  # the pipeline goes on: batch 4
    assert world.rows() == world.expected()  # every record exactly once


def test_a_partial_delete_then_expiry_while_a_batch_is_in_flight_refuses_its_commit(world: TableWorld) -> None:
    world.produce(30)
    batch = world.plan()
    assert batch is not None and batch.batch_id == 4
    world.replay_and_verify(batch)
    delete_some_and_expire_the_rest(world, 1)
    shards, rows = world.store.get_shards("orders"), world.rows()

    with pytest.raises(TableMismatchError) as refused:
        world.commit(4)
    assert "batch 1 holds" in str(refused.value) and "Batch 4 was not committed to the table, and no checkpoint moved" in str(refused.value)
    assert world.store.get_shards("orders") == shards and world.rows() == rows
    assert world.store.get_batch("orders", 4).status == BatchStatus.COMMITTING  # still in flight; resumed after the restore
    with pytest.raises(TableMismatchError):
        world.plan()  # the next run's plan says so too, and resumes nothing

    plan = plan_restore(world.pipeline, world.kinesis, world.store, now=world.clock())
    assert plan.from_files == (1,) and restore_from_files(world.pipeline, world.store, plan, "restore") == []
    world.commit(4)
    assert world.rows() == world.expected() and world.by_batch() == {1: 60, 2: 60, 3: 60, 4: 30}


def test_a_compaction_by_another_writer_then_expiry_by_hand_agrees_with_the_ledger_and_the_pipeline_goes_on(world: TableWorld) -> None:
    """Another writer rewrote batch 1's files with the same rows (a compaction), and expiry by hand kept only its snapshot:
    the partitions agree with the ledger batch by batch, so the next cycle commits, and records the ledger's count."""
    from pyiceberg.expressions import EqualTo

    table = world.table()
    same = table.scan(row_filter="batch_id = 1").to_arrow()
    table.overwrite(same.select([f.name for f in table.schema().fields]), overwrite_filter=EqualTo("batch_id", 1))
    table = world.table()
    current = table.current_snapshot().snapshot_id
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]).commit()
    assert iceberg_table.table_state(world.table()).derived
    world.produce(20)
    assert world.cycle() is not None
    state = iceberg_table.table_state(world.table())
    assert not state.derived and state.holdings.records == state.total_records == 200 and state.holdings.describe() == "batches 1 to 4"
    assert world.rows() == world.expected()


# Issue 44, case 6: a mistyped table.name, and the refusal's own advice (the restore), made a second table at the same
# location; regular batches landed in it, and its maintenance deleted the real table's metadata as orphans.


def test_a_mistyped_table_name_is_refused_naming_the_real_table_and_no_second_table_is_made(world: TableWorld) -> None:
    real = world.pipeline
    assert real.table is not None
    mistyped = replace(real, table=replace(real.table, name="ordres"))
    world.pipeline = mistyped
    world.produce(20)
    ledger, rows = world.ledger(), TableWorld.rows(replace_pipeline(world, real))
    catalog = iceberg_table.load_catalog(real)

    with pytest.raises(TableMismatchError) as refused:
        world.plan()
    message = str(refused.value)
    assert "table kinesis_replay.ordres in catalog kinesis_replay (sql, embedded)" in message and "does not exist" in message
    assert "catalog 'kinesis_replay' holds table kinesis_replay.orders at that location" in message
    assert "table.name of pipeline 'orders' ('ordres') is probably mistyped" in message
    assert "a restore would not create a second table there" in message.lower() and '"restore_table": true}' not in message

    with pytest.raises(BackfillError) as restore_refused:  # the restore's dry run plans the same way, and says the same
        plan_restore(mistyped, world.kinesis, world.store, now=world.clock())
    assert "kinesis_replay.orders at that location" in str(restore_refused.value)
    assert "never creates a table at a location that holds another table's metadata" in str(restore_refused.value)
    # A commit never creates it either (a first batch, or a restore that got past the plan).
    attempt = world.store.get_batch("orders", 3).verified_result().attempt
    paths = files.parquet_files(layout.data_path(real.output, 3, attempt or ""))
    with pytest.raises(TableLocationTakenError, match=r"kinesis_replay\.orders"):
        iceberg_table.commit_snapshot(mistyped, 3, attempt or "", paths, "restore")
    with pytest.raises(TableMismatchError, match="probably mistyped"):  # the mistyped pipeline's maintenance: refused too
        tidy_table(mistyped, world.store, orphan_age=timedelta(hours=1), now=datetime.now(UTC) + LATER)

    assert catalog.list_tables("kinesis_replay") == [("kinesis_replay", "orders")]  # no second table
    assert world.ledger() == ledger and TableWorld.rows(replace_pipeline(world, real)) == rows
    world.pipeline = real  # table.name fixed: the pipeline goes on
    assert world.cycle() is not None and world.rows() == world.expected()


def test_maintenance_removes_nothing_while_another_tables_metadata_is_at_the_location(world: TableWorld) -> None:
    """A second table at the location (made by an older release's restore, or by hand): neither table's orphan-file
    removal deletes the other's files; expiry still runs, and the refusal names the other table's metadata."""
    real = world.table()
    catalog = iceberg_table.load_catalog(world.pipeline)
    second = catalog.create_table(("kinesis_replay", "ordres"), schema=real.schema(), location=real.location())
    root = Path(world.pipeline.output)
    before = sorted(p for p in (root / "metadata").iterdir())
    later = datetime.now(UTC) + LATER  # every file is old enough to be an orphan

    report = tidy_table(world.pipeline, world.store, orphan_age=timedelta(hours=1), now=later)
    assert report is not None and report.orphans_removed == () and report.orphans_refused is not None
    assert f"another table (table-uuid {second.metadata.table_uuid})" in report.orphans_refused
    assert second.metadata_location.removeprefix("file://") in report.orphans_refused
    other = tm.expire_and_remove(catalog.load_table(("kinesis_replay", "ordres")), orphan_age=timedelta(hours=1), now=later)
    assert other.orphans_removed == () and other.orphans_refused is not None
    assert all(p.exists() for p in before) and world.rows() == world.expected()  # both tables' metadata intact


def test_a_table_dropped_from_its_catalog_is_registered_again_by_the_restore_never_made_anew(world: TableWorld) -> None:
    catalog = iceberg_table.load_catalog(world.pipeline)
    history = len(world.table().metadata.snapshots)
    catalog.drop_table("kinesis_replay.orders")  # its metadata and data files stay
    with pytest.raises(TableMismatchError) as refused:
        world.plan()
    assert "which catalog 'kinesis_replay' no longer names" in str(refused.value)
    assert "The restore registers that table again from" in str(refused.value)

    plan = plan_restore(world.pipeline, world.kinesis, world.store, now=world.clock())
    assert plan.register is not None and "registered again in its catalog from" in plan.describe()
    restore_from_files(world.pipeline, world.store, plan, "restore")
    assert len(world.table().metadata.snapshots) == history  # the same table, its history with it
    assert world.rows() == world.expected()
    world.produce(10)
    assert world.cycle() is not None and world.rows() == world.expected()


def replace_pipeline(world: TableWorld, pipeline: PipelineConfig) -> TableWorld:
    """The world as seen through another pipeline config (the table it names)."""
    seen = object.__new__(TableWorld)
    seen.__dict__.update(world.__dict__, pipeline=pipeline)
    return seen


def test_a_deleted_embedded_catalog_is_not_made_again_by_the_refusal_that_names_the_tables_metadata(world: TableWorld) -> None:
    catalog_dir = Path(world.pipeline.output) / iceberg_table.CATALOG_DIR
    for path in sorted(catalog_dir.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    catalog_dir.rmdir()
    with pytest.raises(TableMismatchError) as refused:
        world.plan()
    assert "holds 4 metadata files of an Iceberg table of pipeline 'orders'" in str(refused.value) and not catalog_dir.exists()


def test_a_partial_delete_then_expiry_by_hand_refuses_a_backfill_before_it_reads(world: TableWorld) -> None:
    deleted = delete_some_and_expire_the_rest(world, 3)
    ledger, rows = world.ledger(), world.rows()

    with pytest.raises(TableMismatchError) as refused:
        choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [1]}, now=world.clock())
    assert f"batch 3 holds {60 - deleted} rows in its partition, and the ledger verified 60" in str(refused.value)
    assert world.ledger() == ledger and world.rows() == rows  # nothing read, nothing replaced
