"""A JSON payload decoded into payload.schema's columns, or why it does not decode, in one line that names the field and
the type.

Pure Python (no Spark, no pyarrow), so that it can be tested alone; the replay's tasks call it for each record
(``decode_json``). It decodes as the replay job did before its tasks wrote their own files, with Spark's ``from_json``
(which reads with Jackson), so that a pipeline's table gets the same values, and the same records are quarantined,
whichever release replayed a batch: a field of the schema whose value is missing or null is null, a field the schema
does not name is dropped, names match case and all, a name twice keeps its last value, only the first JSON value of a
payload is read (what follows it is ignored), and each type reads what Spark's reads (``tests/integration/
test_tasks_against_spark.py`` checks the two side by side, on the cases of ``tests/fakes/payload_cases.py`` and on
10,000 generated payloads).

Spark's JSON is Jackson's with Spark's options: strings and names in single quotes, ``\\'`` in any string, the
non-numeric numbers ``NaN``, ``Infinity``, ``-Infinity``, ``+Infinity``, ``-INF`` and ``+INF``, and Jackson's limits
(``StreamReadConstraints``): 1000 levels of nesting, names of 50,000 UTF-16 units, numbers of 1000 digits. Python's
``json`` reads the payloads that are plain JSON (nearly all, and fast); the others are read again by ``_JacksonReader``,
which follows Jackson's grammar, iteratively (so nesting is bounded by Jackson's limit, not by Python's stack). A double
in a STRING column is written as Java 17's ``Double.toString`` writes it (``java_double``), a FLOAT is the payload's
decimal rounded once to 32 bits, as Jackson's ``getFloatValue`` rounds it.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import struct
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from kinesis_replay.core.ddl import DdlType, ddl_name
from kinesis_replay.core.java_double import java_double_to_string

# The decoder's version: bump it whenever any input decodes to a different value or quarantine decision (a batch
# records it, so that a replay by a later release can tell a decoder change from a data change; a unit test holds it to
# a digest of what the decoder makes of its cases). "json-tasks/2": the tasks' decoder, agreeing with Spark 4.3's
# from_json on Java 17 (Jackson 2.21) for every value and quarantine decision the side-by-side test compares.
# "json-tasks/1" (never recorded) wrote the shortest digits of a double in STRING columns, rounded FLOATs through a
# double, quarantined +INF, -INF, +Infinity, \' in double-quoted strings, nesting deeper than Python's stack and
# DATE strings of days, and read base64 more leniently than Jackson.
DECODER_VERSION = "json-tasks/2"
# The reason the replay job gives a payload that failed to decode when this module finds no reason of its own.
UNEXPLAINED = "payload does not decode as payload.schema"
REASON_CHARS = 300  # a reason is a line of a table's row, never a page
VALUE_CHARS = 40  # how much of a bad value the reason quotes
# Jackson's limits (StreamReadConstraints' defaults in Jackson 2.21, which Spark 4.3 does not change): past them a
# payload is not JSON to Spark.
MAX_NUMBER_DIGITS = 1000  # a number's digits: whole part, fraction and exponent (no sign, point or "e")
MAX_NESTING = 1000  # objects and arrays open at once, the payload's own object counted
MAX_NAME_UNITS = 50_000  # a name's length in UTF-16 units (Java's chars), once its escapes are read
_WHITESPACE = " \t\r\n"  # JSON's whitespace, all Jackson skips: a payload of nothing else is blank
# Whole numbers of each type: the values Jackson reads into it. TINYINT takes up to 255 (Jackson's getByteValue
# accepts an unsigned byte, which Spark then stores wrapped: 200 becomes -56), so a reason never blames 128 to 255.
_INTEGERS = {"tinyint": (-128, 255), "smallint": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1),
             "bigint": (-(2**63), 2**63 - 1)}  # fmt: skip
_FLOAT_WORDS = frozenset({"NaN", "Infinity", "+Infinity", "-Infinity", "+INF", "-INF"})  # strings FLOAT/DOUBLE take
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # java.math.BigDecimal's, once "," are removed
# Spark's lenient date and timestamp strings (DateTimeUtils.stringToDate/stringToTimestamp), as far as shape goes.
_DATE = r"(?P<sign>[+-]?)(?P<year>\d{4,7})(?:-(?P<month>\d{1,2})(?:-(?P<day>\d{1,2}))?)?"
_TIME = r"(?P<hour>\d{1,2})(?::(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{0,9}))?)?)?"
# A zone: Z, an offset, UTC/GMT/UT with or without one, or a region (Europe/Paris, Japan, EST): whether Java knows
# the region is for ``_zone`` to say.
_ZONE = r"(?:Z|[+-]\d{1,2}(?::?\d{2}){0,2}|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2}){0,2})?|[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*)"
_CLOCK = r"(?P<hour>\d{1,2}):(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{1,9}))?)?"  # a time of day alone
_DATE_TEXT = re.compile(rf"{_DATE}(?:[ T].*)?", re.DOTALL)
_TIMESTAMP_TEXT = re.compile(rf"{_DATE}(?:[ T](?:{_TIME})?)? ?(?P<zone>{_ZONE})?")
_CLOCK_TEXT = re.compile(rf"T?{_CLOCK} ?(?P<zone>{_ZONE})?")  # a timestamp of today
_TIME_TEXT = re.compile(_CLOCK)


class _Object:
    """A JSON object as its (key, value) pairs in order, a key twice kept twice (Spark reads every one)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


class _Fraction:
    """A JSON number with a fraction or an exponent, or a non-numeric number (NaN, +INF...): Jackson's float token."""

    __slots__ = ("text", "value")

    def __init__(self, text: str) -> None:
        _check_digits(text)
        self.text, self.value = text, _big_decimal(text)


_INT32 = (-(2**31), 2**31 - 1)


def _big_decimal(text: str) -> Decimal:
    """The number as Jackson's getDecimalValue reads it (java.math.BigDecimal), NaN where BigDecimal reads none: a
    non-numeric number, an exponent past an int, a scale (digits after the point less the exponent) past an int."""
    try:
        number = Decimal(text)  # Decimal reads every spelling of the non-numeric numbers, and exponents past Java's
    except InvalidOperation:  # an exponent past even Decimal's: no double reads it either (float() makes it 0 or inf)
        return Decimal("NaN")
    if number.is_finite():
        mantissa, _, exponent = text.lower().partition("e")
        scale = len(mantissa.partition(".")[2]) - int(exponent or 0)
        if not (_INT32[0] <= int(exponent or 0) <= _INT32[1] and _INT32[0] <= scale <= _INT32[1]):
            return Decimal("NaN")
    return number


def _integer(text: str) -> int:
    _check_digits(text)
    return int(text)


def _check_digits(text: str) -> None:
    if len(text) > MAX_NUMBER_DIGITS:  # only then can there be too many digits
        digits = sum(c.isdigit() for c in text)
        if digits > MAX_NUMBER_DIGITS:
            raise ValueError(f"a number of {digits} digits (at most {MAX_NUMBER_DIGITS})")


_DECODER = json.JSONDecoder(parse_float=_Fraction, parse_int=_integer, parse_constant=_Fraction, object_pairs_hook=_Object)


Decoded = dict[str, Any]  # a payload's columns by name: None, or what pyarrow takes for the column's type (json_columns)


def decode_json(schema: DdlType, data: bytes | bytearray | None) -> tuple[Decoded | None, str | None]:
    """``data`` decoded into ``schema``'s columns (a struct, from ``ddl.parse_ddl_schema``), or None and why not.

    The values are what pyarrow takes for each column's type: a date as days since 1970-01-01 and a timestamp as
    microseconds since its start (Spark's own numbers, whose years go past Python's 9999), a DECIMAL as a Decimal
    rounded to its scale, a MAP as its (key, value) pairs in the payload's order, a STRUCT as a dict. The reason is one line:
    ``field "amount": expected BIGINT, got string "abc"``, ``field "user.id": expected INT, got 1.5``, ``not valid
    JSON: ...``, ``not UTF-8: ...``, ``not a JSON object (got array)``, ``blank payload``: the first field at fault, in
    the payload's order. A payload of None (no record has one) decodes to no columns.
    """
    if data is None:
        return {}, None
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    start = len(text) - len(text.lstrip(_WHITESPACE))
    if start == len(text):
        return None, "blank payload"
    try:
        value = _parse(text, start)
        if not isinstance(value, _Object):
            return None, f"not a JSON object (got {_kind(value)})"
        reason = _check_struct(schema, value, "")
        if reason is None:
            return _struct_value(schema, value), None
    except RecursionError:  # a schema's own nesting, deeper than Python's stack (a payload's is read iteratively)
        return None, "not valid JSON: nested too deeply"
    except ValueError as exc:  # json.JSONDecodeError, or past one of Jackson's limits
        reason = f"not valid JSON: {exc}"
    return None, _line(reason)


def json_decode_error(schema: DdlType, data: bytes | bytearray | None) -> str | None:
    """Why ``data`` does not decode into ``schema``; None when it does (``decode_json``'s reason)."""
    return decode_json(schema, data)[1]


def _parse(text: str, start: int) -> Any:
    """The payload's first JSON value, as Jackson reads it with Spark's options.

    Python's json reads plain JSON; what it refuses, Jackson may still read (single quotes, \\', +INF, nesting deeper
    than Python's stack): ``_JacksonReader`` decides those, and the reason stays Python's when both refuse.
    """
    try:
        value = _DECODER.raw_decode(text, start)[0]
    except (json.JSONDecodeError, RecursionError) as exc:
        try:
            return _JacksonReader(text).value(start)
        except ValueError as again:
            if isinstance(exc, RecursionError) or str(again) == _TOO_DEEP:
                raise ValueError(_TOO_DEEP) from None
            raise exc from None
    # Python's json has no limit on names, nor one on nesting that Jackson's is sure to be under: checked when the
    # payload is long enough to reach them (two counts over the text, in C: nearly never more).
    if len(text) > MAX_NAME_UNITS // 2 or text.count("[", start) + text.count("{", start) > MAX_NESTING:
        _check_limits(value)
    return value


_TOO_DEEP = "nested too deeply"


def _name_units(name: str) -> int:
    """A name's length as Java counts it: in UTF-16 units (a character past the BMP is two)."""
    return len(name) if len(name) <= MAX_NAME_UNITS // 2 else len(name.encode("utf-16-le", "surrogatepass")) // 2


def _check_limits(value: Any) -> None:
    """Raise ValueError if ``value`` (read by Python's json) nests deeper or has a longer name than Jackson reads."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, _Object)) and depth > MAX_NESTING:
            raise ValueError(_TOO_DEEP)
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, _Object):
            for key, v in item.pairs:
                if _name_units(key) > MAX_NAME_UNITS:
                    raise ValueError(f"a name of {_name_units(key)} characters (at most {MAX_NAME_UNITS})")
                stack.append((v, depth + 1))


_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_PLAIN = {'"': re.compile(r'[^"\\\x00-\x1f]*'), "'": re.compile(r"[^'\\\x00-\x1f]*")}  # a string's unescaped run
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "'": "'"}
_HEX = re.compile(r"[0-9a-fA-F]{4}")
# Words Jackson reads where a value starts (true, false, null, and the non-numeric numbers Spark allows), by the
# characters that start them; a longer spelling first, where one starts another (-INF and -Infinity).
_WORDS = {
    "t": (("true", True),), "f": (("false", False),), "n": (("null", None),), "N": (("NaN", "NaN"),),
    "I": (("Infinity", "Infinity"),), "-": (("-Infinity", "-Infinity"), ("-INF", "-INF")),
    "+": (("+Infinity", "+Infinity"), ("+INF", "+INF")),
}  # fmt: skip


_MORE = object()  # _JacksonReader's "a container was opened (or a comma read): read its next value"


class _Open:
    """A container _JacksonReader has open, and the name its next value goes under (an object's)."""

    __slots__ = ("container", "name")

    def __init__(self, container: list[Any] | _Object, name: str) -> None:
        self.container, self.name = container, name


class _JacksonReader:
    """The first JSON value of a text, read as Jackson reads it with Spark's JSON options, with a stack of its own.

    Spark's options that change what reads: single-quoted strings and names (allowSingleQuotes, which also lets \\'
    escape a quote in any string), the non-numeric numbers (allowNonNumericNumbers); no comments, no unquoted names or
    control characters, no leading zeros, no "+1". Values are what ``_DECODER`` makes of the same text.
    """

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, what: str, at: int) -> ValueError:
        line = self.text.count("\n", 0, at) + 1
        column = at - self.text.rfind("\n", 0, at)
        return ValueError(f"{what}: line {line} column {column} (char {at})")

    def space(self, at: int) -> int:
        match = _SPACE.match(self.text, at)
        assert match is not None  # the pattern matches nothing too
        return match.end()

    def value(self, at: int) -> Any:
        """The value at ``at`` (past any whitespace), its containers kept on a list, never on Python's stack."""
        open_: list[_Open] = []
        at = self.space(at)
        while True:
            item, at = self.begin(at, open_)
            if item is not _MORE:
                item, at = self.finish(item, at, open_)
                if item is not _MORE:
                    return item

    def begin(self, at: int, open_: list[_Open]) -> tuple[Any, int]:
        """The value at ``at``, or ``_MORE`` when it opens a container that has a first value to read."""
        c = self.text[at : at + 1]
        if c not in ("{", "["):
            return self.scalar(at)
        if len(open_) >= MAX_NESTING:
            raise ValueError(_TOO_DEEP)
        at = self.space(at + 1)
        if self.text[at : at + 1] == ("]" if c == "[" else "}"):
            return ([] if c == "[" else _Object([])), at + 1
        if c == "[":
            open_.append(_Open([], ""))
            return _MORE, at
        name, at = self.name(at)
        open_.append(_Open(_Object([]), name))
        return _MORE, at

    def finish(self, value: Any, at: int, open_: list[_Open]) -> tuple[Any, int]:
        """``value`` put in its container, and each container it closes in the one around it: the outermost value
        when all are closed, else ``_MORE`` (a comma: the next value is at ``at``)."""
        while open_:
            top = open_[-1]
            if isinstance(top.container, _Object):
                top.container.pairs.append((top.name, value))
            else:
                top.container.append(value)
            at = self.space(at)
            c = self.text[at : at + 1]
            if c == ",":
                at = self.space(at + 1)
                if isinstance(top.container, _Object):
                    top.name, at = self.name(at)
                return _MORE, at
            if c != ("}" if isinstance(top.container, _Object) else "]"):
                raise self.fail("Expecting ',' delimiter", at)
            open_.pop()
            value, at = top.container, at + 1
        return value, at

    def name(self, at: int) -> tuple[str, int]:
        """A name, its colon and the whitespace after it."""
        if self.text[at : at + 1] not in ('"', "'"):
            raise self.fail("Expecting property name enclosed in quotes", at)
        name, at = self.string(at)
        if _name_units(name) > MAX_NAME_UNITS:
            raise self.fail(f"a name of {_name_units(name)} characters (at most {MAX_NAME_UNITS})", at)
        at = self.space(at)
        if self.text[at : at + 1] != ":":
            raise self.fail("Expecting ':' delimiter", at)
        return name, self.space(at + 1)

    def scalar(self, at: int) -> tuple[Any, int]:
        text = self.text
        c = text[at : at + 1]
        if c in ('"', "'"):
            return self.string(at)
        number = _NUMBER.match(text, at)
        if number is not None:
            token = number.group()
            if number.group(1) is None and number.group(2) is None:
                return _integer(token), number.end()
            return _Fraction(token), number.end()
        for word, value in _WORDS.get(c, ()):
            if text.startswith(word, at):
                return (_Fraction(value) if isinstance(value, str) else value), at + len(word)
        raise self.fail("Expecting value", at)

    def string(self, at: int) -> tuple[str, int]:
        """The string whose opening quote (double or single) is at ``at``, and where it ends."""
        text, quote = self.text, self.text[at]
        plain, parts = _PLAIN[quote], []
        at += 1
        while True:
            run = plain.match(text, at)
            assert run is not None
            parts.append(run.group())
            at = run.end()
            c = text[at : at + 1]
            if c == quote:
                found = "".join(parts)
                if _SURROGATE.search(found):  # an escaped pair is one character, as Python's json makes it
                    found = found.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
                return found, at + 1
            if c != "\\":
                raise self.fail("Unterminated string" if not c else "Invalid control character at", at)
            escaped = text[at + 1 : at + 2]
            if escaped in _ESCAPES:
                parts.append(_ESCAPES[escaped])
                at += 2
            elif escaped == "u" and _HEX.fullmatch(text, at + 2, at + 6):
                parts.append(chr(int(text[at + 2 : at + 6], 16)))
                at += 6
            else:
                raise self.fail("Invalid \\escape", at)


def _check_struct(struct: DdlType, obj: _Object, path: str) -> str | None:
    types = dict(struct.children)
    for key, value in obj.pairs:
        kind = types.get(key)
        if kind is not None:
            reason = _check(kind, value, f"{path}.{ddl_name(key)}" if path else ddl_name(key))
            if reason is not None:
                return reason
    return None


def _check(t: DdlType, value: Any, path: str) -> str | None:
    """Why ``value`` is not a ``t``, or None: a null is always one (the payload's fields are all nullable)."""
    if value is None:
        return None
    kind = t.kind
    if kind in ("struct", "array", "map"):
        return _check_nested(t, value, path)
    if kind in ("string", "char", "varchar", "variant") or kind.startswith("interval") or kind == "void":
        return None  # STRING takes any value (a non-string as its JSON text); the others are not checked here
    ok, out_of_range = _check_simple(t, value)
    if ok:
        return None
    return f'field "{path}": expected {t}, got {_show(value)}' + (", out of range" if out_of_range else "")


def _check_nested(t: DdlType, value: Any, path: str) -> str | None:
    if t.kind == "struct" and isinstance(value, _Object):
        return _check_struct(t, value, path)
    if t.kind == "array" and isinstance(value, list):
        element = t.children[0][1]
        return next((r for i, v in enumerate(value) if (r := _check(element, v, f"{path}[{i}]")) is not None), None)
    if t.kind == "map" and isinstance(value, _Object):
        item = t.children[1][1]
        return next((r for k, v in value.pairs if (r := _check(item, v, f"{path}[{k}]")) is not None), None)
    return f'field "{path}": expected {t}, got {_show(value)}'


def _check_simple(t: DdlType, value: Any) -> tuple[bool, bool]:
    """(whether ``value`` reads as a ``t``, whether it is a number of the right kind out of the type's range)."""
    is_int = type(value) is int  # bool is an int to Python, never to JSON
    if t.kind in _INTEGERS:
        low, high = _INTEGERS[t.kind]
        return (is_int and low <= value <= high), is_int
    if t.kind == "decimal":
        if is_int or isinstance(value, _Fraction):
            number = Decimal(value) if is_int else value.value
        elif isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value.replace(",", "")):
            number = Decimal(value.replace(",", ""))
        else:
            return False, False
        fits = _fits(number, *t.params)
        return fits, not fits
    if t.kind in ("timestamp", "timestamp_ntz"):
        micros = _timestamp(value, zoned=t.kind == "timestamp")
        return isinstance(micros, int), micros is _OUT_OF_RANGE
    accepts = _ACCEPTS.get(t.kind)
    return accepts is None or accepts(value), False  # a type this module does not know is never blamed


def _is_float(value: Any) -> bool:
    return type(value) is int or isinstance(value, _Fraction) or (isinstance(value, str) and value in _FLOAT_WORDS)


def _is_time_value(value: Any) -> bool:
    match = _TIME_TEXT.fullmatch(value) if isinstance(value, str) else None
    return match is not None and _is_time(match)


def _fits(number: Decimal, precision: int, scale: int) -> bool:
    """Whether ``number``, rounded half up to ``scale`` places as Spark does, has at most ``precision`` digits."""
    if not number.is_finite():
        return False
    try:
        number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=Context(prec=max(precision, 1)))
    except InvalidOperation:
        return False
    return True


_BASE64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _base64(text: str) -> bytes | None:
    """A BINARY's bytes as Jackson's getBinaryValue reads them (its MIME-NO-LINEFEEDS variant), None if it reads none:
    groups of four characters, padding required, "=" only at the end of a group (a group may end in "==" or "=" and
    another follow), any character up to a space skipped before a group but never inside one."""
    out = bytearray()
    i, n = 0, len(text)
    while True:
        while i < n and text[i] <= " ":
            i += 1
        if i == n:
            return bytes(out)
        group = text[i : i + 4]
        i += 4
        if len(group) < 4 or group[0] not in _BASE64 or group[1] not in _BASE64:
            return None
        bits = _BASE64[group[0]] << 6 | _BASE64[group[1]]
        if group[2] == "=":
            if group[3] != "=":
                return None
            out.append(bits >> 4)
            continue
        if group[2] not in _BASE64:
            return None
        bits = bits << 6 | _BASE64[group[2]]
        if group[3] == "=":
            out += (bits >> 2).to_bytes(2, "big")
        elif group[3] in _BASE64:
            out += (bits << 6 | _BASE64[group[3]]).to_bytes(3, "big")
        else:
            return None


def _is_date(text: str) -> bool:
    match = _DATE_TEXT.fullmatch(text.strip())
    return (match is not None and _is_day(match)) or _day_number(text) is not None


_DAY_NUMBER = re.compile(r"[+-]?\d+")  # java.lang.Integer.parseInt's text (no spaces; Unicode's digits too, as Java's)
_JULIAN_UNTIL = -141_427  # 1582-10-15, the first Gregorian day of Java's hybrid calendar, in days since 1970-01-01


def _day_number(text: str) -> int | None:
    """A DATE Spark reads from a number of days in a string (Spark 1.5's way, its last resort when the text is no date):
    the days since 1970-01-01 of Java's hybrid calendar, rebased as Spark rebases them (RebaseDateTime: the same
    year, month and day in the proleptic Gregorian calendar). None when the text is not a Java int."""
    if _DAY_NUMBER.fullmatch(text) is None or not _INT32[0] <= (days := int(text)) <= _INT32[1]:
        return None
    if days >= _JULIAN_UNTIL:
        return days
    # The Julian calendar's date of that day (its cycle is 4 years, 1461 days: moved into positive numbers first).
    cycles = 0
    c = days + 2_440_588 + 32_082  # the Julian day number of 1970-01-01 is 2440588
    if c < 0:
        cycles = -c // 1461 + 1
        c += cycles * 1461
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    day, month, year = e - (153 * m + 2) // 5 + 1, m + 3 - 12 * (m // 10), d - 4800 + m // 10 - 4 * cycles
    # Spark takes the month's first day and adds the rest: a Julian 29 February of a year Gregory has none is 1 March.
    rebased = _civil_days(year, month, 1) + day - 1
    return rebased if _INT32[0] <= rebased <= _INT32[1] else None


def _is_day(match: re.Match[str]) -> bool:
    year = int(match["year"]) * (-1 if match["sign"] == "-" else 1)
    month, day = int(match["month"] or 1), int(match["day"] or 1)
    # The leap years repeat every 400 years: calendar's range of years need not cover Spark's.
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(2000 + year % 400, month)[1]


def _is_time(match: re.Match[str]) -> bool:
    limits = {"hour": 23, "minute": 59, "second": 59}
    return all(match[part] is None or int(match[part]) <= limit for part, limit in limits.items())


# What each of the other simple types takes.
_ACCEPTS: dict[str, Callable[[Any], bool]] = {
    "float": _is_float,
    "double": _is_float,
    "boolean": lambda value: isinstance(value, bool),
    "binary": lambda value: isinstance(value, str) and _base64(value) is not None,
    "date": lambda value: isinstance(value, str) and _is_date(value),
    "time": _is_time_value,
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, _Fraction)):
        return "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


def _show(value: Any) -> str:
    """A bad value as the reason quotes it: a string in quotes, a number as written, others by their kind."""
    if isinstance(value, str):
        shown = value if len(value) <= VALUE_CHARS else value[:VALUE_CHARS] + "..."
        return "string " + json.dumps(shown, ensure_ascii=False)
    if isinstance(value, (int, _Fraction)) and not isinstance(value, bool):
        text = value.text if isinstance(value, _Fraction) else str(value)
        return text if len(text) <= VALUE_CHARS else f"{text[:VALUE_CHARS]}... ({len(text)} characters)"
    return _kind(value)


def _line(reason: str) -> str:
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


# --- Values: what each type holds once read, as Spark's from_json reads it -------------------------------------------

# Types a payload's columns cannot have, and why: none of them ever decoded (Spark refuses them in from_json's schema,
# or a MAP's keys other than strings), or the replay has no writer for their values (VARIANT's binary encoding,
# INTERVAL's text forms, VOID's column of nulls). Declared STRING, a field keeps its value as JSON text.
NOT_DECODED = {
    "char": "Spark's from_json never read CHAR or VARCHAR",
    "varchar": "Spark's from_json never read CHAR or VARCHAR",
    "time": "Spark 4.3 does not support TIME",
    "variant": "the replay does not write VARIANT's binary encoding",
    "void": "a VOID column holds nothing",
}
_INT64 = (-(2**63), 2**63 - 1)
_SHORT = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}  # Jackson's short escapes
# java.time.ZoneId.SHORT_IDS, which Spark's zone lookup reads first: a three-letter zone as Java means it.
_SHORT_IDS = {
    "ACT": "Australia/Darwin", "AET": "Australia/Sydney", "AGT": "America/Argentina/Buenos_Aires", "ART": "Africa/Cairo",
    "AST": "America/Anchorage", "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka", "CAT": "Africa/Harare",
    "CNT": "America/St_Johns", "CST": "America/Chicago", "CTT": "Asia/Shanghai", "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris", "IET": "America/Indiana/Indianapolis", "IST": "Asia/Kolkata", "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia", "NET": "Asia/Yerevan", "NST": "Pacific/Auckland", "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix", "PRT": "America/Puerto_Rico", "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh", "EST": "-05:00", "MST": "-07:00", "HST": "-10:00",
}  # fmt: skip
_SURROGATE = re.compile("[\ud800-\udfff]")  # a half of a UTF-16 pair, which only a \\u escape can leave alone
_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")


def undecoded_columns(schema: DdlType, path: str = "") -> list[str]:
    """Where ``schema`` has a type the decoder does not read, as ``column "x": VARIANT (why)``; empty when none."""
    found: list[str] = []
    for name, t in schema.children:
        where = f"{path}.{ddl_name(name)}" if path else ddl_name(name)
        if t.kind in NOT_DECODED or t.kind.startswith("interval"):
            why = NOT_DECODED.get(t.kind, "the replay does not read INTERVAL's text forms")
            found.append(f'column "{where}": {t} ({why})')
        elif t.kind == "map" and t.children[0][1].kind != "string":
            found.append(f"column \"{where}\": {t} (a JSON object's keys are strings: a MAP's keys must be STRING)")
        elif t.kind in ("struct", "array", "map"):
            found += undecoded_columns(DdlType("struct", (), t.children if t.kind == "struct" else t.children[-1:]), where)
    return found


def _struct_value(struct: DdlType, obj: _Object) -> Decoded:
    types = dict(struct.children)
    values: Decoded = dict.fromkeys(types)
    for key, value in obj.pairs:
        kind = types.get(key)
        if kind is not None:  # a name twice: the last value stays, as in Spark's row
            values[key] = _value(kind, value)
    return values


def _value(t: DdlType, value: Any) -> Any:
    """``value`` (already checked as a ``t``: ``_check``, which names the field at fault) as the column holds it."""
    if value is None:
        return None
    if t.kind == "struct":
        return _struct_value(t, value)
    if t.kind == "array":
        return [_value(t.children[0][1], v) for v in value]
    if t.kind == "map":
        # Every pair, a key twice kept twice: Spark's from_json builds the map so, and its Parquet writer writes it so.
        return [(_java_text(key), _value(t.children[1][1], v)) for key, v in value.pairs]
    if t.kind in _INTEGERS:
        return value - 256 if t.kind == "tinyint" and value > 127 else value  # Jackson's unsigned byte, stored wrapped
    return _VALUES[t.kind](t, value)  # payload.schema has no other type (undecoded_columns)


def _decimal(t: DdlType, value: Any) -> Decimal:
    number = Decimal(value) if type(value) is int else value.value if isinstance(value, _Fraction) else Decimal(value.replace(",", ""))
    return number.quantize(Decimal(1).scaleb(-t.params[1]), rounding=ROUND_HALF_UP, context=Context(prec=max(t.params[0], 1)))


def _date(t: DdlType, value: Any) -> int:
    match = _DATE_TEXT.fullmatch(value.strip())
    if match is not None and _is_day(match):
        return _days(match)
    days = _day_number(value)
    assert days is not None  # _check read it
    return days


# Each simple type's value, from a JSON value _check accepted: (type, value) -> what the column holds.
_VALUES: dict[str, Callable[[DdlType, Any], Any]] = {
    "decimal": _decimal,
    "float": lambda t, value: _float32(value),
    "double": lambda t, value: _float(value),
    "boolean": lambda t, value: value,
    "string": lambda t, value: _java_text(value) if isinstance(value, str) else _json_text(value),
    "binary": lambda t, value: _base64(value),
    "date": _date,
    "timestamp": lambda t, value: _timestamp(value, zoned=True),
    "timestamp_ntz": lambda t, value: _timestamp(value, zoned=False),
}


def _float(value: Any) -> float:
    if isinstance(value, str):
        return float(value)  # NaN, Infinity, +INF and the like: Python reads every spelling Jackson takes
    if isinstance(value, _Fraction):
        return float(value.text)
    try:
        return float(value)
    except OverflowError:  # a whole number past a double's range: Jackson's double is infinite
        return math.inf if value > 0 else -math.inf


_FLOAT32_OVERFLOW = 2**128 - 2**103  # half way from the largest float to the next power of two: infinite from there


def _float32(value: Any) -> float:
    """A FLOAT's value as Jackson's getFloatValue reads it: the payload's number rounded once, to the nearest 32-bit
    float (Float.parseFloat, or a long's or a BigInteger's conversion), never through a double first. The result is a
    double that holds that float exactly, so pyarrow's conversion to float32 keeps it."""
    double = _float(value)
    exact: Decimal | int | None = value.value if isinstance(value, _Fraction) else value if type(value) is int else None
    magnitude = abs(double)
    if exact is None or not math.isfinite(double) or magnitude == 0:
        return double
    if magnitude >= _FLOAT32_OVERFLOW:  # a double at the half way point may stand for a number just under it
        under = exact is not None and abs(Fraction(exact)) < _FLOAT32_OVERFLOW
        return math.copysign(3.4028234663852886e38 if under else math.inf, double)
    rounded = struct.unpack("<f", struct.pack("<f", magnitude))[0]  # to nearest, ties to even
    if rounded != magnitude:
        # Rounding twice goes wrong only where the double is half way between two floats: there the number decides.
        bits = struct.unpack("<I", struct.pack("<f", rounded))[0]
        other = struct.unpack("<f", struct.pack("<I", bits + 1 if rounded < magnitude else bits - 1))[0]
        if (rounded + other) / 2 == magnitude:
            number = abs(Fraction(exact))
            if number != magnitude:
                rounded = max(rounded, other) if number > magnitude else min(rounded, other)
    return math.copysign(rounded, double)


def _days(match: re.Match[str]) -> int:
    """Days since 1970-01-01 of the match's proleptic Gregorian date (a year may have up to 7 digits and a sign)."""
    year = int(match["year"]) * (-1 if match["sign"] == "-" else 1)
    return _civil_days(year, int(match["month"] or 1), int(match["day"] or 1))


def _civil_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (year 0 is 1 BC)."""
    year -= month <= 2  # days from civil (H. Hinnant): a year that starts in March puts the leap day last
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719_468


_OUT_OF_RANGE = "out of range"  # a timestamp Spark reads, past what its 64 bits of microseconds hold


def _timestamp(value: Any, zoned: bool) -> int | str | None:
    """A TIMESTAMP's (``zoned``) or TIMESTAMP_NTZ's microseconds since 1970-01-01 (UTC for TIMESTAMP), as Spark reads
    ``value``; None when it reads none, ``_OUT_OF_RANGE`` when the instant is past a long's microseconds."""
    if type(value) is int:  # seconds (a TIMESTAMP's only), multiplied as Spark multiplies a long: wrapped past 64 bits
        if not zoned:
            return None
        if not _INT64[0] <= value <= _INT64[1]:
            return _OUT_OF_RANGE
        return ((value * 10**6 - _INT64[0]) % 2**64) + _INT64[0]
    if not isinstance(value, str):
        return None
    text = value.strip()
    dated = _TIMESTAMP_TEXT.fullmatch(text)
    match = dated or _CLOCK_TEXT.fullmatch(text)
    if match is None or (match["zone"] and not zoned) or (dated is None and not zoned):  # NTZ: no zone, no time alone
        return None
    if not ((dated is None or _is_day(dated)) and _is_time(match)):
        return None
    if dated is not None and dated["hour"] is None and text[max(dated.end(g) for g in ("year", "month", "day") if dated[g]) :]:
        return None  # a date and a "T", a zone or more, but no time: Spark reads no timestamp there
    zone = _zone(match["zone"]) if match["zone"] else 0
    if zone is None:
        return None
    fraction = (match["fraction"] or "")[:6].ljust(6, "0")
    clock = (int(match["hour"] or 0) * 60 + int(match["minute"] or 0)) * 60 + int(match["second"] or 0)
    if dated is not None:
        days = _days(dated)
    else:  # a time of day alone is today's, in its zone (Spark's reading, which a rerun on another day changes)
        days = (datetime.now(zone if isinstance(zone, zoneinfo.ZoneInfo) else UTC).date() - datetime(1970, 1, 1).date()).days
    offset = zone if isinstance(zone, int) else _region_offset(zone, days, clock)
    micros = (days * 86_400 + clock - offset) * 10**6 + int(fraction)
    return micros if _INT64[0] <= micros <= _INT64[1] else _OUT_OF_RANGE


def _zone(text: str) -> int | zoneinfo.ZoneInfo | None:
    """A zone as seconds east of UTC, or a region, as Java's ZoneId.of (with SHORT_IDS) reads it; None if it does not."""
    if text == "Z":
        return 0
    for prefix in ("UTC", "GMT", "UT"):
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            return 0 if not rest else _offset(rest)
    text = _SHORT_IDS.get(text, text)
    if text[0] in "+-":
        return _offset(text)
    try:
        return zoneinfo.ZoneInfo(text)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return None


def _offset(text: str) -> int | None:
    match = _OFFSET.fullmatch(text)
    if match is None:
        return None
    hours, minutes, seconds = (int(g or 0) for g in match.groups()[1:])
    total = hours * 3600 + minutes * 60 + seconds
    if minutes > 59 or seconds > 59 or total > 18 * 3600:  # java.time.ZoneOffset's limits
        return None
    return -total if match[1] == "-" else total


def _region_offset(zone: zoneinfo.ZoneInfo, days: int, clock: int) -> int:
    """The region's offset at that local time: in a gap the one before it, in an overlap the earlier (Java's choice).

    Python's dates stop at year 9999: a date past them takes the offset of the same day in the last 400-year cycle they
    hold (the rules repeat no later than that, and no zone's table names such years).
    """
    day = datetime(1970, 1, 1).toordinal() + days
    while day < 1:
        day += 146_097
    while day > datetime(9999, 12, 31).toordinal():
        day -= 146_097
    moment = datetime.fromordinal(day).replace(hour=clock // 3600, minute=clock // 60 % 60, second=clock % 60, tzinfo=zone)
    offset = moment.utcoffset()
    return 0 if offset is None else int(offset.total_seconds())


def _json_text(value: Any) -> str:
    """A value that is not a string, as a STRING column holds it: the JSON text Jackson writes for it (compact, a
    fraction as Java 17 prints a double, NaN and Infinity quoted)."""
    try:
        return _json_text_nested(value)
    except RecursionError:  # up to Jackson's 1000 levels: more than Python's stack, written with a list of its own
        return _json_text_flat(value)


def _json_text_nested(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join([_json_text_nested(v) for v in value]) + "]"
    if isinstance(value, _Object):
        return "{" + ",".join([f"{_jackson_string(k)}:{_json_text_nested(v)}" for k, v in value.pairs]) + "}"
    return _json_scalar(value)


class _Text(str):
    """Text ``_json_text_flat`` writes as it is (a bracket, a comma, a name and its colon)."""


def _json_text_flat(value: Any) -> str:
    out: list[str] = []
    todo: list[Any] = [value]  # what is left to write, the next last
    while todo:
        item = todo.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, list):
            out.append("[")
            todo.append(_Text("]"))
            for i, v in enumerate(reversed(item)):
                todo += [v] if i == len(item) - 1 else [v, _Text(",")]
        elif isinstance(item, _Object):
            out.append("{")
            todo.append(_Text("}"))
            for i, (k, v) in enumerate(reversed(item.pairs)):
                todo += [v, _Text(_jackson_string(k) + ":")] + ([] if i == len(item.pairs) - 1 else [_Text(",")])
        else:
            out.append(_json_scalar(item))
    return "".join(out)


def _json_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, _Fraction):
        return _java_double(float(value.text))
    return _jackson_string(value)


def _java_double(x: float) -> str:
    """``x`` as Jackson writes a double: Java 17's Double.toString, quoted when it is not a number JSON has."""
    if math.isnan(x) or math.isinf(x):
        return f'"{java_double_to_string(x)}"'
    return java_double_to_string(x)


def _jackson_string(text: str) -> str:
    """A string in JSON as Jackson writes it: short escapes, other control characters and every character past the
    Basic Multilingual Plane as \\u escapes (upper-case hex, surrogate pairs), the rest as it is."""
    out = ['"']
    for c in text:
        code = ord(c)
        if c in _SHORT:
            out.append(_SHORT[c])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04X}")
        elif code > 0xFFFF:
            high, low = divmod(code - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04X}\\u{0xDC00 + low:04X}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _java_text(text: str) -> str:
    """A decoded string as Java keeps it in UTF-8: a surrogate left alone by its pair (a lone \\ud83d) becomes "?"."""
    if _SURROGATE.search(text) is None:  # nearly always: a string decoded from UTF-8 holds none
        return text
    paired = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")  # a valid pair: its character
    return "".join("?" if 0xD800 <= ord(c) <= 0xDFFF else c for c in paired)
