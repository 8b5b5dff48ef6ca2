"""The guards between the output and the state table, on a real local output folder: owner, lost table, moved output."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kinesis_replay import guards, output
from kinesis_replay.config import PipelineConfig, parse_config
from kinesis_replay.errors import OutputOwnershipError, StateLostError
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.state import Batch, BatchStatus, Head, Manifest, ShardResult

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def pipeline(root: Path, **changes: object) -> PipelineConfig:
    entry = {
        "name": "orders", "stream": "orders-stream", "output": str(root), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"}, **changes,
    }  # fmt: skip
    (p,) = parse_config({"pipelines": [entry]})
    return p


def committed(p: PipelineConfig, batch_id: int) -> Batch:
    rng = SequenceRange("shardId-000000000000", 10 * batch_id, 10 * batch_id + 9, 10 * batch_id - 1 if batch_id > 1 else None)
    manifest = Manifest(p.name, batch_id, (ShardResult(rng.shard_id, 10, 100, rng.start, rng.end, "00"),))
    return Batch(p.name, batch_id, BatchStatus.COMMITTED, (rng,), p.stream, "run", NOW, NOW, manifest)


def test_the_first_plan_claims_a_new_root_and_a_dry_run_does_not(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    guards.check_before_plan(p, Head())
    assert output.read_owner(p.output) is None  # checking writes nothing
    guards.claim_output(p, NOW)
    owner = output.read_owner(p.output)
    assert owner == output.Owner("orders", "orders-stream", "kr-state", NOW.isoformat(), adopted=0)
    guards.claim_output(p, datetime.now(UTC))  # a second claim changes nothing
    assert output.read_owner(p.output) == owner


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "payments"}, "pipeline 'payments' may not write output {root}: it belongs to pipeline 'orders' (stream orders-stream"),
        ({"stream": "other"}, "output {root} holds stream orders-stream, and the config now names stream other"),
    ],
)
def test_a_root_owned_by_another_pipeline_or_stream_is_refused(tmp_path: Path, change: dict[str, str], message: str) -> None:
    owner = pipeline(tmp_path / "out")
    guards.claim_output(owner, NOW)
    intruder = pipeline(tmp_path / "out" / "." / "", **change)
    with pytest.raises(OutputOwnershipError) as raised:
        guards.check_before_plan(intruder, Head())
    assert message.format(root=owner.output) in str(raised.value)
    with pytest.raises(OutputOwnershipError):
        guards.require_owner(intruder)  # replay, backfill and commit check it too
    with pytest.raises(OutputOwnershipError):
        guards.claim_output(intruder, NOW)  # a claim never takes over an owned root
    assert output.read_owner(owner.output) == output.Owner("orders", "orders-stream", "kr-state", NOW.isoformat())


def test_replay_backfill_and_commit_refuse_a_root_with_no_owner_record(tmp_path: Path) -> None:
    with pytest.raises(OutputOwnershipError, match="has no owner record"):
        guards.require_owner(pipeline(tmp_path / "out"))


def test_a_missing_head_with_committed_batches_in_the_output_is_refused(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    guards.claim_output(p, NOW)
    for i in (1, 2, 3):
        output.write_commit_record(p.output, committed(p, i))
    with pytest.raises(StateLostError) as raised:
        guards.check_before_plan(p, Head())
    text = str(raised.value)
    assert f"state table kr-state holds no state for the pipeline, but its output {p.output} holds 3 committed batches" in text
    assert '{"recover_from_output": true, "dry_run": true}' in text


def test_a_missing_head_with_only_uncommitted_results_is_a_fresh_start(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    guards.claim_output(p, NOW)
    manifest = Path(output.manifest_path(p.output, 1))
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")  # batch 1 replayed, never committed: the new batch 1 replaces it
    guards.check_before_plan(p, Head())


def test_a_root_written_before_owner_records_counts_its_results_as_committed(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    manifest = Path(output.manifest_path(p.output, 7))
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{}")
    with pytest.raises(StateLostError, match="written before it kept commit records"):
        guards.check_before_plan(p, Head())
    guards.claim_output(p, NOW)  # adopted by a pipeline whose table holds its state
    owner = output.read_owner(p.output)
    assert owner is not None and owner.adopted == 7
    with pytest.raises(StateLostError):
        guards.check_before_plan(p, Head())


def test_a_head_ahead_of_the_output_means_the_output_moved(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "new")
    with pytest.raises(StateLostError, match=f"says batches up to 4 are committed, but output {p.output} does not hold batch 4"):
        guards.check_before_plan(p, Head(next_batch_id=6, in_flight=5, version=9))
    assert not Path(p.output).exists()


def test_a_head_behind_the_output_is_refused(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    guards.claim_output(p, NOW)
    for i in (1, 2, 3):
        output.write_commit_record(p.output, committed(p, i))
    guards.check_before_plan(p, Head(next_batch_id=4, version=4))  # in step
    with pytest.raises(StateLostError, match=r"is behind output .* would plan batch 3 anew"):
        guards.check_before_plan(p, Head(next_batch_id=3, version=3))  # an old backup of the table


def test_a_renamed_state_table_is_refused_once_anything_is_committed(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    guards.claim_output(p, NOW)
    renamed = replace(p, state_table="kr-state-2")
    guards.check_before_plan(renamed, Head())  # nothing committed: the new table is a fresh start
    output.write_commit_record(p.output, committed(p, 1))
    with pytest.raises(StateLostError, match="is kept with state table kr-state, and the config now names state table kr-state-2"):
        guards.check_before_plan(renamed, Head())
    with pytest.raises(StateLostError):
        guards.claim_output(renamed, NOW)  # nor does a claim, on its own, adopt the new table
    owner = output.read_owner(p.output)
    assert owner is not None and owner.state_table == "kr-state"


def test_a_commit_record_round_trips_the_ledger_entry(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    batch = committed(p, 2)
    output.write_commit_record(p.output, batch)
    assert output.read_commit_record(p.output, 2) == batch
    assert output.committed_batch_ids(p.output) == [2]
    assert json.loads(Path(output.commit_record_path(p.output, 2)).read_text())["format"] == 1
