"""A staged attempt's Parquet statistics, read from its files' own footers when its check reads them, kept beside it.

A re-decode's commit adds about 200 files (a data file and a quarantine file a batch) in one snapshot, and made their
DataFiles by reading each footer and pyarrow's statistics of every column chunk: about half of the commit's CPU time
(BENCHMARKS.md, make bench-redecode). Each batch's attempt is read whole, footer included, by its own earlier task
(``backfill.check_replayed``: verify's ``scan_rows``); there, ``summarize`` takes from each footer what a DataFile needs
of it, and ``write_sidecar`` keeps it in one small JSON file in the attempt's data folder (``SIDECAR``), for the
attempt's data files and its quarantine files alike. The commit reads one sidecar a batch (``Known``) in place of its
files' footers.

What a sidecar holds is the files' own: their footers as the check read them (never the replay job's manifest), and
their size and modification time as listed before the check opened them. Per file: the row count, the split offsets,
the Arrow schema, and for each Parquet column (by its path in the file, never a field id) its compressed size, value
count, null count, physical type and the bounds pyarrow reads, aggregated over the row groups as pyiceberg aggregates
them (untruncated, to 256 characters or bytes). Field ids, metrics modes and truncation are the table's, at the
commit, after its schema update (pyiceberg_patches.data_files maps them there, as it maps a footer's).

Any doubt and the file's footer is read, as before: no sidecar (an attempt of a release before them, or a backfill's
that was not staged), one that cannot be read or parsed or is of another format, a file it does not list, a file
whose listed size or modification time is not the sidecar's, a file whose statistics were not all there or not all
readable when summarized, or a column the table maps otherwise (pyiceberg_patches: a path the table's mapping lacks, a
bound cut shorter than the table's truncation, a decimal's raw bounds missing).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kinesis_replay.adapters import files, layout

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

SIDECAR = "_kinesis_replay_stats.json"  # in the attempt's data folder; Spark and Hive readers skip names starting with _
FORMAT, VERSION = "kinesis-replay.file-stats", 1
CUT = 256  # a string's or a binary's bound is kept to this many characters or bytes (pyiceberg truncates to 16 by default)


def sidecar_path(output: str, batch_id: int, attempt: str) -> str:
    """The attempt's sidecar: ``<output>/data/batch_id=<id>/attempt=<attempt>/_kinesis_replay_stats.json``."""
    return f"{layout.data_path(output, batch_id, attempt)}/{SIDECAR}"


@dataclass(frozen=True)
class ColumnStats:
    """One Parquet column of a file, summed and bounded over its row groups as pyiceberg's statistics do."""

    path: str  # its path in the file's Parquet schema (path_in_schema)
    size: int  # compressed bytes
    values: int
    nulls: int | None  # None: no row group had a null count
    physical: str
    low: Any = None  # the bounds pyarrow reads (Statistics.min and .max), untruncated or cut to CUT
    high: Any = None
    cut: int = 0  # a bound was longer than CUT: kept to this many characters or bytes (0: both whole)
    raw: tuple[int | None, int | None] | None = None  # a decimal stored as an integer: its unscaled bounds (min_raw, max_raw)


@dataclass(frozen=True)
class FileStats:
    """What a Parquet file's DataFile needs of its footer, with the size and modification time the file had."""

    path: str  # as the table names it (iceberg_table.iceberg_location)
    size: int
    mtime_ns: int | None
    rows: int
    split_offsets: tuple[int, ...]
    schema: bytes  # the Arrow schema the footer gives (pa.Schema.serialize)
    columns: tuple[ColumnStats, ...]

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.ipc.read_schema(pa.py_buffer(self.schema))


# -- a file's footer summarized, at its check ---------------------------------------------------------------------------


def summarize(path: str, metadata: Any, size: int, mtime_ns: int | None) -> FileStats | None:
    """What ``metadata`` (the file's pyarrow FileMetaData) gives a DataFile, or None when anything of it is not as
    pyiceberg's statistics read it without a doubt (no row group, a column chunk without statistics, statistics pyarrow
    cannot read, a bound of a kind the sidecar cannot hold exactly): that file's footer is read at the commit."""
    import pyarrow as pa

    if metadata.num_row_groups == 0:
        return None
    groups = [metadata.row_group(r) for r in range(metadata.num_row_groups)]
    columns = []
    try:
        for pos in range(metadata.num_columns):
            column = metadata.schema.column(pos)
            found = _column(column.path, column.physical_type, column.logical_type.type == "DECIMAL", [g.column(pos) for g in groups])
            if found is None:
                return None
            columns.append(found)
        schema = metadata.schema.to_arrow_schema().serialize().to_pybytes()
    except pa.lib.ArrowException:
        return None
    offsets = tuple(sorted(_split_offset(g.column(0)) for g in groups))
    return FileStats(path, size, mtime_ns, metadata.num_rows, offsets, schema, tuple(columns))


def _column(path: str, physical: str, decimal: bool, chunks: list[Any]) -> ColumnStats | None:
    size = values = 0
    nulls: int | None = None
    low = high = raw_low = raw_high = None
    for chunk in chunks:
        if chunk.path_in_schema != path or not chunk.is_stats_set:
            return None
        size += chunk.total_compressed_size
        values += chunk.num_values
        statistics = chunk.statistics
        if statistics.physical_type != physical:
            return None
        if statistics.has_null_count:
            nulls = (nulls or 0) + statistics.null_count
        # As pyiceberg's StatsAggregator updates its bounds, row group after row group (the same comparisons, in order).
        low, high = _lower(low, statistics.min), _higher(high, statistics.max)
        if decimal and physical in ("INT32", "INT64"):
            raw_low, raw_high = _lower(raw_low, statistics.min_raw), _higher(raw_high, statistics.max_raw)
    cut = 0
    if isinstance(low, str | bytes) and len(low) > CUT:
        low, cut = low[:CUT], CUT
    if isinstance(high, str | bytes) and len(high) > CUT:
        high, cut = high[:CUT], CUT
    if not (_exact(low) and _exact(high)):
        return None
    raw = (raw_low, raw_high) if decimal and physical in ("INT32", "INT64") else None
    return ColumnStats(path, size, values, nulls, physical, low, high, cut, raw)


def _lower(current: Any, value: Any) -> Any:
    if current is None:
        return value
    return current if value is None else min(value, current)


def _higher(current: Any, value: Any) -> Any:
    if current is None:
        return value
    return current if value is None else max(value, current)


def _split_offset(first_column: Any) -> int:
    """Where a row group starts, as pyiceberg finds it (pyiceberg_patches._split_offset)."""
    data_offset, dictionary_offset = first_column.data_page_offset, first_column.dictionary_page_offset
    if first_column.has_dictionary_page and dictionary_offset < data_offset:
        return int(dictionary_offset)
    return int(data_offset)


# -- bounds as JSON, exactly ---------------------------------------------------------------------------------------------


def _zone(value: datetime) -> list[str]:
    """A datetime's zone as kept: none, or a zoneinfo.ZoneInfo's key (pyarrow's UTC); any other zone is not kept."""
    if value.tzinfo is None:
        return []
    key = getattr(value.tzinfo, "key", None)
    if not isinstance(key, str):
        raise ValueError(f"a bound in zone {value.tzinfo!r} is not kept")
    return [key]


def _in_zone(text: str, zone: list[str]) -> datetime:
    from zoneinfo import ZoneInfo

    found = datetime.fromisoformat(text)
    return found.replace(tzinfo=ZoneInfo(zone[0])) if zone else found


# Each kind of bound kept: its type, how it is written as JSON text, and how it is read back (the same value and type).
_KINDS: dict[str, tuple[type, Any, Any]] = {
    "bool": (bool, lambda v: v, lambda t, _: _typed(t, bool)),
    "int": (int, str, lambda t, _: int(_typed(t, str))),
    "float": (float, float.hex, lambda t, _: float.fromhex(_typed(t, str))),
    "str": (str, lambda v: v, lambda t, _: _typed(t, str)),
    "bytes": (bytes, lambda v: base64.b64encode(v).decode(), lambda t, _: base64.b64decode(_typed(t, str), validate=True)),
    "decimal": (Decimal, str, lambda t, _: Decimal(_typed(t, str))),
    "date": (date, date.isoformat, lambda t, _: date.fromisoformat(_typed(t, str))),
    "time": (time, time.isoformat, lambda t, _: time.fromisoformat(_typed(t, str))),
    "datetime": (datetime, lambda v: v.replace(tzinfo=None).isoformat(), lambda t, zone: _in_zone(_typed(t, str), zone)),
}
_KIND_OF = {kind: name for name, (kind, _, _) in _KINDS.items()}


def _encode(value: Any) -> Any:
    """A bound as JSON: ``[kind, text]`` (a datetime's zone after them), read back to the same value and type (``_decode``)."""
    if value is None:
        return None
    name = _KIND_OF.get(type(value))
    if name is None or (name == "time" and value.tzinfo is not None):
        raise ValueError(f"a bound of type {type(value).__name__} is not kept")
    return [name, _KINDS[name][1](value), *(_zone(value) if name == "datetime" else [])]


def _decode(encoded: Any) -> Any:
    if encoded is None:
        return None
    name, text, *zone = encoded
    if name not in _KINDS:
        raise ValueError(f"a bound of kind {name!r}")
    return _KINDS[name][2](text, zone)


def _exact(value: Any) -> bool:
    """Whether ``value`` comes back from JSON as itself: the same type and the same value (a float to the bit)."""
    try:
        back = _decode(json.loads(json.dumps(_encode(value))))
    except ValueError:
        return False
    if type(back) is not type(value):
        return False
    if isinstance(value, float):  # a NaN's sign and payload are not in its hex: not kept
        return bool(back.hex() == value.hex() and value == value)
    return bool(back == value and repr(back) == repr(value))


# -- the sidecar ------------------------------------------------------------------------------------------------------


def to_json(found: Iterable[FileStats]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "files": [_file_json(f) for f in found]}


def _file_json(f: FileStats) -> dict[str, Any]:
    return {
        "path": f.path,
        "size": f.size,
        "mtime_ns": f.mtime_ns,
        "rows": f.rows,
        "split_offsets": list(f.split_offsets),
        "schema": base64.b64encode(f.schema).decode(),
        "columns": [
            {"path": c.path, "size": c.size, "values": c.values, "nulls": c.nulls, "physical": c.physical,
             "low": _encode(c.low), "high": _encode(c.high), "cut": c.cut, "raw": list(c.raw) if c.raw is not None else None}
            for c in f.columns
        ],
    }  # fmt: skip


def from_json(data: Any) -> dict[str, FileStats]:
    """A sidecar's files by path; ValueError (or KeyError, TypeError, IndexError) when it is not one this release writes:
    every value of the type it is written with (checked inline: a commit reads 100 sidecars of 10 to 20 columns a file)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not a sidecar of this format and version")
    found = {}
    for f in data["files"]:
        columns = []
        for c in f["columns"]:
            path, size, values, nulls, physical, cut, raw = (c[k] for k in ("path", "size", "values", "nulls", "physical", "cut", "raw"))
            if (
                type(path) is not str or type(size) is not int or type(values) is not int or type(physical) is not str
                or type(cut) is not int or (nulls is not None and type(nulls) is not int)
                or (raw is not None and (type(raw) is not list or len(raw) != 2 or any(r is not None and type(r) is not int for r in raw)))
            ):  # fmt: skip
                raise ValueError(f"column {path!r}: a value not of its type")
            bounds = None if raw is None else (raw[0], raw[1])
            columns.append(ColumnStats(path, size, values, nulls, physical, _decode(c["low"]), _decode(c["high"]), cut, bounds))
        path, size, mtime_ns, rows, offsets, schema = (f[k] for k in ("path", "size", "mtime_ns", "rows", "split_offsets", "schema"))
        if (
            type(path) is not str or type(size) is not int or type(rows) is not int or type(schema) is not str
            or (mtime_ns is not None and type(mtime_ns) is not int) or any(type(o) is not int for o in offsets)
        ):  # fmt: skip
            raise ValueError(f"file {path!r}: a value not of its type")
        found[path] = FileStats(path, size, mtime_ns, rows, tuple(offsets), base64.b64decode(schema, validate=True), tuple(columns))
    return found


def _typed(value: Any, kind: type) -> Any:
    if type(value) is not kind:
        raise ValueError(f"{value!r} is not a {kind.__name__}")
    return value


def write_sidecar(output: str, batch_id: int, attempt: str, found: Iterable[FileStats]) -> None:
    """The attempt's sidecar, written whole (a file's footer is read at the commit for any file it does not list)."""
    files.write_json(sidecar_path(output, batch_id, attempt), to_json(found))


@dataclass
class Known:
    """The statistics a commit may take from its staged attempts' sidecars in place of their files' footers: a file's
    when its attempt's sidecar lists it with the size and modification time the commit's listing found (``listed``).
    Each sidecar is read once, on the first look-up of one of its files (inside the tables' commits)."""

    sidecars: Mapping[str, str]  # a file (as the table names it) -> its attempt's sidecar (as the output names it)
    listed: Mapping[str, tuple[int, int | None]]  # a file (as the table names it) -> its size and mtime (ns) as listed
    _read: dict[str, dict[str, FileStats]] = field(default_factory=dict)

    def stats(self, path: str) -> FileStats | None:
        """The file's statistics from its sidecar, or None: read its footer."""
        sidecar, listed = self.sidecars.get(path), self.listed.get(path)
        if sidecar is None or listed is None:
            return None
        if sidecar not in self._read:
            self._read[sidecar] = _read_sidecar(sidecar)
        found = self._read[sidecar].get(path)
        if found is None or (found.size, found.mtime_ns) != listed or found.mtime_ns is None:
            return None
        return found if _covers(found.schema, tuple(c.path for c in found.columns)) else None


@functools.lru_cache(maxsize=64)
def _covers(schema: bytes, paths: tuple[str, ...]) -> bool:
    """Whether ``paths`` are a column each of the file's Parquet columns (as many as its Arrow schema has leaves, each
    once, under each of its fields): a sidecar that lacks one of the file's columns is not taken."""
    import pyarrow as pa

    try:
        fields = list(pa.ipc.read_schema(pa.py_buffer(schema)))
    except pa.lib.ArrowException:
        return False
    under = [[p for p in paths if p == f.name or p.startswith(f"{f.name}.")] for f in fields]
    return len(set(paths)) == len(paths) == sum(_leaves(f.type) for f in fields) and all(
        len(found) == _leaves(f.type) for f, found in zip(fields, under, strict=True)
    )


def _leaves(kind: pa.DataType) -> int:
    """The Parquet columns (leaves) an Arrow type is written as."""
    import pyarrow as pa

    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    return 1


def _read_sidecar(path: str) -> dict[str, FileStats]:
    """A sidecar's files, or none: a missing one (a release's before sidecars), or one that cannot be read or parsed."""
    try:
        filesystem, local = files.filesystem_of(path)
        with filesystem.open_input_stream(local) as stream:
            return from_json(json.loads(stream.read()))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("%s cannot be read (%s): the commit reads its files' footers instead", path, exc)
        return {}


def known(output: str, attempts: Mapping[int, str], listed: Mapping[str, tuple[int, int | None]]) -> Known:
    """The ``Known`` statistics of the staged ``attempts`` (batch id -> attempt), for the files ``listed`` (path as listed
    -> size, mtime): each file of an attempt's data or quarantine folder names that attempt's sidecar."""
    folders = {}
    for batch_id, attempt in attempts.items():
        sidecar = sidecar_path(output, batch_id, attempt)
        folders[layout.data_path(output, batch_id, attempt).rstrip("/") + "/"] = sidecar
        folders[layout.quarantine_data_path(output, batch_id, attempt).rstrip("/") + "/"] = sidecar  # the same attempt's
    sidecars, facts = {}, {}
    for path, fact in listed.items():
        folder = path
        while "/" in folder and folder + "/" not in folders:  # the attempt's folder, or one of its subfolders
            folder = folder.rsplit("/", 1)[0]
        if folder + "/" in folders:
            sidecars[files.iceberg_location(path)] = folders[folder + "/"]
            facts[files.iceberg_location(path)] = fact
    return Known(sidecars, facts)


@dataclass
class Collector:
    """What an attempt's check reads of its files, for their sidecar: each file's size and modification time as listed
    before it is opened (``list``), then its footer and its size as the check's own read of it found them (``footers``,
    filled by files.scan_rows)."""

    listed: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    footers: dict[str, tuple[Any, int]] = field(default_factory=dict)

    def list_files(self, paths: Iterable[str]) -> None:
        self.listed.update(files.file_facts(list(paths)))

    def summaries(self) -> list[FileStats]:
        """A summary of each file listed and then read at the size listed (a file that changed meanwhile has none)."""
        found = []
        for path, (size, mtime_ns) in self.listed.items():
            read = self.footers.get(path)
            if read is None or read[1] != size or mtime_ns is None:
                continue
            stats = summarize(files.iceberg_location(path), read[0], size, mtime_ns)
            if stats is not None:
                found.append(stats)
        return found
