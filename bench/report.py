"""BENCHMARKS.md: replace the generated block, keep every other line, and the reliability block verbatim."""

from __future__ import annotations

from pathlib import Path

BENCH_START, BENCH_END = "<!-- bench:start -->", "<!-- bench:end -->"
RELIABILITY_START, RELIABILITY_END = "<!-- reliability:start -->", "<!-- reliability:end -->"
RELIABILITY_PLACEHOLDER = (
    f"{RELIABILITY_START}\n## Reliability (make chaos)\n\nNot measured yet: `make chaos` writes this table.\n{RELIABILITY_END}\n"
)
TITLE = "# Benchmarks\n"


def _block(text: str, start: str, end: str) -> tuple[int, int] | None:
    """Where the block from the line ``start`` to the line ``end`` (both included) lies in ``text``."""
    a = text.find(start + "\n")
    if a < 0:
        return None
    b = text.find(end, a)
    if b < 0:
        raise ValueError(f"BENCHMARKS.md has {start} without {end}: fix the file by hand rather than lose what is in it")
    return a, b + len(end) + (1 if text[b + len(end) : b + len(end) + 1] == "\n" else 0)


def render(existing: str, generated: str) -> str:
    """``existing`` with its bench block replaced by ``generated``; a reliability block is kept as it is, or added empty."""
    text = existing or TITLE
    block = f"{BENCH_START}\n{generated.rstrip()}\n{BENCH_END}\n"
    where = _block(text, BENCH_START, BENCH_END)
    if where is None:
        reliability = _block(text, RELIABILITY_START, RELIABILITY_END)
        at = reliability[0] if reliability else len(text)
        head = text[:at].rstrip("\n") + "\n\n"
        text = head + block + ("\n" + text[at:] if reliability else "")
    else:
        text = text[: where[0]] + block + text[where[1] :]
    if _block(text, RELIABILITY_START, RELIABILITY_END) is None:
        text = text.rstrip("\n") + "\n\n" + RELIABILITY_PLACEHOLDER
    return text


def write(path: Path, generated: str) -> None:
    path.write_text(render(path.read_text() if path.exists() else "", generated))
