"""Verification before commit: the manifest must cover exactly the planned ranges, start to end."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kinesis_replay.batches import check_manifest
from kinesis_replay.errors import VerificationError
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.state import Batch, BatchStatus, Manifest, ShardResult

S = 10**55
RANGES = (SequenceRange("s0", S, S + 100), SequenceRange("s1", S + 5, S + 900, to_shard_end=True))
BATCH = Batch("orders", 7, BatchStatus.PLANNED, RANGES, "stream", "run", datetime.now(UTC))


def manifest(*shards: ShardResult, batch_id: int = 7) -> Manifest:
    return Manifest("orders", batch_id, shards)


GOOD = (ShardResult("s0", 3, 30, S, S + 100, "x"), ShardResult("s1", 2, 20, S + 5, S + 50, "y"))


def test_a_manifest_matching_the_plan_passes() -> None:
    check_manifest(BATCH, manifest(*GOOD))  # a closed shard may end below its EndingSequenceNumber


def test_a_manifest_of_another_batch_fails() -> None:
    with pytest.raises(VerificationError, match=r"pipeline 'orders', batch 7: the result manifest is for .* batch 6"):
        check_manifest(BATCH, manifest(*GOOD, batch_id=6))


def test_a_missing_shard_fails_naming_both_sets() -> None:
    with pytest.raises(VerificationError, match=r"covers shards \['s0'\], the plan \['s0', 's1'\]"):
        check_manifest(BATCH, manifest(GOOD[0]))


def test_output_that_stops_short_of_an_open_range_end_fails() -> None:
    with pytest.raises(VerificationError, match=r"range s0 .*: the output ends at"):
        check_manifest(BATCH, manifest(ShardResult("s0", 3, 30, S, S + 99, "x"), GOOD[1]))


def test_output_that_starts_after_the_range_start_fails() -> None:
    with pytest.raises(VerificationError, match=r"range s1 .*: the output starts at"):
        check_manifest(BATCH, manifest(GOOD[0], ShardResult("s1", 2, 20, S + 6, S + 50, "y")))
