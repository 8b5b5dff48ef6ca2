"""The generic reader of declared options: each rule of a declaration, applied with the file and the key path in the error."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.options import Reader, documented, entries, key_table, load_yaml, option, section

_CODE = re.compile(r"^[a-z]+$")


def _tags(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"must be a mapping of tags, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def _even(value: int) -> int:
    if value % 2:
        raise ValueError(f"must be even, got {value}")
    return value


@section
class Limits:
    calls: int = option("calls a second", default=5, minimum=1, maximum=10, limit="the service's own limit")
    rate: float = option("bytes a second", default=2 * 1024)
    share: float = option("a share of the records", default=0.5, minimum=0, maximum=1)
    pairs: int = option("an even count", default=2, check=_even)


@section
class Entry:
    name: str = option("the entry's name", pattern=_CODE, must="must be lower-case letters", refused={"none": "must not be 'none'"})
    mode: str = option("the mode", default="fast", fold=str.lower, choices=("fast", "slow"))
    text: str | None = option("a text, trimmed", default=None, padded=True)
    on: bool = option("a switch", default=False)
    span: timedelta = option("a duration", default=timedelta(minutes=5))
    at: datetime | None = option("a moment", default=None)
    tags: Mapping[str, str] = option("tags", default_factory=dict, parse=_tags)
    limits: Limits = option(default_factory=Limits)
    extra: Limits | None = option("an optional section", default=None)


def read(data: object) -> Entry:
    return Reader("f.yaml", "entries[0]", data, Entry).read()


def refusal(data: object) -> str:
    with pytest.raises(ConfigError) as refused:
        read(data)
    return str(refused.value)


def test_a_section_is_a_frozen_dataclass_of_its_declared_defaults() -> None:
    entry = read({"name": "a"})
    assert entry == Entry(name="a")
    assert (entry.mode, entry.text, entry.limits, entry.extra) == ("fast", None, Limits(), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.name = "b"  # type: ignore[misc]


def test_a_missing_required_key_and_an_unknown_key_are_named_with_the_file_and_the_path() -> None:
    assert refusal({}) == "f.yaml: entries[0].name: is required"
    assert refusal({"name": "a", "nmae": "b"}) == (
        "f.yaml: entries[0]: unknown key(s) nmae; allowed: at, extra, limits, mode, name, on, span, tags, text"
    )
    assert refusal([]) == "f.yaml: entries[0]: must be a mapping, got list"


def test_a_nested_section_names_its_keys_by_their_full_path() -> None:
    assert refusal({"name": "a", "limits": {"calls": 0}}) == "f.yaml: entries[0].limits.calls: must be an integer >= 1, got 0"
    assert refusal({"name": "a", "extra": {"calls": 11}}) == "f.yaml: entries[0].extra.calls: must be at most 10 (the service's own limit)"


def test_a_section_with_defaults_left_out_or_null_is_all_defaults_and_an_optional_one_is_none() -> None:
    assert read({"name": "a", "limits": None}).limits == Limits()
    assert read({"name": "a", "extra": {}}).extra == Limits()
    assert read({"name": "a"}).extra is None


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"calls": True}, "calls: must be an integer >= 1, got True"),
        ({"rate": 0}, "rate: must be a positive (finite) number, got 0"),
        ({"rate": float("inf")}, "rate: must be a positive (finite) number, got inf"),
        ({"share": 1.5}, "share: must be a number from 0 to 1, got 1.5"),
        ({"pairs": 3}, "pairs: must be even, got 3"),
    ],
)
def test_a_number_outside_its_declared_bounds_is_refused(limits: dict[str, Any], message: str) -> None:
    assert refusal({"name": "a", "limits": limits}) == f"f.yaml: entries[0].limits.{message}"


def test_a_float_reads_as_a_float_even_where_its_default_or_value_is_written_as_an_int() -> None:
    assert isinstance(read({"name": "a"}).limits.rate, float)
    assert read({"name": "a", "limits": {"rate": 3}}).limits.rate == 3.0
    assert isinstance(read({"name": "a", "limits": {"rate": 3}}).limits.rate, float)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "A1"}, "name: must be lower-case letters, got 'A1'"),
        ({"name": "none"}, "name: must not be 'none'"),
        ({"name": ""}, "name: must be a non-empty string, got ''"),
        ({"mode": "Medium"}, "mode: must be one of fast, slow, got 'Medium'"),
        ({"on": "yes"}, "on: must be true or false, got 'yes'"),
        ({"span": "0s"}, "span: must be longer than 0, got '0s'"),
        ({"span": "soon"}, "span: 'soon' is not a duration such as 500ms, 90s, 30m, 1h or 2d"),
        ({"at": "2026-01-01T00:00:00"}, "at: must carry a time zone (for example 2026-01-01T00:00:00+00:00), got '2026-01-01T00:00:00'"),
        ({"at": 5}, "at: must be an ISO 8601 timestamp with a time zone, got 5"),
        ({"tags": ["a"]}, "tags: must be a mapping of tags, got ['a']"),
    ],
)
def test_a_value_its_declaration_refuses_is_named_with_the_reason(changes: dict[str, Any], message: str) -> None:
    assert refusal({"name": "a", **changes}) == f"f.yaml: entries[0].{message}"


def test_a_name_with_spaces_around_it_is_refused_and_a_padded_text_is_trimmed() -> None:
    assert "'a ' has spaces before or after it" in refusal({"name": "a "})
    entry = read({"name": "a", "mode": "SLOW", "text": " some text\n", "span": "90s", "at": "2026-01-01T00:00:00+00:00"})
    assert (entry.mode, entry.text, entry.span) == ("slow", "some text", timedelta(seconds=90))
    assert entry.at == datetime(2026, 1, 1, tzinfo=UTC)


def test_a_default_that_depends_on_the_rest_of_the_file_is_given_to_read() -> None:
    assert Reader("f.yaml", "x", {}, Entry).read({"name": "derived"}).name == "derived"
    assert Reader("f.yaml", "x", {"name": "given"}, Entry).read({"name": "derived"}).name == "given"


def test_the_documented_keys_follow_the_declarations_and_render_as_a_table() -> None:
    keys = [key for key, _ in documented(Entry)]
    assert keys[:8] == ["name", "mode", "text", "on", "span", "at", "tags", "limits.calls"]
    assert "extra" in keys and "limits" not in keys  # a section has a row only when its declaration says something
    table = key_table(Entry)
    assert "| `name` | (required) | the entry's name |" in table
    assert "| `span` | `5m` | a duration |" in table and "| `limits.rate` | `2048` | bytes a second |" in table


def test_a_document_is_a_list_of_entries_under_its_one_key_each_labelled_by_its_name() -> None:
    assert entries({"things": [{"name": "a"}, {"name": 3}]}, "f.yaml", "things") == [
        ("things[0] (a)", "a", {"name": "a"}),
        ("things[1]", None, {"name": 3}),
    ]
    for document, message in [
        ([], "f.yaml: the top level must be a mapping with a 'things' list"),
        ({"things": [{}], "more": 1}, "f.yaml: unknown top-level key(s) more; only 'things' is allowed"),
        ({"things": []}, "f.yaml: things must be a non-empty list of mappings"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            entries(document, "f.yaml", "things")


def test_a_file_that_cannot_be_read_or_is_not_yaml_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read things file .*missing\.yaml"):
        load_yaml(tmp_path / "missing.yaml", "things file")
    (tmp_path / "bad.yaml").write_text("things: [\n")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'bad.yaml'}: not valid YAML")):
        load_yaml(tmp_path / "bad.yaml", "things file")
