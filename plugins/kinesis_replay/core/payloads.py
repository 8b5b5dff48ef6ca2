"""Why a JSON payload does not decode into payload.schema's columns, in one line that names the field and the type.

Pure Python (no Spark, no pyarrow), so that it can be tested alone and used by any decoder. It follows what the
replay job's decoder (Spark's ``from_json``, which reads with Jackson) accepts: a field of the schema whose value is
missing or null is null, a field the schema does not name is dropped, names match case and all, and only the first
JSON value of a payload is read (what follows it is ignored).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import json
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

from kinesis_replay.core.ddl import DdlType, ddl_name

# The reason the replay job gives a payload that failed to decode when this module finds no reason of its own.
UNEXPLAINED = "payload does not decode as payload.schema"
REASON_CHARS = 300  # a reason is a line of a table's row, never a page
VALUE_CHARS = 40  # how much of a bad value the reason quotes
MAX_NUMBER_CHARS = 1000  # Jackson's limit (StreamReadConstraints): a longer number is not JSON to Spark
_WHITESPACE = " \t\r\n"  # JSON's whitespace, all Jackson skips: a payload of nothing else is blank
# Whole numbers of each type: the values Jackson reads into it. TINYINT takes up to 255 (Jackson's getByteValue
# accepts an unsigned byte, which Spark then stores wrapped: 200 becomes -56), so a reason never blames 128 to 255.
_INTEGERS = {"tinyint": (-128, 255), "smallint": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1),
             "bigint": (-(2**63), 2**63 - 1)}  # fmt: skip
_FLOAT_WORDS = frozenset({"NaN", "Infinity", "+Infinity", "-Infinity", "+INF", "-INF"})  # strings FLOAT/DOUBLE take
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # java.math.BigDecimal's, once "," are removed
# Spark's lenient date and timestamp strings (DateTimeUtils.stringToDate/stringToTimestamp), as far as shape goes.
_DATE = r"(?P<sign>[+-]?)(?P<year>\d{4,7})(?:-(?P<month>\d{1,2})(?:-(?P<day>\d{1,2}))?)?"
_TIME = r"(?P<hour>\d{1,2})(?::(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.\d{0,9})?)?)?"
_ZONE = r"(?:Z|[+-]\d{1,2}(?::?\d{2}){0,2}|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2}){0,2})?|[A-Za-z]+(?:/[A-Za-z0-9_+-]+)+)"
_CLOCK = r"(?P<hour>\d{1,2}):(?P<minute>\d{1,2})(?::(?P<second>\d{1,2})(?:\.\d{1,9})?)?"  # a time of day alone
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
    """A JSON number with a fraction or an exponent, or NaN or Infinity: what Jackson reads as a float token."""

    __slots__ = ("text", "value")

    def __init__(self, text: str) -> None:
        if len(text) > MAX_NUMBER_CHARS:
            raise ValueError(f"a number {len(text)} characters long (at most {MAX_NUMBER_CHARS})")
        self.text, self.value = text, Decimal(text)


def _integer(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number {len(text)} characters long (at most {MAX_NUMBER_CHARS})")
    return int(text)


_DECODER = json.JSONDecoder(parse_float=_Fraction, parse_int=_integer, parse_constant=_Fraction, object_pairs_hook=_Object)


def json_decode_error(schema: DdlType, data: bytes | bytearray | None) -> str | None:
    """Why ``data`` does not decode into ``schema`` (a struct, from ``config.parse_ddl_schema``); None when it does.

    ``field "amount": expected BIGINT, got string "abc"``, ``field "user.id": expected INT, got 1.5``, ``not valid
    JSON: ...``, ``not UTF-8: ...``, ``not a JSON object (got array)``, ``blank payload``. The first field at fault, in
    the payload's order.
    """
    if data is None:
        return None
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} ({exc.reason})"
    start = len(text) - len(text.lstrip(_WHITESPACE))
    if start == len(text):
        return "blank payload"
    try:
        value = _parse(text, start)
        if not isinstance(value, _Object):
            return f"not a JSON object (got {_kind(value)})"
        reason = _check_struct(schema, value, "")
    except RecursionError:
        return "not valid JSON: nested too deeply"
    except ValueError as exc:  # json.JSONDecodeError, or a number too long
        return f"not valid JSON: {exc}"
    return None if reason is None else _line(reason)


def _parse(text: str, start: int) -> Any:
    """The payload's first JSON value, as Jackson reads it with Spark's options (strings in single quotes too)."""
    try:
        return _DECODER.raw_decode(text, start)[0]
    except json.JSONDecodeError:
        if "'" not in text:
            raise
        try:  # Spark's JSON options allow 'single-quoted' names and strings: read them as double-quoted ones
            return _DECODER.raw_decode(_double_quoted(text), start)[0]
        except ValueError:
            pass
        raise


def _double_quoted(text: str) -> str:
    """``text`` with each 'single-quoted' string outside a double-quoted one rewritten as a "double-quoted" one."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c not in "\"'":
            out.append(c)
            i += 1
            continue
        j, body = i + 1, []
        while j < len(text) and text[j] != c:
            if text[j] == "\\" and j + 1 < len(text):
                body.append("'" if c == "'" and text[j + 1] == "'" else text[j : j + 2])
                j += 2
            else:
                body.append('\\"' if c == "'" and text[j] == '"' else text[j])
                j += 1
        if j >= len(text):
            return text  # a string never closed: no JSON either way
        out.append('"' + "".join(body) + '"')
        i = j + 1
    return "".join(out)


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
    accepts = _ACCEPTS.get(t.kind)
    return accepts is None or accepts(value), False  # a type this module does not know is never blamed


def _is_float(value: Any) -> bool:
    return type(value) is int or isinstance(value, _Fraction) or (isinstance(value, str) and value in _FLOAT_WORDS)


def _is_timestamp_value(value: Any) -> bool:
    return type(value) is int or (isinstance(value, str) and _is_timestamp(value, zoned=True))  # a number: seconds


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


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(re.sub(f"[{_WHITESPACE}]", "", text), validate=True)
    except binascii.Error:
        return False
    return True


def _is_date(text: str) -> bool:
    match = _DATE_TEXT.fullmatch(text.strip())
    return match is not None and _is_day(match)


def _is_timestamp(text: str, zoned: bool) -> bool:
    dated = _TIMESTAMP_TEXT.fullmatch(text.strip())
    match = dated or _CLOCK_TEXT.fullmatch(text.strip())
    if match is None or (match["zone"] and not zoned):
        return False
    return (dated is None or _is_day(dated)) and _is_time(match)


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
    "binary": lambda value: isinstance(value, str) and _is_base64(value),
    "date": lambda value: isinstance(value, str) and _is_date(value),
    "timestamp": _is_timestamp_value,
    "timestamp_ntz": lambda value: isinstance(value, str) and _is_timestamp(value, zoned=False),
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
