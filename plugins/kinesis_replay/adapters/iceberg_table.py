"""The pipeline's Apache Iceberg table, through pyiceberg: load the catalog, create or load the table, commit a batch.

A batch becomes visible in one snapshot. Its first commit adds the files of the attempt that was verified; a
replay of a committed batch (a backfill) replaces the batch's files with the new attempt's in one OVERWRITE
snapshot, so that no snapshot ever holds the batch twice, or none of it once it was committed. Every snapshot's
summary names the pipeline, the batch, the attempt and the Airflow run: a resumed commit finds its own snapshot
there and adds nothing twice. A commit that loses the race for the table (Iceberg's optimistic concurrency: the
catalog refuses a commit whose base metadata is no longer current) reloads the table and tries again.

The table:

- lives at the pipeline's output root: metadata under ``<output>/metadata/``, data under ``<output>/data/``, one
  folder per attempt of a batch (``data/batch_id=<id>/attempt=<attempt>/``), so a replay never overwrites a file
  that a snapshot references;
- has the output's columns plus ``batch_id`` (a column in the files: add_files reads each file's partition from
  its column statistics);
- is partitioned by ``identity(batch_id)``, so a batch's files are replaced without touching other batches';
- is sorted by ``approximate_arrival_timestamp`` (the job sorts each file so), so the column metrics of each
  file (and each row group) bound its arrival times, and a query by arrival time skips the files outside them.

Files superseded by a backfill stay until snapshot expiry removes them: older snapshots still reference them,
and a reader that travels back to one of them must find its files.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from kinesis_replay.adapters.files import arrow_row_schema, s3_access
from kinesis_replay.adapters.files import iceberg_location as iceberg_location  # iceberg_table.iceberg_location: its users
from kinesis_replay.core.config import CATALOG_TYPES, PipelineConfig, TableConfig

# Re-exported: other modules, the tests and the chaos stack name them as iceberg_table.<name>.
from kinesis_replay.core.errors import (
    CatalogConfigError,
    CatalogLoadError,
    CatalogUnreachableError,
    FilesReplacedMeanwhileError,
    KinesisReplayError,
    NoTableError,
    OutputOwnershipError,
    TableCommitError,
    TableCommitRefusedError,
    TableLocationTakenError,
    TableMetadataLostError,
    VerificationError,
)
from kinesis_replay.core.holdings import Holdings, TableState, listed
from kinesis_replay.core.records import PARTITION_COLUMN
from kinesis_replay.core.refusals import RESTORE_PARAM as RESTORE_PARAM  # iceberg_table.RESTORE_PARAM: the DAGs
from kinesis_replay.core.refusals import restore_hint, schema_way_out
from kinesis_replay.core.schema_changes import Change, ColumnType, FieldChange, TableColumn, file_changes

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.types import IcebergType

    from kinesis_replay.adapters.file_stats import FileStats, Known

log = logging.getLogger(__name__)

CATALOG_DIR = "_catalog"  # the embedded catalog's SQLite file, under the output root
ARRIVAL_COLUMN = "approximate_arrival_timestamp"  # the table's sort order
# Snapshot summary properties: who made the snapshot, for which batch and attempt.
PIPELINE_PROPERTY = "kinesis-replay.pipeline"
BATCH_PROPERTY = "kinesis-replay.batch-id"
ATTEMPT_PROPERTY = "kinesis-replay.attempt"
RUN_PROPERTY = "kinesis-replay.run-id"
# Table properties: the pipeline and stream that own the table (two pipelines never share one).
STREAM_PROPERTY = "kinesis-replay.stream"
# A table property of releases before the holdings went into each snapshot's summary (kinesis_replay.core.holdings): read by
# no check now (Iceberg does not roll properties back with snapshots), and no longer written.
COMMITTED_THROUGH_PROPERTY = "kinesis-replay.committed-through"
COMMIT_RETRIES_PROPERTY = "commit.retry.num-retries"
# How large pyiceberg's manifest merging lets a merged manifest grow (Iceberg's default: 8 MiB). Finding a batch's files
# (a backfill, a restore, a replayed commit) reads every entry of each manifest whose batch ids span it: at about 340
# bytes an entry, an 8 MiB manifest is 24,000 batches, 1.3 s of pyiceberg's CPU to read, and the backfill's overwrite
# writes it again. 1 MiB bounds that at about 3,000 batches, and keeps the manifest list of a year of one-minute batches
# (525,600 entries, about 170 MiB) under 300 manifests. make bench-history measures both.
MANIFEST_TARGET_PROPERTY = "commit.manifest.target-size-bytes"
MANIFEST_TARGET_BYTES = 1 << 20
REBUILT_TO_PROPERTY = "kinesis-replay.rebuilt-to"  # a rebuild's switch: the fingerprint of the decoding it switched to
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"  # how a file's columns are found by name (the files carry no field ids)
CREATE_RACE_TRIES, CREATE_RACE_SECONDS = 4, 0.5  # how long a run waits for a concurrent one's creation of the table
COMMIT_ATTEMPTS = 10  # a commit that lost the race for the table is retried against the new metadata this often


def catalog_properties(table: TableConfig, output: str) -> dict[str, str]:
    """pyiceberg's properties of the pipeline's catalog: the configured ones, or the embedded SQL catalog's."""
    if not table.embedded:
        return dict(table.catalog_properties)
    root = output.rstrip("/")
    return {"type": "sql", "uri": f"sqlite:///{embedded_catalog_file(output)}", "warehouse": f"file://{root}/{CATALOG_DIR}"}


def embedded_catalog_file(output: str) -> str:
    """The embedded catalog's SQLite file, under the output root."""
    return f"{output.rstrip('/')}/{CATALOG_DIR}/catalog.db"


def load_catalog(pipeline: PipelineConfig, extra: Mapping[str, str] | None = None) -> Catalog:
    """The pipeline's catalog; ``extra`` properties (credentials, an endpoint) come from the caller's hook.

    A catalog that cannot load as configured is a CatalogConfigError (not retried); one that does not answer, a
    CatalogUnreachableError (retried). The plan loads it before it claims the output or reads the stream.
    """
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

    from kinesis_replay.adapters import pyiceberg_patches

    table = require_table(pipeline)
    configured = {**catalog_properties(table, pipeline.output), **(extra or {})}
    properties = {**_file_io_defaults(configured), **configured}
    if table.embedded:
        os.makedirs(f"{pipeline.output.rstrip('/')}/{CATALOG_DIR}", exist_ok=True)
    for attempt in range(3):
        try:
            return pyiceberg_patches.patch_catalog(pyiceberg_load_catalog(table.catalog, **properties))
        except Exception as exc:
            problem = catalog_problem(pipeline, exc)
            # The SQL catalog creates its own tables on first use; two tasks doing so at once: one of them fails ("table
            # iceberg_tables already exists"), and finds them the next time.
            if problem is not None or not table.embedded or attempt == 2:
                raise problem or CatalogLoadError(
                    f"pipeline {pipeline.name!r}: cannot load Iceberg catalog {table.catalog!r} ({table.describe()}): "
                    f"{type(exc).__name__}: {exc}. Not retried: no known cause explains it; check table.catalog_properties of "
                    f"pipeline {pipeline.name!r} in the pipelines config and the catalog's own log, then trigger a run again. "
                    "Nothing was written or read."
                ) from exc
            time.sleep(0.1)
    raise AssertionError("unreachable")  # pragma: no cover


_S3_KEYS = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")


def _file_io_defaults(configured: Mapping[str, str]) -> dict[str, str]:
    """The S3 access of the caller (``files.s3_access()``: in a DAG task, the pipeline's connection) as FileIO properties,
    for what the catalog's own properties leave unsaid: credentials all or none, the region and the endpoint each."""
    found = s3_access().iceberg_properties()
    if any(key in configured for key in _S3_KEYS):
        found = {k: v for k, v in found.items() if k not in _S3_KEYS}  # never one key's secret with another's token
    return {k: v for k, v in found.items() if k not in configured}


def catalog_problem(pipeline: PipelineConfig, exc: Exception) -> KinesisReplayError | None:
    """What a failure to load the pipeline's catalog says: a config mistake, an unreachable endpoint, or None (unknown)."""
    from botocore.exceptions import BotoCoreError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
    from pyiceberg.exceptions import (
        ForbiddenError,
        NotInstalledError,
        OAuthError,
        ServerError,
        ServiceUnavailableError,
        TooManyRequestsError,
        UnauthorizedError,
    )

    table = require_table(pipeline)
    where = f"pipeline {pipeline.name!r}: cannot load Iceberg catalog {table.catalog!r} ({table.describe()})"
    key = f"table.catalog_properties of pipeline {pipeline.name!r} in the pipelines config"
    kind = table.catalog_properties.get("type")
    if isinstance(exc, ValueError) and kind is not None and f"{kind!r} is not a valid CatalogType" in str(exc):
        return CatalogConfigError(
            f"{where}: catalog_properties.type is {kind!r}, which pyiceberg does not know. Set table.catalog_properties.type "
            f"of pipeline {pipeline.name!r} in the pipelines config to one of {', '.join(CATALOG_TYPES)}. Nothing was written or read."
        )
    if isinstance(exc, (ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError, ConnectionError, TimeoutError)) or (
        isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError)  # requests' errors are OSErrors too
    ):
        return CatalogUnreachableError(
            f"{where}: the catalog did not answer ({type(exc).__name__}: {exc}). Nothing was written or read; the task is "
            f"retried. If it never answers, check its uri (and its network path from the workers) in {key}."
        )
    if isinstance(exc, (ValueError, TypeError, KeyError, ImportError, NotInstalledError, BotoCoreError)):
        return CatalogConfigError(f"{where}: {type(exc).__name__}: {exc}. Fix {key}. Nothing was written or read.")
    if isinstance(exc, (ForbiddenError, UnauthorizedError, OAuthError)):
        return CatalogConfigError(
            f"{where}: the catalog refused the caller ({type(exc).__name__}: {exc}). Check the credentials in {key} "
            "(or the worker's), and that they may use the catalog. Nothing was written or read."
        )
    if isinstance(exc, (ServerError, ServiceUnavailableError, TooManyRequestsError)):
        return CatalogUnreachableError(
            f"{where}: the catalog answered with a fault of its own ({type(exc).__name__}: {exc}). Nothing was written or "
            "read; the task is retried. If it persists, see the catalog's own log."
        )
    return None


def require_table(pipeline: PipelineConfig) -> TableConfig:
    if pipeline.table is None:
        raise NoTableError(
            f"pipeline {pipeline.name!r} has output_format directory, so it has no Iceberg table: restoring the table "
            f"({RESTORE_PARAM}) and table maintenance are for pipelines with output_format iceberg. To replay committed "
            f'batches into its directory output, trigger {pipeline.backfill_dag_id} with {{"batches": {{"batch_ids": [3, 7]}}}}'
        )
    return pipeline.table


def load_table(pipeline: PipelineConfig, catalog: Catalog | None = None) -> Table | None:
    """The pipeline's table, or None before its first commit; refused when another pipeline owns it."""
    from pyiceberg.exceptions import NoSuchTableError

    table_config = require_table(pipeline)
    catalog = catalog or load_catalog(pipeline)
    try:
        table = catalog.load_table(table_config.identifier)
    except NoSuchTableError:
        return None
    except FileNotFoundError as exc:  # the catalog names a metadata file that is not there: the output was moved or deleted
        raise TableMetadataLostError(
            f"pipeline {pipeline.name!r}: {table_config.describe()} names a metadata file that cannot be read ({exc}). If "
            f"the output was moved, point output back to where the table is: a table is not moved by moving its files (its "
            f"catalog and metadata hold absolute paths). If its metadata was deleted, {restore_hint(pipeline)} Nothing was written."
        ) from exc
    check_table_owner(pipeline, table)
    return table


def table_state(table: Table | None) -> TableState:
    """What the table's current snapshot holds, by its own summary (kinesis_replay.core.holdings), and Iceberg's row count.

    The holdings are the newest commit's in the current snapshot's ancestry: snapshots another writer made on top of it
    are named in ``foreign``, and show in Iceberg's ``total-records`` (or its delete files) if they changed the rows.
    When no snapshot of the ancestry records holdings (a table written by a release before they were recorded, or one
    whose recording snapshots were expired under another writer's), they are read from the current snapshot's
    partitions and the batches its ancestry names, and ``partitions`` keeps each batch's rows: the guard compares
    them with the ledger's, batch by batch (holdings.compare), before the next commit records them again.
    """
    if table is None:
        return TableState(Holdings(), 0, exists=False)
    current = table.current_snapshot()
    if current is None:
        return TableState(Holdings(), 0)
    summary = current.summary.additional_properties if current.summary is not None else {}
    # Iceberg carries a total forward only from a parent that has one: absent means unknown, never 0.
    total = int(summary["total-records"]) if "total-records" in summary else None
    deletes = sum(int(summary.get(key, "0")) for key in ("total-position-deletes", "total-equality-deletes"))
    foreign: list[str] = []
    named: set[int] = set()
    for snapshot in ancestry(table):
        properties = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        try:
            held = Holdings.from_summary(properties)
        except ValueError as exc:
            raise VerificationError(f"table {'.'.join(table.name())}, snapshot {snapshot.snapshot_id}: {exc}") from None
        if held is not None:
            return TableState(held, total, tuple(foreign), deletes=deletes)
        if properties.get(BATCH_PROPERTY) is not None:
            named.add(int(properties[BATCH_PROPERTY]))
        elif not named:
            operation = snapshot.summary.operation.value if snapshot.summary is not None else "unknown"
            foreign.append(f"{snapshot.snapshot_id} ({operation})")
    counts = partition_counts(table)
    rows = sum(counts.values())
    held = Holdings.of(set(counts) | named, rows)
    return TableState(held, total, tuple(foreign), deletes=deletes, derived=True, partitions=counts)


def ancestry(table: Table) -> Iterator[Snapshot]:
    """The current snapshot and its ancestors, newest first (pyiceberg's ancestors_of looks each parent up by a scan)."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        yield snapshot
        snapshot = by_id.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None


def partition_counts(table: Table) -> dict[int, int]:
    """Rows per batch in the current snapshot, from its manifests' partition summaries (no data file is read)."""
    if table.current_snapshot() is None:
        return {}
    counts: dict[int, int] = {}
    for row in table.inspect.partitions().select(["partition", "record_count"]).to_pylist():
        batch_id = row["partition"][PARTITION_COLUMN]
        if batch_id is not None:
            counts[int(batch_id)] = counts.get(int(batch_id), 0) + int(row["record_count"])
    return counts


def existing_table(pipeline: PipelineConfig) -> Table | None:
    """The pipeline's table, or None; never creates anything: an embedded catalog whose file is gone holds no table,
    and loading it would create an empty one (a write, however small)."""
    config = require_table(pipeline)
    if config.embedded and not os.path.exists(embedded_catalog_file(pipeline.output)):
        return None
    return load_table(pipeline)


CATALOG_TABLES_LOOKED_AT = 100  # a catalog's tables loaded to find the one at a location: a Glue catalog may hold thousands
_METADATA_VERSION = re.compile(r"^(?:v)?(\d+)[-.]")  # 00042-<uuid>.metadata.json (pyiceberg, Java), v42.metadata.json (Hadoop)


@dataclass(frozen=True)
class LocationTables:
    """What a table's location holds besides the pipeline's table: Iceberg metadata files, and who they are of.

    ``newest`` is the metadata file of the highest version found, and ``pipeline``, ``stream`` and ``table_uuid`` what
    it says; ``in_catalog`` the identifiers of the pipeline's catalog's tables at that location (the pipeline's own
    identifier left out), as far as ``complete`` says the catalog was looked through.
    """

    location: str
    metadata_files: int
    newest: str
    table_uuid: str | None
    pipeline: str | None
    stream: str | None
    in_catalog: tuple[str, ...] = ()
    complete: bool = True
    readable: bool = True  # False: the newest metadata file could not be read (another run may be writing it)

    def own(self, pipeline: PipelineConfig) -> bool:
        """The metadata is of this pipeline's table (its properties name it and its stream) and no other name in the
        catalog holds it: the pipeline's table, dropped from the catalog (or its newest metadata file lost)."""
        return (self.pipeline, self.stream) == (pipeline.name, pipeline.stream) and not self.in_catalog

    def describe(self, pipeline: PipelineConfig) -> str:
        config = require_table(pipeline)
        whose = f"of pipeline {self.pipeline!r} (stream {self.stream})" if self.pipeline else "of a table kinesis-replay did not make"
        text = (
            f"its location {self.location} holds {self.metadata_files} metadata files of an Iceberg table {whose}, the newest "
            f"{self.newest} (table-uuid {self.table_uuid})"
        )
        if self.in_catalog:
            names = ", ".join(self.in_catalog)
            text += (
                f", and catalog {config.catalog!r} holds table {names} at that location: table.name of pipeline "
                f"{pipeline.name!r} ({config.name!r}) is probably mistyped. Set table.name (and table.namespace) of pipeline "
                f"{pipeline.name!r} in the pipelines config to name {self.in_catalog[0]}"
            )
        elif self.own(pipeline):
            text += f", which catalog {config.catalog!r} no longer names: the table was dropped from it, or its newest metadata file lost"
        elif not self.readable:
            text += ", which could not be read (see the warning above)"
        elif not self.complete:
            text += f" (catalog {config.catalog!r} was looked through for it only as far as {CATALOG_TABLES_LOOKED_AT} tables)"
        return text


def location_tables(pipeline: PipelineConfig, catalog: Catalog | None = None) -> LocationTables | None:
    """The metadata files under the pipeline's table location (``metadata/*.metadata.json``, listed through the catalog's
    FileIO), and the catalog's tables there under another name; None when it holds none.

    Costs one listing of ``metadata/`` (a request a thousand files on S3) and one read of the newest file; only when there
    are some, the catalog's tables are looked through, the config's namespace first, up to CATALOG_TABLES_LOOKED_AT.
    Called before a table is created (a pipeline's first commit, a restore) and when a refusal says why a table is missing.
    """
    from pyarrow import fs as pafs
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import PyArrowFileIO

    config = require_table(pipeline)
    if catalog is None and not (config.embedded and not os.path.exists(embedded_catalog_file(pipeline.output))):
        catalog = load_catalog(pipeline)  # an embedded catalog whose file is gone is not made again by looking
    location = iceberg_location(pipeline.output).rstrip("/")
    folder = f"{location}/metadata"
    io = load_file_io(dict(catalog.properties) if catalog is not None else {}, folder)
    if not isinstance(io, PyArrowFileIO):
        io = PyArrowFileIO(io.properties)
    scheme, netloc, path = PyArrowFileIO.parse_location(folder, io.properties)
    infos = io.fs_by_scheme(scheme, netloc).get_file_info(pafs.FileSelector(path, allow_not_found=True))
    found = [i for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(".metadata.json")]
    if not found:
        return None

    def version(info: Any) -> tuple[int, float]:
        number = _METADATA_VERSION.match(info.base_name)
        return (int(number.group(1)) if number else -1, info.mtime.timestamp() if info.mtime else 0.0)

    newest = f"{folder}/{max(found, key=version).base_name}"
    table_uuid = owner = stream = None
    readable = True
    try:
        with io.new_input(newest).open() as stream_in:
            raw = stream_in.read()
        if newest.endswith(".gz.metadata.json"):
            import gzip

            raw = gzip.decompress(raw)
        metadata = json.loads(raw)
        table_uuid, properties = metadata.get("table-uuid"), metadata.get("properties") or {}
        owner, stream = properties.get(PIPELINE_PROPERTY), properties.get(STREAM_PROPERTY)
    except (OSError, ValueError) as exc:
        log.warning("pipeline %s: could not read metadata file %s: %s", pipeline.name, newest, exc)
        readable = False
    in_catalog, complete = _catalog_tables_at(catalog, config, location) if catalog is not None else ((), True)
    return LocationTables(location, len(found), newest, table_uuid, owner, stream, in_catalog, complete, readable)


def _catalog_tables_at(catalog: Catalog, config: TableConfig, location: str) -> tuple[tuple[str, ...], bool]:
    """The catalog's tables (other than the config's) whose location is ``location``, and whether every table was looked at."""
    namespaces: list[Any] = [(config.namespace,)]
    try:
        namespaces += [ns for ns in catalog.list_namespaces() if tuple(ns) != (config.namespace,)]
    except Exception as exc:  # a catalog that lists no namespaces (permissions): the config's namespace is looked through
        log.warning("catalog %s: could not list its namespaces (%s)", config.catalog, exc)
    at: list[str] = []
    looked = 0
    for namespace in namespaces:
        try:
            identifiers = catalog.list_tables(namespace)
        except Exception:  # NoSuchNamespaceError, or the catalog's own
            continue
        for identifier in identifiers:
            name = ".".join(identifier)
            if name == config.identifier:
                continue
            if looked == CATALOG_TABLES_LOOKED_AT:
                return tuple(at), False
            looked += 1
            try:
                other = catalog.load_table(identifier)
            except Exception:  # a table whose metadata cannot be read is at no location we can tell
                continue
            if other.location().rstrip("/") == location:
                at.append(name)
    return tuple(at), True


def check_table_owner(pipeline: PipelineConfig, table: Table) -> None:
    """The table names this pipeline and stream, and lives at its output root."""
    props = table.properties
    owner = (props.get(PIPELINE_PROPERTY), props.get(STREAM_PROPERTY))
    where = f"pipeline {pipeline.name!r}: {require_table(pipeline).describe()}"
    if owner != (pipeline.name, pipeline.stream):
        raise OutputOwnershipError(
            f"{where} belongs to pipeline {owner[0]!r} (stream {owner[1]}); give each pipeline a table of its own. Nothing was written."
        )
    if table.location().rstrip("/") != iceberg_location(pipeline.output).rstrip("/"):
        raise OutputOwnershipError(
            f"{where} is at {table.location()}, and the pipeline's output is {pipeline.output}. Iceberg's metadata holds "
            "absolute paths, so a table is not moved by moving its files: point output back to the table's location. "
            "Nothing was written."
        )


def table_schema(pipeline: PipelineConfig, file_schema: pa.Schema) -> pa.Schema:
    """The table's columns: the files' own, as Spark wrote them (batch_id among them)."""
    if PARTITION_COLUMN not in file_schema.names:
        raise VerificationError(
            f"pipeline {pipeline.name!r}: the batch's files have no {PARTITION_COLUMN} column, which "
            f"{require_table(pipeline).describe()} is partitioned by (files written by a replay job of another release?)"
        )
    return file_schema


def create_or_load_table(pipeline: PipelineConfig, file_schema: pa.Schema, catalog: Catalog | None = None) -> Table:
    """The pipeline's table, created on first use from the first batch's file schema.

    Partitioned by identity(batch_id), sorted by arrival time; its properties name the pipeline and stream.
    """
    catalog = catalog or load_catalog(pipeline)
    found = load_table(pipeline, catalog)
    if found is not None:
        return found
    config = require_table(pipeline)
    taken = location_tables(pipeline, catalog)
    for _ in range(CREATE_RACE_TRIES):
        # The pipeline's own metadata that no catalog entry names yet may be another run's creation of the table, between
        # its metadata file and its catalog entry (two runs of one commit, at once): looked for again before refusing. So is
        # a newest metadata file that cannot be read: the other run may be writing it (seen empty under load).
        if taken is None or not (taken.own(pipeline) or not taken.readable):
            break
        time.sleep(CREATE_RACE_SECONDS)
        found = load_table(pipeline, catalog)
        if found is not None:
            return found
        taken = location_tables(pipeline, catalog)
    if taken is not None:  # one location, one table: a second one's maintenance would delete the first's files as orphans
        raise TableLocationTakenError(
            f"pipeline {pipeline.name!r}: {config.describe()} does not exist, and it is not created: {taken.describe(pipeline)}. "
            "Two tables at one location share its metadata/ and data/ folders, and each one's orphan-file removal deletes the "
            "other's files. Nothing was written."
        )
    parts = new_table_parts(pipeline, table_schema(pipeline, file_schema))
    create_namespace(catalog, config.namespace)
    table = create_table(catalog, config.identifier, iceberg_location(pipeline.output), parts)
    check_table_owner(pipeline, table)
    log.info("pipeline %s: created %s at %s", pipeline.name, config.describe(), table.location())
    return table


def new_table_parts(pipeline: PipelineConfig, file_schema: pa.Schema) -> tuple[Any, Any, Any, dict[str, str]]:
    """A new table's schema, partition spec, sort order and properties, from its first files' columns: partitioned by
    identity(batch_id), sorted by arrival time; its properties name the pipeline and stream."""
    from pyiceberg.catalog import Catalog as BaseCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
    from pyiceberg.transforms import IdentityTransform

    # Spark's files carry no field ids: number the columns here, so the partition and sort fields name the right ones.
    schema = assign_fresh_schema_ids(BaseCatalog._convert_schema_if_needed(file_schema))
    batch_field = schema.find_field(PARTITION_COLUMN)
    spec = PartitionSpec(PartitionField(batch_field.field_id, 1000, IdentityTransform(), PARTITION_COLUMN))
    sort_order = SortOrder()
    if ARRIVAL_COLUMN in file_schema.names:
        arrival = schema.find_field(ARRIVAL_COLUMN)
        sort_order = SortOrder(SortField(arrival.field_id, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_LAST))
    properties = {
        PIPELINE_PROPERTY: pipeline.name,
        STREAM_PROPERTY: pipeline.stream,
        "schema.name-mapping.default": schema.name_mapping.model_dump_json(),  # Spark's files carry no field ids
        "write.parquet.compression-codec": "snappy",  # what Spark writes
        # Each append adds a manifest, and the current snapshot's manifest list names every one: without merging, a
        # commit (and a scan's planning) reads and writes one entry per batch ever committed, whatever expiry keeps.
        # Merged (Iceberg's default threshold: 100 small manifests into one), the list stays under 100 entries.
        "commit.manifest-merge.enabled": "true",
        MANIFEST_TARGET_PROPERTY: str(MANIFEST_TARGET_BYTES),  # a merged manifest is read whole to find one batch's files
        # pyiceberg would retry a lost race by re-applying the append to the new metadata, adding the batch a second
        # time if the winner was another run of the same commit. commit_batch retries itself instead: it reloads the
        # table, looks for its own snapshot, and recomputes the batch's files to replace.
        COMMIT_RETRIES_PROPERTY: "0",
    }
    return schema, spec, sort_order, properties


def create_table(catalog: Catalog, identifier: str, location: str, parts: tuple[Any, Any, Any, dict[str, str]]) -> Table:
    """The table created with ``new_table_parts``'s parts, or the one another commit created first."""
    schema, spec, sort_order, properties = parts
    try:
        return catalog.create_table(
            identifier, schema=schema, location=location, partition_spec=spec, sort_order=sort_order, properties=properties
        )
    except Exception:  # TableAlreadyExistsError, or the catalog's own error when another commit created it first
        if not catalog.table_exists(identifier):
            raise
        return catalog.load_table(identifier)


def write_snapshot(tx: Transaction, properties: Mapping[str, str], old: Iterable[DataFile], added: Iterable[DataFile]) -> None:
    """One snapshot in ``tx``: ``old`` out and ``added`` in (an OVERWRITE), or, with nothing out, ``added`` appended, merging
    manifests as the table's properties say."""
    from kinesis_replay.adapters import pyiceberg_patches

    old = list(old)
    update = tx.update_snapshot(snapshot_properties=dict(properties))
    if old:
        overwriting = pyiceberg_patches.summarize_partitions_once(pyiceberg_patches.share_manifest_evaluators(update.overwrite()))
        with overwriting as overwrite:
            for data_file in old:
                overwrite.delete_data_file(data_file)
            for data_file in added:
                overwrite.append_data_file(data_file)
    else:
        with pyiceberg_patches.summarize_partitions_once(update.merge_append()) as append:
            for data_file in added:
                append.append_data_file(data_file)


def new_snapshot_id(table: Table, where: str) -> int:
    """The snapshot a commit just made."""
    snapshot = table.current_snapshot()
    if snapshot is None:  # pragma: no cover - a commit always makes a snapshot
        raise TableCommitError(f"{where}: the commit made no snapshot")
    return snapshot.snapshot_id


def create_namespace(catalog: Catalog, namespace: str) -> None:
    try:
        catalog.create_namespace(namespace)
    except Exception:  # NamespaceAlreadyExistsError, or the catalog's own error when another commit created it first
        if not catalog.namespace_exists(namespace):
            raise


def snapshot_properties(pipeline_name: str, batch_id: int, attempt: str, run_id: str) -> dict[str, str]:
    return {PIPELINE_PROPERTY: pipeline_name, BATCH_PROPERTY: str(batch_id), ATTEMPT_PROPERTY: attempt, RUN_PROPERTY: run_id}


def find_batch_snapshot(table: Table, pipeline_name: str, batch_id: int, attempt: str, held: Holdings | None = None) -> Snapshot | None:
    """The snapshot that committed this attempt of the batch, if the current snapshot or one of its ancestors is it.

    Only the ancestry counts: a snapshot that a rollback left behind holds nothing a reader sees. A batch the
    current snapshot's ``held`` batches do not include has no such snapshot: that is a regular batch's first
    commit, the common case, answered without reading the history, which grows by a snapshot a batch until expiry
    cuts it. A resumed commit, a lost race or a backfill (a batch held already) walks the ancestry, newest first.
    """
    if held is not None and batch_id not in held:
        return None
    wanted = (pipeline_name, str(batch_id), attempt)
    for snapshot in ancestry(table):
        if snapshot.summary is None:
            continue
        properties = snapshot.summary.additional_properties
        if (properties.get(PIPELINE_PROPERTY), properties.get(BATCH_PROPERTY), properties.get(ATTEMPT_PROPERTY)) == wanted:
            return snapshot
    return None


def find_snapshot(table: Table, key: Mapping[str, str]) -> int | None:
    """The snapshot of the current ancestry whose summary holds every property of ``key``: a commit made already."""
    for snapshot in ancestry(table):
        properties = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if all(properties.get(k) == v for k, v in key.items()):
            return snapshot.snapshot_id
    return None


def snapshot_holdings(pipeline: PipelineConfig, snapshot_id: int) -> Holdings | None:
    """What the table's snapshot ``snapshot_id`` records it holds; None when the table or the snapshot is gone (expired),
    or it records nothing."""
    table = load_table(pipeline)
    snapshot = table.snapshot_by_id(snapshot_id) if table is not None else None
    if snapshot is None or snapshot.summary is None:
        return None
    return Holdings.from_summary(snapshot.summary.additional_properties)


def replace_batches(
    pipeline: PipelineConfig,
    replacements: Mapping[int, Sequence[str]],
    records: Mapping[int, tuple[int, int]],
    properties: Mapping[str, str],
    key: Mapping[str, str],
    check: TableCheck,
    redecodes: Callable[[int], int] = lambda held: held + 1,
    replacing: Mapping[int, str] | None = None,
    known: Known | None = None,
) -> int:
    """Make each batch's replacement files its rows in the table, all in one OVERWRITE snapshot: a reader sees every
    batch's earlier files or every batch's new ones, never a mix. ``records`` gives each batch's (verified records now,
    verified records of the replacement), so the snapshot's holdings record the new count; ``check`` runs before each
    try, as commit_snapshot's. Idempotent: a snapshot of the ancestry whose summary holds ``key`` is returned as it is.
    ``redecodes`` gives the holdings' count of re-decodes made visible from the table's: one more for a re-decode, the
    ledger's for a restore, the same for a compaction. With ``replacing`` (a compaction's: each batch's attempt folder),
    each try first finds every file it replaces in that batch's folder, else refuses, committing nothing
    (FilesReplacedMeanwhileError, naming the batches another commit replaced since). ``known``: the statistics of the
    files their staged attempts' checks summarized (file_stats.known), taken in place of their footers (read_footers).
    """
    paths = {b: sorted(iceberg_location(f) for f in files) for b, files in replacements.items()}
    where = f"pipeline {pipeline.name!r}, batches {listed(sorted(paths))}, {require_table(pipeline).describe()}"
    renamed_from, expected = pipeline.payload.renamed_from, {b: new for b, (_, new) in records.items()}

    def once(table: Table, summary: dict[str, str]) -> int:
        old = [f for files in selection_data_files(table, paths).values() for f in files]
        if replacing is not None:
            _check_replacing(old, replacing, where)
        return _replace_once(table, paths, summary, where, renamed_from, expected, old, known=known)

    return _replace_retrying(pipeline, where, records, properties, key, check, once, redecodes)


def _check_replacing(old: Sequence[DataFile], replacing: Mapping[int, str], where: str) -> None:
    """Every file a compaction replaces is in its batch's compacted attempt's folder (``replacing``: batch, folder)."""
    moved = sorted({int(f.partition[0]) for f in old if not f.file_path.startswith(iceberg_location(replacing[int(f.partition[0])]) + "/")})
    if moved:
        raise FilesReplacedMeanwhileError(
            f"{where}: the files of batches {listed(moved)} are no longer the attempt the compaction read (a backfill, a re-decode "
            "or a restore replaced them since); nothing was committed",
            tuple(moved),
        )


def switch_table(
    pipeline: PipelineConfig,
    replacements: Mapping[int, Sequence[str]],
    records: Mapping[int, tuple[int, int]],
    properties: Mapping[str, str],
    key: Mapping[str, str],
    check: TableCheck,
    replaced: Sequence[tuple[str, str]] = (),
    rebuilt_to: str = "",
) -> int:
    """A rebuild's switch: every batch of the table replaced by its rebuilt files, and each of the ``replaced`` columns
    (the table's name, the new name) dropped and added again under the type the rebuilt files hold, in one OVERWRITE
    snapshot. The new column has a new field id, which the table's name mapping now gives its name: the files before
    the switch, held by older snapshots only, read it as null (their values stay theirs, under the dropped column's id).
    Refused, committing nothing, when the table holds a batch with no rebuilt files (one committed since the rebuild
    began: rebuild it, then switch). ``pipeline`` is the pipeline as it decodes after the switch (config.rebuilt);
    ``rebuilt_to``: its decoding's fingerprint, set as the table property REBUILT_TO_PROPERTY in the same commit (every
    task reads it to decode with payload.next_schema from then on). Otherwise as replace_batches, whose retries and
    idempotence it shares."""
    paths = {b: sorted(iceberg_location(f) for f in files) for b, files in replacements.items()}
    where = f"pipeline {pipeline.name!r}, the rebuild of {require_table(pipeline).describe()}"
    renamed_from, expected = pipeline.payload.renamed_from, {b: new for b, (_, new) in records.items()}
    return _replace_retrying(
        pipeline, where, records, properties, key, check,
        lambda t, summary: _switch_once(t, paths, summary, where, renamed_from, expected, replaced, rebuilt_to),
    )  # fmt: skip


def _replace_retrying(
    pipeline: PipelineConfig,
    where: str,
    records: Mapping[int, tuple[int, int]],
    properties: Mapping[str, str],
    key: Mapping[str, str],
    check: TableCheck,
    once: Callable[[Table, dict[str, str]], int],
    redecodes: Callable[[int], int] = lambda held: held + 1,
) -> int:
    """A replacing commit's tries: its snapshot found by ``key`` (made already), else ``check``, then ``once`` with the
    summary of the holdings and the new record counts, again against the table's new metadata after a lost race."""
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    catalog = load_catalog(pipeline)
    table = load_table(pipeline, catalog)
    if table is None:
        raise TableCommitRefusedError(
            f"{where}: the table does not exist, and neither a re-decode nor a rebuild creates it: {restore_hint(pipeline)}"
        )
    delta = sum(new - old for old, new in records.values())
    for attempt_no in range(1, COMMIT_ATTEMPTS + 1):
        found = find_snapshot(table, key)
        if found is not None:
            log.info("%s: committed already, in snapshot %d", where, found)
            return found
        state = table_state(table)
        held = check(state) or state.holdings
        try:
            count = redecodes(held.redecodes)
            return once(table, {**properties, **Holdings(held.ranges, held.records + delta, count).to_summary()})
        except (CommitFailedException, CommitStateUnknownException) as exc:
            log.warning("%s: the table changed under the commit (%s); retrying against its new metadata (%d)", where, exc, attempt_no)
            time.sleep(min(0.05 * 2**attempt_no, 2.0))
            table = catalog.load_table(require_table(pipeline).identifier)
    raise TableCommitError(f"{where}: {COMMIT_ATTEMPTS} commits in a row lost the race for the table; nothing was committed")


def _switch_once(
    table: Table,
    paths: Mapping[int, list[str]],
    properties: dict[str, str],
    where: str,
    renamed_from: Mapping[str, str],
    expected: Mapping[int, int],
    replaced: Sequence[tuple[str, str]],
    rebuilt_to: str,
) -> int:
    """One try of a rebuild's switch: every file of the table out, each batch's rebuilt ones in, the columns replaced."""
    old = [task.file for task in table.scan().plan_files()] if table.current_snapshot() is not None else []
    uncovered = sorted({int(f.partition[0]) for f in old} - set(paths))
    if uncovered:
        raise TableCommitRefusedError(
            f"{where}: the table holds batches {listed(uncovered)} that have no rebuilt files (committed since the rebuild "
            "began, or replayed by a backfill since their rebuild): trigger the rebuild again, which rebuilds only those, "
            "and it switches once every batch is rebuilt. Nothing was switched"
        )
    return _replace_once(table, paths, properties, where, renamed_from, expected, old, replaced, {REBUILT_TO_PROPERTY: rebuilt_to})


def _replace_once(
    table: Table,
    paths: Mapping[int, list[str]],
    properties: dict[str, str],
    where: str,
    renamed_from: Mapping[str, str],
    expected: Mapping[int, int],
    old: Sequence[DataFile] | None = None,
    replaced: Sequence[tuple[str, str]] = (),
    table_properties: Mapping[str, str] | None = None,
    known: Known | None = None,
) -> int:
    """One try: ``old`` (by default the named batches' files) out and ``paths`` in, in one snapshot; each of the
    ``replaced`` columns (a rebuild's: the table's name, the new name) dropped and added again under the files' type.
    The files added must hold each batch's ``expected`` rows (its verified attempt's, by the ledger: check_rows)."""
    old = old if old is not None else [f for files in selection_data_files(table, paths).values() for f in files]
    new = [p for ps in paths.values() for p in ps]
    if not {f.file_path for f in old}.isdisjoint(new):
        raise TableCommitRefusedError(f"{where}: the table already holds some of the files, in no snapshot of their own")
    try:
        footers = read_footers(table.io, new, known)
        with transaction(table) as tx:
            if table_properties:  # a rebuild's: the decoding it switches to, in the same commit
                tx.set_properties(dict(table_properties))
            if replaced:
                _replace_columns(tx, footers[0].schema if footers else None, replaced)
            if footers:
                _evolve_schema(tx, footers[0], where, renamed_from)  # a widening or an added field, as a commit makes it
            added = data_files(table.io, tx.table_metadata, footers)
            wrong = [f.file_path for f in added if f.partition[0] not in paths]
            if wrong:
                raise TableCommitRefusedError(f"{where}: files {wrong} hold rows of a batch_id not replaced")
            check_rows(added, expected, where, "the replacement files")
            write_snapshot(tx, properties, old, added)
    except ValueError as exc:  # pyiceberg: a file's schema the table does not have
        raise TableCommitRefusedError(f"{where}: the replacement files do not fit the table: {exc}") from exc
    snapshot_id = new_snapshot_id(table, where)
    log.info("%s: replaced %d files with %d in snapshot %d%s", where, len(old), len(added), snapshot_id,
             f", columns {list(replaced)} replaced" if replaced else "")  # fmt: skip
    return snapshot_id


def check_rows(added: Iterable[DataFile], expected: Mapping[int, int], where: str, what: str) -> None:
    """The DataFiles a commit adds hold, batch by batch, the rows ``expected`` says (the ledger's count of each batch's
    verified attempt), read from the files' own footers; refused, naming each batch that differs, otherwise: a file
    added to (or taken from) an attempt's folder after its check would otherwise become the batch's rows unchecked."""
    found = dict.fromkeys(expected, 0)
    for data_file in added:
        found[data_file.partition[0]] = found.get(data_file.partition[0], 0) + data_file.record_count
    wrong = [
        f"batch {b}: {found[b]} rows in its files, {expected.get(b, 0)} verified" for b in sorted(found) if found[b] != expected.get(b, 0)
    ]
    if wrong:
        raise TableCommitRefusedError(
            f"{where}: {what} do not hold the rows the ledger's verified attempts do ({'; '.join(wrong)}): a file was added to "
            "or taken from an attempt's folder after its check. This table's snapshot was not made; the ledger still holds the "
            "verified attempts. Put the attempts' folders back as their check found them, or replay the batches again"
        )


def rebuilt_to(table: Table | None) -> str | None:
    """The fingerprint of the decoding a rebuild's switch made the table's (REBUILT_TO_PROPERTY), None before any."""
    return table.properties.get(REBUILT_TO_PROPERTY) if table is not None else None


def _replace_columns(tx: Transaction, file_schema: pa.Schema | None, replaced: Sequence[tuple[str, str]]) -> None:
    """Each column (the table's name, the new name) dropped and added again under the type ``file_schema`` gives it: a
    new field id, which pyiceberg's update of the name mapping gives the name."""
    from pyiceberg.catalog import Catalog as BaseCatalog

    types = {f.name: f.field_type for f in BaseCatalog._convert_schema_if_needed(file_schema).fields} if file_schema is not None else {}
    with tx.update_schema() as update:
        for table_name, name in replaced:
            update.delete_column(table_name)
            if name in types:  # else no batch has a row yet: the first one's commit adds the column
                update.add_column(name, types[name])


def batch_data_files(table: Table, batch_id: int, snapshot_id: int | None = None) -> list[DataFile]:
    """The data files that hold the batch in the current (or the given) snapshot: pruned by the partition."""
    from kinesis_replay.adapters import pyiceberg_patches

    if table.current_snapshot() is None:
        return []
    return pyiceberg_patches.scan_data_files(table, f"{PARTITION_COLUMN} = {int(batch_id)}", snapshot_id)


def selection_data_files(table: Table, batch_ids: Iterable[int]) -> dict[int, list[DataFile]]:
    """The data files of each batch named that has some in the current snapshot, found in one scan for the whole selection.

    One scan a batch read the manifest list and the manifests it kept again each time: three quarters of a re-decode's
    commit of 100 batches (BENCHMARKS.md, make bench-redecode). Filtered by the ids' range, which prunes the manifests
    as a batch's equality does, then by each file's partition (identity(batch_id)); an In filter of 100 ids costs
    pyiceberg's evaluators the 100 literals for every file.
    """
    from kinesis_replay.adapters import pyiceberg_patches

    wanted = set(batch_ids)
    if not wanted or table.current_snapshot() is None:
        return {}
    ids = f"{PARTITION_COLUMN} >= {int(min(wanted))} AND {PARTITION_COLUMN} <= {int(max(wanted))}"
    found: dict[int, list[DataFile]] = {}
    for data_file in pyiceberg_patches.scan_data_files(table, ids):
        batch_id = data_file.partition[0]
        if batch_id in wanted:
            found.setdefault(batch_id, []).append(data_file)
    return found


def read_file_schema(properties: Mapping[str, str], path: str) -> pa.Schema:
    """A Parquet file's columns, read from its footer through the catalog's FileIO."""
    import pyarrow.parquet as pq
    from pyiceberg.io import load_file_io

    location = iceberg_location(path)
    with load_file_io(dict(properties), location).new_input(location).open() as stream:
        return pq.read_schema(stream)


def check_files_fit(pipeline: PipelineConfig, batch_id: int, attempt: str, files: Iterable[str]) -> None:
    """Before anything commits: the table (if it exists yet) is this pipeline's, and the attempt's files fit it.

    By the rules of core/schema_changes (``file_changes``): a column the table lacks is added by the commit (a field added
    to payload.schema), a type Iceberg widens is widened by it, a column payload.renamed_from names is renamed by it; a
    column narrower than the table's (a batch written before its widening) is read widened. Any other change is refused,
    naming the column: the commit could never succeed, and it must fail here, while the batch can still be replayed, not
    after the checkpoints' commit has begun. The plan refuses the same changes of payload.schema before anything is read.
    """
    import pyarrow as pa
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    paths = list(files)
    catalog = load_catalog(pipeline)
    table = load_table(pipeline, catalog)  # refused when another pipeline owns it
    if table is None or not paths:
        return
    file_schema = read_file_schema(catalog.properties, paths[0])
    schema = table.schema()
    changes = file_changes(file_columns(file_schema), pipeline.payload.renamed_from, table_columns(table.metadata))
    refused = list(changes.refused)
    known = {column.name for column in schema.fields}
    for change in changes.of(Change.UNCHANGED):
        if change.name not in known:
            continue  # a file of before a rename: its column is found through the name mapping (data_files)
        try:  # nullability, which the rules leave out: a column the table requires (0.1.0's batch_id) is required in the files
            _check_pyarrow_schema_compatible(
                schema.select(change.name), pa.schema([file_schema.field(change.name)]), format_version=table.format_version
            )
        except ValueError:
            why = f"the table requires a value in every row, and the files' {change.after} column is optional"
            refused.append(FieldChange(change.name, Change.REFUSED, why=why))
    if refused:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the files of attempt {attempt} ({paths[0]}) do not fit "
            f"{require_table(pipeline).describe()}: {'; '.join(f.describe() for f in refused)}. {schema_way_out(refused)} "
            "Nothing was committed; the batch stays in flight."
        )


def column_type(t: IcebergType) -> ColumnType:
    """An Iceberg type as the core's ColumnType (core/schema_changes): its kind, a decimal's precision and scale, a nested
    type's fields by name; no field ids, no nullability."""
    from pyiceberg.types import DecimalType, ListType, MapType, StructType

    if isinstance(t, DecimalType):
        return ColumnType("decimal", (t.precision, t.scale))
    if isinstance(t, ListType):
        return ColumnType("list", (), (("element", column_type(t.element_type)),))
    if isinstance(t, MapType):
        return ColumnType("map", (), (("key", column_type(t.key_type)), ("value", column_type(t.value_type))))
    if isinstance(t, StructType):
        return ColumnType("struct", (), tuple((f.name, column_type(f.field_type)) for f in t.fields))
    return ColumnType(str(t))


def table_columns(metadata: TableMetadata | None) -> tuple[TableColumn, ...]:
    """The table's top-level columns as the core's TableColumns, each with the other names its field id has in the table's
    name mapping (its names before a rename); none without a table. Read from metadata already loaded: no catalog call."""
    if metadata is None:
        return ()
    mapping = metadata.name_mapping()
    names = {f.field_id: f.names for f in mapping} if mapping is not None else {}
    return tuple(
        TableColumn(f.name, column_type(f.field_type), tuple(n for n in names.get(f.field_id, ()) if n != f.name))
        for f in metadata.schema().fields
    )


def file_columns(file_schema: pa.Schema) -> list[tuple[str, ColumnType]]:
    """A file's columns as the core's ColumnTypes: the Iceberg types pyiceberg reads them as (an int8 column is an int)."""
    from pyiceberg.catalog import Catalog as BaseCatalog

    return [(f.name, column_type(f.field_type)) for f in BaseCatalog._convert_schema_if_needed(file_schema).fields]


TableCheck = Callable[[TableState], Holdings | None]
"""The step's check of the table before each try of a commit: raises, naming what is wrong, when the current snapshot
does not hold what the ledger says it must for this commit (see steps.commit.table_check). It returns the holdings the
commit's summary builds on when they are not the state's own (read from the partitions: the ledger's count instead)."""


def commit_snapshot(
    pipeline: PipelineConfig,
    batch_id: int,
    attempt: str,
    files: Iterable[str],
    run_id: str,
    records: int | None = None,
    check: TableCheck | None = None,
    create: bool = True,
    catalog: Catalog | None = None,
    before_commit: Any = None,
    schema_file: str | None = None,
) -> int:
    """Make the attempt's files the batch's rows in the table, in one snapshot; returns the snapshot's id.

    Idempotent: a snapshot of this attempt in the current snapshot's ancestry is returned as it is. Before each try,
    ``check`` compares what the current snapshot holds with what the ledger says it must, and refuses a table that
    was rolled back, lost batches or holds others. The batch's files in the current snapshot, if any (a committed
    batch replayed), are replaced in the same snapshot. The snapshot's summary records the table's holdings with this
    batch and its ``records`` (the ledger's verified count; the files' rows when None). The steps always pass a
    ``check``; None (the table's own tests, the bench) checks nothing. A table that does not exist is created only when
    ``create`` says so (the first batch of a pipeline, or a restore), never by a backfill. A batch with no data file
    (every record quarantined) still gets its snapshot, which adds nothing (or removes what an earlier attempt held):
    the ledger and a resumed commit find it like any other. ``schema_file`` gives the table's columns when such a
    batch is the table's first; without one (every record gone), the record's own columns do. The table's columns
    change in the same snapshot, as core/schema_changes says (``_evolve_schema``: columns added, widened, renamed).
    ``before_commit(table)`` runs just before each try (a test's hook).
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    paths = sorted(iceberg_location(f) for f in files)
    catalog = catalog or load_catalog(pipeline)
    where = f"pipeline {pipeline.name!r}, batch {batch_id}, {require_table(pipeline).describe()}"
    table = load_table(pipeline, catalog)
    if table is None:
        if check is not None:
            check(table_state(None))  # refuses unless the ledger says the table holds nothing yet
        if not create:
            raise TableCommitRefusedError(
                f"{where}: the table does not exist, and only a pipeline's first batch or a restore creates it: {restore_hint(pipeline)}"
            )
        table = _create_for(pipeline, paths, schema_file, catalog)
    props = snapshot_properties(pipeline.name, batch_id, attempt, run_id)
    for attempt_no in range(1, COMMIT_ATTEMPTS + 1):
        state = table_state(table)
        found = find_batch_snapshot(table, pipeline.name, batch_id, attempt, state.holdings)
        if found is not None:
            log.info("%s: attempt %s is committed already, in snapshot %d", where, attempt, found.snapshot_id)
            return found.snapshot_id
        held = check(state) if check is not None else None  # the ledger's count, where no snapshot records one
        if before_commit is not None:
            before_commit(table)
        try:
            return _commit_once(
                table, batch_id, paths, props, where, held if held is not None else state.holdings, records, pipeline.payload.renamed_from
            )
        except (CommitFailedException, CommitStateUnknownException) as exc:
            # Lost the race (or the catalog's answer): reload, and look for this attempt's snapshot before trying again.
            log.warning("%s: the table changed under the commit (%s); retrying against its new metadata (%d)", where, exc, attempt_no)
            time.sleep(min(0.05 * 2**attempt_no, 2.0))
            table = catalog.load_table(require_table(pipeline).identifier)
    raise TableCommitError(f"{where}: {COMMIT_ATTEMPTS} commits in a row lost the race for the table; nothing was committed")


def partition_files(table: Table) -> dict[int, tuple[int, int]]:
    """Data files and their bytes per batch in the current snapshot, from its manifests' partition summaries (no data
    file is read): what compaction chooses by."""
    if table.current_snapshot() is None:
        return {}
    found: dict[int, tuple[int, int]] = {}
    columns = ["partition", "file_count", "total_data_file_size_in_bytes"]
    for row in table.inspect.partitions().select(columns).to_pylist():
        batch_id = row["partition"][PARTITION_COLUMN]
        if batch_id is not None:
            files, size = found.get(int(batch_id), (0, 0))
            found[int(batch_id)] = (files + int(row["file_count"]), size + int(row["total_data_file_size_in_bytes"]))
    return found


def forget_gone_batches(pipeline: PipelineConfig, batch_ids: Iterable[int], run_id: str) -> list[int]:
    """Take out of the table's current snapshot the data files of batches that can never come back (their files gone
    from the output, their records past the stream's retention), in one snapshot that records the holdings without
    them; returns the batches it took out. A table registered again after a drop still references such files, and
    every reader's scan of it would fail on them: without them it serves every other batch, and the guard, comparing
    with the ledger, keeps refusing the pipeline and naming the batches until an operator brings them back."""
    table = load_table(pipeline)
    if table is None:
        return []
    gone = {batch_id: found for batch_id in sorted(set(batch_ids)) if (found := batch_data_files(table, batch_id))}
    if not gone:
        return []
    state = table_state(table)
    removed = sum(f.record_count for found in gone.values() for f in found)
    kept_ids = (b for b in state.holdings.ids() if b not in gone)
    kept = Holdings.of(kept_ids, max(0, state.holdings.records - removed), state.holdings.redecodes)
    properties = {PIPELINE_PROPERTY: pipeline.name, RUN_PROPERTY: run_id, **kept.to_summary()}
    with transaction(table) as tx, tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
        for found in gone.values():
            for data_file in found:
                overwrite.delete_data_file(data_file)
    log.warning("pipeline %s: %s no longer references the gone files of batch(es) %s", pipeline.name,
                require_table(pipeline).describe(), ", ".join(map(str, gone)))  # fmt: skip
    return list(gone)


def _create_for(pipeline: PipelineConfig, paths: list[str], schema_file: str | None, catalog: Catalog) -> Table:
    """The table, created with the first files' columns (or, with none, a quarantine file's or the record's own)."""
    import pyarrow as pa

    source = paths[0] if paths else schema_file
    # No file at all (every record of the batch was gone, acknowledged): the record's own columns; a payload
    # schema's columns are added by the first batch that has rows, as a field added to payload.schema is.
    file_schema = read_file_schema(catalog.properties, source) if source is not None else arrow_row_schema()
    if PARTITION_COLUMN not in file_schema.names and not paths:  # a quarantine file: batch_id is in its folder
        file_schema = file_schema.append(pa.field(PARTITION_COLUMN, pa.int64()))
    return create_or_load_table(pipeline, file_schema, catalog)


def transaction(table: Table, autocommit: bool = False) -> Transaction:
    """A pyiceberg transaction on ``table``: patched (its metadata computed once per staged change, never deep-copied)
    when ``pyiceberg_patches`` found the pyiceberg it was written for, pyiceberg's own otherwise; the same commits."""
    from kinesis_replay.adapters import pyiceberg_patches

    return pyiceberg_patches.transaction(table, autocommit=autocommit)


def _evolve_schema(tx: Transaction, footer: Footer | KnownFooter, where: str, renamed_from: Mapping[str, str]) -> None:
    """The table's columns made to take the file's (``footer``'s) in ``tx``, before its files are added, as core/schema_changes decides:
    a column the table lacks is added (a field added to payload.schema), a type Iceberg widens is widened (int to long,
    float to double, a decimal's precision), a column payload.renamed_from names is renamed, its old name kept in the
    table's name mapping so that the files written before still read under the new one. A change the rules refuse was
    refused at the plan and at verify; one met here all the same (the config changed since) is refused, naming it."""
    import pyarrow as pa
    from pyiceberg.catalog import Catalog as BaseCatalog
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    file_schema, path = footer.schema, footer.path
    metadata = tx.table_metadata
    changes = file_changes(file_columns(file_schema), renamed_from, table_columns(metadata))
    if changes.refused:
        raise TableCommitRefusedError(
            f"{where}: the files ({path}) do not fit the table: {'; '.join(f.describe() for f in changes.refused)}. "
            f"{schema_way_out(changes.refused)}"
        )
    if not changes.changes_table:
        return
    added, promoted, renamed = (changes.of(c) for c in (Change.ADDED, Change.PROMOTED, Change.RENAMED))
    log.info("%s: adding columns %s, widening %s, renaming %s", where, [c.name for c in added],
             [f"{c.name} ({c.before} to {c.after})" for c in promoted], [f"{c.renamed_from} to {c.name}" for c in renamed])  # fmt: skip
    if renamed and metadata.name_mapping() is None:  # pyiceberg keeps the old name only in a mapping the table has
        tx.set_properties({NAME_MAPPING_PROPERTY: create_mapping_from_schema(metadata.schema()).model_dump_json()})
    # The files' Iceberg types by name (converted with no field ids: every id is -1, so never looked up by id).
    types = {f.name: f.field_type for f in BaseCatalog._convert_schema_if_needed(file_schema).fields}
    with tx.update_schema() as update:
        for change in (*promoted, *renamed):
            if change.before != change.after:  # by the table's name: the update resolves names in the schema it started from
                update.update_column(change.table_name, field_type=types[change.name])
        for change in renamed:
            update.rename_column(change.table_name, change.name)
        if added:
            update.union_by_name(pa.schema([file_schema.field(c.name) for c in added]))


@dataclass(frozen=True)
class KnownFooter:
    """A file whose footer its attempt's check summarized (file_stats.FileStats): its schema and size from there, and
    its statistics, which pyiceberg_patches.data_files maps to the table's field ids at the commit."""

    path: str
    schema: pa.Schema
    size: int
    stats: FileStats


@dataclass(frozen=True)
class Footer:
    """A Parquet file's footer as a commit reads it once: for its schema (the table's columns may change to take it) and
    for its DataFile (statistics, row count), with the file's size."""

    path: str
    metadata: pq.FileMetaData
    schema: pa.Schema
    size: int


def read_footers(io: FileIO, paths: Sequence[str], known: Known | None = None) -> list[Footer | KnownFooter]:
    """The footers of ``paths`` through the table's FileIO, in their order: the reads pyiceberg's ``add_files`` makes of
    each file (open, footer). Files of an object store are read in pyiceberg's own thread pool (as its ``add_files``
    reads them): each is a few requests, and a re-decode's commit reads about 200. Local files are read one after the
    other: each read takes a fraction of a millisecond, and threads contending for the GIL only add CPU time (about
    twice the reads' own, measured in make bench-redecode). The size is the open file's (its end), where pyiceberg asks
    the file system for it again (``len`` of the input file: a stat, or a HEAD request on S3).

    A file ``known`` summarizes (its staged attempt's sidecar lists it as the commit's listing found it: file_stats)
    is not read: its ``KnownFooter`` holds what the commit needs of it."""
    import pyarrow.parquet as pq

    if known is not None:
        summarized = {p: found for p in paths if (found := known.stats(p)) is not None}
        if summarized:
            schemas: dict[bytes, pa.Schema] = {}  # a commit's files have one schema or two: each read back once
            for stats in summarized.values():
                if stats.schema not in schemas:
                    schemas[stats.schema] = stats.arrow_schema()
            rest = iter(read_footers(io, [p for p in paths if p not in summarized]))
            made: list[Footer | KnownFooter] = []
            for p in paths:
                known_stats = summarized.get(p)
                made.append(KnownFooter(p, schemas[known_stats.schema], known_stats.size, known_stats) if known_stats else next(rest))
            return made

    def read(path: str) -> Footer:
        with io.new_input(path).open() as stream:
            metadata = pq.read_metadata(stream)
            size = stream.seek(0, os.SEEK_END)
        return Footer(path, metadata, metadata.schema.to_arrow_schema(), size)

    if len(paths) < 2 or all(urlparse(p).scheme in ("", "file") for p in paths):
        return [read(p) for p in paths]
    from pyiceberg.utils.concurrent import ExecutorFactory

    return list(ExecutorFactory.get_or_create().map(read, paths))


def data_files(io: FileIO, metadata: TableMetadata, footers: Sequence[Footer | KnownFooter]) -> list[DataFile]:
    """The DataFiles of a commit's files (``footers``, read by ``read_footers``), in their order: pyiceberg's
    ``parquet_file_to_data_file`` (add_files'), its work per table done once per commit (``pyiceberg_patches.data_files``),
    for files that may name a column as it was before a rename.

    pyiceberg 0.12 matches a file's columns with the schema's current names only, not the table's name mapping, and
    refuses a file written before a rename (a batch restored from its files). Such a file is checked against the schema
    with each renamed column under the name the file gives it: the same field ids, so the data file and its statistics
    are the column's, and readers find its values under the new name through the name mapping.
    """
    from pyiceberg.schema import Schema

    from kinesis_replay.adapters import pyiceberg_patches

    earlier = {alias: column.name for column in table_columns(metadata) for alias in column.aliases}
    groups: dict[tuple[tuple[str, str], ...], list[int]] = {}  # the files' names for renamed columns -> the files' positions
    for i, footer in enumerate(footers):
        names = footer.schema.names if earlier else []
        as_written = tuple(sorted((earlier[n], n) for n in names if n in earlier and earlier[n] not in names))
        groups.setdefault(as_written, []).append(i)
    found: list[DataFile | None] = [None] * len(footers)
    for as_written, positions in groups.items():
        named_metadata = metadata
        if as_written:
            renamed = dict(as_written)
            schema = metadata.schema()
            fields = [f.model_copy(update={"name": renamed.get(f.name, f.name)}) for f in schema.fields]
            named = Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=schema.identifier_field_ids)
            schemas = [named if s.schema_id == schema.schema_id else s for s in metadata.schemas]
            named_metadata = metadata.model_copy(update={"schemas": schemas})
        made = pyiceberg_patches.data_files(io, named_metadata, [footers[i] for i in positions], lambda p: _read_footer(io, p))
        for i, data_file in zip(positions, made, strict=True):
            found[i] = data_file
    return [f for f in found if f is not None]


def _read_footer(io: FileIO, path: str) -> Footer:
    (footer,) = read_footers(io, [path])
    if not isinstance(footer, Footer):  # pragma: no cover - read without known statistics
        raise TypeError(path)
    return footer


def _commit_once(
    table: Table, batch_id: int, paths: list[str], props: dict[str, str], where: str, held: Holdings, records: int | None,
    renamed_from: Mapping[str, str],
) -> int:  # fmt: skip
    """One try: the batch's current files (if any) out and ``paths`` in, in one snapshot of ``table``'s metadata, whose
    summary records the table's holdings with the batch (``held`` and it)."""
    attempt = props[ATTEMPT_PROPERTY]
    old = batch_data_files(table, batch_id)
    if any(f.file_path in set(paths) for f in old):
        raise TableCommitRefusedError(f"{where}: the table already holds files of attempt {attempt}, in no snapshot of its own")
    try:
        footers = read_footers(table.io, paths)
        with transaction(table) as tx:
            if footers:
                _evolve_schema(tx, footers[0], where, renamed_from)
            added = data_files(table.io, tx.table_metadata, footers)
            wrong = [f.file_path for f in added if f.partition[0] != batch_id]
            if wrong:
                raise TableCommitRefusedError(f"{where}: files {wrong} hold rows of another batch_id")
            counted = records if records is not None else sum(f.record_count for f in added)
            # A replay of a committed batch: its old files out and the new ones in, one OVERWRITE snapshot.
            write_snapshot(tx, {**props, **held.add(batch_id, counted).to_summary()}, old, added)
    except ValueError as exc:  # pyiceberg: a file's schema the table does not have
        raise TableCommitRefusedError(f"{where}: the files of attempt {attempt} do not fit the table: {exc}") from exc
    snapshot_id = new_snapshot_id(table, where)
    log.info(
        "%s: committed attempt %s in snapshot %d (%s %d files)", where, attempt, snapshot_id, "replacing" if old else "adding", len(paths)
    )
    return snapshot_id
