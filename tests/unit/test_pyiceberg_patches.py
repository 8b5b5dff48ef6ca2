"""pyiceberg's commit path patched or not: the same table either way, and a pyiceberg the patches do not fit falls back loudly."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg.catalog
import pyiceberg.table
import pytest
from pyiceberg.catalog import MetastoreCatalog

from kinesis_replay.adapters import iceberg_table, layout, pyiceberg_patches, table_maintenance
from kinesis_replay.core.config import PipelineConfig, parse_config


def pipeline(root: Path) -> PipelineConfig:
    entry = {"name": "orders", "stream": "orders-stream", "output": str(root), "schedule": None,
             "initial_position": "TRIM_HORIZON", "state_table": "t", "spark": {}}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def write_attempt(root: Path, batch_id: int, attempt: str, rows: int, **extra: pa.Array) -> list[str]:
    """One attempt's file as the replay job writes it (the same bytes for the same arguments), ``extra`` columns after batch_id."""
    folder = Path(layout.data_path(str(root), batch_id, attempt))
    folder.mkdir(parents=True)
    table = pa.table({
        "shard_id": ["shardId-0"] * rows,
        "sequence_number": [str(batch_id * 1000 + i) for i in range(rows)],
        "approximate_arrival_timestamp": pa.array([datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(rows)],
                                                  pa.timestamp("us", tz="UTC")),
        "data": pa.array([b"x%d" % i for i in range(rows)], pa.binary()),
        "batch_id": pa.array([batch_id] * rows, pa.int64()),
        **extra,
    })  # fmt: skip
    pq.write_table(table, folder / "part-00000.parquet")
    return [str(folder / "part-00000.parquet")]


def commit_batches(root: Path, catalog: Any = None) -> Any:
    """What the pipeline's commits do to a table: first commits, a column added, a backfill's replay, snapshot expiry."""
    p = pipeline(root)
    iceberg_table.commit_snapshot(p, 1, "a", write_attempt(root, 1, "a", 3), "run-1", catalog=catalog)
    iceberg_table.commit_snapshot(p, 2, "a", write_attempt(root, 2, "a", 4), "run-2", catalog=catalog)
    added = write_attempt(root, 3, "a", 2, note=pa.array(["n1", "n2"]))  # a field added to payload.schema
    iceberg_table.commit_snapshot(p, 3, "a", added, "run-3", catalog=catalog)
    iceberg_table.commit_snapshot(p, 1, "b", write_attempt(root, 1, "b", 3), "backfill-1", catalog=catalog)  # OVERWRITE
    iceberg_table.commit_snapshot(p, 4, "a", [], "run-4", records=0, catalog=catalog)  # every record quarantined
    table = iceberg_table.load_table(p, catalog)
    policy = table_maintenance.Policy(max_snapshot_age=timedelta(0), min_snapshots_to_keep=2)
    assert table_maintenance.expire_snapshots(table, policy, datetime.now(UTC) + timedelta(seconds=1))
    return iceberg_table.load_table(p, catalog)


def contents(table: Any) -> dict[str, Any]:
    """What the table holds and its snapshots record, without what differs between any two tables (ids, times, paths)."""
    root = table.location()
    order = {s.snapshot_id: i for i, s in enumerate(table.metadata.snapshots)}
    return {
        "snapshots": [
            (s.summary.operation.value, s.summary.additional_properties, order.get(s.parent_snapshot_id)) for s in table.metadata.snapshots
        ],
        "current": order[table.current_snapshot().snapshot_id],
        "schema": str(table.schema()),
        "spec": str(table.spec()),
        "sort order": str(table.sort_order()),
        "properties": table.properties,
        "data files": sorted(
            (t.file.file_path.removeprefix(root), t.file.record_count, t.file.partition[0]) for t in table.scan().plan_files()
        ),
        "rows": table.scan().to_arrow().sort_by([("batch_id", "ascending"), ("sequence_number", "ascending")]).to_pylist(),
        "partitions": sorted(
            (r["partition"]["batch_id"], r["record_count"], r["file_count"]) for r in table.inspect.partitions().to_pylist()
        ),
        "metadata log": len(table.metadata.metadata_log),
    }


@pytest.fixture
def pyicebergs_own(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often pyiceberg's own update_table_metadata (the deep copy) ran: in a transaction's read, in a catalog's commit."""
    calls: Counter[str] = Counter()
    for module, where in ((pyiceberg.table, "transaction"), (pyiceberg.catalog, "catalog")):
        own = module.update_table_metadata

        def counted(*args: Any, _own: Any = own, _where: str = where, **kwargs: Any) -> Any:
            calls[_where] += 1
            return _own(*args, **kwargs)

        monkeypatch.setattr(module, "update_table_metadata", counted)
    return calls


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The guard's decision as the test leaves it is undone after it: the other tests run as the import decided."""
    monkeypatch.setattr(pyiceberg_patches, "PATCHED", pyiceberg_patches.PATCHED)
    monkeypatch.setattr(pyiceberg_patches, "why_not", pyiceberg_patches.why_not)
    yield


def test_the_patches_apply_to_the_installed_pyiceberg() -> None:
    assert pyiceberg_patches.PATCHED, pyiceberg_patches.why_not
    assert pyiceberg_patches.why_not is None and pyiceberg_patches.shape_problems() == []


def test_a_commit_makes_the_same_table_patched_and_on_pyicebergs_own_path(tmp_path: Path, pyicebergs_own: Counter[str]) -> None:
    patched = contents(commit_batches(tmp_path / "patched"))
    assert pyicebergs_own == Counter(), "the patched commits never take pyiceberg's deep-copying path"

    catalog = iceberg_table.load_catalog(pipeline(tmp_path / "own"))  # patched at its load, as the bench's is
    with pyiceberg_patches.unpatched():
        assert type(iceberg_table.transaction(iceberg_table.load_table(pipeline(tmp_path / "patched")))) is pyiceberg.table.Transaction
        own = contents(commit_batches(tmp_path / "own", catalog))
    assert pyicebergs_own["transaction"] > 0 and pyicebergs_own["catalog"] > 0, "inside unpatched(), pyiceberg's own path"

    assert own == patched
    assert [operation for operation, _, _ in patched["snapshots"]] == ["overwrite", "append"]  # the two expiry kept
    assert patched["partitions"] == [(1, 3, 1), (2, 4, 1), (3, 2, 1)] and len(patched["rows"]) == 9
    assert patched["snapshots"][-1][1]["kinesis-replay.batches"] == "1-4"


def test_a_pyiceberg_of_another_version_is_not_patched_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, decided: None, pyicebergs_own: Counter[str]
) -> None:
    monkeypatch.setattr(pyiceberg_patches, "_installed_version", lambda: "0.13.0")
    with caplog.at_level(logging.WARNING, logger=pyiceberg_patches.__name__):
        assert pyiceberg_patches.decide() is False
    assert pyiceberg_patches.why_not == "pyiceberg 0.13.0 is installed, and they were written for 0.12.0"
    (warning,) = caplog.records
    assert warning.levelname == "WARNING"
    assert "NOT patched" in warning.message and "pyiceberg 0.13.0 is installed" in warning.message
    assert "slower as the table's history grows" in warning.message  # the cost

    catalog = iceberg_table.load_catalog(pipeline(tmp_path / "own"))
    assert "_update_and_stage_table" not in vars(catalog) and "_convert_orm_to_iceberg" not in vars(catalog)
    own = contents(commit_batches(tmp_path / "own"))
    assert pyicebergs_own["transaction"] > 0 and pyicebergs_own["catalog"] > 0
    with monkeypatch.context() as patched_again:
        patched_again.setattr(pyiceberg_patches, "PATCHED", True)
        assert own == contents(commit_batches(tmp_path / "patched"))


def test_a_patched_method_of_another_shape_leaves_pyicebergs_own_path_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, decided: None
) -> None:
    own_staging = MetastoreCatalog._update_and_stage_table

    def changed(self: Any, current_table: Any, table_identifier: Any, requirements: Any, updates: Any, validate: bool = True) -> Any:
        return own_staging(self, current_table, table_identifier, requirements, updates)  # a parameter more, as a release might add

    monkeypatch.setattr(MetastoreCatalog, "_update_and_stage_table", changed)
    with caplog.at_level(logging.WARNING, logger=pyiceberg_patches.__name__):
        assert pyiceberg_patches.decide() is False
    assert pyiceberg_patches.why_not == (
        "pyiceberg.catalog.MetastoreCatalog._update_and_stage_table: expected parameters (self, current_table, "
        "table_identifier, requirements, updates), found parameters (self, current_table, table_identifier, requirements, "
        "updates, validate)"
    )
    assert "NOT patched" in caplog.text and "MetastoreCatalog._update_and_stage_table" in caplog.text

    table = commit_batches(tmp_path)
    assert contents(table)["partitions"] == [(1, 3, 1), (2, 4, 1), (3, 2, 1)]
    assert type(iceberg_table.transaction(table)) is pyiceberg.table.Transaction


def test_what_the_patches_rely_on_missing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    monkeypatch.delattr(SqlCatalog, "_convert_orm_to_iceberg")
    (problem,) = pyiceberg_patches.shape_problems()
    assert problem.startswith("pyiceberg.catalog.sql.SqlCatalog._convert_orm_to_iceberg (AttributeError: ")


def test_unpatched_blocks_nest_and_end() -> None:
    with pyiceberg_patches.unpatched():
        with pyiceberg_patches.unpatched():
            assert not pyiceberg_patches.active()
        assert not pyiceberg_patches.active()
    assert pyiceberg_patches.active()


# -- a commit's files made into DataFiles, and the data files a scan selects ------------------------------------------


def whole(data_files: list[Any]) -> list[list[Any]]:
    """Each DataFile's every field (pyiceberg's DataFile compares its path only)."""
    return [[f[i] for i in range(len(f))] for f in data_files]


def varied_table(root: Path) -> Any:
    """A table of every kind of column a file can hold (long strings and binaries, whose bounds are truncated; decimals
    stored as INT32, INT64 and FIXED_LEN_BYTE_ARRAY; nested columns, whose bounds are not kept), with a column of each
    metrics mode, partitioned by identity(batch_id) as the pipeline's table is."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    catalog.create_namespace("lake")
    schema, spec, sort_order, _ = iceberg_table.new_table_parts(pipeline(root), varied_file(root / "first.parquet", 1, 0).schema)
    properties = {
        "write.metadata.metrics.column.note": "none",
        "write.metadata.metrics.column.count_only": "counts",
        "write.metadata.metrics.column.word": "truncate(4)",
        "write.metadata.metrics.column.sequence_number": "full",
    }
    return catalog.create_table("lake.t", schema, partition_spec=spec, sort_order=sort_order, properties=properties)


def varied_file(
    path: Path, batch_id: int, seed: int, drop: tuple[str, ...] = (), row_group_size: int = 3, statistics: bool | list[str] = True
) -> pa.Table:
    """A file of ``varied_table``'s columns (less ``drop``), several row groups, nulls here and there, ``statistics`` written
    for every column or those named; returns its rows."""
    import decimal

    n = 8
    rows = pa.table({
        "shard_id": [f"shardId-{seed}"] * n,
        "sequence_number": [f"{seed:04d}-{i:030d}" for i in range(n)],  # longer than the default truncate(16)
        "approximate_arrival_timestamp": pa.array([datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(n)], pa.timestamp("us", "UTC")),
        "data": pa.array([b"\xff" * (20 + i) if i % 3 else None for i in range(n)], pa.binary()),
        "word": pa.array([None if i == seed % n or seed == 5 else f"w{seed}{i}xyzzy" for i in range(n)], pa.string()),  # file 5: all null
        "note": [f"n{i}" for i in range(n)],
        "count_only": pa.array([i * seed for i in range(n)], pa.int64()),
        "small": pa.array([i - seed for i in range(n)], pa.int32()),
        "ratio": pa.array([i / (seed + 1) if i != 2 else float("nan") for i in range(n)], pa.float64()),
        "flag": [i % 2 == 0 for i in range(n)],
        "day": pa.array([date(2026, 1, 1 + i) for i in range(n)], pa.date32()),
        "price": pa.array([decimal.Decimal(f"{seed}{i}.25") for i in range(n)], pa.decimal128(7, 2)),  # INT32
        "amount": pa.array([decimal.Decimal(f"-{seed}{i}.125") for i in range(n)], pa.decimal128(15, 3)),  # INT64
        "total": pa.array([decimal.Decimal(f"{seed}{i}1234567890123.5") for i in range(n)], pa.decimal128(30, 1)),  # FLBA
        "tags": pa.array([[f"t{i}", "u"] if i % 2 else [] for i in range(n)], pa.list_(pa.string())),
        "place": pa.array([{"city": f"c{i}", "zip": i} for i in range(n)], pa.struct([("city", pa.string()), ("zip", pa.int64())])),
        "attrs": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        "batch_id": pa.array([batch_id] * n, pa.int64()),
    })  # fmt: skip
    rows = rows.drop_columns(list(drop))
    pq.write_table(rows, path, row_group_size=row_group_size, store_decimal_as_integer=True, write_statistics=statistics)
    return rows


def test_data_files_are_pyicebergs_own_field_for_field(tmp_path: Path) -> None:
    """What pyiceberg_patches.data_files makes of a commit's files is, file for file and field for field, what
    pyiceberg's parquet_file_to_data_file makes of each: fails when pyiceberg's internals change under the patch."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    table = varied_table(tmp_path)
    folder = tmp_path / "files"
    folder.mkdir()
    paths = []
    # Three file schemas, one of them four times over; a file with no statistics, one with some; a column all null.
    drops = ((), (), ("word", "place"), (), ("note",), (), (), ())
    for n, drop in enumerate(drops):
        statistics = {6: False, 7: ["word", "small", "price", "total", "batch_id"]}.get(n, True)
        varied_file(folder / f"{n}.parquet", batch_id=n + 1, seed=n, drop=drop, statistics=statistics)
        paths.append(f"file://{folder}/{n}.parquet")
    footers = iceberg_table.read_footers(table.io, paths)
    assert [f.path for f in footers] == paths

    theirs = [parquet_file_to_data_file(table.io, table.metadata, p) for p in paths]
    ours = pyiceberg_patches.data_files(table.io, table.metadata, footers)
    assert whole(ours) == whole(theirs)
    # What the comparison covers: bounds kept, truncated, left out by the metrics modes, and kept for no nested column.
    first = theirs[0]
    by_name = {f.name: f.field_id for f in table.schema().fields}
    assert first.lower_bounds[by_name["word"]] == b"w01x" and by_name["note"] not in first.lower_bounds
    assert by_name["count_only"] in first.value_counts and by_name["count_only"] not in first.lower_bounds
    assert len(first.upper_bounds[by_name["sequence_number"]]) == 35 and len(first.split_offsets) == 3
    assert ours[6].lower_bounds == {} and ours[6].null_value_counts == {} and ours[6].partition[0] is None
    assert set(ours[7].lower_bounds) == {by_name[c] for c in ("word", "small", "price", "total", "batch_id")}
    assert by_name["word"] not in ours[5].lower_bounds and ours[5].null_value_counts[by_name["word"]] == 8
    assert [f.partition[0] for f in ours] == [1, 2, 3, 4, 5, 6, None, 8] and [f.file_size_in_bytes for f in ours] == [
        Path(p.removeprefix("file://")).stat().st_size for p in paths
    ]

    with pyiceberg_patches.unpatched():  # pyiceberg's own function, each footer read again
        assert whole(pyiceberg_patches.data_files(table.io, table.metadata, footers)) == whole(theirs)


def test_data_files_check_each_file_schema_as_pyiceberg_does(tmp_path: Path) -> None:
    """The schema check runs once for each distinct file schema, never once for all: a file that does not fit is
    refused with pyiceberg's own error, wherever it comes among files that fit."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    table = varied_table(tmp_path)
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    varied_file(good, batch_id=1, seed=1)
    rows = varied_file(bad, batch_id=2, seed=2)
    pq.write_table(rows.append_column("stranger", pa.array(["?"] * rows.num_rows)), bad)
    paths = [f"file://{good}", f"file://{bad}"]
    with pytest.raises(ValueError) as theirs:
        parquet_file_to_data_file(table.io, table.metadata, paths[1])
    with pytest.raises(ValueError) as ours:
        pyiceberg_patches.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, paths))
    assert str(ours.value) == str(theirs.value) and "stranger" in str(ours.value)


def test_data_files_of_files_written_before_a_rename_take_the_columns_field_ids(tmp_path: Path) -> None:
    """Files that name a column as it was before a rename and files that name it as it is now, in one call: each file's
    statistics under the column's field id, as each file alone gets them."""
    p = pipeline(tmp_path)
    before = write_attempt(tmp_path, 1, "a", 3, user=pa.array(["ann", "bob", "cy"]))
    iceberg_table.commit_snapshot(p, 1, "a", before, "run-1")
    renamed = replace(p, payload=replace(p.payload, renamed_from={"customer": "user"}))
    after = write_attempt(tmp_path, 2, "a", 2, customer=pa.array(["dee", "eve"]))
    iceberg_table.commit_snapshot(renamed, 2, "a", after, "run-2")
    table = iceberg_table.load_table(renamed)
    customer = table.schema().find_field("customer").field_id
    paths = [iceberg_table.iceberg_location(f) for f in (*after, *before)]
    made = iceberg_table.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, paths))
    alone = [iceberg_table.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, [f]))[0] for f in paths]
    assert whole(made) == whole(alone)
    assert [(f.lower_bounds[customer], f.upper_bounds[customer]) for f in made] == [(b"dee", b"eve"), (b"ann", b"cy")]


def test_scan_data_files_are_the_files_pyicebergs_plan_files_plans(tmp_path: Path) -> None:
    """The data files a filter selects, with and without the patch, in any snapshot: pyiceberg's plan_files' files."""
    p = pipeline(tmp_path)
    for batch_id in range(1, 6):
        iceberg_table.commit_snapshot(p, batch_id, "a", write_attempt(tmp_path, batch_id, "a", batch_id), f"run-{batch_id}")
    iceberg_table.commit_snapshot(p, 3, "b", write_attempt(tmp_path, 3, "b", 2), "backfill")  # an OVERWRITE: 3's first file out
    table = iceberg_table.load_table(p)
    first = table.metadata.snapshots[1].snapshot_id
    filters = ["batch_id = 3", "batch_id >= 2 AND batch_id <= 4", "batch_id = 9", "batch_id >= 4"]
    for row_filter in filters:
        for snapshot_id in (None, first):
            theirs = [t.file for t in table.scan(row_filter=row_filter, snapshot_id=snapshot_id).plan_files()]
            ours = pyiceberg_patches.scan_data_files(table, row_filter, snapshot_id)
            assert whole(ours) == whole(theirs), (row_filter, snapshot_id)
            with pyiceberg_patches.unpatched():
                assert whole(pyiceberg_patches.scan_data_files(table, row_filter, snapshot_id)) == whole(theirs)
    assert [f.file_path.rsplit("/", 2)[-2] for f in pyiceberg_patches.scan_data_files(table, "batch_id = 3")] == ["attempt=b"]


class _Chunk:
    """A column chunk's metadata as pyarrow reads it, but with no statistics (``missing``) or statistics that pyarrow
    cannot read (``unreadable``): what a file of another writer may hold in some row groups and not in others."""

    def __init__(self, chunk: Any, missing: bool, unreadable: bool) -> None:
        self._chunk, self.is_stats_set, self._unreadable = chunk, chunk.is_stats_set and not missing, unreadable

    @property
    def statistics(self) -> Any:
        if self._unreadable:
            raise pa.lib.ArrowNotImplementedError("unreadable statistics")
        return self._chunk.statistics

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chunk, name)


class _Footer:
    """A file's metadata with ``missing`` and ``unreadable`` statistics in some row groups: {row group: column positions}."""

    def __init__(self, metadata: Any, missing: dict[int, set[int]], unreadable: dict[int, set[int]]) -> None:
        self._metadata, self._missing, self._unreadable = metadata, missing, unreadable

    def row_group(self, r: int) -> Any:
        row_group = self._metadata.row_group(r)
        missing, unreadable = self._missing.get(r, set()), self._unreadable.get(r, set())
        return SimpleNamespace(column=lambda pos: _Chunk(row_group.column(pos), pos in missing, pos in unreadable))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metadata, name)


def test_statistics_missing_or_unreadable_in_some_row_groups_drop_the_columns_bounds_as_pyiceberg_does(tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping

    table = varied_table(tmp_path)
    varied_file(tmp_path / "f.parquet", batch_id=1, seed=3)
    metadata = pq.read_metadata(tmp_path / "f.parquet")
    assert metadata.num_row_groups == 3
    schema = table.schema()
    plan, mapping = compute_statistics_plan(schema, table.properties), parquet_path_to_id_mapping(schema)
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    word, small, day = names.index("word"), names.index("small"), names.index("day")
    footer = _Footer(metadata, missing={1: {word, small}}, unreadable={2: {day}})
    theirs = data_file_statistics_from_parquet_metadata(footer, plan, mapping)
    columns = {field_id: pyiceberg_patches._Column(collector) for field_id, collector in plan.items()}
    ours = pyiceberg_patches._file_statistics(footer, mapping, columns)
    assert ours.to_serialized_dict() == theirs.to_serialized_dict()
    assert ours.partition(table.spec(), schema) == theirs.partition(table.spec(), schema)
    dropped = {schema.find_field(name).field_id for name in ("word", "small", "day")}
    assert dropped.isdisjoint(ours.to_serialized_dict()["lower_bounds"]) and dropped.isdisjoint(ours.null_value_counts)


def test_an_overwrite_binds_its_partitions_once_and_replaces_the_same_files_as_pyicebergs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-decode's OVERWRITE of several batches builds one manifest evaluator (pyiceberg's own: one per pass over the
    manifests) and makes the same table."""
    import pyiceberg.table.update.snapshot as snapshot

    built: Counter[str] = Counter()
    own = snapshot.manifest_evaluator

    def counted(*args: Any, **kwargs: Any) -> Any:
        built["patched" if pyiceberg_patches.active() else "own"] += 1
        return own(*args, **kwargs)

    monkeypatch.setattr(snapshot, "manifest_evaluator", counted)

    def redecode(root: Path) -> Any:
        p = pipeline(root)
        for batch_id in range(1, 6):
            iceberg_table.commit_snapshot(p, batch_id, "a", write_attempt(root, batch_id, "a", batch_id), f"run-{batch_id}")
        replacements = {b: write_attempt(root, b, "r", b + 1) for b in (2, 3, 4)}
        records = {b: (b, b + 1) for b in replacements}
        key = {iceberg_table.PIPELINE_PROPERTY: p.name, "kinesis-replay.redecode": "rd"}
        iceberg_table.replace_batches(p, replacements, records, {**key, iceberg_table.RUN_PROPERTY: "rd"}, key, lambda _state: None)
        return contents(iceberg_table.load_table(p))

    patched = redecode(tmp_path / "patched")
    assert built == Counter(patched=1)
    with pyiceberg_patches.unpatched():
        own_table = redecode(tmp_path / "own")
    # pyiceberg's own: one a pass over the manifests, at least (its pool's threads fill its cache of evaluators, and two
    # may each build one: 3 once in make test).
    assert built["own"] >= 2
    assert own_table == patched
    assert patched["partitions"] == [(1, 1, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1), (5, 5, 1)]
    assert [op for op, _, _ in patched["snapshots"]][-1] == "overwrite"


def test_footers_of_local_files_are_read_in_turn_and_of_an_object_store_in_pyicebergs_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.utils.concurrent import ExecutorFactory

    pooled: list[list[str]] = []

    class Pool:
        def map(self, fn: Any, paths: list[str]) -> Any:
            pooled.append(list(paths))
            return map(fn, paths)

    monkeypatch.setattr(ExecutorFactory, "get_or_create", staticmethod(lambda: Pool()))
    local = []
    for n in range(3):
        varied_file(tmp_path / f"{n}.parquet", batch_id=n + 1, seed=n, row_group_size=n + 1)
        local.append(f"file://{tmp_path}/{n}.parquet")
    io = PyArrowFileIO()
    footers = iceberg_table.read_footers(io, local)
    assert pooled == []
    assert [(f.path, f.size, f.metadata.num_row_groups) for f in footers] == [
        (p, Path(p.removeprefix("file://")).stat().st_size, 8 // (n + 1) + (8 % (n + 1) > 0)) for n, p in enumerate(local)
    ]

    class Bucket(PyArrowFileIO):  # s3://bucket/<name> read from tmp_path/<name>
        def new_input(self, location: str) -> Any:
            return super().new_input(location.replace("s3://bucket/", f"file://{tmp_path}/"))

    remote = [p.replace(f"file://{tmp_path}/", "s3://bucket/") for p in local]
    from_store = iceberg_table.read_footers(Bucket(), remote)
    assert pooled == [remote]
    assert [(f.path, f.size) for f in from_store] == [(r, f.size) for r, f in zip(remote, footers, strict=True)]


def test_a_snapshots_summary_is_pyicebergs_own_with_each_partition_type_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An OVERWRITE of three batches' files (and an append): summarize_partitions_once's summary is pyiceberg's
    ``_summary``'s, its partitions' summaries included, with the spec's partition type built once, not once a file."""
    from pyiceberg.partitioning import PartitionSpec

    p = pipeline(tmp_path)
    for batch_id in range(1, 5):
        iceberg_table.commit_snapshot(p, batch_id, "a", write_attempt(tmp_path, batch_id, "a", batch_id), f"run-{batch_id}")
    table = iceberg_table.load_table(p)
    with table.transaction() as tx:
        tx.set_properties({"write.summary.partition-limit": "10"})
    table = iceberg_table.load_table(p)
    paths = [iceberg_table.iceberg_location(f) for b in (1, 2, 3) for f in write_attempt(tmp_path, b, "b", b + 1)]
    added = iceberg_table.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, paths))
    old = [f for found in iceberg_table.selection_data_files(table, [1, 2, 3]).values() for f in found]
    built = Counter[str]()
    own_type = PartitionSpec.partition_type

    def counted(self: Any, schema: Any) -> Any:
        built["partition type"] += 1
        return own_type(self, schema)

    monkeypatch.setattr(PartitionSpec, "partition_type", counted)
    for operation in ("overwrite", "append"):
        tx = iceberg_table.transaction(table)
        update = tx.update_snapshot(snapshot_properties={"k": "v"})
        producer = update.overwrite() if operation == "overwrite" else update.merge_append()
        for data_file in old if operation == "overwrite" else ():
            producer.delete_data_file(data_file)
        for data_file in added:
            producer.append_data_file(data_file)
        built.clear()
        theirs = type(producer)._summary(producer, {"k": "v"})
        assert built["partition type"] == len(added) + (len(old) if operation == "overwrite" else 0)
        built.clear()
        ours = pyiceberg_patches.summarize_partitions_once(producer)._summary({"k": "v"})
        assert built["partition type"] == 1
        assert ours == theirs and ours.additional_properties["k"] == "v", operation
        assert {k for k in ours.additional_properties if k.startswith("partitions.")} == {f"partitions.batch_id={b}" for b in (1, 2, 3)}


def test_a_shared_manifest_evaluator_evaluates_one_manifest_at_a_time() -> None:
    """pyiceberg's _deleted_entries evaluates the manifests in its thread pool with one evaluator, which keeps each
    manifest's partition summaries on itself while it evaluates: the shared one takes one manifest at a time."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    inside, overlapped = [0], []

    def build(spec_id: int) -> Any:
        def evaluate(manifest: int) -> bool:
            inside[0] += 1
            if inside[0] > 1:
                overlapped.append(manifest)
            time.sleep(0.002)
            inside[0] -= 1
            return True

        return evaluate

    producer = SimpleNamespace(_build_manifest_evaluator=build, partition_filters={0: object()})
    shared = pyiceberg_patches.share_manifest_evaluators(producer)._build_manifest_evaluator(0)
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(shared, range(40)))
    assert overlapped == []
    with ThreadPoolExecutor(8) as pool:  # pyiceberg's own evaluator, shared the same way: the threads overlap
        assert all(pool.map(build(0), range(40)))
    assert overlapped
