"""The pipelines config's `read` and `max_batch` sections: each key declared once (kinesis_replay.core.options)."""

from __future__ import annotations

import re
from datetime import timedelta

from kinesis_replay.core.options import option, section

# A consumer's name (1 to 128 of these characters) or its ARN:
# arn:<partition>:kinesis:<region>:<account>:stream/<stream>/consumer/<name>:<created>.
_NAME = r"[a-zA-Z0-9_.-]"
_CONSUMER = re.compile(rf"^(?:{_NAME}{{1,128}}|arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{{12}}:stream/{_NAME}+/consumer/{_NAME}+:\d+)$")


@section
class ReadConfig:
    """Per-shard read budget and throttling waits; the defaults are Kinesis's own limits.

    Kinesis allows each shard 5 GetRecords calls and 2 MB of reads a second, and 5 GetShardIterator
    calls a second; GetRecords returns at most 10,000 records (10 MB) a call.

    GetRecords takes a count of records, not of bytes, so a range's reader asks each call for as
    many records as fill about ``page_bytes`` at the mean record size of its last page (at most
    ``max_records_per_call``; the first call asks for ``first_page_records``). That bounds a
    reader's memory by about one such page, whatever the range's length, while record sizes stay
    alike (a sudden jump in size can bring one larger page, at most Kinesis's 10 MB). The default,
    2 MiB, is one second of a shard's read budget: at 5 calls a second no page needs to be larger.
    """

    max_records_per_call: int = option(
        "the largest GetRecords `Limit` (10,000 is the most Kinesis returns)",
        default=10_000,
        minimum=1,
        maximum=10_000,
        limit="the most GetRecords returns",
    )
    page_bytes: int = option(
        "each GetRecords asks for as many records as fill about this many bytes at the last page's mean record size, so a "
        "reader holds one page of about 2 MiB whatever the range's length (one second of a shard's read budget: it costs "
        "Kinesis throughput nothing)",
        default=2 * 1024 * 1024,
        minimum=1,
    )
    first_page_records: int = option("the `Limit` of a range's first GetRecords, before any record size is known", default=1_000, minimum=1)
    get_records_per_second: float = option("per-shard budget of GetRecords calls", default=5.0)
    bytes_per_second: float = option("per-shard budget of bytes read (2 MB/s)", default=2 * 1024 * 1024)
    get_shard_iterator_per_second: float = option("per-shard budget of GetShardIterator calls", default=5.0)
    max_throttle_retries: int = option("throttled calls waited out per call before the batch fails", default=20)
    throttle_base_seconds: float = option("the first wait after a throttled call", default=0.2)
    throttle_max_seconds: float = option("the longest wait after a throttled call", default=10.0)
    progress_seconds: float = option("how often each shard's reader logs its progress", default=30.0)
    # Shards planned (and checkpoints committed) at once. Each shard keeps to its own call budget; Kinesis limits
    # GetShardIterator and GetRecords per shard, not per stream, so this bounds only our own threads and connections.
    # A shard's plan mostly waits (its GetRecords calls are 0.2 s apart): at 32, 1,000 idle shards planned in 32
    # waves and used 42% of 2 cores; at 128 the plan is bound by the CPU (make bench-planning).
    plan_concurrency: int = option(
        "shards planned, and checkpoints committed, at once (Kinesis limits calls per shard, so this bounds only our own "
        "threads and pooled connections; a shard's plan mostly waits for its budget)",
        default=128,
        minimum=1,
    )
    # Ranges one Spark task reads at once, each paced by its own shard's budget: a task mostly waits for budgets, so
    # one core can serve many shards (about ten at Kinesis's 2 MB/s). A task holds about two pages per range it reads.
    task_concurrency: int = option(
        "ranges one Spark task reads at once, a thread each, each within its own shard's budget (a task holds about two "
        "pages per range it reads); see [Sizing executors against the stream](deployment.md#sizing-executors-against-the-stream)",
        default=16,
        minimum=1,
    )

    # Enhanced fan-out (docs/design.md#reading-over-enhanced-fan-out): with a consumer, each range is read by
    # SubscribeToShard over HTTP/2 (adapters/efo_reader.py) at the consumer's own 2 MB/s a shard, leaving the shared
    # GetRecords budget to the stream's other consumers. Planning still reads a handful of records a shard by GetRecords.
    consumer: str | None = option(
        "an enhanced fan-out consumer of the stream (its name or ARN): replays then read each range with SubscribeToShard, "
        "at the consumer's own 2 MB/s a shard, instead of GetRecords within the budget above, which the stream's other "
        "consumers share; see [Reading over enhanced fan-out](design.md#reading-over-enhanced-fan-out)",
        default=None,
        pattern=_CONSUMER,
        must="must be a Kinesis stream consumer's name (1 to 128 letters, digits, '_', '.' and '-') or its ARN",
    )
    subscribe_interval_seconds: float = option(
        "the least time between two SubscribeToShard calls of the consumer to one shard (Kinesis allows one a second)", default=1.0
    )
    in_use_wait_seconds: float = option(
        "the wait before subscribing again after ResourceInUseException (Kinesis refuses a second subscription of a "
        "consumer to a shard within 5 s of the last)",
        default=5.0,
    )
    subscription_events: int = option(
        "events of a subscription held for its reader at most (each up to a second of the shard's records): a "
        "subscription's memory is about this many events, however long its range",
        default=2,
        minimum=1,
    )


# Kinesis takes at most 1 MiB a second into a shard: what a shard whose rate is not known yet is assumed to hold.
SHARD_WRITE_BYTES_PER_SECOND = 1024 * 1024


@section
class MaxBatch:
    """How much one batch may take from a shard; a range is capped at whichever limit comes first.

    ``span``: the arrival time its records may span, from its first record. ``read_minutes``: its estimated
    read time at the shard's read budget, turned into a span by the shard's write rate (measured on its last
    committed range, else Kinesis's per-shard write limit, the most it can hold). The capped range ends at the
    newest record that arrived before the cap; the rest is the next batch's.
    """

    span: timedelta = option(
        "the arrival time one range may span; see [Bounded batches and catch-up](design.md#bounded-batches-and-catch-up)",
        default=timedelta(hours=1),
    )
    read_minutes: float = option("one range's estimated read time at the read budget", default=30.0)

    def span_for(self, bytes_per_second: float | None, read: ReadConfig) -> timedelta:
        """The arrival span a range of a shard writing ``bytes_per_second`` may cover."""
        rate = bytes_per_second if bytes_per_second and bytes_per_second > 0 else SHARD_WRITE_BYTES_PER_SECOND
        by_read_time = timedelta(seconds=self.read_minutes * 60 * read.bytes_per_second / rate)
        return min(self.span, by_read_time)
