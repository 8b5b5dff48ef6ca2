"""`make bench-history`: a year of one-minute batches; what each step costs at 1,000, 10,000 and 100,000 batches.

A pipeline on a one-minute schedule commits 525,600 batches a year. This builds a table pipeline's history of
SIZES batches without Kinesis's service and without Spark (the in-memory stream, ledger and replay of tests/fakes,
the embedded SQL catalog), caches it under /tmp, and times on it the steps that run on every cycle, on every page
view, on a backfill and on a lost state table:

- a plan and a commit (a cycle's: ``plan_batch`` and ``commit_batch``, the replay and verify between them untimed);
- a backfill of one old batch (a quarter into the history) and a backfill selected by a 10-minute window (halfway in; the
  selection, the replay without Spark, and ``check_replayed``, which commits each batch's new files to the table);
- recovery from the output into an empty state store (``recover``: it lists ``_commits/`` and reads every record), and
  the LIST calls that listing makes on S3 (a thousand keys a call);
- the status page's data (``status.pipeline_view``, in process);
- maintenance (``tidy_table``: snapshot expiry by the table's policy, then orphan-file removal);
- a reader's scan planning of one day's batch ids (``table.scan(row_filter=...).plan_files()``).

How the history is built, and what differs from a pipeline's (the section in BENCHMARKS.md says it too): the first
2 batches and the last RECENT are planned, replayed, verified and committed one by one as the pipeline does. The
batches between are written the way those are, but in bulk: each one's record per shard is put in the in-memory
stream (one a minute of the virtual clock), its ledger item is the last real batch's with this batch's ranges, times
and sequence numbers (its checksum and digest are the template's, except for the batches a backfill here replays,
whose replay and manifest are real), its commit record is written by ``write_commit_record``, its data folder holds
the template batch's Parquet file (a hard link; the replayed batches' files are their own), and its DataFile is the
template's with its own path, partition and ``batch_id`` bounds. The table gets them by one merge-append a thousand
batches, through pyiceberg's own manifest merging as the pipeline's commits do, each snapshot's summary recording the
holdings so far: so its manifests list every batch's file and partition, but it keeps one snapshot a thousand batches
where the pipeline, after maintenance by the default policy (5 days), keeps one a batch for 7,200 batches.

    python bench/history.py --sizes 1000,10000,100000
"""

# The prose uses typographic signs on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import importlib.metadata
import json
import logging
import math
import os
import pickle
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402

from fakes.memory_kinesis import MAX_HASH_KEY, ManualClock, MemoryKinesis  # noqa: E402
from fakes.memory_store import MemoryStateStore, _BatchItem  # noqa: E402
from fakes.replay import replay, table_pipeline  # noqa: E402
from kinesis_replay.adapters import commit_records, files, iceberg_table, layout, table_maintenance  # noqa: E402
from kinesis_replay.core.config import PipelineConfig  # noqa: E402
from kinesis_replay.core.holdings import Holdings  # noqa: E402
from kinesis_replay.core.ranges import SequenceRange  # noqa: E402
from kinesis_replay.core.state import Batch, BatchStatus  # noqa: E402
from kinesis_replay.steps import backfill, maintenance, recovery  # noqa: E402
from kinesis_replay.steps.commit import commit_batch  # noqa: E402
from kinesis_replay.steps.plan import plan_batch  # noqa: E402
from kinesis_replay.steps.verify import verify_batch  # noqa: E402
from kinesis_replay.ui import status  # noqa: E402

STREAM = "orders"
SHARDS = 4
T0 = datetime(2025, 1, 1, tzinfo=UTC)
EVERY = timedelta(minutes=1)
FIRST_REAL = 2  # batches committed one by one before the bulk: the table's creation, and the template
RECENT = 60  # the last hour, committed one by one: the snapshots a cycle's commit and the page see
CHUNK = 1_000  # batches a bulk append
DAY = 1_440
WINDOW = 10  # the window a backfill selects: 10 minutes
RETENTION = timedelta(hours=24)
RUNS = 3
LIMIT = 1.2  # each per-batch cost within this factor from the smallest history to the largest
YEAR = 525_600
S3_PAGE = 1_000  # keys a ListObjectsV2 call answers
CACHE = Path(os.environ.get("KR_HISTORY_CACHE", "/tmp/kr-history"))


def shard_id(i: int) -> str:
    return f"shardId-{i:012d}"


def hash_key(i: int) -> str:
    """A hash key inside shard ``i``'s range (the fake splits the key space evenly)."""
    return str((MAX_HASH_KEY + 1) // SHARDS * i + 1)


def put_minute(kinesis: MemoryKinesis, clock: ManualClock, n: int) -> dict[str, tuple[int, datetime]]:
    """A minute passes and one record lands on each shard; each shard's (sequence number, arrival)."""
    at = clock.advance(seconds=EVERY.total_seconds())
    out = {}
    for i in range(SHARDS):
        answer = kinesis.put_record(
            StreamName=STREAM, PartitionKey=f"k{n}-{i}", Data=f'{{"n": {n}, "shard": {i}}}'.encode(), ExplicitHashKey=hash_key(i)
        )
        out[answer["ShardId"]] = (int(answer["SequenceNumber"]), at)
    return out


@dataclass
class History:
    """A pipeline's world, cached between runs: the stream, the ledger and the clock (pickled), and the output on disk."""

    size: int
    root: Path
    kinesis: MemoryKinesis
    store: MemoryStateStore
    clock: ManualClock
    built_seconds: float = 0.0
    touched: dict[str, Any] = field(default_factory=dict)  # unused; kept so that cached histories still load

    @property
    def pipeline(self) -> PipelineConfig:
        return table_pipeline(self.root / "out", payload={"format": "json", "schema": "n INT, shard INT"})

    def save(self) -> None:
        with open(self.root / "state.pkl", "wb") as f:
            pickle.dump((self.kinesis, self.store, self.clock, self.built_seconds, self.touched), f)

    @classmethod
    def load(cls, size: int) -> History | None:
        root = CACHE / str(size)
        if not (root / "state.pkl").exists():
            return None
        with open(root / "state.pkl", "rb") as f:
            kinesis, store, clock, built, touched = pickle.load(f)
        return cls(size, root, kinesis, store, clock, built, touched)

    def cycle(self, run_id: str = "cycle", timed: dict[str, list[float]] | None = None) -> Batch:
        """A minute, a record a shard, and one batch planned, replayed, verified and committed; with ``timed``, the plan's
        and the commit's CPU seconds appended to it."""
        pipeline, n = self.pipeline, self.store.get_head(self.pipeline.name).next_batch_id
        put_minute(self.kinesis, self.clock, n)
        with cpu(timed, "plan"):
            batch = plan_batch(pipeline, self.kinesis, self.store, run_id, now=self.clock()).batch
        assert batch is not None
        replay(pipeline, self.kinesis, batch)
        verify_batch(pipeline, self.store, batch.batch_id, run_id=run_id)
        with cpu(timed, "commit"):
            return commit_batch(pipeline, self.store, batch.batch_id, now=self.clock() + timedelta(seconds=30), run_id=run_id)


@contextlib.contextmanager
def cpu(timed: dict[str, list[float]] | None, label: str) -> Iterator[None]:
    started = time.process_time()
    yield
    if timed is not None:
        timed.setdefault(label, []).append(time.process_time() - started)


def touched_ids(size: int) -> tuple[int, list[int]]:
    """The old batch a backfill replays (a quarter into the history) and the window's batches (from halfway): their ledger
    entries and files are real. Both are in manifests that the merging filled to its target size, in a long history,
    as a batch of months before is: the newest batches' manifests are small until they are merged."""
    window_first = size // 2
    return size // 4, list(range(window_first, window_first + WINDOW))


def clone_data_file(template: Any, path: str, batch_id: int, field_id: int) -> Any:
    """The template's DataFile with this batch's path, partition and batch_id bounds."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType

    data = list(template._data)
    bound = to_bytes(LongType(), batch_id)
    data[1], data[3] = path, Record(batch_id)
    data[10] = {**template._data[10], field_id: bound}
    data[11] = {**template._data[11], field_id: bound}
    made = DataFile(*data)
    made.spec_id = template.spec_id
    return made


def write_compact(path: str, data: Any) -> None:
    """What ``files.write_json`` writes, without its indentation: Python's JSON encoder indents in Python, about 5 ms
    a commit record, which at 100,000 records would be most of the build. Readers parse it alike."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, sort_keys=True))


class Bulk:
    """The batches between the real ones, written as the module's docstring says, a thousand to a table append."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.pipeline, name = history.pipeline, history.pipeline.name
        self.template = history.store.get_batch(name, FIRST_REAL)
        table = iceberg_table.load_table(self.pipeline)
        assert table is not None and self.template.result is not None
        self.table = table
        self.template_file = iceberg_table.batch_data_files(table, FIRST_REAL)[0]
        self.link_from = self.template_file.file_path.removeprefix("file://")
        self.batch_field = table.schema().find_field("batch_id").field_id
        old, window = touched_ids(history.size)
        self.real = {old, *window}
        self.state = history.store.pipelines[name]
        self.checkpoints = {s.shard_id: s.checkpoint for s in self.state.shards.values()}
        self.records = sum(history.store.get_batch(name, b).verified_result().records for b in range(1, FIRST_REAL + 1))
        self.pending: list[Batch] = []
        self.added: list[Any] = []

    def add(self, n: int) -> None:
        """Batch ``n``: a record a shard in the stream, its ledger item, files, result manifest and DataFile (pending)."""
        pipeline, template = self.pipeline, self.template
        assert template.result is not None
        landed = put_minute(self.history.kinesis, self.history.clock, n)
        at = self.history.clock()
        ranges = tuple(SequenceRange(sid, seq, seq, self.checkpoints[sid], False, t) for sid, (seq, t) in sorted(landed.items()))
        results = tuple(
            replace(r, first_sequence_number=seq, last_sequence_number=seq, last_arrival=t)
            for r in template.result.shards
            for seq, t in [landed[r.shard_id]]
        )
        batch = replace(
            template, batch_id=n, ranges=ranges, run_id=f"scheduled__{n}", created_at=at, committed_at=at + timedelta(seconds=30),
            result=replace(template.result, batch_id=n, shards=results),
        )  # fmt: skip
        folder = Path(layout.data_path(pipeline.output, n, "fake"))
        if n in self.real:  # replayed for real: its files and manifest are its own
            written = replay(pipeline, self.history.kinesis, replace(batch, status=BatchStatus.PLANNED, result=None))
            batch = replace(batch, result=written)
            paths = [iceberg_table.iceberg_location(str(p)) for p in sorted(folder.glob("*.parquet"))]
            footers = iceberg_table.read_footers(self.table.io, paths)
            self.added += iceberg_table.data_files(self.table.io, self.table.metadata, footers)
        else:
            folder.mkdir(parents=True)
            target = folder / Path(self.link_from).name
            try:
                os.link(self.link_from, target)
            except OSError as exc:  # a file takes at most 65,000 links on ext4: a copy takes the next 65,000
                if exc.errno != errno.EMLINK:
                    raise
                shutil.copyfile(self.link_from, target)
                self.link_from = str(target)
            write_compact(layout.result_path(pipeline.output, n), batch.verified_result().to_dict())
            self.added.append(clone_data_file(self.template_file, iceberg_table.iceberg_location(str(target)), n, self.batch_field))
        self.checkpoints.update({sid: seq for sid, (seq, _) in landed.items()})
        self.pending.append(batch)

    def flush(self) -> None:
        """The pending batches in the table by one merge-append recording the holdings; their commit records and ledger items."""
        if not self.pending:
            return
        name, last = self.pipeline.name, self.pending[-1].batch_id
        self.records += sum(b.verified_result().records for b in self.pending)
        held = Holdings.of(range(1, last + 1), self.records)
        props = {**iceberg_table.snapshot_properties(name, last, "fake", "build"), **held.to_summary()}
        with iceberg_table.transaction(self.table) as tx:
            iceberg_table.write_snapshot(tx, props, [], self.added)
        snapshot_id = iceberg_table.new_snapshot_id(self.table, name)
        for b in self.pending:
            committed = replace(b, snapshot_id=snapshot_id)
            write_compact(layout.commit_record_path(self.pipeline.output, b.batch_id), {"format": 1, "batch": committed.to_dict()})
            self.state.batches[b.batch_id] = _BatchItem.of(committed)
        self.pending.clear()
        self.added.clear()

    def finish(self, last: int) -> None:
        """The shards' checkpoints and the head as the commit of batch ``last`` leaves them."""
        self.flush()
        for sid, checkpoint in self.checkpoints.items():
            self.state.shards[sid] = replace(self.state.shards[sid], checkpoint=checkpoint, last_batch_id=last)
        assert self.state.head is not None
        self.state.head = replace(self.state.head, next_batch_id=last + 1, version=self.state.head.version + 1)


def build(size: int, progress: Callable[[str], None], manifest_target: int | None = None) -> History:
    """The history of ``size`` batches, as the module's docstring says; with ``manifest_target``, the table's merged
    manifests grow to that many bytes (set once the first commit created it), not to the pipeline's own setting."""
    root = CACHE / str(size)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.perf_counter()
    clock = ManualClock(T0)
    kinesis = MemoryKinesis(clock)
    kinesis.create_stream(StreamName=STREAM, ShardCount=SHARDS, RetentionPeriodHours=24 * 365)
    history = History(size, root, kinesis, MemoryStateStore(), clock)
    for _ in range(FIRST_REAL):
        history.cycle("build")
    if manifest_target is not None:
        table = iceberg_table.load_table(history.pipeline)
        assert table is not None
        with table.transaction() as tx:
            tx.set_properties({iceberg_table.MANIFEST_TARGET_PROPERTY: str(manifest_target)})
    bulk = Bulk(history)
    last_bulk = size - RECENT
    for n in range(FIRST_REAL + 1, last_bulk + 1):
        bulk.add(n)
        if len(bulk.pending) == CHUNK:
            bulk.flush()
            progress(f"{size:,}: {n:,} batches")
    bulk.finish(last_bulk)
    for _ in range(RECENT):
        history.cycle("build")
    history.built_seconds = time.perf_counter() - started
    history.save()
    progress(f"{size:,}: built in {history.built_seconds:.0f} s")
    return history


# -- measuring ------------------------------------------------------------------------------------------------------


class ListCounter:
    """The listings of ``_commits/`` (and any folder) the library makes through pyarrow, and the keys each returned."""

    def __init__(self) -> None:
        self.listings: list[int] = []

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        original = files.filesystem_of
        counter = self

        def filesystem_of(path: str) -> tuple[Any, str]:
            filesystem, local = original(path)
            return _Counted(filesystem, counter), local

        modules = (files, commit_records)  # commit_records imported the function by name
        for module in modules:
            module.filesystem_of = filesystem_of  # type: ignore[attr-defined]
        try:
            yield
        finally:
            for module in modules:
                module.filesystem_of = original  # type: ignore[attr-defined]

    def s3_calls(self) -> int:
        """ListObjectsV2 calls these listings take on S3: a thousand keys a call, at least one each."""
        return sum(max(1, math.ceil(keys / S3_PAGE)) for keys in self.listings)


class _Counted:
    """A pyarrow file system whose selector listings are counted; every other call goes to ``inner``."""

    def __init__(self, inner: Any, counter: ListCounter) -> None:
        self._inner, self._counter = inner, counter

    def get_file_info(self, what: Any) -> Any:
        from pyarrow import fs

        found = self._inner.get_file_info(what)
        if isinstance(what, fs.FileSelector):
            self._counter.listings.append(len(found))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def backfill_old(history: History, attempt: str) -> None:
    """A backfill of the old batch, as its DAG runs it: selected by id, replayed, checked and committed to the table."""
    pipeline, name = history.pipeline, history.pipeline.name
    newest = history.store.get_head(name).next_batch_id - 1
    selection = backfill.Selection(batch_ids=(touched_ids(history.size)[0],))
    chosen = backfill.select_batches(name, selection, backfill.candidates(history.store, name, selection, newest, RETENTION), newest)
    for b in chosen:
        replay(pipeline, history.kinesis, backfill.committed_batch(pipeline, history.store, b.batch_id), attempt=attempt)
        backfill.check_replayed(pipeline, history.store, b.batch_id, run_id=f"backfill-{attempt}")


def scan_day(history: History) -> tuple[int, int, float]:
    """A reader's scan planning of the newest day's batch ids (the whole history when it is shorter): the ids, the files
    planned and the planning's CPU seconds (the table's load apart)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

    newest = history.store.get_head(history.pipeline.name).next_batch_id - 1
    low = max(1, newest - DAY + 1)
    table = iceberg_table.load_table(history.pipeline)
    assert table is not None
    started = time.process_time()
    planned = table.scan(row_filter=And(GreaterThanOrEqual("batch_id", low), LessThanOrEqual("batch_id", newest))).plan_files()
    return newest - low + 1, len(planned), time.process_time() - started


def measure(histories: list[History], runs: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every step's CPU seconds (this process's). The steps that can run again on the same history run ``runs`` times,
    the histories in turn within each round (side by side, so that the machine's load falls on every size alike) after
    one round untimed (imports, caches); the median is kept. The window's backfill, recovery and maintenance run once a
    history, one history after another."""
    token = f"{time.time_ns():x}"  # attempts of this measurement's own: a cached history keeps earlier runs' in its table
    timed: dict[int, dict[str, list[float]]] = {h.size: {} for h in histories}
    figures: dict[int, dict[str, Any]] = {h.size: {"size": h.size} for h in histories}
    for i in range(runs + 1):
        for history in histories:
            t = timed[history.size] if i > 0 else None
            history.cycle(f"measured-{token}-{i}", t)
            with cpu(t, "backfill_old"):
                backfill_old(history, f"bf{token}-{i}")
            table = iceberg_table.load_table(history.pipeline)
            assert table is not None
            with cpu(t, "lookup"):
                iceberg_table.batch_data_files(table, touched_ids(history.size)[0])
            with cpu(t, "page"):
                status.pipeline_view(history.pipeline, history.store, history.clock())
            ids, planned, seconds = scan_day(history)
            figures[history.size].update(scan_batches=ids, scan_files=planned)
            if t is not None:
                t.setdefault("scan", []).append(seconds)
        progress(f"round {i} of {runs} (0: untimed): a cycle, a backfill, the page and a scan at each size")
    for history in histories:
        once(history, token, timed[history.size], figures[history.size], progress)
    for history in histories:
        figures[history.size]["cpu"] = {k: median(v) for k, v in timed[history.size].items()}
    return [figures[h.size] for h in histories]


def once(history: History, token: str, timed: dict[str, list[float]], figures: dict[str, Any], progress: Callable[[str], None]) -> None:
    """The window's backfill, recovery and maintenance of one history, and what its table and output hold."""
    pipeline, name, size = history.pipeline, history.pipeline.name, history.size
    newest = history.store.get_head(name).next_batch_id - 1
    first = history.store.get_batch(name, touched_ids(size)[1][0]).created_at
    selection = backfill.Selection(start_time=first, end_time=first + (WINDOW - 1) * EVERY)
    started = time.process_time()
    found = backfill.candidates(history.store, name, selection, newest, RETENTION)
    chosen = backfill.select_batches(name, selection, found, newest)
    timed["window_select"] = [time.process_time() - started]
    for b in chosen:
        replay(pipeline, history.kinesis, backfill.committed_batch(pipeline, history.store, b.batch_id), attempt=f"window{token}")
        backfill.check_replayed(pipeline, history.store, b.batch_id, run_id="backfill-window")
    timed["window"] = [time.process_time() - started]
    figures["window_batches"], figures["window_candidates"] = len(chosen), len(found)
    progress(f"{size:,}: backfill of a window ({len(chosen)} batches)")
    counter = ListCounter()
    with counter.counting(), cpu(timed, "recovery"):
        recovered = recovery.recover(pipeline, history.kinesis, MemoryStateStore(), history.clock())
    figures["recovered"] = len(recovered.batches)
    figures["recovery_lists"] = counter.s3_calls()
    figures["commit_records"] = len(commit_records.committed_batch_ids(pipeline.output))
    progress(f"{size:,}: recovery")
    with cpu(timed, "maintenance"):
        tidied = maintenance.tidy_table(pipeline, history.store, table_maintenance.DEFAULT_ORPHAN_AGE, now=datetime.now(UTC))
    assert tidied is not None
    figures["maintenance"] = tidied.summary()
    table = iceberg_table.load_table(pipeline)
    assert table is not None and table.current_snapshot() is not None
    figures["snapshots"] = len(table.metadata.snapshots)
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    largest = max(manifests, key=lambda m: m.manifest_length)
    figures["manifests"] = len(manifests)
    figures["largest_manifest"] = (largest.manifest_length, (largest.added_files_count or 0) + (largest.existing_files_count or 0))
    figures["manifest_target"] = int(table.properties.get(iceberg_table.MANIFEST_TARGET_PROPERTY, 8 << 20))
    listed = len(table_maintenance._listing(table).files)
    figures["table_files"] = listed
    figures["maintenance_lists"] = max(1, math.ceil(listed / S3_PAGE))
    figures["batches_after"] = newest
    progress(f"{size:,}: maintenance")


# -- the report ------------------------------------------------------------------------------------------------------

# (label, key, per): what the figure is divided by to make a per-batch cost ("op": the operation is one batch's)
ROWS: list[tuple[str, str, str]] = [
    ("plan (a regular cycle's `plan_batch`)", "plan", "op"),
    ("commit (`commit_batch`: the commit record, the table's snapshot, the checkpoints, the ledger)", "commit", "op"),
    ("backfill of one old batch (a quarter into the history: select, replay, `check_replayed` and its table commit)", "backfill_old", "op"),
    (
        "finding that batch's files in the table (`batch_data_files`, twice in a backfill: the manifests spanning it, read whole)",
        "lookup",
        "op",
    ),
    ("backfill by a 10-minute window halfway into the history, per batch selected", "window", "window"),
    ("of which the selection (`candidates` + `select_batches`), per batch selected", "window_select", "window"),
    ("status page (`pipeline_view`: the last 10 batches, a day of figures, every shard)", "page", "op"),
    ("recovery from the output (`recover`), per batch recovered", "recovery", "history"),
    ("maintenance (`tidy_table`: expiry, orphan removal), per batch of history", "maintenance", "history"),
    ("a reader's scan planning of one day (`plan_files`), per file planned", "scan", "scan"),
]


def per_batch(fig: dict[str, Any], key: str, per: str) -> float:
    seconds = fig["cpu"][key]
    if per == "window":
        return float(seconds / max(1, fig["window_batches"]))
    if per == "history":
        return float(seconds / fig["size"])
    if per == "scan":
        return float(seconds / max(1, fig["scan_files"]))
    return float(seconds)


def render(results: list[dict[str, Any]], seconds: float, argv: str, runs: int = RUNS) -> str:
    small, large = results[0], results[-1]
    sizes = [f"{r['size']:,}" for r in results]
    ver = importlib.metadata.version
    lines = [
        "## A year of batches (make bench-history)",
        "",
        f"Histories of {', '.join(sizes)} one-minute batches of a 4-shard stream (one record a shard a batch) in a table "
        "output on the embedded SQL catalog, the ledger in the in-memory state store, the stream in the in-memory "
        "Kinesis fake; replays without Spark (tests/fakes/replay.py, the job's own reader and writer). Built as "
        f"bench/history.py says: the first {FIRST_REAL} and the last {RECENT} batches planned, replayed, verified and "
        f"committed one by one; those between written in bulk with their real ranges, ledger items, commit records and "
        f"data folders, and added to the table by one merge-append each {CHUNK:,} batches, whose snapshot summaries "
        "record the holdings (what differs from a pipeline's history is listed below the table). Every figure is this "
        f"process's CPU seconds (user + system; the machine is shared, so wall time says more about the neighbours), "
        f"the median of {runs} rounds (the sizes in turn in each, after one untimed) for a plan, a commit, the old batch's "
        "backfill and its lookup, the page and the scan, one run for the "
        f"rest. `python bench/{argv}`, {seconds / 60:.1f} minutes with the cached histories, on Python "
        f"{platform.python_version()}, pyiceberg {ver('pyiceberg')}, pyarrow {ver('pyarrow')}, {os.cpu_count()} cores.",
        "",
        "| per batch, CPU ms | "
        + " | ".join(sizes)
        + f" | {large['size']:,} ÷ {small['size']:,} | within {LIMIT} × | at 525,600 batches |",
        "|---|" + "---|" * len(results) + "---|---|---|",
    ]
    for label, key, per in ROWS:
        values = [per_batch(r, key, per) * 1000 for r in results]
        ratio = values[-1] / values[0] if values[0] else float("nan")
        grows = ratio > LIMIT
        at_year = ""
        if grows:  # extrapolated along the line through the two largest histories
            (x0, y0), (x1, y1) = (results[-2]["size"], values[-2]), (results[-1]["size"], values[-1])
            slope = (y1 - y0) / (x1 - x0)
            at_year = f"{max(y1, y1 + slope * (YEAR - x1)):,.2f}"
        lines.append(
            f"| {label} | " + " | ".join(f"{v:,.2f}" for v in values) + f" | {ratio:.2f} | {'**missed**' if grows else 'met'} | {at_year} |"
        )
    lines += [
        "",
        "| what the history held when measured | " + " | ".join(sizes) + " |",
        "|---|" + "---|" * len(results),
        "| batches (the built ones and those the measurement committed) | " + " | ".join(f"{r['batches_after']:,}" for r in results) + " |",
        "| table snapshots kept | " + " | ".join(f"{r['snapshots']:,}" for r in results) + " |",
        "| manifests in the current snapshot | " + " | ".join(f"{r['manifests']:,}" for r in results) + " |",
        "| files under the table's folders (data and metadata), which maintenance lists | "
        + " | ".join(f"{r['table_files']:,}" for r in results)
        + " |",
        "| maintenance: S3 LIST calls its listing would make (1,000 keys a call) | "
        + " | ".join(f"{r['maintenance_lists']:,}" for r in results)
        + " |",
        "| merged manifests' target size (`commit.manifest.target-size-bytes`), KiB | "
        + " | ".join(f"{r['manifest_target'] // 1024:,}" for r in results)
        + " |",
        "| the current snapshot's largest manifest: KiB / batches it lists | "
        + " | ".join(f"{r['largest_manifest'][0] // 1024:,} / {r['largest_manifest'][1]:,}" for r in results)
        + " |",
        "| commit records under `_commits/` | " + " | ".join(f"{r['commit_records']:,}" for r in results) + " |",
        "| recovery: S3 LIST calls its listings would make (1,000 keys a call) | "
        + " | ".join(f"{r['recovery_lists']:,}" for r in results)
        + " |",
        "| window backfill: ledger items read (candidates) / batches selected | "
        + " | ".join(f"{r['window_candidates']:,} / {r['window_batches']:,}" for r in results)
        + " |",
        "| one day's scan: batch ids / files planned | "
        + " | ".join(f"{r['scan_batches']:,} / {r['scan_files']:,}" for r in results)
        + " |",
        "| the whole operation, CPU s: recovery | " + " | ".join(f"{r['cpu']['recovery']:.1f}" for r in results) + " |",
        "| the whole operation, CPU s: maintenance | " + " | ".join(f"{r['cpu']['maintenance']:.1f}" for r in results) + " |",
        "| the whole operation, CPU s: one day's scan planning | " + " | ".join(f"{r['cpu']['scan']:.2f}" for r in results) + " |",
        "| history built in, s (wall, once; cached under /tmp) | " + " | ".join(f"{r['built_seconds']:.0f}" for r in results) + " |",
        "",
        "Recovery's LIST calls at 525,600 batches: " + f"{math.ceil(YEAR / S3_PAGE):,} (one listing of `_commits/`).",
        "",
        "Per batch: a plan, a commit, a backfill of one batch and the page are one batch's operation, so their figure is the "
        "whole operation's; a window's backfill is divided by the batches it selected, recovery and maintenance by the "
        "batches of the history, a day's scan planning by the files it planned. A figure beyond "
        f"{LIMIT} × is extrapolated to 525,600 batches along the line through the two largest histories.",
        "",
        "What differs from a pipeline's history of as many batches:",
        "",
        f"- **Snapshots.** The bulk batches are in the table by one merge-append each {CHUNK:,} batches, so it keeps "
        f"{CHUNK:,} times fewer snapshots for them; a pipeline whose maintenance runs by the default policy (5 days) keeps "
        "one a batch for 7,200 batches at a one-minute schedule, 1,440 at a one-day policy. What each kept snapshot adds "
        "to a commit is make bench-table's figure (0.027 ms a snapshot: about 0.2 s at 7,200), and it stops growing "
        "at the policy's count whatever the history's length.",
        "- **Manifests.** pyiceberg's manifest merging (`commit.manifest-merge.enabled`, the table's own setting) "
        "merged the bulk appends' manifests as it merges the pipeline's: by 100 manifests, up to its target size. Appended "
        "a thousand at a time, the manifests it merges are larger than one batch's, so the merged ones may be cut at "
        "other batch ids than a pipeline's, each as large at most.",
        "- **Ledger items, commit records, result manifests.** The bulk batches' are the template batch's (the last "
        "real one) with their own ids, ranges, sequence numbers, times and snapshot ids; their checksums and row "
        "digests are the template's, which a backfill of such a batch refuses (its replay's differ): the backfills "
        "here replay batches whose replay and manifest are real. The bulk commit records and result manifests are "
        "written without `files.write_json`'s indentation (the same JSON, parsed alike; Python indents in Python, "
        "about 5 ms a record).",
        "- **Data files.** Each bulk batch's folder holds the template batch's Parquet file (a hard link, so the file "
        "listings of maintenance see one file a batch), and its DataFile is the template's with its own path, "
        "partition and `batch_id` bounds (the other columns' statistics are the template's). Every batch is one "
        "record a shard and one file, as the fakes' replay writes it (a Spark job writes one a task).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--rebuild", action="store_true", help="build the histories again rather than reuse the cached ones")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave BENCHMARKS.md alone")
    parser.add_argument("--manifest-target", type=int, help="build with this commit.manifest.target-size-bytes (KR_HISTORY_CACHE apart)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()

    def progress(text: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s] {text}", flush=True)

    histories = []
    for size in (int(s) for s in args.sizes.split(",")):
        history = None if args.rebuild else History.load(size)
        histories.append(history if history is not None else build(size, progress, args.manifest_target))
    # The histories' ledgers and streams are millions of objects in this process (a real pipeline keeps them in DynamoDB
    # and Kinesis): out of the garbage collector's way, so that its passes over them are not counted as the steps' cost.
    gc.collect()
    gc.freeze()
    results = measure(histories, args.runs, progress)
    for history, figures in zip(histories, results, strict=True):
        figures["built_seconds"] = history.built_seconds
        history.save()  # the measurement committed and replayed batches: the cache holds the history as it is now
        (history.root / "figures.json").write_text(json.dumps(figures, indent=1))
        progress(f"{history.size:,}: {json.dumps(figures['cpu'])}")
    body = render(results, time.perf_counter() - started, f"history.py --sizes {args.sizes} --runs {args.runs}", args.runs)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.HISTORY, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
