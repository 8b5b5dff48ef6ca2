"""SequenceRange and the planning rules: integer comparison, inclusive ends, parents before children."""

from __future__ import annotations

import pytest

from kinesis_replay.core.ranges import SequenceRange, ShardInfo, parse_sequence_number, shards_to_plan

SEQ_56 = 49680458800076825667891419458951111266169532991963922434  # a kinesalite sequence number


def test_sequence_numbers_compare_as_integers_not_text() -> None:
    assert parse_sequence_number("9") < parse_sequence_number("10")
    assert "9" > "10"  # the trap the parser exists for


def test_parse_keeps_all_56_digits() -> None:
    assert parse_sequence_number(str(SEQ_56)) == SEQ_56
    assert parse_sequence_number(str(SEQ_56 + 1)) - parse_sequence_number(str(SEQ_56)) == 1


@pytest.mark.parametrize("bad", ["", "12a", "-1", "1.5", " 12", "1" * 130, None, 1.0, True])
def test_parse_rejects_what_is_not_a_sequence_number(bad: object) -> None:
    with pytest.raises(ValueError, match=r"sequence number|decimal"):
        parse_sequence_number(bad)


def test_range_ends_are_both_inclusive() -> None:
    rng = SequenceRange("shardId-000000000001", SEQ_56, SEQ_56 + 10)
    assert rng.contains(SEQ_56) and rng.contains(SEQ_56 + 10)
    assert not rng.contains(SEQ_56 - 1) and not rng.contains(SEQ_56 + 11)


def test_a_single_record_range_is_valid() -> None:
    assert SequenceRange("s", SEQ_56, SEQ_56).contains(SEQ_56)


def test_range_that_starts_after_it_ends_names_the_shard() -> None:
    with pytest.raises(ValueError, match="shardId-000000000007"):
        SequenceRange("shardId-000000000007", SEQ_56 + 1, SEQ_56)


def test_range_must_start_after_its_previous_checkpoint() -> None:
    with pytest.raises(ValueError, match="not after its previous checkpoint"):
        SequenceRange("s", SEQ_56, SEQ_56 + 5, previous_checkpoint=SEQ_56)


def test_range_round_trips_through_its_dict_exactly() -> None:
    rng = SequenceRange("shardId-000000000003", SEQ_56, SEQ_56 * 10, previous_checkpoint=SEQ_56 - 7, to_shard_end=True)
    data = rng.to_dict()
    assert data["start"] == str(SEQ_56) and isinstance(data["end"], str)  # strings: JSON numbers lose digits
    assert SequenceRange.from_dict(data) == rng


def _shard(shard_id: str, *parents: str, closed: bool = False) -> ShardInfo:
    return ShardInfo(shard_id, parents, 1, 99 if closed else None)


def test_children_wait_until_every_listed_parent_is_finished() -> None:
    shards = [_shard("p0", closed=True), _shard("p1", closed=True), _shard("c", "p0", "p1")]
    ready, waiting = shards_to_plan(shards, {"p0": True})
    assert [s.shard_id for s in ready] == ["p1"]
    assert [(s.shard_id, parents) for s, parents in waiting] == [("c", ["p1"])]


def test_children_are_ready_once_parents_are_finished_and_finished_shards_are_never_planned() -> None:
    shards = [_shard("p0", closed=True), _shard("c", "p0")]
    ready, waiting = shards_to_plan(shards, {"p0": True})
    assert [s.shard_id for s in ready] == ["c"] and waiting == []


def test_a_parent_gone_from_the_listing_does_not_hold_its_child_back() -> None:
    ready, waiting = shards_to_plan([_shard("c", "expired-parent")], {})
    assert [s.shard_id for s in ready] == ["c"] and waiting == []
