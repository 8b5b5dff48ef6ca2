"""What the config check refuses so that the replay never meets it (issue 44, point 6): a DECIMAL Spark and Parquet
cannot hold, NOT NULL (which nothing enforces), and names with spaces around them."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from kinesis_replay.core.config import ConfigError, parse_config
from kinesis_replay.core.ddl import parse_ddl_schema

ENTRY: dict[str, Any] = {
    "name": "orders",
    "stream": "orders-stream",
    "output": "/data/orders",
    "schedule": "@hourly",
    "initial_position": "TRIM_HORIZON",
    "state_table": "kr-state",
    "spark": {"master": "local[2]"},
}
WHERE = re.escape("<config>: pipelines[0] (orders).")


def parsed(**changes: Any) -> Any:
    entry = copy.deepcopy(ENTRY)
    entry.update(changes)
    return parse_config({"pipelines": [entry]})[0]


def json_schema(schema: str) -> dict[str, str]:
    return {"format": "json", "schema": schema}


@pytest.mark.parametrize(
    ("schema", "column", "problem"),
    [
        ("id STRING, amount DECIMAL(5,6)", "amount", "its scale 6 is larger than its precision 5"),
        ("amount DECIMAL(39,0)", "amount", "its precision 39 is not from 1 to 38"),
        ("amount DECIMAL(39)", "amount", "its precision 39 is not from 1 to 38"),
        ("amount NUMERIC(0)", "amount", "its precision 0 is not from 1 to 38"),
        ("order STRUCT<lines: ARRAY<STRUCT<price: DEC(2, 3)>>>", "order.lines.price", "its scale 3 is larger than its precision 2"),
        ("prices MAP<STRING, DECIMAL(40,2)>", "prices", "its precision 40 is not from 1 to 38"),
    ],
)
def test_a_decimal_spark_and_parquet_cannot_hold_is_refused_naming_the_pipeline_the_key_and_the_field(
    schema: str, column: str, problem: str
) -> None:
    with pytest.raises(
        ConfigError,
        match=WHERE + r"payload\.schema: .*" + re.escape(f'column "{column}": ') + r"DECIMAL\(\d+,\d+\) cannot be written: " + problem,
    ):
        parsed(payload=json_schema(schema))


@pytest.mark.parametrize("schema", ["a DECIMAL(38,38)", "a DECIMAL(1,0)", "a DECIMAL(38)", "a DECIMAL", "a DECIMAL(10, 10)"])
def test_every_decimal_spark_and_parquet_hold_is_accepted(schema: str) -> None:
    assert parsed(payload=json_schema(schema)).payload.schema == schema
    import pyarrow as pa  # the replay's column type takes it too

    pa.decimal128(*parse_ddl_schema(schema).children[0][1].params)


@pytest.mark.parametrize(
    ("schema", "columns"),
    [
        ("id STRING NOT NULL, amount DOUBLE", '"id"'),
        ("id STRING not null COMMENT 'the key', o STRUCT<x: INT NOT NULL, y: INT> NOT NULL", '"id", "o.x", "o"'),
    ],
)
def test_not_null_is_refused_saying_that_nothing_enforces_it(schema: str, columns: str) -> None:
    with pytest.raises(
        ConfigError, match=WHERE + re.escape(f"payload.schema: declares column(s) {columns} NOT NULL, which the replay does not enforce")
    ):
        parsed(payload=json_schema(schema))


@pytest.mark.parametrize(
    ("changes", "key", "value"),
    [
        ({"name": "orders "}, "name", "orders "),
        ({"stream": " orders-stream"}, "stream", " orders-stream"),
        ({"state_table": "kr-state\t"}, "state_table", "kr-state\t"),
        ({"aws_conn_id": "aws_prod "}, "aws_conn_id", "aws_prod "),
        ({"pool": " orders_pool"}, "pool", " orders_pool"),
        ({"output": "/data/orders "}, "output", "/data/orders "),
        ({"table": {"name": "orders "}}, "table.name", "orders "),
        ({"table": {"namespace": " lake"}}, "table.namespace", " lake"),
        ({"spark": {"master": "local[2] "}}, "spark.master", "local[2] "),
        ({"spark": {"conf": {"spark.executor.memory ": "2g"}}}, "spark.conf", "spark.executor.memory "),
    ],
)
def test_a_name_with_spaces_around_it_is_refused_naming_the_key(changes: dict[str, Any], key: str, value: str) -> None:
    label = "(orders)" if "name" not in changes else "(orders )"
    where = re.escape(f"<config>: pipelines[0] {label}.{key}: ") + ".*" + re.escape(f"{value!r} has spaces before or after it")
    with pytest.raises(ConfigError, match=where) as refused:
        parsed(**changes)
    assert f"write it as {value.strip()!r}" in str(refused.value)


@pytest.mark.parametrize(("schema", "column"), [("` id` STRING", "` id`"), ("o STRUCT<`x `: INT>", "o.`x `")])
def test_a_schema_field_with_spaces_around_its_name_is_refused_naming_it(schema: str, column: str) -> None:
    with pytest.raises(ConfigError, match=WHERE + re.escape(f'payload.schema: column "{column}": its name ')):
        parsed(payload=json_schema(schema))


def test_a_schema_written_as_a_block_keeps_its_newline_and_inner_spaces() -> None:
    """The schema is a text, not a name: YAML's `schema: |` ends it with a newline, and a name may hold spaces inside."""
    schema = "id STRING,\n`first name` STRING\n"
    assert parsed(payload=json_schema(schema)).payload.schema == schema.strip()
