"""The pipelines config: each key declared once (type, default, bounds, doc line), read by core/options.py; errors name file and key."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kinesis_replay.core.airflow_names import AIRFLOW_DEFAULT_POOL, dag_ids
from kinesis_replay.core.ddl import not_null_columns, parse_ddl_schema, struct_fields
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.options import REFERENCE_BEGIN as REFERENCE_BEGIN
from kinesis_replay.core.options import REFERENCE_END as REFERENCE_END
from kinesis_replay.core.options import (
    Reader,
    documented,
    entries,
    exact,
    key_table,
    key_table_main,
    load_yaml,
    option,
    section,
    with_key_table,
)
from kinesis_replay.core.payloads import undecoded_columns
from kinesis_replay.core.records import PARTITION_COLUMN, ROW_COLUMNS
from kinesis_replay.core.roots import normalize_output, output_key, outputs_overlap, split_s3_uri

CONFIG_ENV = "KINESIS_REPLAY_CONFIG"
INITIAL_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# An Airflow pool's name: what `airflow pools set` and a shell accept unquoted, within the 256 characters Airflow stores.
_POOL = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_STREAM = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/")


@section
class ReadConfig:
    """Per-shard read budget and throttling waits; the defaults are Kinesis's own limits.

    Kinesis allows each shard 5 GetRecords calls and 2 MB of reads a second, and 5 GetShardIterator
    calls a second; GetRecords returns at most 10,000 records (10 MB) a call.

    GetRecords takes a count of records, not of bytes, so a range's reader asks each call for as
    many records as fill about ``page_bytes`` at the mean record size of its last page (at most
    ``max_records_per_call``; the first call asks for ``first_page_records``). That bounds a
    reader's memory by about one such page, whatever the range's length, while record sizes stay
    alike (a sudden jump in size can bring one larger page, at most Kinesis's 10 MB). The default,
    2 MiB, is one second of a shard's read budget: at 5 calls a second no page needs to be larger.
    """

    max_records_per_call: int = option(
        "the largest GetRecords `Limit` (10,000 is the most Kinesis returns)",
        default=10_000,
        minimum=1,
        maximum=10_000,
        limit="the most GetRecords returns",
    )
    page_bytes: int = option(
        "each GetRecords asks for as many records as fill about this many bytes at the last page's mean record size, so a "
        "reader holds one page of about 2 MiB whatever the range's length (one second of a shard's read budget: it costs "
        "Kinesis throughput nothing)",
        default=2 * 1024 * 1024,
        minimum=1,
    )
    first_page_records: int = option("the `Limit` of a range's first GetRecords, before any record size is known", default=1_000, minimum=1)
    get_records_per_second: float = option("per-shard budget of GetRecords calls", default=5.0)
    bytes_per_second: float = option("per-shard budget of bytes read (2 MB/s)", default=2 * 1024 * 1024)
    get_shard_iterator_per_second: float = option("per-shard budget of GetShardIterator calls", default=5.0)
    max_throttle_retries: int = option("throttled calls waited out per call before the batch fails", default=20)
    throttle_base_seconds: float = option("the first wait after a throttled call", default=0.2)
    throttle_max_seconds: float = option("the longest wait after a throttled call", default=10.0)
    progress_seconds: float = option("how often each shard's reader logs its progress", default=30.0)
    # Shards planned (and checkpoints committed) at once. Each shard keeps to its own call budget; Kinesis limits
    # GetShardIterator and GetRecords per shard, not per stream, so this bounds only our own threads and connections.
    # A shard's plan mostly waits (its GetRecords calls are 0.2 s apart): at 32, 1,000 idle shards planned in 32
    # waves and used 42% of 2 cores; at 128 the plan is bound by the CPU (make bench-planning).
    plan_concurrency: int = option(
        "shards planned, and checkpoints committed, at once (Kinesis limits calls per shard, so this bounds only our own "
        "threads and pooled connections; a shard's plan mostly waits for its budget)",
        default=128,
        minimum=1,
    )
    # Ranges one Spark task reads at once, each paced by its own shard's budget: a task mostly waits for budgets, so
    # one core can serve many shards (about ten at Kinesis's 2 MB/s). A task holds about two pages per range it reads.
    task_concurrency: int = option(
        "ranges one Spark task reads at once, a thread each, each within its own shard's budget (a task holds about two "
        "pages per range it reads); see [Sizing executors against the stream](deployment.md#sizing-executors-against-the-stream)",
        default=16,
        minimum=1,
    )


# Kinesis takes at most 1 MiB a second into a shard: what a shard whose rate is not known yet is assumed to hold.
SHARD_WRITE_BYTES_PER_SECOND = 1024 * 1024


@section
class MaxBatch:
    """How much one batch may take from a shard; a range is capped at whichever limit comes first.

    ``span``: the arrival time its records may span, from its first record. ``read_minutes``: its estimated
    read time at the shard's read budget, turned into a span by the shard's write rate (measured on its last
    committed range, else Kinesis's per-shard write limit, the most it can hold). The capped range ends at the
    newest record that arrived before the cap; the rest is the next batch's.
    """

    span: timedelta = option(
        "the arrival time one range may span; see [Bounded batches and catch-up](design.md#bounded-batches-and-catch-up)",
        default=timedelta(hours=1),
    )
    read_minutes: float = option("one range's estimated read time at the read budget", default=30.0)

    def span_for(self, bytes_per_second: float | None, read: ReadConfig) -> timedelta:
        """The arrival span a range of a shard writing ``bytes_per_second`` may cover."""
        rate = bytes_per_second if bytes_per_second and bytes_per_second > 0 else SHARD_WRITE_BYTES_PER_SECOND
        by_read_time = timedelta(seconds=self.read_minutes * 60 * read.bytes_per_second / rate)
        return min(self.span, by_read_time)


PAYLOAD_FORMATS = ("raw", "json")
# Columns every row carries; a JSON schema may not reuse their names.
RECORD_COLUMNS = (*(name for name, _ in ROW_COLUMNS), PARTITION_COLUMN)


def _check_schema(schema: str) -> str:
    """payload.schema is a Spark DDL schema the replay can decode and write, and promises nothing it does not keep."""
    try:
        struct = parse_ddl_schema(schema)
    except ValueError as exc:
        raise ValueError(f"is not a Spark DDL schema ({exc}), such as 'user STRING, amount DOUBLE, tags ARRAY<STRING>'") from None
    for where, name in struct_fields(struct):
        exact(name, f'column "{where}": its name ')
    required = not_null_columns(schema)
    if required:
        columns = ", ".join(f'"{c}"' for c in required)
        raise ValueError(
            f"declares column(s) {columns} NOT NULL, which the replay does not enforce: a record that lacks such a value, "
            "or holds null, lands with a null there, as Spark's from_json reads it. Remove NOT NULL (the rows landed so "
            "far were read the same way)"
        )
    clashes = sorted({name.lower() for name, _ in struct.children} & set(RECORD_COLUMNS))
    if clashes:
        raise ValueError(f"names column(s) {', '.join(clashes)}, which every row already carries")
    refused = undecoded_columns(struct)
    if refused:
        raise ValueError(
            f"has types no JSON payload is decoded into: {'; '.join(refused)}; declare STRING to keep such a value's JSON text"
        )
    return schema


@section
class PayloadConfig:
    """How payloads are decoded: kept as raw bytes, or parsed as JSON into the columns of a declared schema."""

    format: str = option(
        "`raw` keeps payload bytes; `json` also decodes them into columns", default="raw", fold=str.lower, choices=PAYLOAD_FORMATS
    )
    schema: str | None = option(
        "required with `json`: a Spark DDL string such as `user STRING, amount DOUBLE` (no `NOT NULL`: nothing enforces it; "
        "a `DECIMAL`'s precision 1 to 38, its scale at most its precision)",
        default=None,
        padded=True,
        check=_check_schema,
    )
    max_bad_share: float = option(
        "the batch fails when a larger share of its records cannot be decoded", default=0.05, minimum=0, maximum=1
    )


def _s3_prefix(uri: str) -> str:
    """``s3://bucket/prefix``, without a trailing slash."""
    try:
        split_s3_uri(uri, "the value")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return uri.rstrip("/")


@section
class EmrServerlessConfig:
    """Run the replay job as an EMR Serverless job run instead of through spark-submit.

    The job file, its Data Source, the library zip and the batch spec are uploaded under
    ``code_prefix`` (``s3://bucket/prefix``), one folder per batch.
    """

    application_id: str = option("an existing SPARK application (EMR 7.x) that runs the job")
    execution_role_arn: str = option(
        "the IAM role the job runs as (`arn:aws:iam::<account>:role/<name>`)",
        pattern=_ROLE,
        must="must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)",
    )
    code_prefix: str = option("`s3://bucket/prefix` where each batch's job files are staged", check=_s3_prefix)
    log_uri: str | None = option("S3 prefix for driver and executor logs", default=None, check=_s3_prefix)
    venv_archive: str | None = option("S3 URI of a venv-pack archive holding the job's dependencies", default=None, check=_s3_prefix)
    deferrable: bool = option("wait in the triggerer; needs aiobotocore on Airflow's side", default=False)
    poll_seconds: int = option("how often the job run's state is polled", default=30, minimum=1)


# What every replay job gets, under spark-submit or EMR Serverless, unless the pipeline's spark.conf says otherwise:
# - spark.log.level: Spark's INFO lines (hundreds a run) would bury the job's own progress in the driver's log.
# - ARROW_DEFAULT_MEMORY_POOL in the Python workers' environment: Arrow's own allocations go through the C library's
#   malloc, whose freed pages the task hands back (kinesis_source.return_large_blocks), rather than mimalloc, which
#   keeps a heap per thread. The task puts pyarrow's allocations on malloc itself; this reaches what Arrow allocates
#   from its default pool directly, from the worker's start. The largest worker of a 400,000-record job: 209 -> 194 MiB,
#   171 at 4,000 records (181), for the same CPU (BENCHMARKS.md, the memory target; docs/configuration.md).
# - spark.python.worker.faulthandler.enabled: a Python worker that dies of a signal (a segfault in native code) has
#   Python's fault handler name it ("Fatal Python error: Segmentation fault"); the JVM puts that line in its crash message,
#   which the launcher reports as the root cause, where it would otherwise say only "EOFException" (spark_submit.WorkerLines).
DEFAULT_SPARK_CONF: Mapping[str, str] = {
    "spark.log.level": "WARN",
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
    "spark.python.worker.faulthandler.enabled": "true",
}


def _as_text(properties: Mapping[Any, Any]) -> dict[str, str]:
    """Properties as the text Spark and pyiceberg take: YAML's true is "true"."""
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in properties.items()}


def _spark_conf(value: object) -> dict[str, str]:
    conf = value or {}
    if not isinstance(conf, Mapping):
        raise ValueError(f"must be a mapping of Spark properties, got {type(conf).__name__}")
    for k, v in conf.items():
        if not isinstance(k, str) or not k.startswith("spark."):
            raise ValueError(f"keys must be Spark properties starting with 'spark.', got {k!r}")
        exact(k, "the property ")
        if isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{k} must be a scalar, got {v!r}")
    return _as_text(conf)


@section
class SparkConfig:
    master: str = option(
        "spark-submit's `--master`: `local[...]`, `spark://host:7077`, `yarn`, `k8s://...`; "
        "see [The JVM of a local job](#the-jvm-of-a-local-job)",
        default="local[*]",
    )
    conf: Mapping[str, str] = option(
        "Spark properties, each passed as `--conf` (EMR Serverless: in `sparkSubmitParameters`, so no whitespace)",
        default_factory=dict,
        parse=_spark_conf,
    )
    submit_timeout_seconds: int = option(
        "the replay task's execution timeout; the job is killed when it expires", default=6 * 3600, minimum=1
    )
    emr_serverless: EmrServerlessConfig | None = option(
        "set (instead of `spark.master`): EMR Serverless runs the job, not spark-submit; "
        "see [EMR Serverless](deployment.md#emr-serverless)",
        default=None,
    )


# The two layouts of a pipeline's output: an Apache Iceberg table (the default), or today's plain directories.
OUTPUT_FORMATS = ("iceberg", "directory")
# pyiceberg's catalog types (pyiceberg.catalog.CatalogType; a unit test keeps the two equal): catalog_properties.type
# is checked against them when the config is parsed, without importing pyiceberg.
CATALOG_TYPES = ("rest", "hive", "glue", "dynamodb", "sql", "in-memory", "bigquery")
EMBEDDED_CATALOG = "kinesis_replay"  # the name of the default catalog: pyiceberg's SQL catalog on a SQLite file
DEFAULT_NAMESPACE = "kinesis_replay"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")  # what Glue, Athena and the SQL catalog all accept
# Put before a default table name that would start with a digit (a pipeline name may, an identifier may not). A letter,
# not '_': Athena wants a name that starts with '_' quoted in DDL.
DEFAULT_TABLE_PREFIX = "p_"


def default_table_name(pipeline_name: str) -> str:
    """The table a pipeline that names none commits to: its name with '-' as '_', and ``p_`` before a leading digit.

    A valid identifier for every valid pipeline name (``2024-orders`` -> ``p_2024_orders``); a name that starts with a
    letter keeps the table it always had (``orders-eu`` -> ``orders_eu``).
    """
    name = pipeline_name.replace("-", "_")
    return f"{DEFAULT_TABLE_PREFIX}{name}" if name[:1].isdigit() else name


DEFAULT_TABLE_RULE = f"'-' becomes '_', and a leading digit gets {DEFAULT_TABLE_PREFIX!r} in front"
_IDENTIFIER_RULE = "letters, digits and `_`, starting with a letter or `_`"


def _catalog_properties(value: object) -> dict[str, str]:
    properties = value or {}
    if not isinstance(properties, Mapping):
        raise ValueError(f"must be a mapping of pyiceberg catalog properties (type, uri, warehouse, glue.region...), got {properties!r}")
    for k, v in properties.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{k!r} must be a scalar property, got {v!r}")
        exact(k, "the property ")
    return _as_text(properties)


@section
class TableConfig:
    """The Iceberg table a pipeline commits its batches to: a catalog, a namespace and a table name.

    ``catalog_properties`` are pyiceberg's own (``type``, ``uri``, ``warehouse``, ``glue.region``...), as its docs
    name them; empty means the embedded catalog: pyiceberg's SQL catalog on a SQLite file under the output root,
    which needs no server. The table's location is always the pipeline's output root.
    """

    name: str = option(
        f"the table's name: {_IDENTIFIER_RULE}. Two pipelines may not name one table of a shared catalog (same catalog, "
        "namespace and name, in any case); each embedded catalog is its pipeline's own",
        shown=f"the pipeline's name with `-` as `_`, and `{DEFAULT_TABLE_PREFIX}` before a leading digit "
        f"(`2024-orders` → `{default_table_name('2024-orders')}`)",
    )
    namespace: str = option(f"the table's namespace: {_IDENTIFIER_RULE}", default=DEFAULT_NAMESPACE)
    catalog: str = option(f"the catalog's name: {_IDENTIFIER_RULE}", default=EMBEDDED_CATALOG)
    catalog_properties: Mapping[str, str] = option(
        "pyiceberg's catalog properties, as its docs name them",
        default_factory=dict,
        shown="{default} (the embedded SQL catalog under the output)",
        parse=_catalog_properties,
    )

    @property
    def embedded(self) -> bool:
        return not self.catalog_properties

    @property
    def identifier(self) -> str:
        """``namespace.name``, as pyiceberg's ``load_table`` takes it."""
        return f"{self.namespace}.{self.name}"

    @property
    def key(self) -> tuple[str, str, str] | None:
        """What two pipelines' tables are compared by: catalog, namespace and name, in lower case (Glue and Athena
        fold case). None for the embedded catalog: each lives under its own pipeline's output root, so two embedded
        tables of one name are two tables."""
        if self.embedded:
            return None
        return self.catalog.lower(), self.namespace.lower(), self.name.lower()

    def describe(self) -> str:
        """The table's identity for people: ``table kinesis_replay.demo in catalog kinesis_replay (sql, embedded)``."""
        kind = "sql, embedded" if self.embedded else str(self.catalog_properties.get("type", "catalog"))
        return f"table {self.identifier} in catalog {self.catalog} ({kind})"


def default_pool(pipeline_name: str) -> str:
    """The pool a pipeline's replays take a slot of unless its config names another."""
    return f"kinesis_replay_{pipeline_name}"


# A key with no field of its own: PipelineConfig.output_format says it, by whether the pipeline has a table.
OUTPUT_FORMAT: Field[str] = option(
    "`iceberg`: batches are committed to an Iceberg table (see [The table](table.md)); `directory`: plain "
    "`batch_id=<id>/` folders, read directly",
    default=OUTPUT_FORMATS[0],
    fold=str.lower,
    choices=OUTPUT_FORMATS,
)


def _schedule(value: object) -> str | None:
    """A schedule, or null for manual runs only; trimmed (it names nothing that must match it exactly)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"must be a cron expression, a preset such as @hourly, or null, got {value!r}")
    return value.strip() if isinstance(value, str) else None


def _read_table(r: Reader[Any], key: str) -> TableConfig | None:
    """The table, unless output_format is directory; its name defaults to the pipeline's (default_table_name)."""
    if r.values["output_format"] == "directory":
        return None  # validate() refuses a table given anyway
    return r.section(key, TableConfig).read({"name": default_table_name(r.values["name"])})


@section
class PipelineConfig:
    """One entry of the file's ``pipelines`` list; its sections (``spark``, ``read``...) are dataclasses of their own."""

    name: str = option(
        "a-z, 0-9, `_` and `-`, first a letter or digit, at most 64; the DAG id is `kinesis_replay_<name>`",
        pattern=_NAME,
        must=f"must match {_NAME.pattern} (it becomes part of the DAG id)",
    )
    stream: str = option(
        "the Kinesis data stream's name (not its ARN)",
        pattern=_STREAM,
        must="must be a Kinesis stream name (1 to 128 letters, digits, '_', '.' and '-'; not an ARN)",
    )
    output: str = option(
        "a path every Spark node and the Airflow worker see; `s3://...` needs a catalog other than the embedded one "
        "(see [The catalog](table.md#the-catalog))",
        check=normalize_output,
    )
    schedule: str | None = option("cron, a preset such as `@hourly`, or null (manual only)", parse=_schedule)
    initial_position: str = option(
        f"where a shard the pipeline has not read yet starts: {', '.join(f'`{p}`' for p in INITIAL_POSITIONS)} "
        "(a child of a split or merge always starts at its first record)",
        fold=str.upper,
        choices=INITIAL_POSITIONS,
    )
    state_table: str = option("DynamoDB table; created (on demand billing) if missing")
    spark: SparkConfig
    initial_timestamp: datetime | None = option("required with `AT_TIMESTAMP`, refused otherwise", default=None)
    aws_conn_id: str = option("the Airflow connection every AWS client comes from", default="aws_default")
    retries: int = option("task retries, with exponential backoff up to 30 minutes", default=2)
    retry_delay_seconds: int = option("the wait before the first retry; each later one waits longer", default=60, minimum=1)
    read: ReadConfig = field(default_factory=ReadConfig)
    payload: PayloadConfig = field(default_factory=PayloadConfig)
    max_checkpoint_age_minutes: int = option(
        "the check task fails (and alerts) when a record waited longer without being committed", default=180, minimum=1
    )
    max_batch: MaxBatch = field(default_factory=MaxBatch)
    pool_name: str | None = option(
        "the Airflow pool (one slot) every replay of the pipeline, regular or backfill, waits for; create it with `airflow "
        "pools set` (see [Backfill within the read budget](operating.md#backfill-within-the-read-budget-one-pool-per-pipeline)). "
        "Pipelines that read the same stream should share one. `default_pool` is refused: it has many slots and is shared "
        "by every task",
        default=None,
        key="pool",
        shown=f"`{default_pool('<name>')}`",
        pattern=_POOL,
        must="must be an Airflow pool name of letters, digits, '_', '.' and '-' (at most 256)",
        refused={
            AIRFLOW_DEFAULT_POOL: f"must be a pool of kinesis-replay's own: {AIRFLOW_DEFAULT_POOL} is shared by every task and has "
            "many slots, so several replays would read the same shards at once, each at the full read budget"
        },
    )
    # The Iceberg table the batches are committed to; None: output_format is directory (plain batch_id=<id> folders).
    table: TableConfig | None = option(None, default=None, before={"output_format": OUTPUT_FORMAT}, read=_read_table)

    @property
    def output_format(self) -> str:
        return "directory" if self.table is None else "iceberg"

    @property
    def dag_id(self) -> str:
        return dag_ids(self.name)[0]

    @property
    def pool(self) -> str:
        """The Airflow pool of the pipeline's replays: one slot, so that one replay at a time reads the stream's shards."""
        return self.pool_name or default_pool(self.name)

    @property
    def backfill_dag_id(self) -> str:
        return dag_ids(self.name)[1]


def validate(r: Reader[PipelineConfig], p: PipelineConfig) -> None:
    """The rules between keys, which no one key's declaration can say (IcebergSinkConfig.validate's part); each error names
    the key it refuses. Called once every key has passed its own declaration."""
    at_timestamp = p.initial_position == "AT_TIMESTAMP"
    if at_timestamp and not r.has("initial_timestamp"):
        r.fail("is required when initial_position is AT_TIMESTAMP", "initial_timestamp")
    if not at_timestamp and r.has("initial_timestamp"):
        r.fail(f"is only allowed with initial_position AT_TIMESTAMP, not {p.initial_position}", "initial_timestamp")
    if p.payload.format == "json" and p.payload.schema is None:
        r.fail("is required when format is json (a Spark DDL string, such as 'user STRING, amount DOUBLE')", "payload.schema")
    if p.payload.format == "raw" and p.payload.schema is not None:
        r.fail("is only allowed with format json", "payload.schema")
    if p.spark.emr_serverless is not None:
        _validate_emr(r, r.data["spark"])
    if p.table is None and r.has("table"):
        r.fail("is only allowed with output_format iceberg (a directory output has no table)", "table")
    if p.table is not None:
        _validate_table(r, p, p.table)


def _validate_emr(r: Reader[PipelineConfig], spark: Mapping[str, Any]) -> None:
    """EMR Serverless runs the job instead of spark-submit, and takes spark.conf as one whitespace-split string."""
    if "master" in spark:
        r.fail("give either master (spark-submit) or emr_serverless, not both", "spark.emr_serverless")
    for k, v in (spark.get("conf") or {}).items():  # as written: the error quotes the value as given
        if any(c.isspace() for c in f"{k}{v}"):
            r.fail(
                f"{k}: EMR Serverless splits sparkSubmitParameters on whitespace and has no quoting, so it cannot pass "
                f"{v!r}; set it in the application's runtimeConfiguration (spark-defaults) instead",
                "spark.conf",
            )


def _validate_table(r: Reader[PipelineConfig], p: PipelineConfig, table: TableConfig) -> None:
    """The table's names are identifiers, its catalog's type is one pyiceberg knows, and the embedded catalog's output is local;
    the errors name the pipeline."""
    for key in ("name", "namespace", "catalog"):
        value = getattr(table, key)
        if not _IDENTIFIER.match(value):  # only a value the pipeline wrote: every default is an identifier
            hint = f"; leave it out for the default, {default_table_name(p.name)!r}" if key == "name" else ""
            r.fail(
                f"pipeline {p.name!r} names {value!r}, which is not an identifier: it must be letters, digits and '_', "
                f"starting with a letter or '_' (Glue and Athena accept no more){hint}",
                f"table.{key}",
            )
    properties = (r.data.get("table") or {}).get("catalog_properties") or {}  # as written: the error quotes the type as given
    kind = properties.get("type")
    if kind is not None and "py-catalog-impl" not in properties and str(kind).lower() not in CATALOG_TYPES:
        r.fail(  # else every plan would fail at loading the catalog
            f"pipeline {p.name!r} names catalog type {kind!r}, which pyiceberg does not know; it must be one of "
            f"{', '.join(CATALOG_TYPES)} (or leave type out and give py-catalog-impl, a catalog class of your own)",
            "table.catalog_properties.type",
        )
    if table.embedded and "://" in p.output:
        r.fail(
            f"the embedded catalog keeps a SQLite file under the output root, and {p.output} is not a local path; name a "
            "catalog that lives elsewhere, such as the Glue Data Catalog: catalog_properties: {type: glue, glue.region: ...}",
            "table.catalog_properties",
        )


@dataclass(frozen=True)
class PipelineError:
    """One pipeline entry that is invalid: the others in the file still run."""

    index: int
    name: str | None  # None when the entry has no usable name
    message: str  # names the file and the key path, as every ConfigError does


@dataclass(frozen=True)
class LoadedConfig:
    """The valid pipelines of a config file, and an error for each invalid one."""

    pipelines: tuple[PipelineConfig, ...]
    errors: tuple[PipelineError, ...] = ()

    def error_for(self, name: str) -> str | None:
        return next((e.message for e in self.errors if e.name == name), None)

    def strict(self) -> tuple[PipelineConfig, ...]:
        """The pipelines, or a ConfigError naming every invalid one."""
        if self.errors:
            raise ConfigError("\n".join(e.message for e in self.errors))
        return self.pipelines


def parse_pipelines(data: object, source: str = "<config>") -> LoadedConfig:
    """Validate a loaded config document entry by entry; ``source`` names it in errors.

    What concerns the whole document (not a mapping, no ``pipelines`` list) raises ConfigError. An
    invalid entry is reported on its own, and so is a later entry that repeats an earlier one's name or
    whose output is the same root as an earlier one's, or inside it (or around it): the earlier one keeps
    running. So is a later entry whose table (outside the embedded catalog) is an earlier one's: the same catalog,
    namespace and name. Two pipelines must never replace each other's batches.
    """
    valid: dict[int, PipelineConfig] = {}
    errors: list[PipelineError] = []
    for i, (label, name, entry) in enumerate(entries(data, source, "pipelines")):
        try:
            r = Reader(source, label, entry, PipelineConfig)
            pipeline = r.read()
            validate(r, pipeline)
        except ConfigError as exc:
            errors.append(PipelineError(i, name, str(exc)))
            continue
        clash = next((j for j, other in valid.items() if other.name == pipeline.name), None)
        if clash is not None:
            message = f"{source}: pipelines[{i}].name: duplicate name {pipeline.name!r} (also pipelines[{clash}])"
            errors.append(PipelineError(i, None, message))
            continue
        shared = next((j for j, other in valid.items() if outputs_overlap(other.output, pipeline.output)), None)
        if shared is not None:
            other = valid[shared]
            same = output_key(other.output) == output_key(pipeline.output)
            errors.append(PipelineError(i, pipeline.name, (
                f"{source}: pipelines[{i}] ({pipeline.name}).output: {pipeline.output} is "
                f"{'the same root as' if same else 'inside, or around,'} the output {other.output} of pipeline "
                f"{other.name!r} (pipelines[{shared}]); each pipeline needs a root of its own, or their batches replace each other's"
            )))  # fmt: skip
            continue
        same_table = next((j for j, other in valid.items() if tables_clash(other, pipeline)), None)
        if same_table is not None:
            errors.append(PipelineError(i, pipeline.name, _table_clash(source, i, pipeline, same_table, valid[same_table])))
            continue
        valid[i] = pipeline
    return LoadedConfig(tuple(valid.values()), tuple(errors))


def tables_clash(a: PipelineConfig, b: PipelineConfig) -> bool:
    """Whether two pipelines would commit to one table (see TableConfig.key)."""
    return a.table is not None and b.table is not None and a.table.key is not None and a.table.key == b.table.key


def _table_clash(source: str, index: int, pipeline: PipelineConfig, other_index: int, other: PipelineConfig) -> str:
    """The error of a pipeline whose table is an earlier pipeline's: both pipelines, the table, and why they clash."""
    assert pipeline.table is not None  # only called for two pipelines whose tables clash
    defaulted = [p.name for p in (other, pipeline) if p.table is not None and p.table.name == default_table_name(p.name)]
    rule = f" ({' and '.join(map(repr, defaulted))}: table.name defaults to the pipeline's name, {DEFAULT_TABLE_RULE})" if defaulted else ""
    return (
        f"{source}: pipelines[{index}] ({pipeline.name}).table: pipeline {pipeline.name!r} would commit to "
        f"{pipeline.table.describe()}, which is already the table of pipeline {other.name!r} (pipelines[{other_index}]){rule}. "
        "Each pipeline needs a table of its own, or one would commit its batches into the other's table; set another "
        "table.name or table.namespace for one of them"
    )


def parse_config(data: object, source: str = "<config>") -> tuple[PipelineConfig, ...]:
    """Validate a loaded config document; any invalid entry is a ConfigError (see parse_pipelines for the lenient form)."""
    return parse_pipelines(data, source).strict()


def resolve_config_path(default: str | os.PathLike[str]) -> Path:
    """``$KINESIS_REPLAY_CONFIG`` if set, else ``default`` (the DAG factory passes dags/pipelines.yaml)."""
    return Path(os.environ.get(CONFIG_ENV) or default)


def load_config(path: str | os.PathLike[str]) -> tuple[PipelineConfig, ...]:
    """Read and validate a YAML pipelines config; any invalid entry is a ConfigError."""
    return load_pipelines(path).strict()


def load_pipelines(path: str | os.PathLike[str]) -> LoadedConfig:
    """Read a YAML pipelines config: the valid pipelines, and an error for each invalid one.

    An unreadable file, or one that is not YAML, raises ConfigError: it concerns every pipeline.
    """
    return parse_pipelines(load_yaml(path, "pipelines config"), source=str(Path(path)))


def options(kind: type = PipelineConfig, prefix: str = "") -> Iterator[tuple[str, Field[Any]]]:
    """Every documented key of a section, by its dotted path (``read.page_bytes``), with the field that declares it."""
    return documented(kind, prefix)


def reference_table() -> str:
    """docs/configuration.md's table of every key (key, default, meaning), rendered from the declarations above."""
    return key_table(PipelineConfig)


def with_reference_table(text: str) -> str:
    """``text`` (docs/configuration.md) with the block between its config-table markers replaced by ``reference_table()``."""
    return with_key_table(text, reference_table())


if __name__ == "__main__":  # make docs-config
    sys.exit(key_table_main(sys.argv[1:], reference_table(), "kinesis_replay.core.config"))
