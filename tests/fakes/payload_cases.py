"""JSON payloads and what the replay makes of them: the cases the decoder's unit tests and its side-by-side test against
Spark's from_json share. The verdicts (quarantined or not) are Spark 4.3's from_json's, probed case by case."""

from __future__ import annotations

SCHEMA = (
    "amount BIGINT, n INT, b TINYINT, s SMALLINT, price DECIMAL(5,2), ratio DOUBLE, ok BOOLEAN, name STRING, "
    "day DATE, at TIMESTAMP, local TIMESTAMP_NTZ, blob BINARY, tags ARRAY<INT>, attrs MAP<STRING, INT>, "
    "user STRUCT<id: INT, name: STRING, `home town`: STRUCT<zip: INT>>, events ARRAY<STRUCT<k: BIGINT>>, `x.y` INT, f FLOAT"
)

# Payloads that do not decode, and why, in the reason's words.
UNDECODABLE: list[tuple[bytes, str]] = [
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
    (b'{"n": ' + b"1" * 1001 + b"}", "not valid JSON: a number of 1001 digits (at most 1000)"),
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
    # Values the type's shape admits and Spark does not read: a "T" with no time, a zone with no time, an offset past
    # Java's 18 hours, a zone Java does not know, a year past Spark's timestamps, seconds past a long.
    (b'{"at": "2024-01-31T"}', 'field "at": expected TIMESTAMP, got string "2024-01-31T"'),
    (b'{"at": "2024-01-31Z"}', 'field "at": expected TIMESTAMP, got string "2024-01-31Z"'),
    (b'{"at": "2024-01-31T10:00:00+19:00"}', 'field "at": expected TIMESTAMP, got string "2024-01-31T10:00:00+19:00"'),
    (b'{"at": "2024-01-31T10:00:00Foo/Bar"}', 'field "at": expected TIMESTAMP, got string "2024-01-31T10:00:00Foo/Bar"'),
    (b'{"at": "+1000000-01-01T00:00:00"}', 'field "at": expected TIMESTAMP, got string "+1000000-01-01T00:00:00", out of range'),
    (b'{"at": 9223372036854775808}', 'field "at": expected TIMESTAMP, got 9223372036854775808, out of range'),
]

# Payloads that decode.
DECODABLE: list[bytes] = [
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
]

# Payloads that decode, chosen for their values: each type read as Spark reads it (the side-by-side test compares the
# values, and the types of the files' columns).
VALUES: list[bytes] = [
    # A STRING takes any value: a string as it is, anything else as the JSON text Jackson writes for it.
    b'{"name": [1e20, 1e-5, 0.001, 1e7, 1234567.0, 0.0001, 123456789012.5, -0.0, 100, 1E2, 1.50, NaN, 1e400]}',
    b'{"name": {"a" : [1, 2.0, "x", null, true], "a": false}}',
    b'{"name": 12345678901234567890123, "user": {"name": -0}}',
    b'{"name": "x\\u001fy\\b\\f\\r\\u2028\\u00e9"}',
    '{"name": ["\U0001f600", "\\ud83d", "\\u00e9"]}'.encode(),
    b'{"name": "\\ud83d", "user": {"name": "\\ud83d\\ude00"}}',
    # Whole numbers: a TINYINT past 127 wraps (Jackson's unsigned byte); a FLOAT is the double rounded.
    b'{"b": 200, "s": -32768, "n": -0, "amount": 9223372036854775807}',
    b'{"f": 0.1, "ratio": 0.1}',
    b'{"f": 3.4028235e39, "ratio": 1e400}',
    b'{"f": 16777217, "ratio": 9007199254740993}',
    b'{"f": 1.00000005960464477539, "ratio": "-INF"}',
    b'{"f": "NaN", "ratio": "+INF"}',
    b'{"ratio": 1' + b"0" * 400 + b"}",
    # Decimals: rounded half up to the scale; strings with commas.
    b'{"price": 1.235}',
    b'{"price": -0.005}',
    b'{"price": "1,2.5"}',
    b'{"price": "1.5e1"}',
    b'{"price": 1e-9}',
    # Dates: Spark's lenient forms, years past 9999 and before year 1, proleptic Gregorian.
    b'{"day": "19000"}',
    b'{"day": "2024"}',
    b'{"day": "2024-03"}',
    b'{"day": "-0044-03-15"}',
    b'{"day": "+12345-01-01"}',
    b'{"day": "2024-01-31 junk"}',
    b'{"day": "1582-10-10"}',
    b'{"day": "0000-01-01"}',
    b'{"day": "2024-02-29T23:59:59Z"}',
    # Timestamps: fractions cut to microseconds, offsets, regions (a gap and an overlap of summer time), Java's short
    # zone ids, seconds since 1970 (wrapped as a long's product), years far from ours.
    b'{"at": "2024-01-31T10:00:00.123456789Z", "local": "2024-01-31T10:00:00.1234567"}',
    b'{"at": "2024-01-31 10:00:00.1234567+02:00", "local": "2024-01-31"}',
    b'{"at": "2024-01-31T10:00:00Europe/Paris", "local": "-0044-03-15 01:02"}',
    b'{"at": "2024-07-31T10:00:00 Europe/Paris"}',
    b'{"at": "2024-03-31T02:30:00Europe/Paris"}',
    b'{"at": "2024-10-27T02:30:00Europe/Paris"}',
    b'{"at": "2024-01-31T10:00:00EST"}',
    b'{"at": "2024-01-31T10:00:00PST"}',
    b'{"at": "2024-01-31T10:00:00UTC+1"}',
    b'{"at": "2024-01-31T10:00:00GMT-05:30"}',
    b'{"at": "2024-01-31T10:00:00+5"}',
    b'{"at": "2024-01-31T10:00:00+0530"}',
    b'{"at": "2024-01-31T10:00:00+01:00:30"}',
    b'{"at": "2024-01-31T10:00:00+18:00"}',
    b'{"at": "2024-01-31T10:00:00UT"}',
    b'{"at": "2024-01-31T10:00:00 Z"}',
    b'{"at": "2024-01-31T10:00:00.+01:00"}',
    b'{"at": "2024-01-31T10:00:00.5 +01:00"}',
    b'{"at": "2024-01-31T10"}',
    b'{"at": "2024-01-31T10:5"}',
    b'{"at": "2024"}',
    b'{"at": "-2024-01-31T10:00:00"}',
    b'{"at": "+294247-01-01T00:00:00"}',
    b'{"at": "1582-10-10T00:00:00"}',
    b'{"at": 1700000000}',
    b'{"at": -1}',
    b'{"at": 9223372036854775807}',
    b'{"at": 99999999999999999}',
    # Binary: base64 with whitespace inside; empty.
    b'{"blob": "aGVs bG8="}',
    b'{"blob": "aGVs\\nbG8="}',
    # Nested values: a name twice keeps the last value; a map keeps a key twice, as Spark's from_json did.
    b'{"user": {"id": 1, "id": 2}, "attrs": {"x": 1, "y": 3, "x": 2}, "events": [{"k": 1, "k": 3}, {}], "tags": []}',
    b'{"user": {"home town": {"zip": 1}, "home town": null}, "attrs": {}, "x.y": 7}',
]
