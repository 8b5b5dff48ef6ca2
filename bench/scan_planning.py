"""A reader's scan planning on tables of 10,000 and 100,000 batches, one file a batch against several: what compaction
buys a reader, and whether batches also need merging across partitions (make bench-scan).

Each table is the pipeline's own (its schema, ``identity(batch_id)``, the embedded SQL catalog), its manifests listing
``files`` data files a batch. The files are manifest entries only (path, size, rows, the ``batch_id`` bounds): planning
reads manifests, never a data file, so none is written. The entries go in with fast appends of ``CHUNK`` batches each,
so the table has one manifest per chunk, each covering a run of batch ids, as merge-appending commits of consecutive
batches leave them. What is timed is ``table.scan(row_filter).plan_files()`` from a fresh load of the table, for the
newest day of one-minute batches (1,440) and for one batch, median of ``--repeats``, with this process's CPU time.

    python bench/scan_planning.py --batches 10000 100000 --files 1 2 16
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# ruff: noqa: E501, RUF001
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "bench")]

from report import Section, write_section  # noqa: E402

SECTION = Section("<!-- scan-planning:start -->", "<!-- scan-planning:end -->")
CHUNK = 1_000  # batches a fast append adds: a manifest each
DAY = 1_440  # one-minute batches a day
ROWS = 10_000  # rows a batch holds, and bytes a file: what the manifest entries say
FILE_BYTES = 4 * 1024 * 1024


def build(folder: Path, batches: int, files: int) -> Any:
    """The pipeline's table with ``batches`` batches of ``files`` manifest-only data files each."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.typedef import Record
    from pyiceberg.types import BinaryType, LongType, NestedField, StringType, TimestamptzType

    from kinesis_replay.core.records import PARTITION_COLUMN, ROW_COLUMNS

    catalog = SqlCatalog("bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}")
    catalog.create_namespace("bench")
    types = {"STRING": StringType(), "BIGINT": LongType(), "TIMESTAMP": TimestamptzType(), "BINARY": BinaryType()}
    columns = [*ROW_COLUMNS, (PARTITION_COLUMN, "BIGINT")]
    schema = Schema(*(NestedField(i, name, types[kind], required=False) for i, (name, kind) in enumerate(columns, start=1)))
    batch_field = schema.find_field(PARTITION_COLUMN)
    spec = PartitionSpec(PartitionField(batch_field.field_id, 1000, IdentityTransform(), PARTITION_COLUMN))
    table = catalog.create_table("bench.orders", schema=schema, partition_spec=spec, location=f"file://{folder}/orders")
    for low in range(1, batches + 1, CHUNK):
        with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
            for batch_id in range(low, min(batches, low + CHUNK - 1) + 1):
                bound = batch_id.to_bytes(8, "little", signed=True)
                for n in range(files):
                    append.append_data_file(DataFile.from_args(
                        content=DataFileContent.DATA,
                        file_path=f"file://{folder}/orders/data/batch_id={batch_id:010d}/attempt=a/part-{n:05d}.parquet",
                        file_format=FileFormat.PARQUET, partition=Record(batch_id), record_count=ROWS // files,
                        file_size_in_bytes=FILE_BYTES // files, lower_bounds={batch_field.field_id: bound},
                        upper_bounds={batch_field.field_id: bound}, spec_id=spec.spec_id,
                    ))  # fmt: skip
    return catalog


def plan(catalog: Any, row_filter: str, repeats: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds of planning the scan from a fresh load, and the files it plans."""
    walls, cpus, found = [], [], 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        found = len(list(catalog.load_table("bench.orders").scan(row_filter=row_filter).plan_files()))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--files", type=int, nargs="+", default=[1, 2, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--benchmarks", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    rows = []
    for batches in args.batches:
        for files in args.files:
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                catalog = build(Path(tmp), batches, files)
                built = time.perf_counter() - started
                day = plan(catalog, f"batch_id > {batches - DAY}", args.repeats)
                one = plan(catalog, f"batch_id = {batches - DAY}", args.repeats)
                whole = plan(catalog, "True", max(1, args.repeats // 2))
            rows.append((batches, files, day, one, whole, built))
            print(
                f"{batches} batches x {files} files: day {day[0]:.3f} s ({day[2]} files), one {one[0]:.3f} s, all {whole[0]:.2f} s",
                flush=True,
            )
    base = {b: day for b, f, day, *_ in rows if f == 1}
    lines = [
        f"Tables of the pipeline's schema partitioned by `identity(batch_id)`, their manifests listing each batch's data files (manifest entries only: planning reads no data file), added {CHUNK:,} batches a fast append (a manifest each). Timed: `scan(row_filter).plan_files()` from a fresh load, median of {args.repeats} (the whole table: of {max(1, args.repeats // 2)}). `{' '.join(['python bench/scan_planning.py', '--batches', *map(str, args.batches), '--files', *map(str, args.files)])}`; Python {platform.python_version()}, 2 cores shared with other work.",
        "",
        "| batches | files a batch | one day (1,440 batches): s (CPU s) | files planned | against one file a batch | one batch: s | the whole table: s |",
        "|---|---|---|---|---|---|---|",
    ]
    for batches, files, day, one, whole, _ in rows:
        ratio = day[1] / base[batches][1] if batches in base and base[batches][1] else float("nan")
        lines.append(f"| {batches:,} | {files} | {day[0]:.3f} ({day[1]:.3f}) | {day[2]:,} | {ratio:.2f}× | {one[0]:.3f} | {whole[0]:.2f} |")
    body = "\n".join(lines) + "\n"
    write_section(
        args.benchmarks, SECTION, lambda _: "## A reader's scan planning, one file a batch or several (make bench-scan)\n\n" + body
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
