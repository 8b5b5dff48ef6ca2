"""The pipelines config: each key declared once (type, default, bounds, doc line), read by core/options.py; errors name file and key."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kinesis_replay.core.airflow_names import AIRFLOW_DEFAULT_POOL, dag_ids

# The sections' own modules; their names are config's as well, where the rest of the project imports them.
from kinesis_replay.core.config_read import SHARD_WRITE_BYTES_PER_SECOND as SHARD_WRITE_BYTES_PER_SECOND
from kinesis_replay.core.config_read import MaxBatch as MaxBatch
from kinesis_replay.core.config_read import ReadConfig as ReadConfig
from kinesis_replay.core.config_spark import DEFAULT_SPARK_CONF as DEFAULT_SPARK_CONF
from kinesis_replay.core.config_spark import EmrServerlessConfig as EmrServerlessConfig
from kinesis_replay.core.config_spark import SparkConfig as SparkConfig
from kinesis_replay.core.config_table import CATALOG_TYPES as CATALOG_TYPES
from kinesis_replay.core.config_table import DEFAULT_TABLE_RULE, IDENTIFIER, default_table_name
from kinesis_replay.core.config_table import TableConfig as TableConfig
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
from kinesis_replay.core.roots import normalize_output, output_key, outputs_overlap
from kinesis_replay.core.streams import check_stream, consumer_stream_refusal

CONFIG_ENV = "KINESIS_REPLAY_CONFIG"
INITIAL_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# An Airflow pool's name: what `airflow pools set` and a shell accept unquoted, within the 256 characters Airflow stores.
_POOL = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")


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


def _renamed_from(value: object) -> dict[str, str]:
    """payload.renamed_from: a mapping of column names, each new one to its old one; what payload.schema must then say is
    validate()'s (_validate_renames)."""
    renames = value or {}
    if not isinstance(renames, Mapping):
        raise ValueError(f"must be a mapping of a column's new name to its old one, such as {{amount_eur: amount}}, got {renames!r}")
    for new, old in renames.items():
        if not isinstance(new, str) or not isinstance(old, str) or not new or not old:
            raise ValueError(f"{new!r}: {old!r}: each entry maps a column's new name to its old name, both names")
        exact(new, "the column name ")
        exact(old, "the column name ")
        if new == old:
            raise ValueError(f"{new!r} is renamed from itself; leave it out")
    olds = list(renames.values())
    twice = sorted({old for old in olds if olds.count(old) > 1})
    if twice:
        raise ValueError(f"names {', '.join(repr(o) for o in twice)} as the old name of more than one column: a column is renamed once")
    return dict(renames)


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
    next_schema: str | None = option(
        "with `json`: the schema a rebuild decodes with (a Spark DDL string, as `schema`), for a change Iceberg cannot make "
        "in place, such as `amount` from `INT` to `STRING`: the backfill DAG's `rebuild` re-decodes the committed batches "
        "with it while regular batches keep landing, then switches the table to it in one snapshot; from then on every "
        "batch decodes with it (see [Rebuilding the table](operating.md#we-changed-a-type))",
        default=None,
        padded=True,
        check=_check_schema,
    )
    renamed_from: Mapping[str, str] = option(
        "columns of `payload.schema` renamed, each new name to its old one (`{amount_eur: amount}`): the table's column is "
        "renamed, and its rows landed before keep their values under the new name (see [Schema changes](table.md#schema-changes))",
        default_factory=dict,
        parse=_renamed_from,
    )


def rebuilt(pipeline: PipelineConfig) -> PipelineConfig:
    """The pipeline as it decodes once its table is rebuilt: payload.next_schema as its payload.schema (itself, with none).
    A rebuild's replays decode so before the switch, and every task after it (steps/rebuild.as_decoded)."""
    payload = pipeline.payload
    if payload.next_schema is None:
        return pipeline
    return replace(pipeline, payload=replace(payload, schema=payload.next_schema, next_schema=None))


# The two layouts of a pipeline's output: an Apache Iceberg table (the default), or today's plain directories.
OUTPUT_FORMATS = ("iceberg", "directory")


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
        "the Kinesis data stream's name, or its ARN (`arn:aws:kinesis:<region>:<account>:stream/<name>`): with an ARN every "
        "Kinesis call names the stream by it, the stream may be in another account, and its region is the ARN's (a "
        "connection naming another region is refused); see [Streams in other accounts](deploy-aws.md#streams-in-other-accounts)",
        check=check_stream,
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
    stream_conn_id: str | None = option(
        "the Airflow connection the stream's Kinesis clients come from, the DAG's and the replay job's, when it is not "
        "`aws_conn_id`'s: for a stream in another account, a connection whose `role_arn` is a role of that account (see "
        "[Streams in other accounts](deploy-aws.md#streams-in-other-accounts))",
        default=None,
        shown="`aws_conn_id`",
    )
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
    def kinesis_conn_id(self) -> str:
        """The Airflow connection of the stream's Kinesis clients: ``stream_conn_id``, else ``aws_conn_id``."""
        return self.stream_conn_id or self.aws_conn_id

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
    if p.payload.next_schema is not None:
        _validate_next_schema(r, p.payload)
    if p.payload.renamed_from:
        _validate_renames(r, p.payload)
    if p.spark.emr_serverless is not None:
        _validate_emr(r, r.data["spark"])
    if p.table is None and r.has("table"):
        r.fail("is only allowed with output_format iceberg (a directory output has no table)", "table")
    _validate_consumer(r, p)
    if p.table is not None:
        _validate_table(r, p, p.table)


def _validate_consumer(r: Reader[PipelineConfig], p: PipelineConfig) -> None:
    """A consumer's ARN names its stream, which must be the pipeline's; and with enhanced fan-out a speculative task would
    take its original's subscriptions over (docs/design.md, "Reading over enhanced fan-out")."""
    consumer = p.read.consumer
    if consumer is None:
        return
    refused = consumer_stream_refusal(consumer, p.stream)
    if refused is not None:
        r.fail(refused, "read.consumer")
    if str(p.spark.conf.get("spark.speculation", "false")).strip().lower() == "true":
        r.fail(
            "spark.speculation is true, and read.consumer reads over enhanced fan-out, where a speculative copy of a task "
            "takes its original's subscriptions over: leave spark.speculation false for this pipeline",
            "spark.conf",
        )


def _validate_next_schema(r: Reader[PipelineConfig], payload: PayloadConfig) -> None:
    """payload.next_schema replaces payload.schema once a rebuild switches the table: another JSON schema."""
    if payload.format != "json" or payload.schema is None:
        r.fail("is only allowed with format json and a payload.schema, which it replaces once the table is rebuilt", "payload.next_schema")
    elif payload.next_schema == payload.schema:
        r.fail("is payload.schema itself: leave it out (a rebuild decodes with a schema other than the table's)", "payload.next_schema")


def _validate_renames(r: Reader[PipelineConfig], payload: PayloadConfig) -> None:
    """Each new name of payload.renamed_from is a column of payload.schema, and no old one is: the rename takes the old name
    away (the table's column is renamed, and the rows landed under it read under the new name)."""
    if payload.schema is None:
        r.fail("is only allowed with format json and a payload.schema, whose columns it renames", "payload.renamed_from")
    columns = [name for name, _ in parse_ddl_schema(payload.schema).children]  # _check_schema parsed it already
    for new, old in payload.renamed_from.items():
        if new not in columns:
            r.fail(f"renames {old!r} to {new!r}, which is not a top-level column of payload.schema ({', '.join(columns)})",
                   "payload.renamed_from")  # fmt: skip
        if old in columns:
            r.fail(
                f"renames {old!r} to {new!r}, and payload.schema still declares {old!r}: a renamed column is the new name's "
                f"only. Drop {old!r} from payload.schema, or this entry to keep both as two columns",
                "payload.renamed_from",
            )
        if old.lower() in RECORD_COLUMNS:
            r.fail(f"renames {old!r}, a column every row carries: only payload.schema's columns are renamed", "payload.renamed_from")


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
    for key in ("name", "namespace", "catalog", "quarantine_name"):
        value = getattr(table, key)
        if value is not None and not IDENTIFIER.match(value):  # only a value the pipeline wrote: every default is an identifier
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
    """Whether two pipelines would commit to one table (see TableConfig.key), their own or their quarantine tables."""
    return a.table is not None and b.table is not None and bool(set(a.table.keys()) & set(b.table.keys()))


def _table_clash(source: str, index: int, pipeline: PipelineConfig, other_index: int, other: PipelineConfig) -> str:
    """The error of a pipeline whose table is an earlier pipeline's: both pipelines, the table, and why they clash."""
    assert pipeline.table is not None  # only called for two pipelines whose tables clash
    defaulted = [p.name for p in (other, pipeline) if p.table is not None and p.table.name == default_table_name(p.name)]
    rule = f" ({' and '.join(map(repr, defaulted))}: table.name defaults to the pipeline's name, {DEFAULT_TABLE_RULE})" if defaulted else ""
    mine, theirs = _clashing_tables(pipeline, other)
    return (
        f"{source}: pipelines[{index}] ({pipeline.name}).table: pipeline {pipeline.name!r} would commit to "
        f"{mine}, which is already {theirs} of pipeline {other.name!r} (pipelines[{other_index}]){rule}. "
        "Each pipeline needs tables of its own (its table and its quarantine table), or one would commit its batches "
        "into the other's; set another table.name, table.quarantine_name or table.namespace for one of them"
    )


def _clashing_tables(pipeline: PipelineConfig, other: PipelineConfig) -> tuple[str, str]:
    """Which of ``pipeline``'s two tables is which of ``other``'s: ``(table x in catalog c (glue), "the quarantine table")``."""
    assert pipeline.table is not None and other.table is not None  # only called for two pipelines whose tables clash
    own, quarantine = pipeline.table.keys()
    theirs = dict(zip(other.table.keys(), ("the table", "the quarantine table"), strict=True))
    if own in theirs:
        return pipeline.table.describe(), theirs[own]
    return pipeline.table.describe_quarantine() + " (its quarantine table)", theirs[quarantine]


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
