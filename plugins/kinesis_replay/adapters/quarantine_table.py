"""A table output's quarantine table: the records no decoding could read, queryable beside the pipeline's table.

Its name is the table's with ``_quarantine`` after it (``table.quarantine_name`` names another), in the same catalog
and namespace; its location is ``<output>/quarantine`` (``layout.quarantine_table_path``: data files under ``data/``,
metadata under ``metadata/``, never the pipeline's table's folders). Partitioned by ``batch_id``; its columns are the
record's keys and arrival, the raw payload (``data``) and ``decode_error``, and ``batch_id`` (attempt_writer), so they
never change with payload.schema.

Its files are written per attempt (``layout.quarantine_data_path``), as the table's data files are, and become
visible only through a commit here. pyiceberg 0.12 commits one table at a time, so a batch's commit step commits the
pipeline's table first and this one second, each snapshot found again (never made twice) by the properties of its
summary, and keeps both snapshot ids in the ledger and the commit record; a resumed commit finishes the second.
Between the two commits a reader of this table sees the batch's quarantined records as they were before the batch's
commit (none, for a new batch): docs/table.md says so. A batch with nothing quarantined, and nothing quarantined
before, makes no snapshot here (its ``quarantine_snapshot_id`` stays None).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kinesis_replay.adapters import iceberg_table, layout
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import OutputOwnershipError, TableCommitError, TableCommitRefusedError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from kinesis_replay.adapters.file_stats import Known

log = logging.getLogger(__name__)

QUARANTINE_PROPERTY = "kinesis-replay.quarantine-of"  # the quarantine table's property naming the pipeline's table


def location(pipeline: PipelineConfig) -> str:
    return iceberg_table.iceberg_location(layout.quarantine_table_path(pipeline.output))


def load(pipeline: PipelineConfig, catalog: Catalog | None = None) -> Table | None:
    """The pipeline's quarantine table, or None before its first quarantined record; refused when it is not the
    pipeline's (another pipeline's, or at another location)."""
    from pyiceberg.exceptions import NoSuchTableError

    config = iceberg_table.require_table(pipeline)
    catalog = catalog or iceberg_table.load_catalog(pipeline)
    try:
        table = catalog.load_table(config.quarantine_identifier)
    except NoSuchTableError:
        return None
    _check_owner(pipeline, table)
    return table


def _check_owner(pipeline: PipelineConfig, table: Table) -> None:
    config = iceberg_table.require_table(pipeline)
    props = table.properties
    owner = (props.get(iceberg_table.PIPELINE_PROPERTY), props.get(iceberg_table.STREAM_PROPERTY))
    where = f"pipeline {pipeline.name!r}: {config.describe_quarantine()}"
    if owner != (pipeline.name, pipeline.stream):
        raise OutputOwnershipError(
            f"{where} belongs to pipeline {owner[0]!r} (stream {owner[1]}); its name is the quarantine table's of this "
            "pipeline's table: set table.quarantine_name to another name. Nothing was written."
        )
    if table.location().rstrip("/") != location(pipeline).rstrip("/"):
        raise OutputOwnershipError(
            f"{where} is at {table.location()}, and the pipeline's quarantine table belongs at {location(pipeline)}, under "
            f"its output {pipeline.output}. Point output back to where its tables are. Nothing was written."
        )


def _create(pipeline: PipelineConfig, schema_file: str, catalog: Catalog) -> Table:
    config = iceberg_table.require_table(pipeline)
    file_schema = iceberg_table.read_file_schema(catalog.properties, schema_file)
    schema, spec, sort_order, properties = iceberg_table.new_table_parts(pipeline, file_schema)
    iceberg_table.create_namespace(catalog, config.namespace)
    parts = (schema, spec, sort_order, {**properties, QUARANTINE_PROPERTY: config.identifier})
    table = iceberg_table.create_table(catalog, config.quarantine_identifier, location(pipeline), parts)
    _check_owner(pipeline, table)
    log.info("pipeline %s: created %s at %s", pipeline.name, config.describe_quarantine(), table.location())
    return table


def batch_files(table: Table | None, batch_ids: Iterable[int]) -> dict[int, list[DataFile]]:
    """The quarantine table's current files of each batch that has some."""
    return iceberg_table.selection_data_files(table, batch_ids) if table is not None else {}


def commit(
    pipeline: PipelineConfig,
    replacements: Mapping[int, Sequence[str]],
    properties: Mapping[str, str],
    key: Mapping[str, str],
    records: Mapping[int, int] | None = None,
    known: Known | None = None,
) -> int | None:
    """Make ``replacements`` (batch id -> its attempt's quarantine files) the batches' records in the quarantine table, in
    one snapshot whose summary holds ``properties``; its id, or None when there is nothing to change (no file to add,
    none to remove). Idempotent: a snapshot of the ancestry whose summary holds ``key`` is that commit, returned as it is.
    ``records`` (batch id -> the verified attempt's quarantined records), when given: the files must hold as many.
    ``known``: the statistics of the files their staged attempts' checks summarized, in place of their footers.
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    config = iceberg_table.require_table(pipeline)
    where = f"pipeline {pipeline.name!r}, batches {', '.join(map(str, sorted(replacements)))}, {config.describe_quarantine()}"
    paths = {b: sorted(iceberg_table.iceberg_location(p) for p in files) for b, files in replacements.items()}
    catalog = iceberg_table.load_catalog(pipeline)
    table = load(pipeline, catalog)
    if table is None:
        first = next((p[0] for p in paths.values() if p), None)
        if first is None:
            return None
        table = _create(pipeline, first, catalog)
    for attempt_no in range(1, iceberg_table.COMMIT_ATTEMPTS + 1):
        found = iceberg_table.find_snapshot(table, key)
        if found is not None:
            log.info("%s: committed already, in snapshot %d", where, found)
            return found
        try:
            return _commit_once(table, paths, properties, where, records, known)
        except (CommitFailedException, CommitStateUnknownException) as exc:
            log.warning("%s: the table changed under the commit (%s); retrying against its new metadata (%d)", where, exc, attempt_no)
            time.sleep(min(0.05 * 2**attempt_no, 2.0))
            table = catalog.load_table(config.quarantine_identifier)
    raise TableCommitError(f"{where}: {iceberg_table.COMMIT_ATTEMPTS} commits in a row lost the race for the table; nothing was committed")


def _commit_once(
    table: Table,
    paths: Mapping[int, list[str]],
    properties: Mapping[str, str],
    where: str,
    records: Mapping[int, int] | None,
    known: Known | None = None,
) -> int | None:
    """One try: the batches' current files out and ``paths`` in, in one snapshot; None when neither has any."""
    old = batch_files(table, paths)
    if not old and not any(paths.values()):
        return None
    held = {f.file_path for files in old.values() for f in files}
    if held == {p for ps in paths.values() for p in ps}:  # holds these files already (a restore of a table it outlived)
        current = table.current_snapshot()
        return current.snapshot_id if current is not None else None
    try:
        footers = iceberg_table.read_footers(table.io, [p for ps in paths.values() for p in ps], known)
        with iceberg_table.transaction(table) as tx:
            added = iceberg_table.data_files(table.io, tx.table_metadata, footers)
            wrong = [f.file_path for f in added if f.partition[0] not in paths]
            if wrong:
                raise TableCommitRefusedError(f"{where}: files {wrong} hold records of another batch_id")
            if records is not None:
                iceberg_table.check_rows(added, records, where, "the quarantine files")
            iceberg_table.write_snapshot(tx, properties, (f for files in old.values() for f in files), added)
    except ValueError as exc:  # pyiceberg: a file's schema the table does not have
        raise TableCommitRefusedError(f"{where}: the quarantine files do not fit the table: {exc}") from exc
    snapshot_id = iceberg_table.new_snapshot_id(table, where)
    log.info("%s: committed %d quarantine files, replacing %d, in snapshot %d", where, len(added),
             sum(len(f) for f in old.values()), snapshot_id)  # fmt: skip
    return snapshot_id
