"""Snapshot expiry and orphan-file removal on a real pyiceberg table (the embedded SQL catalog in a temporary directory)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_replay.adapters import commit_records, iceberg_table, layout
from kinesis_replay.adapters import table_maintenance as tm
from kinesis_replay.adapters.files import parquet_files
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import ConfigError, StateLostError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, Head, ReplayResult, ShardResult
from kinesis_replay.steps import maintenance

SCHEMA = Schema(
    NestedField(1, "sequence_number", StringType(), required=False),
    NestedField(2, "batch_id", LongType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="batch_id"))
LATER = timedelta(days=30)  # "now" for a run that finds every snapshot and file older than the defaults


def make_table(tmp_path: Path, properties: dict[str, str] | None = None) -> Table:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("lake")
    return catalog.create_table("lake.orders", SCHEMA, partition_spec=SPEC, properties=properties or {})


def write_batch(table: Table, batch_id: int, rows: int = 3, attempt: str = "a") -> str:
    """A batch's Parquet file where the replay writes it, in its attempt's folder under the table's data; not committed."""
    folder = Path(layout.data_path(table.location().removeprefix("file://"), batch_id, attempt))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "part-00000.parquet"
    data = pa.table({"sequence_number": [f"{batch_id}-{i}" for i in range(rows)], "batch_id": [batch_id] * rows})
    pq.write_table(data, path)
    return f"file://{path}"


def commit(table: Table, batch_id: int, attempt: str = "a", replace: bool = False) -> str:
    """Adds a batch's files in one snapshot, or replaces the batch's files, as the pipeline's commit does."""
    path = write_batch(table, batch_id, attempt=attempt)
    with table.transaction() as tx:
        if replace:
            tx.delete(EqualTo("batch_id", batch_id))
        tx.add_files([path], snapshot_properties={"kinesis-replay.batch-id": str(batch_id)})
    return path


def rows_by_batch(table: Table, snapshot_id: int | None = None) -> dict[int, int]:
    batches = table.scan(snapshot_id=snapshot_id).to_arrow()["batch_id"].to_pylist()
    return {b: batches.count(b) for b in sorted(set(batches))}


def make_old(*locations: str) -> None:
    """Backdates files beyond every default age, as if a month had passed since they were written."""
    old = (datetime.now(UTC) - LATER).timestamp()
    for location in locations:
        os.utime(location.removeprefix("file://"), (old, old))


def every_file(table: Table) -> set[str]:
    root = Path(table.location().removeprefix("file://"))
    return {str(p) for p in root.rglob("*") if p.is_file()}


def test_a_fresh_table_loses_nothing_with_the_defaults(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    for b in (1, 2, 3):
        commit(table, b)
    before = every_file(table)

    report = tm.expire_and_remove(table)

    assert report.expired_snapshots == () and report.orphans_removed == ()
    assert len(table.metadata.snapshots) == 3 and every_file(table) == before
    assert rows_by_batch(table) == {1: 3, 2: 3, 3: 3}


def test_expiry_keeps_the_newest_snapshots_the_table_asks_for_and_time_travel_to_them(tmp_path: Path) -> None:
    table = make_table(tmp_path, {tm.MIN_SNAPSHOTS_TO_KEEP_PROPERTY: "2"})
    for b in (1, 2, 3, 4):
        commit(table, b)
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    expired = table.metadata.snapshots[:2]

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER)

    assert report.expired_snapshots == tuple(snapshots[:2])
    assert [s.snapshot_id for s in table.metadata.snapshots] == snapshots[2:]
    assert rows_by_batch(table, snapshots[2]) == {1: 3, 2: 3, 3: 3}
    assert rows_by_batch(table) == {1: 3, 2: 3, 3: 3, 4: 3}
    # The expired snapshots' manifest lists go; their data files and manifests, which later snapshots hold, stay.
    assert sorted(report.orphans_removed) == sorted(s.manifest_list.removeprefix("file://") for s in expired)


def test_a_replayed_batchs_old_files_go_once_the_snapshots_that_hold_them_expired(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    old_file = commit(table, 1)
    commit(table, 2)
    new_file = commit(table, 1, attempt="b", replace=True)
    make_old(old_file, new_file)

    kept = tm.expire_and_remove(table)  # nothing is old enough to expire: the old file is still in the history
    assert kept.orphans_removed == () and Path(old_file.removeprefix("file://")).exists()

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER)

    assert old_file.removeprefix("file://") in report.orphans_removed
    assert not Path(old_file.removeprefix("file://")).exists() and Path(new_file.removeprefix("file://")).exists()
    assert rows_by_batch(table) == {1: 3, 2: 3}
    # Every file that a remaining snapshot needs is still there: reading each of them works.
    for snapshot in table.metadata.snapshots:
        rows_by_batch(table, snapshot.snapshot_id)
    assert all(Path(p.removeprefix("file://")).exists() for p in tm.referenced_files(table))


def test_unreferenced_files_younger_than_the_orphan_age_or_of_a_batch_in_flight_stay(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    commit(table, 1)
    young = write_batch(table, 2)  # a replay whose commit is still to come
    in_flight = write_batch(table, 3)  # a batch that failed and waits for an operator: old, but in the ledger's flight
    stray = write_batch(table, 4)  # an attempt that nothing will ever commit
    make_old(in_flight, stray)

    report = tm.expire_and_remove(table, in_flight=[3])

    assert report.orphans_removed == (stray.removeprefix("file://"),)
    assert (report.too_young, report.in_flight) == (1, 1)
    assert Path(young.removeprefix("file://")).exists() and Path(in_flight.removeprefix("file://")).exists()
    assert rows_by_batch(table) == {1: 3}


def test_a_dry_run_names_what_it_would_remove_and_changes_nothing(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    old_file = commit(table, 1)
    commit(table, 1, attempt="b", replace=True)
    make_old(old_file)
    before, snapshots = every_file(table), len(table.metadata.snapshots)

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER, dry_run=True)

    assert report.dry_run and len(report.expired_snapshots) == snapshots - 1
    assert old_file.removeprefix("file://") in report.orphans_removed
    assert every_file(table) == before and len(table.metadata.snapshots) == snapshots


def test_a_bad_retention_property_is_named(tmp_path: Path) -> None:
    table = make_table(tmp_path, {tm.MAX_SNAPSHOT_AGE_PROPERTY: "five days"})
    with pytest.raises(ConfigError, match=r"lake\.orders.*history\.expire\.max-snapshot-age-ms.*'five days'") as caught:
        tm.expire_and_remove(table)
    assert not caught.value.retryable  # the task fails at once: its retries would read the same property
    with pytest.raises(ConfigError, match="orphan_age must be at least an hour"):
        tm.Policy(orphan_age=timedelta(minutes=5))
    (tmp_path / "none").mkdir()
    keep_none = make_table(tmp_path / "none", {tm.MIN_SNAPSHOTS_TO_KEEP_PROPERTY: "0"})
    with pytest.raises(ConfigError, match=r"table lake\.orders: history\.expire\.min-snapshots-to-keep must be at least 1, not 0"):
        tm.expire_and_remove(keep_none)


@pytest.mark.parametrize("never", [str(2**63 - 1), str(10**15)])
def test_a_retention_of_never_expires_nothing(tmp_path: Path, never: str) -> None:
    """Long.MAX_VALUE ms is Iceberg's "never": once an OverflowError (no timedelta or date is that long), retried."""
    table = make_table(tmp_path, {tm.MAX_SNAPSHOT_AGE_PROPERTY: never})
    old_file = commit(table, 1)
    commit(table, 1, attempt="b", replace=True)
    make_old(old_file)
    snapshots = len(table.metadata.snapshots)
    report = tm.expire_and_remove(table, orphan_age=timedelta(hours=87600), now=datetime.now(UTC) + LATER)
    assert report.expired_snapshots == () and len(table.metadata.snapshots) == snapshots
    assert report.orphans_removed == () and Path(old_file.removeprefix("file://")).exists()


def test_only_the_tables_own_folders_are_cleaned_never_the_rest_of_its_location(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    commit(table, 1)
    root = Path(table.location().removeprefix("file://"))
    others = [root / "_manifests" / "batch_id=0000000001.json", root / "_commits" / "batch_id=0000000001.json", root / "_catalog.db"]
    for other in others:
        other.parent.mkdir(parents=True, exist_ok=True)
        other.write_text("{}")
    make_old(*(str(o) for o in others))

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER)

    assert report.orphans_removed == () and all(o.exists() for o in others)


def put(path: Path, text: str = "{}") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    make_old(str(path))
    return str(path)


def test_files_its_writers_never_write_stay_and_are_reported_while_its_own_orphans_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once, another deployment's pipeline had its output root inside a table's data/ folder, and the table's
    maintenance removed all of it (data, metadata, catalog, commit records, owner record) as orphans."""
    table = make_table(tmp_path)
    commit(table, 1)
    root = Path(table.location().removeprefix("file://"))
    # Another pipeline's output root, in the table's data folder, shaped as the table's own files are.
    nested = root / "data" / "other"
    nested_files = [
        put(nested / layout.OWNER_FILE, json.dumps({"pipeline": "other"})),
        put(nested / iceberg_table.CATALOG_DIR / "catalog.db", "sqlite"),
        put(nested / layout.COMMITS_DIR / "batch_id=0000000001.json"),
        put(Path(layout.data_path(str(nested), 1, "x")) / "part-00000.parquet", "rows"),
        put(nested / "metadata" / "00001-6b1c5d1e-0f4e-4a5b-9c1d-2e3f4a5b6c7d.metadata.json"),
    ]
    # A root whose owner record is gone: its embedded catalog still says what it is.
    bare = root / "data" / "bare"
    bare_files = [put(bare / iceberg_table.CATALOG_DIR / "catalog.db"), put(Path(layout.data_path(str(bare), 2, "y")) / "p.parquet")]
    strays = [
        put(root / "data" / "notes.txt", "a note"),
        put(root / "data" / "batch_id=0000000005" / "part-00000.parquet", "outside any attempt folder"),
        put(root / "metadata" / "notes.txt"),
        put(root / "metadata" / "copies" / "00001-6b1c5d1e-0f4e-4a5b-9c1d-2e3f4a5b6c7d.metadata.json"),
    ]
    # The table's own orphans: an attempt no commit took, and a metadata file no table version names.
    orphan_data = write_batch(table, 9).removeprefix("file://")
    own = json.dumps({"format-version": 2, "table-uuid": str(table.metadata.table_uuid)})  # fell out of the metadata log
    orphan_metadata = put(root / "metadata" / "00099-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d.metadata.json", own)
    make_old(orphan_data)
    foreign = [*nested_files, *bare_files, *strays]

    dry = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER, dry_run=True)
    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER)

    for run in (dry, report):
        assert sorted(run.orphans_removed) == sorted([orphan_data, orphan_metadata])
        assert run.foreign == tuple(sorted([f"{bare}/", f"{nested}/", *strays]))
        assert run.foreign_files == len(foreign)
    assert all(Path(f).exists() for f in foreign)
    assert not Path(orphan_data).exists() and not Path(orphan_metadata).exists()
    assert rows_by_batch(table) == {1: 3}
    assert f"left alone {len(foreign)} files that are not the table's: {bare}/, " in report.summary()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "left alone" in r.getMessage()]
    assert warnings and all(str(path).rstrip("/") in warnings[-1] for path in [bare, nested, *strays])


def test_files_of_a_batch_whose_commit_record_names_no_snapshot_stay_and_other_orphans_go(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    commit(table, 1)
    cut_short = write_batch(table, 2)  # its commit record was written, its table commit never happened
    stray = write_batch(table, 3)  # an attempt that nothing will ever commit
    make_old(cut_short, stray)
    asked: list[set[int]] = []

    def committing(batch_ids: set[int]) -> set[int]:
        asked.append(batch_ids)
        return batch_ids & {2}

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER, committing=committing)

    assert asked == [{2, 3}]  # asked once, about the batches holding files it would remove, never about the others
    assert report.orphans_removed == (stray.removeprefix("file://"),) and report.committing == (2,)
    assert Path(cut_short.removeprefix("file://")).exists() and report.in_flight == 1
    assert "commits cut short: batches 2" in report.summary()


def test_orphan_removal_refused_removes_nothing_but_expiry_runs_and_the_reason_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = make_table(tmp_path)
    old_file = commit(table, 1)
    commit(table, 1, attempt="b", replace=True)
    stray = write_batch(table, 2)
    make_old(old_file, stray)
    reason = "pipeline 'orders': state table kr-state holds no head item for the pipeline"

    report = tm.expire_and_remove(table, now=datetime.now(UTC) + LATER, refuse_orphans=reason)

    assert report.expired_snapshots and len(table.metadata.snapshots) == 1  # expiry ran (it deletes no file)
    assert report.orphans_removed == () and report.orphans_refused == reason
    assert Path(old_file.removeprefix("file://")).exists() and Path(stray.removeprefix("file://")).exists()
    assert any(r.levelname == "ERROR" and reason in r.getMessage() for r in caplog.records)
    assert report.summary().endswith(f"removed no orphan file: {reason}")


class HeadOnly:
    """A state store that holds one pipeline's head item, or none (a lost state table), and no batch entry: all maintenance
    reads of it (the head; the entries of the batches that hold removable files, for a re-decode staged there)."""

    def __init__(self, head: Head) -> None:
        self.head = head

    def get_head(self, pipeline_name: str) -> Head:
        return self.head

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        return {}


def cut_short_commit(root: Path) -> tuple[PipelineConfig, list[str]]:
    """Batch 1 committed; batch 2's commit cut short after its commit record and before its table commit (its files
    are in no snapshot); batch 3 an attempt no commit began. Every file a month old."""
    from test_iceberg_table import pipeline, write_attempt

    p = pipeline(root)
    ranges = (SequenceRange("shardId-0", 10, 19),)
    for batch_id, attempt in ((1, "a"), (2, "a")):
        files = write_attempt(root, batch_id, attempt, 3)
        result = ReplayResult("orders", batch_id, (ShardResult("shardId-0", 3, 30, 10, 19, "ab"),), attempt=attempt)
        record = Batch("orders", batch_id, BatchStatus.COMMITTING, ranges, "orders-stream", "run", datetime.now(UTC), result=result)
        if batch_id == 1:
            record = replace(record, snapshot_id=iceberg_table.commit_snapshot(p, 1, attempt, files, "run"))
        commit_records.write_commit_record(str(root), record)
    kept = parquet_files(layout.data_path(str(root), 2, "a"))
    stray = write_attempt(root, 3, "a", 3)
    make_old(*kept, *stray)
    return p, [*kept, *stray]


def test_maintenance_with_the_pipelines_head_missing_removes_no_orphan_and_names_pipeline_and_state_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p, unreferenced = cut_short_commit(tmp_path)

    report = maintenance.tidy_table(p, HeadOnly(Head()), orphan_age=tm.DEFAULT_ORPHAN_AGE, now=datetime.now(UTC) + LATER)

    assert report is not None and report.orphans_removed == ()
    assert report.orphans_refused is not None and "pipeline 'orders': state table t holds no head item" in report.orphans_refused
    assert "recover_from_output" in report.orphans_refused  # and says how to get the state back
    assert all(Path(f.removeprefix("file://")).exists() for f in unreferenced)
    assert any(r.levelname == "ERROR" and "state table t holds no head item" in r.getMessage() for r in caplog.records)
    # What a recovery needs is there: it commits batch 2 from its record's files.
    table = iceberg_table.load_table(p)
    assert table is not None and rows_by_batch(table) == {1: 3}


def test_maintenance_keeps_the_files_of_a_commit_cut_short_whatever_the_ledger_says(tmp_path: Path) -> None:
    p, unreferenced = cut_short_commit(tmp_path)
    kept, stray = unreferenced[:-1], unreferenced[-1]

    # A head that claims batch 2 committed, though the table holds batch 1 only: refused, and nothing removed.
    says = r"holds batch 1 in its current snapshot, and the ledger \(state table t\) says batches 1 to 2 are committed; it lacks batch 2"
    with pytest.raises(StateLostError, match=says):
        maintenance.tidy_table(p, HeadOnly(Head(next_batch_id=3, version=4)), tm.DEFAULT_ORPHAN_AGE, now=datetime.now(UTC) + LATER)
    assert all(Path(f.removeprefix("file://")).exists() for f in unreferenced)

    # A head that knows no batch in flight: only the commit record of batch 2 says its commit began.
    report = maintenance.tidy_table(p, HeadOnly(Head(next_batch_id=2, version=4)), tm.DEFAULT_ORPHAN_AGE, now=datetime.now(UTC) + LATER)

    assert report is not None and report.orphans_refused is None and report.committing == (2,)
    assert report.orphans_removed == (stray.removeprefix("file://"),)
    assert all(Path(f.removeprefix("file://")).exists() for f in kept) and not Path(stray.removeprefix("file://")).exists()
    assert commit_records.unfinished_commits(str(tmp_path), [1, 2, 3]) == {2}


def test_maintenance_keeps_the_attempt_a_backfill_replayed_until_its_commit(tmp_path: Path) -> None:
    """A backfill's attempt is in no snapshot from its replay until its check commits it, hours later for a backfill of
    many batches on EMR Serverless: once, maintenance with a short orphan age deleted it, and the check then failed."""
    from test_iceberg_table import pipeline, write_attempt

    p = pipeline(tmp_path)
    iceberg_table.commit_snapshot(p, 1, "a", write_attempt(tmp_path, 1, "a", 3), "run")
    failed = write_attempt(tmp_path, 1, "b", 3)  # an earlier backfill whose check failed: its result was replaced since
    backfill = write_attempt(tmp_path, 1, "c", 3)  # the backfill replayed last, waiting for its check
    result = ReplayResult("orders", 1, (ShardResult("shardId-0", 3, 30, 1000, 1002, "ab"),), attempt="c")
    Path(layout.result_path(str(tmp_path), 1)).parent.mkdir(parents=True, exist_ok=True)
    Path(layout.result_path(str(tmp_path), 1)).write_text(json.dumps(result.to_dict()))
    make_old(*failed, *backfill)

    report = maintenance.tidy_table(p, HeadOnly(Head(next_batch_id=2, version=2)), timedelta(hours=1), now=datetime.now(UTC) + LATER)

    assert report is not None and report.orphans_removed == tuple(f.removeprefix("file://") for f in failed)
    assert all(Path(f.removeprefix("file://")).exists() for f in backfill)
    assert rows_by_batch(iceberg_table.load_table(p)) == {1: 3}  # type: ignore[arg-type]
