"""How far behind a capped batch leaves a pipeline, and when it will have caught up at that batch's pace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, PlanNotes, ReplayResult, ShardResult
from kinesis_replay.ui.status import catch_up

T0 = datetime(2026, 11, 1, tzinfo=UTC)
S = 10**50


def committed(capped: dict[str, int], took: timedelta) -> Batch:
    """Two shards, each range an hour of records (3,600 of them) that arrived from T0."""
    ranges = tuple(SequenceRange(f"s{i}", S + 1, S + 3600, None, False, T0) for i in range(2))
    results = tuple(ShardResult(f"s{i}", 3600, 360_000, S + 1, S + 3600, "x", last_arrival=T0 + timedelta(hours=1)) for i in range(2))
    planned_at = T0 + timedelta(hours=6)
    return Batch(
        pipeline_name="p", batch_id=7, status=BatchStatus.COMMITTED, ranges=ranges, stream="s", run_id="r", created_at=planned_at,
        result=ReplayResult("p", 7, results), committed_at=planned_at + took, notes=PlanNotes(capped=capped),
    )  # fmt: skip


def test_an_uncapped_batch_is_within_one_batch_of_the_tip() -> None:
    found = catch_up(committed({}, timedelta(minutes=5)), T0 + timedelta(hours=7))
    assert not found.behind and found.eta_seconds is None and found.describe() == "within one batch of the tip"


def test_a_capped_batch_says_how_far_behind_and_when_caught_up() -> None:
    batch = committed({"s0": 5 * 3600 * 1000, "s1": 4 * 3600 * 1000}, timedelta(minutes=10))
    found = catch_up(batch, batch.committed_at)  # type: ignore[arg-type]
    # The worst shard was 5 h behind at the plan, and 10 minutes went by since.
    assert found.capped_shards == ("s0", "s1") and found.behind_seconds == 5 * 3600 + 600
    # At the shards' measured rate of one record a second.
    assert found.behind_records == (5 * 3600 + 600) + (4 * 3600 + 600)
    # An hour of the stream in 10 minutes gains 50 minutes on the tip every 10: 5h10m behind is 62 minutes away.
    assert found.eta_seconds is not None and round(found.eta_seconds) == round((5 * 3600 + 600) / 5)
    assert "2 capped shards are 5h10m behind the tip, about 33,600 records; caught up in about 1h02m" in found.describe()


def test_a_batch_slower_than_the_stream_is_not_gaining() -> None:
    batch = committed({"s0": 3600 * 1000}, timedelta(hours=2))  # an hour of the stream took two
    found = catch_up(batch, batch.committed_at)  # type: ignore[arg-type]
    assert found.behind and found.eta_seconds is None and "not gaining on the tip" in found.describe()
