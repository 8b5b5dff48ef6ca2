"""pyiceberg's commit path without its deep copies and its second parse, patched only on the pyiceberg it was written for.

pyiceberg 0.12's commit deep-copies the whole table metadata, every snapshot kept included, each time its transaction
reads it (about 17 times a commit) and once more in the catalog's commit, and parses the metadata file twice (the
table's load, then the catalog's check that it is still current): at the 1,000th batch of a table, a commit took
13 to 22 times what it takes patched (BENCHMARKS.md, ``make bench-table``). Three patches leave that out:

1. ``transaction``: pyiceberg's Transaction, its ``table_metadata`` computed once per staged change and not copied;
2. ``stage_without_deep_copy``: the catalog's commit stages the new metadata without the copy (``updated_metadata``);
3. ``parse_each_metadata_file_once``: the SQL and Glue catalogs' check inside their commit reuses the load's parse
   while their pointer still names the same metadata file.

And one that is not on the commit path's history but on its files: pyiceberg's ``parquet_file_to_data_file`` (its
``add_files``') builds, for every file a commit adds, the statistics plan and the column mapping of the table's schema
and converts the file's schema to check it against the table's: three quarters of its time, the same work for every
file of a commit (a re-decode's commit adds about 200; BENCHMARKS.md, ``make bench-redecode``). So:

4. ``data_files``: a commit's files made into DataFiles with that work done once per commit (the schema check once per
   distinct file schema), from footers the caller read (``iceberg_table.read_footers``), and each file's statistics
   taken from its footer without pyiceberg's per-column-chunk overhead (``_file_statistics``: half its time); the
   same DataFiles, field for field (tests/unit/test_pyiceberg_patches.py compares them with
   ``parquet_file_to_data_file``'s on files of every column kind and metrics mode).
5. ``scan_data_files``: the data files a scan's filter selects, without the residual filter pyiceberg's ``plan_files``
   computes for each file (binding the filter again for every file: four fifths of the scan of a re-decode's 100
   batches), which a commit never reads: the same files, from the same manifests, pruned the same way.
6. ``share_manifest_evaluators``: an OVERWRITE's two passes over the current manifests (the entries it deletes, the
   manifests it keeps or rewrites) each bind the replaced files' partitions (an Or of one predicate a partition: 100
   for a re-decode) into a manifest evaluator of their own; here the second reuses the first's.
7. ``summarize_partitions_once``: the snapshot's summary finds each added and each deleted file's partition path
   (``PartitionSpec.partition_to_path``), which builds the spec's partition type (pydantic models, validated) for
   every file: 400 times in a re-decode's commit of 100 batches; here once per spec and schema a summary.

Each is written against pyiceberg's internals, which change without notice. So at import this module checks the
installed pyiceberg's version against ``WRITTEN_FOR``, and the shape of everything the patches replace or call
(each exists, with the parameters the patches pass). Only when everything matches are the patches applied
(``PATCHED``); otherwise none is, a WARNING names the version, what did not match and the cost, and every commit
takes pyiceberg's own path (``why_not`` says why): the same table, only slower. ``unpatched()`` takes pyiceberg's own
path in this process, for the test that commits both ways (tests/unit/test_pyiceberg_patches.py) and for
``make bench-table``, which times both.

``iceberg_table`` imports this module on first use (it imports pyiceberg), never when Airflow parses the DAGs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.metadata
import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import StagedTable, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)

WRITTEN_FOR = ("0.12.0",)  # the pyiceberg releases whose internals the patches were read against and tested on

PATCHED = False  # decided at import (decide): the patches apply to the installed pyiceberg
why_not: str | None = None  # when they do not: the version and what did not match
_suspended = 0  # unpatched() blocks open: pyiceberg's own path meanwhile


def decide() -> bool:
    """Check the installed pyiceberg against what the patches were written for; sets ``PATCHED`` and ``why_not``.

    Run at import. A mismatch is logged as a WARNING once, naming the version, what did not match and the cost.
    """
    global PATCHED, why_not
    problems = []
    version = _installed_version()
    if version not in WRITTEN_FOR:
        installed = f"pyiceberg {version}" if version is not None else "a pyiceberg with no version (not an installed distribution)"
        problems.append(f"{installed} is installed, and they were written for {' or '.join(WRITTEN_FOR)}")
    problems += shape_problems()
    PATCHED, why_not = not problems, "; ".join(problems) or None
    if why_not is not None:
        log.warning(
            "pyiceberg's commit path is NOT patched (kinesis_replay.adapters.pyiceberg_patches): %s. Every commit takes "
            "pyiceberg's own path, which makes the same table, slower as the table's history grows: it deep-copies the "
            "whole metadata about 17 times a commit and parses its file twice (at 1,000 snapshots kept, more than 10 "
            "times the patched commit's time: BENCHMARKS.md, make bench-table). To patch it again, install pyiceberg %s, or "
            "check the patches against this pyiceberg and add its version to WRITTEN_FOR.",
            why_not,
            WRITTEN_FOR[-1],
        )
    return PATCHED


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("pyiceberg")
    except importlib.metadata.PackageNotFoundError:
        return None


# What the patches replace or call, by its name in pyiceberg, and how it must look: the parameters it takes (a tuple,
# as the patches pass them), what it is (a type), names it must hold (a set), its value (a str), or only that it is there.
Shape = tuple[str, ...] | type | set[str] | str | None
SHAPE: dict[str, Shape] = {
    # 1. transaction: the property it overrides, and the two attributes it computes it from.
    "pyiceberg.table.Transaction.__init__": ("self", "table", "autocommit"),
    "pyiceberg.table.Transaction.__annotations__": {"_table", "_updates"},
    "pyiceberg.table.Transaction.table_metadata": property,
    # updated_metadata: pyiceberg's own function, step by step.
    "pyiceberg.table.update.update_table_metadata": ("base_metadata", "updates", "enforce_validation", "metadata_location"),
    "pyiceberg.table.update._apply_table_update": ("update", "base_metadata", "context"),
    "pyiceberg.table.update._TableMetadataUpdateContext": (),
    "pyiceberg.table.update._TableMetadataUpdateContext.has_changes": ("self",),
    "pyiceberg.table.update._update_table_metadata_log": ("base_metadata", "metadata_location", "last_updated_ms"),
    "pyiceberg.utils.datetime.datetime_to_millis": ("dt",),
    # 2. stage_without_deep_copy: the method it replaces, and what it calls to do that method's work.
    "pyiceberg.catalog.MetastoreCatalog._update_and_stage_table": ("self", "current_table", "table_identifier", "requirements", "updates"),
    "pyiceberg.catalog.MetastoreCatalog._parse_metadata_version": ("metadata_location",),
    "pyiceberg.catalog.Catalog._load_file_io": ("self", "properties", "location"),
    "pyiceberg.table.StagedTable": ("identifier", "metadata", "metadata_location", "io", "catalog", "config"),
    "pyiceberg.table.locations.load_location_provider": ("table_location", "table_properties"),
    "pyiceberg.table.locations.LocationProvider.new_table_metadata_file_location": ("self", "new_version"),
    # 3. parse_each_metadata_file_once: the conversions it wraps, and where each finds the metadata file's location.
    "pyiceberg.catalog.sql.SqlCatalog._convert_orm_to_iceberg": ("self", "orm_table"),
    "pyiceberg.catalog.sql.IcebergTables.metadata_location": None,
    "pyiceberg.catalog.glue.GlueCatalog._convert_glue_to_iceberg": ("self", "glue_table"),
    "pyiceberg.catalog.glue.METADATA_LOCATION": "metadata_location",
    # 4. data_files: parquet_file_to_data_file's steps, taken one by one (its own body, for pyiceberg's path).
    "pyiceberg.io.pyarrow.parquet_file_to_data_file": ("io", "table_metadata", "file_path"),
    "pyiceberg.io.pyarrow._check_pyarrow_schema_compatible": (
        "requested_schema",
        "provided_schema",
        "downcast_ns_timestamp_to_us",
        "format_version",
    ),
    "pyiceberg.io.pyarrow.compute_statistics_plan": ("schema", "table_properties"),
    "pyiceberg.io.pyarrow.parquet_path_to_id_mapping": ("schema",),
    # _file_statistics: data_file_statistics_from_parquet_metadata and StatsAggregator's bounds, step by step.
    "pyiceberg.io.pyarrow.data_file_statistics_from_parquet_metadata": ("parquet_metadata", "stats_columns", "parquet_column_mapping"),
    "pyiceberg.io.pyarrow.StatisticsCollector.__dataclass_fields__": {"field_id", "iceberg_type", "mode", "column_name"},
    "pyiceberg.io.pyarrow.MetricsMode.__dataclass_fields__": {"type", "length"},
    "pyiceberg.io.pyarrow.MetricModeTypes.NONE": None,
    "pyiceberg.io.pyarrow.MetricModeTypes.COUNTS": None,
    "pyiceberg.io.pyarrow.StatsAggregator.__init__": ("self", "iceberg_type", "physical_type_string", "trunc_length"),
    "pyiceberg.io.pyarrow.StatsAggregator.min_as_bytes": ("self",),
    "pyiceberg.io.pyarrow.StatsAggregator.max_as_bytes": ("self",),
    "pyiceberg.io.fileformat.DataFileStatistics.__dataclass_fields__": {
        "record_count",
        "column_sizes",
        "value_counts",
        "null_value_counts",
        "nan_value_counts",
        "column_aggregates",
        "split_offsets",
    },
    "pyiceberg.conversions.to_bytes": ("primitive_type", "_"),
    "pyiceberg.transforms.TruncateTransform.transform": ("self", "source"),
    "pyiceberg.utils.truncate.truncate_upper_bound_text_string": ("value", "trunc_length"),
    "pyiceberg.utils.truncate.truncate_upper_bound_binary_string": ("value", "trunc_length"),
    "pyiceberg.utils.decimal.unscaled_to_decimal": ("unscaled", "scale"),
    "pyiceberg.io.pyarrow.DataFileStatistics.partition": ("self", "partition_spec", "schema"),
    "pyiceberg.io.pyarrow.DataFileStatistics.to_serialized_dict": ("self",),
    "pyiceberg.manifest.DataFile.from_args": classmethod,
    "pyiceberg.manifest.DataFileContent.DATA": None,
    "pyiceberg.manifest.FileFormat.PARQUET": None,
    # 5. scan_data_files: the planner DataScan.plan_files plans with, its step before the residuals.
    "pyiceberg.table.ManifestGroupPlanner.__init__": ("self", "table_metadata", "io", "row_filter", "case_sensitive", "options"),
    "pyiceberg.table.ManifestGroupPlanner.plan_manifest_entries": ("self", "manifests"),
    "pyiceberg.table.DataScan._plan_files_local": ("self",),
    "pyiceberg.table.TableScan.snapshot": ("self",),
    "pyiceberg.manifest.DataFileContent.EQUALITY_DELETES": None,
    # 6. share_manifest_evaluators: the method it memoizes on one producer, what the evaluator is built from, its callers.
    "pyiceberg.table.update.snapshot._SnapshotProducer._build_manifest_evaluator": ("self", "spec_id"),
    "pyiceberg.table.update.snapshot._SnapshotProducer.partition_filters": functools.cached_property,
    "pyiceberg.table.update.snapshot._OverwriteFiles._deleted_entries": ("self",),
    "pyiceberg.table.update.snapshot._OverwriteFiles._existing_manifests": ("self",),
    # 7. summarize_partitions_once: the summary it computes as _summary does, and what it calls to do so.
    "pyiceberg.table.update.snapshot._SnapshotProducer._summary": ("self", "snapshot_properties"),
    "pyiceberg.table.update.snapshot._SnapshotProducer.__annotations__": {
        "_added_data_files",
        "_deleted_data_files",
        "_parent_snapshot_id",
        "_operation",
    },
    "pyiceberg.table.snapshots.update_snapshot_summaries": ("summary", "previous_summary"),
    "pyiceberg.table.snapshots.SnapshotSummaryCollector.__init__": ("self", "partition_summary_limit"),
    "pyiceberg.table.snapshots.SnapshotSummaryCollector.update_partition_metrics": (
        "self",
        "partition_spec",
        "file",
        "is_add_file",
        "schema",
    ),
    "pyiceberg.table.snapshots.SnapshotSummaryCollector.add_file": ("self", "data_file", "schema", "partition_spec"),
    "pyiceberg.table.snapshots.SnapshotSummaryCollector.remove_file": ("self", "data_file", "schema", "partition_spec"),
    "pyiceberg.table.snapshots.Summary.__init__": None,
    "pyiceberg.table.TableProperties.WRITE_PARTITION_SUMMARY_LIMIT": "write.summary.partition-limit",
    "pyiceberg.table.TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT": None,
    "pyiceberg.partitioning.PartitionSpec.partition_to_path": ("self", "data", "schema"),
    "pyiceberg.partitioning.PartitionSpec.partition_type": ("self", "schema"),
}


def shape_problems() -> list[str]:
    """What of ``SHAPE`` the installed pyiceberg lacks, or has in another shape, each as the patches expect it."""
    problems = []
    for name, expected in SHAPE.items():
        try:
            found = _find(name)
            fits = _fits(found, expected)
        except Exception as exc:  # gone, or nothing inspect can read
            problems.append(f"{name} ({type(exc).__name__}: {exc})")
            continue
        if not fits:
            problems.append(f"{name}: expected {_describe(expected)}, found {_describe(found)}")
    return problems


def _find(name: str) -> Any:
    """The object a dotted name names: its longest importable module, then attributes as defined (a property stays one)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            found: Any = importlib.import_module(module)
            break
        except ModuleNotFoundError as exc:
            if not f"{module}.".startswith(f"{exc.name}."):  # the module is there, and what it imports is not: name that
                raise
    else:
        raise ModuleNotFoundError(f"no module of {name} imports")
    for attribute in parts[end:]:
        found = inspect.getattr_static(found, attribute)
    return found


def _fits(found: Any, expected: Shape) -> bool:
    if expected is None:
        return True
    if isinstance(expected, tuple):
        return tuple(inspect.signature(found).parameters) == expected
    if isinstance(expected, type):
        return isinstance(found, expected)
    if isinstance(expected, set):
        return expected <= set(found)
    return bool(found == expected)


def _describe(shape: Any) -> str:
    if isinstance(shape, tuple):
        return f"parameters ({', '.join(shape)})"
    if isinstance(shape, type):
        return f"a {shape.__name__}"
    if isinstance(shape, set):
        return f"{', '.join(sorted(shape))} among its names"
    if callable(shape):
        try:
            return f"parameters ({', '.join(inspect.signature(shape).parameters)})"
        except (TypeError, ValueError):
            pass
    if isinstance(shape, dict):
        return f"names {', '.join(map(str, shape))}"
    return repr(shape)[:200] if isinstance(shape, str) else f"a {type(shape).__name__}"


def active() -> bool:
    """The patches apply to the installed pyiceberg, and no ``unpatched()`` block is open."""
    return PATCHED and not _suspended


@contextlib.contextmanager
def unpatched() -> Iterator[None]:
    """Every commit of this process takes pyiceberg's own path inside the block, through catalogs patched before it too.

    For the test that commits both ways and for ``make bench-table``. Process-wide (a module's counter, not a context
    variable), so that threads started inside the block take pyiceberg's path too.
    """
    global _suspended
    _suspended += 1
    try:
        yield
    finally:
        _suspended -= 1


def patch_catalog(catalog: Catalog) -> Catalog:
    """``catalog`` with its commit patched (2 and 3 of the module's docstring), or as pyiceberg made it when not ``active()``."""
    if not active():
        return catalog
    return parse_each_metadata_file_once(stage_without_deep_copy(catalog))


def transaction(table: Table, autocommit: bool = False) -> Transaction:
    """A transaction on ``table``: its ``table_metadata`` computed once per staged change when ``active()``, else pyiceberg's own.

    pyiceberg 0.12's ``Transaction.table_metadata`` replays the staged updates and deep-copies the whole metadata,
    snapshot history included, on every read, and one commit reads it about 17 times: measured, the commit of the
    100th batch took 8 to 10 times the 10th's. The patched one caches it on the identity of its two inputs (the table's
    metadata and the tuple of staged updates, both replaced, never mutated, on any change), as apache/iceberg-python
    PR #3302 and its successor #3784 do upstream, and computes it without the deep copy (``updated_metadata``).
    """
    if not active():
        from pyiceberg.table import Transaction

        return Transaction(table, autocommit=autocommit)
    return _transaction_class()(table, autocommit=autocommit)


@functools.cache
def _transaction_class() -> type[Transaction]:
    from pyiceberg.table import Transaction as BaseTransaction

    class CachedTransaction(BaseTransaction):
        _cached: tuple[Any, Any, Any] | None = None

        @property
        def table_metadata(self) -> Any:
            base, updates = self._table.metadata, self._updates
            if not updates:  # nothing staged: the table's own metadata, as pyiceberg before 0.10 returned it
                return base
            cached = self._cached
            if cached is None or cached[0] is not base or cached[1] is not updates:
                cached = self._cached = (base, updates, updated_metadata(base, updates))
            return cached[2]

    return CachedTransaction


def updated_metadata(base: Any, updates: tuple[Any, ...], metadata_location: str | None = None) -> Any:
    """pyiceberg 0.12's ``update_table_metadata`` without its last step, a deep copy of the whole result.

    pyiceberg's metadata models are frozen and every update returns a new model, so the copy protects nothing the
    pipeline does; on a long history it is most of a commit's cost (``make bench-table``). With ``metadata_location``
    (the catalog's commit) the result is what pyiceberg writes: the metadata log extended and the time stamped.
    tests/unit/test_iceberg_transaction.py compares both with pyiceberg's own on every update the pipeline stages.
    """
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext, _update_table_metadata_log
    from pyiceberg.utils.datetime import datetime_to_millis

    context, metadata = _TableMetadataUpdateContext(), base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if metadata_location is not None and context.has_changes():
        metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def stage_without_deep_copy(catalog: Catalog) -> Catalog:
    """``catalog`` with its commit's metadata computed by ``updated_metadata``, for every catalog that computes it
    itself (pyiceberg's ``MetastoreCatalog``: SQL, Glue, Hive, DynamoDB). A REST catalog's server computes it.

    pyiceberg's ``_update_and_stage_table`` ends in ``update_table_metadata``'s deep copy of the whole metadata,
    every snapshot kept included: at the 1,000th batch of a table, half of a commit's time. A table's creation
    (no current table) keeps pyiceberg's own path, which also validates the new metadata; so does every commit
    while not ``active()``.
    """
    from pyiceberg.catalog import MetastoreCatalog
    from pyiceberg.table import StagedTable
    from pyiceberg.table.locations import load_location_provider

    if not isinstance(catalog, MetastoreCatalog):
        return catalog
    pyiceberg_staging = catalog._update_and_stage_table

    def stage(current_table: Table | None, identifier: Any, requirements: tuple[Any, ...], updates: tuple[Any, ...]) -> StagedTable:
        if current_table is None or not active():
            return pyiceberg_staging(current_table, identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = updated_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = catalog._parse_metadata_version(current_table.metadata_location) + 1
        location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
        io = catalog._load_file_io(properties=metadata.properties, location=location)
        return StagedTable(identifier=identifier, metadata=metadata, metadata_location=location, io=io, catalog=catalog)

    setattr(catalog, "_update_and_stage_table", stage)  # noqa: B010 - this instance's, not the class's
    return catalog


# The catalogs that read the current metadata file again inside their commit, and where each finds its location.
_METADATA_LOCATION_OF = {
    "_convert_orm_to_iceberg": lambda row: row.metadata_location,  # SqlCatalog: its iceberg_tables row
    "_convert_glue_to_iceberg": lambda glue_table: (glue_table.get("Parameters") or {}).get("metadata_location"),  # GlueCatalog
}


def parse_each_metadata_file_once(catalog: Catalog) -> Catalog:
    """``catalog`` reusing the metadata it parsed last when its pointer still names the same metadata file.

    A commit loads the table (one parse of the metadata file, every snapshot kept in it), and pyiceberg's SQL and
    Glue catalogs load it again inside ``commit_table`` to check that it is still current: a second parse of the
    same file. Iceberg never rewrites a metadata file (each commit writes a new one, under a new name), so the
    same location holds the same metadata, and the parse already made serves. The catalog's optimistic check is
    untouched: it still reads the pointer (the SQL row, the Glue table's version), and a pointer that moved names
    another file, which is parsed.
    """
    for name, location_of in _METADATA_LOCATION_OF.items():
        convert = getattr(catalog, name, None)
        if convert is not None:
            setattr(catalog, name, _reusing_last(convert, location_of))
    return catalog


def _reusing_last(convert: Any, location_of: Any) -> Any:
    """``convert`` (a catalog's metadata-file-to-Table step) returning the last Table again for the same file."""
    last: dict[str, Table] = {}

    def reuse(*args: Any, **kwargs: Any) -> Table:
        if not active():
            return convert(*args, **kwargs)  # type: ignore[no-any-return]
        (source,) = (*args, *kwargs.values())  # one argument, passed by position (SQL) or by name (Glue)
        location = location_of(source)
        known = last.get(location) if location else None
        if known is not None:
            return copy.copy(known)  # a Table of its own (a commit replaces its metadata), sharing the frozen metadata
        table: Table = convert(*args, **kwargs)
        last.clear()
        last[table.metadata_location] = copy.copy(table)
        return table

    return reuse


class Footer(Protocol):
    """A Parquet file's footer as ``iceberg_table.read_footers`` reads it (``iceberg_table.Footer``)."""

    @property
    def path(self) -> str: ...
    @property
    def metadata(self) -> Any: ...  # pyarrow.parquet.FileMetaData
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def size(self) -> int: ...


class KnownFooter(Protocol):
    """A file whose statistics were summarized from its footer when its attempt was checked (``file_stats.FileStats``,
    as ``iceberg_table.Known`` gives it): its footer is not read again unless the table maps them otherwise."""

    @property
    def path(self) -> str: ...
    @property
    def schema(self) -> pa.Schema: ...
    @property
    def size(self) -> int: ...
    @property
    def stats(self) -> Any: ...  # file_stats.FileStats


def data_files(
    io: FileIO,
    table_metadata: TableMetadata,
    footers: Sequence[Footer | KnownFooter],
    read_footer: Callable[[str], Footer] | None = None,
) -> list[DataFile]:
    """The DataFiles of a commit's files, in ``footers``' order: what pyiceberg 0.12's ``parquet_file_to_data_file``
    makes of each, with its per-file work that depends only on the table done once per call when ``active()``.

    pyiceberg's function reads the file's footer, converts the file's schema to an Iceberg schema to check it against
    the table's, builds the statistics plan and the parquet-path-to-field-id mapping of the table's schema, then the
    file's statistics and its DataFile. Here the footers come read (``iceberg_table.read_footers``: the same reads,
    through the same FileIO, its size ``len`` of the same input file); the plan and the mapping are built once; the
    schema check runs once for each distinct file schema (the same Arrow schema, its metadata included, gets the same
    answer against the same table schema); each file's statistics are its own (``_file_statistics``), and its
    partition, bounds and DataFile are made by pyiceberg's own functions. Not ``active()``: pyiceberg's function for
    each file (which reads each footer again).

    A ``KnownFooter`` (a file summarized at its check: adapters/file_stats.py) gets the same statistics from its summary
    (``_known_statistics``), its columns mapped to the field ids, metrics modes and truncation of ``table_metadata``'s
    schema as they are now; when the schema maps them otherwise than the summary can say exactly (a column it lacks, a
    bound cut shorter than the truncation, a decimal without its raw bounds), the file's footer is read
    (``read_footer``) and taken as any other.
    """
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    if not active():  # every footer read again, a known file's too
        return [parquet_file_to_data_file(io, table_metadata, footer.path) for footer in footers]
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, compute_statistics_plan, parquet_path_to_id_mapping
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema, spec = table_metadata.schema(), table_metadata.spec()
    stats_columns = compute_statistics_plan(schema, table_metadata.properties)
    column_mapping = parquet_path_to_id_mapping(schema)
    columns = {field_id: _Column(collector) for field_id, collector in stats_columns.items()}
    partition_sources = {f.source_id for f in spec.fields}
    checked: list[pa.Schema] = []
    found = []
    for footer in footers:
        if not any(footer.schema.equals(known, check_metadata=True) for known in checked):
            _check_pyarrow_schema_compatible(schema, footer.schema, format_version=table_metadata.format_version)
            checked.append(footer.schema)
        known = getattr(footer, "stats", None)
        statistics = _known_statistics(known, column_mapping, columns, partition_sources) if known is not None else None
        if statistics is None:
            if known is not None:  # the table maps the file otherwise than its summary says exactly: its footer, read now
                if read_footer is None:
                    raise ValueError(f"{footer.path}: its footer is needed, and there is no way to read it here")
                footer = read_footer(footer.path)
            statistics = _file_statistics(cast("Footer", footer).metadata, column_mapping, columns)
        found.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=footer.path,
                file_format=FileFormat.PARQUET,
                partition=statistics.partition(spec, schema),
                file_size_in_bytes=footer.size,
                sort_order_id=None,
                spec_id=table_metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
                **statistics.to_serialized_dict(),
            )
        )
    return found


class _Column:
    """What a column's statistics need of the plan (a StatisticsCollector), worked out once per commit, not per chunk."""

    def __init__(self, collector: Any) -> None:
        from pyiceberg.io.pyarrow import MetricModeTypes
        from pyiceberg.transforms import TruncateTransform
        from pyiceberg.types import BinaryType, DecimalType, StringType

        self.collector = collector
        self.type = collector.iceberg_type
        self.none = collector.mode.type == MetricModeTypes.NONE
        self.counts = collector.mode.type == MetricModeTypes.COUNTS
        self.trunc_length: int | None = collector.mode.length
        self.truncate: Any = TruncateTransform(width=self.trunc_length).transform(self.type) if self.trunc_length is not None else None
        self.string, self.binary = isinstance(self.type, StringType), isinstance(self.type, BinaryType)
        self.scale: int | None = self.type.scale if isinstance(self.type, DecimalType) else None
        self.physical_types: set[str] = set()  # the physical types pyiceberg's StatsAggregator accepted for this column

    def check_physical_type(self, physical_type: str) -> None:
        """Refused as pyiceberg refuses it (a StatsAggregator's constructor, once per physical type)."""
        if physical_type in self.physical_types:
            return
        from pyiceberg.io.pyarrow import StatsAggregator

        try:
            StatsAggregator(self.type, physical_type, self.trunc_length)
        except ValueError as e:
            raise ValueError(f"{e} for column '{self.collector.column_name}'") from e
        self.physical_types.add(physical_type)


class _Bounds:
    """A column's bounds in one file: pyiceberg's StatsAggregator (what DataFileStatistics reads of it: ``current_min``,
    ``current_max``, ``min_as_bytes``, ``max_as_bytes``), its truncation built once per commit instead of once a file."""

    __slots__ = ("column", "current_max", "current_min")

    def __init__(self, column: _Column) -> None:
        self.column = column
        self.current_min: Any = None
        self.current_max: Any = None

    def min_as_bytes(self) -> bytes | None:
        from pyiceberg.conversions import to_bytes

        column, value = self.column, self.current_min
        if value is None:
            return None
        return to_bytes(column.type, value if column.truncate is None else column.truncate(value))

    def update(self, statistics: Any, physical_type: str) -> None:
        """StatsAggregator's ``update_min`` and ``update_max`` with a column chunk's statistics, as pyiceberg reads them
        (a decimal stored as an integer from its unscaled raw bounds)."""
        column = self.column
        if column.scale is not None and physical_type != "FIXED_LEN_BYTE_ARRAY":
            from pyiceberg.utils.decimal import unscaled_to_decimal

            low, high = statistics.min_raw, statistics.max_raw
            if low is not None:
                low = unscaled_to_decimal(low, column.scale)
                self.current_min = low if self.current_min is None else min(low, self.current_min)
            if high is not None:
                high = unscaled_to_decimal(high, column.scale)
                self.current_max = high if self.current_max is None else max(high, self.current_max)
            return
        low, high = statistics.min, statistics.max
        if self.current_min is None:
            self.current_min = low
        elif low is not None:
            self.current_min = min(low, self.current_min)
        if self.current_max is None:
            self.current_max = high
        elif high is not None:
            self.current_max = max(high, self.current_max)

    def max_as_bytes(self) -> bytes | None:
        from pyiceberg.conversions import to_bytes
        from pyiceberg.utils.truncate import truncate_upper_bound_binary_string, truncate_upper_bound_text_string

        column, value = self.column, self.current_max
        if value is None:
            return None
        if column.string:
            if not isinstance(value, str):
                raise ValueError("Expected the current_max to be a string")
            text = truncate_upper_bound_text_string(value, column.trunc_length)
            return to_bytes(column.type, text) if text is not None else None
        if column.binary:
            if not isinstance(value, bytes):
                raise ValueError("Expected the current_max to be bytes")
            binary = truncate_upper_bound_binary_string(value, column.trunc_length)
            return to_bytes(column.type, binary) if binary is not None else None
        if column.trunc_length is not None:
            raise ValueError(f"{column.type} cannot be truncated")
        return to_bytes(column.type, value)


def _file_statistics(metadata: Any, column_mapping: dict[str, int], columns: dict[int, _Column]) -> Any:
    """pyiceberg 0.12's ``data_file_statistics_from_parquet_metadata``, step for step, its per-column-chunk overhead left
    out: it builds two MetricsModes (``Singleton``s, looked up by their arguments) for every column of every row group
    to compare the column's mode with, and a StatsAggregator (which checks the column's physical type) for every
    column of every file. Here each column's mode and type are worked out once a commit (``columns``: the statistics
    plan's columns by field id)."""
    import pyarrow
    from pyiceberg.io.fileformat import DataFileStatistics

    column_sizes: dict[int, int] = {}
    value_counts: dict[int, int] = {}
    split_offsets: list[int] = []
    null_value_counts: dict[int, int] = {}
    bounds: dict[int, _Bounds] = {}
    invalidate_col: set[int] = set()
    for r in range(metadata.num_row_groups):
        row_group = metadata.row_group(r)
        split_offsets.append(_split_offset(row_group.column(0)))
        for pos in range(metadata.num_columns):
            chunk = row_group.column(pos)
            field_id = column_mapping[chunk.path_in_schema]
            column = columns[field_id]
            column_sizes[field_id] = column_sizes.get(field_id, 0) + chunk.total_compressed_size
            if column.none:
                continue
            value_counts[field_id] = value_counts.get(field_id, 0) + chunk.num_values
            if not chunk.is_stats_set:
                invalidate_col.add(field_id)
                _pyiceberg_log.warning("PyArrow statistics missing for column %d when writing file", pos)
                continue
            try:
                statistics = chunk.statistics
                if statistics.has_null_count:
                    null_value_counts[field_id] = null_value_counts.get(field_id, 0) + statistics.null_count
                if column.counts:
                    continue
                physical_type = statistics.physical_type
                found = bounds.get(field_id)
                if found is None:
                    column.check_physical_type(physical_type)
                    found = bounds[field_id] = _Bounds(column)
                found.update(statistics, physical_type)
            except pyarrow.lib.ArrowNotImplementedError as e:
                invalidate_col.add(field_id)
                _pyiceberg_log.warning(e)
    split_offsets.sort()
    for field_id in invalidate_col:
        bounds.pop(field_id, None)
        null_value_counts.pop(field_id, None)
    return DataFileStatistics(
        record_count=metadata.num_rows,
        column_sizes=column_sizes,
        value_counts=value_counts,
        null_value_counts=null_value_counts,
        nan_value_counts={},
        column_aggregates=bounds,  # type: ignore[arg-type]  # read as StatsAggregators are: bounds and *_as_bytes
        split_offsets=split_offsets,
    )


def _known_statistics(known: Any, column_mapping: dict[str, int], columns: dict[int, _Column], partition_sources: set[int]) -> Any:
    """``_file_statistics``' result for a file from its summary (``file_stats.FileStats``: each Parquet column summed and
    bounded over its row groups, as ``_file_statistics`` sums and bounds them, untruncated), mapped to the table's
    field ids and modes now; None when the table maps the file otherwise than the summary can say exactly: a column
    path the table's mapping lacks (``_file_statistics`` would fail on it), a bound that was cut (``file_stats.CUT``)
    where the column keeps more of it (no truncation, a longer one, not a string or binary column, a partition's
    source), or a decimal column stored as an integer without its raw bounds. A summary holds only files whose every
    column chunk had statistics that pyarrow read: ``_file_statistics`` invalidates none of their columns."""
    from pyiceberg.io.fileformat import DataFileStatistics

    column_sizes: dict[int, int] = {}
    value_counts: dict[int, int] = {}
    null_value_counts: dict[int, int] = {}
    bounds: dict[int, _Bounds] = {}
    for stats in known.columns:
        field_id = column_mapping.get(stats.path)
        column = columns.get(field_id) if field_id is not None else None
        if field_id is None or column is None:
            return None
        column_sizes[field_id] = column_sizes.get(field_id, 0) + stats.size
        if column.none:
            continue
        value_counts[field_id] = value_counts.get(field_id, 0) + stats.values
        if stats.nulls is not None:
            null_value_counts[field_id] = null_value_counts.get(field_id, 0) + stats.nulls
        if column.counts:
            continue
        found = _Bounds(column)
        if column.scale is not None and stats.physical != "FIXED_LEN_BYTE_ARRAY":
            if stats.raw is None:
                return None
            from pyiceberg.utils.decimal import unscaled_to_decimal

            low, high = stats.raw
            found.current_min = unscaled_to_decimal(low, column.scale) if low is not None else None
            found.current_max = unscaled_to_decimal(high, column.scale) if high is not None else None
        else:
            # A bound cut to n characters (or bytes) truncates as the whole one only to fewer than n: at n, an upper
            # bound cut to n would be kept as it is, where the whole one's is raised.
            if stats.cut and (
                field_id in partition_sources or not (column.string or column.binary)
                or column.trunc_length is None or column.trunc_length >= stats.cut
            ):  # fmt: skip
                return None
            found.current_min, found.current_max = stats.low, stats.high
        if field_id in bounds:  # two paths of the file for one field: as _file_statistics takes them, chunk by chunk
            return None
        column.check_physical_type(stats.physical)
        bounds[field_id] = found
    return DataFileStatistics(
        record_count=known.rows,
        column_sizes=column_sizes,
        value_counts=value_counts,
        null_value_counts=null_value_counts,
        nan_value_counts={},
        column_aggregates=bounds,  # type: ignore[arg-type]  # read as StatsAggregators are: bounds and *_as_bytes
        split_offsets=list(known.split_offsets),
    )


def _split_offset(first_column: Any) -> int:
    """Where a row group starts: its first column's dictionary page, if it comes first, else its first data page."""
    data_offset, dictionary_offset = first_column.data_page_offset, first_column.dictionary_page_offset
    if first_column.has_dictionary_page and dictionary_offset < data_offset:
        return int(dictionary_offset)
    return int(data_offset)


_pyiceberg_log = logging.getLogger("pyiceberg.io.pyarrow")  # where pyiceberg's own statistics warn


def scan_data_files(table: Table, row_filter: str, snapshot_id: int | None = None) -> list[DataFile]:
    """The data files of ``table``'s current (or given) snapshot that ``row_filter`` may select: ``table.scan(row_filter,
    snapshot_id).plan_files()``'s files, in its order, without the scan tasks' residual filters when ``active()``.

    pyiceberg 0.12's ``plan_files`` reads the manifests through its ``ManifestGroupPlanner`` (pruned by the partition
    summaries, then each entry by its partition and its column metrics), then builds a task for each file with a
    residual, binding the filter again for each file: at 100 files, four fifths of the scan. Here the planner's entries
    are taken as they come; a table with equality deletes is refused as ``plan_files`` refuses it.
    """
    scan = table.scan(row_filter=row_filter, snapshot_id=snapshot_id)
    if not active():
        return [task.file for task in scan.plan_files()]
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.table import ManifestGroupPlanner

    snapshot = scan.snapshot()
    if snapshot is None:
        return []
    planner = ManifestGroupPlanner(
        table_metadata=scan.table_metadata, io=scan.io, row_filter=scan.row_filter, case_sensitive=scan.case_sensitive, options=scan.options
    )
    found = []
    for entries in planner.plan_manifest_entries(snapshot.manifests(scan.io)):
        for entry in entries:
            content = entry.data_file.content
            if content == DataFileContent.DATA:
                found.append(entry.data_file)
            elif content == DataFileContent.EQUALITY_DELETES:
                raise ValueError("PyIceberg does not yet support equality deletes: https://github.com/apache/iceberg/issues/6568")
    return found


def share_manifest_evaluators(producer: Any) -> Any:
    """``producer`` (an OVERWRITE's ``_OverwriteFiles``) building each spec's manifest evaluator once for its partition
    filter, when ``active()``; as pyiceberg made it otherwise.

    pyiceberg 0.12's OVERWRITE binds the replaced files' partitions (one predicate a partition, OR'ed) into a manifest
    evaluator in each of its two passes over the current manifests (``_deleted_entries``, then ``_existing_manifests``):
    for a re-decode's 100 batches, binding 100 predicates twice on each table. The evaluator depends on the spec, the
    schema and the spec's partition filter; it is reused while the filter is the same object (``_manifests`` replaces
    it, never mutates it, when it adds the replaced files' partitions), and built again for a new one. The two passes
    run one after the other (the second starts once the first's results are all read). Within the first, pyiceberg's
    thread pool evaluates the manifests at once with one evaluator, which is not safe to share: here it evaluates one
    manifest at a time (``_one_at_a_time``).
    """
    if not active():
        return producer
    build = producer._build_manifest_evaluator
    built: dict[int, tuple[Any, Any]] = {}  # spec id -> (the partition filter it was built for, the evaluator)
    lock = threading.Lock()

    def evaluator(spec_id: int) -> Any:
        partition_filter = producer.partition_filters[spec_id]
        known = built.get(spec_id)
        if known is None or known[0] is not partition_filter:
            known = built[spec_id] = (partition_filter, _one_at_a_time(build(spec_id), lock))
        return known[1]

    setattr(producer, "_build_manifest_evaluator", evaluator)  # noqa: B010 - this producer's, not the class's
    return producer


def _one_at_a_time(evaluate: Any, lock: threading.Lock) -> Any:
    """A manifest evaluator that evaluates one manifest at a time. pyiceberg 0.12's (``_ManifestEvalVisitor.eval``) keeps
    the manifest's partition summaries on itself while it visits the filter, and ``_deleted_entries`` evaluates the
    manifests in its thread pool with one evaluator: two threads at once can read each other's summaries and skip a
    manifest that holds a file to delete (the commit then fails: "Missing required files to delete")."""

    def evaluate_alone(manifest: Any) -> bool:
        with lock:
            return bool(evaluate(manifest))

    return evaluate_alone


def summarize_partitions_once(producer: Any) -> Any:
    """``producer`` (a snapshot's ``_SnapshotProducer``) computing its snapshot's summary with each file's partition path
    found from the spec's partition type built once per spec and schema, when ``active()``; as pyiceberg made it
    otherwise. The same summary: pyiceberg 0.12's ``_summary``, step for step, with a ``SnapshotSummaryCollector``
    whose ``update_partition_metrics`` takes the partition path as ``PartitionSpec.partition_to_path`` makes it, from
    the partition type that function builds again for every file."""
    if not active():
        return producer

    def summary(snapshot_properties: Any = None) -> Any:
        from pyiceberg.table import TableProperties
        from pyiceberg.table.snapshots import Summary, update_snapshot_summaries

        table_metadata = producer._transaction.table_metadata
        schema, default_spec = table_metadata.schema(), table_metadata.spec()
        limit = table_metadata.properties.get(
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT
        )
        collector = _collector_class()(partition_summary_limit=int(limit))
        for data_file in producer._added_data_files:
            collector.add_file(data_file=data_file, partition_spec=default_spec, schema=schema)
        if len(producer._deleted_data_files) > 0:
            specs = table_metadata.specs()
            for data_file in producer._deleted_data_files:
                collector.remove_file(data_file=data_file, partition_spec=specs[data_file.spec_id], schema=schema)
        parent = producer._parent_snapshot_id
        previous = table_metadata.snapshot_by_id(parent) if parent is not None else None
        return update_snapshot_summaries(
            summary=Summary(operation=producer._operation, **collector.build(), **(snapshot_properties or {})),
            previous_summary=previous.summary if previous is not None else None,
        )

    setattr(producer, "_summary", summary)  # noqa: B010 - this producer's, not the class's
    return producer


@functools.cache
def _collector_class() -> type:
    from urllib.parse import quote_plus

    from pyiceberg.table.snapshots import SnapshotSummaryCollector

    class Collector(SnapshotSummaryCollector):
        """pyiceberg's collector, each (spec, schema)'s partition type built once (``partition_to_path``'s first step)."""

        def __init__(self, partition_summary_limit: int = 0) -> None:
            super().__init__(partition_summary_limit=partition_summary_limit)
            self._types: dict[tuple[int, int], tuple[Any, Any, Any]] = {}  # ids -> the spec, the schema, its type

        def update_partition_metrics(self, partition_spec: Any, file: Any, is_add_file: bool, schema: Any) -> None:
            key = (id(partition_spec), id(schema))
            known = self._types.get(key)
            if known is None or known[0] is not partition_spec or known[1] is not schema:  # kept alive: ids are not reused
                known = self._types[key] = (partition_spec, schema, partition_spec.partition_type(schema))
            field_types, data = known[2].fields, file.partition
            path = "/".join(
                quote_plus(field.name, safe="")
                + "="
                + quote_plus(field.transform.to_human_string(field_types[pos].field_type, value=data[pos]), safe="")
                for pos, field in enumerate(partition_spec.fields)
            )  # PartitionSpec.partition_to_path's, from the partition type built once
            metrics = self.partition_metrics[path]
            if is_add_file:
                metrics.add_file(file)
            else:
                metrics.remove_file(file)

    return Collector


decide()
