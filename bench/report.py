"""BENCHMARKS.md's generated sections: the one place that reads the file, finds a section by its marker lines and writes it.

Each command writes a section: `make bench` the bench section (bench/run.py, through ``write``) and the
table-commit section (bench/table_commit.py, also `make bench-table`) and the re-decode section (bench/redecode.py,
also `make bench-redecode`), `make chaos` the reliability section
(tests/stack/chaos.py), `make bench-ledger` the ledger section (bench/ledger.py), `make bench-planning` the planning
section (bench/planning.py) and the planning-wide section (bench/wide_planning.py), `make bench-state-wide` the
state-wide section (bench/wide_state.py), `make bench-paced` the paced section (bench/paced.py) and the
paced-shared section (bench/shared.py, through bench/paced.py) and `make bench-connect` the
Spark Connect section (bench/connect.py) and `make bench-lineage` the lineage section (bench/lineage.py, also part of
`make bench`) and `make bench-scan` the scan-planning section (bench/scan_planning.py) and `make bench-history` the history
section (bench/history.py), all but the first through
``write_section``. Every other line is written by hand, so
each write replaces one section and keeps every other byte of the file as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TITLE = "# Benchmarks\n"


@dataclass(frozen=True)
class Section:
    """A generated block of BENCHMARKS.md: the line ``start``, the section's body, the line ``end``."""

    start: str
    end: str

    def _markers(self, text: str) -> tuple[int, int] | None:
        """Where the start line and the end marker after it begin in ``text``; None if it has no start line."""
        a = text.find(self.start + "\n")
        if a < 0:
            return None
        b = text.find(self.end, a)
        if b < 0:
            raise ValueError(f"BENCHMARKS.md has {self.start} without {self.end}: fix the file by hand rather than lose what is in it")
        return a, b

    def span(self, text: str) -> tuple[int, int] | None:
        """Where the block lies in ``text``, from its start line to its end line with that line's newline; None if it has none."""
        where = self._markers(text)
        if where is None:
            return None
        end = where[1] + len(self.end)
        return where[0], end + 1 if text.startswith("\n", end) else end

    def body(self, text: str) -> str:
        """What the block in ``text`` holds between its marker lines ("" if it has none), for a writer that adds to it."""
        where = self._markers(text)
        return text[where[0] + len(self.start) + 1 : where[1]] if where else ""

    def block(self, body: str) -> str:
        """The block's lines around ``body``, without its trailing blank lines, so that rewriting the same body changes nothing."""
        return f"{self.start}\n{body.rstrip()}\n{self.end}\n"


BENCH = Section("<!-- bench:start -->", "<!-- bench:end -->")
RELIABILITY = Section("<!-- reliability:start -->", "<!-- reliability:end -->")
LEDGER = Section("<!-- ledger:start -->", "<!-- ledger:end -->")
PLANNING = Section("<!-- planning:start -->", "<!-- planning:end -->")
PLANNING_WIDE = Section("<!-- planning-wide:start -->", "<!-- planning-wide:end -->")
STATE_WIDE = Section("<!-- state-wide:start -->", "<!-- state-wide:end -->")
TABLE_COMMIT = Section("<!-- table-commit:start -->", "<!-- table-commit:end -->")
PACED = Section("<!-- paced:start -->", "<!-- paced:end -->")
PACED_SHARED = Section("<!-- paced-shared:start -->", "<!-- paced-shared:end -->")
CONNECT = Section("<!-- connect:start -->", "<!-- connect:end -->")
REDECODE = Section("<!-- redecode:start -->", "<!-- redecode:end -->")
LINEAGE = Section("<!-- lineage:start -->", "<!-- lineage:end -->")
HISTORY = Section("<!-- history:start -->", "<!-- history:end -->")
RELIABILITY_PLACEHOLDER = "## Reliability (make chaos)\n\nNot measured yet: `make chaos` writes this table."


def replace_section(text: str, section: Section, body: str, before: Section | None = None) -> str:
    """``text`` with ``section`` holding ``body``; a missing section is added before the section ``before``, or else at the end."""
    where = section.span(text)
    if where is not None:
        return text[: where[0]] + section.block(body) + text[where[1] :]
    following = before.span(text) if before else None
    at = following[0] if following else len(text)
    return text[:at].rstrip("\n") + "\n\n" + section.block(body) + ("\n" + text[at:] if following else "")


def render(existing: str, generated: str) -> str:
    """``existing`` with its bench section replaced by ``generated``; a reliability section is kept as it is, or added empty."""
    text = replace_section(existing or TITLE, BENCH, generated, before=RELIABILITY)
    if RELIABILITY.span(text) is None:
        text = replace_section(text, RELIABILITY, RELIABILITY_PLACEHOLDER)
    return text


def _rewrite(path: Path, edit: Callable[[str], str]) -> None:
    """Read the file (a title only if it is missing or empty), edit its text, write it back."""
    path.write_text(edit((path.read_text() if path.exists() else "") or TITLE))


def write(path: Path, generated: str) -> None:
    """`make bench`: the bench section becomes ``generated``."""
    _rewrite(path, lambda text: render(text, generated))


def write_section(path: Path, section: Section, make_body: Callable[[str], str]) -> None:
    """A section becomes ``make_body(its current body)``: a writer that keeps a history (the reliability runs) reads it first."""
    _rewrite(path, lambda text: replace_section(text, section, make_body(section.body(text))))
