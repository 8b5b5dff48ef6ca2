"""The ledger's transitions and the result manifest's exact round trip."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kinesis_replay.errors import StateCorruptError
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.state import Batch, BatchStatus, Manifest, ShardResult

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
    manifest = Manifest("p", 3, (ShardResult("s0", 10, 100, BIG, BIG + 9, "ab"), ShardResult("s1", 5, 50, BIG, BIG, "cd")))
    assert Manifest.from_dict(manifest.to_dict()) == manifest
    assert (manifest.records, manifest.bytes) == (15, 150)
