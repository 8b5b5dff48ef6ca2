"""`make bench-redecode`: a re-decode of N committed batches beside a backfill of the same N batches (issue 46).

A backfill commits each replayed batch in a snapshot of its own, and its quarantined records in one more of the
quarantine table (steps/backfill.check_replayed). A re-decode stages each verified attempt in the ledger, then makes
the whole selection visible in one OVERWRITE snapshot of the table and one of the quarantine table
(steps/redecode.commit_redecoded). The target: that one commit costs at most twice one backfill commit (the mean of
the backfill's per-batch commits), and reads no more files than the whole backfill's commits.

Both ways run in one process on two tables built alike from one stream: the same batches, the same records (a few a
shard, one of them quarantined: the measure is the commit, not the read), committed the pipeline's way on the fakes the
unit tests use (an in-memory stream and state store, the replay without Spark, the embedded catalog), so that the two
starting tables differ only in their location (an Iceberg table cannot be copied: its metadata holds absolute paths).
Then, batch by batch, interleaved so that the machine's load falls on both alike: the backfill replays the batch and
checks and commits it (``check_replayed``); the re-decode replays it with a field added to payload.schema and checks
and stages it (``check_replayed(redecode=True)``); last, the re-decode's one ``commit_redecoded``.

Measured by wrapping the library's functions in this process (monkeypatch style, nothing in plugins/ changed): the
time (wall and this process's CPU) in the tables' commits (``commit.commit_to_table`` and ``commit.quarantine_to_table``
per batch for the backfill; ``iceberg_table.replace_batches`` and ``quarantine_table.commit`` in the re-decode's
``commit_redecoded``), the snapshots each table gained, and the files each phase opened to read: every pyiceberg read
(``PyArrowFile.open``: metadata files, manifest lists, manifests, the Parquet footers of the files it adds) and every
read of the library's own (``files.filesystem_of``'s file system: the data files verify and the decoded comparison
read). Writes BENCHMARKS.md's re-decode section.

    python bench/redecode.py --batches 100
"""

# Markdown table rows are long lines, and the prose uses typographic signs on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402
from pyarrow import fs as pafs  # noqa: E402

from fakes.memory_kinesis import ManualClock, MemoryKinesis  # noqa: E402
from fakes.memory_store import MemoryStateStore  # noqa: E402
from fakes.replay import replay, table_pipeline  # noqa: E402
from kinesis_replay.adapters import files, iceberg_table, pyiceberg_patches, quarantine_table  # noqa: E402
from kinesis_replay.core.config import PipelineConfig  # noqa: E402
from kinesis_replay.steps import backfill, commit, redecode  # noqa: E402
from kinesis_replay.steps.commit import commit_batch  # noqa: E402
from kinesis_replay.steps.plan import plan_batch  # noqa: E402
from kinesis_replay.steps.verify import verify_batch  # noqa: E402
from stack.producer import produce  # noqa: E402

RATIO_TARGET = 2.0  # the re-decode's one commit costs at most this many backfill commits of one batch
STREAM = "orders"
SHARDS = 4
SCHEMA = "index INT, user STRING"
ADDED = "index INT, user STRING, action STRING"  # a field added to payload.schema: a legal change of decoding
BAD_RECORD = b"not json"  # one a batch, quarantined by either decoding
T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
BACKFILL_RUN, REDECODE_RUN = "backfill-bench", "redecode-bench"


# -- what a phase read, and how long it took -------------------------------------------------------------------------


def kind_of(path: str) -> str:
    """What an opened file is, by its name: Iceberg's metadata, manifest lists and manifests, Parquet data, or other."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".metadata.json"):
        return "metadata files"
    if name.endswith(".avro"):
        return "manifest lists" if name.startswith("snap-") else "manifests"
    if name.endswith(".parquet"):
        return "quarantine Parquet" if "/quarantine/" in path else "table Parquet"
    return "other"


KINDS = ("table Parquet", "quarantine Parquet", "metadata files", "manifest lists", "manifests", "other")


@dataclass
class Measure:
    """One phase's calls: wall and CPU seconds of each, and the files its calls opened to read, by kind."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    opened: Counter[str] = field(default_factory=Counter)
    gc: float = 0.0  # CPU seconds of Python's garbage collections while the phase was open
    full_gcs: int = 0  # of them, full collections (the oldest generation)

    @property
    def files(self) -> int:
        return sum(self.opened.values())

    @property
    def parquet(self) -> int:
        return self.opened["table Parquet"] + self.opened["quarantine Parquet"]


class Meter:
    """Phases, nested: a file opened counts in every phase open at the time."""

    def __init__(self) -> None:
        self.phases: dict[str, Measure] = {}
        self._open: list[str] = []

    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        measure = self.phases.setdefault(label, Measure())
        self._open.append(label)
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            measure.wall.append(time.perf_counter() - t0)
            measure.cpu.append(time.process_time() - cpu0)
            self._open.pop()

    def collected(self, seconds: float, generation: int) -> None:
        for label in self._open:
            self.phases[label].gc += seconds
            self.phases[label].full_gcs += generation == 2

    def opened(self, path: str) -> None:
        kind = kind_of(path)
        for label in self._open:
            self.phases[label].opened[kind] += 1

    def __getitem__(self, label: str) -> Measure:
        return self.phases.get(label) or Measure()

    def commit_way(self) -> str | None:
        """The way ("backfill" or "re-decode") whose table commit is open, if one is."""
        for way, labels in COMMITS.items():
            if any(label in labels for label in self._open):
                return way
        return None


@contextlib.contextmanager
def patched(target: Any, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``target.name`` replaced by ``wrapper(the original)`` while the block runs."""
    original = getattr(target, name)
    setattr(target, name, wrapper(original))
    try:
        yield
    finally:
        setattr(target, name, original)


# The tables' commits of each way, and the steps inside them timed on their own (``iceberg_table``'s functions).
COMMITS = {
    "backfill": ("backfill table commit", "backfill quarantine commit"),
    "re-decode": ("re-decode table commit", "re-decode quarantine commit"),
}
STEPS = {
    "read_footers": "reading the added files' footers",
    "data_files": "making their DataFiles (statistics)",
    "batch_data_files": "finding the replaced files (scans)",
    "selection_data_files": "finding the replaced files (scans)",
    "write_snapshot": "writing the snapshot (manifests, summary)",
}


def within_commit(meter: Meter, step: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Timed as ``<way> commit: <step>`` inside a way's table commit, not timed elsewhere."""

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            way = meter.commit_way()
            if way is None:
                return original(*args, **kwargs)
            with meter.phase(f"{way} commit: {step}"):
                return original(*args, **kwargs)

        return call

    return wrap


def timed(meter: Meter, label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``original`` timed as the phase ``label``, after a collection: each commit, of either way, starts with no garbage
    of what ran before it, as a task's process does (each commit is a task of its own in a deployment), and its time
    holds the collections of what it allocates itself."""

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            gc.collect()
            with meter.phase(label):
                return original(*args, **kwargs)

        return call

    return wrap


class CountingHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """``inner`` (pyarrow's local file system), telling ``meter`` of each file opened to read; a pyarrow file system
    through ``pafs.PyFileSystem``, so that the library's dataset reads take it as they take the local one."""

    def __init__(self, meter: Meter, inner: Any) -> None:
        self.meter, self.inner = meter, inner

    def open_input_stream(self, path: str) -> Any:
        self.meter.opened(path)
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        self.meter.opened(path)
        return self.inner.open_input_file(path)

    def get_type_name(self) -> str:
        return f"counting-{self.inner.type_name}"

    def normalize_path(self, path: str) -> str:
        return self.inner.normalize_path(path)  # type: ignore[no-any-return]

    def get_file_info(self, paths: list[str]) -> Any:
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector: Any) -> Any:
        return self.inner.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        self.inner.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path: str) -> None:
        self.inner.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.inner.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.inner.copy_file(src, dest)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_append_stream(path, metadata=metadata)


@contextlib.contextmanager
def timing_gc(meter: Meter) -> Iterator[None]:
    """Each garbage collection's CPU time, told to ``meter``: a full collection of this process (two tables' histories
    in memory) takes about 0.1 s, half a re-decode's commit, and falls on one commit or another as the allocations go."""
    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.process_time()]
        elif started:
            meter.collected(time.process_time() - started[0], info["generation"])

    gc.callbacks.append(callback)
    try:
        yield
    finally:
        gc.callbacks.remove(callback)


@contextlib.contextmanager
def counting_reads(meter: Meter) -> Iterator[None]:
    """Every file pyiceberg opens to read, and every file the library's own reads open (files.filesystem_of), counted."""
    from pyiceberg.io.pyarrow import PyArrowFile

    def pyiceberg_open(original: Callable[..., Any]) -> Callable[..., Any]:
        def open_(self: Any, seekable: bool = True) -> Any:
            meter.opened(self.location)
            return original(self, seekable)

        return open_

    def library_filesystem(original: Callable[..., Any]) -> Callable[..., Any]:
        def filesystem_of(path: str) -> tuple[Any, str]:
            filesystem, local = original(path)
            return pafs.PyFileSystem(CountingHandler(meter, filesystem)), local

        return filesystem_of

    with patched(PyArrowFile, "open", pyiceberg_open), patched(files, "filesystem_of", library_filesystem):
        yield


# -- the two tables ----------------------------------------------------------------------------------------------------


@dataclass
class Side:
    """One way's pipeline, its ledger and its table."""

    name: str
    pipeline: PipelineConfig
    store: MemoryStateStore = field(default_factory=MemoryStateStore)

    def snapshots(self) -> tuple[int, int]:
        """The snapshots the table and the quarantine table hold."""
        table = iceberg_table.load_table(self.pipeline)
        quarantine = quarantine_table.load(self.pipeline)
        return (len(table.metadata.snapshots) if table else 0, len(quarantine.metadata.snapshots) if quarantine else 0)


def with_schema(pipeline: PipelineConfig, schema: str) -> PipelineConfig:
    return replace(pipeline, payload=replace(pipeline.payload, schema=schema))


def build(root: Path, batches: int, records: int, progress: Callable[[str], None]) -> tuple[MemoryKinesis, list[Side]]:
    """One stream; two pipelines that land it in two tables, batch by batch: each batch planned, replayed, verified and
    committed by each, so both tables and ledgers hold the same batches of the same records."""
    clock = ManualClock(T0)
    kinesis = MemoryKinesis(clock)
    kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS)
    payload = {"format": "json", "schema": SCHEMA, "max_bad_share": 0.5}
    sides = [Side(name, table_pipeline(root / name / "out", payload=payload)) for name in ("backfill", "redecode")]
    for n in range(batches):
        clock.advance(seconds=1)
        produce(kinesis, STREAM, records, start_index=n * records)
        kinesis.put_record(StreamName=STREAM, PartitionKey=f"bad-{n}", Data=BAD_RECORD)
        for side in sides:
            planned = plan_batch(side.pipeline, kinesis, side.store, "build", now=clock.advance(seconds=1)).batch
            assert planned is not None
            replay(side.pipeline, kinesis, planned)
            verify_batch(side.pipeline, side.store, planned.batch_id, run_id="build")
            commit_batch(side.pipeline, side.store, planned.batch_id, now=clock.advance(seconds=1), run_id="build")
        if (n + 1) % 25 == 0:
            progress(f"built {n + 1} batches of each table")
    a, b = (side.store.list_batches(side.pipeline.name) for side in sides)
    if [x.ranges for x in a] != [y.ranges for y in b] or len(a) != batches:
        raise RuntimeError("the two tables' ledgers differ: the two ways would not replay the same batches")
    return kinesis, sides


def check_outcome(a: Side, b: Side, ids: list[int]) -> None:
    """Both ways did what they are for: every batch re-decoded (its new column in the table) or backfilled, and both
    tables hold the same rows."""
    redecoded = b.store.get_batches(b.pipeline.name, ids)
    if sorted(x.batch_id for x in redecoded.values() if x.redecoded_by == REDECODE_RUN) != ids:
        raise RuntimeError("the re-decode did not commit every batch of the selection")
    backfilled = a.store.get_batches(a.pipeline.name, ids)
    if any(x.result is None or x.result.attempt != "b" for x in backfilled.values()):
        raise RuntimeError("the backfill did not commit every batch's replayed attempt")
    tables = [iceberg_table.load_table(side.pipeline) for side in (a, b)]
    states = [iceberg_table.table_state(table) for table in tables]
    # The same rows; the re-decoded table's holdings also count the re-decode it made visible (one), the backfill's none.
    if states[0].total_records != states[1].total_records or states[0].holdings != replace(states[1].holdings, redecodes=0):
        raise RuntimeError(f"the two tables hold different rows: {states[0]} and {states[1]}")
    if states[1].holdings.redecodes != 1:
        raise RuntimeError(f"the re-decoded table counts {states[1].holdings.redecodes} re-decodes made visible, not 1")
    added = set(ADDED.replace(",", " ").split()) - set(SCHEMA.replace(",", " ").split())
    if tables[1] is None or not added <= {f.name for f in tables[1].schema().fields}:
        raise RuntimeError(f"the re-decoded table lacks the added field {added}")


def run(batches: int, records: int, progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kr-bench-redecode-") as tmp:
        kinesis, (a, b) = build(Path(tmp), batches, records, progress)
        built = time.perf_counter() - started
        ids = list(range(1, batches + 1))
        start_snapshots = {side.name: side.snapshots() for side in (a, b)}
        changed = with_schema(b.pipeline, ADDED)
        # The process now holds what building took (two tables' histories, the stream), which a commit task's process
        # does not: frozen, a full collection during the measured ways walks what they allocate, not the build's objects
        # too (about 0.1 s a full collection before, half the re-decode's one commit, landing in it or not by chance).
        gc.collect()
        gc.freeze()
        meter = Meter()
        with contextlib.ExitStack() as patches:
            patches.enter_context(counting_reads(meter))
            patches.enter_context(timing_gc(meter))
            patches.enter_context(patched(commit, "commit_to_table", timed(meter, "backfill table commit")))
            patches.enter_context(patched(commit, "quarantine_to_table", timed(meter, "backfill quarantine commit")))
            patches.enter_context(patched(iceberg_table, "replace_batches", timed(meter, "re-decode table commit")))
            for name, step in STEPS.items():
                patches.enter_context(patched(iceberg_table, name, within_commit(meter, step)))
            for batch_id in ids:  # interleaved, so that the machine's load falls on both ways alike
                with meter.phase("backfill"):
                    with meter.phase("backfill replay"):
                        replay(a.pipeline, kinesis, backfill.committed_batch(a.pipeline, a.store, batch_id), attempt="b")
                    with meter.phase("backfill check and commit"):
                        backfill.check_replayed(a.pipeline, a.store, batch_id, run_id=BACKFILL_RUN)
                with meter.phase("re-decode"):
                    with meter.phase("re-decode replay"):
                        replay(changed, kinesis, backfill.committed_batch(changed, b.store, batch_id), attempt="r")
                    with meter.phase("re-decode check and stage"):
                        backfill.check_replayed(changed, b.store, batch_id, run_id=REDECODE_RUN, redecode=True)
                if batch_id % 25 == 0:
                    progress(f"backfilled and staged {batch_id} batches")
            with (
                patched(quarantine_table, "commit", timed(meter, "re-decode quarantine commit")),
                meter.phase("re-decode"),
                meter.phase("re-decode commit"),
            ):
                redecode.commit_redecoded(changed, b.store, ids, REDECODE_RUN)
        end_snapshots = {side.name: side.snapshots() for side in (a, b)}
        check_outcome(a, b, ids)
        made = {name: tuple(e - s for e, s in zip(end_snapshots[name], start_snapshots[name], strict=True)) for name in end_snapshots}
        return {
            "batches": batches,
            "records": records,
            "phases": meter.phases,
            "made": made,
            "start_snapshots": start_snapshots,
            "built": built,
            "seconds": time.perf_counter() - started,
            "machine": f"Python {platform.python_version()}, pyiceberg {importlib.metadata.version('pyiceberg')}, pyarrow "
            f"{importlib.metadata.version('pyarrow')}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}",
            "load": (load_before, os.getloadavg()[0]),
        }


# -- the section -------------------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(r: dict[str, Any], command: str) -> str:
    p: dict[str, Measure] = r["phases"]
    n = r["batches"]
    bf_table, bf_quarantine = p["backfill table commit"], p["backfill quarantine commit"]
    rd_table, rd_quarantine, rd_whole = p["re-decode table commit"], p["re-decode quarantine commit"], p["re-decode commit"]
    per_batch = [t + q for t, q in zip(bf_table.wall, bf_quarantine.wall, strict=True)]
    per_batch_cpu = [t + q for t, q in zip(bf_table.cpu, bf_quarantine.cpu, strict=True)]
    one = statistics.fmean(per_batch)
    one_cpu = statistics.fmean(per_batch_cpu)
    whole = sum(per_batch)
    rd = rd_table.wall[0] + rd_quarantine.wall[0]
    rd_cpu = rd_table.cpu[0] + rd_quarantine.cpu[0]
    bf_files = bf_table.files + bf_quarantine.files
    rd_files = rd_table.files + rd_quarantine.files
    bf_opened = bf_table.opened + bf_quarantine.opened
    rd_opened = rd_table.opened + rd_quarantine.opened
    made_bf, made_rd = r["made"]["backfill"], r["made"]["redecode"]
    load = r["load"]
    lines = [
        f"## A re-decode of {n} batches beside a backfill of the same {n} (make bench-redecode)",
        "",
        f"Two tables on the embedded SQL catalog, built alike from one in-memory stream of {SHARDS} shards: {n} batches of "
        f"{r['records']} records and one that no decoding reads (quarantined), each batch planned, replayed (without Spark), "
        f"verified and committed as the pipeline does; at the start each table held {r['start_snapshots']['backfill'][0]} "
        f"snapshots and its quarantine table {r['start_snapshots']['backfill'][1]}. Then, batch by batch and interleaved: "
        f"the backfill replayed the batch and `check_replayed` checked and committed it; the re-decode replayed it with a "
        f"field added to payload.schema (`{SCHEMA}` to `{ADDED}`) and `check_replayed(redecode=True)` checked and staged "
        f"it; last, the re-decode's one `commit_redecoded`. A commit is the two tables' commits: `commit_to_table` and "
        "`quarantine_to_table` per batch for the backfill, `iceberg_table.replace_batches` and `quarantine_table.commit` "
        "for the re-decode. Files read: every file pyiceberg opened (`PyArrowFile.open`) and every file the library's own "
        "reads opened (`files.filesystem_of`), counted in the process. "
        f"`{command}`, {r['seconds'] / 60:.1f} minutes ({r['built']:.0f} s of them building the two tables), on {r['machine']}; "
        f"a shared machine, 1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end, so wall times are noisy "
        "(CPU times, this process's, beside them).",
        "",
        "| | backfill of the batches (each committed on its own) | re-decode (one commit) | re-decode / backfill |",
        "|---|---|---|---|",
        f"| commit, s: one batch's (the backfill's mean) against the re-decode's one | {one:.3f} (CPU {one_cpu:.3f}) | {rd:.3f} (CPU {rd_cpu:.3f}) | **{rd / one:.1f}×** (CPU {rd_cpu / one_cpu:.1f}×) |",
        f"| commit, s: all {n} batches | {whole:.2f} (CPU {sum(per_batch_cpu):.2f}) | {rd:.3f} (CPU {rd_cpu:.3f}) | {rd / whole:.2f}× (CPU {rd_cpu / sum(per_batch_cpu):.2f}×) |",
        f"| of which the table's, s | {sum(bf_table.wall):.2f} (CPU {sum(bf_table.cpu):.2f}) | {rd_table.wall[0]:.3f} (CPU {rd_table.cpu[0]:.3f}) | {rd_table.wall[0] / sum(bf_table.wall):.2f}× |",
        f"| of which the quarantine table's, s | {sum(bf_quarantine.wall):.2f} (CPU {sum(bf_quarantine.cpu):.2f}) | {rd_quarantine.wall[0]:.3f} (CPU {rd_quarantine.cpu[0]:.3f}) | {rd_quarantine.wall[0] / sum(bf_quarantine.wall):.2f}× |",
        f"| snapshots made (table + quarantine table) | {made_bf[0]} + {made_bf[1]} | {made_rd[0]} + {made_rd[1]} | |",
        f"| files the commits read | {bf_files:,} | {rd_files:,} | {rd_files / bf_files:.2f}× |",
    ]
    lines += [
        f"| of which {kind} | {bf_opened[kind]:,} | {rd_opened[kind]:,} | {ratio(rd_opened[kind], bf_opened[kind])} |" for kind in KINDS
    ]
    lines += [
        "| where the commits' CPU goes, s: a backfill commit's (the mean) against the re-decode's one, by step | | | |",
        *steps(p, n, one_cpu, rd_cpu),
        f"| of which Python's garbage collection, within the steps above (full collections, in all) | {(bf_table.gc + bf_quarantine.gc) / n:.4f} "
        f"({bf_table.full_gcs + bf_quarantine.full_gcs}) | {rd_table.gc + rd_quarantine.gc:.4f} ({rd_table.full_gcs + rd_quarantine.full_gcs}) | |",
        f"| the re-decode's commit less one backfill commit, per batch beyond the first, ms (CPU) | | {(rd - one) / max(n - 1, 1) * 1000:.2f} ({(rd_cpu - one_cpu) / max(n - 1, 1) * 1000:.2f}) | |",
    ]
    bf_way, rd_way = p["backfill"], p["re-decode"]
    lines += [
        f"| the whole way, s: replays, checks and commits | {sum(bf_way.wall):.2f} | {sum(rd_way.wall):.2f} | {sum(rd_way.wall) / sum(bf_way.wall):.2f}× |",
        f"| the whole way, files read | {bf_way.files:,} | {rd_way.files:,} | {rd_way.files / bf_way.files:.2f}× |",
        f"| `commit_redecoded` whole (the tables' commits, the ledger's {n} entries, the commit records), s | | {rd_whole.wall[0]:.3f} | |",
        "",
        f"Target: the re-decode's commit at most {RATIO_TARGET:g} × one backfill commit: by wall time {rd / one:.1f}× "
        f"({verdict(rd / one <= RATIO_TARGET)}), by this process's CPU time {rd_cpu / one_cpu:.1f}× ({verdict(rd_cpu / one_cpu <= RATIO_TARGET)}). "
        f"Against the whole backfill's {n} commits it took {rd / whole:.2f}× (CPU {rd_cpu / sum(per_batch_cpu):.2f}×).",
        "",
        f"Target: the re-decode's commit reads no more files than the backfill's commits: {rd_files:,} against {bf_files:,} "
        f"({verdict(rd_files <= bf_files)}); Parquet files {rd_opened['table Parquet'] + rd_opened['quarantine Parquet']:,} against "
        f"{bf_opened['table Parquet'] + bf_opened['quarantine Parquet']:,}.",
        "",
        f"The backfill's commits, one batch each, by the order they ran (ms, table + quarantine table): median "
        f"{statistics.median(per_batch) * 1000:.1f}, first {per_batch[0] * 1000:.1f}, last {per_batch[-1] * 1000:.1f}, "
        f"min {min(per_batch) * 1000:.1f}, max {max(per_batch) * 1000:.1f}.",
    ]
    return "\n".join(lines)


def steps(p: dict[str, Measure], n: int, one_cpu: float, rd_cpu: float) -> list[str]:
    """A row per step of the tables' commits (CPU, s): a backfill commit's mean, the re-decode's, and the rest of each."""
    rows, bf_steps, rd_steps = [], 0.0, 0.0
    for step in dict.fromkeys(STEPS.values()):
        bf, rd = sum(p[f"backfill commit: {step}"].cpu) / n, sum(p[f"re-decode commit: {step}"].cpu)
        bf_steps, rd_steps = bf_steps + bf, rd_steps + rd
        rows.append(f"| of which {step} | {bf:.4f} | {rd:.4f} | {ratio_of(rd, bf)} |")
    rest_bf, rest_rd = one_cpu - bf_steps, rd_cpu - rd_steps
    rows.append(
        f"| of which the rest (catalog and table loads, checks, the catalog's commit) | {rest_bf:.4f} | {rest_rd:.4f} | {ratio_of(rest_rd, rest_bf)} |"
    )
    return rows


def ratio_of(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if b > 0 else ""


def ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}×" if b else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100, help="batches in each table, all of them backfilled and re-decoded")
    parser.add_argument("--records", type=int, default=12, help="decodable records a batch, across the shards (one more is not)")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    if not 1 <= args.batches <= backfill.MAX_BATCHES_PER_RUN:
        parser.error(f"--batches must be from 1 to {backfill.MAX_BATCHES_PER_RUN}, the most a re-decode commits at once")
    logging.getLogger("kinesis_replay").setLevel(logging.ERROR)  # a line per commit, and one warning per re-decoded batch
    if not pyiceberg_patches.PATCHED:
        print(f"bench/redecode.py: pyiceberg's commit path is not patched here ({pyiceberg_patches.why_not})", flush=True)
    results = run(args.batches, args.records, lambda line: print(line, flush=True))
    body = render(results, f"python bench/redecode.py --batches {args.batches} --records {args.records}")
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.REDECODE, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
