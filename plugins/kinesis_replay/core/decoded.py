"""A replay's decoded values against what the output holds for its batch: the decision, without files.

A backfill (or a restore that replays) may write a batch's rows again only as they were: the raw records are checked
by the row digests; this compares what was decoded from them, row by row, keyed by (shard id, sequence number,
sub-sequence number): payload.schema's columns, and whether ``decode_error`` quarantines the record. Its text, the
reason, is a diagnosis that a release may sharpen (0.1.0 said "payload is not a JSON object matching payload.schema"
where this one names the field and the type), so it is not compared; nor are the columns of a record both sides
quarantine (0.1.0's from_json kept the fields it parsed before the one that failed). A difference comes from a decoder or
payload.schema change, and is refused unless the run was asked to re-decode.

The rows come in key order from both sides (``adapters.files.read_decoded`` sorts them), so the comparison is one
merge, holding one row of each side at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_replay.core.errors import DecodedValuesChangedError

# The key of a row: shard id, sequence number (as text, its exact digits), sub-sequence number.
DECODED_KEY = ("shard_id", "sequence_number", "sub_sequence_number")
Key = tuple[str, str, int]
Row = tuple[Key, Mapping[str, Any]]
# An example value in a refusal is cut to this many characters.
EXAMPLE_CHARS = 80


@dataclass(frozen=True)
class Difference:
    """How a replay's decoded values differ from the output's, for the rows both hold; an example of the first."""

    field: str  # the first differing field of the first differing row (in key order)
    key: Key
    before: Any
    after: Any
    rows: int  # rows whose decoded values differ, in any field
    compared: int  # rows both sides hold
    fields: tuple[str, ...]  # every field that differs in some row, in the order first met

    def describe(self) -> str:
        shard, sequence, sub = self.key
        others = [f for f in self.fields if f != self.field]
        also = f" (other fields that differ: {', '.join(others)})" if others else ""
        return (
            f"{self.rows} of {self.compared} rows differ; field {self.field!r}{also}, e.g. shard {shard}, sequence number "
            f"{sequence}, sub-sequence {sub}: {shown(self.before)} before, {shown(self.after)} now"
        )


@dataclass(frozen=True)
class Comparison:
    """What comparing two sides found: the difference of the rows both hold (None: none), and the rows only one holds
    (a restore puts back rows the output lost; a backfill, rows a hand removed), which are not decoded differently."""

    difference: Difference | None
    compared: int
    only_before: int
    only_after: int


def compare(before: Iterable[Row], after: Iterable[Row]) -> Comparison:
    """Compare the decoded values of two row sets, each in key order; a field missing from one side's row is null."""
    old, new = iter(before), iter(after)
    a, b = _next(old), _next(new)
    compared = only_before = only_after = differing = 0
    first: tuple[str, Key, Any, Any] | None = None
    fields: dict[str, None] = {}
    while a is not None or b is not None:
        if b is None or (a is not None and _order(a[0]) < _order(b[0])):
            only_before += 1
            a = _next(old)
            continue
        if a is None or _order(b[0]) < _order(a[0]):
            only_after += 1
            b = _next(new)
            continue
        compared += 1
        changed = _changed(a[1], b[1])
        if changed:
            differing += 1
            fields.update(dict.fromkeys(changed))
            if first is None:
                first = (changed[0], a[0], a[1].get(changed[0]), b[1].get(changed[0]))
        a, b = _next(old), _next(new)
    difference = None
    if first is not None:
        field, key, value_before, value_after = first
        difference = Difference(field, key, value_before, value_after, differing, compared, tuple(fields))
    return Comparison(difference, compared, only_before, only_after)


def check(pipeline_name: str, batch_id: int, found: Comparison, redecode: bool, what: str = "backfill") -> None:
    """The verdict: nothing differs, or the run was asked to re-decode; else the refusal, saying how to proceed."""
    if found.difference is None or redecode:
        return
    raise DecodedValuesChangedError(
        f"pipeline {pipeline_name!r}, batch {batch_id}: the {what} decoded the batch's records differently from what the "
        f"output holds for it: {found.difference.describe()}. The raw records are the same (their row digests match), so "
        "the difference comes from a decoder or payload.schema change since the batch was written. Nothing was replaced: "
        "readers still see the batch as it was. To accept the new decoding, trigger the backfill again with "
        '"redecode": true in its conf; to keep the values, put back the payload.schema (or the release) that wrote them'
    )


QUARANTINE_FIELD = "decode_error"  # compared as a decision: quarantined or not, whatever the reason says


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The fields whose decoded values differ. A record both sides quarantine differs in nothing: its columns are no
    values a reader of the output gets (Spark's from_json kept what it had parsed before the field that failed, the
    tasks keep nothing), and its raw record is kept whole in both."""
    if before.get(QUARANTINE_FIELD) is not None and after.get(QUARANTINE_FIELD) is not None:
        return []
    names = _names(before, after)
    return [name for name in names if not _same_field(name, before.get(name), after.get(name))]


def _same_field(name: str, a: Any, b: Any) -> bool:
    return (a is None) == (b is None) if name == QUARANTINE_FIELD else same_value(a, b)


def same_value(a: Any, b: Any) -> bool:
    """Equal as decoded values: NaN is NaN, and a list or a map (a list of pairs, or a dict) compares item by item."""
    if isinstance(a, float) and isinstance(b, float):
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if type(a) is not type(b) and (isinstance(a, bool) or isinstance(b, bool)):
        return False  # True == 1 in Python; a column that became BOOLEAN did change
    return bool(a == b)


def shown(value: Any, limit: int = EXAMPLE_CHARS) -> str:
    """A value for a refusal, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _next(rows: Iterator[Row]) -> Row | None:
    return next(rows, None)


def _order(key: Key) -> tuple[str, str, int]:
    """Keys in the order both sides come in (Arrow's sort: text by its bytes, which for these ASCII ids is Python's)."""
    shard, sequence, sub = key
    return shard, sequence, sub


def _names(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))
