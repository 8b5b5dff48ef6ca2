"""A JSON payload's decode error names the field and the type at fault; a payload that decodes has none.

The verdicts (quarantined or not) are Spark 4.3's from_json's, probed case by case: json_decode_error explains the
payloads the replay job quarantines, and must not blame what Spark reads.
"""

from __future__ import annotations

import pytest

from kinesis_replay.core.ddl import DdlType, parse_ddl_schema
from kinesis_replay.core.payloads import REASON_CHARS, json_decode_error

SCHEMA = (
    "amount BIGINT, n INT, b TINYINT, s SMALLINT, price DECIMAL(5,2), ratio DOUBLE, ok BOOLEAN, name STRING, "
    "day DATE, at TIMESTAMP, local TIMESTAMP_NTZ, blob BINARY, tags ARRAY<INT>, attrs MAP<STRING, INT>, "
    "user STRUCT<id: INT, name: STRING, `home town`: STRUCT<zip: INT>>, events ARRAY<STRUCT<k: BIGINT>>, `x.y` INT, v VARIANT"
)


def reason(payload: bytes | str, schema: str = SCHEMA) -> str | None:
    return json_decode_error(parse_ddl_schema(schema), payload.encode() if isinstance(payload, str) else payload)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # Not a JSON object at all.
        (b"", "blank payload"),
        (b"  \n\t ", "blank payload"),
        (b"null", "not a JSON object (got null)"),
        (b" null ", "not a JSON object (got null)"),
        (b"[1, 2]", "not a JSON object (got array)"),
        (b'[{"n": 1}]', "not a JSON object (got array)"),
        (b'"text"', "not a JSON object (got string)"),
        (b"42", "not a JSON object (got number)"),
        (b"true", "not a JSON object (got true)"),
        (b"\xff\xfe{}", "not UTF-8: byte 0xff at offset 0 (invalid start byte)"),
        (b'{"name": "caf\xc3"}', "not UTF-8: byte 0xc3 at offset 13 (invalid continuation byte)"),
        (b"not json", "not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (b'{"n": 1,}', "not valid JSON: Expecting property name enclosed in double quotes: line 1 column 9 (char 8)"),
        (b'{"n": 01}', "not valid JSON: Expecting ',' delimiter: line 1 column 8 (char 7)"),
        (b'{"n": "\x01"}', "not valid JSON: Invalid control character at: line 1 column 8 (char 7)"),
        (b'\x0c{"n": 1}', "not valid JSON: Expecting value: line 1 column 1 (char 0)"),  # a form feed is no JSON space
        (b'{"other": [1, 2,]}', "not valid JSON: Expecting value: line 1 column 17 (char 16)"),  # a dropped field is read too
        (b'{"n": ' + b"1" * 1001 + b"}", "not valid JSON: a number 1001 characters long (at most 1000)"),
        (b"[" * 5000 + b"]" * 5000, "not valid JSON: nested too deeply"),
        # Whole numbers: the token's kind, then the type's range.
        (b'{"amount": "abc"}', 'field "amount": expected BIGINT, got string "abc"'),
        (b'{"amount": "12"}', 'field "amount": expected BIGINT, got string "12"'),
        (b'{"amount": ""}', 'field "amount": expected BIGINT, got string ""'),
        (b'{"amount": 1e3}', 'field "amount": expected BIGINT, got 1e3'),
        (b'{"n": 1.5}', 'field "n": expected INT, got 1.5'),
        (b'{"n": 1.0}', 'field "n": expected INT, got 1.0'),
        (b'{"n": true}', 'field "n": expected INT, got true'),
        (b'{"n": NaN}', 'field "n": expected INT, got NaN'),
        (b'{"n": [1]}', 'field "n": expected INT, got array'),
        (b'{"n": {"v": 1}}', 'field "n": expected INT, got object'),
        (b'{"n": 1099511627776}', 'field "n": expected INT, got 1099511627776, out of range'),
        (b'{"n": -2147483649}', 'field "n": expected INT, got -2147483649, out of range'),
        (b'{"amount": 9223372036854775808}', 'field "amount": expected BIGINT, got 9223372036854775808, out of range'),
        (b'{"s": 32768}', 'field "s": expected SMALLINT, got 32768, out of range'),
        (b'{"b": 256}', 'field "b": expected TINYINT, got 256, out of range'),  # Jackson takes up to 255 (wrapped)
        (b'{"b": -129}', 'field "b": expected TINYINT, got -129, out of range'),
        (b'{"amount": ' + b"9" * 60 + b"}", f'field "amount": expected BIGINT, got {"9" * 40}... (60 characters), out of range'),
        # Decimals: rounded half up to the scale, then at most the precision's digits.
        (b'{"price": 999.995}', 'field "price": expected DECIMAL(5,2), got 999.995, out of range'),
        (b'{"price": 12345}', 'field "price": expected DECIMAL(5,2), got 12345, out of range'),
        (b'{"price": "1,000.5"}', 'field "price": expected DECIMAL(5,2), got string "1,000.5", out of range'),
        (b'{"price": "abc"}', 'field "price": expected DECIMAL(5,2), got string "abc"'),
        (b'{"price": "NaN"}', 'field "price": expected DECIMAL(5,2), got string "NaN"'),
        (b'{"price": 1e400}', 'field "price": expected DECIMAL(5,2), got 1e400, out of range'),
        # Other types.
        (b'{"ratio": "1.5"}', 'field "ratio": expected DOUBLE, got string "1.5"'),
        (b'{"ratio": "inf"}', 'field "ratio": expected DOUBLE, got string "inf"'),
        (b'{"ok": "true"}', 'field "ok": expected BOOLEAN, got string "true"'),
        (b'{"ok": 1}', 'field "ok": expected BOOLEAN, got 1'),
        (b'{"day": "2024-02-30"}', 'field "day": expected DATE, got string "2024-02-30"'),
        (b'{"day": "31/01/2024"}', 'field "day": expected DATE, got string "31/01/2024"'),
        (b'{"day": 19000}', 'field "day": expected DATE, got 19000'),
        (b'{"at": "yesterday"}', 'field "at": expected TIMESTAMP, got string "yesterday"'),
        (b'{"at": "2024-01-31T25:00:00"}', 'field "at": expected TIMESTAMP, got string "2024-01-31T25:00:00"'),
        (b'{"at": 1700000000.5}', 'field "at": expected TIMESTAMP, got 1700000000.5'),
        (b'{"local": "2024-01-31T10:00:00Z"}', 'field "local": expected TIMESTAMP_NTZ, got string "2024-01-31T10:00:00Z"'),
        (b'{"blob": "aGVsbG8"}', 'field "blob": expected BINARY, got string "aGVsbG8"'),
        (b'{"name": "x", "n": "' + b"y" * 100 + b'"}', f'field "n": expected INT, got string "{"y" * 40}..."'),
        # Nested fields: the path to the value at fault.
        (b'{"user": {"id": 1.5}}', 'field "user.id": expected INT, got 1.5'),
        (b'{"user": {"id": "7"}}', 'field "user.id": expected INT, got string "7"'),
        (b'{"user": {"home town": {"zip": "x"}}}', 'field "user.`home town`.zip": expected INT, got string "x"'),
        (b'{"user": []}', 'field "user": expected STRUCT<id: INT, name: STRING, `home town`: STRUCT<zip: INT>>, got array'),
        (b'{"tags": [1, "x"]}', 'field "tags[1]": expected INT, got string "x"'),
        (b'{"tags": [[1]]}', 'field "tags[0]": expected INT, got array'),
        (b'{"tags": "[1]"}', 'field "tags": expected ARRAY<INT>, got string "[1]"'),
        (b'{"tags": {}}', 'field "tags": expected ARRAY<INT>, got object'),
        (b'{"attrs": {"a": 1, "b": "x"}}', 'field "attrs[b]": expected INT, got string "x"'),
        (b'{"attrs": []}', 'field "attrs": expected MAP<STRING, INT>, got array'),
        (b'{"events": [{"k": 1}, {"k": "x"}]}', 'field "events[1].k": expected BIGINT, got string "x"'),
        (b'{"events": [{"k": 1}, 5]}', 'field "events[1]": expected STRUCT<k: BIGINT>, got 5'),
        (b'{"x.y": "q"}', 'field "`x.y`": expected INT, got string "q"'),  # a name, not a path
        # The first field at fault in the payload's order; a field twice is read twice.
        (b'{"n": "y", "user": {"id": "x"}}', 'field "n": expected INT, got string "y"'),
        (b'{"user": {"id": "x"}, "n": "y"}', 'field "user.id": expected INT, got string "x"'),
        (b'{"n": 1, "n": "x"}', 'field "n": expected INT, got string "x"'),
        # Spark's JSON: strings in single quotes, and what follows the first value is not read.
        (b"{'n': 'x'}", 'field "n": expected INT, got string "x"'),
        (b'{"n": "x"} trailing', 'field "n": expected INT, got string "x"'),
        (b"'text", "not valid JSON: Expecting value: line 1 column 1 (char 0)"),  # never closed
    ],
)
def test_an_undecodable_payload_names_why(payload: bytes, expected: str) -> None:
    assert reason(payload) == expected


@pytest.mark.parametrize(
    "payload",
    [
        b"{}",
        b'{"n": null, "user": null, "tags": null}',  # null is every type's
        b'{"n": 1}',  # a missing field is null, not an error
        b'{"n": 1, "extra": "dropped", "more": {"deep": [1, "x"]}}',  # a field the schema does not name is dropped
        b'{"N": "x", "User": {"id": "x"}}',  # names match case and all: these are dropped too
        b'{"user": {"id": 1, "other": "x"}}',  # in a struct too
        b'{"n": 2147483647, "amount": -9223372036854775808, "s": -32768, "b": 255}',
        b'{"n": -0}',
        b'{"price": 1.235, "ratio": 1, "name": 42}',  # rounded; a whole number is a DOUBLE; STRING takes any value
        b'{"price": "1e2", "ratio": "NaN", "name": {"a": [1]}}',
        b'{"price": 1e-9, "ratio": -Infinity, "name": true}',
        b'{"ok": false, "day": "2024-1-5", "at": "2024-01-31 10:00:00", "local": "2024-01-31T10:00"}',
        b'{"day": " 2024-01-31 ", "at": 1700000000}',
        b'{"day": "2024-01-31T10:00:00", "at": "2024-01-31T10:00:00.123456+02:00"}',
        b'{"day": "19000", "at": "2024-01-31T10:00:00Europe/Paris"}',
        b'{"blob": "aGVsbG8=", "v": [1, {"a": "x"}]}',
        b'{"blob": ""}',
        b'{"tags": [1, null], "attrs": {"a": null}, "events": []}',
        b'{"user": {"home town": {"zip": 12345}}, "x.y": 3}',
        b"{'n': 1, 'name': 'it\\'s \"q\"'}",
        b'{"n": 1} {"n": "x"}',  # only the first value is read
        b'  {"n": 1}  ',
    ],
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
