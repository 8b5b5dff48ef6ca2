"""The Spark side of reading closed ranges: a task per core reads its share of the shard ranges concurrently, and writes them."""

from __future__ import annotations

import functools
import heapq
import json
import logging
import math
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from kinesis_replay.adapters.attempt_writer import AttemptWriter, TaskReport, page_rows
from kinesis_replay.adapters.files import S3Access, reaching_s3
from kinesis_replay.core.config import SHARD_WRITE_BYTES_PER_SECOND, ReadConfig
from kinesis_replay.core.errors import ConsumerError
from kinesis_replay.core.formats import ProgressLine
from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint, S3Endpoint
from kinesis_replay.core.ranges import SequenceRange

log = logging.getLogger("kinesis_replay.spark")


@dataclass(frozen=True)
class RangePartition:
    """One shard range; small and picklable. The boto3 client is opened in the task, not here."""

    index: int
    stream: str
    range: SequenceRange
    kinesis: KinesisEndpoint
    read: ReadConfig
    accept_gap: bool = False  # an operator acknowledged that this range's first records may be gone
    planned_at: datetime | None = None
    retention: timedelta | None = None  # the stream's: a page read near it is checked (range_reader.iterate_range)
    consumer_arn: str | None = None  # read.consumer, resolved on the driver: the range is read over enhanced fan-out


def partitions(spec: JobSpec, consumer_arn: str | None = None) -> list[RangePartition]:
    """One partition per range of the spec, planned on the driver."""
    return [
        RangePartition(
            i, spec.stream, r, spec.kinesis, spec.read, r.shard_id in spec.accept_gaps, spec.planned_at, spec.retention, consumer_arn
        )
        for i, r in enumerate(spec.ranges)
    ]


def efo_consumer(spark: SparkSession, spec: JobSpec) -> str | None:
    """The ARN of the pipeline's enhanced fan-out consumer (``read.consumer``), resolved once on the driver (registered
    on first use, waited for until ACTIVE), or None when the pipeline reads by GetRecords.

    Refused with Spark speculation on: a speculative copy of a task would subscribe to the same shards with the same
    consumer and take each subscription over from the original every 5 s (the readers survive it, each renewing at its
    own last record, but both crawl). A retried task's new attempt can meet its failed attempt's subscription still
    open; it takes it over after the 5 s Kinesis requires (efo_reader).
    """
    if spec.read.consumer is None:
        return None
    speculation = (
        spark.conf.get("spark.speculation", "false") if is_remote(spark) else spark.sparkContext.getConf().get("spark.speculation", "false")
    )
    if str(speculation).strip().lower() == "true":
        raise ConsumerError(
            f"stream {spec.stream}: read.consumer {spec.read.consumer} reads over enhanced fan-out, where a speculative task "
            "would take the subscriptions over from the task it copies: set spark.speculation to false for this pipeline"
        )
    from kinesis_replay.adapters.efo_reader import resolve_consumer

    return resolve_consumer(kinesis_client(spec.kinesis), spec.stream, spec.read.consumer, spec.read, pipeline=spec.pipeline_name)


# (shard id, the last record read, the first record after it or None) where records between the two may have been
# trimmed unread: a range read near the retention, with the loss acknowledged (kinesis_client.ReadStats.unconfirmed).
Unconfirmed = tuple[str, int, int | None]


class Spans:
    """A task attempt's unconfirmed spans, added from its own thread (``read_group`` carries its readers' there)."""

    def __init__(self) -> None:
        self.value: list[Unconfirmed] = []

    def add(self, spans: list[Unconfirmed]) -> None:
        self.value += spans


class Earliest:
    """The earliest of the wall-clock times added: when a task attempt made its first Kinesis call."""

    def __init__(self) -> None:
        self.value = math.inf

    def add(self, at: float) -> None:
        self.value = min(self.value, at)


@dataclass
class TaskNotes:
    """What a task attempt notes as it reads, besides its rows: they travel in its report to the driver.

    Not Spark accumulators: those live on the SparkContext, which the job then needs; a report is the job's own, and
    only a successful attempt's reaches the driver (a retried task's first attempt adds nothing).
    """

    first_call: Earliest = field(default_factory=Earliest)
    unconfirmed: Spans = field(default_factory=Spans)


# A task's pages, by the task's index, its notes taken as it reads: each page one shard's rows.
Pages = Callable[[int, TaskNotes], Iterator[pa.RecordBatch]]


def range_tasks(spark: SparkSession, spec: JobSpec) -> tuple[int, Pages]:
    """Exactly the spec's ranges, dealt to tasks: how many tasks, and what each one reads.

    A shard's reads are bounded by its budget (2 MB/s at Kinesis's limits), not by the core: a task that read
    its ranges one after another would mostly wait, and a batch of more shards than cores would take as many
    times the physical limit as it has waves. So the ranges are dealt to ``spark.default.parallelism`` tasks,
    balanced by their planned size (``task_ranges``), and each task reads up to ``read.task_concurrency`` of them
    at once, one thread per range, each kept to its own shard's budget (``read_group``).
    """
    planned = partitions(spec, efo_consumer(spark, spec))
    groups = task_ranges(spec, task_slots(spark))
    return len(groups), lambda task, notes: read_group([planned[i] for i in groups[task]], notes.first_call, notes.unconfirmed)


def task_slots(spark: SparkSession) -> int:
    """How many tasks run at once: ``spark.default.parallelism``, which Spark sets to the cores of a local master or
    of a cluster's executors (and a user may set). A Spark Connect session has no SparkContext to ask: there it is
    the setting, and without one no cap: task_ranges then deals a task to each range."""
    if not is_remote(spark):
        return int(spark.sparkContext.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    return int(configured) if configured else sys.maxsize


def is_remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server elsewhere) rather than a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


REPORT_SCHEMA = pa.schema([("report", pa.string())])


def job_s3(endpoint: S3Endpoint) -> S3Access:
    """The job's way to S3 (on the driver and in each task): its own credentials, from boto3's chain (the environment,
    the profile that assumes the connection's role, the instance or job role), to the connection's S3 endpoint."""
    import boto3

    return S3Access(boto3.session.Session(), endpoint.endpoint_url, endpoint.region_name, "the replay job's credentials")


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
LARGE_BLOCK_BYTES = 1024 * 1024


@functools.cache  # once a process
def return_large_blocks() -> None:
    """Have glibc's malloc give a task's large blocks back to the system when they are freed.

    A page's blocks are megabytes: its response, its JSON text, its Arrow buffers. glibc serves a block above the
    mmap threshold from a mapping of its own and unmaps it when freed, but raises the threshold to each such block
    freed (up to 32 MiB): from the first pages on, the readers' threads keep pages' worth of freed heap each. With
    the threshold fixed at ``LARGE_BLOCK_BYTES`` (and the heap's top given back once twice that is free), the
    largest worker of a 400,000-record job peaked at 173 MiB instead of 192, medians of 3, for 0.3 CPU-seconds more
    (BENCHMARKS.md, the memory target). Elsewhere than glibc, nothing changes.
    """
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return
    mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)
    mallopt(_M_TRIM_THRESHOLD, 2 * LARGE_BLOCK_BYTES)


class _NoPandas:
    """A path finder that has no pandas (arrow_without_pandas)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ImportError("pandas is not looked for by the replay task's pyarrow (kinesis_source.arrow_without_pandas)")


@functools.cache  # once a process
def arrow_without_pandas() -> None:
    """Keep pyarrow from importing pandas in this process only to rule it out.

    The first time pyarrow turns a Python list into an array, it imports pandas, when installed, to ask whether the list
    is a pandas object: 0.4 CPU-seconds in each Python worker, and a task's lists never are. Here pyarrow's first try
    finds no pandas, so its conversions never ask again. What needs pandas through pyarrow (``to_pandas``, a list of
    strings without a type) still gets it: pyarrow imports it again there. Nothing to do where pandas is imported.
    """
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([], pa.null())
    finally:
        sys.meta_path.remove(_NoPandas)


@dataclass(frozen=True)
class TasksDone:
    """What the tasks that succeeded reported: their files and tallies, their earliest Kinesis call, their spans."""

    reports: list[TaskReport]
    first_call: float  # math.inf when no task called Kinesis
    unconfirmed: list[Unconfirmed]


def write_tasks(
    spark: SparkSession, tasks: int, pages: Pages, writer: Callable[[int], AttemptWriter], s3: S3Endpoint | None = None
) -> TasksDone:
    """Run the tasks, each writing its pages as it reads them (``writer(task)``: an AttemptWriter), and return what
    the task attempts that succeeded reported, one each.

    A task attempt that fails deletes what it wrote, as far as it can (``AttemptWriter.abort``); Spark runs the task
    again, whose files are named for its own attempt. What a failed attempt could not delete is in no report: the
    driver removes it (``replay_job.write_as_read``).

    A classic session runs the tasks as an RDD of their indexes, each task's report one string: nothing crosses into
    Spark SQL, so neither the driver nor a worker imports pandas (``mapInArrow``'s check of its version) and the JVM
    plans no query. A Spark Connect session has no RDDs: there ``spark.range`` gives each task its index and
    ``mapInArrow`` runs it. Not a Python Data Source: Spark would start three Python processes on the driver (to look
    up static data sources, create the source and plan its read) before the first task, seconds of every run's
    fixed cost.
    """

    def run_task(task: int) -> str:
        # pyarrow's allocations through the C library's malloc, which hands freed pages back as the task writes page
        # after page; pyarrow's default (mimalloc) keeps them: the largest worker of a 40,000-record job held 247 MiB
        # with it, 216 MiB with malloc, for the same CPU. What Arrow allocates from its own default pool (Parquet's and
        # the file systems' buffers) follows the workers' ARROW_DEFAULT_MEMORY_POOL, which the launchers set to
        # malloc too (config.DEFAULT_SPARK_CONF); a Spark Connect server's executors get it from the server's conf.
        pa.set_memory_pool(pa.system_memory_pool())
        arrow_without_pandas()
        return_large_blocks()
        notes = TaskNotes()
        with reaching_s3(job_s3(s3 or S3Endpoint())):
            out = writer(task)
            try:
                for page in pages(task, notes):
                    out.write(page)
                report = out.close()
            except BaseException:
                out.abort()
                raise
        first_call = notes.first_call.value if math.isfinite(notes.first_call.value) else None
        return json.dumps({"written": report.to_json(), "first_call": first_call, "unconfirmed": notes.unconfirmed.value})

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                yield pa.RecordBatch.from_pylist([{"report": run_task(task)}], schema=REPORT_SCHEMA)

    if is_remote(spark):
        reports = [row["report"] for row in spark.range(0, tasks, 1, tasks).mapInArrow(write, "report STRING").collect()]
    else:
        reports = spark.sparkContext.parallelize(range(tasks), tasks).map(run_task).collect()
    said = [json.loads(r) for r in reports]
    calls = [s["first_call"] for s in said if s["first_call"] is not None]
    return TasksDone(
        [TaskReport.from_json(s["written"]) for s in said],
        min(calls, default=math.inf),
        [(shard, after, first) for s in said for shard, after, first in s["unconfirmed"]],
    )


def range_weights(spec: JobSpec) -> list[float]:
    """Each range's planned size in bytes: planning's estimate where it has one (the shard's rate on its last
    committed range), else the range's arrival span at the estimated shards' mean rate (at the most a shard
    takes in, 1 MiB/s, when none has an estimate). A weight only balances tasks: it never changes what is read.
    """
    spans = [
        max(0.0, (spec.planned_at - r.start_arrival).total_seconds()) if spec.planned_at and r.start_arrival else None for r in spec.ranges
    ]
    known = [s for s in spans if s is not None]
    typical_span = statistics.median(known) if known else 1.0
    spans_or_typical = [typical_span if s is None else s for s in spans]
    estimated = [(spec.estimated_bytes[r.shard_id], span) for r, span in zip(spec.ranges, spans_or_typical, strict=True)
                 if r.shard_id in spec.estimated_bytes]  # fmt: skip
    seconds = sum(span for _, span in estimated)
    rate = sum(size for size, _ in estimated) / seconds if seconds > 0 else float(SHARD_WRITE_BYTES_PER_SECOND)
    return [
        float(spec.estimated_bytes[r.shard_id]) if r.shard_id in spec.estimated_bytes else span * rate
        for r, span in zip(spec.ranges, spans_or_typical, strict=True)
    ]


def task_ranges(spec: JobSpec, cores: int) -> list[list[int]]:
    """The spec's range indexes dealt to at most ``cores`` tasks, balanced by planned size (``range_weights``).

    Largest first, each to the task with the least so far (LPT): no task holds more than the mean plus one range.
    Within a task the ranges are in that order too, so that when it has more than ``read.task_concurrency`` the
    largest start first.
    """
    return balance(range_weights(spec), max(1, min(cores, len(spec.ranges))))


def balance(weights: list[float], tasks: int) -> list[list[int]]:
    """Indexes of ``weights`` in ``tasks`` groups of about equal sums, each group largest first; no group empty."""
    groups: list[list[int]] = [[] for _ in range(tasks)]
    loads = [(0.0, task) for task in range(tasks)]
    for index in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        load, task = heapq.heappop(loads)
        groups[task].append(index)
        heapq.heappush(loads, (load + weights[index], task))
    return [g for g in groups if g]


class _Failed:
    """A reader thread's error, carried to the task's thread through the queue."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Unconfirmed:
    """A reader thread's unconfirmed span, carried to the task's thread, which adds it to the task's notes."""

    def __init__(self, span: Unconfirmed) -> None:
        self.span = span


_DONE = object()  # a reader thread has no range left
_PUT_SECONDS = 0.5  # how often a reader waiting for room in the queue checks whether the task has stopped


def read_group(
    group: list[RangePartition], first_call: Earliest | None = None, unconfirmed: Spans | None = None
) -> Iterator[pa.RecordBatch]:
    """In the task: read the group's ranges concurrently, up to ``read.task_concurrency`` at a time; yield their pages.

    Each range is read by ``read_partition`` in a thread of its own, with its own shard's budget, throttling
    waits and progress lines; the threads share the worker's Kinesis client. Their pages reach the task through a
    queue of one page per thread, so a task holds about two pages per range it reads at once (one being fetched
    or converted, one waiting), whatever the ranges' lengths. The first error stops the other readers (each
    after its current call) and fails the task with it.
    """
    noted = None if unconfirmed is None else (lambda span: unconfirmed.add([span]))
    if len(group) == 1:
        yield from read_partition(group[0], first_call, noted)
        return
    if first_call is not None:
        first_call.add(time.time())  # the readers start now; notes are added to from the task's thread only
    readers = _Readers(group, noted)
    try:
        yield from readers.pages()
    finally:
        readers.stop()


class _Readers:
    """The reader threads of one task, and the bounded queue that hands their pages to the task's thread."""

    def __init__(self, group: list[RangePartition], noted: Callable[[Unconfirmed], None] | None = None) -> None:
        self.noted = noted  # the task's: called from its own thread
        self.count = min(len(group), group[0].read.task_concurrency)
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=self.count)
        self.stopped = threading.Event()
        self.todo = iter(group)
        self.todo_lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, name=f"kinesis-replay-reader-{n}", daemon=True) for n in range(self.count)]
        for thread in self.threads:
            thread.start()

    def pages(self) -> Iterator[pa.RecordBatch]:
        done = 0
        while done < self.count:
            item = self.queue.get()
            if item is _DONE:
                done += 1
            elif isinstance(item, _Failed):
                raise item.error
            elif isinstance(item, _Unconfirmed):
                assert self.noted is not None  # only readers given a place to note a span send one
                self.noted(item.span)
            else:
                yield item
                del item  # the task holds one page at a time

    def stop(self) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join()

    def _next(self) -> RangePartition | None:
        with self.todo_lock:
            return next(self.todo, None)

    def _put(self, item: Any) -> bool:
        """Wait for room in the queue; False when the task stopped meanwhile."""
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=_PUT_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _note(self, span: Unconfirmed) -> None:
        """From a reader thread: the span goes to the task's thread, which adds it to the task's notes."""
        self._put(_Unconfirmed(span))

    def _read(self) -> None:
        try:
            while not self.stopped.is_set() and (partition := self._next()) is not None:
                for batch in read_partition(partition, noted=None if self.noted is None else self._note):
                    if not self._put(batch):
                        return
        except BaseException as exc:  # carried to the task's thread, which raises it
            self._put(_Failed(exc))
        finally:
            self._put(_DONE)


@functools.lru_cache(maxsize=4)
def kinesis_client(endpoint: KinesisEndpoint, connections: int = 0) -> Any:
    """One client per endpoint in each Python worker, shared by the ranges its tasks read (boto3 clients are thread-safe),
    with a pooled connection for each of ``connections`` reader threads (at least the default pool)."""
    import boto3

    from kinesis_replay.adapters.kinesis_client import CLIENT_CONFIG, leave_throttling_to_call, pooled

    config = pooled(CLIENT_CONFIG, connections)
    botocore_session = utc_botocore_session()
    if endpoint.config_file is not None:  # the stream's own connection: its profile, in a file only this client loads
        if not os.path.isfile(endpoint.config_file):
            raise FileNotFoundError(
                f"the job spec reads the stream through profile {endpoint.profile} of {endpoint.config_file}, which is not "
                "on this machine: the launcher writes it beside the spec, on the Airflow worker, for a job in local mode. "
                "Executors elsewhere bring their own credentials (docs/deploy-aws.md: Streams in other accounts)"
            )
        botocore_session.set_config_variable("config_file", endpoint.config_file)
        botocore_session.set_config_variable("credentials_file", os.devnull)  # the worker's shared credentials never mix in
    # An explicit profile also takes precedence over the environment's key variables (the pipeline connection's keys).
    session = boto3.session.Session(botocore_session=botocore_session, profile_name=endpoint.profile)
    return leave_throttling_to_call(
        session.client("kinesis", region_name=endpoint.region_name, endpoint_url=endpoint.endpoint_url, config=config)
    )


def sample_tasks(spark: SparkSession, spec: JobSpec) -> tuple[int, Pages]:
    """Made-up records, a shard of them for each of the spec's ranges, through the same path as ``range_tasks`` but
    without Kinesis.

    For the JVM's warm-up job: its JVM then loads the classes a replay loads (the Python runner, Arrow), which the
    class-data-sharing archive records.
    """

    def pages(index: int, notes: TaskNotes) -> Iterator[pa.RecordBatch]:
        notes.first_call.add(time.time())
        now = datetime.now(UTC)
        page = [
            {"SequenceNumber": str(10**55 + n), "ApproximateArrivalTimestamp": now, "PartitionKey": str(n),
             "Data": b'{"n": %d}' % n if n else b"not JSON"}  # one bad record: the quarantine is written too
            for n in range(10)
        ]  # fmt: skip
        yield page_rows(spec.stream, f"shardId-{index:012d}", page)

    return len(spec.ranges), pages


def read_partition(
    partition: RangePartition, first_call: Earliest | None = None, noted: Callable[[Unconfirmed], None] | None = None
) -> Iterator[pa.RecordBatch]:
    """In the task: read the range page by page with the worker's client, yield each page as an Arrow batch.

    Only one page is held at a time: each is converted and let go before the next is fetched. Spans the reader could
    not confirm (an acknowledged loss near the retention) go to ``noted`` once the range is read.
    """
    from kinesis_replay.adapters.kinesis_client import ReadStats
    from kinesis_replay.adapters.range_reader import iterate_range

    rng, limits = partition.range, partition.read
    # Credentials from the default chain: for a role connection, the AWS_PROFILE that assumes the role, which the
    # worker's session renews itself while it reads (kinesis_replay.launchers.credentials); never keys fixed when the job started.
    client = kinesis_client(partition.kinesis, limits.task_concurrency)
    stats = ReadStats()
    if first_call is not None:
        first_call.add(time.time())
    records, started, reported = 0, time.monotonic(), time.monotonic()
    if partition.consumer_arn is not None:  # over enhanced fan-out: SubscribeToShard over HTTP/2, the same checks
        from kinesis_replay.adapters.efo_reader import iterate_range_efo
        from kinesis_replay.adapters.efo_transport import subscribe_over_http2

        pages = iterate_range_efo(
            subscribe_over_http2(client), partition.stream, partition.consumer_arn, rng, limits, stats,
            accept_gap=partition.accept_gap, retention=partition.retention,
        )  # fmt: skip
    else:
        pages = iterate_range(client, partition.stream, rng, limits, stats, accept_gap=partition.accept_gap, retention=partition.retention)
    for page in pages:
        records += len(page)
        newest, batch = page[-1], page_rows(partition.stream, rng.shard_id, page)
        del page
        yield batch
        del batch
        if time.monotonic() - reported >= limits.progress_seconds:
            reported = time.monotonic()
            log.warning("%s", ProgressLine(rng.describe(), records, False, position(rng, newest, partition.planned_at)).to_line())
    seconds = max(time.monotonic() - started, 1e-9)
    cost = (
        f"{stats.bytes / 1024:.1f} KiB in {seconds:.1f}s ({records / seconds:.0f} records/s, {stats.bytes / 1024 / seconds:.0f} KiB/s); "
        f"{stats.get_records_calls} GetRecords calls, {stats.throttled} throttled ({stats.throttled_seconds:.1f}s waited), "
        f"{stats.paced_seconds:.1f}s pacing to the budget, {stats.expired_iterators} expired iterators"
    )
    if partition.consumer_arn is not None:
        cost += f"; over enhanced fan-out: {stats.subscriptions} subscriptions ({stats.renewals} renewals, {stats.in_use} in use)"
    log.warning("%s", ProgressLine(rng.describe(), records, True, cost).to_line())
    for after, first in stats.unconfirmed:
        if noted is None:
            raise RuntimeError(
                f"stream {partition.stream}, range {rng.describe()}: records after {after} may be lost, and "
                "this read has nowhere to note it"
            )
        noted((rng.shard_id, after, first))


def utc_botocore_session() -> Any:
    """A botocore session whose responses carry timestamps in UTC, and whose GetRecords pages are parsed in one loop.

    botocore's default parser gives every timestamp the local zone (dateutil's tzlocal), whose
    conversion cost more CPU than anything else per record in a profile of this reader (each
    record's ApproximateArrivalTimestamp). The instant is the same; only its zone differs.

    Its JSON parser then walks each record's shape member by member, a handful of calls per field: a third of
    a reader's CPU per record in a profile. ``records_parser`` gives the same records for less (``GetRecordsParser``).
    """
    from botocore import parsers
    from botocore.session import get_session

    base: Any = parsers.ResponseParserFactory  # its internals, which botocore's type stubs leave out

    class Factory(base):  # type: ignore[misc]
        def create_parser(self, protocol_name: str) -> Any:
            if protocol_name == "json":
                return records_parser()(**self._defaults)
            return super().create_parser(protocol_name)

    session = get_session()
    factory = Factory()
    factory.set_parser_defaults(timestamp_parser=utc_timestamp)
    session.register_component("response_parser_factory", factory)
    return session


@functools.cache
def records_parser() -> type:
    """botocore's parser of the json protocol (Kinesis's), with GetRecords' records built in one loop.

    Each record is the dict botocore's own walk over its shape gives (the same members, types and values: a test
    compares the two on every member and on records that lack some); a record without one of the four members every
    Kinesis record carries takes botocore's own walk. The rest of the page (the next iterator, the child shards) and
    every other call are botocore's.
    """
    from binascii import a2b_base64

    from botocore import parsers

    base: Any = parsers.JSONParser  # its internals, which botocore's type stubs leave out

    class GetRecordsParser(base):  # type: ignore[misc]
        def _handle_json_body(self, raw_body: bytes, shape: Any) -> Any:
            if shape is None or shape.name != "GetRecordsOutput":
                return super()._handle_json_body(raw_body, shape)
            body = self._parse_body_as_json(raw_body)
            records = body.pop("Records", None)
            parsed = self._parse_shape(shape, body)
            if records is not None:
                parsed["Records"] = self._records(shape.members["Records"].member, records)
            return parsed

        def _records(self, shape: Any, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            """Each record in place of its JSON, which is let go at once: a page's base64 text and its bytes are not
            both held whole."""
            timestamp, from_epoch = self._timestamp_parser, datetime.fromtimestamp
            for i, r in enumerate(records):
                sequence, arrival = r.get("SequenceNumber"), r.get("ApproximateArrivalTimestamp")
                data, key = r.get("Data"), r.get("PartitionKey")
                if sequence is None or arrival is None or data is None or key is None:
                    records[i] = self._parse_shape(shape, r)
                    continue
                record = {
                    "SequenceNumber": sequence,
                    "ApproximateArrivalTimestamp": from_epoch(arrival, UTC) if arrival.__class__ is float else timestamp(arrival),
                    "Data": a2b_base64(data), "PartitionKey": key,
                }  # fmt: skip
                if (encryption := r.get("EncryptionType")) is not None:
                    record["EncryptionType"] = encryption
                records[i] = record
            return records

    return GetRecordsParser


def utc_timestamp(value: Any) -> Any:
    """Kinesis sends epoch seconds; anything else goes to botocore's own parser."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


def position(rng: SequenceRange, record: dict[str, Any], planned_at: datetime | None) -> str:
    """Where the reader is: the last record's arrival, and how far that is through the range's time span."""
    arrival: datetime = record["ApproximateArrivalTimestamp"]
    where = f"at {record['SequenceNumber']} (arrived {arrival.isoformat(timespec='seconds')}"
    if rng.start_arrival is not None and planned_at is not None:
        span = (planned_at - rng.start_arrival).total_seconds()
        if span > 0:
            where += f", {min(100.0, 100 * (arrival - rng.start_arrival).total_seconds() / span):.0f}% of the range's time span"
    return where + ")"
