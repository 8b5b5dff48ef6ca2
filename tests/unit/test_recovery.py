"""Rebuilding a pipeline's state from its commit records: checkpoints, finished parents, head, and the refusals."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.ranges import SequenceRange, ShardInfo
from kinesis_replay.core.state import Batch, BatchStatus, Gap, ReplayResult, ShardResult, StartPosition
from kinesis_replay.steps.recovery import RecoveryError, plan_recovery

CLAIMED = datetime(2026, 11, 1, tzinfo=UTC)
S0, S1, S2 = (f"shardId-00000000000{i}" for i in range(3))


def pipeline(position: str = "TRIM_HORIZON", output_format: str = "directory") -> PipelineConfig:
    """A directory output unless said otherwise: batch() writes records as a directory output's commits do (no attempt)."""
    entry = {
        "name": "orders", "stream": "orders-stream", "output": "/lake/orders", "schedule": None, "initial_position": position,
        "state_table": "kr-state", "spark": {"master": "local[1]"}, "output_format": output_format,
    }  # fmt: skip
    (p,) = parse_config({"pipelines": [entry]})
    return p


def batch(batch_id: int, *ranges: SequenceRange, last_read: dict[str, int] | None = None) -> Batch:
    results = tuple(
        ShardResult(r.shard_id, 5, 50, r.start, (last_read or {}).get(r.shard_id, r.end), "ab") for r in ranges
    )  # fmt: skip
    created = CLAIMED + timedelta(hours=batch_id)
    return Batch(
        "orders",
        batch_id,
        BatchStatus.COMMITTED,
        ranges,
        "orders-stream",
        f"run{batch_id}",
        created,
        created,
        ReplayResult("orders", batch_id, results),
    )


LISTED = [ShardInfo(S0, (), 100, 500), ShardInfo(S1, (S0,), 600, None), ShardInfo(S2, (), 100, None)]


def test_checkpoints_come_from_each_shards_newest_range_and_a_drained_parent_is_finished() -> None:
    records = [
        batch(1, SequenceRange(S0, 100, 200)),
        batch(2, SequenceRange(S0, 201, 500, 200, to_shard_end=True), last_read={S0: 450}),  # closed: read to its end
        batch(3, SequenceRange(S1, 600, 700)),
    ]
    rebuilt = plan_recovery(pipeline(), records, LISTED, CLAIMED)
    shards = {s.shard_id: s for s in rebuilt.shards}
    assert (shards[S0].checkpoint, shards[S0].finished, shards[S0].last_batch_id) == (450, True, 2)  # the last record read
    assert (shards[S1].checkpoint, shards[S1].finished, shards[S1].parent_shard_ids) == (700, False, (S0,))
    assert (shards[S2].checkpoint, shards[S2].start_position) == (None, StartPosition("TRIM_HORIZON"))
    assert rebuilt.head.next_batch_id == 4 and rebuilt.head.in_flight is None
    assert [b.batch_id for b in rebuilt.batches] == [1, 2, 3] and all(b.status == BatchStatus.COMMITTED for b in rebuilt.batches)
    assert rebuilt.batches[0].ranges == records[0].ranges
    assert rebuilt.batches[0].notes.restored_from == "/lake/orders/_commits/batch_id=0000000001.json"
    assert "next batch id 4" in rebuilt.describe() and f"shard {S0}: checkpoint 450 (batch 2), finished" in rebuilt.describe()


def test_a_latest_shard_that_never_committed_starts_no_later_than_the_claim() -> None:
    rebuilt = plan_recovery(pipeline("LATEST"), [batch(1, SequenceRange(S0, 100, 200))], LISTED, CLAIMED)
    (s2,) = [s for s in rebuilt.shards if s.shard_id == S2]
    assert s2.start_position == StartPosition("AT_TIMESTAMP", CLAIMED)  # not the time of the recovery: nothing is skipped
    (s1,) = [s for s in rebuilt.shards if s.shard_id == S1]
    assert s1.start_position == StartPosition("TRIM_HORIZON")  # a child starts at its first record, as planning does


def test_a_missing_commit_record_refuses_the_recovery() -> None:
    records = [batch(i, SequenceRange(S0, 100 * i, 100 * i + 50, 100 * i - 50 if i > 1 else None)) for i in (1, 2, 4, 5, 6, 7, 9)]
    with pytest.raises(RecoveryError, match=r"commit records of batches 3, 8 are missing"):
        plan_recovery(pipeline(), records, LISTED, CLAIMED)


def test_records_that_do_not_chain_refuse_the_recovery() -> None:
    records = [batch(1, SequenceRange(S0, 100, 200)), batch(2, SequenceRange(S0, 301, 400, 300))]
    with pytest.raises(RecoveryError, match=r"batch 2, range .* follows checkpoint 300, but the batches before it end shard .* at 200"):
        plan_recovery(pipeline(), records, LISTED, CLAIMED)


def test_a_range_without_a_result_recovers_only_with_the_gap_that_says_it_was_wholly_gone() -> None:
    ranges = (SequenceRange(S0, 100, 200), SequenceRange(S2, 100, 300))
    full = batch(1, *ranges)
    assert full.result is not None
    without = replace(full, result=replace(full.result, shards=full.result.shards[:1]))  # no result for S2
    with pytest.raises(RecoveryError, match=rf"batch 1 has no result for range {S2} .*no gap that says every record of it was gone"):
        plan_recovery(pipeline(), [without], LISTED, CLAIMED)
    gone = replace(without, gaps=(Gap(S2, None, None, "manual__1", "replay"),))
    shards = {s.shard_id: s for s in plan_recovery(pipeline(), [gone], LISTED, CLAIMED).shards}
    assert shards[S2].checkpoint == 300  # the range's end, as the commit left it


def test_a_record_of_another_stream_refuses_the_recovery() -> None:
    stray = replace(batch(1, SequenceRange(S0, 100, 200)), stream="payments-stream")
    with pytest.raises(RecoveryError, match="is of pipeline 'orders', stream payments-stream"):
        plan_recovery(pipeline(), [stray], LISTED, CLAIMED)


def test_a_recovered_batch_cut_before_its_table_commit_is_committed_to_the_table_once(tmp_path: Path) -> None:
    """A commit record without a snapshot id: the commit stopped between the record and the table. Recovery finishes it."""
    from test_iceberg_table import counts, write_attempt

    from kinesis_replay.adapters import commit_records, iceberg_table
    from kinesis_replay.steps.recovery import in_table

    p = replace(pipeline(output_format="iceberg"), output=str(tmp_path))
    write_attempt(tmp_path, 1, "a", 3)
    record = batch(1, SequenceRange(S0, 10, 19))
    record = replace(record, result=replace(record.verified_result(), attempt="a"))
    recovered = in_table(p, record)
    table = iceberg_table.load_table(p)
    assert table is not None and counts(table) == {1: 3}
    snapshot = table.current_snapshot()
    assert snapshot is not None and recovered.snapshot_id == snapshot.snapshot_id
    assert commit_records.read_commit_record(str(tmp_path), 1).snapshot_id == snapshot.snapshot_id  # the record names it now
    assert in_table(p, record).snapshot_id == snapshot.snapshot_id  # again: found by its summary, not added twice
    table = iceberg_table.load_table(p)
    assert table is not None and len(table.metadata.snapshots) == 1


def test_a_table_output_refuses_to_recover_from_records_committed_to_a_directory_output() -> None:
    """Records without a snapshot or an attempt: their rows are in batch_id=<id>/ folders, which the table can't take."""
    records = [batch(1, SequenceRange(S0, 100, 200)), batch(2, SequenceRange(S0, 201, 300, 200))]
    tabled = replace(records[1], result=replace(records[1].verified_result(), attempt="a"))  # the first table batch
    with pytest.raises(RecoveryError) as raised:
        plan_recovery(pipeline(output_format="iceberg"), [records[0], tabled], LISTED, CLAIMED)  # a dry run plans too
    assert str(raised.value) == (
        "pipeline 'orders', output /lake/orders: the commit records of batch(es) 1 name no table snapshot, and their "
        "result manifests no attempt: they were committed to a directory output (batch_id=<id>/ folders), and the "
        "pipeline's output_format is now iceberg (table kinesis_replay.orders in catalog kinesis_replay (sql, embedded)). "
        "Recovering would call them committed while the table holds none of their rows. If the output is a directory "
        "output, set output_format: directory for pipeline 'orders' in the pipelines config and recover again. "
        "Nothing was written."
    )
    rebuilt = plan_recovery(pipeline(output_format="directory"), records, LISTED, CLAIMED)  # as the message says
    assert [b.batch_id for b in rebuilt.batches] == [1, 2] and rebuilt.head.next_batch_id == 3
    assert {s.shard_id: s.checkpoint for s in rebuilt.shards}[S0] == 300


def test_a_table_output_recovers_records_that_name_their_snapshot_or_attempt() -> None:
    first, second = batch(1, SequenceRange(S0, 100, 200)), batch(2, SequenceRange(S0, 201, 300, 200))
    records = [replace(first, snapshot_id=7), replace(second, result=replace(second.verified_result(), attempt="a"))]
    rebuilt = plan_recovery(pipeline(output_format="iceberg"), records, LISTED, CLAIMED)
    assert [(b.batch_id, b.snapshot_id) for b in rebuilt.batches] == [(1, 7), (2, None)]  # recover() commits batch 2 to the table
