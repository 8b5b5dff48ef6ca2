"""The pipelines config: defaults, and an error naming the key for every kind of mistake."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.core.airflow_names import pool_set_command
from kinesis_replay.core.config import (
    REFERENCE_BEGIN,
    REFERENCE_END,
    ConfigError,
    load_config,
    options,
    parse_config,
    parse_pipelines,
    reference_table,
    resolve_config_path,
    with_reference_table,
)
from kinesis_replay.core.roots import normalize_output, outputs_overlap

CONFIGURATION_MD = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

VALID: dict[str, Any] = {
    "pipelines": [
        {
            "name": "orders",
            "stream": "orders-stream",
            "output": "/data/orders/",
            "schedule": "@hourly",
            "initial_position": "TRIM_HORIZON",
            "state_table": "kr-state",
            "spark": {"master": "local[2]", "conf": {"spark.executor.memory": "2g", "spark.ui.enabled": False}},
        }
    ]
}


def config(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is None and key != "schedule":
            del data["pipelines"][0][key]
        else:
            data["pipelines"][0][key] = value
    return data


def test_a_valid_pipeline_gets_safe_defaults() -> None:
    (p,) = parse_config(VALID)
    assert p.dag_id == "kinesis_replay_orders"
    assert p.output == "/data/orders"  # no trailing slash: paths are derived from it
    assert p.aws_conn_id == "aws_default" and p.retries == 2
    assert p.read.max_records_per_call == 10_000
    assert p.spark.conf == {"spark.executor.memory": "2g", "spark.ui.enabled": "false"}


def test_a_budget_reads_as_a_float_where_its_default_is_written_as_an_int() -> None:
    # bytes_per_second's default is 2 * 1024 * 1024; the job spec carries it to Spark as the float every given value is.
    (p,) = parse_config(VALID)
    assert isinstance(p.read.bytes_per_second, float) and p.read.bytes_per_second == 2 * 1024 * 1024
    (given,) = parse_config(config(read={"bytes_per_second": 1024}))
    assert isinstance(given.read.bytes_per_second, float)


def test_the_rules_between_keys_are_checked_once_each_key_has_passed_its_own() -> None:
    """A key refused by its own declaration is named for that first; the rule between keys comes after (validate)."""
    with pytest.raises(ConfigError, match=r"initial_timestamp: must carry a time zone"):
        parse_config(config(initial_position="LATEST", initial_timestamp="2026-01-01T00:00:00"))
    with pytest.raises(ConfigError, match=r"initial_timestamp: is only allowed with initial_position AT_TIMESTAMP, not LATEST"):
        parse_config(config(initial_position="LATEST", initial_timestamp="2026-01-01T00:00:00+00:00"))


@pytest.mark.parametrize("key", ["name", "stream", "output", "schedule", "initial_position", "state_table", "spark"])
def test_a_missing_required_key_is_named(key: str) -> None:
    data = copy.deepcopy(VALID)
    del data["pipelines"][0][key]
    with pytest.raises(ConfigError, match=rf"pipelines\[0\].*{key}: is required"):
        parse_config(data, "p.yaml")


def test_replays_take_turns_in_a_pool_of_the_pipeline_unless_another_is_named() -> None:
    assert parse_config(VALID)[0].pool == "kinesis_replay_orders"
    # Pipelines that read the same stream may share one pool: the shards' read limits are the stream's.
    assert parse_config(config(pool="stream-orders.replays"))[0].pool == "stream-orders.replays"


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("", "must be a non-empty string"),
        ("two words", "must be an Airflow pool name"),
        ("default_pool", "must be a pool of kinesis-replay.s own: default_pool is shared by every task"),
    ],
)
def test_a_pool_that_cannot_hold_the_replays_to_the_budget_is_refused(pool: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"pipelines\[0\] \(orders\)\.pool: {message}"):
        parse_config(config(pool=pool))


def test_the_pool_command_creates_one_slot_that_counts_deferred_replays() -> None:
    assert pool_set_command(["b", "a", "b"]) == (
        "airflow pools set a 1 'kinesis-replay: one replay at a time' --include-deferred && "
        "airflow pools set b 1 'kinesis-replay: one replay at a time' --include-deferred"
    )


def test_an_unknown_key_is_an_error_not_ignored() -> None:
    with pytest.raises(ConfigError, match=r"pipelines\[0\] \(orders\): unknown key\(s\) shcedule"):
        parse_config(config(shcedule="@daily"))


def test_an_unknown_initial_position_is_named() -> None:
    with pytest.raises(ConfigError, match="initial_position: must be one of TRIM_HORIZON, LATEST, AT_TIMESTAMP, got 'EARLIEST'"):
        parse_config(config(initial_position="EARLIEST"))


def test_duplicate_pipeline_names_are_an_error() -> None:
    data = copy.deepcopy(VALID)
    data["pipelines"].append(copy.deepcopy(data["pipelines"][0]))
    with pytest.raises(ConfigError, match=r"pipelines\[1\].name: duplicate name 'orders' \(also pipelines\[0\]\)"):
        parse_config(data)


def test_at_timestamp_requires_a_time_zone_aware_timestamp() -> None:
    with pytest.raises(ConfigError, match="initial_timestamp: is required when initial_position is AT_TIMESTAMP"):
        parse_config(config(initial_position="AT_TIMESTAMP"))
    with pytest.raises(ConfigError, match="must carry a time zone"):
        parse_config(config(initial_position="AT_TIMESTAMP", initial_timestamp="2026-01-01T00:00:00"))
    (p,) = parse_config(config(initial_position="at_timestamp", initial_timestamp="2026-01-01T00:00:00+00:00"))
    assert p.initial_position == "AT_TIMESTAMP" and p.initial_timestamp is not None


def test_initial_timestamp_without_at_timestamp_is_an_error() -> None:
    with pytest.raises(ConfigError, match="only allowed with initial_position AT_TIMESTAMP"):
        parse_config(config(initial_timestamp="2026-01-01T00:00:00+00:00"))


def test_a_name_that_cannot_be_part_of_a_dag_id_is_refused() -> None:
    with pytest.raises(ConfigError, match="name: must match"):
        parse_config(config(name="Orders Stream"))


def test_spark_conf_keys_must_be_spark_properties() -> None:
    with pytest.raises(ConfigError, match=r"spark.conf: keys must be Spark properties"):
        parse_config(config(spark={"master": "local[2]", "conf": {"executor.memory": "2g"}}))


def test_read_limits_above_kinesis_own_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"read\.max_records_per_call: must be at most 10000"):
        parse_config(config(read={"max_records_per_call": 20_000}))


@pytest.mark.parametrize(
    "consumer", ["kinesis-replay-orders", "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/replay:1795936348"]
)
def test_a_consumer_is_a_name_or_the_arn_of_a_consumer_of_the_pipelines_stream(consumer: str) -> None:
    (pipeline,) = parse_config(config(stream="orders", read={"consumer": consumer}))
    assert pipeline.read.consumer == consumer


@pytest.mark.parametrize(
    ("read", "spark", "refused"),
    [
        ({"consumer": "a consumer"}, {}, r"read\.consumer: must be a Kinesis stream consumer's name"),
        ({"consumer": "arn:aws:kinesis:us-east-1:123456789012:stream/other/consumer/replay:1"}, {},
         r"read\.consumer: is a consumer of stream 'other', not of the pipeline's stream 'orders'"),
        ({"consumer": "replay"}, {"master": "local[2]", "conf": {"spark.speculation": "true"}},
         r"spark\.conf: spark\.speculation is true, and read\.consumer reads over enhanced fan-out"),
    ],
)  # fmt: skip
def test_a_consumer_that_cannot_work_is_refused(read: dict[str, Any], spark: dict[str, Any], refused: str) -> None:
    with pytest.raises(ConfigError, match=refused):
        parse_config(config(stream="orders", read=read, **({"spark": spark} if spark else {})))


def test_the_top_level_must_be_a_pipelines_list() -> None:
    with pytest.raises(ConfigError, match="top level must be a mapping with a 'pipelines' list"):
        parse_config([VALID])
    with pytest.raises(ConfigError, match="non-empty list"):
        parse_config({"pipelines": []})


def test_load_config_names_the_file_for_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "pipelines.yaml"
    path.write_text("pipelines: [\n")
    with pytest.raises(ConfigError, match=f"{path}: not valid YAML"):
        load_config(path)


def test_load_config_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read pipelines config .*missing\.yaml"):
        load_config(tmp_path / "missing.yaml")


def test_the_environment_variable_overrides_the_default_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINESIS_REPLAY_CONFIG", raising=False)
    assert resolve_config_path("dags/pipelines.yaml") == Path("dags/pipelines.yaml")
    monkeypatch.setenv("KINESIS_REPLAY_CONFIG", "/etc/kr.yaml")
    assert resolve_config_path("dags/pipelines.yaml") == Path("/etc/kr.yaml")


def test_the_shipped_config_is_valid() -> None:
    (p,) = load_config(Path(__file__).resolve().parents[2] / "dags" / "pipelines.yaml")
    assert p.name == "demo"


def test_spark_runs_locally_unless_a_master_is_named() -> None:
    (p,) = parse_config(config(spark={}))
    assert p.spark.master == "local[*]" and p.spark.conf == {}


def test_payloads_are_raw_bytes_unless_json_is_chosen() -> None:
    (p,) = parse_config(VALID)
    assert (p.payload.format, p.payload.schema, p.payload.max_bad_share) == ("raw", None, 0.05)


def test_json_payloads_need_a_schema() -> None:
    with pytest.raises(ConfigError, match=r"payload\.schema: is required when format is json"):
        parse_config(config(payload={"format": "json"}))


def test_a_json_schema_may_not_reuse_record_columns() -> None:
    with pytest.raises(ConfigError, match=r"names column.s. data, shard_id, which every row already carries"):
        parse_config(config(payload={"format": "json", "schema": "shard_id STRING, `data` BINARY, amount DOUBLE"}))


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ("v VARIANT", 'column "v": VARIANT'),
        ("code CHAR(3)", 'column "code": CHAR(3)'),
        ("at TIME", 'column "at": TIME'),
        ("n INT, s STRUCT<d: INTERVAL DAY>", 'column "s.d": INTERVAL DAY'),
        ("m MAP<INT, STRING>", "a MAP's keys must be STRING"),
        ("a ARRAY<VOID>", 'column "a.element": VOID'),
    ],
)
def test_a_json_schema_with_a_type_no_payload_decodes_into_is_refused_by_name(schema: str, named: str) -> None:
    with pytest.raises(ConfigError, match=r"payload\.schema: has types no JSON payload is decoded into") as refused:
        parse_config(config(payload={"format": "json", "schema": schema}))
    assert named in str(refused.value) and "declare STRING" in str(refused.value)


@pytest.mark.parametrize("share", [-0.1, 1.5, "5%", True])
def test_the_bad_record_threshold_is_a_share(share: object) -> None:
    with pytest.raises(ConfigError, match=r"payload\.max_bad_share: must be a number from 0 to 1"):
        parse_config(config(payload={"max_bad_share": share}))


def test_a_rename_names_each_new_column_of_payload_schema_with_its_old_name() -> None:
    (p,) = parse_config(config(payload={"format": "json", "schema": "amount_eur BIGINT", "renamed_from": {"amount_eur": "amount"}}))
    assert p.payload.renamed_from == {"amount_eur": "amount"}
    assert parse_config(VALID)[0].payload.renamed_from == {}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"renamed_from": ["amount"]}, "must be a mapping of a column's new name to its old one"),
        ({"renamed_from": {"a": None}}, "each entry maps a column's new name to its old name"),
        ({"renamed_from": {"a": "a"}}, "'a' is renamed from itself"),
        ({"renamed_from": {"a": " b"}}, "has spaces before or after it"),
        ({"renamed_from": {"a": "x", "b": "x"}}, "names 'x' as the old name of more than one column"),
        ({"format": "raw", "schema": None, "renamed_from": {"a": "x"}}, "only allowed with format json and a payload.schema"),
        ({"renamed_from": {"c": "x"}}, "renames 'x' to 'c', which is not a top-level column of payload.schema (a, b)"),
        ({"renamed_from": {"a": "b"}}, "payload.schema still declares 'b': a renamed column is the new name's only"),
        ({"renamed_from": {"a": "shard_id"}}, "renames 'shard_id', a column every row carries"),
    ],
)
def test_a_bad_rename_is_refused_naming_the_key_and_the_names(payload: dict[str, Any], message: str) -> None:
    given = {k: v for k, v in {"format": "json", "schema": "a INT, b STRING", **payload}.items() if v is not None}
    with pytest.raises(ConfigError, match=r"payload\.renamed_from: ") as refused:
        parse_config(config(payload=given))
    assert message in str(refused.value)


EMR = {
    "application_id": "00fabcdefgh12345",
    "execution_role_arn": "arn:aws:iam::123456789012:role/kinesis-replay-orders",
    "code_prefix": "s3://lake-code/kinesis-replay/",
}


def emr_config(**emr: Any) -> dict[str, Any]:
    return config(spark={"conf": {"spark.executor.memory": "4g"}, "emr_serverless": {**EMR, **emr}})


def test_emr_serverless_runs_the_job_when_configured_and_waits_in_a_worker_slot_by_default() -> None:
    (p,) = parse_config(emr_config(log_uri="s3://lake-logs/emr/"))
    emr = p.spark.emr_serverless
    assert emr is not None
    assert (emr.application_id, emr.execution_role_arn) == (EMR["application_id"], EMR["execution_role_arn"])
    assert (emr.code_prefix, emr.log_uri, emr.venv_archive) == ("s3://lake-code/kinesis-replay", "s3://lake-logs/emr", None)
    assert emr.deferrable is False and emr.poll_seconds == 30
    assert parse_config(VALID)[0].spark.emr_serverless is None


def test_emr_serverless_and_a_master_are_exclusive() -> None:
    data = emr_config()
    data["pipelines"][0]["spark"]["master"] = "spark://host:7077"
    with pytest.raises(ConfigError, match=r"spark\.emr_serverless: give either master .* or emr_serverless, not both"):
        parse_config(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"code_prefix": "/tmp/code"}, r"emr_serverless\.code_prefix: the value must start with s3://"),
        ({"log_uri": "s3://"}, r"emr_serverless\.log_uri: the value names no bucket"),
        ({"execution_role_arn": "kinesis-replay"}, r"emr_serverless\.execution_role_arn: must be an IAM role ARN"),
        ({"deferrable": "yes"}, r"emr_serverless\.deferrable: must be true or false"),
        ({"poll_seconds": 0}, r"emr_serverless\.poll_seconds: must be an integer >= 1"),
        ({"application": "x"}, r"emr_serverless: unknown key\(s\) application"),
    ],
)
def test_a_bad_emr_serverless_setting_is_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(emr_config(**change))


def test_emr_serverless_requires_an_application() -> None:
    data = emr_config()
    del data["pipelines"][0]["spark"]["emr_serverless"]["application_id"]
    with pytest.raises(ConfigError, match=r"emr_serverless\.application_id: is required"):
        parse_config(data)


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("/lake/x", "/lake/x"),
        ("/lake/x/./", "/lake/x"),
        ("/lake//y/../x/", "/lake/x"),
        ("file:///lake/x/", "/lake/x"),
        ("file:/lake/x", "/lake/x"),  # Hadoop's spelling
        ("s3://bucket/a/./b/", "s3://bucket/a/b"),
        ("S3A://bucket//a", "s3a://bucket/a"),
    ],
)
def test_an_output_root_has_one_spelling(given: str, normalized: str) -> None:
    assert normalize_output(given) == normalized
    (p,) = parse_config(config(output=given, output_format="directory" if "://" in given else "iceberg"))
    assert p.output == normalized


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("lake/x", "is relative"),
        ("./x", "is relative"),
        ("/", "is the file system root"),
        ("/x/..", "is the file system root"),
        ("/etc", "is a system folder"),
        ("/usr/share/lake", "is a system folder"),
        ("/tmp", "is a system folder"),
        ("s3://bucket", "is a whole bucket"),
        ("s3://bucket/", "is a whole bucket"),
        ("s3:///prefix", "has no bucket"),
        ("file://otherhost/lake", "another host"),
    ],
)
def test_an_output_root_no_one_should_write_to_is_refused_with_the_reason(given: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=rf"pipelines\[0\] \(orders\)\.output: .*{reason}"):
        parse_config(config(output=given))


def test_s3_and_s3a_name_one_place() -> None:
    assert outputs_overlap("s3://bucket/lake", "s3a://bucket/lake/orders")
    assert not outputs_overlap("/lake/orders", "/lake/orders-eu")  # a shared prefix is not a shared folder


def test_an_invalid_pipeline_is_reported_alone_and_the_others_stay_valid() -> None:
    good = copy.deepcopy(VALID["pipelines"][0])
    bad = {**good, "name": "payments", "output": "/data/payments", "initial_position": "OLDEST"}
    twin = {**good, "output": "/data/elsewhere"}
    nested = {**good, "name": "eu", "output": "/data/orders/eu"}
    loaded = parse_pipelines({"pipelines": [good, bad, twin, nested]}, "p.yaml")
    assert [p.name for p in loaded.pipelines] == ["orders"]
    assert [(e.index, e.name) for e in loaded.errors] == [(1, "payments"), (2, None), (3, "eu")]
    assert "p.yaml: pipelines[1] (payments).initial_position" in loaded.errors[0].message
    assert loaded.errors[1].message == "p.yaml: pipelines[2].name: duplicate name 'orders' (also pipelines[0])"
    assert "pipelines[3] (eu).output: /data/orders/eu is inside, or around, the output /data/orders of pipeline 'orders'" in (
        loaded.errors[2].message
    )
    with pytest.raises(ConfigError, match="payments"):
        loaded.strict()


@pytest.mark.parametrize(
    "schema",
    [
        "user STRING, amount DOUBLE",
        "a INT COMMENT 'x, y', b: STRUCT<c: INT, d ARRAY<MAP<STRING, DECIMAL(10,2)>>>",
        "`odd, name` STRING, ts TIMESTAMP_NTZ, n DECIMAL, d DATE, t TIMESTAMP_LTZ",
        "s STRING COLLATE UTF8_LCASE, b BYTE, l LONG, r REAL, y BINARY, m MAP<STRING, ARRAY<SHORT>>",
    ],
)
def test_a_spark_ddl_schema_is_accepted(schema: str) -> None:
    (p,) = parse_config(config(payload={"format": "json", "schema": schema}))
    assert p.payload.schema == schema


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ("user STRING, amount", "expected more, found 'the end'"),
        ("a INT b STRING", "unexpected 'b' after column 'a'"),
        ("a FOO", "unknown type 'foo'"),
        ("a INT, A STRING", "column\\(s\\) A, a appear more than once"),
        ("a DECIMAL(x)", "decimal takes whole numbers"),
        ("a ARRAY<INT", "expected >"),
        ("a BOOL", "unknown type 'bool'"),
        ("a INTERVAL MONTH TO SECOND", "INTERVAL MONTH TO SECOND is not an interval type"),
    ],
)
def test_a_schema_that_is_not_spark_ddl_is_refused_when_the_config_is_read(schema: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=rf"pipelines\[0\] \(orders\)\.payload\.schema: is not a Spark DDL schema \({reason}"):
        parse_config(config(payload={"format": "json", "schema": schema}))


def test_batches_are_capped_by_default_at_an_hour_or_half_an_hour_of_reading() -> None:
    (p,) = parse_config(VALID)
    assert p.max_batch.span == timedelta(hours=1) and p.max_batch.read_minutes == 30
    # A shard of unknown rate is assumed full (1 MiB/s): 30 minutes at 2 MiB/s is an hour of it.
    assert p.max_batch.span_for(None, p.read) == timedelta(hours=1)
    # A small budget caps by read time: 30 minutes at 0.5 MiB/s hold 15 minutes of a shard writing 1 MiB/s.
    (slow,) = parse_config(config(read={"bytes_per_second": 512 * 1024}, max_batch={"span": "2h"}))
    assert slow.max_batch.span_for(1024 * 1024, slow.read) == timedelta(minutes=15)
    assert slow.max_batch.span_for(1024, slow.read) == timedelta(hours=2)  # a quiet shard: the span cap binds


@pytest.mark.parametrize("span", ["90s", "500ms", "2d", "1.5h"])
def test_a_span_is_a_duration_with_a_unit(span: str) -> None:
    (p,) = parse_config(config(max_batch={"span": span}))
    assert p.max_batch.span == {"90s": timedelta(seconds=90), "500ms": timedelta(milliseconds=500),
                                "2d": timedelta(days=2), "1.5h": timedelta(minutes=90)}[span]  # fmt: skip


@pytest.mark.parametrize(
    ("max_batch", "message"),
    [
        ({"span": "an hour"}, r"max_batch.span: 'an hour' is not a duration such as 500ms, 90s, 30m, 1h or 2d"),
        ({"span": "0s"}, r"max_batch.span: must be longer than 0"),
        ({"read_minutes": 0}, r"max_batch.read_minutes: must be a positive \(finite\) number, got 0"),
        ({"rows": 5}, r"max_batch: unknown key\(s\) rows"),
    ],
)
def test_a_bad_cap_is_named(max_batch: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=rf"pipelines\[0\] \(orders\)\.{message}" if "unknown" not in message else message):
        parse_config(config(max_batch=max_batch))


def test_a_pipeline_lands_in_an_iceberg_table_on_the_embedded_catalog_by_default() -> None:
    (p,) = parse_config(VALID)
    assert p.output_format == "iceberg" and p.table is not None
    assert (p.table.catalog, p.table.namespace, p.table.name) == ("kinesis_replay", "kinesis_replay", "orders")
    assert p.table.embedded and p.table.identifier == "kinesis_replay.orders"


def test_a_table_names_its_catalog_with_pyiceberg_properties() -> None:
    table = {"catalog": "glue", "namespace": "lake", "name": "orders_v2",
             "catalog_properties": {"type": "glue", "glue.region": "eu-west-1", "glue.skip-archive": True}}  # fmt: skip
    (p,) = parse_config(config(output="s3://bucket/orders", table=table))
    assert p.table is not None and not p.table.embedded
    assert p.table.catalog_properties == {"type": "glue", "glue.region": "eu-west-1", "glue.skip-archive": "true"}
    assert p.table.describe() == "table lake.orders_v2 in catalog glue (glue)"


def test_a_directory_output_says_so_and_has_no_table() -> None:
    (p,) = parse_config(config(output_format="directory"))
    assert p.table is None and p.output_format == "directory"
    with pytest.raises(ConfigError, match=r"pipelines\[0\] \(orders\)\.table: is only allowed with output_format iceberg"):
        parse_config(config(output_format="directory", table={"name": "x"}))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"output_format": "delta"}, r"output_format: must be one of iceberg, directory, got 'delta'"),
        (
            {"table": {"name": "orders-v2"}},
            r"table\.name: pipeline 'orders' names 'orders-v2', which is not an identifier: it must be letters, digits and '_'",
        ),
        ({"table": {"catalog_properties": ["type", "glue"]}}, r"table\.catalog_properties: must be a mapping of pyiceberg"),
        ({"table": {"schema": "x"}}, r"table: unknown key\(s\) schema"),
        (
            {"table": {"catalog_properties": {"type": "nonesuch"}}},
            r"table\.catalog_properties\.type: pipeline 'orders' names catalog type 'nonesuch', which pyiceberg does not know; "
            r"it must be one of rest, hive, glue, dynamodb, sql, in-memory, bigquery",
        ),
        ({"output": "s3://bucket/orders"}, r"table\.catalog_properties: the embedded catalog keeps a SQLite file under the output"),
    ],
)
def test_a_bad_table_config_names_the_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config(**changes))


def test_the_catalog_types_the_config_accepts_are_pyicebergs() -> None:
    from pyiceberg.catalog import CatalogType

    from kinesis_replay.core.config import CATALOG_TYPES

    assert set(CATALOG_TYPES) == {t.value for t in CatalogType}
    for properties in (
        {"type": "GLUE", "glue.region": "eu-west-1"},
        {"py-catalog-impl": "lake.catalogs.Mine"},
        {"uri": "http://rest:8181"},
    ):
        (p,) = parse_config(config(table={"catalog": "lake", "catalog_properties": properties}))
        assert p.table is not None and p.table.catalog_properties == properties  # pyiceberg's own case-insensitive type, or none


@pytest.mark.parametrize(
    ("name", "table"),
    [("orders", "orders"), ("orders-eu", "orders_eu"), ("2024-orders", "p_2024_orders"), ("7", "p_7"), ("0-a_b-", "p_0_a_b_")],
)
def test_a_pipeline_that_names_no_table_gets_a_valid_table_name_from_its_own(name: str, table: str) -> None:
    (p,) = parse_config(config(name=name))
    assert p.table is not None and p.table.name == table


def test_a_table_name_the_pipeline_wrote_is_refused_naming_the_pipeline_the_key_and_the_default() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(config(name="2024-orders", table={"name": "2024_orders"}))
    assert str(raised.value) == (
        "<config>: pipelines[0] (2024-orders).table.name: pipeline '2024-orders' names '2024_orders', which is not an "
        "identifier: it must be letters, digits and '_', starting with a letter or '_' (Glue and Athena accept no more); "
        "leave it out for the default, 'p_2024_orders'"
    )


def glue_pipeline(pipeline_name: str, output: str, **table: str) -> dict[str, Any]:
    entry = copy.deepcopy(VALID["pipelines"][0])
    entry.update(name=pipeline_name, output=output, table={"catalog": "glue", "catalog_properties": {"type": "glue"}, **table})
    return entry


def test_two_pipelines_whose_default_tables_are_one_table_of_a_shared_catalog_are_refused() -> None:
    first, second = glue_pipeline("a-b", "s3://lake/a-b"), glue_pipeline("a_b", "s3://lake/a_b")
    loaded = parse_pipelines({"pipelines": [first, second]}, "p.yaml")
    assert [p.name for p in loaded.pipelines] == ["a-b"]  # the earlier one keeps running
    assert loaded.error_for("a_b") == (
        "p.yaml: pipelines[1] (a_b).table: pipeline 'a_b' would commit to table kinesis_replay.a_b in catalog glue (glue), "
        "which is already the table of pipeline 'a-b' (pipelines[0]) ('a-b' and 'a_b': table.name defaults to the "
        "pipeline's name, '-' becomes '_', and a leading digit gets 'p_' in front). Each pipeline needs tables of its own "
        "(its table and its quarantine table), or one would commit its batches into the other's; set another table.name, "
        "table.quarantine_name or table.namespace for one of them"
    )


def test_a_table_named_twice_in_a_shared_catalog_is_refused_whatever_the_case() -> None:
    first = glue_pipeline("orders", "s3://lake/orders", namespace="Raw", name="Orders")
    second = glue_pipeline("orders-v2", "s3://lake/orders-v2", namespace="raw", name="orders")
    loaded = parse_pipelines({"pipelines": [first, second]}, "p.yaml")
    assert [p.name for p in loaded.pipelines] == ["orders"]
    message = loaded.error_for("orders-v2") or ""
    assert (
        "pipeline 'orders-v2' would commit to table raw.orders in catalog glue (glue), which is already the table of pipeline 'orders'"
        in message
    )
    assert "defaults to" not in message  # both named their table


def test_a_pipeline_whose_table_is_another_pipelines_quarantine_table_is_refused() -> None:
    entries = [glue_pipeline("orders", "s3://lake/orders"), glue_pipeline("orders-quarantine", "s3://lake/oq")]
    loaded = parse_pipelines({"pipelines": entries}, "p.yaml")
    assert [p.name for p in loaded.pipelines] == ["orders"]
    assert (
        "would commit to table kinesis_replay.orders_quarantine in catalog glue (glue), which is already the quarantine "
        "table of pipeline 'orders'" in str(loaded.errors[0])
    )


def test_a_pipeline_whose_quarantine_table_is_another_pipelines_table_is_refused_naming_it() -> None:
    entries = [glue_pipeline("orders_quarantine", "s3://lake/oq"), glue_pipeline("orders", "s3://lake/orders")]
    loaded = parse_pipelines({"pipelines": entries}, "p.yaml")
    assert [p.name for p in loaded.pipelines] == ["orders_quarantine"]
    assert (
        "would commit to quarantine table kinesis_replay.orders_quarantine in catalog glue (glue) (its quarantine table), "
        "which is already the table of pipeline 'orders_quarantine'" in str(loaded.errors[0])
    )


def test_a_quarantine_name_must_be_an_identifier() -> None:
    entry = glue_pipeline("orders", "s3://lake/orders")
    entry["table"] = {**entry.get("table", {}), "quarantine_name": "bad-name"}
    loaded = parse_pipelines({"pipelines": [entry]}, "p.yaml")
    assert not loaded.pipelines and "table.quarantine_name" in str(loaded.errors[0]) and "'bad-name'" in str(loaded.errors[0])


def test_tables_of_one_name_in_other_namespaces_or_embedded_catalogs_are_distinct() -> None:
    other_namespace = [glue_pipeline("a-b", "s3://lake/a-b"), glue_pipeline("a_b", "s3://lake/a_b", namespace="other")]
    embedded = [config(name="a-b", output="/lake/a-b")["pipelines"][0], config(name="a_b", output="/lake/a_b")["pipelines"][0]]
    for entries in (other_namespace, embedded):
        loaded = parse_pipelines({"pipelines": entries}, "p.yaml")
        assert not loaded.errors
        assert [p.name for p in loaded.pipelines] == ["a-b", "a_b"]


def test_the_documented_table_of_keys_is_the_one_their_declarations_render() -> None:
    documented = CONFIGURATION_MD.read_text().partition(REFERENCE_BEGIN)[2].partition(REFERENCE_END)[0]
    assert documented.strip() == reference_table().strip(), (
        "docs/configuration.md's table of keys and their declarations in config.py differ: run make docs-config"
    )


def test_every_key_the_file_allows_has_a_line_and_a_default_in_the_table() -> None:
    keys = {key: f for key, f in options()}
    assert not [key for key, f in keys.items() if not f.metadata.get("doc")], "declare each key with option(...)"
    assert {"name", "pool", "output_format", "read.page_bytes", "spark.emr_serverless.poll_seconds", "table.catalog_properties"} <= set(
        keys
    )
    rows = reference_table().splitlines()[2:]
    assert len(rows) == len(keys) and all(row.count(" | ") == 2 for row in rows), "a '|' in a key's line would break the table"
    assert "| `max_batch.span` | `1h` |" in reference_table() and "| `read.bytes_per_second` | `2097152` |" in reference_table()


def test_the_table_is_rewritten_between_its_markers_and_nothing_else_changes() -> None:
    stale = f"before\n{REFERENCE_BEGIN}\n| old | table |\n{REFERENCE_END}\nafter\n"
    rewritten = with_reference_table(stale)
    assert rewritten == f"before\n{REFERENCE_BEGIN}\n{reference_table()}{REFERENCE_END}\nafter\n"
    assert with_reference_table(rewritten) == rewritten
    with pytest.raises(ValueError, match="config-table:begin"):
        with_reference_table("no markers here")
