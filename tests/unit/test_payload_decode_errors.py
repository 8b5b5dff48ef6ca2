"""A JSON payload's decode error names the field and the type at fault; a payload that decodes has none.

The verdicts (quarantined or not) are Spark 4.3's from_json's (tests/integration/test_tasks_against_spark.py checks
them, and the values, side by side).
"""

from __future__ import annotations

import pytest

from fakes.payload_cases import DECODABLE, SCHEMA, UNDECODABLE
from kinesis_replay.core.ddl import DdlType, parse_ddl_schema
from kinesis_replay.core.payloads import REASON_CHARS, json_decode_error


def reason(payload: bytes | str, schema: str = SCHEMA) -> str | None:
    return json_decode_error(parse_ddl_schema(schema), payload.encode() if isinstance(payload, str) else payload)


@pytest.mark.parametrize(
    ("payload", "expected"),
    UNDECODABLE,
)
def test_an_undecodable_payload_names_why(payload: bytes, expected: str) -> None:
    assert reason(payload) == expected


@pytest.mark.parametrize(
    "payload",
    DECODABLE,
)
def test_a_payload_that_decodes_has_no_reason(payload: bytes) -> None:
    assert reason(payload) is None


def test_a_reason_is_one_line_of_bounded_length() -> None:
    wide = DdlType("struct", (), tuple((f"field_{i}", DdlType("int")) for i in range(100)))
    schema = DdlType("struct", (), (("s", wide),))
    found = json_decode_error(schema, b'{"s": "x"}')
    assert found is not None and len(found) == REASON_CHARS and found.startswith('field "s": expected STRUCT<field_0: INT')
    assert found.endswith("...") and "\n" not in found


def test_the_reason_reads_the_schema_config_parses() -> None:
    # Spark's other spellings and defaults: INTEGER is INT, LONG is BIGINT, DECIMAL is DECIMAL(10,0).
    schema = "a INTEGER, b LONG NOT NULL, c DECIMAL COMMENT 'money', d STRUCT<e: SHORT>"
    assert reason('{"a": "x"}', schema) == 'field "a": expected INT, got string "x"'
    assert reason('{"b": 2.5}', schema) == 'field "b": expected BIGINT, got 2.5'
    assert reason('{"c": 12345678901}', schema) == 'field "c": expected DECIMAL(10,0), got 12345678901, out of range'
    assert reason('{"c": 1.5}', schema) is None  # rounded to 2
    assert reason('{"d": {"e": 40000}}', schema) == 'field "d.e": expected SMALLINT, got 40000, out of range'
