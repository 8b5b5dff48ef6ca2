"""A committed batch as OpenLineage sees it: its input (the stream), its output (the table or the folder) and its facets.

Pure: plain dicts and names, no OpenLineage, no Airflow, no I/O. The task layer (dags/kinesis_replay_lineage.py) turns
these into the OpenLineage client's classes, only when the provider asks for them. docs/lineage.md has the naming.

Naming (docs/lineage.md: "Naming"):
- the stream: namespace ``arn:aws:kinesis:<region>:<account>``, name ``stream/<name>``: its ARN cut where Glue's
  convention cuts a table's (the OpenLineage naming spec names no Kinesis convention);
- a table in a Glue catalog: namespace ``arn:aws:glue:<region>:<account>``, name ``table/<database>/<table>``, as
  the spec names Glue tables; any other catalog (the embedded one, REST, SQL, Hive...): the table's location, which
  is always the pipeline's output root;
- a location (a table's, or a directory output's root): ``s3://<bucket>`` and the key without its leading
  ``/`` on S3 (``s3a://`` and ``s3n://`` as ``s3://``), else ``file`` and the absolute path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.roots import output_key

# Who wrote a facet, and where its schema is (OpenLineage's `_producer` and `_schemaURL`). The schema is kept in the
# repository beside the docs: docs/lineage/KinesisReplayBatchRunFacet.json.
PRODUCER = "https://github.com/kinesis-replay/kinesis-replay"
BATCH_FACET = "kinesisReplayBatch"  # the run facet's key in an event's run.facets
BATCH_FACET_SCHEMA = f"{PRODUCER}/blob/main/docs/lineage/KinesisReplayBatchRunFacet.json#/$defs/KinesisReplayBatchRunFacet"
# The figures of a batch (kinesis_replay_tasks.BatchFigures) the run facet carries, when present; the ranges are the
# figures' own, capped as the XCom and the Asset event cap them (SUMMARY_RANGES: past it, ``ranges_in`` names the
# commit record that has them).
BATCH_FACET_KEYS = (
    "pipeline", "kind", "batch_id", "shards", "records", "bad_records", "bytes", "snapshot_id", "table", "catalog", "path",
    "ranges", "ranges_in",
)  # fmt: skip
GLUE = "glue"


@dataclass(frozen=True)
class DatasetName:
    """An OpenLineage dataset's identity: its namespace (the data source) and its name within it."""

    namespace: str
    name: str


@dataclass(frozen=True)
class OutputFacts:
    """The output dataset of one committed batch, and what its facets say."""

    dataset: DatasetName
    rows: int
    bytes: int
    snapshot_id: int | None = None  # a table's: its dataset version
    catalog: Mapping[str, str] | None = None  # a table's: framework, type, name (OpenLineage's catalog facet)
    location: DatasetName | None = None  # a Glue table's location, as a symlink of the same data


@dataclass(frozen=True)
class BatchLineage:
    """What a commit task's OpenLineage event says of its batch (or batches, for a re-decode's one commit)."""

    inputs: tuple[DatasetName, ...]
    outputs: tuple[OutputFacts, ...]
    batches: tuple[dict[str, Any], ...] = field(default=())  # the run facet's body, one per batch


def stream_dataset(stream_arn: str) -> DatasetName:
    """The stream's dataset from its ARN (``arn:aws:kinesis:<region>:<account>:stream/<name>``)."""
    parts = stream_arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "kinesis" or not parts[5].startswith("stream/"):
        raise ConfigError(f"not a Kinesis stream ARN (arn:<partition>:kinesis:<region>:<account>:stream/<name>): {stream_arn!r}")
    return DatasetName(":".join(parts[:5]), parts[5])


def location_dataset(location: str) -> DatasetName:
    """A folder's dataset: ``s3://<bucket>`` and its key, or ``file`` and its absolute path (OpenLineage's naming)."""
    key = output_key(location).rstrip("/") or "/"
    if key.startswith("s3://"):
        bucket, _, path = key.removeprefix("s3://").partition("/")
        return DatasetName(f"s3://{bucket}", path)
    if key.startswith("file://"):
        return DatasetName("file", key.removeprefix("file://"))
    if "://" in key:  # another file system (hdfs://, gs://...): its scheme and authority, then its path
        scheme, _, rest = key.partition("://")
        authority, _, path = rest.partition("/")
        return DatasetName(f"{scheme}://{authority}", f"/{path}")
    return DatasetName("file", key)


def is_glue(pipeline: PipelineConfig) -> bool:
    return pipeline.table is not None and pipeline.table.catalog_properties.get("type", "").lower() == GLUE


def glue_region_and_account(pipeline: PipelineConfig, region: str | None, account: str | None) -> tuple[str, str]:
    """A Glue catalog's region and account: ``glue.region`` (else ``client.region``, else ``region``), and ``glue.id``
    (the catalog id: the account) from table.catalog_properties; else those given (the connection's region, the
    stream's account)."""
    assert pipeline.table is not None
    props = pipeline.table.catalog_properties
    found_region = props.get("glue.region") or props.get("client.region") or region
    found_account = props.get("glue.id") or account
    if not found_region or not found_account:
        missing = " and ".join(
            k for k, v in (("glue.region", found_region), ("glue.id", found_account)) if not v
        )  # fmt: skip
        raise ConfigError(
            f"pipeline {pipeline.name!r}: the Glue table's OpenLineage name needs the catalog's region and account; set "
            f"{missing} in table.catalog_properties"
        )
    return found_region, found_account


def table_dataset(pipeline: PipelineConfig, region: str | None = None, account: str | None = None) -> DatasetName:
    """The table's dataset: Glue's ARN form in a Glue catalog, else the table's location (the output root)."""
    table = pipeline.table
    if table is None:
        raise ConfigError(f"pipeline {pipeline.name!r} writes no table")
    if is_glue(pipeline):
        glue_region, glue_account = glue_region_and_account(pipeline, region, account)
        return DatasetName(f"arn:aws:glue:{glue_region}:{glue_account}", f"table/{table.namespace}/{table.name}")
    return location_dataset(pipeline.output)


def catalog_facts(pipeline: PipelineConfig) -> dict[str, str]:
    """What OpenLineage's catalog facet says of an Iceberg table's catalog: framework, type and name."""
    assert pipeline.table is not None
    kind = pipeline.table.catalog_properties.get("type", "sql" if pipeline.table.embedded else "rest")
    return {"framework": "iceberg", "type": kind.lower(), "name": pipeline.table.catalog}


def batch_facet(figures: Mapping[str, Any]) -> dict[str, Any]:
    """The run facet's body for one batch: its figures, the ranges as capped in them."""
    return {k: figures[k] for k in BATCH_FACET_KEYS if k in figures}


def batch_lineage(pipeline: PipelineConfig, figures: list[Mapping[str, Any]], stream_arn: str, region: str | None = None) -> BatchLineage:
    """The lineage of a commit task that committed ``figures`` (one batch's, or a re-decode's batches).

    ``stream_arn`` names the input, and gives a Glue table the stream's account when ``glue.id`` is not set;
    ``region`` is the connection's, for a Glue catalog with no region of its own."""
    if not figures:
        raise ValueError(f"pipeline {pipeline.name!r}: no committed batch to describe")
    stream = stream_dataset(stream_arn)
    rows = sum(int(f["records"]) for f in figures)
    size = sum(int(f["bytes"]) for f in figures)
    if pipeline.table is not None:
        account = stream.namespace.split(":")[4]
        output = OutputFacts(
            table_dataset(pipeline, region or stream.namespace.split(":")[3], account),
            rows,
            size,
            snapshot_id=figures[-1].get("snapshot_id"),
            catalog=catalog_facts(pipeline),
            location=location_dataset(pipeline.output) if is_glue(pipeline) else None,
        )
    else:  # a directory output: one dataset, its root; each batch's folder (``path``) is in the run facet
        output = OutputFacts(location_dataset(pipeline.output), rows, size)
    return BatchLineage((stream,), (output,), tuple(batch_facet(f) for f in figures))


def run_facet(lineage: BatchLineage) -> dict[str, Any]:
    """The custom run facet's fields: one batch's figures at the top level, or ``batches`` for a re-decode's several."""
    if len(lineage.batches) == 1:
        return dict(lineage.batches[0])
    return {"batches": [dict(b) for b in lineage.batches]}
