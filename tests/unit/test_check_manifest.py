"""Verification before commit: the manifest must cover exactly the planned ranges, start to end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import DataLossError, VerificationError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, Gap, ReplayResult, ShardResult, range_checkpoint
from kinesis_replay.steps.in_flight import check_retention
from kinesis_replay.steps.verify import check_result, merge_gaps

S = 10**55
RANGES = (SequenceRange("s0", S, S + 100), SequenceRange("s1", S + 5, S + 900, to_shard_end=True))
BATCH = Batch("orders", 7, BatchStatus.PLANNED, RANGES, "stream", "run", datetime.now(UTC))


def result(*shards: ShardResult, batch_id: int = 7) -> ReplayResult:
    return ReplayResult("orders", batch_id, shards)


GOOD = (ShardResult("s0", 3, 30, S, S + 100, "x"), ShardResult("s1", 2, 20, S + 5, S + 50, "y"))


def test_a_manifest_matching_the_plan_passes_with_no_gap() -> None:
    assert check_result(BATCH, result(*GOOD)) == []  # a closed shard may end below its EndingSequenceNumber


def test_a_manifest_of_another_batch_fails() -> None:
    with pytest.raises(VerificationError, match=r"pipeline 'orders', batch 7: the result manifest is for .* batch 6"):
        check_result(BATCH, result(*GOOD, batch_id=6))


def test_a_missing_shard_fails_naming_both_sets() -> None:
    with pytest.raises(VerificationError, match=r"covers shards \['s0'\], the plan \['s0', 's1'\]"):
        check_result(BATCH, result(GOOD[0]))


def test_output_that_stops_short_of_an_open_range_end_fails() -> None:
    with pytest.raises(VerificationError, match=r"range s0 .*: the output ends at"):
        check_result(BATCH, result(ShardResult("s0", 3, 30, S, S + 99, "x"), GOOD[1]))


def test_output_that_starts_after_the_range_start_fails() -> None:
    with pytest.raises(VerificationError, match=r"range s1 .*: the output starts at"):
        check_result(BATCH, result(GOOD[0], ShardResult("s1", 2, 20, S + 6, S + 50, "y")))


def test_output_starting_after_the_range_start_is_a_gap_only_when_acknowledged() -> None:
    late = result(ShardResult("s0", 3, 30, S + 7, S + 100, "x"), GOOD[1])
    with pytest.raises(VerificationError, match=r"range s0 .*: the output starts at .*, after the range start"):
        check_result(BATCH, late)
    (gap,) = check_result(BATCH, late, acknowledged=frozenset({"s0"}), run_id="manual__1")
    assert (gap.shard_id, gap.after, gap.first_available, gap.acknowledged_by, gap.detected) == ("s0", None, S + 7, "manual__1", "replay")


def test_records_the_reader_could_not_show_it_read_are_gaps_only_when_acknowledged() -> None:
    # Near the retention, record S+40 was gone once the page after it was read (that page began at S+60); at the closed
    # shard's end, S+50 was gone once the shard ended.
    spans = result(ShardResult("s0", 3, 30, S, S + 100, "x", unconfirmed=((S + 40, S + 60),)),
                     ShardResult("s1", 2, 20, S + 5, S + 50, "y", unconfirmed=((S + 50, None),)))  # fmt: skip
    expected = rf'range s0 .*: records after {S + 40} may have been trimmed unread.*"acknowledge_data_loss": \["s0"\]'
    with pytest.raises(VerificationError, match=expected):
        check_result(BATCH, spans, acknowledged=frozenset({"s1"}))
    gaps = check_result(BATCH, spans, acknowledged=frozenset({"s0", "s1"}), run_id="manual__2")
    assert gaps == [Gap("s0", S + 40, S + 60, "manual__2", "read"), Gap("s1", S + 50, None, "manual__2", "read")]
    # The manifest's JSON keeps them; a shard without any writes no key, as manifests always did.
    assert ReplayResult.from_dict(spans.to_dict()) == spans and "unconfirmed" not in GOOD[0].to_dict()


def test_a_range_with_no_row_is_a_whole_gap_only_when_acknowledged_and_leaves_its_checkpoint_at_its_end() -> None:
    # Every record of the range was gone when it was read: no row, so the manifest has no line for its shard.
    for missing, kept in (("s0", GOOD[1]), ("s1", GOOD[0])):
        with pytest.raises(VerificationError, match=r"covers shards \['s[01]'\], the plan \['s0', 's1'\]"):
            check_result(BATCH, result(kept))
        (gap,) = check_result(BATCH, result(kept), acknowledged=frozenset({missing}), run_id="manual__2")
        assert (gap.shard_id, gap.after, gap.first_available, gap.detected) == (missing, None, None, "replay")
    # An acknowledged shard the manifest does cover is no gap; a shard the plan does not hold is refused.
    assert check_result(BATCH, result(*GOOD), acknowledged=frozenset({"s0", "s1"})) == []
    with pytest.raises(VerificationError, match="covers shards"):
        check_result(BATCH, result(*GOOD, ShardResult("s9", 1, 1, S, S, "z")), acknowledged=frozenset({"s9"}))
    results = result(GOOD[0]).by_shard()
    assert range_checkpoint(RANGES[0], results) == S + 100  # an open range: its end
    assert range_checkpoint(RANGES[1], result(*GOOD).by_shard()) == S + 50  # a closed shard: its last record read
    assert range_checkpoint(RANGES[1], results) == S + 900  # a closed shard's range wholly gone: its end, finished


def test_a_gap_the_replay_found_after_the_plans_replaces_it_when_it_reaches_further() -> None:
    # The plan found the checkpoint trimmed (the range starts at the first record left); by the replay, more was gone.
    plan = Gap("s0", S - 10, S, "manual__1", detected="plan")
    other = Gap("s1", None, S + 9, "manual__1", detected="plan")
    for replay in (Gap("s0", S - 10, None, "manual__2", "replay"), Gap("s0", S - 10, S + 7, "manual__2", "replay")):
        assert merge_gaps((plan, other), [replay]) == (replay, other)  # once, the replay's was dropped: loss understated
    wholly = Gap("s0", S - 10, None, "manual__2", "replay")
    assert merge_gaps((wholly,), [Gap("s0", S - 10, S + 7, "manual__3", "replay")]) == (wholly,)
    assert merge_gaps((plan,), [plan]) == (plan,)  # verify run again: the same gap once
    assert merge_gaps((plan,), [Gap("s2", None, S, "manual__2", "replay")]) == (plan, Gap("s2", None, S, "manual__2", "replay"))


def test_a_range_older_than_retention_fails_naming_it_unless_acknowledged() -> None:
    now = datetime(2026, 11, 22, 12, tzinfo=UTC)
    old = SequenceRange("s0", S, S + 9, start_arrival=now - timedelta(hours=25, minutes=30))
    fresh = SequenceRange("s1", S, S + 9, start_arrival=now - timedelta(hours=23))
    batch = Batch("orders", 7, BatchStatus.PLANNED, (fresh, old), "orders-stream", "run", now)
    pipeline = parse_config({"pipelines": [{"name": "orders", "stream": "orders-stream", "output": "/o", "schedule": None,
                                            "initial_position": "LATEST", "state_table": "t", "spark": {}}]})[0]  # fmt: skip
    with pytest.raises(DataLossError, match=r"stream orders-stream, batch 7, range s0 .*arrived 25h30m ago.*retention of 24h"):
        check_retention(pipeline, batch, timedelta(hours=24), now)
    check_retention(pipeline, batch, timedelta(hours=24), now, acknowledged=frozenset({"s0"}))
    check_retention(pipeline, batch, timedelta(hours=48), now)
