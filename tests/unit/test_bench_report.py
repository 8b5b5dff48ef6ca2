"""BENCHMARKS.md: each writer replaces its own section and keeps every other byte; `make bench` keeps the one `make chaos` writes."""

from __future__ import annotations

from pathlib import Path

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
