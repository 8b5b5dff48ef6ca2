"""The chaos suite's checker and generator: each check fails on the damage it exists to find."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import report

from kinesis_replay.core.formats import path_batch_id
from stack import chaos


def write_batch(
    output: Path, batch_id: int, rows: list[tuple[str, str, int]], replayed: bool = True, attempt: str | None = None,
    committed: bool = True,
) -> None:  # fmt: skip
    """A committed batch as the checker reads it: its files (a table output's attempt folder, given ``attempt``), the
    replay's result manifest and the commit record that keeps the same manifest."""
    directory = output / f"batch_id={path_batch_id(batch_id)}"
    if attempt is not None:
        directory = output / "data" / f"batch_id={path_batch_id(batch_id)}" / f"attempt={attempt}"
    directory.mkdir(parents=True)
    table = pa.table(
        {
            "shard_id": [r[0] for r in rows],
            "sequence_number": [r[1] for r in rows],
            "sub_sequence_number": [r[2] for r in rows],
            "data": [f"{r}".encode() for r in rows],
        }
    )
    pq.write_table(table, directory / "part-00000.parquet")
    if replayed:
        shards = sorted({r[0] for r in rows})
        entries = []
        for shard in shards:
            seqs = [int(r[1]) for r in rows if r[0] == shard]
            entries.append(
                {"shard_id": shard, "records": len(seqs), "first_sequence_number": str(min(seqs)), "last_sequence_number": str(max(seqs))}
            )
        result = {"batch_id": batch_id, "shards": entries, **({"attempt": attempt} if attempt else {})}
        (output / "_manifests").mkdir(exist_ok=True)
        (output / "_manifests" / f"batch_id={path_batch_id(batch_id)}.json").write_text(json.dumps(result))
        if committed:
            (output / "_commits").mkdir(exist_ok=True)
            record = json.dumps({"batch": {"manifest": result}, "format": 1})
            (output / "_commits" / f"batch_id={path_batch_id(batch_id)}.json").write_text(record)


def test_a_manifest_that_disagrees_with_its_files_is_named(tmp_path: Path) -> None:
    write_batch(tmp_path, 1, [("shardId-0", "10", 0), ("shardId-0", "11", 0)])
    assert chaos.check_results(tmp_path, [1]) == []
    (tmp_path / "batch_id=0000000001" / "part-00000.parquet").unlink()
    pq.write_table(
        pa.table({"shard_id": ["shardId-0"], "sequence_number": ["10"], "sub_sequence_number": [0], "data": [b"x"]}),
        tmp_path / "batch_id=0000000001" / "part-00001.parquet",
    )
    (problem,) = chaos.check_results(tmp_path, [1])
    assert "batch 1, shard shardId-0: manifest says 2 records" in problem and "files hold 1" in problem


def test_the_commit_record_names_the_committed_attempt_not_the_last_replay_s_result(tmp_path: Path) -> None:
    """Two runs replayed batch 1 at once: the first committed attempt A and removed B, whose result manifest the
    second replay wrote last. The commit record's attempt is the one checked."""
    write_batch(tmp_path, 1, [("shardId-0", "10", 0), ("shardId-0", "11", 0)], attempt="A")
    result = tmp_path / "_manifests" / "batch_id=0000000001.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "attempt": "B"}))  # B's folder is gone
    assert chaos.check_results(tmp_path, [1]) == []

    committed = tmp_path / "data" / "batch_id=0000000001" / "attempt=A"
    for f in committed.iterdir():
        f.unlink()
    committed.rmdir()
    (problem,) = chaos.check_results(tmp_path, [1])
    assert problem == f"batch 1: its commit record lists shard shardId-0, but {committed} is missing"


def test_a_committed_batch_without_a_manifest_is_named(tmp_path: Path) -> None:
    write_batch(tmp_path, 3, [("shardId-0", "10", 0)], replayed=False)
    assert chaos.check_results(tmp_path, [3]) == [f"batch 3: no manifest at {tmp_path}/_manifests/batch_id=0000000003.json"]


def test_files_outside_committed_batches_are_named(tmp_path: Path) -> None:
    write_batch(tmp_path, 1, [("shardId-0", "10", 0)])
    (tmp_path / "_manifests" / ".batch_id=0000000001.json.crc").write_text("crc")
    (tmp_path / "_quarantine" / "batch_id=0000000001").mkdir(parents=True)
    (tmp_path / "_quarantine" / "batch_id=0000000001" / "part-0.parquet").write_text("q")
    assert chaos.check_files(tmp_path, [1]) == []

    write_batch(tmp_path, 2, [("shardId-0", "11", 0)], committed=False)  # replayed, never committed
    (tmp_path / "_staging" / "batch_id=0000000002").mkdir(parents=True)
    (tmp_path / "_staging" / "batch_id=0000000002" / "part-0.parquet").write_text("left behind")
    assert sorted(chaos.check_files(tmp_path, [1])) == [
        "_manifests/batch_id=0000000002.json lies outside every committed batch's paths",
        "_staging/batch_id=0000000002/part-0.parquet lies outside every committed batch's paths",
        "batch_id=0000000002/part-00000.parquet lies outside every committed batch's paths",
    ]


def test_the_same_seed_gives_the_same_schedule_and_spark_steps_are_capped() -> None:
    assert chaos.generate(1234, 6) == chaos.generate(1234, 6)
    for seed in range(50):
        schedule = chaos.generate(seed, 6, spark_steps_max=1)
        assert sum(1 for s in schedule if s.kind in ("cycle", "backfill")) <= 1
        assert schedule[0].kind == "produce"
        backfills = [i for i, s in enumerate(schedule) if s.kind == "backfill"]
        cycles = [i for i, s in enumerate(schedule) if s.kind == "cycle"]
        assert all(cycles and cycles[0] < i for i in backfills), "a backfill before any cycle has nothing to replay"


def test_an_outcome_survives_the_trip_from_a_worker_process() -> None:
    outcome = chaos.Outcome(7, chaos.generate(7, 3), history=["produce 10: 10 records"], records=10, violations=["lost 1"])
    again = chaos.Outcome.from_dict(json.loads(json.dumps(outcome.to_dict())))
    assert again == outcome and not again.ok and "reproduce: python tests/stack/chaos.py --seed 7 --steps 3" in again.report()


def test_the_checker_counts_a_record_written_by_two_batches_as_duplicated(tmp_path: Path) -> None:
    from stack.harness import check_exactly_once, read_output
    from stack.producer import Produced

    write_batch(tmp_path, 1, [("shardId-0", "10", 0), ("shardId-0", "11", 0)])
    write_batch(tmp_path, 2, [("shardId-0", "11", 0)], replayed=False)
    produced = [Produced("shardId-0", seq, "k", f"{('shardId-0', seq, 0)}".encode()) for seq in ("10", "11", "12")]
    result = check_exactly_once(produced, read_output(tmp_path))
    assert (result.rows, result.lost, result.duplicated, result.payload_mismatches) == (3, 1, 1, 0)


def test_each_chaos_run_adds_a_row_and_the_total_counts_every_run(tmp_path: Path) -> None:
    benchmarks = tmp_path / "BENCHMARKS.md"
    report.write(benchmarks, "the bench's own figures")
    bench_block = report.BENCH.block("the bench's own figures")
    for schedules, records, failed in ((3, 900, []), (2, 500, [77])):
        totals = chaos.Totals(schedules=schedules, records=records, failed=failed, seconds=60.0)
        chaos.write_reliability(benchmarks, totals, list(range(schedules)), 4, f"make chaos SCHEDULES={schedules}")
    text = benchmarks.read_text()
    assert text.startswith("# Benchmarks\n\n" + bench_block + "\n") and text.count(report.RELIABILITY.start) == 1
    assert "| **total** | 2 runs | **5** | | 1400 | **0** | **0** | 77 | 2.0 min |" in text
    assert "`schedules: 5, records: 1400, lost: 0, duplicated: 0`" in text
    assert text.count("- seeds of ") == 2 and "Not measured yet" not in text


def test_the_reliability_table_keeps_the_notes_on_failed_seeds() -> None:
    old = chaos.reliability_table("", chaos.Totals(), [1], 4, "make chaos SCHEDULES=1 CHAOS_STEPS=4")
    noted = old.replace("\n\n`schedules", "\n\n- failed seed 7 of then: what it was\n\n`schedules")
    new = chaos.reliability_table(noted, chaos.Totals(), [2], 4, "make chaos SCHEDULES=1 CHAOS_STEPS=4")
    assert "- failed seed 7 of then: what it was" in new and new.count("| `make chaos SCHEDULES=1 CHAOS_STEPS=4` |") == 2
