"""The Spark side of reading closed ranges: each task reads some of the shard ranges, with mapInArrow."""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession

from kinesis_replay.config import ReadConfig
from kinesis_replay.job_spec import JobSpec, KinesisEndpoint
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.records import ROW_COLUMNS, to_rows

# Arrow's type for each Spark SQL type of records.ROW_COLUMNS.
_ARROW_TYPES = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "BINARY": pa.binary()}
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in ROW_COLUMNS)
ARROW_SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in ROW_COLUMNS])
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


def partitions(spec: JobSpec) -> list[RangePartition]:
    """One partition per range of the spec, planned on the driver."""
    return [
        RangePartition(i, spec.stream, r, spec.kinesis, spec.read, r.shard_id in spec.accept_gaps, spec.planned_at)
        for i, r in enumerate(spec.ranges)
    ]


class Earliest(AccumulatorParam[float]):
    """Merges wall-clock times into the earliest: when the first of a job's tasks made its first Kinesis call."""

    def zero(self, value: float) -> float:
        return math.inf

    def addInPlace(self, value1: float, value2: float) -> float:  # PySpark's name
        return min(value1, value2)


def first_call_accumulator(spark: SparkSession) -> Accumulator[float]:
    """Tasks add the time of their first call; the driver reads the earliest once the job is done."""
    return spark.sparkContext.accumulator(math.inf, Earliest())


# A task per range costs a Python round trip and a client each: at hundreds of shards that is most of a job.
# Tasks read their ranges one after another, so no more tasks than this many per core are needed to balance them.
TASKS_PER_CORE = 4


def read_ranges(spark: SparkSession, spec: JobSpec, first_call: Accumulator[float] | None = None) -> DataFrame:
    """Exactly the spec's ranges as rows: each Spark task reads some of them, one after another.

    ``spark.range`` gives each of its partitions a run of range indexes, and ``mapInArrow`` turns each
    index into that range's records. A job of few ranges has a task per range; one of many ranges has
    TASKS_PER_CORE tasks per core of ``spark.default.parallelism``, each reading its ranges in turn (as
    tasks of one range each would run in waves), with one client per Python worker. Not a Python Data
    Source: Spark would start three Python processes on the driver (to look up static data sources,
    create the source and plan its read) before the first task, seconds of every run's fixed cost.
    """
    planned = partitions(spec)
    tasks = max(1, min(len(planned), spark.sparkContext.defaultParallelism * TASKS_PER_CORE))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from read_partition(planned[index], first_call)

    return spark.range(0, len(planned), 1, tasks).mapInArrow(read, SCHEMA_DDL)


@functools.lru_cache(maxsize=4)
def kinesis_client(endpoint: KinesisEndpoint) -> Any:
    """One client per endpoint in each Python worker, shared by the ranges its tasks read (boto3 clients are thread-safe)."""
    import boto3

    from kinesis_replay.kinesis import CLIENT_CONFIG, leave_throttling_to_call

    session = boto3.session.Session(botocore_session=utc_botocore_session())
    return leave_throttling_to_call(
        session.client("kinesis", region_name=endpoint.region_name, endpoint_url=endpoint.endpoint_url, config=CLIENT_CONFIG)
    )


def sample_ranges(spark: SparkSession, spec: JobSpec, first_call: Accumulator[float] | None = None) -> DataFrame:
    """Made-up records, two shards of them, through the same path as ``read_ranges`` but without Kinesis.

    For the JVM's warm-up job: its JVM then loads the classes a replay loads (the Python runner,
    Arrow, the Parquet writer), which the class-data-sharing archive records.
    """
    shards = len(spec.ranges)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                if first_call is not None:
                    first_call.add(time.time())
                now = datetime.now(UTC)
                page = [
                    {"SequenceNumber": str(10**55 + n), "ApproximateArrivalTimestamp": now, "PartitionKey": str(n),
                     "Data": b'{"n": %d}' % n if n else b"not JSON"}  # one bad record: the quarantine is written too
                    for n in range(10)
                ]  # fmt: skip
                yield to_record_batch(spec.stream, f"shardId-{index:012d}", page)

    return spark.range(0, shards, 1, shards).mapInArrow(read, SCHEMA_DDL)


def read_partition(partition: RangePartition, first_call: Accumulator[float] | None = None) -> Iterator[pa.RecordBatch]:
    """In the task: read the range page by page with the worker's client, yield each page as an Arrow batch.

    Only one page is held at a time: each is converted and let go before the next is fetched.
    """
    from kinesis_replay.kinesis import ReadStats, iterate_range

    rng, limits = partition.range, partition.read
    # Credentials from the default chain: for a role connection, the AWS_PROFILE that assumes the role, which the
    # worker's session renews itself while it reads (kinesis_replay.credentials); never keys fixed when the job started.
    client = kinesis_client(partition.kinesis)
    stats = ReadStats()
    if first_call is not None:
        first_call.add(time.time())
    records, started, reported = 0, time.monotonic(), time.monotonic()
    for page in iterate_range(client, partition.stream, rng, limits, stats, accept_gap=partition.accept_gap):
        records += len(page)
        newest, batch = page[-1], to_record_batch(partition.stream, rng.shard_id, page)
        del page
        yield batch
        del batch
        if time.monotonic() - reported >= limits.progress_seconds:
            reported = time.monotonic()
            log.warning("%s: %d records read, %s", rng.describe(), records, position(rng, newest, partition.planned_at))
    seconds = max(time.monotonic() - started, 1e-9)
    log.warning(
        "%s: done, %d records, %.1f KiB in %.1fs (%.0f records/s, %.0f KiB/s); %d GetRecords calls, "
        "%d throttled (%.1fs waited), %.1fs pacing to the budget, %d expired iterators",
        rng.describe(), records, stats.bytes / 1024, seconds, records / seconds, stats.bytes / 1024 / seconds,
        stats.get_records_calls, stats.throttled, stats.throttled_seconds, stats.paced_seconds, stats.expired_iterators,
    )  # fmt: skip


def utc_botocore_session() -> Any:
    """A botocore session whose responses carry timestamps in UTC.

    botocore's default parser gives every timestamp the local zone (dateutil's tzlocal), whose
    conversion cost more CPU than anything else per record in a profile of this reader (each
    record's ApproximateArrivalTimestamp). The instant is the same; only its zone differs.
    """
    from botocore.session import get_session

    session = get_session()
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=utc_timestamp)
    return session


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


def to_record_batch(stream: str, shard_id: str, page: list[dict[str, Any]]) -> pa.RecordBatch:
    """One GetRecords page as Arrow columns, KPL aggregates deaggregated: no per-row Python objects reach Spark."""
    rows = to_rows(page)
    # Two columns are the page's; the others are the Rows' attributes of the same names.
    page_columns = {"stream_name": [stream] * len(rows), "shard_id": [shard_id] * len(rows)}
    arrays = [pa.array(page_columns[f.name] if f.name in page_columns else getattr(rows, f.name), f.type) for f in ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
