"""A staged attempt's sidecar of statistics: the DataFiles a commit makes from it are those it makes from the files'
footers, field for field, mapped to the table's schema as it is at the commit; anything that differs reads the footer."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_pyiceberg_patches import pipeline, varied_file, varied_table, whole, write_attempt
from test_redecode import SCHEMA, put, redecode_replays, with_schema  # noqa: F401 - the world fixture's helpers
from test_redecode import world as world  # the fixture, under its own name

from fakes.world import World
from kinesis_replay.adapters import file_stats, files, iceberg_table, layout, pyiceberg_patches
from kinesis_replay.steps import redecode


def summaries(paths: list[str]) -> dict[str, file_stats.FileStats]:
    """What an attempt's check keeps of each file, through the sidecar's JSON and back, by the file's table location."""
    collector = file_stats.Collector()
    collector.list_files(paths)
    for path in paths:
        with open(path, "rb") as f:
            collector.footers[path] = (pq.ParquetFile(f).metadata, os.path.getsize(path))
    kept = json.loads(json.dumps(file_stats.to_json(collector.summaries())))
    return file_stats.from_json(kept)


class Reads:
    """The footers a commit read (``read_footer``, pyiceberg_patches.data_files' way to a footer it needs)."""

    def __init__(self, io: Any) -> None:
        self.io, self.paths = io, Counter[str]()

    def __call__(self, path: str) -> Any:
        self.paths[path] += 1
        (footer,) = iceberg_table.read_footers(self.io, [path])
        return footer


def known_footers(table: Any, paths: list[str], found: dict[str, file_stats.FileStats]) -> list[Any]:
    """read_footers' answer for ``paths`` with the sidecar's ``found`` (each file listed as it is now)."""
    local = {p.removeprefix("file://"): p for p in paths}
    listed = {local[p]: facts for p, facts in files.file_facts(list(local)).items()}
    known = file_stats.Known({p: "unused" for p in paths}, listed, {"unused": found})
    return iceberg_table.read_footers(table.io, paths, known)


def varied_files(root: Path) -> list[str]:
    """The files of pyiceberg_patches' test: three file schemas, a file with no statistics, one with some, a column all null."""
    folder = root / "files"
    folder.mkdir()
    drops = ((), (), ("word", "place"), (), ("note",), (), (), ())
    for n, drop in enumerate(drops):
        statistics = {6: False, 7: ["word", "small", "price", "total", "batch_id"]}.get(n, True)
        varied_file(folder / f"{n}.parquet", batch_id=n + 1, seed=n, drop=drop, statistics=statistics)
    return [f"file://{folder}/{n}.parquet" for n in range(len(drops))]


@pytest.mark.parametrize("modes", [{}, *({"write.metadata.metrics.default": mode} for mode in ("full", "counts", "none"))])
def test_data_files_from_a_sidecar_are_those_from_the_footers_field_for_field(tmp_path: Path, modes: dict[str, str]) -> None:
    """Every column kind (long strings and binaries, decimals stored three ways, nested columns, nulls, NaNs), each metrics
    mode: the DataFiles made from the sidecar are those made from the footers, and no summarized file's footer is read."""
    table = varied_table(tmp_path)
    if modes:
        with table.transaction() as tx:
            tx.set_properties(modes)
        table = table.refresh()
    paths = varied_files(tmp_path)
    found = summaries([p.removeprefix("file://") for p in paths])
    assert sorted(found) == paths[:6], "files 6 and 7 lack statistics for some columns: not summarized, their footers are read"

    footers = iceberg_table.read_footers(table.io, paths)
    reads = Reads(table.io)
    from_sidecar = known_footers(table, paths, found)
    assert [type(f).__name__ for f in from_sidecar] == ["KnownFooter"] * 6 + ["Footer"] * 2
    ours = pyiceberg_patches.data_files(table.io, table.metadata, from_sidecar, reads)
    assert whole(ours) == whole(pyiceberg_patches.data_files(table.io, table.metadata, footers))
    assert reads.paths == Counter()
    if not modes:  # what the comparison covers (pyiceberg_patches' test says the same of the footers' DataFiles)
        by_name = {f.name: f.field_id for f in table.schema().fields}
        assert ours[0].lower_bounds[by_name["word"]] == b"w01x" and len(ours[0].upper_bounds[by_name["sequence_number"]]) == 35
        assert by_name["count_only"] in ours[0].value_counts and by_name["count_only"] not in ours[0].lower_bounds
        assert {by_name["price"], by_name["amount"], by_name["total"]} <= set(ours[0].lower_bounds)
        assert by_name["word"] not in ours[5].lower_bounds and ours[5].null_value_counts[by_name["word"]] == 8


def committed_table(root: Path) -> tuple[Any, Any]:
    """A pipeline's table holding one batch, and its pipeline."""
    p = pipeline(root)
    iceberg_table.commit_snapshot(p, 1, "a", write_attempt(root, 1, "a", 3, user=pa.array(["ann", "bob", "cy"])), "run-1")
    return p, iceberg_table.load_table(p)


def test_data_files_from_a_sidecar_take_the_field_ids_of_a_column_added_in_the_same_commit(tmp_path: Path) -> None:
    """A re-decode adds a column in its commit: the sidecar, summarized before the column had a field id, gives its
    statistics under the id the commit's schema update gave it, as the footer does."""
    _, table = committed_table(tmp_path)
    (path,) = write_attempt(tmp_path, 2, "r", 4, user=pa.array(["d", "e", "f", "g"]), action=pa.array(["buy", "sell", None, "buy"]))
    location = iceberg_table.iceberg_location(path)
    from_sidecar = known_footers(table, [location], summaries([path]))
    assert "action" not in table.schema().column_names
    with iceberg_table.transaction(table) as tx:
        iceberg_table._evolve_schema(tx, from_sidecar[0], "here", {})  # the column added, as the commit adds it
        action = tx.table_metadata.schema().find_field("action").field_id
        ours = iceberg_table.data_files(table.io, tx.table_metadata, from_sidecar)
        theirs = iceberg_table.data_files(table.io, tx.table_metadata, iceberg_table.read_footers(table.io, [location]))
    assert whole(ours) == whole(theirs)
    assert (ours[0].lower_bounds[action], ours[0].upper_bounds[action], ours[0].null_value_counts[action]) == (b"buy", b"sell", 1)


def test_a_sidecars_bounds_are_mapped_to_the_schema_of_the_table_they_are_committed_to(tmp_path: Path) -> None:
    """The same sidecar against two tables whose schemas give its columns other field ids: each table gets its footers'
    DataFiles. Fails if a sidecar's bounds were taken by the field ids of another schema (the one at its check)."""
    (path,) = write_attempt(tmp_path, 1, "a", 3, user=pa.array(["ann", "bob", "cy"]), n=pa.array([7, 8, 9], pa.int32()))
    location = iceberg_table.iceberg_location(path)
    found = summaries([path])
    made = []
    names = pq.read_schema(path).names
    for name, columns in (("straight", names), ("reversed", list(reversed(names)))):  # the same names, other field ids
        table = table_of(tmp_path / name, pa.schema([pq.read_schema(path).field(c) for c in columns]))
        ours = pyiceberg_patches.data_files(table.io, table.metadata, known_footers(table, [location], found))
        theirs = pyiceberg_patches.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, [location]))
        assert whole(ours) == whole(theirs), name
        made.append((table.schema().find_field("user").field_id, ours[0].lower_bounds))
    (user_a, bounds_a), (user_b, bounds_b) = made
    assert user_a != user_b and bounds_a[user_a] == bounds_b[user_b] == b"ann"
    assert bounds_a != bounds_b  # the same bounds under other ids: one table's mapping would be wrong for the other


def table_of(root: Path, file_schema: pa.Schema) -> Any:
    """A pipeline's table whose columns are ``file_schema``'s, in its order (each its field id by that order)."""
    from pyiceberg.catalog.sql import SqlCatalog

    root.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("r", uri=f"sqlite:///{root}/r.db", warehouse=f"file://{root}")
    catalog.create_namespace("lake")
    schema, spec, sort_order, _ = iceberg_table.new_table_parts(pipeline(root), file_schema)
    return catalog.create_table("lake.r", schema, partition_spec=spec, sort_order=sort_order)


def test_a_renamed_columns_statistics_from_a_sidecar_go_under_its_field_id(tmp_path: Path) -> None:
    """A file that names a column as it was before a rename: its sidecar's statistics under the column's field id, as
    its footer's."""
    p, _ = committed_table(tmp_path)
    renamed = replace(p, payload=replace(p.payload, renamed_from={"customer": "user"}))
    after = write_attempt(tmp_path, 2, "a", 2, customer=pa.array(["dee", "eve"]))
    iceberg_table.commit_snapshot(renamed, 2, "a", after, "run-2")
    table = iceberg_table.load_table(renamed)
    before = str(Path(layout.data_path(str(tmp_path), 1, "a")) / "part-00000.parquet")
    paths = [iceberg_table.iceberg_location(f) for f in (*after, before)]
    ours = iceberg_table.data_files(table.io, table.metadata, known_footers(table, paths, summaries([*after, before])))
    assert whole(ours) == whole(iceberg_table.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, paths)))
    customer = table.schema().find_field("customer").field_id
    assert [f.lower_bounds[customer] for f in ours] == [b"dee", b"ann"]


def long_file(path: Path) -> str:
    """A file whose string bounds are longer than a sidecar keeps (file_stats.CUT)."""
    n = file_stats.CUT + 40
    rows = pa.table({"shard_id": ["a" * n + "1", "a" * n + "2"], "sequence_number": ["1", "2"], "batch_id": pa.array([1, 1], pa.int64())})
    pq.write_table(rows, path)
    return str(path)


def test_a_bound_cut_in_the_sidecar_is_taken_where_the_table_truncates_it_shorter_and_the_footer_read_elsewhere(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    path = long_file(tmp_path / "long.parquet")
    location = iceberg_table.iceberg_location(path)
    found = summaries([path])
    assert found[location].columns[0].cut == file_stats.CUT
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("lake")
    schema, spec, _, _ = iceberg_table.new_table_parts(pipeline(tmp_path), pq.read_schema(path))
    for name, mode, footer_read in (
        ("default", None, 0),  # truncate(16)
        ("short", f"truncate({file_stats.CUT - 1})", 0),
        ("as_long", f"truncate({file_stats.CUT})", 1),  # an upper bound cut to n, truncated to n, would not be raised
        ("full", "full", 1),
    ):
        properties = {"write.metadata.metrics.column.shard_id": mode} if mode else {}
        table = catalog.create_table(f"lake.{name}", schema, partition_spec=spec, properties=properties)
        reads = Reads(table.io)
        ours = pyiceberg_patches.data_files(table.io, table.metadata, known_footers(table, [location], found), reads)
        theirs = pyiceberg_patches.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, [location]))
        assert whole(ours) == whole(theirs) and reads.paths[location] == footer_read, name


@pytest.mark.parametrize(
    "change",
    ["no sidecar", "unreadable", "another version", "size", "modified", "not listed", "not in the sidecar", "a column lacking"],
)
def test_a_file_is_read_from_its_footer_when_its_sidecar_does_not_say_what_the_commit_finds(tmp_path: Path, change: str) -> None:
    output = tmp_path / "out"
    (path,) = write_attempt(output, 1, "r", 3, user=pa.array(["ann", "bob", "cy"]))
    (other,) = write_attempt(output, 2, "r", 2)
    location = iceberg_table.iceberg_location(path)
    collector = file_stats.Collector()
    collector.list_files([path])
    collector.footers[path] = (pq.read_metadata(path), os.path.getsize(path))
    (stats,) = collector.summaries()
    if change == "a column lacking":
        stats = replace(stats, columns=stats.columns[:-1])
    file_stats.write_sidecar(str(output), 1, "r", [stats])
    sidecar = Path(file_stats.sidecar_path(str(output), 1, "r"))
    listed = files.parquet_listing(layout.data_path(str(output), 1, "r"))
    if change == "no sidecar":
        sidecar.unlink()
    elif change == "unreadable":
        sidecar.write_text('{"format": "kinesis-replay.file-stats", "version": 1, "files": [{"path"')
    elif change == "another version":
        sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "version": 2}))
    elif change == "size":
        listed = {p: (size + 1, mtime) for p, (size, mtime) in listed.items()}
    elif change == "modified":
        listed = {p: (size, (mtime or 0) + 1) for p, (size, mtime) in listed.items()}
    elif change == "not listed":
        listed = {}
    elif change == "not in the sidecar":
        listed = files.parquet_listing(layout.data_path(str(output), 2, "r"))
        location = iceberg_table.iceberg_location(other)
    known = file_stats.known(str(output), {1: "r", 2: "r"}, listed)
    assert known.stats(location) is None
    (footer,) = iceberg_table.read_footers(_io(), [location], known)
    assert isinstance(footer, iceberg_table.Footer)

    unchanged = file_stats.known(str(output), {1: "r"}, files.parquet_listing(layout.data_path(str(output), 1, "r")))
    if change not in ("no sidecar", "unreadable", "another version", "a column lacking"):
        assert unchanged.stats(iceberg_table.iceberg_location(path)) == stats  # the sidecar itself is taken as it is


def _io() -> Any:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO()


def test_a_file_the_table_maps_otherwise_than_its_sidecar_says_is_read_from_its_footer(tmp_path: Path) -> None:
    """A column path the table's mapping lacks, a decimal stored as an integer without its raw bounds: the footer, which
    then fails or succeeds as it would have."""
    table = varied_table(tmp_path)
    paths = varied_files(tmp_path)[:1]
    found = summaries([p.removeprefix("file://") for p in paths])
    (stats,) = found.values()
    theirs = pyiceberg_patches.data_files(table.io, table.metadata, iceberg_table.read_footers(table.io, paths))
    stranger = tuple(replace(c, path="stranger") if c.path == "word" else c for c in stats.columns)
    for name, changed in (
        ("a path the table lacks", replace(stats, columns=stranger)),
        ("raw bounds missing", replace(stats, columns=tuple(replace(c, raw=None) for c in stats.columns))),
    ):
        footers = [iceberg_table.KnownFooter(paths[0], stats.arrow_schema(), stats.size, changed)]
        reads = Reads(table.io)
        assert whole(pyiceberg_patches.data_files(table.io, table.metadata, footers, reads)) == whole(theirs), name
        assert reads.paths == Counter({paths[0]: 1}), name


def test_a_redecode_stages_each_attempts_sidecar_and_its_commit_reads_no_footer(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the steps: the check of each re-decoded attempt writes its sidecar; the selection's commit (a column
    added, an INT widened) reads those, not the files' footers, and the tables hold what the footers would have made."""
    changed = with_schema(world.pipeline, "n BIGINT, user STRING, note STRING")
    redecode_replays(world, changed, [1, 2, 3], "backfill-1")
    staged = {b: world.store.get_batch("orders", b).staged.attempt for b in (1, 2, 3)}  # type: ignore[union-attr]
    kept = {b: file_stats.from_json(json.loads(Path(file_stats.sidecar_path(changed.output, b, a)).read_text())) for b, a in staged.items()}
    for b, attempt in staged.items():  # every file of the attempt, its quarantine files too
        listed = [*files.parquet_files(layout.data_path(changed.output, b, attempt)),
                  *files.parquet_files(layout.quarantine_data_path(changed.output, b, attempt))]  # fmt: skip
        assert sorted(kept[b]) == sorted(iceberg_table.iceberg_location(p) for p in listed) and listed
    read: list[str] = []
    real = iceberg_table.read_footers

    def reading(io: Any, paths: Any, known: Any = None) -> Any:
        made = real(io, paths, known)
        read.extend(f.path for f in made if isinstance(f, iceberg_table.Footer))
        return made

    monkeypatch.setattr(iceberg_table, "read_footers", reading)
    redecode.commit_redecoded(changed, world.store, [1, 2, 3], "backfill-1")
    assert read == []

    table = iceberg_table.load_table(changed)
    committed = sorted(iceberg_table.selection_data_files(table, [1, 2, 3]).values(), key=lambda f: f[0].file_path)
    added = [f for found in committed for f in found]
    assert "note" in table.schema().column_names and str(table.schema().find_field("n").field_type) == "long"
    assert whole(added) == whole(iceberg_table.data_files(table.io, table.metadata, real(table.io, [f.file_path for f in added])))


def test_a_sidecar_is_an_own_file_of_the_table_for_maintenance() -> None:
    from kinesis_replay.adapters import table_maintenance

    assert table_maintenance.own_file("data", f"batch_id=1/attempt=r/{file_stats.SIDECAR}")
    assert not table_maintenance.own_file("data", f"batch_id=1/{file_stats.SIDECAR}")


def test_bounds_are_kept_exactly_or_not_at_all(caplog: pytest.LogCaptureFixture) -> None:
    import decimal
    from datetime import UTC, date, datetime, time, timedelta, timezone
    from zoneinfo import ZoneInfo

    kept = [True, 7, -0.0, 1.5e300, "é", b"\x00\xff", decimal.Decimal("-1.250"), date(2026, 1, 2), time(1, 2, 3, 4),
            datetime(2026, 1, 1, 1, 2, 3, 5), datetime(2026, 1, 1, tzinfo=ZoneInfo("UTC"))]  # fmt: skip
    for value in kept:
        assert file_stats._exact(value), value
        back = file_stats._decode(json.loads(json.dumps(file_stats._encode(value))))
        assert type(back) is type(value) and repr(back) == repr(value)
    for value in (float("nan"), datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=timezone(timedelta(0))), object()):
        assert not file_stats._exact(value), value
    with caplog.at_level(logging.WARNING):
        assert file_stats._read_sidecar("/nonexistent/sidecar.json") == {}
    assert caplog.records == []  # no sidecar is an attempt of a release before them: no warning
