"""BENCHMARKS.md: each writer replaces its own section and keeps every other byte; `make bench` keeps the one `make chaos` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report import BENCH, RELIABILITY, RELIABILITY_PLACEHOLDER, Section, render, replace_section, write, write_section

RELIABILITY_BLOCK = RELIABILITY.block("## Reliability (make chaos)\n\n| fault | outcome |\n|---|---|\n| kill | ok |")
NOTES = Section("<!-- notes:start -->", "<!-- notes:end -->")


def test_a_new_file_gets_the_figures_and_an_empty_reliability_block() -> None:
    text = render("", "figures v1")
    assert "figures v1" in text
    assert f"{RELIABILITY.start}\n## Reliability (make chaos)\n" in text
    assert text.index("figures v1") < text.index(RELIABILITY.start)


def test_rerunning_replaces_only_the_figures_and_keeps_everything_else_verbatim() -> None:
    before = "# Benchmarks\n\nWritten by hand.\n\n" + render("", "figures v1").split("# Benchmarks\n", 1)[1]
    before = before.replace(before[before.index(RELIABILITY.start) :], RELIABILITY_BLOCK) + "\nA closing note.\n"
    after = render(before, "figures v2")
    assert "figures v1" not in after and "figures v2" in after
    assert RELIABILITY_BLOCK in after
    assert after.startswith("# Benchmarks\n\nWritten by hand.\n")
    assert after.endswith("\nA closing note.\n")
    assert render(after, "figures v2") == after


def test_a_reliability_block_written_first_is_kept_and_the_figures_go_before_it() -> None:
    text = render("# Benchmarks\n\n" + RELIABILITY_BLOCK, "figures v1")
    assert text.count(RELIABILITY.start) == 1 and RELIABILITY_BLOCK in text
    assert text.index("figures v1") < text.index(RELIABILITY.start)


def test_replacing_one_section_leaves_every_other_byte_as_it_was() -> None:
    head, middle, tail = "# Benchmarks\n\nBy hand.\n\n", "\nBetween, by hand.\n\n", "\nAfter, by hand.\n"
    text = head + BENCH.block("figures v1") + middle + RELIABILITY_BLOCK + tail
    after = replace_section(text, BENCH, "figures v2\n\n")
    assert after == head + BENCH.block("figures v2") + middle + RELIABILITY_BLOCK + tail
    assert replace_section(after, RELIABILITY, "runs") == head + BENCH.block("figures v2") + middle + RELIABILITY.block("runs") + tail


def test_a_missing_section_is_added_at_the_end_or_before_the_section_it_precedes() -> None:
    text = "# Benchmarks\n\nBy hand.\n\n\n" + RELIABILITY_BLOCK
    assert replace_section(text, NOTES, "notes") == text + "\n" + NOTES.block("notes")
    assert replace_section(text, NOTES, "notes", before=RELIABILITY) == (
        "# Benchmarks\n\nBy hand.\n\n" + NOTES.block("notes") + "\n" + RELIABILITY_BLOCK
    )


def test_a_section_without_its_end_line_is_left_for_a_person_to_fix() -> None:
    with pytest.raises(ValueError, match="without <!-- bench:end -->"):
        replace_section("# Benchmarks\n\n<!-- bench:start -->\nfigures v1\n", BENCH, "figures v2")


def test_a_section_writer_adds_to_the_body_it_reads_and_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    benchmarks = tmp_path / "BENCHMARKS.md"
    write(benchmarks, "figures v1")
    before = benchmarks.read_text()
    for run in ("run 1", "run 2"):
        write_section(benchmarks, RELIABILITY, lambda old, run=run: f"{old.rstrip()}\n{run}")
    runs = RELIABILITY.block(f"{RELIABILITY_PLACEHOLDER}\nrun 1\nrun 2")
    assert benchmarks.read_text() == before.replace(RELIABILITY.block(RELIABILITY_PLACEHOLDER), runs)


def planned(kind: str, shards: int, runs: list[float], planner_cpu: list[float]) -> Any:
    """A stream's first plans as bench/planning.py records them, with the given wall and planner CPU seconds."""
    import planning

    size = 2**20 if kind == "busy" else 0
    cpu = {"planner": sorted(planner_cpu)[1], "proxy": 1.0, "kinesalite": 2.0, "moto": 0.5}
    return planning.Result(
        planning.Scenario(kind, shards, size), sorted(runs)[1], runs, shards, [2] * shards, [3] * shards, [2048] * shards,
        [2] * shards, 0, 0.5, cpu, planner_cpu,
    )  # fmt: skip


def target_rows(section: str) -> list[str]:
    return [line for line in section.splitlines() if line.startswith(("| 1,000 shards planned", "| the planner's own CPU"))]


def test_the_planning_targets_are_met_or_missed_by_the_1000_shard_plans_medians() -> None:
    import planning

    hundred = planned("busy", 100, [1.0, 1.1, 1.2], [0.5, 0.6, 0.7])
    met = planned("busy", 1000, [7.5, 9.9, 12.0], [6.0, 7.9, 9.0])  # a slow run and a hungry one, the medians under
    section = planning.render([hundred, met], 120, 128, 3)
    assert target_rows(section) == [
        "| 1,000 shards planned in under 10 s | busy, 1 MiB a shard | 9.9 (7.5 to 12.0) s | **met** |",
        "| the planner's own CPU under 8 ms a shard | busy, 1 MiB a shard | 7.9 (6.0 to 9.0) ms | **met** |",
    ]
    assert "1,000 shards took 9.9 s, 9.0 times the 100-shard plan's 1.1 s" in section  # beside it, not a target

    slow = planned("idle", 1000, [9.0, 10.0, 10.5], [3.0, 4.0, 5.0])  # the wall time's median at the bound: missed
    hungry = planned("busy", 1000, [5.0, 6.0, 7.0], [7.0, 8.5, 9.0])
    assert target_rows(planning.render([slow, hungry], 120, 128, 3)) == [
        "| 1,000 shards planned in under 10 s | idle, 1 record a shard | 10.0 (9.0 to 10.5) s | **missed** |",
        "| the planner's own CPU under 8 ms a shard | idle, 1 record a shard | 4.0 (3.0 to 5.0) ms | **met** |",
        "| 1,000 shards planned in under 10 s | busy, 1 MiB a shard | 6.0 (5.0 to 7.0) s | **met** |",
        "| the planner's own CPU under 8 ms a shard | busy, 1 MiB a shard | 8.5 (7.0 to 9.0) ms | **missed** |",
    ]


def test_a_planning_run_without_1000_shards_checks_no_target() -> None:
    import planning

    section = planning.render([planned("busy", 100, [1.0, 1.1, 1.2], [0.5, 0.6, 0.7])], 120, 128, 3)
    assert target_rows(section) == []
    assert "Targets: not checked, no stream of 1,000 shards was planned in this run." in section


def commits(ms_a_snapshot: float, drift_ms_a_snapshot: float = 0.0, batches: int = 1000, width: int = 6) -> dict[str, Any]:
    """bench/table_commit.py's results for a table whose commit takes 16 ms plus ``ms_a_snapshot`` for each snapshot kept,
    give or take 2 ms, alternately; across the run the machine's load adds ``drift_ms_a_snapshot`` more as the table grows,
    which the commits side by side at the end (seconds apart, the same load) do not see."""

    def ms(kept: int, i: int, drift: float) -> float:
        return (16 + ms_a_snapshot * kept + drift + (2 if i % 2 else -2)) / 1000

    points = [(b, b - 1, ms(b - 1, b, drift_ms_a_snapshot * (b - 1))) for b in range(10 - width + 1, batches + 1)]
    late = drift_ms_a_snapshot * batches
    before_cut = [(batches + width + i, ms(batches + width + i, i, late)) for i in range(2 * width)]
    after_cut = [(10 + i, ms(10 + i, i, late)) for i in range(2 * width)]
    first = [s for b, _, s in points if b <= 10][::2]
    final = [s for b, _, s in points if b > batches - width][::2]
    times = {
        "10th project": first, "last project": final, "10th pyiceberg": [0.03], "last pyiceberg": [0.8],
        "10th replay": [0.03], "last replay": [0.6], "10th metadata file": [0.0004], "last metadata file": [0.017],
        "before cut project": [s for _, s in before_cut], "expired project": [s for _, s in after_cut],
    }  # fmt: skip
    cpu = {"before cut project": [s * 0.9 for _, s in before_cut], "expired project": [s * 0.9 for _, s in after_cut]}
    return {
        "batches": batches, "files": 4, "width": width, "history": batches + width, "metadata_bytes": 2**20, "seconds": 60.0,
        "times": times, "points": points, "before_cut": before_cut, "after_cut": after_cut, "cpu": cpu,
        "machine": "3.11.7, 2 cores", "load": 1.0,
    }  # fmt: skip


def table_target(section: str) -> str:
    return next(line for line in section.splitlines() if line.startswith("Target: each snapshot"))


def test_the_table_commit_target_is_met_or_missed_by_the_commits_side_by_side() -> None:
    import table_commit

    met = table_target(table_commit.render(commits(0.03)))
    assert met.startswith("Target: each snapshot the table keeps adds at most 0.05 ms to a commit: **met** (0.030 ms a snapshot)")
    assert "ms over 996 snapshots" in met  # the medians of 1,006 to 1,017 snapshots kept and of 10 to 21
    missed = table_target(table_commit.render(commits(0.06)))
    assert missed.startswith("Target: each snapshot the table keeps adds at most 0.05 ms to a commit: **missed** (0.060 ms a snapshot)")


def test_the_load_drifting_over_the_run_moves_the_fitted_line_and_not_the_verdict() -> None:
    import table_commit

    met = table_target(table_commit.render(commits(0.03, drift_ms_a_snapshot=0.05)))
    assert "**met** (0.030 ms a snapshot)" in met
    assert "against the snapshots kept gives 0.080 ms a snapshot" in met  # the line across the run: history and load
    missed = table_target(table_commit.render(commits(0.06, drift_ms_a_snapshot=-0.05)))
    assert "**missed** (0.060 ms a snapshot)" in missed
    assert "against the snapshots kept gives 0.010 ms a snapshot" in missed


def test_one_slow_commit_moves_the_fitted_line_little() -> None:
    import table_commit

    points = [(kept, (16 + 0.03 * kept + (2 if kept % 2 else -2)) / 1000) for kept in range(4, 1000)]
    points[-1] = (points[-1][0], 0.5)  # the last commit caught by a pause of half a second
    assert 0.03 < table_commit.Fit.of(points).ms_a_snapshot < 0.04
