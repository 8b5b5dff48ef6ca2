"""JSON payloads and what the replay makes of them: the cases the decoder's unit tests and its side-by-side test against
Spark's from_json share. The verdicts (quarantined or not) are Spark 4.3's from_json's, probed case by case."""

from __future__ import annotations

from typing import Any, NamedTuple

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


# --- Generated payloads: the side-by-side test's bulk -----------------------------------------------------------------

GENERATED_COUNT = 10_000
GENERATED_SEED = 44

_NON_NUMERIC = ["NaN", "Infinity", "-Infinity", "+Infinity", "-INF", "+INF", "INF", "+NaN", "-NaN", "-Inf", "+inf",
                "Infinityx", "-INFINITY", "nan", "+1", "+0.5"]  # fmt: skip
_FLOAT_WORDS = ["NaN", "Infinity", "-Infinity", "+Infinity", "-INF", "+INF", "INF", "inf", "-inf", "nan", " NaN", ""]
_ESCAPES = ["\\'", '\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u00e9", "\\u0041", "\\ud83d\\ude00",
            "\\ud83d", "\\ude00", "\\u0000", "\\u001F", "\\a", "\\x41", "\\u12", "\\U0041", "\\0"]  # fmt: skip
_CHARS = ["a", "Z", " ", "'", "é", "€", "😀", "\x7f", "\u2028", "\t", "\x01", "\ufeff", "0", "{", "]", ","]
_ZONES = ["Z", "+02:00", "-05:30", "+0530", "+5", "+18:00", "+19:00", "UTC", "GMT+1", "UT", " Europe/Paris", "EST", "Foo/Bar"]
_FIELDS = ["amount", "n", "b", "s", "price", "ratio", "ok", "name", "day", "at", "local", "blob", "tags", "attrs", "user",
           "events", "x.y", "f", "other"]  # fmt: skip


def generated_payloads(count: int = GENERATED_COUNT, seed: int = GENERATED_SEED) -> list[bytes]:
    """``count`` payloads for SCHEMA, the same for the same seed: doubles across the whole range (subnormals, powers of
    ten and their neighbours, the issue's), integers of every size, non-numeric numbers, escapes, strings in single
    quotes, nesting near Jackson's limit, numbers near its digit limit, numbers as strings, a value of every type of the
    schema, and mangled copies of all of these (a character dropped, doubled or changed) for the quarantine decisions."""
    import random

    rng = random.Random(seed)
    makers = [_double_payload] * 30 + [_integer_payload] * 8 + [_non_numeric_payload] * 6 + [_string_payload] * 10
    makers += [_nested_payload] * 2 + [_digits_payload] * 2 + [_as_string_payload] * 6 + [_typed_payload] * 14
    makers += [_mixed_payload] * 10
    payloads: list[bytes] = []
    while len(payloads) < count:
        payload = rng.choice(makers)(rng)
        if rng.random() < 0.12:
            payload = _mangled(rng, payload)
        payloads.append(payload)
    payloads[:4] = [_long_name_payload(n, rng) for n in (50_000, 50_001, 25_000, 25_001)]  # names at Jackson's limit
    return payloads


def _random_double(rng: Any) -> float:
    import math
    import struct

    kind = rng.randrange(7)
    if kind == 0:  # any finite double, by its bits
        while True:
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
            if math.isfinite(x):
                return float(x)
    if kind == 1:  # a subnormal
        return float(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(52)))[0]) * rng.choice((1, -1))
    if kind in (2, 3):  # a power of ten, or a short decimal, or a neighbour of one
        x = float(f"{rng.choice((1, 1, 2, 3, 5, 8.41, 9.99, 2.82879384806159, 1.2345))}e{rng.randint(-325, 308)}")
        bits = struct.unpack("<Q", struct.pack("<d", x))[0] + rng.choice((0, 0, 1, -1))
        y = struct.unpack("<d", struct.pack("<Q", max(bits, 0)))[0]
        return float(y) if math.isfinite(y) else x
    if kind == 4:  # a whole number, often past 2**53
        return float(rng.randint(1, 2 ** rng.randint(1, 80)))
    if kind == 5:
        return rng.uniform(-1e8, 1e8)
    return rng.uniform(0, 1) * 10.0 ** rng.randint(-10, 10)


def _number_text(rng: Any, x: float) -> str:
    """A double in one of the spellings a producer writes: Python's, Java's, %e, %.17g, with a trailing zero."""
    spelling = rng.randrange(6)
    if spelling == 0:
        text = repr(x)
    elif spelling == 1:
        text = f"{x:.17g}"
    elif spelling == 2:
        text = f"{x:.{rng.randint(0, 20)}e}"
    elif spelling == 3:
        text = f"{x:.{rng.randint(1, 16)}g}"
    elif spelling == 4:
        from kinesis_replay.core.java_double import java_double_to_string

        text = java_double_to_string(x)
    else:
        text = repr(x).upper().replace("E", "e+") if "e" in repr(x) and "-" not in repr(x).split("e")[1] else repr(x)
    if text in ("inf", "-inf", "nan"):
        return "1e400"
    if "." not in text and "e" not in text.lower():
        text += rng.choice(("", ".0", "e0", "E+00"))
    return text


def _float_midpoint_text(rng: Any) -> str:
    """A number a hair from half way between two neighbouring 32-bit floats, whose nearest double is that half way
    point: rounding it to a float through a double (a tie, to even) can differ from rounding it once."""
    import struct

    bits = rng.randrange(1, 0x7F7FFFFF)
    low, high = (struct.unpack("<f", struct.pack("<I", b))[0] for b in (bits, bits + 1))
    return f"{(low + high) / 2:.{rng.randint(18, 30)}g}" if rng.random() < 0.5 else str(int((low + high) / 2) or 1)


def _double_payload(rng: Any) -> bytes:
    if rng.random() < 0.15:
        return f'{{"f": {_float_midpoint_text(rng)}}}'.encode()
    texts = [_number_text(rng, _random_double(rng)) for _ in range(rng.randint(1, 4))]
    field = rng.choice(["ratio", "f", "name", "name", "price", "n", "other"])
    if field in ("name", "other") and len(texts) > 1:
        nested = rng.choice(("[{}]", '{{"x": [{}]}}', '[1, {{"y": [{}]}}]')).format(", ".join(texts))
        return f'{{"{field}": {nested}}}'.encode()
    pairs = [f'"{field}": {texts[0]}'] + [f'"{rng.choice(["ratio", "f", "name"])}": {t}' for t in texts[1:]]
    return ("{" + ", ".join(pairs) + "}").encode()


def _integer_payload(rng: Any) -> bytes:
    bits = rng.choice((7, 8, 15, 16, 31, 32, 53, 54, 63, 64, 65, 100, 200))
    value = rng.randint(-(2**bits), 2**bits) + rng.choice((0, 0, 1, -1))
    field = rng.choice(["amount", "n", "b", "s", "price", "ratio", "f", "name", "at", "tags", "attrs", "day"])
    text = str(value) if rng.random() < 0.9 else rng.choice(("-0", "0", "00", "-", "1" * 20))
    if field == "tags":
        return f'{{"tags": [{text}, {rng.randint(-5, 5)}]}}'.encode()
    if field == "attrs":
        return f'{{"attrs": {{"k": {text}}}}}'.encode()
    return f'{{"{field}": {text}}}'.encode()


def _non_numeric_payload(rng: Any) -> bytes:
    word = rng.choice(_NON_NUMERIC)
    field = rng.choice(["ratio", "f", "name", "other", "n", "price", "tags", "attrs", "user"])
    if field == "tags":
        return f'{{"tags": [{word}]}}'.encode()
    if field == "attrs":
        return f'{{"attrs": {{"a": {word}}}}}'.encode()
    if field == "user":
        return f'{{"user": {{"name": {word}}}}}'.encode()
    if field in ("name", "other") and rng.random() < 0.5:
        return f'{{"{field}": [1, {word}, {{"z": {word}}}]}}'.encode()
    space = rng.choice(("", " ", "\n"))
    return f'{{"{field}":{space}{word}{space}}}'.encode()


def _random_string(rng: Any, quote: str) -> str:
    parts = []
    for _ in range(rng.randint(0, 6)):
        pick = rng.random()
        if pick < 0.4:
            parts.append(rng.choice(_ESCAPES))
        elif pick < 0.9:
            parts.append(rng.choice(_CHARS))
        else:
            parts.append('"' if quote == "'" else "'")  # the other quote, raw
    return quote + "".join(parts).replace(quote, "\\" + quote if rng.random() < 0.8 else quote) + quote


def _string_payload(rng: Any) -> bytes:
    quote = "'" if rng.random() < 0.3 else '"'
    where = rng.randrange(5)
    value = _random_string(rng, quote)
    if where == 0:
        text = f'{{"name": {value}}}'
    elif where == 1:
        text = f'{{"user": {{"name": {value}, "id": 1}}}}'
    elif where == 2:
        text = f'{{"attrs": {{{value}: 1}}, "name": "k"}}'
    elif where == 3:
        text = f'{{{value}: "dropped", "n": 2}}'
    else:
        text = f"{{{quote}name{quote}: {value}, 'n': {rng.choice(('1', '2.5', quote + 'x' + quote))}}}"
    return text.encode("utf-8", "surrogatepass")


def _nested_payload(rng: Any) -> bytes:
    depth = rng.choice([rng.randint(2, 50), rng.randint(2, 50), rng.randint(890, 1000), rng.randint(995, 1002), 1000, 1001])
    inner = depth - 1  # the payload's own object is a level
    field = rng.choice(["other", "name", "x", "tags", "events", "user"])
    kind = rng.randrange(3)
    if kind == 0:
        value = "[" * inner + rng.choice(("", "1", "1e23", "-INF", '"s"')) + "]" * inner
    elif kind == 1:
        value = '{"a": ' * (inner - 1) + "{}" + "}" * (inner - 1) if inner > 0 else "1"
    else:
        opened = ["[" if rng.random() < 0.5 else '{"k":' for _ in range(inner)]
        value = "".join(opened) + "2.5" + "".join("]" if o == "[" else "}" for o in reversed(opened))
    extra = rng.choice(("", ', "n": 3', ", 'n': 4", ', "name": "\\\'"'))
    return f'{{"{field}": {value}{extra}}}'.encode()


def _digits_payload(rng: Any) -> bytes:
    whole = rng.randint(1, 1001)
    fraction = rng.choice((0, rng.randint(1, 1001 - min(whole, 1000))))
    exponent = rng.choice((0, 0, 1, 2, 3))
    text = rng.choice("123456789") + "".join(rng.choice("0123456789") for _ in range(whole - 1))
    if fraction:
        text += "." + "".join(rng.choice("0123456789") for _ in range(fraction))
    if exponent:
        text += rng.choice(("e", "E", "e+", "e-")) + "1" * exponent
    text = rng.choice(("", "-")) + text
    return f'{{"{rng.choice(["x", "ratio", "name", "amount", "price", "f"])}": {text}}}'.encode()


def _as_string_payload(rng: Any) -> bytes:
    field = rng.choice(["amount", "n", "b", "s", "price", "ratio", "f", "ok", "tags", "at", "day", "blob"])
    text = rng.choice(["12", "-7", "1.5", "1e2", "1,000.5", "1,2.5", " 3", "0x10", "NaN", "+INF", "Infinity", "-Infinity",
                       "true", "", "1e400", "12345678901234567890", "-0", "0.005", "999.995", "1.235", "+12",
                         str(rng.randint(-(2**32), 2**32)), str(rng.randint(-800_000, -140_000)), "12345678", " 12"])  # fmt: skip
    return f'{{"{field}": "{text}"}}'.encode()


def _typed_payload(rng: Any) -> bytes:
    """A value for each of a few fields, drawn from what each type reads and what it refuses."""
    values = {
        "ok": ["true", "false", "null", '"true"', "1", "0"],
        "day": ['"2024-01-31"', '"2024-1-5"', '"2024-02-30"', '"19000"', '"-0044-03-15"', '"+12345-01-01"', '" 2024-01-31 "',
                '"2024-01-31T10:00:00"', '"2024-01-31 junk"', '"31/01/2024"', '"2024-13-01"', '"0000-01-01"', "19000"],
        "blob": ['"aGVsbG8="', '"aGVsbG8"', '""', '"aGVs bG8="', '"aGVs\\nbG8="', '"!!"', '"YQ=="', '"YQ"', "1", '"YQ==YQ=="',
                 '"aG Vs"', '"aGVs2bG8="', '"YR=="', '"YQ=\\u0041"', '"\\u000baGVs"', '"aGVs\\u0000"', '"YQ==="', '"-_8="'],
        "tags": ["[]", "[1, 2, 3]", "[null]", "[1, \"x\"]", "[[1]]", "[2147483648]", "[1.0]", "{}", "1"],
        "attrs": ["{}", '{"a": 1}', '{"a": 1, "a": 2}', '{"a": "x"}', '{"a": null}', "[]", '{"": 0}'],
        "user": ['{"id": 1}', '{"id": 1, "id": 2}', '{"name": "x", "home town": {"zip": 1}}', '{"home town": null}', "[]",
                 '{"id": "7"}', '{"other": [1, {"a": 2}]}', "null"],
        "events": ['[{"k": 1}, {}]', '[{"k": 9223372036854775807}]', '[{"k": 1.5}]', "[5]", "[]", '[{"k": null, "k": 3}]'],
        "x.y": ["1", '"q"', "null"],
        "at": ['"2024-01-31T10:00:00Z"', '"2024-01-31 10:00:00.123456789"', '"2024-01-31T25:00:00"', '"2024"', "1700000000",
               "-1", '"2024-01-31T10"', '"yesterday"', '"2024-01-31T"', '"1582-10-10T00:00:00"', '"+294247-01-01T00:00:00"'],
        "local": ['"2024-01-31T10:00"', '"2024-01-31T10:00:00Z"', '"2024-01-31"', '"-0044-03-15 01:02"', "1"],
        "name": ['"x"', "42", "true", "null", '{"a": [1, 2.0]}', '[1e20, 1e-5, 0.001, 1e7, -0.0]', '"\\u00e9"'],
        "price": ["1.235", "-0.005", "999.995", "12345", '"1e2"', "1e-9", "0.005", "-999.99", "1E+2"],
    }  # fmt: skip
    fields = rng.sample(sorted(values), rng.randint(1, 4))
    pairs = []
    for field in fields:
        value = rng.choice(values[field])
        if field == "at" and value.startswith('"2024-01-31T10:00:00'):
            value = value[:-1] + rng.choice(_ZONES) + '"' if value.endswith('Z"') else value
        pairs.append(f'"{field}": {value}')
    return ("{" + ", ".join(pairs) + "}").encode()


def _mixed_payload(rng: Any) -> bytes:
    """Several of the other makers' fields in one object, some twice, with the whitespace JSON allows between."""
    parts = []
    for _ in range(rng.randint(2, 4)):
        one = rng.choice([_double_payload, _integer_payload, _non_numeric_payload, _typed_payload, _as_string_payload])(rng)
        parts.append(one.decode("utf-8", "surrogatepass").strip()[1:-1])
    space = rng.choice((" ", "", "\n", "\t", "\r\n  "))
    return ("{" + space + ("," + space).join(p for p in parts if p) + space + "}").encode("utf-8", "surrogatepass")


def _mangled(rng: Any, payload: bytes) -> bytes:
    """``payload`` with one byte dropped, doubled or replaced, or something put before or after it."""
    i = rng.randrange(len(payload)) if payload else 0
    how = rng.randrange(6)
    if how == 0:
        return payload[:i] + payload[i + 1 :]
    if how == 1:
        return payload[:i] + payload[i : i + 1] * 2 + payload[i + 1 :]
    if how == 2:
        return payload[:i] + bytes([rng.choice(b"{}[],:\"' \\-+.eE0123456789aINtfn\x00\x80\xff")]) + payload[i + 1 :]
    if how == 3:
        return rng.choice((b" ", b"\xef\xbb\xbf", b"\n", b"[", b"\x0c")) + payload
    if how == 4:
        return payload + rng.choice((b" trailing", b"}", b",", b"\x00", b"{", b"\xff"))
    return payload.replace(b'"', b"'", rng.randint(1, 3))


def _long_name_payload(units: int, rng: Any) -> bytes:
    """A payload whose one name has ``units`` UTF-16 units (an emoji is two)."""
    name = "a" * units if units > 40_000 else "\U0001f600" * units
    return ('{"' + name + '": 1, "n": ' + str(rng.randint(0, 9)) + "}").encode()


# --- Regressions: every payload whose decoding ever differed from Spark's from_json ----------------------------------


class Regression(NamedTuple):
    """A payload the tasks once decoded otherwise than Spark's from_json (Spark 4.3, Java 17), and what from_json makes of
    it: None when it quarantines the payload, else the columns it fills (the others are null), as the Parquet files
    hold them (a FLOAT as the double that holds the float, a DATE as days, a TIMESTAMP as microseconds)."""

    name: str
    payload: bytes
    expected: dict[str, Any] | None


_INF = float("inf")

REGRESSIONS: list[Regression] = [
    # Doubles in a STRING column: Java 17's Double.toString (FloatingDecimal), not the shortest digits (issue 44).
    Regression("1e23 as Java 17 prints it", b'{"name": 1e23}', {"name": "9.999999999999999E22"}),
    Regression("2e23 as Java 17 prints it", b'{"name": 2e23}', {"name": "1.9999999999999998E23"}),
    Regression("the least subnormal as Java 17 prints it", b'{"name": 5e-324}', {"name": "4.9E-324"}),
    Regression("8.41e21 in an object in a STRING", b'{"name": {"x": 8.41e21}}', {"name": '{"x":8.409999999999999E21}'}),
    Regression("a whole double below 2**63 with all its digits", b'{"name": 2.82879384806159E17}', {"name": "2.82879384806159008E17"}),
    Regression(
        "Java 17's digits in an array", b'{"name": [1e23, 2e23, 5e-324]}', {"name": "[9.999999999999999E22,1.9999999999999998E23,4.9E-324]"}
    ),
    # Jackson's non-numeric numbers, which Spark allows: +INF, -INF and +Infinity too.
    Regression("-INF is a DOUBLE", b'{"ratio": -INF}', {"ratio": -_INF}),
    Regression("+INF is a DOUBLE", b'{"ratio": +INF}', {"ratio": _INF}),
    Regression("+Infinity is a FLOAT", b'{"f": +Infinity}', {"f": _INF}),
    Regression(
        "-INF in a STRING, as Jackson writes it", b'{"name": [-INF, +INF, +Infinity]}', {"name": '["-Infinity","Infinity","Infinity"]'}
    ),
    Regression("+INF in a dropped field", b'{"x": +INF, "n": 1}', {"n": 1}),
    Regression("INF alone is no number", b'{"ratio": INF}', None),
    Regression("+NaN is no number", b'{"ratio": +NaN}', None),
    # \' escapes a quote in any string (Spark's allowSingleQuotes).
    Regression("\\' in a double-quoted string", b'{"name": "it\\\'s"}', {"name": "it's"}),
    Regression("\\' in a name", b'{"na\\\'me": 1, "n": 2}', {"n": 2}),
    Regression("\\' in a STRING's nested text", b'{"name": ["\\\'"]}', {"name": '["\'"]'}),
    # Jackson's 1000 levels of nesting (the payload's object is one), not Python's stack.
    Regression("nested 900 deep", b'{"other": ' + b"[" * 899 + b"]" * 899 + b', "n": 1}', {"n": 1}),
    Regression("nested 995 deep, in a STRING", b'{"name": ' + b"[" * 994 + b"]" * 994 + b"}", {"name": "[" * 994 + "]" * 994}),
    Regression("nested 1000 deep", b'{"name": ' + b'{"a":' * 998 + b"{}" + b"}" * 998 + b"}", {"name": '{"a":' * 998 + "{}" + "}" * 998}),
    Regression("nested 1001 deep", b'{"other": ' + b"[" * 1000 + b"]" * 1000 + b"}", None),
    # FLOAT: the payload's number rounded once to 32 bits (Jackson's getFloatValue), not through a double.
    Regression("a FLOAT just past half way", b'{"f": 1.0000000596046448}', {"f": 1.0000001192092896}),
    Regression("a long FLOAT just past half way", b'{"f": 1152921573326323713}', {"f": 1.1529216420458004e18}),
    Regression("the largest FLOAT", b'{"f": 3.4028235677973366e38}', {"f": 3.4028234663852886e38}),
    Regression("half way past the largest FLOAT", b'{"f": 340282356779733661637539395458142568448}', {"f": _INF}),
    Regression("the least FLOAT, just past half way", b'{"f": 7.006492321624086e-46}', {"f": 1.401298464324817e-45}),
    # Jackson's limits: digits (not characters) of a number, names of 50,000 UTF-16 units.
    Regression("1000 digits and a sign", b'{"name": -' + b"9" * 1000 + b"}", {"name": "-" + "9" * 1000}),
    Regression("1000 digits, a point and an exponent", b'{"ratio": 1.' + b"0" * 998 + b"e-5}", {"ratio": 1e-5}),
    Regression("1001 digits with the exponent's", b'{"ratio": 1.' + b"0" * 998 + b"e-15}", None),
    Regression("a name of 50,001 characters", b'{"' + b"a" * 50_001 + b'": 1}', None),
    Regression("a name of 25,001 emoji (50,002 UTF-16 units)", b'{"' + "\U0001f600".encode() * 25_001 + b'": 1}', None),
    Regression("a name of 25,000 emoji", b'{"' + "\U0001f600".encode() * 25_000 + b'": 1, "n": 3}', {"n": 3}),
    # Exponents past what Java's BigDecimal (an int's) or Python's Decimal hold.
    Regression("an exponent past Decimal's, in a DOUBLE", b'{"ratio": 4e251045309905573560496301907871324}', {"ratio": _INF}),
    Regression("an exponent past Decimal's, in a STRING", b'{"name": -4e251045309905573560496301907871324}', {"name": '"-Infinity"'}),
    Regression("an exponent past BigDecimal's, in a DECIMAL", b'{"price": 1e-3000000000}', None),
    # DATE: a number of days in a string, Spark's last resort (rebased from Java's hybrid calendar before 1582).
    Regression("days in a string", b'{"day": "12"}', {"day": 12}),
    Regression("days before 1970 in a string", b'{"day": "-7"}', {"day": -7}),
    Regression("Julian days in a string, rebased to Gregory's calendar", b'{"day": "-99999999"}', {"day": -99_997_958}),
    Regression("days past an int", b'{"day": "2147483648"}', None),
    # BINARY: Jackson's base64 (groups of four, padding required, spaces only between groups).
    Regression("base64 padded inside", b'{"blob": "YQ==YQ=="}', {"blob": b"aa"}),
    Regression("base64 then a control character", b'{"blob": "aGVs\\u0000"}', {"blob": b"hel"}),
    Regression("base64 with a padding group alone", b'{"blob": "aGVs2bG8="}', None),
    Regression("base64 with a space inside a group", b'{"blob": "aG Vs"}', None),
]
