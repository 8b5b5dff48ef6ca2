"""`make bench-table`: what a batch's table commit costs at the 10th and at the 1,000th batch of a table.

Every commit adds a snapshot, and Iceberg's metadata holds every snapshot until expiry removes it, so a commit
could grow with the table's history. This commits BATCHES batches of FILES Parquet files each (a 4-shard
stream's batch) through the project's own commit (``iceberg_table.commit_snapshot``) to a table on the embedded SQL
catalog, and times, around the 10th and the last batch:

- a first commit of a batch (add its files), as the pipeline's commit does, two ways side by side, alternating:
  the project's commit (its transaction's metadata computed once per staged change, and neither it nor the catalog's
  deep-copying the whole metadata) and pyiceberg 0.12's own transaction and catalog;
- a replay of an old batch (replace its files in one snapshot), as a backfill does;
- after the last batch, a first commit again once the history is cut to its newest 10 snapshots (what snapshot
  expiry does), to tell the cost of the history from the cost of the data.

Between the timed windows, batches are committed the project's way, so the table grows as a pipeline's does.
Writes BENCHMARKS.md's table-commit section.

    python bench/table_commit.py --batches 1000
"""

# Markdown table rows are long lines, and the prose uses typographic signs on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import argparse
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
from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog  # noqa: E402

from kinesis_replay.adapters import iceberg_table, table_maintenance  # noqa: E402
from kinesis_replay.adapters.layout import data_path  # noqa: E402
from kinesis_replay.core.config import PipelineConfig, parse_config  # noqa: E402

TARGET = 2.0  # the 1,000th batch's commit at most twice the 10th's
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


def pipeline(output: Path) -> PipelineConfig:
    entry = {
        "name": "bench", "stream": "bench-stream", "output": str(output), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-bench", "spark": {"master": "local[1]"}, "table": {"name": "bench"},
    }  # fmt: skip
    (p,) = parse_config({"pipelines": [entry]})
    return p


def write_files(p: PipelineConfig, batch_id: int, attempt: str, files: int) -> list[str]:
    """One attempt of a batch, as the replay job writes it: one Parquet file per shard, sorted by arrival."""
    folder = Path(data_path(p.output, batch_id, attempt))
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
    p: PipelineConfig
    files: int
    catalog: Any  # the project's (iceberg_table.load_catalog)
    pyiceberg_catalog: Any  # the same catalog as pyiceberg loads it
    times: dict[str, list[float]] = field(default_factory=dict)
    replays: int = 0
    pyiceberg_commit: bool = False  # commit with pyiceberg's own transaction and catalog

    def commit(self, batch_id: int, attempt: str = "a") -> float:
        paths = write_files(self.p, batch_id, attempt, self.files)
        catalog = self.pyiceberg_catalog if self.pyiceberg_commit else self.catalog
        t0 = time.perf_counter()
        iceberg_table.commit_snapshot(self.p, batch_id, attempt, paths, run_id=f"bench-{batch_id}", catalog=catalog)
        return time.perf_counter() - t0

    def timed(self, label: str, batch_id: int, attempt: str = "a") -> None:
        self.times.setdefault(label, []).append(self.commit(batch_id, attempt))

    def replay(self, label: str, old_batch: int) -> None:
        self.replays += 1
        self.timed(label, old_batch, attempt=f"r{self.replays}")


def with_pyiceberg_commit(b: Bench, f: Callable[[], None]) -> None:
    """Runs ``f`` with the commit on pyiceberg 0.12's own Transaction and catalog, for comparison."""
    project = iceberg_table.transaction
    iceberg_table.transaction = lambda table: table.transaction()  # type: ignore[assignment]
    b.pyiceberg_commit = True
    try:
        f()
    finally:
        iceberg_table.transaction = project  # type: ignore[assignment]
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

    table = iceberg_table.load_table(b.p, b.catalog)
    assert table is not None
    raw = Path(table.metadata_location.removeprefix("file://")).read_bytes()
    for _ in range(repeats):
        t0 = time.perf_counter()
        TableMetadataUtil.parse_raw(raw).model_dump_json()
        b.times.setdefault(label, []).append(time.perf_counter() - t0)


def run(batches: int, files: int, width: int, progress: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kr-bench-table-") as tmp:
        p = pipeline(Path(tmp) / "out")
        catalog = iceberg_table.load_catalog(p)
        b = Bench(p, files, catalog, pyiceberg_load_catalog(p.table.catalog, **catalog.properties))  # type: ignore[union-attr]
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
        table = iceberg_table.load_table(p, b.catalog)
        assert table is not None
        history = len(table.metadata.snapshots)
        metadata_bytes = os.path.getsize(table.metadata_location.removeprefix("file://"))
        policy = table_maintenance.Policy(max_snapshot_age=timedelta(0), min_snapshots_to_keep=KEEP_AFTER_EXPIRY)
        table_maintenance.expire_snapshots(table, policy, datetime.now(UTC))
        for batch_id in range(batches + 1, batches + width + 1):
            b.timed("expired project", batch_id)
        return {
            "batches": batches,
            "files": files,
            "width": width,
            "history": history,
            "metadata_bytes": metadata_bytes,
            "seconds": time.perf_counter() - started,
            "times": b.times,
            "machine": f"{platform.python_version()}, {os.cpu_count()} cores",
            "load": os.getloadavg()[0],
        }


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def render(r: dict[str, Any]) -> str:
    t, n = r["times"], r["batches"]
    ratio = med(t["last project"]) / med(t["10th project"])
    lines = [
        f"## The table commit at the 10th and the {n:,}th batch (make bench-table)",
        "",
        f"One table on the embedded SQL catalog, {n:,} batches of {r['files']} Parquet files ({ROWS_PER_FILE} rows each), "
        f"each committed by `iceberg_table.commit_snapshot` as the pipeline commits; medians of {r['width']} commits around "
        f"the 10th and the {n:,}th batch, the project's commit and pyiceberg's own alternating. At the {n:,}th batch the table held "
        f"{r['history']:,} snapshots and a metadata file of {r['metadata_bytes'] / 2**20:.1f} MiB. {r['seconds'] / 60:.1f} minutes "
        f"on {r['machine']}, 1-minute load average {r['load']:.1f} at the end.",
        "",
        f"| commit | 10th batch | {n:,}th batch | ratio |",
        "|---|---|---|---|",
    ]

    def row(name: str, a: str, b: str) -> None:
        x, y = med(t[a]), med(t[b])
        lines.append(f"| {name} | {x:.3f} s | {y:.3f} s | {y / x:.1f}× |")

    row("first commit of a batch (the project's commit)", "10th project", "last project")
    row("first commit of a batch (pyiceberg 0.12's transaction and catalog)", "10th pyiceberg", "last pyiceberg")
    row("replay of an old batch (replace its files)", "10th replay", "last replay")
    row("pyiceberg 0.12 alone: parse the metadata file, then write it (no commit)", "10th metadata file", "last metadata file")
    lines.append(
        f"| first commit, history cut to its newest {KEEP_AFTER_EXPIRY} snapshots | {med(t['10th project']):.3f} s | {med(t['expired project']):.3f} s | {med(t['expired project']) / med(t['10th project']):.1f}× |"
    )
    cut = med(t["expired project"])
    per_snapshot_ms = (med(t["last project"]) - cut) / max(1, r["history"] - KEEP_AFTER_EXPIRY) * 1000
    lines += [
        "",
        f"Target: the {n:,}th batch's commit at most {TARGET:.0f}× the 10th's: {report_verdict(ratio <= TARGET)} ({ratio:.1f}×).",
        "",
        "What grows is the history the table keeps, not the data: with the history cut to its newest "
        f"{KEEP_AFTER_EXPIRY} snapshots the {n:,}th batch's commit takes {cut / med(t['10th project']):.1f}× the 10th's, and each "
        f"snapshot kept adds about {per_snapshot_ms:.2f} ms to a commit. pyiceberg 0.12's own commit deep-copies the whole "
        "table metadata, every snapshot's summary included, each time its transaction reads it (about 17 times a commit) "
        "and once more in the catalog's commit, and parses the metadata file twice (the table's load, then the catalog's "
        "check that it is still current). The project's commit computes the transaction's metadata once per staged "
        "change, stages the catalog's without the copy (`iceberg_table.updated_metadata`, for every catalog that computes "
        "it itself: SQL, Glue, Hive, DynamoDB), and lets the catalog's check reuse the parse when its pointer still names "
        "the file the load parsed; the tables merge their manifests (`commit.manifest-merge.enabled`), so that the "
        "manifest list stays under 100 entries however many batches the table holds. What is left grows with the "
        "snapshots kept, and every Iceberg writer pays it: a commit parses the current metadata file once and writes the "
        f"next one whole ({r['metadata_bytes'] / 2**20:.1f} MiB at {r['history']:,} snapshots). Snapshot expiry bounds it: "
        '`history.expire.max-snapshot-age-ms` bounds the snapshots kept (see docs/table.md, "Maintaining the table"): at a '
        "5-minute schedule the default 5 days keep 1,440 snapshots, one day 288. On a machine of its own the commit's "
        "fixed cost is small (under 20 ms), so the ratio shows the history's share plainly.",
        "",
        f"Why the target is out of reach with pyiceberg: at the {n:,}th batch, pyiceberg's parse and write of the metadata "
        f"file alone, with no commit around them, take {med(t['last metadata file']):.3f} s, "
        f"{med(t['last metadata file']) / med(t['10th project']):.1f} times the 10th batch's whole commit "
        f"({med(t['10th project']):.3f} s). A commit through pyiceberg loads the table (one parse) and writes the next "
        "metadata file whole (one write), so the 1,000th commit costs at least the 10th's work less its own parse and "
        "write, plus those two: at least "
        f"{(med(t['10th project']) - med(t['10th metadata file']) + med(t['last metadata file'])) / med(t['10th project']):.1f}× "
        "the 10th's, before anything else that grows. pyiceberg builds each snapshot's summary in Python (its `Summary` model's "
        "`__init__` and serializer) on each parse and write; 0.12.0 is its newest release.",
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
    results = run(args.batches, args.files, args.width, lambda line: print(line, flush=True))
    body = render(results)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.TABLE_COMMIT, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
