"""The ledger's transitions and the result manifest's exact round trip."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kinesis_replay.core.errors import StateCorruptError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, PlanNotes, ReplayResult, ShardResult

BIG = 10**55


def batch(status: BatchStatus) -> Batch:
    return Batch("p", 3, status, (SequenceRange("s0", BIG, BIG + 9),), "stream", "run", datetime.now(UTC))


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (BatchStatus.PLANNED, BatchStatus.WRITTEN),
        (BatchStatus.FAILED, BatchStatus.WRITTEN),
        (BatchStatus.WRITTEN, BatchStatus.COMMITTING),
        (BatchStatus.COMMITTING, BatchStatus.COMMITTED),
        (BatchStatus.PLANNED, BatchStatus.FAILED),
    ],
)
def test_legal_transitions(current: BatchStatus, new: BatchStatus) -> None:
    assert batch(current).with_status(new).status == new


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (BatchStatus.PLANNED, BatchStatus.COMMITTED),  # never commit what was not verified
        (BatchStatus.COMMITTING, BatchStatus.FAILED),  # a commit under way is finished, not failed back
        (BatchStatus.COMMITTED, BatchStatus.PLANNED),  # a committed batch is never re-planned
    ],
)
def test_illegal_transitions_name_the_batch(current: BatchStatus, new: BatchStatus) -> None:
    with pytest.raises(StateCorruptError, match=f"batch 3 cannot go from {current.value} to {new.value}"):
        batch(current).with_status(new)


def test_manifest_round_trips_and_sums() -> None:
    result = ReplayResult("p", 3, (ShardResult("s0", 10, 100, BIG, BIG + 9, "ab"), ShardResult("s1", 5, 50, BIG, BIG, "cd")))
    assert ReplayResult.from_dict(result.to_dict()) == result
    assert (result.records, result.bytes) == (15, 150)


# A batch's "extra" as a plan of the previous release wrote it to the state table and the commit record, restored.
OLD_EXTRA = {
    "lag_millis": {"s0": 1200, "s1": 0},
    "capped": {"s0": 90000},
    "estimated_records": {"s0": 500},
    "estimated_bytes": {"s0": 64000},
    "restored_from": "/lake/orders/_commits/batch_id=0000000003.json",
}


def test_a_plan_s_notes_read_and_write_the_extra_an_older_release_stored_word_for_word() -> None:
    notes = PlanNotes.from_dict(OLD_EXTRA)
    assert notes.capped == {"s0": 90000} and notes.lag_millis == {"s0": 1200, "s1": 0}
    assert notes.estimated_records == {"s0": 500} and notes.estimated_bytes == {"s0": 64000}
    assert notes.restored_from == "/lake/orders/_commits/batch_id=0000000003.json"
    assert notes.to_dict() == OLD_EXTRA and list(notes.to_dict()) == list(OLD_EXTRA)
    stored = {**batch(BatchStatus.COMMITTED).to_dict(), "extra": OLD_EXTRA}
    assert Batch.from_dict(stored).notes == notes and Batch.from_dict(stored).to_dict() == stored


def test_notes_a_plan_did_not_take_stay_absent_and_unknown_ones_are_kept() -> None:
    assert PlanNotes.from_dict({}) == PlanNotes() and not PlanNotes() and PlanNotes().to_dict() == {}
    assert PlanNotes.from_dict({"capped": {}}).to_dict() == {"capped": {}}  # noted as none capped: still noted
    newer = {"lag_millis": {"s0": 5}, "noted_by_a_newer_release": [1, 2]}
    assert PlanNotes.from_dict(newer).to_dict() == newer
