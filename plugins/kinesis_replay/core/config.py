"""The pipelines config, validated into frozen dataclasses; every error names the file and the key."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, cast, get_args, get_type_hints

from kinesis_replay.core.airflow_names import AIRFLOW_DEFAULT_POOL, dag_ids
from kinesis_replay.core.ddl import not_null_columns, parse_ddl_schema, struct_fields
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.payloads import undecoded_columns
from kinesis_replay.core.records import PARTITION_COLUMN, ROW_COLUMNS
from kinesis_replay.core.roots import normalize_output, output_key, outputs_overlap, split_s3_uri

CONFIG_ENV = "KINESIS_REPLAY_CONFIG"
INITIAL_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# An Airflow pool's name: what `airflow pools set` and a shell accept unquoted, within the 256 characters Airflow stores.
_POOL = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_STREAM = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def doc(line: str, key: str | None = None, shown: str | None = None) -> dict[str, str | None]:
    """A config key's declaration, as a field's metadata: the one line docs/configuration.md's table gives it.

    Each key of the file is a field of a dataclass below, declared once: its type, its default (none: the key is
    required) and this line. ``key``: its name in the file when that is not the field's. ``shown``: the default as
    the table gives it, where no literal says it (``{default}`` stands for the literal). See ``reference_table``.
    """
    return {"doc": line, "key": key, "shown": shown}


@dataclass(frozen=True)
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

    max_records_per_call: int = field(default=10_000, metadata=doc("the largest GetRecords `Limit` (10,000 is the most Kinesis returns)"))
    page_bytes: int = field(
        default=2 * 1024 * 1024,
        metadata=doc(
            "each GetRecords asks for as many records as fill about this many bytes at the last page's mean record size, so a "
            "reader holds one page of about 2 MiB whatever the range's length (one second of a shard's read budget: it costs "
            "Kinesis throughput nothing)"
        ),
    )
    first_page_records: int = field(
        default=1_000, metadata=doc("the `Limit` of a range's first GetRecords, before any record size is known")
    )
    get_records_per_second: float = field(default=5.0, metadata=doc("per-shard budget of GetRecords calls"))
    bytes_per_second: float = field(default=2 * 1024 * 1024, metadata=doc("per-shard budget of bytes read (2 MB/s)"))
    get_shard_iterator_per_second: float = field(default=5.0, metadata=doc("per-shard budget of GetShardIterator calls"))
    max_throttle_retries: int = field(default=20, metadata=doc("throttled calls waited out per call before the batch fails"))
    throttle_base_seconds: float = field(default=0.2, metadata=doc("the first wait after a throttled call"))
    throttle_max_seconds: float = field(default=10.0, metadata=doc("the longest wait after a throttled call"))
    progress_seconds: float = field(default=30.0, metadata=doc("how often each shard's reader logs its progress"))
    # Shards planned (and checkpoints committed) at once. Each shard keeps to its own call budget; Kinesis limits
    # GetShardIterator and GetRecords per shard, not per stream, so this bounds only our own threads and connections.
    # A shard's plan mostly waits (its GetRecords calls are 0.2 s apart): at 32, 1,000 idle shards planned in 32
    # waves and used 42% of 2 cores; at 128 the plan is bound by the CPU (make bench-planning).
    plan_concurrency: int = field(
        default=128,
        metadata=doc(
            "shards planned, and checkpoints committed, at once (Kinesis limits calls per shard, so this bounds only our own "
            "threads and pooled connections; a shard's plan mostly waits for its budget)"
        ),
    )
    # Ranges one Spark task reads at once, each paced by its own shard's budget: a task mostly waits for budgets, so
    # one core can serve many shards (about ten at Kinesis's 2 MB/s). A task holds about two pages per range it reads.
    task_concurrency: int = field(
        default=16,
        metadata=doc(
            "ranges one Spark task reads at once, a thread each, each within its own shard's budget (a task holds about two "
            "pages per range it reads); see [Sizing executors against the stream](deployment.md#sizing-executors-against-the-stream)"
        ),
    )


# Kinesis takes at most 1 MiB a second into a shard: what a shard whose rate is not known yet is assumed to hold.
SHARD_WRITE_BYTES_PER_SECOND = 1024 * 1024


@dataclass(frozen=True)
class MaxBatch:
    """How much one batch may take from a shard; a range is capped at whichever limit comes first.

    ``span``: the arrival time its records may span, from its first record. ``read_minutes``: its estimated
    read time at the shard's read budget, turned into a span by the shard's write rate (measured on its last
    committed range, else Kinesis's per-shard write limit, the most it can hold). The capped range ends at the
    newest record that arrived before the cap; the rest is the next batch's.
    """

    span: timedelta = field(
        default=timedelta(hours=1),
        metadata=doc("the arrival time one range may span; see [Bounded batches and catch-up](design.md#bounded-batches-and-catch-up)"),
    )
    read_minutes: float = field(default=30.0, metadata=doc("one range's estimated read time at the read budget"))

    def span_for(self, bytes_per_second: float | None, read: ReadConfig) -> timedelta:
        """The arrival span a range of a shard writing ``bytes_per_second`` may cover."""
        rate = bytes_per_second if bytes_per_second and bytes_per_second > 0 else SHARD_WRITE_BYTES_PER_SECOND
        by_read_time = timedelta(seconds=self.read_minutes * 60 * read.bytes_per_second / rate)
        return min(self.span, by_read_time)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"30m"``, ``"1h"``, ``"2d"``, ``"500ms"`` as a timedelta; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 90s, 30m, 1h or 2d")
    try:
        return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any duration Python can hold ({timedelta.max.days:,} days)") from None


PAYLOAD_FORMATS = ("raw", "json")
# Columns every row carries; a JSON schema may not reuse their names.
RECORD_COLUMNS = (*(name for name, _ in ROW_COLUMNS), PARTITION_COLUMN)


@dataclass(frozen=True)
class PayloadConfig:
    """How payloads are decoded: kept as raw bytes, or parsed as JSON into the columns of a declared schema."""

    format: str = field(default="raw", metadata=doc("`raw` keeps payload bytes; `json` also decodes them into columns"))
    schema: str | None = field(
        default=None,
        metadata=doc(
            "required with `json`: a Spark DDL string such as `user STRING, amount DOUBLE` (no `NOT NULL`: nothing enforces it; "
            "a `DECIMAL`'s precision 1 to 38, its scale at most its precision)"
        ),
    )
    max_bad_share: float = field(default=0.05, metadata=doc("the batch fails when a larger share of its records cannot be decoded"))


@dataclass(frozen=True)
class EmrServerlessConfig:
    """Run the replay job as an EMR Serverless job run instead of through spark-submit.

    The job file, its Data Source, the library zip and the batch spec are uploaded under
    ``code_prefix`` (``s3://bucket/prefix``), one folder per batch.
    """

    application_id: str = field(metadata=doc("an existing SPARK application (EMR 7.x) that runs the job"))
    execution_role_arn: str = field(metadata=doc("the IAM role the job runs as (`arn:aws:iam::<account>:role/<name>`)"))
    code_prefix: str = field(metadata=doc("`s3://bucket/prefix` where each batch's job files are staged"))
    log_uri: str | None = field(default=None, metadata=doc("S3 prefix for driver and executor logs"))
    venv_archive: str | None = field(default=None, metadata=doc("S3 URI of a venv-pack archive holding the job's dependencies"))
    deferrable: bool = field(default=False, metadata=doc("wait in the triggerer; needs aiobotocore on Airflow's side"))
    poll_seconds: int = field(default=30, metadata=doc("how often the job run's state is polled"))


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


@dataclass(frozen=True)
class SparkConfig:
    master: str = field(
        default="local[*]",
        metadata=doc(
            "spark-submit's `--master`: `local[...]`, `spark://host:7077`, `yarn`, `k8s://...`; "
            "see [The JVM of a local job](#the-jvm-of-a-local-job)"
        ),
    )
    conf: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc("Spark properties, each passed as `--conf` (EMR Serverless: in `sparkSubmitParameters`, so no whitespace)"),
    )
    submit_timeout_seconds: int = field(
        default=6 * 3600, metadata=doc("the replay task's execution timeout; the job is killed when it expires")
    )
    emr_serverless: EmrServerlessConfig | None = field(
        default=None,
        metadata=doc(
            "set (instead of `spark.master`): EMR Serverless runs the job, not spark-submit; "
            "see [EMR Serverless](deployment.md#emr-serverless)"
        ),
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


@dataclass(frozen=True)
class TableConfig:
    """The Iceberg table a pipeline commits its batches to: a catalog, a namespace and a table name.

    ``catalog_properties`` are pyiceberg's own (``type``, ``uri``, ``warehouse``, ``glue.region``...), as its docs
    name them; empty means the embedded catalog: pyiceberg's SQL catalog on a SQLite file under the output root,
    which needs no server. The table's location is always the pipeline's output root.
    """

    name: str = field(
        metadata=doc(
            f"the table's name: {_IDENTIFIER_RULE}. Two pipelines may not name one table of a shared catalog (same catalog, "
            "namespace and name, in any case); each embedded catalog is its pipeline's own",
            shown=f"the pipeline's name with `-` as `_`, and `{DEFAULT_TABLE_PREFIX}` before a leading digit "
            f"(`2024-orders` → `{default_table_name('2024-orders')}`)",
        )
    )
    namespace: str = field(default=DEFAULT_NAMESPACE, metadata=doc(f"the table's namespace: {_IDENTIFIER_RULE}"))
    catalog: str = field(default=EMBEDDED_CATALOG, metadata=doc(f"the catalog's name: {_IDENTIFIER_RULE}"))
    catalog_properties: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "pyiceberg's catalog properties, as its docs name them", shown="{default} (the embedded SQL catalog under the output)"
        ),
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
OUTPUT_FORMAT = cast(
    "Field[str]",
    field(
        default=OUTPUT_FORMATS[0],
        metadata=doc(
            "`iceberg`: batches are committed to an Iceberg table (see [The table](table.md)); `directory`: plain "
            "`batch_id=<id>/` folders, read directly"
        ),
    ),
)


@dataclass(frozen=True)
class PipelineConfig:
    """One entry of the file's ``pipelines`` list; its sections (``spark``, ``read``...) are dataclasses of their own."""

    name: str = field(metadata=doc("a-z, 0-9, `_` and `-`, first a letter or digit, at most 64; the DAG id is `kinesis_replay_<name>`"))
    stream: str = field(metadata=doc("the Kinesis data stream's name (not its ARN)"))
    output: str = field(
        metadata=doc(
            "a path every Spark node and the Airflow worker see; `s3://...` needs a catalog other than the embedded one "
            "(see [The catalog](table.md#the-catalog))"
        )
    )
    schedule: str | None = field(metadata=doc("cron, a preset such as `@hourly`, or null (manual only)"))
    initial_position: str = field(
        metadata=doc(
            f"where a shard the pipeline has not read yet starts: {', '.join(f'`{p}`' for p in INITIAL_POSITIONS)} "
            "(a child of a split or merge always starts at its first record)"
        )
    )
    state_table: str = field(metadata=doc("DynamoDB table; created (on demand billing) if missing"))
    spark: SparkConfig
    initial_timestamp: datetime | None = field(default=None, metadata=doc("required with `AT_TIMESTAMP`, refused otherwise"))
    aws_conn_id: str = field(default="aws_default", metadata=doc("the Airflow connection every AWS client comes from"))
    retries: int = field(default=2, metadata=doc("task retries, with exponential backoff up to 30 minutes"))
    retry_delay_seconds: int = field(default=60, metadata=doc("the wait before the first retry; each later one waits longer"))
    read: ReadConfig = field(default_factory=ReadConfig)
    payload: PayloadConfig = field(default_factory=PayloadConfig)
    max_checkpoint_age_minutes: int = field(
        default=180, metadata=doc("the check task fails (and alerts) when a record waited longer without being committed")
    )
    max_batch: MaxBatch = field(default_factory=MaxBatch)
    pool_name: str | None = field(
        default=None,
        metadata=doc(
            "the Airflow pool (one slot) every replay of the pipeline, regular or backfill, waits for; create it with `airflow "
            "pools set` (see [Backfill within the read budget](operating.md#backfill-within-the-read-budget-one-pool-per-pipeline)). "
            "Pipelines that read the same stream should share one. `default_pool` is refused: it has many slots and is shared "
            "by every task",
            key="pool",
            shown=f"`{default_pool('<name>')}`",
        ),
    )
    # The Iceberg table the batches are committed to; None: output_format is directory (plain batch_id=<id> folders).
    table: TableConfig | None = None

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


def declared(kind: type) -> dict[str, Field[Any]]:
    """A section's keys, as the file names them, each with the field that declares it: the keys it allows."""
    keys: dict[str, Field[Any]] = {}
    for f in fields(kind):
        if kind is PipelineConfig and f.name == "table":
            keys["output_format"] = OUTPUT_FORMAT
        keys[f.metadata.get("key") or f.name] = f
    return keys


def _default(f: Field[Any]) -> Any:
    """A field's default; MISSING when the key is required."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _section(kind: Any) -> type | None:
    """The dataclass of a section (``read: ReadConfig``, ``table: TableConfig | None``); None for a plain key."""
    found = [t for t in (kind, *get_args(kind)) if isinstance(t, type) and is_dataclass(t)]
    return found[0] if found else None


def options(kind: type = PipelineConfig, prefix: str = "") -> Iterator[tuple[str, Field[Any]]]:
    """Every documented key of a section, by its dotted path (``read.page_bytes``), with the field that declares it."""
    hints = get_type_hints(kind)
    for key, f in declared(kind).items():
        section = _section(hints.get(f.name)) if f.name else None
        if section is None or "doc" in f.metadata:  # a section has a line of its own only when it says something
            yield prefix + key, f
        if section is not None:
            yield from options(section, f"{prefix}{key}.")


def _literal(value: object) -> str:
    """A default as the YAML file would spell it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        unit = next(u for u in ("d", "h", "m", "s", "ms") if (seconds / _UNITS[u]).is_integer())
        return f"{seconds / _UNITS[unit]:g}{unit}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def reference_table() -> str:
    """docs/configuration.md's table of every key (key, default, meaning), rendered from the declarations above."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, f in options():
        value = _default(f)
        literal = "(required)" if value is MISSING else "(none)" if value is None else f"`{_literal(value)}`"
        shown = f.metadata.get("shown")
        rows.append(f"| `{key}` | {shown.format(default=literal) if shown else literal} | {f.metadata.get('doc') or ''} |")
    return "\n".join(rows) + "\n"


REFERENCE_BEGIN, REFERENCE_END = "<!-- config-table:begin -->", "<!-- config-table:end -->"


def with_reference_table(text: str) -> str:
    """``text`` (docs/configuration.md) with the block between its config-table markers replaced by ``reference_table()``."""
    head, begin, rest = text.partition(REFERENCE_BEGIN)
    _, end, tail = rest.partition(REFERENCE_END)
    if not begin or not end:
        raise ValueError(f"no {REFERENCE_BEGIN} ... {REFERENCE_END} block to put the table in")
    return f"{head}{begin}\n{reference_table()}{end}{tail}"


class _Reader:
    """Reads one mapping of the config, naming each key by its full path in errors."""

    def __init__(self, source: str, path: str, data: object, kind: type) -> None:
        self.source, self.path = source, path
        if not isinstance(data, Mapping):
            self.fail(f"must be a mapping, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        self.keys = declared(kind)
        unknown = sorted(str(k) for k in self.data if k not in self.keys)
        if unknown:
            self.fail(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(self.keys))}")

    def get(self, key: str) -> Any:
        """The key's value, or its declared default (None for a required key)."""
        if key in self.data:
            return self.data[key]
        default = _default(self.keys[key])
        return None if default is MISSING else default

    def fail(self, message: str, key: str | None = None) -> NoReturn:
        where = f"{self.path}.{key}" if key else self.path
        raise ConfigError(f"{self.source}: {where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str, default: str | None = None, required: bool = True, padded: bool = False) -> str:
        """A string key's value; one with spaces around it is refused (``padded``: trimmed, for a text, not a name)."""
        if key not in self.data:
            default = self.get(key) if default is None else default
            if default is None and required:
                self.fail("is required", key)
            return default
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(f"must be a non-empty string, got {value!r}", key)
        if not padded:
            self.exact(value, key)
        return str(value).strip()

    def exact(self, value: str, key: str, what: str = "") -> None:
        """A name (of a pipeline, stream, table, connection, column...) with spaces around it is refused, not trimmed.

        Each name is matched exactly by whatever it names (an Airflow connection, a DynamoDB or Iceberg table, a JSON
        key), so a space around one is a typo that trimming would hide in one place and keep in the next. Releases before
        this one trimmed the config's names, so the trimmed spelling is the one the pipeline has always used.
        """
        if value != value.strip():
            self.fail(
                f"{what}{value!r} has spaces before or after it; names are matched exactly, so write it as {value.strip()!r} "
                "(the name earlier releases used: they trimmed it)",
                key,
            )

    def integer(self, key: str, minimum: int = 0) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(f"must be an integer >= {minimum}, got {value!r}", key)
        return int(value)

    def number(self, key: str) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            self.fail(f"must be a positive (finite) number, got {value!r}", key)
        return float(value)


def _parse_timestamp(r: _Reader, key: str) -> datetime:
    value = r.data[key]
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value)
        except ValueError:
            r.fail(f"must be an ISO 8601 timestamp with a time zone, got {value!r}", key)
    else:
        r.fail(f"must be an ISO 8601 timestamp with a time zone, got {value!r}", key)
    if ts.tzinfo is None:
        r.fail(f"must carry a time zone (for example 2026-01-01T00:00:00+00:00), got {value!r}", key)
    return ts


def _parse_pipeline(source: str, index: int, data: object) -> PipelineConfig:
    name_hint = data.get("name") if isinstance(data, Mapping) else None
    label = f"pipelines[{index}]" + (f" ({name_hint})" if isinstance(name_hint, str) else "")
    r = _Reader(source, label, data, PipelineConfig)
    for key in (k for k, f in r.keys.items() if _default(f) is MISSING):
        if not r.has(key):
            r.fail("is required", key)
    name = r.text("name")
    if not _NAME.match(name):
        r.fail(f"must match {_NAME.pattern} (it becomes part of the DAG id), got {name!r}", "name")
    schedule = r.data["schedule"]
    if schedule is not None and (not isinstance(schedule, str) or not schedule.strip()):
        r.fail(f"must be a cron expression, a preset such as @hourly, or null, got {schedule!r}", "schedule")
    position, timestamp = _parse_position(r)
    spark = _parse_spark(_Reader(source, f"{r.path}.spark", r.data["spark"], SparkConfig))
    read = _parse_read(_Reader(source, f"{r.path}.read", r.data.get("read") or {}, ReadConfig))
    payload = _parse_payload(_Reader(source, f"{r.path}.payload", r.data.get("payload") or {}, PayloadConfig))
    try:
        output = normalize_output(r.text("output"))
    except ValueError as exc:
        r.fail(str(exc), "output")
    pool = r.text("pool", required=False) if r.has("pool") else None
    if pool is not None and not _POOL.match(pool):
        r.fail(f"must be an Airflow pool name of letters, digits, '_', '.' and '-' (at most 256), got {pool!r}", "pool")
    if pool == AIRFLOW_DEFAULT_POOL:
        r.fail(
            f"must be a pool of kinesis-replay's own: {AIRFLOW_DEFAULT_POOL} is shared by every task and has many slots, "
            "so several replays would read the same shards at once, each at the full read budget",
            "pool",
        )
    return PipelineConfig(
        name=name,
        stream=_stream_name(r),
        output=output,
        schedule=schedule.strip() if isinstance(schedule, str) else None,
        initial_position=position,
        initial_timestamp=timestamp,
        state_table=r.text("state_table"),
        spark=spark,
        aws_conn_id=r.text("aws_conn_id"),
        retries=r.integer("retries"),
        retry_delay_seconds=r.integer("retry_delay_seconds", minimum=1),
        read=read,
        payload=payload,
        max_checkpoint_age_minutes=r.integer("max_checkpoint_age_minutes", minimum=1),
        max_batch=_parse_max_batch(_Reader(source, f"{r.path}.max_batch", r.data.get("max_batch") or {}, MaxBatch)),
        pool_name=pool,
        table=_parse_table(r, name, output),
    )


def _parse_table(r: _Reader, pipeline_name: str, output: str) -> TableConfig | None:
    """output_format (iceberg unless the pipeline says directory) and its table: catalog, namespace, name."""
    output_format = r.text("output_format").lower()
    if output_format not in OUTPUT_FORMATS:
        r.fail(f"must be one of {', '.join(OUTPUT_FORMATS)}, got {r.data['output_format']!r}", "output_format")
    if output_format == "directory":
        if r.has("table"):
            r.fail("is only allowed with output_format iceberg (a directory output has no table)", "table")
        return None
    t = _Reader(r.source, f"{r.path}.table", r.data.get("table") or {}, TableConfig)
    names = {}
    for key in ("name", "namespace", "catalog"):
        default = default_table_name(pipeline_name) if key == "name" else t.get(key)
        value = t.text(key, default=default)
        if not _IDENTIFIER.match(value):
            # Only a value the pipeline wrote gets here: every default is a valid identifier.
            hint = f"; leave it out for the default, {default!r}" if key == "name" else ""
            t.fail(
                f"pipeline {pipeline_name!r} names {value!r}, which is not an identifier: it must be letters, digits and '_', "
                f"starting with a letter or '_' (Glue and Athena accept no more){hint}",
                key,
            )
        names[key] = value
    properties = t.data.get("catalog_properties") or {}
    if not isinstance(properties, Mapping):
        t.fail(f"must be a mapping of pyiceberg catalog properties (type, uri, warehouse, glue.region...), got {properties!r}",
               "catalog_properties")  # fmt: skip
    for k, v in properties.items():
        if not isinstance(k, str) or isinstance(v, (Mapping, list)) or v is None:
            t.fail(f"{k!r} must be a scalar property, got {v!r}", "catalog_properties")
        t.exact(k, "catalog_properties", "the property ")
    _check_catalog_type(t, pipeline_name, properties)
    if not properties and "://" in output:
        t.fail(
            f"the embedded catalog keeps a SQLite file under the output root, and {output} is not a local path; name a "
            "catalog that lives elsewhere, such as the Glue Data Catalog: catalog_properties: {type: glue, glue.region: ...}",
            "catalog_properties",
        )
    text_properties = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in properties.items()}
    return TableConfig(names["name"], names["namespace"], names["catalog"], text_properties)


def _check_catalog_type(t: _Reader, pipeline_name: str, properties: Mapping[str, Any]) -> None:
    """catalog_properties.type, when given, is one pyiceberg knows: else every plan would fail at loading the catalog."""
    kind = properties.get("type")
    if kind is not None and "py-catalog-impl" not in properties and str(kind).lower() not in CATALOG_TYPES:
        t.fail(
            f"pipeline {pipeline_name!r} names catalog type {kind!r}, which pyiceberg does not know; it must be one of "
            f"{', '.join(CATALOG_TYPES)} (or leave type out and give py-catalog-impl, a catalog class of your own)",
            "catalog_properties.type",
        )


def _stream_name(r: _Reader) -> str:
    """A Kinesis data stream's name, as Kinesis allows it: 1 to 128 of letters, digits, '_', '.' and '-'."""
    stream = r.text("stream")
    if not _STREAM.match(stream):
        r.fail(f"must be a Kinesis stream name (1 to 128 letters, digits, '_', '.' and '-'; not an ARN), got {stream!r}", "stream")
    return stream


def _parse_max_batch(r: _Reader) -> MaxBatch:
    span: timedelta = r.get("span")
    if r.has("span"):
        try:
            span = parse_duration(str(r.data["span"]))
        except ValueError as exc:
            r.fail(str(exc), "span")
        if span <= timedelta(0):
            r.fail(f"must be longer than 0, got {r.data['span']!r}", "span")
    return MaxBatch(span=span, read_minutes=r.number("read_minutes"))


def _parse_position(r: _Reader) -> tuple[str, datetime | None]:
    """initial_position, and initial_timestamp, which AT_TIMESTAMP needs and nothing else allows."""
    position = r.text("initial_position").upper()
    if position not in INITIAL_POSITIONS:
        r.fail(f"must be one of {', '.join(INITIAL_POSITIONS)}, got {r.data['initial_position']!r}", "initial_position")
    if position == "AT_TIMESTAMP":
        if not r.has("initial_timestamp"):
            r.fail("is required when initial_position is AT_TIMESTAMP", "initial_timestamp")
        return position, _parse_timestamp(r, "initial_timestamp")
    if r.has("initial_timestamp"):
        r.fail(f"is only allowed with initial_position AT_TIMESTAMP, not {position}", "initial_timestamp")
    return position, None


def _parse_spark(spark: _Reader) -> SparkConfig:
    conf = spark.data.get("conf") or {}
    if not isinstance(conf, Mapping):
        spark.fail(f"must be a mapping of Spark properties, got {type(conf).__name__}", "conf")
    for k, v in conf.items():
        if not isinstance(k, str) or not k.startswith("spark."):
            spark.fail(f"keys must be Spark properties starting with 'spark.', got {k!r}", "conf")
        spark.exact(k, "conf", "the property ")
        if isinstance(v, (Mapping, list)) or v is None:
            spark.fail(f"{k} must be a scalar, got {v!r}", "conf")
    emr = None
    if spark.has("emr_serverless"):
        if spark.has("master"):
            spark.fail("give either master (spark-submit) or emr_serverless, not both", "emr_serverless")
        emr = _parse_emr(_Reader(spark.source, f"{spark.path}.emr_serverless", spark.data["emr_serverless"], EmrServerlessConfig))
        for k, v in conf.items():
            if any(c.isspace() for c in f"{k}{v}"):
                spark.fail(
                    f"{k}: EMR Serverless splits sparkSubmitParameters on whitespace and has no quoting, so it cannot pass "
                    f"{v!r}; set it in the application's runtimeConfiguration (spark-defaults) instead",
                    "conf",
                )
    return SparkConfig(
        master=spark.text("master"),
        conf={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
        submit_timeout_seconds=spark.integer("submit_timeout_seconds", minimum=1),
        emr_serverless=emr,
    )


def _parse_read(read: _Reader) -> ReadConfig:
    read_config = ReadConfig(
        max_records_per_call=read.integer("max_records_per_call", minimum=1),
        page_bytes=read.integer("page_bytes", minimum=1),
        first_page_records=read.integer("first_page_records", minimum=1),
        get_records_per_second=read.number("get_records_per_second"),
        bytes_per_second=read.number("bytes_per_second"),
        get_shard_iterator_per_second=read.number("get_shard_iterator_per_second"),
        max_throttle_retries=read.integer("max_throttle_retries"),
        throttle_base_seconds=read.number("throttle_base_seconds"),
        throttle_max_seconds=read.number("throttle_max_seconds"),
        progress_seconds=read.number("progress_seconds"),
        plan_concurrency=read.integer("plan_concurrency", minimum=1),
        task_concurrency=read.integer("task_concurrency", minimum=1),
    )
    if read_config.max_records_per_call > 10_000:
        read.fail("must be at most 10000 (the most GetRecords returns)", "max_records_per_call")
    return read_config


def _parse_emr(e: _Reader) -> EmrServerlessConfig:
    def s3_uri(key: str, required: bool) -> str | None:
        if not e.has(key) and not required:
            return None
        uri = e.text(key)
        try:
            split_s3_uri(uri, "the value")
        except ConfigError as exc:
            e.fail(str(exc), key)
        return uri.rstrip("/")

    role = e.text("execution_role_arn")
    if not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:role/", role):
        e.fail(f"must be an IAM role ARN (arn:aws:iam::<account>:role/<name>), got {role!r}", "execution_role_arn")
    deferrable = e.get("deferrable")
    if not isinstance(deferrable, bool):
        e.fail(f"must be true or false, got {deferrable!r}", "deferrable")
    return EmrServerlessConfig(
        application_id=e.text("application_id"),
        execution_role_arn=role,
        code_prefix=s3_uri("code_prefix", required=True),  # type: ignore[arg-type]
        log_uri=s3_uri("log_uri", required=False),
        venv_archive=s3_uri("venv_archive", required=False),
        deferrable=deferrable,
        poll_seconds=e.integer("poll_seconds", minimum=1),
    )


def _check_schema(p: _Reader, schema: str) -> None:
    """payload.schema is a Spark DDL schema the replay can decode and write, and promises nothing it does not keep."""
    try:
        struct = parse_ddl_schema(schema)
    except ValueError as exc:
        p.fail(f"is not a Spark DDL schema ({exc}), such as 'user STRING, amount DOUBLE, tags ARRAY<STRING>'", "schema")
    for where, name in struct_fields(struct):
        p.exact(name, "schema", f'column "{where}": its name ')
    required = not_null_columns(schema)
    if required:
        columns = ", ".join(f'"{c}"' for c in required)
        p.fail(
            f"declares column(s) {columns} NOT NULL, which the replay does not enforce: a record that lacks such a value, "
            "or holds null, lands with a null there, as Spark's from_json reads it. Remove NOT NULL (the rows landed so "
            "far were read the same way)",
            "schema",
        )
    clashes = sorted({name.lower() for name, _ in struct.children} & set(RECORD_COLUMNS))
    if clashes:
        p.fail(f"names column(s) {', '.join(clashes)}, which every row already carries", "schema")
    refused = undecoded_columns(struct)
    if refused:
        listed = "; ".join(refused)
        p.fail(f"has types no JSON payload is decoded into: {listed}; declare STRING to keep such a value's JSON text", "schema")


def _parse_payload(p: _Reader) -> PayloadConfig:
    fmt = p.text("format").lower()
    if fmt not in PAYLOAD_FORMATS:
        p.fail(f"must be one of {', '.join(PAYLOAD_FORMATS)}, got {p.data['format']!r}", "format")
    schema = p.text("schema", required=False, padded=True) if p.has("schema") else None  # a DDL text (`schema: |` ends in a newline)
    if fmt == "json" and schema is None:
        p.fail("is required when format is json (a Spark DDL string, such as 'user STRING, amount DOUBLE')", "schema")
    if fmt == "raw" and schema is not None:
        p.fail("is only allowed with format json", "schema")
    if schema is not None:
        _check_schema(p, schema)
    share = p.get("max_bad_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        p.fail(f"must be a number from 0 to 1, got {share!r}", "max_bad_share")
    return PayloadConfig(format=fmt, schema=schema, max_bad_share=float(share))


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
    if not isinstance(data, Mapping) or "pipelines" not in data:
        raise ConfigError(f"{source}: the top level must be a mapping with a 'pipelines' list")
    unknown = sorted(str(k) for k in data if k != "pipelines")
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {', '.join(unknown)}; only 'pipelines' is allowed")
    entries = data["pipelines"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{source}: pipelines must be a non-empty list of mappings")
    valid: dict[int, PipelineConfig] = {}
    errors: list[PipelineError] = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, Mapping) and isinstance(entry.get("name"), str) else None
        try:
            pipeline = _parse_pipeline(source, i, entry)
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
    import yaml  # PyYAML comes with Airflow; imported here so the pure parser needs nothing

    config_path = Path(path)
    try:
        text = config_path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read pipelines config {config_path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{config_path}: not valid YAML: {exc}") from exc
    return parse_pipelines(data, source=str(config_path))


def main(argv: list[str]) -> int:
    """``--reference``: print docs/configuration.md's table of keys; ``--write FILE``: put it in FILE (``make docs-config``)."""
    if argv[:1] == ["--reference"] and len(argv) == 1:
        print(reference_table(), end="")
        return 0
    if argv[:1] == ["--write"] and len(argv) == 2:
        doc_path = Path(argv[1])
        doc_path.write_text(with_reference_table(doc_path.read_text()))
        return 0
    print("usage: python -m kinesis_replay.core.config --reference | --write docs/configuration.md", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
