"""Config keys declared once, as dataclass fields (type, bounds, allowed values, default, doc line); one reader applies them."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar, dataclass_transform, get_args, get_origin, get_type_hints

from kinesis_replay.core.errors import ConfigError

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True)
class Rules:
    """What a key's value must be beyond its field's type; the reader applies them in this order.

    A string is non-empty and has no spaces around it (``padded``: trimmed instead, for a text rather than a name), then
    ``fold`` (str.upper...), ``choices``, ``pattern`` (refused with ``must``) and ``refused`` (values refused, each with
    its reason). An int is at least ``minimum`` and at most
    ``maximum`` (``limit`` says why); a float is positive and finite, or from ``minimum`` to ``maximum`` when that is given.
    ``parse`` replaces the type's reading (a mapping, a nullable key); ``check`` takes the value read, returns it (perhaps
    normalized) or raises ValueError with the refusal; ``read`` reads the key itself, given the section's Reader.
    """

    minimum: float = 0
    maximum: float | None = None
    limit: str = ""
    choices: tuple[str, ...] = ()
    fold: Callable[[str], str] | None = None
    pattern: re.Pattern[str] | None = None
    must: str = ""
    refused: Mapping[str, str] | None = None
    padded: bool = False
    parse: Callable[[Any], Any] | None = None
    check: Callable[[Any], Any] | None = None
    read: Callable[[Reader[Any], str], Any] | None = None


def option(
    doc: str | None = None,
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    key: str | None = None,
    shown: str | None = None,
    before: Mapping[str, Field[Any]] | None = None,
    **rules: Any,
) -> Any:
    """A key's declaration in one call, as Flink's ConfigOptions: ``page_bytes: int = option("its line", default=2, minimum=1)``.

    The field's type says what the reader accepts; no ``default`` (or ``default_factory``): the key is required. ``doc``: its
    line in docs/configuration.md's table (none for a section with no line of its own). ``key``: its name in the file when
    that is not the field's. ``shown``: the default as the table gives it, where no literal says it (``{default}`` stands
    for the literal). ``before``: keys with no field of their own, read just before this one. ``rules``: Rules' fields.
    """
    metadata = {"doc": doc, "key": key, "shown": shown, "before": before or {}, "rules": Rules(**rules)}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass_transform(frozen_default=True, field_specifiers=(option, field))
def section(cls: type[T]) -> type[T]:
    """A frozen dataclass whose fields are keys of the config file, declared with ``option``."""
    return dataclass(frozen=True)(cls)


PLAIN = Rules()


def declared(kind: type) -> dict[str, Field[Any]]:
    """A section's keys, as the file names them, each with the field that declares it: the keys it allows."""
    return {k.key: k.field for k in _keys(kind)}


@dataclass(frozen=True)
class _Key:
    """One key of a section, as its declaration says it."""

    key: str  # its name in the file
    field: Field[Any]
    kind: Any  # the type its value must have: ``str`` for ``str | None``, a section's dataclass for itself
    rules: Rules
    required: bool


@functools.cache
def _keys(kind: type) -> tuple[_Key, ...]:
    """A section's keys in the order they are declared; a field's ``before`` keys come just before its own."""
    hints = get_type_hints(kind)
    keys: list[_Key] = []
    for f in fields(kind):
        for key, extra in f.metadata.get("before", {}).items():
            keys.append(_Key(key, extra, type(extra.default), extra.metadata.get("rules", PLAIN), False))
        required = f.default is MISSING and f.default_factory is MISSING
        keys.append(_Key(f.metadata.get("key") or f.name, f, _plain(hints[f.name]), f.metadata.get("rules", PLAIN), required))
    return tuple(keys)


def _plain(hint: Any) -> Any:
    """``int`` for ``int``, ``str`` for ``str | None``, ``Mapping`` for ``Mapping[str, str]``, a section's dataclass for itself."""
    args = get_args(hint)
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    return get_origin(hint) or hint


def _default(f: Field[Any]) -> Any:
    """A field's default; MISSING when the key is required."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


class Reader(Generic[T]):
    """Reads one mapping of the config (a pipeline entry, a section of one) by its declarations; errors name the file and the
    key's full path, such as ``pipelines.yaml: pipelines[0] (orders).read.page_bytes: must be an integer >= 1, got 0``."""

    def __init__(self, source: str, path: str, data: object, kind: type[T]) -> None:
        self.source, self.path, self.kind = source, path, kind
        if not isinstance(data, Mapping):
            self.fail(f"must be a mapping, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        self.keys = _keys(kind)  # type: ignore[arg-type]  # a class is hashable
        self.values: dict[str, Any] = {}  # what each key read so far holds, by its name in the file
        allowed = {k.key for k in self.keys}
        unknown = sorted(str(k) for k in self.data if k not in allowed)
        if unknown:
            self.fail(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")

    def fail(self, message: str, key: str | None = None) -> NoReturn:
        where = f"{self.path}.{key}" if key else self.path
        raise ConfigError(f"{self.source}: {where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def section(self, key: str, kind: type[S]) -> Reader[S]:
        """The reader of a section with defaults: left out, or null, it is all defaults."""
        return Reader(self.source, f"{self.path}.{key}", self.data.get(key) or {}, kind)

    def read(self, defaults: Mapping[str, Any] | None = None) -> T:
        """The section's dataclass: every required key is there, then each key is read in the order it is declared.

        ``defaults``: keys whose default depends on the rest of the file (a table's name is its pipeline's).
        """
        defaults = defaults or {}
        for k in self.keys:
            if k.required and k.key not in self.data and k.key not in defaults:
                self.fail("is required", k.key)
        for k in self.keys:
            self.values[k.key] = defaults[k.key] if k.key in defaults and k.key not in self.data else self._value(k)
        return self.kind(**{k.field.name: self.values[k.key] for k in self.keys if k.field.name})

    def _value(self, k: _Key) -> Any:
        if k.rules.read is not None:
            return k.rules.read(self, k.key)
        if isinstance(k.kind, type) and is_dataclass(k.kind):
            if k.field.default_factory is not MISSING:
                return self.section(k.key, k.kind).read()
            if k.key not in self.data:  # an optional section left out (None)
                return k.field.default
            return Reader(self.source, f"{self.path}.{k.key}", self.data[k.key], k.kind).read()
        if k.key not in self.data:  # a declared default is valid: it is never checked
            return float(_default(k.field)) if k.kind is float else _default(k.field)  # a float may be declared as 2 * 1024 * 1024
        try:
            value = k.rules.parse(self.data[k.key]) if k.rules.parse else _READERS[k.kind](self.data[k.key], k.rules)
            return k.rules.check(value) if k.rules.check else value
        except ValueError as exc:
            self.fail(str(exc), k.key)


def entries(data: object, source: str, key: str) -> list[tuple[str, str | None, Any]]:
    """Each entry of the list a document holds under its one top-level key, with its label in errors and its name as written
    (``pipelines[0] (orders)``, ``orders``). Anything else concerns every entry, so it raises ConfigError."""
    if not isinstance(data, Mapping) or key not in data:
        raise ConfigError(f"{source}: the top level must be a mapping with a {key!r} list")
    unknown = sorted(str(k) for k in data if k != key)
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {', '.join(unknown)}; only {key!r} is allowed")
    if not isinstance(data[key], list) or not data[key]:
        raise ConfigError(f"{source}: {key} must be a non-empty list of mappings")
    named = [(entry, entry.get("name") if isinstance(entry, Mapping) else None) for entry in data[key]]
    return [(f"{key}[{i}]" + (f" ({name})" if isinstance(name, str) else ""), name if isinstance(name, str) else None, entry)
            for i, (entry, name) in enumerate(named)]  # fmt: skip


def load_yaml(path: str | os.PathLike[str], what: str) -> object:
    """A YAML file's document; a file that cannot be read, or is not YAML, is a ConfigError naming it."""
    import yaml  # PyYAML comes with Airflow; imported here so the pure reader needs nothing

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {Path(path)}: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{Path(path)}: not valid YAML: {exc}") from exc


def exact(value: str, what: str = "") -> None:
    """A name (of a pipeline, stream, table, connection, column...) with spaces around it is refused, not trimmed.

    Each name is matched exactly by whatever it names (an Airflow connection, a DynamoDB or Iceberg table, a JSON key), so a
    space around one is a typo that trimming would hide in one place and keep in the next. Releases before this one trimmed
    the config's names, so the trimmed spelling is the one the pipeline has always used.
    """
    if value != value.strip():
        raise ValueError(
            f"{what}{value!r} has spaces before or after it; names are matched exactly, so write it as {value.strip()!r} "
            "(the name earlier releases used: they trimmed it)"
        )


def _text(value: Any, rules: Rules) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, got {value!r}")
    if not rules.padded:
        exact(value)
    text = rules.fold(value.strip()) if rules.fold else value.strip()
    if rules.choices and text not in rules.choices:
        raise ValueError(f"must be one of {', '.join(rules.choices)}, got {value!r}")
    if rules.pattern and not rules.pattern.match(text):
        raise ValueError(f"{rules.must}, got {text!r}")
    if rules.refused and text in rules.refused:
        raise ValueError(rules.refused[text])
    return text


def _integer(value: Any, rules: Rules) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < rules.minimum:
        raise ValueError(f"must be an integer >= {rules.minimum}, got {value!r}")
    if rules.maximum is not None and value > rules.maximum:
        raise ValueError(f"must be at most {rules.maximum} ({rules.limit})")
    return int(value)


def _number(value: Any, rules: Rules) -> float:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if rules.maximum is not None:  # a share: from minimum to maximum, both included
        if not number or not rules.minimum <= value <= rules.maximum:
            raise ValueError(f"must be a number from {rules.minimum} to {rules.maximum}, got {value!r}")
    elif not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive (finite) number, got {value!r}")
    return float(value)


def _boolean(value: Any, rules: Rules) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _duration(value: Any, rules: Rules) -> timedelta:
    span = parse_duration(str(value))
    if span <= timedelta(0):
        raise ValueError(f"must be longer than 0, got {value!r}")
    return span


def _timestamp(value: Any, rules: Rules) -> datetime:
    refused = f"must be an ISO 8601 timestamp with a time zone, got {value!r}"
    if isinstance(value, datetime):  # YAML reads an unquoted timestamp as one
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(refused) from None
    else:
        raise ValueError(refused)
    if ts.tzinfo is None:
        raise ValueError(f"must carry a time zone (for example 2026-01-01T00:00:00+00:00), got {value!r}")
    return ts


_READERS: dict[type, Callable[[Any, Rules], Any]] = {
    str: _text,
    bool: _boolean,
    int: _integer,
    float: _number,
    timedelta: _duration,
    datetime: _timestamp,
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"30m"``, ``"1h"``, ``"2d"``, ``"500ms"`` as a timedelta; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 90s, 30m, 1h or 2d")
    try:
        return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any duration Python can hold ({timedelta.max.days:,} days)") from None


def documented(kind: type, prefix: str = "") -> Iterator[tuple[str, Field[Any]]]:
    """Every documented key of a section, by its dotted path (``read.page_bytes``), with the field that declares it."""
    for k in _keys(kind):
        section = isinstance(k.kind, type) and is_dataclass(k.kind)
        if not section or k.field.metadata.get("doc"):  # a section has a line of its own only when it says something
            yield prefix + k.key, k.field
        if section:
            yield from documented(k.kind, f"{prefix}{k.key}.")


def _literal(value: object) -> str:
    """A default as the YAML file would spell it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        unit = next(u for u in ("d", "h", "m", "s", "ms") if (seconds / _UNITS[u]).is_integer())
        return f"{seconds / _UNITS[unit]:g}{unit}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def key_table(kind: type) -> str:
    """A Markdown table of every key of ``kind`` (key, default, meaning), rendered from their declarations."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, f in documented(kind):
        value = _default(f)
        literal = "(required)" if value is MISSING else "(none)" if value is None else f"`{_literal(value)}`"
        shown = f.metadata.get("shown")
        rows.append(f"| `{key}` | {shown.format(default=literal) if shown else literal} | {f.metadata.get('doc') or ''} |")
    return "\n".join(rows) + "\n"


REFERENCE_BEGIN, REFERENCE_END = "<!-- config-table:begin -->", "<!-- config-table:end -->"


def with_key_table(text: str, table: str) -> str:
    """``text`` with the block between its config-table markers replaced by ``table``."""
    head, begin, rest = text.partition(REFERENCE_BEGIN)
    _, end, tail = rest.partition(REFERENCE_END)
    if not begin or not end:
        raise ValueError(f"no {REFERENCE_BEGIN} ... {REFERENCE_END} block to put the table in")
    return f"{head}{begin}\n{table}{end}{tail}"


def key_table_main(argv: list[str], table: str, module: str) -> int:
    """``--reference``: print ``table``; ``--write FILE``: put it in FILE between its markers (``make docs-config``)."""
    if argv[:1] == ["--reference"] and len(argv) == 1:
        print(table, end="")
        return 0
    if argv[:1] == ["--write"] and len(argv) == 2:
        doc_path = Path(argv[1])
        doc_path.write_text(with_key_table(doc_path.read_text(), table))
        return 0
    print(f"usage: python -m {module} --reference | --write docs/configuration.md", file=sys.stderr)
    return 2
