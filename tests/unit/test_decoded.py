"""A replay's decoded values against the output's, decided without files: the verdict, and the refusal's words."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kinesis_replay.core.decoded import Row, check, compare, same_value, shown
from kinesis_replay.core.errors import DecodedValuesChangedError, VerificationError

SHARD = "shardId-000000000000"


def rows(*values: dict[str, Any], shard: str = SHARD) -> list[Row]:
    """One row per value, at sequence numbers 100, 101, ... of one shard (in key order, as the files' reader gives them)."""
    return [((shard, str(100 + i), 0), v) for i, v in enumerate(values)]


def test_the_same_values_make_no_difference() -> None:
    same = rows({"user": "a", "amount": 1.5, "decode_error": None}, {"user": "b", "amount": math.nan, "decode_error": None})
    found = compare(same, list(same))
    assert found.difference is None and (found.compared, found.only_before, found.only_after) == (2, 0, 0)
    check("orders", 3, found, redecode=False)  # nothing to refuse


def test_a_changed_value_names_the_field_an_example_and_the_count() -> None:
    before = rows({"amount": "9.999999999999999E22"}, {"amount": "1"}, {"amount": "2.0E23"})
    after = rows({"amount": "1.0E23"}, {"amount": "1"}, {"amount": "2e23"})
    found = compare(before, after)
    assert found.difference is not None
    assert (found.difference.field, found.difference.rows, found.difference.compared) == ("amount", 2, 3)
    assert found.difference.key == (SHARD, "100", 0)
    assert (found.difference.before, found.difference.after) == ("9.999999999999999E22", "1.0E23")
    with pytest.raises(DecodedValuesChangedError) as refused:
        check("orders", 3, found, redecode=False)
    message = str(refused.value)
    assert "pipeline 'orders', batch 3" in message and "2 of 3 rows differ; field 'amount'" in message
    assert "'9.999999999999999E22' before, '1.0E23' now" in message and f"shard {SHARD}, sequence number 100" in message
    assert "decoder or payload.schema change" in message and '"redecode": true' in message
    assert isinstance(refused.value, VerificationError) and not refused.value.retryable


def test_redecode_accepts_the_difference() -> None:
    found = compare(rows({"n": 1}), rows({"n": "1"}))
    assert found.difference is not None
    check("orders", 3, found, redecode=True)


def test_a_record_quarantined_now_is_a_difference_of_decode_error() -> None:
    before = rows({"n": 1, "decode_error": None}, {"n": None, "decode_error": None})
    after = rows({"n": None, "decode_error": "nesting too deep"}, {"n": None, "decode_error": "n: not an INT (was 'x')"})
    found = compare(before, after)
    assert found.difference is not None and found.difference.rows == 2
    assert found.difference.field == "n" and found.difference.fields == ("n", "decode_error")
    assert compare(before[1:], after[1:]).difference.field == "decode_error"  # type: ignore[union-attr]


def test_a_quarantined_record_s_reason_may_be_sharper_now() -> None:
    """Release 0.1.0 gave every JSON record it could not decode one reason; this one names the field and the type."""
    before = rows({"n": None, "decode_error": "payload is not a JSON object matching payload.schema"})
    after = rows({"n": None, "decode_error": 'field "n": expected INT, got string "x"'})
    assert compare(before, after).difference is None


def test_a_record_quarantined_on_both_sides_differs_in_nothing_else() -> None:
    """Release 0.1.0's from_json kept the fields it parsed before the one that failed; the tasks keep none."""
    before = rows({"user": "u-13", "amount": None, "decode_error": "payload is not a JSON object matching payload.schema"})
    after = rows({"user": None, "amount": None, "decode_error": 'field "amount": expected DOUBLE, got string "abc"'})
    assert compare(before, after).difference is None
    decoded = rows({"user": "u-13", "amount": None, "decode_error": None})
    assert compare(decoded, after).difference.fields == ("user", "decode_error")  # type: ignore[union-attr]


def test_a_column_only_one_side_has_is_null_on_the_other() -> None:
    found = compare(rows({"n": 1}), rows({"n": 1, "added": None}))
    assert found.difference is None
    found = compare(rows({"n": 1}), rows({"n": 1, "added": 7}))
    assert found.difference is not None and found.difference.field == "added"


def test_rows_only_one_side_holds_are_counted_not_refused() -> None:
    # A restore puts back rows the output lost; the rows both hold are compared.
    before = [((SHARD, "100", 0), {"n": 1}), ((SHARD, "102", 0), {"n": 3}), (("shardId-000000000001", "5", 0), {"n": 9})]
    after = [((SHARD, "100", 0), {"n": 1}), ((SHARD, "101", 0), {"n": 2}), ((SHARD, "102", 0), {"n": 3}), ((SHARD, "102", 1), {"n": 4})]
    found = compare(before, after)
    assert found.difference is None and (found.compared, found.only_before, found.only_after) == (2, 1, 2)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (math.nan, math.nan, True),
        (0.0, -0.0, False),
        (1, True, False),
        ([1.0, math.nan], [1.0, math.nan], True),
        ([("k", 1)], [("k", 2)], False),
        ({"x": 8.41e21}, {"x": 8.41e21}, True),
        ({"x": 1}, {"y": 1}, False),
        (None, None, True),
        (None, 0, False),
    ],
)
def test_values_compare_as_decoded_values(a: Any, b: Any, same: bool) -> None:
    assert same_value(a, b) is same


def test_an_example_value_is_cut_short() -> None:
    assert shown("x" * 500) == repr("x" * 500)[:77] + "..." and len(shown("x" * 500)) == 80
    assert shown(1.0e23) == "1e+23"
