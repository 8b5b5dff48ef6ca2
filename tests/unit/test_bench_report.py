"""BENCHMARKS.md: `make bench` replaces its own block and keeps the reliability block that `make chaos` writes."""

from __future__ import annotations

from report import RELIABILITY_END, RELIABILITY_START, render

RELIABILITY = f"{RELIABILITY_START}\n## Reliability (make chaos)\n\n| fault | outcome |\n|---|---|\n| kill | ok |\n{RELIABILITY_END}\n"


def test_a_new_file_gets_the_figures_and_an_empty_reliability_block() -> None:
    text = render("", "figures v1")
    assert "figures v1" in text
    assert f"{RELIABILITY_START}\n## Reliability (make chaos)\n" in text
    assert text.index("figures v1") < text.index(RELIABILITY_START)


def test_rerunning_replaces_only_the_figures_and_keeps_everything_else_verbatim() -> None:
    before = "# Benchmarks\n\nWritten by hand.\n\n" + render("", "figures v1").split("# Benchmarks\n", 1)[1]
    before = before.replace(before[before.index(RELIABILITY_START) :], RELIABILITY) + "\nA closing note.\n"
    after = render(before, "figures v2")
    assert "figures v1" not in after and "figures v2" in after
    assert RELIABILITY in after
    assert after.startswith("# Benchmarks\n\nWritten by hand.\n")
    assert after.endswith("\nA closing note.\n")
    assert render(after, "figures v2") == after


def test_a_reliability_block_written_first_is_kept_and_the_figures_go_before_it() -> None:
    text = render("# Benchmarks\n\n" + RELIABILITY, "figures v1")
    assert text.count(RELIABILITY_START) == 1 and RELIABILITY in text
    assert text.index("figures v1") < text.index(RELIABILITY_START)
