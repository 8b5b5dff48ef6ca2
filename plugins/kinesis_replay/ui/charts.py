"""Small charts as inline SVG, drawn on the server: no JavaScript, no build step, nothing fetched by the browser.

Each mark carries its number in ``data-value`` (and its batch in ``data-batch``) and a ``<title>`` that the browser
shows on hover, so a reader, a screen reader and a test all see the figures the chart was drawn from.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

WIDTH, HEIGHT = 640, 120  # the plot area's viewBox size; the SVG scales to the page's width
LEFT, RIGHT, BOTTOM, TOP = 64, 8, 18, 8  # room for the y axis's labels, the last dot, the x axis's labels, the top label


@dataclass(frozen=True)
class Mark:
    """One value: a batch's figure, or a plan's measurement at a time."""

    batch_id: int
    value: float
    title: str  # what the browser shows on hover
    at: datetime | None = None  # for charts over time


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _frame(kind: str, label: str, top: str, bottom: str, left: str, right: str, body: str) -> str:
    """The SVG around a plot: its label, the largest value at the top left, the x range below."""
    w, h = LEFT + WIDTH + RIGHT, TOP + HEIGHT + BOTTOM
    return (
        f'<figure class="chart chart-{_e(kind)}"><figcaption>{_e(label)}</figcaption>'
        f'<svg role="img" aria-label="{_e(label)}" viewBox="0 0 {w} {h}" preserveAspectRatio="xMinYMin meet" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<line class="axis" x1="{LEFT}" y1="{TOP + HEIGHT}" x2="{LEFT + WIDTH}" y2="{TOP + HEIGHT}"/>'
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + HEIGHT}"/>'
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{_e(top)}</text>'
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + HEIGHT}" text-anchor="end">{_e(bottom)}</text>'
        f'<text class="tick" x="{LEFT}" y="{h - 2}">{_e(left)}</text>'
        f'<text class="tick" x="{LEFT + WIDTH}" y="{h - 2}" text-anchor="end">{_e(right)}</text>'
        f"{body}</svg></figure>"
    )


def _mark_attrs(m: Mark) -> str:
    return f'data-batch="{m.batch_id}" data-value="{_e(_number(m.value))}"'


def _number(value: float) -> str:
    """A value as data-value holds it: an integer where it is one, else three decimals."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def bars(kind: str, label: str, marks: Sequence[Mark], fmt: Callable[[float], str]) -> str:
    """One bar per batch, oldest on the left, all on one scale from zero."""
    if not marks:
        return f'<figure class="chart chart-{_e(kind)} empty"><figcaption>{_e(label)}: no batch yet</figcaption></figure>'
    top = max(max(m.value for m in marks), 1e-9)
    slot = WIDTH / len(marks)
    width = max(1.0, slot * 0.8)
    body = []
    for i, m in enumerate(marks):
        height = HEIGHT * m.value / top
        x, y = LEFT + i * slot + (slot - width) / 2, TOP + HEIGHT - height
        body.append(
            f'<rect class="mark" {_mark_attrs(m)} x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}">'
            f"<title>{_e(m.title)}</title></rect>"
        )
    return _frame(kind, label, fmt(top), "0", f"batch {marks[0].batch_id}", f"batch {marks[-1].batch_id}", "".join(body))


def line(kind: str, label: str, marks: Sequence[Mark], fmt: Callable[[float], str]) -> str:
    """A line over time (each mark's ``at``), a dot at each measurement, on one scale from zero."""
    timed = sorted((m for m in marks if m.at is not None), key=lambda m: (m.at, m.batch_id))
    if not timed:
        return f'<figure class="chart chart-{_e(kind)} empty"><figcaption>{_e(label)}: no measurement yet</figcaption></figure>'
    first, last = timed[0].at, timed[-1].at
    assert first is not None and last is not None
    span = max((last - first).total_seconds(), 1e-9)
    top = max(max(m.value for m in timed), 1e-9)
    points, dots = [], []
    for m in timed:
        assert m.at is not None
        x = LEFT + (WIDTH * (m.at - first).total_seconds() / span if len(timed) > 1 else WIDTH / 2)
        y = TOP + HEIGHT - HEIGHT * m.value / top
        points.append(f"{x:.1f},{y:.1f}")
        dots.append(f'<circle class="mark" {_mark_attrs(m)} cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{_e(m.title)}</title></circle>')
    path = f'<polyline class="series" fill="none" points="{" ".join(points)}"/>'
    when = "%Y-%m-%d %H:%M"
    return _frame(kind, label, fmt(top), fmt(0), first.strftime(when), last.strftime(when), path + "".join(dots))
