"""A parser of Spark's DDL schema strings, for a JSON payload's schema in the config: checked at parse, no Spark needed."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

# Spark's DDL types by name, with how many integer parameters each takes in parentheses (at most).
_DDL_TYPES = {
    "boolean": 0, "tinyint": 0, "byte": 0, "smallint": 0, "short": 0, "int": 0, "integer": 0,
    "bigint": 0, "long": 0, "float": 0, "real": 0, "double": 0, "date": 0, "timestamp": 0, "timestamp_ntz": 0,
    "timestamp_ltz": 0, "string": 0, "binary": 0, "void": 0, "variant": 0, "char": 1, "character": 1, "varchar": 1,
    "decimal": 2, "dec": 2, "numeric": 2, "time": 1,
}  # fmt: skip
# Other spellings of the same type: DdlType.kind is always the canonical one.
_DDL_ALIASES = {
    "byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint", "real": "float", "dec": "decimal",
    "numeric": "decimal", "character": "char", "timestamp_ltz": "timestamp",
}  # fmt: skip
# INTERVAL's fields, in order within each of its two families: YEAR TO MONTH, DAY TO SECOND and the like.
_INTERVAL_FAMILIES = (("year", "month"), ("day", "hour", "minute", "second"))
# A DECIMAL's precision and scale, as Spark's DecimalType and Parquet's (and Arrow's decimal128) allow them.
MAX_DECIMAL_PRECISION = 38
_DDL_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)+`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')|([<>(),:]))")


@dataclass(frozen=True)
class DdlType:
    """A type of a Spark DDL schema, as ``parse_ddl_schema`` reads it.

    ``kind`` is the type's canonical name in lower case (``int`` for INTEGER, ``decimal``, ``array``, ``interval day to
    second``); ``params`` its numbers (a DECIMAL's precision and scale, Spark's defaults filled in); ``children`` a
    struct's fields, an array's ``element``, a map's ``key`` and ``value``, each as (name, type).
    """

    kind: str
    params: tuple[int, ...] = ()
    children: tuple[tuple[str, DdlType], ...] = ()

    def __str__(self) -> str:
        """As Spark spells it in a schema: ``DECIMAL(10,2)``, ``ARRAY<INT>``, ``STRUCT<id: INT, name: STRING>``."""
        if self.kind == "array":
            return f"ARRAY<{self.children[0][1]}>"
        if self.kind == "map":
            return f"MAP<{self.children[0][1]}, {self.children[1][1]}>"
        if self.kind == "struct":
            return "STRUCT<" + ", ".join(f"{ddl_name(n)}: {t}" for n, t in self.children) + ">"
        return self.kind.upper() + (f"({','.join(map(str, self.params))})" if self.params else "")


@functools.lru_cache(maxsize=4096)  # the JSON decoder names each field of each record's path with it
def ddl_name(name: str) -> str:
    """A column name as DDL writes it: in backticks unless it is a plain identifier."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


class _Ddl:
    """A recursive-descent reader of Spark's DDL schema strings (``name TYPE [NOT NULL] [COMMENT '...'], ...``).

    pyspark parses DDL only inside a JVM; this checks a pipeline's payload.schema when the config is read,
    so a schema that cannot work is refused before any batch is planned, not when the replay job starts.
    """

    def __init__(self, text: str) -> None:
        self.path: list[str] = []  # the struct fields being read, outermost first (ddl_name each)
        self.not_null: list[str] = []  # the columns declared NOT NULL, nested ones as ``outer.inner``
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text.rstrip()):
            match = _DDL_TOKEN.match(text, pos)
            if not match or match.end() == pos:
                raise ValueError(f"unexpected {text[pos:].strip()[:20]!r}")
            self.tokens.append(next(g for g in match.groups() if g is not None))
            pos = match.end()
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i] if self.i < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token.lower() != expected):
            raise ValueError(f"expected {expected or 'more'}, found {token or 'the end'!r}")
        self.i += 1
        return token

    def name(self) -> str:
        token = self.take()
        if token.startswith("`"):
            return token[1:-1].replace("``", "`")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            raise ValueError(f"expected a column name, found {token!r}")
        return token

    def data_type(self) -> DdlType:
        kind = self.take().lower()
        if kind in ("array", "map", "struct"):
            return self._nested(kind)
        if kind == "interval":
            return DdlType(f"interval {self._interval()}")
        if kind in _DDL_TYPES:
            params = self._parameters(kind)
            if kind in ("string", "char", "character", "varchar") and self.peek().lower() == "collate":
                self.take("collate")
                self.name()
            kind = _DDL_ALIASES.get(kind, kind)
            if kind == "decimal":
                params = (*params, *(10, 0)[len(params) :])  # Spark's defaults: DECIMAL is (10,0), DECIMAL(p) is (p,0)
                self._check_decimal(*params)
            return DdlType(kind, params)
        raise ValueError(f"unknown type {kind!r}")

    def _check_decimal(self, precision: int, scale: int) -> None:
        """Spark's parser refuses these too; pyarrow would refuse the column, or the decoder every value, in the replay."""
        problem = None
        if not 1 <= precision <= MAX_DECIMAL_PRECISION:
            problem = f"its precision {precision} is not from 1 to {MAX_DECIMAL_PRECISION}"
        elif scale > precision:
            problem = f"its scale {scale} is larger than its precision {precision}"
        if problem is not None:
            raise ValueError(
                f'column "{".".join(self.path)}": DECIMAL({precision},{scale}) cannot be written: {problem} (a DECIMAL\'s '
                f"precision, its count of digits, is 1 to {MAX_DECIMAL_PRECISION}, and its scale, the digits after the point, 0 "
                "to its precision: Spark and Parquet allow no other)"
            )

    def _nested(self, kind: str) -> DdlType:
        """``ARRAY<type>``, ``MAP<type, type>``, ``STRUCT<name: type, ...>`` (a struct may be empty)."""
        self.take("<")
        children: tuple[tuple[str, DdlType], ...] = ()
        if kind == "array":
            children = (("element", self.data_type()),)
        elif kind == "map":
            key = self.data_type()
            self.take(",")
            children = (("key", key), ("value", self.data_type()))
        elif self.peek() != ">":
            children = tuple(self.fields(closing=">"))
        self.take(">")
        return DdlType(kind, (), children)

    def _interval(self) -> str:
        """``INTERVAL unit [TO unit]``, the units of one family, the larger first; its units as written."""
        start = self.take().lower()
        family = next((f for f in _INTERVAL_FAMILIES if start in f), None)
        if family is None:
            raise ValueError(f"INTERVAL takes YEAR, MONTH, DAY, HOUR, MINUTE or SECOND, not {start!r}")
        if self.peek().lower() == "to":
            self.take("to")
            end = self.take().lower()
            if end not in family or family.index(end) <= family.index(start):
                raise ValueError(f"INTERVAL {start.upper()} TO {end.upper()} is not an interval type")
            return f"{start} to {end}"
        return start

    def _parameters(self, kind: str) -> tuple[int, ...]:
        """A simple type's optional whole-number parameters, at most as many as it takes: ``DECIMAL(10, 2)``."""
        if self.peek() != "(":
            return ()
        self.take("(")
        params: list[int] = []
        for n in range(_DDL_TYPES[kind]):
            if n:
                if self.peek() != ",":
                    break
                self.take(",")
            token = self.take()
            if not token.isdigit():
                raise ValueError(f"{kind} takes whole numbers in parentheses")
            params.append(int(token))
        self.take(")")
        return tuple(params)

    def fields(self, closing: str = "") -> list[tuple[str, DdlType]]:
        fields: list[tuple[str, DdlType]] = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take(":")
            self.path.append(ddl_name(name))
            fields.append((name, self.data_type()))
            if self.peek().lower() == "not":
                self.take("not")
                self.take("null")
                self.not_null.append(".".join(self.path))
            self.path.pop()
            if self.peek().lower() == "comment":
                self.take("comment")
                if not self.take().startswith("'"):
                    raise ValueError("COMMENT takes a quoted string")
            if self.peek() != ",":
                break
            self.take(",")
        if self.peek() != closing:
            raise ValueError(f"unexpected {self.peek()!r} after column {fields[-1][0]!r}")
        return fields


def parse_ddl_schema(schema: str) -> DdlType:
    """A Spark DDL schema (``name TYPE, ...``) as the struct it declares; ValueError says what is wrong with it.

    Stricter than Spark in one way: a name twice is refused, as the batch's Parquet files could not hold it.
    """
    fields = _Ddl(schema).fields()
    names = [name for name, _ in fields]
    repeated = sorted({n for n in names if [m.lower() for m in names].count(n.lower()) > 1})
    if repeated:
        raise ValueError(f"column(s) {', '.join(repeated)} appear more than once")
    return DdlType("struct", (), tuple(fields))


def not_null_columns(schema: str) -> list[str]:
    """The columns a Spark DDL schema declares NOT NULL, nested ones as ``outer.inner``; ValueError as parse_ddl_schema."""
    parser = _Ddl(schema)
    parser.fields()
    return parser.not_null


def struct_fields(struct: DdlType, path: str = "") -> Iterator[tuple[str, str]]:
    """Every field of a struct, at any depth (in structs inside arrays and maps too): its path (``outer.inner``, each name
    as DDL writes it) and its name."""
    for name, child in struct.children:
        where = path
        if struct.kind == "struct":  # an array's element and a map's key and value are not fields
            where = f"{path}.{ddl_name(name)}" if path else ddl_name(name)
            yield where, name
        yield from struct_fields(child, where)


def ddl_column_names(schema: str) -> list[str]:
    """The top-level column names of a Spark DDL schema; ValueError says what is wrong with it."""
    return [name for name, _ in parse_ddl_schema(schema).children]
