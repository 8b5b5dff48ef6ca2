"""`make bench-table`: what a batch's table commit costs at the 10th and at the 1,000th batch of a table.

Every commit adds a snapshot, and Iceberg's metadata holds every snapshot until expiry removes it, so a commit
could grow with the table's history. This commits BATCHES batches of FILES Parquet files each (a 4-shard
stream's batch) through the project's own commit (``iceberg_table.commit_snapshot``) to a table on the embedded SQL
catalog, and times, around the 10th and the last batch:

- a first commit of a batch (add its files), as the pipeline's commit does, two ways side by side, alternating:
  patched (``pyiceberg_patches``: the transaction's metadata computed once per staged change, and neither it nor the
  catalog's deep-copying the whole metadata) and unpatched, on pyiceberg's own commit path, the one the patches' guard
  falls back to (``pyiceberg_patches.unpatched()``, the same catalog and process);
- a replay of an old batch (replace its files in one snapshot), as a backfill does;
- after the last batch, first commits with the whole history, then as many once the history is cut to its newest
  10 snapshots (what snapshot expiry does), to tell the cost of the history from the cost of the data.

Between the timed windows, batches are committed the project's way, so the table grows as a pipeline's does.
The target, at most ``MS_A_SNAPSHOT`` a snapshot kept, is checked side by side: twice ``width`` commits with the whole
history right after the last batch, then as many once the history is cut, seconds apart on the same data, their
medians' difference over the difference in snapshots kept. Every first commit the project's way is also timed
from the 10th batch's window to the last one's, for a least-squares line across the run, which on a shared
machine follows the load as well. Writes BENCHMARKS.md's table-commit section.

    python bench/table_commit.py --batches 1000
"""

# Markdown table rows are long lines, and the prose uses typographic signs on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "bench")]

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import report  # noqa: E402

from kinesis_replay.adapters import iceberg_table, pyiceberg_patches, table_maintenance  # noqa: E402
from kinesis_replay.adapters.layout import data_path  # noqa: E402
from kinesis_replay.core.config import PipelineConfig, parse_config  # noqa: E402

MS_A_SNAPSHOT = 0.05  # target: each snapshot the table keeps adds at most this much to a commit (ms)
ROWS_PER_FILE = 100
KEEP_AFTER_EXPIRY = 10

SCHEMA = pa.schema(
    [
        ("stream_name", pa.string()),
        ("shard_id", pa.string()),
        ("sequence_number", pa.string()),
        ("sub_sequence_number", pa.int64()),
        ("partition_key", pa.string()),
        ("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC")),
        ("data", pa.binary()),
        ("decode_error", pa.string()),
        ("batch_id", pa.int64()),
    ]
)


def bench_pipeline(output: Path) -> PipelineConfig:
    entry = {
        "name": "bench", "stream": "bench-stream", "output": str(output), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-bench", "spark": {"master": "local[1]"}, "table": {"name": "bench"},
    }  # fmt: skip
    (pipeline,) = parse_config({"pipelines": [entry]})
    return pipeline


def write_files(pipeline: PipelineConfig, batch_id: int, attempt: str, files: int) -> list[str]:
    """One attempt of a batch, as the replay job writes it: one Parquet file per shard, sorted by arrival."""
    folder = Path(data_path(pipeline.output, batch_id, attempt))
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=5 * batch_id)
    paths = []
    for shard in range(files):
        n = ROWS_PER_FILE
        rows = pa.table(
            {
                "stream_name": ["bench-stream"] * n,
                "shard_id": [f"shardId-{shard:012d}"] * n,
                "sequence_number": [str(batch_id * 10**6 + i) for i in range(n)],
                "sub_sequence_number": [0] * n,
                "partition_key": [str(i) for i in range(n)],
                "approximate_arrival_timestamp": [start + timedelta(milliseconds=i) for i in range(n)],
                "data": [b"x" * 64] * n,
                "decode_error": pa.nulls(n, pa.string()),
                "batch_id": [batch_id] * n,
            },
            schema=SCHEMA,
        )
        path = folder / f"part-{shard:05d}.parquet"
        pq.write_table(rows, path)
        paths.append(str(path))
    return paths


@dataclass
class Bench:
    pipeline: PipelineConfig
    files: int
    catalog: Any  # the project's (iceberg_table.load_catalog): patched, and pyiceberg's own inside unpatched()
    times: dict[str, list[float]] = field(default_factory=dict)
    replays: int = 0
    pyiceberg_commit: bool = False  # commit on pyiceberg's own path (pyiceberg_patches.unpatched())
    snapshots: int = 0  # the table's: each commit adds one (checked against the table's own count at the end)
    first_commits: list[tuple[int, int, float]] = field(default_factory=list)  # the project's: batch, snapshots kept, seconds
    cpu: dict[str, list[float]] = field(default_factory=dict)  # this process's CPU seconds in each timed commit, by label
    last_cpu: float = 0.0

    def commit(self, batch_id: int, attempt: str = "a") -> float:
        paths = write_files(self.pipeline, batch_id, attempt, self.files)
        t0, cpu0 = time.perf_counter(), time.process_time()
        iceberg_table.commit_snapshot(self.pipeline, batch_id, attempt, paths, run_id=f"bench-{batch_id}", catalog=self.catalog)
        seconds, self.last_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if attempt == "a" and not self.pyiceberg_commit:
            self.first_commits.append((batch_id, self.snapshots, seconds))
        self.snapshots += 1
        return seconds

    def timed(self, label: str, batch_id: int, attempt: str = "a") -> None:
        self.times.setdefault(label, []).append(self.commit(batch_id, attempt))
        self.cpu.setdefault(label, []).append(self.last_cpu)

    def replay(self, label: str, old_batch: int) -> None:
        self.replays += 1
        self.timed(label, old_batch, attempt=f"r{self.replays}")


def with_pyiceberg_commit(b: Bench, f: Callable[[], None]) -> None:
    """Runs ``f`` with the commit on pyiceberg's own path, as it runs where the patches' guard does not patch it."""
    b.pyiceberg_commit = True
    try:
        with pyiceberg_patches.unpatched():
            f()
    finally:
        b.pyiceberg_commit = False


def window(b: Bench, at: int, width: int, tag: str) -> int:
    """Commits batches up to ``at``, the last ``width`` of them timed both ways in alternation; returns ``at``."""
    for batch_id in range(at - width + 1, at + 1):
        if (batch_id - at) % 2:
            b.timed(f"{tag} project", batch_id)
        else:
            with_pyiceberg_commit(b, partial(b.timed, f"{tag} pyiceberg", batch_id))
    for _ in range(max(1, width // 2)):
        b.replay(f"{tag} replay", old_batch=at // 2)
    return at


def time_metadata_file(b: Bench, label: str, repeats: int = 9) -> None:
    """pyiceberg's parse of the table's current metadata file, then its write, timed alone (no commit around them):
    what any commit through pyiceberg pays at least once each, since it loads the table and writes the next file whole."""
    from pyiceberg.table.metadata import TableMetadataUtil

    table = iceberg_table.load_table(b.pipeline, b.catalog)
    assert table is not None
    raw = Path(table.metadata_location.removeprefix("file://")).read_bytes()
    for _ in range(repeats):
        t0 = time.perf_counter()
        TableMetadataUtil.parse_raw(raw).model_dump_json()
        b.times.setdefault(label, []).append(time.perf_counter() - t0)


def run(batches: int, files: int, width: int, progress: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kr-bench-table-") as tmp:
        pipeline = bench_pipeline(Path(tmp) / "out")
        b = Bench(pipeline, files, iceberg_table.load_catalog(pipeline))
        started = time.perf_counter()
        for batch_id in range(1, 10 - width + 1):
            b.commit(batch_id)
        window(b, 10, width, "10th")
        time_metadata_file(b, "10th metadata file")
        for batch_id in range(11, batches - width + 1):
            seconds = b.commit(batch_id)
            if batch_id % 100 == 0:
                progress(f"batch {batch_id}: commit {seconds:.3f} s")
        window(b, batches, width, "last")
        time_metadata_file(b, "last metadata file")
        table = iceberg_table.load_table(pipeline, b.catalog)
        assert table is not None
        history = len(table.metadata.snapshots)
        if history != b.snapshots:
            raise RuntimeError(f"the table holds {history} snapshots, not the {b.snapshots} its commits were counted to add")
        metadata_bytes = os.path.getsize(table.metadata_location.removeprefix("file://"))
        first_timed = 10 - width + 1
        points = [point for point in b.first_commits if first_timed <= point[0] <= batches]
        # Side by side, seconds apart: commits with the whole history, then as many once it is cut, on the same data.
        side = 2 * width
        for batch_id in range(batches + 1, batches + side + 1):
            b.timed("before cut project", batch_id)
        policy = table_maintenance.Policy(max_snapshot_age=timedelta(0), min_snapshots_to_keep=KEEP_AFTER_EXPIRY)
        table_maintenance.expire_snapshots(table, policy, datetime.now(UTC))
        cut = iceberg_table.load_table(pipeline, b.catalog)
        assert cut is not None
        b.snapshots = len(cut.metadata.snapshots)
        for batch_id in range(batches + side + 1, batches + 2 * side + 1):
            b.timed("expired project", batch_id)
        before_cut = [(kept, seconds) for batch_id, kept, seconds in b.first_commits if batches < batch_id <= batches + side]
        after_cut = [(kept, seconds) for batch_id, kept, seconds in b.first_commits if batch_id > batches + side]
        return {
            "batches": batches,
            "files": files,
            "width": width,
            "history": history,
            "metadata_bytes": metadata_bytes,
            "seconds": time.perf_counter() - started,
            "times": b.times,
            "points": points,
            "before_cut": before_cut,
            "cpu": b.cpu,
            "after_cut": after_cut,
            "machine": f"{platform.python_version()}, pyiceberg {importlib.metadata.version('pyiceberg')}, {os.cpu_count()} cores",
            "load": os.getloadavg()[0],
        }


def med(xs: list[float]) -> float:
    return statistics.median(xs)


@dataclass(frozen=True)
class Fit:
    """A commit's time against the snapshots the table kept when it began: least squares over every measured commit."""

    ms_a_snapshot: float  # the slope
    ms_at_none: float  # the intercept
    standard_error: float  # the slope's, ms a snapshot
    commits: int
    fewest: int  # snapshots kept, over the commits fitted
    most: int

    @classmethod
    def of(cls, points: list[tuple[int, float]]) -> Fit:
        xs, ys = [float(x) for x, _ in points], [y * 1000 for _, y in points]
        slope, intercept = statistics.linear_regression(xs, ys)
        mean = statistics.fmean(xs)
        residuals = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
        spread = sum((x - mean) ** 2 for x in xs)
        error = (residuals / (len(xs) - 2) / spread) ** 0.5 if len(xs) > 2 and spread else float("inf")
        return cls(slope, intercept, error, len(xs), min(points)[0], max(points)[0])


@dataclass(frozen=True)
class SideBySide:
    """Commits with the whole history against commits seconds later with the history cut: what a kept snapshot adds."""

    before_ms: float  # medians
    after_ms: float
    kept_before: float
    kept_after: float

    @classmethod
    def of(cls, before: list[tuple[int, float]], after: list[tuple[int, float]]) -> SideBySide:
        return cls(
            med([s * 1000 for _, s in before]), med([s * 1000 for _, s in after]),
            med([float(k) for k, _ in before]), med([float(k) for k, _ in after]),
        )  # fmt: skip

    @property
    def ms_a_snapshot(self) -> float:
        return (self.before_ms - self.after_ms) / (self.kept_before - self.kept_after)


def spread_ms(points: list[tuple[int, float]]) -> str:
    ms = [s * 1000 for _, s in points]
    return f"{med(ms):.1f} ({min(ms):.1f} to {max(ms):.1f})"


def by_hundreds(points: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
    """The commits' median time (ms) for each hundred snapshots kept: the fewest kept, the most, the median."""
    groups: dict[int, list[tuple[int, float]]] = {}
    for kept, seconds in points:
        groups.setdefault(kept // 100, []).append((kept, seconds * 1000))
    return [(min(g)[0], max(g)[0], med([ms for _, ms in g])) for _, g in sorted(groups.items())]


def render(r: dict[str, Any]) -> str:
    t, n = r["times"], r["batches"]
    points = [(kept, seconds) for _, kept, seconds in r["points"]]
    fit = Fit.of(points)
    ten, last = med(t["10th project"]), med(t["last project"])
    ten_own, last_own = med(t["10th pyiceberg"]), med(t["last pyiceberg"])

    def kept_at(at: int) -> float:  # the snapshots kept by the window's commits timed the project's way (their median)
        return med([kept for batch_id, kept, _ in r["points"] if at - r["width"] < batch_id <= at])

    kept_10th, kept_last = kept_at(10), kept_at(n)
    two_points = (last - ten) / (kept_last - kept_10th) * 1000
    parse_write = (med(t["last metadata file"]) - med(t["10th metadata file"])) / (kept_last - kept_10th) * 1000
    side = SideBySide.of(r["before_cut"], r["after_cut"])
    cpu_before, cpu_after = med(r["cpu"]["before cut project"]), med(r["cpu"]["expired project"])
    cpu_a_snapshot = (cpu_before - cpu_after) * 1000 / (side.kept_before - side.kept_after)
    lines = [
        f"## The table commit at the 10th and the {n:,}th batch (make bench-table)",
        "",
        f"One table on the embedded SQL catalog, {n:,} batches of {r['files']} Parquet files ({ROWS_PER_FILE} rows each), "
        f"each committed by `iceberg_table.commit_snapshot` as the pipeline commits; medians of {r['width']} commits around "
        f"the 10th and the {n:,}th batch, patched (`pyiceberg_patches`) and unpatched (pyiceberg's own commit path) alternating. At the {n:,}th batch the table held "
        f"{r['history']:,} snapshots and a metadata file of {r['metadata_bytes'] / 2**20:.1f} MiB. {r['seconds'] / 60:.1f} minutes "
        f"on {r['machine']}, 1-minute load average {r['load']:.1f} at the end.",
        "",
        f"| commit | 10th batch | {n:,}th batch | ratio |",
        "|---|---|---|---|",
    ]

    def row(name: str, a: str, b: str) -> None:
        x, y = med(t[a]), med(t[b])
        lines.append(f"| {name} | {x:.3f} s | {y:.3f} s | {y / x:.1f}× |")

    row("first commit of a batch, patched (`pyiceberg_patches`)", "10th project", "last project")
    row("first commit of a batch, unpatched (pyiceberg's own commit path, the guard's fallback)", "10th pyiceberg", "last pyiceberg")
    lines.append(f"| first commit of a batch: patched / unpatched | {ten / ten_own:.2f}× | {last / last_own:.2f}× | |")
    row("replay of an old batch (replace its files), patched", "10th replay", "last replay")
    row("pyiceberg 0.12 alone: parse the metadata file, then write it (no commit)", "10th metadata file", "last metadata file")
    lines.append(
        f"| first commit, patched, history cut by snapshot expiry (the newest {KEEP_AFTER_EXPIRY} kept at least) | {ten:.3f} s | {med(t['expired project']):.3f} s | {med(t['expired project']) / ten:.1f}× |"
    )
    lines += [
        "",
        f"Patched, a first commit took {ten / ten_own:.2f}× the unpatched one's time at the 10th batch and {last / last_own:.2f}× "
        f"at the {n:,}th: unpatched, the same commit of the same table took {last_own / last:.1f} times as long, which is what "
        "every commit costs where the patches' guard falls back (a pyiceberg it does not recognize). Both ways ran in one "
        "process, alternating. The figures below are the patched commit's.",
        "",
        f"Side by side, right after the {n:,}th batch, seconds apart on the same data: {len(r['before_cut'])} first commits with "
        f"the whole history, then {len(r['after_cut'])} once snapshot expiry had cut it to {min(r['after_cut'])[0]} snapshots "
        f"(its policy: the newest {KEEP_AFTER_EXPIRY} at least).",
        "",
        "| first commit | snapshots kept (median) | commit, ms: median (min to max) | the commit's own CPU, ms: median |",
        "|---|---|---|---|",
        f"| with the whole history | {side.kept_before:,.0f} | {spread_ms(r['before_cut'])} | {cpu_before * 1000:.1f} |",
        f"| history cut | {side.kept_after:,.0f} | {spread_ms(r['after_cut'])} | {cpu_after * 1000:.1f} |",
    ]
    cut = med(t["expired project"])
    lines += [
        "",
        f"Target: each snapshot the table keeps adds at most {MS_A_SNAPSHOT} ms to a commit: "
        f"{report_verdict(side.ms_a_snapshot <= MS_A_SNAPSHOT)} ({side.ms_a_snapshot:.3f} ms a snapshot). The figure is the "
        f"side-by-side one above: the two medians' difference over the snapshots between them, "
        f"({side.before_ms:.1f} − {side.after_ms:.1f}) ms over {side.kept_before - side.kept_after:,.0f} snapshots. The two "
        "sets of commits differ in the history they keep and in nothing else, and ran within seconds of each other, so "
        "the machine's load (shared with others' work) is about the same for both; by the commits' own CPU time (this "
        f"process's, which what else runs on the cores stretches less), each kept snapshot adds {cpu_a_snapshot:.3f} ms. Across the whole run, a least-squares "
        f"line through all {fit.commits:,} first commits made patched, from the 10th batch's window to the "
        f"{n:,}th's ({fit.fewest:,} to {fit.most:,} snapshots kept), against the snapshots kept gives "
        f"{fit.ms_a_snapshot:.3f} ms a snapshot (standard error {fit.standard_error:.3f}), and the medians at the two ends "
        f"alone ({last * 1000:.1f} − {ten * 1000:.1f}) ms over {kept_last - kept_10th:,.0f} snapshots, {two_points:.3f} ms; "
        f"neither is the target's figure: they count the data's growth as the history's, and over the run's "
        f"{r['seconds'] / 60:.1f} minutes they follow the load as it changed as well (the medians by hundreds below).",
        "",
        "The commits' median time for each hundred snapshots kept, across the run:",
        "",
        "| snapshots kept | " + " | ".join(f"{a:,}–{b:,}" for a, b, _ in by_hundreds(points)) + " |",
        "|---|" + "---|" * len(by_hundreds(points)),
        "| commit, ms | " + " | ".join(f"{ms:.1f}" for _, _, ms in by_hundreds(points)) + " |",
        "",
        "What grows is the history the table keeps: seconds apart on the same data, a commit with the history cut to "
        f"{min(r['after_cut'])[0]} snapshots takes {side.after_ms / side.before_ms:.2f}× one with it whole; against the 10th "
        f"batch's, minutes earlier under another load, {cut / ten:.1f}×. pyiceberg 0.12's own "
        "commit deep-copies the whole "
        "table metadata, every snapshot's summary included, each time its transaction reads it (about 17 times a commit) "
        "and once more in the catalog's commit, and parses the metadata file twice (the table's load, then the catalog's "
        "check that it is still current). The patched commit computes the transaction's metadata once per staged "
        "change, stages the catalog's without the copy (`pyiceberg_patches.updated_metadata`, for every catalog that "
        "computes it itself: SQL, Glue, Hive, DynamoDB), and lets the catalog's check reuse the parse when its pointer "
        "still names the file the load parsed. The patches are applied only on the pyiceberg they were written for: at "
        "import, `pyiceberg_patches` checks its version and the shape of everything they replace or call, and on any "
        "mismatch applies none, logs a warning, and every commit takes pyiceberg's own path, the unpatched figures above. "
        "The tables merge their manifests (`commit.manifest-merge.enabled`), so that the "
        "manifest list stays under 100 entries however many batches the table holds. What is left grows with the "
        "snapshots kept, and every Iceberg writer pays it: a commit parses the current metadata file once and writes the "
        f"next one whole ({r['metadata_bytes'] / 2**20:.1f} MiB at {r['history']:,} snapshots). pyiceberg's parse and write "
        f"of that file alone, with no commit around them, grow by {parse_write:.3f} ms a snapshot "
        f"({med(t['10th metadata file']):.3f} s at the 10th batch, {med(t['last metadata file']):.3f} s at the {n:,}th): "
        "the floor for any commit through pyiceberg, which builds each snapshot's summary in Python (its `Summary` "
        "model's `__init__` and serializer) on each parse and write; 0.12.0 is its newest release. Snapshot expiry bounds "
        'the history: `history.expire.max-snapshot-age-ms` bounds the snapshots kept (see docs/table.md, "Maintaining the '
        'table"): at a 5-minute schedule the default 5 days keep 1,440 snapshots, one day 288.',
        "",
        "A replay of an old batch (a backfill) grows more, and cutting the history does not explain it. Profiled at the "
        "1,000th batch, three quarters of it is pyiceberg rewriting the manifests that hold the replaced files (a merged "
        "manifest holds the files of many batches, read and written entry by entry), and most of the rest reading the "
        "manifests twice (the batch's files, then the entries to delete). A backfill is rare; the target is the regular "
        "commit's.",
    ]
    return "\n".join(lines)


def report_verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--files", type=int, default=4, help="Parquet files per batch (one per shard)")
    parser.add_argument("--width", type=int, default=6, help="commits timed around each point, half each way")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    logging.getLogger("kinesis_replay").setLevel(logging.WARNING)  # one line per commit otherwise
    if args.batches < 20 or args.width < 2:
        parser.error("--batches must be at least 20 and --width at least 2")
    if not pyiceberg_patches.PATCHED:  # both ways would be pyiceberg's own path, and the section would call one patched
        sys.exit(f"bench/table_commit.py: pyiceberg's commit path is not patched here ({pyiceberg_patches.why_not}): nothing to compare")
    results = run(args.batches, args.files, args.width, lambda line: print(line, flush=True))
    body = render(results)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.TABLE_COMMIT, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
