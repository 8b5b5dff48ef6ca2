"""payload.schema against the table's columns, decided with no table (issue 46, point 4): added, widened, renamed and
removed columns go on; a narrowing, a change of kind and a decimal's scale are refused, naming the column and the way out."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kinesis_replay.adapters import iceberg_table
from kinesis_replay.adapters.json_columns import arrow_type
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.ddl import parse_ddl_schema
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.holdings import Holdings, TableState
from kinesis_replay.core.output_root import TableSnapshot
from kinesis_replay.core.ownership import schema_refusal
from kinesis_replay.core.schema_changes import (
    Change,
    ColumnType,
    FieldChange,
    TableColumn,
    column_type,
    file_changes,
    payload_changes,
)

INT, LONG, FLOAT, DOUBLE, STRING = (ColumnType(k) for k in ("int", "long", "float", "double", "string"))
RUNBOOK = 'docs/operating.md: "We changed a type"'
HELD = TableState(Holdings.of([1], 10), 10)


def decimal(precision: int, scale: int) -> ColumnType:
    return ColumnType("decimal", (precision, scale))


def pipeline(schema: str | None, renamed_from: dict[str, str] | None = None) -> PipelineConfig:
    payload: dict[str, Any] = {"format": "json", "schema": schema} if schema is not None else {}
    if renamed_from:
        payload["renamed_from"] = renamed_from
    entry = {"name": "orders", "stream": "orders", "output": "/data/orders", "schedule": None, "initial_position": "TRIM_HORIZON",
             "state_table": "kr-orders", "spark": {}, "payload": payload}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


# A table a pipeline landed: the record's own columns, then payload.schema's as they landed.
RECORD = (TableColumn("shard_id", STRING), TableColumn("data", ColumnType("binary")), TableColumn("batch_id", LONG))


def table(*columns: TableColumn) -> tuple[TableColumn, ...]:
    return (*RECORD, *columns)


def changes(schema: str | None, columns: tuple[TableColumn, ...], renamed_from: dict[str, str] | None = None) -> dict[str, FieldChange]:
    return {f.name: f for f in payload_changes(pipeline(schema, renamed_from), columns).fields}


def refusal(schema: str, columns: tuple[TableColumn, ...], renamed_from: dict[str, str] | None = None) -> str:
    refused = schema_refusal(pipeline(schema, renamed_from), TableSnapshot(HELD, columns=columns))
    assert refused is not None
    error = refused.as_error()
    assert isinstance(error, ConfigError)
    return str(error)


def test_columns_as_they_are_change_nothing_and_the_records_own_columns_are_not_payload_schemas() -> None:
    found = changes("user STRING, amount INT", table(TableColumn("user", STRING), TableColumn("amount", INT)))
    assert {name: f.change for name, f in found.items()} == {"user": Change.UNCHANGED, "amount": Change.UNCHANGED}


def test_an_added_field_joins_the_table() -> None:
    found = changes("user STRING, country STRING", table(TableColumn("user", STRING)))
    assert found["country"].change == Change.ADDED and found["country"].after == STRING


@pytest.mark.parametrize(
    ("before", "declared", "after"),
    [
        (INT, "BIGINT", LONG),
        (FLOAT, "DOUBLE", DOUBLE),
        (decimal(10, 2), "DECIMAL(12,2)", decimal(12, 2)),
    ],
    ids=["int to bigint", "float to double", "a decimal's precision up, its scale kept"],
)
def test_a_widening_iceberg_allows_is_promoted(before: ColumnType, declared: str, after: ColumnType) -> None:
    found = changes(f"amount {declared}", table(TableColumn("amount", before)))
    assert (found["amount"].change, found["amount"].before, found["amount"].after) == (Change.PROMOTED, before, after)


@pytest.mark.parametrize(
    ("declared", "change"), [("TINYINT", Change.UNCHANGED), ("SMALLINT", Change.UNCHANGED), ("BIGINT", Change.PROMOTED)]
)
def test_sparks_narrow_integers_land_as_int_so_widening_them_to_int_changes_nothing_and_to_bigint_promotes(
    declared: str, change: Change
) -> None:
    """A column declared TINYINT or SMALLINT landed as Iceberg's int: INT is the same column, BIGINT widens it."""
    assert changes(f"n {declared}", table(TableColumn("n", INT)))["n"].change == change


def test_a_removed_field_stays_in_the_table() -> None:
    columns = table(TableColumn("user", STRING), TableColumn("amount", INT))
    found = changes("user STRING", columns)
    assert found["amount"].change == Change.REMOVED and found["amount"].before == INT
    assert schema_refusal(pipeline("user STRING"), TableSnapshot(HELD, columns=columns)) is None


def test_a_raw_payload_keeps_every_column_the_table_has() -> None:
    assert changes(None, table(TableColumn("amount", INT)))["amount"].change == Change.REMOVED


def test_a_rename_in_the_config_renames_the_tables_column_and_may_widen_it() -> None:
    columns = table(TableColumn("amount", INT), TableColumn("user", STRING))
    found = changes("amount_eur INT, customer STRING", columns, {"amount_eur": "amount", "customer": "user"})
    assert (found["amount_eur"].change, found["amount_eur"].renamed_from) == (Change.RENAMED, "amount")
    assert found["amount_eur"].table_name == "amount" and "amount" not in found  # the old column is the new one, not removed
    widened = changes("amount_eur BIGINT", table(TableColumn("amount", INT)), {"amount_eur": "amount"})["amount_eur"]
    assert (widened.change, widened.before, widened.after) == (Change.RENAMED, INT, LONG)


def test_a_rename_the_table_has_made_changes_nothing_more() -> None:
    renamed = table(TableColumn("amount_eur", INT, aliases=("amount",)))
    assert changes("amount_eur INT", renamed, {"amount_eur": "amount"})["amount_eur"].change == Change.UNCHANGED


def test_int_to_string_is_refused_naming_the_field_the_types_and_the_way_out() -> None:
    message = refusal("user STRING, amount STRING", table(TableColumn("user", STRING), TableColumn("amount", INT)))
    assert 'column "amount": the table\'s int, now string (STRING)' in message
    assert "`amount INT`" in message and "`amount_v2 STRING`" in message and RUNBOOK in message
    assert "pipeline 'orders'" in message and "Nothing was read or written." in message


def test_a_decimals_scale_change_is_refused_though_pyicebergs_own_check_lets_it_through() -> None:
    message = refusal("price DECIMAL(12,3)", table(TableColumn("price", decimal(10, 2))))
    assert 'column "price": the table\'s decimal(10, 2), now decimal(12, 3) (DECIMAL(12,3))' in message
    assert "scale changes from 2 to 3" in message and "`price DECIMAL(10,2)`" in message and RUNBOOK in message


@pytest.mark.parametrize(
    ("declared", "before", "shown"),
    [("INT", LONG, "the table's long, now int"), ("FLOAT", DOUBLE, "the table's double, now float"),
     ("DECIMAL(8,2)", decimal(10, 2), "the table's decimal(10, 2), now decimal(8, 2)")],
    ids=["bigint to int", "double to float", "a decimal's precision down"],
)  # fmt: skip
def test_a_narrowing_is_refused_naming_the_field(declared: str, before: ColumnType, shown: str) -> None:
    message = refusal(f"n {declared}", table(TableColumn("n", before)))
    assert f'column "n": {shown}' in message and "may not fit" in message and RUNBOOK in message


def test_a_change_inside_a_nested_type_is_refused_naming_the_column() -> None:
    address = ColumnType("struct", (), (("city", STRING),))
    message = refusal("address STRUCT<city: STRING, zip: STRING>", table(TableColumn("address", address)))
    assert 'column "address": the table\'s struct<city: string>, now struct<city: string, zip: string>' in message
    assert "top-level columns only" in message


def test_a_rename_that_changes_the_kind_is_refused_naming_both_names() -> None:
    message = refusal("amount_eur STRING", table(TableColumn("amount", INT)), {"amount_eur": "amount"})
    assert 'column "amount_eur" (renamed from "amount"): the table\'s int, now string' in message


def test_a_new_column_under_a_name_a_rename_left_in_the_name_mapping_is_refused() -> None:
    """Files written before the rename hold amount_eur's values under "amount": a new column "amount" would take them."""
    message = refusal("amount_eur INT, amount STRING", table(TableColumn("amount_eur", INT, aliases=("amount",))))
    assert 'column "amount": "amount" was the name of column "amount_eur" before a rename' in message
    assert 'another name than "amount"' in message


def test_a_new_column_that_differs_from_one_of_the_tables_only_in_case_is_refused() -> None:
    message = refusal("Amount INT", table(TableColumn("amount", INT)))
    assert 'column "Amount": the table has column "amount"' in message and "{Amount: amount}" in message
    assert changes("Amount INT", table(TableColumn("amount", INT)), {"Amount": "amount"})["Amount"].change == Change.RENAMED


def test_a_file_narrower_than_the_table_fits_it_and_one_named_before_a_rename_is_that_column() -> None:
    """A restore commits a batch's files as they were written: before the widening, and before the rename."""
    columns = table(TableColumn("amount_eur", LONG, aliases=("amount",)))
    found = {f.name: f for f in file_changes([("shard_id", STRING), ("amount", INT)], {"amount_eur": "amount"}, columns).fields}
    assert found["amount"].change == Change.UNCHANGED and found["shard_id"].change == Change.UNCHANGED
    refused = file_changes([("amount_eur", STRING)], {}, columns).refused
    assert [f.name for f in refused] == ["amount_eur"]


SIMPLE = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL(10,2)", "STRING", "BINARY", "DATE",
          "TIMESTAMP", "TIMESTAMP_NTZ", "ARRAY<INT>", "MAP<STRING, BIGINT>", "STRUCT<x: INT, `y z`: ARRAY<STRING>>")  # fmt: skip


@pytest.mark.parametrize("declared", SIMPLE)
def test_each_type_is_the_one_its_files_land_as_and_is_declared_back_as_itself(declared: str) -> None:
    """The core's mapping against the replay's own Arrow type, as pyiceberg reads it into the table."""
    (name, ddl), *_ = parse_ddl_schema(f"c {declared}").children
    (landed,) = iceberg_table.file_columns(pa.schema([pa.field(name, arrow_type(ddl))]))
    assert landed == ("c", column_type(ddl))
    # What a refusal tells to put back lands as the same type (TINYINT and SMALLINT land as int, put back as INT).
    assert column_type(parse_ddl_schema(f"c {column_type(ddl).declared()}").children[0][1]) == column_type(ddl)
