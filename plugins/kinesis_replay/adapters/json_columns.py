"""A JSON payload's columns in the replay's files: payload.schema's types as Arrow's, and a page's payloads decoded.

The values come from ``payloads.decode_json`` (pure Python, Spark's from_json's reading); this module gives them the
Arrow types Spark's Parquet writer gave the same columns, so a table an older release created takes the new files
with no schema change: TINYINT is int8, TIMESTAMP is UTC-adjusted microseconds, TIMESTAMP_NTZ microseconds with no
zone, an ARRAY's element is named ``element`` and a MAP's entries ``key_value`` (Parquet's standard nesting, which
both writers use), and every column and nested field is nullable.
"""

from __future__ import annotations

from typing import Any

from kinesis_replay.core.ddl import DdlType, parse_ddl_schema
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.payloads import decode_json, undecoded_columns


def arrow_type(t: DdlType) -> Any:
    """The Arrow type of a column of DDL type ``t`` (one ``payloads.decode_json`` decodes)."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(), "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(),
        "float": pa.float32(), "double": pa.float64(), "string": pa.string(), "binary": pa.binary(), "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    }  # fmt: skip
    if t.kind in simple:
        return simple[t.kind]
    if t.kind == "decimal":
        return pa.decimal128(*t.params)
    if t.kind == "array":
        return pa.list_(pa.field("element", arrow_type(t.children[0][1])))
    if t.kind == "map":
        return pa.map_(arrow_type(t.children[0][1]), arrow_type(t.children[1][1]))
    if t.kind == "struct":
        return pa.struct([pa.field(name, arrow_type(child)) for name, child in t.children])
    raise ValueError(f"{t} has no column type here")  # payload.schema was checked (undecoded_columns): not reached


class JsonColumns:
    """Decodes pages' JSON payloads into payload.schema's columns, in the task that reads them."""

    def __init__(self, schema: str, pipeline_name: str) -> None:
        import pyarrow as pa

        try:
            self.schema = parse_ddl_schema(schema)
        except ValueError as exc:
            raise ConfigError(f"pipeline {pipeline_name}: payload.schema is not a Spark DDL schema: {exc}") from exc
        refused = undecoded_columns(self.schema)
        if refused:
            raise ConfigError(f"pipeline {pipeline_name}: payload.schema has types no JSON payload decodes into: {'; '.join(refused)}")
        self.fields = [pa.field(name, arrow_type(t)) for name, t in self.schema.children]

    def decode(self, batch: Any) -> Any:
        """``batch`` (the row columns) with payload.schema's columns after them, and a decode_error for each payload that
        does not decode (a row quarantined already, a broken KPL aggregate, keeps its reason and gets null columns)."""
        import pyarrow as pa

        names = [f.name for f in self.fields]
        columns: list[list[Any]] = [[] for _ in names]
        errors = batch.column("decode_error").to_pylist()
        for i, data in enumerate(batch.column("data").to_pylist()):
            values, reason = (None, errors[i]) if errors[i] is not None else decode_json(self.schema, data)
            errors[i] = reason
            for column, name in zip(columns, names, strict=True):
                column.append(None if values is None else values.get(name))
        arrays = [*batch.columns]
        arrays[batch.schema.get_field_index("decode_error")] = pa.array(errors, pa.string())
        arrays += [pa.array(column, f.type) for column, f in zip(columns, self.fields, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([*batch.schema, *self.fields]))
