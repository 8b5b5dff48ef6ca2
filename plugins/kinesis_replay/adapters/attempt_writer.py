"""What a replay task writes: its rows as Parquet files, as they are read, and a report of exactly what the files hold.

One writer per task attempt, writing with pyarrow through the output's file system (local disk, or S3 through
``files.s3_access()``). Rows come a page at a time, each page one shard's, and a shard's pages in arrival order (a
range is read front to back). The writer keeps a buffer per shard and writes it as a row group of its own when it
is full, when the task's buffers hold too much in all, or when the task ends: each row group holds one shard's
consecutive records, so its statistics bound their arrival times and a query by arrival time prunes row groups,
with no sort of the task's rows. Rows with a ``decode_error`` go to the quarantine's file the same way. Memory stays
at a buffer of at most ``ROW_GROUP_BYTES`` per shard being read, and ``TASK_BUFFER_BYTES`` in all (the largest
buffer is written early past it), whatever a range's length and however many ranges a task reads.

As it writes, it tallies per shard what the ``ReplayResult`` needs (``ShardTally``): rows and bad rows, bytes, the
first and last sequence numbers, the row checksum (Spark's ``xxhash64`` of the row, as the job computed it from the
files before, so that a backfill of a batch replayed by an older release compares like with like) and the row digest
(``records.row_digest``, which verify recomputes from the files). Its report names every file it wrote: the driver
builds the manifest from the reports of the attempts that succeeded, and nothing else.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kinesis_replay.adapters.files import arrow_row_schema, filesystem_of
from kinesis_replay.adapters.json_columns import JsonColumns
from kinesis_replay.core.errors import OutputIOError
from kinesis_replay.core.records import DIGEST_SEPARATOR, PARTITION_COLUMN, format_digest, to_rows
from kinesis_replay.core.state import ShardResult

ROW_GROUP_BYTES = 4 * 1024 * 1024  # a shard's buffer is written as a row group once it holds this much payload
ROW_GROUP_ROWS = 64 * 1024  # ... or this many rows
TASK_BUFFER_BYTES = 32 * 1024 * 1024  # past this much payload buffered in all, the largest buffer is written at once
# Columns whose values (nearly) never repeat: no dictionary is tried for them. Parquet's writer would build one for each
# row group's first values, find it too large, and write them plain after all, at a cost in memory and CPU.
UNIQUE_COLUMNS = ("sequence_number", "approximate_arrival_timestamp", "data")
FILE_BYTES = 512 * 1024 * 1024  # a file is closed, and the next one opened, past this much payload
CHECKSUM_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number", "partition_key", "data")
_SPARK_HASH_SEED = 42  # Spark's xxhash64 starts from this seed, and hashes each column with the hash so far as seed
DATA, QUARANTINE = "data", "quarantine"


_LONG = struct.Struct("<q").pack


def _binary_values(column: Any) -> Iterable[Any]:
    """A binary column's values as views of its buffer, None for a null: no copy of each value, as ``to_pylist`` makes."""
    if column.null_count:
        copied: list[Any] = column.to_pylist()
        return copied
    _, offsets, values = column.buffers()
    if values is None:  # no value has a byte
        return [b""] * len(column)
    import pyarrow as pa

    wide = pa.types.is_large_binary(column.type)  # 64-bit offsets, else 32
    at = (memoryview(offsets).cast("q") if wide else memoryview(offsets).cast("i"))[column.offset : column.offset + len(column) + 1]
    view = memoryview(values)
    return (view[start:end] for start, end in itertools.pairwise(at))


def _row_sums(batch: Any, checksum: int, digest: int) -> tuple[int, int]:
    """``checksum`` and ``digest`` plus the page's rows' checksums and digests, in one loop.

    The checksum is Spark SQL's ``xxhash64(CHECKSUM_COLUMNS)``: XXH64 of each value that is not null (a string's UTF-8
    bytes, a BIGINT's 8 little-endian bytes, a binary's bytes), seeded with the hash so far from 42, as a signed 64-bit
    number. The digest is records.row_digest (XXH3 of the joined row). The page's one shard id, the first column of
    both, is hashed once."""
    import xxhash

    xx, xx3 = xxhash.xxh64_intdigest, xxhash.xxh3_64_intdigest
    shard = batch.column("shard_id")[0].as_py()
    shard_hash = xx(shard.encode(), seed=_SPARK_HASH_SEED)
    prefix, separator = (shard + DIGEST_SEPARATOR).encode(), DIGEST_SEPARATOR.encode()
    columns = [batch.column(name).to_pylist() for name in CHECKSUM_COLUMNS[1:-1]]
    for sequence, sub, key, data in zip(*columns, _binary_values(batch.column("data")), strict=True):
        number = sequence.encode()
        h = xx(_LONG(sub), seed=xx(number, seed=shard_hash))
        if key is not None:
            encoded = key.encode()
            h = xx(encoded, seed=h)
            row = [prefix, number, separator, str(sub).encode(), separator, encoded, separator]
        else:
            row = [prefix, number, separator, str(sub).encode(), separator]
        if data is not None:
            h = xx(data, seed=h)
            row.append(data)
        checksum += h - 2**64 if h >= 2**63 else h
        digest += xx3(b"".join(row))
    return checksum, digest


@dataclass
class ShardTally:
    """What one shard's rows in a task's files add up to (data and quarantine together), as the manifest states it."""

    shard_id: str
    records: int = 0
    bad_records: int = 0
    bytes: int = 0
    first: int | None = None
    last: int | None = None
    hash: int = 0  # the sum of the rows' checksums (Spark's signed xxhash64), reduced modulo 2**64 in the manifest
    digest: int = 0  # the sum of the rows' records.row_digest
    last_arrival_micros: int | None = None

    def add(self, batch: Any, bad: bool) -> int:
        """Count a page of this shard's rows (a pyarrow RecordBatch of the row columns); returns its payload bytes."""
        import pyarrow.compute as pc

        rows = batch.num_rows
        if rows == 0:
            return 0
        if bad:
            self.bad_records += rows
        else:
            self.records += rows
        payload = int(pc.sum(pc.binary_length(batch.column("data"))).as_py() or 0)
        self.bytes += payload
        low, high = _lowest_and_highest(batch.column("sequence_number"))
        self.first = low if self.first is None else min(self.first, low)
        self.last = high if self.last is None else max(self.last, high)
        arrival = pc.max(batch.column("approximate_arrival_timestamp").cast("int64")).as_py()
        if arrival is not None:
            self.last_arrival_micros = arrival if self.last_arrival_micros is None else max(self.last_arrival_micros, arrival)
        self.hash, self.digest = _row_sums(batch, self.hash, self.digest)
        return payload

    def result(self) -> ShardResult:
        """The manifest's entry for the shard (``unconfirmed`` spans are the driver's to add)."""
        if self.first is None or self.last is None:
            raise ValueError(f"shard {self.shard_id}: a tally of no rows has no entry in the manifest")
        arrival = None if self.last_arrival_micros is None else datetime.fromtimestamp(self.last_arrival_micros / 1e6, UTC)
        return ShardResult(
            shard_id=self.shard_id, records=self.records, bytes=self.bytes, first_sequence_number=self.first,
            last_sequence_number=self.last, checksum=f"{self.hash % 2**64:016x}", bad_records=self.bad_records,
            last_arrival=arrival, digest=format_digest(self.digest),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if k in ("first", "last", "hash", "digest") and v is not None else v) for k, v in vars(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardTally:
        big = {k: (int(data[k]) if data[k] is not None else None) for k in ("first", "last", "hash", "digest")}
        return cls(**{**data, **big})


def _lowest_and_highest(numbers: Any) -> tuple[int, int]:
    """The least and the greatest of a column of sequence numbers (decimal strings, no leading zeros). Where they are
    all as long, as a shard's are, their text sorts as their numbers do, and pyarrow finds both; else each is parsed."""
    import pyarrow.compute as pc

    lengths = pc.min_max(pc.binary_length(numbers))
    if lengths["min"] == lengths["max"]:
        found = pc.min_max(numbers)
        return int(found["min"].as_py()), int(found["max"].as_py())
    parsed = [int(s) for s in numbers.to_pylist()]
    return min(parsed), max(parsed)


@dataclass(frozen=True)
class WrittenFile:
    """One file a task attempt wrote: where, which output (data or quarantine), and how many rows."""

    path: str
    kind: str
    rows: int


@dataclass(frozen=True)
class TaskReport:
    """What one task attempt wrote: its files and, per shard, what they hold. Crosses from the task to the driver as JSON."""

    files: tuple[WrittenFile, ...]
    shards: tuple[ShardTally, ...]

    def to_json(self) -> str:
        return json.dumps({"files": [vars(f) for f in self.files], "shards": [s.to_dict() for s in self.shards]})

    @classmethod
    def from_json(cls, text: str) -> TaskReport:
        data = json.loads(text)
        return cls(tuple(WrittenFile(**f) for f in data["files"]), tuple(ShardTally.from_dict(s) for s in data["shards"]))


def combine(reports: Iterable[TaskReport]) -> tuple[list[WrittenFile], list[ShardResult]]:
    """The files and the per-shard manifest entries of a job's successful task attempts, shards in order.

    A shard's range is read by one task: a shard in two reports would put its rows in the batch twice, and is refused.
    """
    files: list[WrittenFile] = []
    tallies: dict[str, ShardTally] = {}
    for report in reports:
        files += report.files
        for tally in report.shards:
            if tally.shard_id in tallies:
                raise OutputIOError(f"shard {tally.shard_id}: two task attempts report its rows; nothing is put in place, the job fails")
            tallies[tally.shard_id] = tally
    return sorted(files, key=lambda f: f.path), [tallies[s].result() for s in sorted(tallies) if tallies[s].first is not None]


def page_rows(stream: str, shard_id: str, page: list[dict[str, Any]]) -> Any:
    """One GetRecords page as a pyarrow RecordBatch of the row columns, KPL aggregates deaggregated: no per-row Python
    objects reach Spark or the writer."""
    import pyarrow as pa

    rows = to_rows(page)
    schema = arrow_row_schema()
    # Two columns are the page's; the others are the Rows' attributes of the same names.
    page_columns = {"stream_name": [stream] * len(rows), "shard_id": [shard_id] * len(rows)}
    arrays = [pa.array(page_columns[f.name] if f.name in page_columns else getattr(rows, f.name), f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass
class _Output:
    """One output's open file (data or quarantine) and the shards' rows waiting to be written to it as row groups."""

    folder: str
    kind: str
    schema: Any
    buffers: dict[str, list[Any]] = field(default_factory=dict)
    buffered: dict[str, tuple[int, int]] = field(default_factory=dict)  # shard -> (rows, payload bytes)
    writer: Any = None
    path: str | None = None
    rows: int = 0
    payload: int = 0
    written: list[WrittenFile] = field(default_factory=list)


class AttemptWriter:
    """Writes one task attempt's rows to ``<folder>/<name>-<n>.parquet`` (and the quarantine's), and reports them.

    ``batch_id``: the table's partition column, written into each data file (Iceberg reads a file's partition from its
    statistics); None for a directory output, whose batch is in its folder's name. ``columns``: a JSON payload's
    decoder (payload.schema's columns follow the row columns); None when payloads are kept as they are.

    A table output's quarantine files are the quarantine table's: the row columns (the record's keys, its arrival, the
    raw payload and ``decode_error``) and ``batch_id``, never payload.schema's columns, which a record that did not
    decode has no values for; so the quarantine table's columns never change with payload.schema. A directory output's
    quarantine files have the data files' columns (payload.schema's null), as they always had.
    """

    def __init__(
        self, data_folder: str, quarantine_folder: str, name: str, batch_id: int | None, columns: JsonColumns | None = None
    ) -> None:
        import pyarrow as pa

        self.name = name
        self.batch_id = batch_id
        self.columns = columns
        rows = arrow_row_schema()
        self.row_columns = list(range(len(rows)))
        if columns is not None:
            rows = pa.schema([*rows, *columns.fields])
        # batch_id is never null: a required column, as release 0.1.0's Spark wrote it (a literal) and created its tables
        # with. An optional one would not fit such a table (Iceberg writes no optional column into a required one),
        # while a required one fits a table whose column is optional.
        batch_field = pa.field(PARTITION_COLUMN, pa.int64(), nullable=False)
        with_batch = rows.append(batch_field) if batch_id is not None else rows
        quarantined = arrow_row_schema().append(batch_field) if batch_id is not None else rows
        self.outputs = {DATA: _Output(data_folder, DATA, with_batch), QUARANTINE: _Output(quarantine_folder, QUARANTINE, quarantined)}
        self.tallies: dict[str, ShardTally] = {}
        self.files = 0

    def write(self, batch: Any) -> None:
        """One page of one shard's rows (the row columns, in order); bad rows (a decode_error, or a JSON payload that does
        not decode) go to the quarantine."""
        import pyarrow.compute as pc

        if batch.num_rows == 0:
            return
        if self.columns is not None:
            batch = self.columns.decode(batch)
        shard = batch.column("shard_id")[0].as_py()
        tally = self.tallies.setdefault(shard, ShardTally(shard))
        errors = batch.column("decode_error")
        if errors.null_count == batch.num_rows:  # no bad row: the page as it is, no copy
            self._buffer(self.outputs[DATA], shard, batch, tally.add(batch, False))
            return
        bad = pc.is_valid(errors)
        for kind, rows in ((DATA, batch.filter(pc.invert(bad))), (QUARANTINE, batch.filter(bad))):
            if rows.num_rows:
                self._buffer(self.outputs[kind], shard, rows, tally.add(rows, kind == QUARANTINE))

    def close(self) -> TaskReport:
        """Write every buffer, close the files, and say what they hold."""
        for output in self.outputs.values():
            for shard in list(output.buffers):
                self._flush(output, shard)
            self._close_file(output)
        written = tuple(f for output in self.outputs.values() for f in output.written)
        return TaskReport(written, tuple(self.tallies[s] for s in sorted(self.tallies)))

    def abort(self) -> None:
        """Close what is open and delete every file this attempt wrote (best effort: the driver removes the rest)."""
        for output in self.outputs.values():
            open_path = output.path
            self._close_file(output, quietly=True)
            for path in [f.path for f in output.written] + ([open_path] if open_path else []):
                try:
                    filesystem, local = filesystem_of(path)
                    filesystem.delete_file(local)
                except OSError:
                    pass

    def _buffer(self, output: _Output, shard: str, rows: Any, payload_bytes: int) -> None:
        if self.batch_id is not None:
            import pyarrow as pa

            if output.kind == QUARANTINE and self.columns is not None:  # the row columns only (see the class's doc)
                rows = rows.select(self.row_columns)
            rows = rows.append_column(PARTITION_COLUMN, pa.array([self.batch_id] * rows.num_rows, pa.int64()))
        output.buffers.setdefault(shard, []).append(rows.cast(output.schema) if rows.schema != output.schema else rows)
        count, payload = output.buffered.get(shard, (0, 0))
        output.buffered[shard] = (count + rows.num_rows, payload + payload_bytes)
        if output.buffered[shard][0] >= ROW_GROUP_ROWS or output.buffered[shard][1] >= ROW_GROUP_BYTES:
            self._flush(output, shard)
        while sum(payload for o in self.outputs.values() for _, payload in o.buffered.values()) > TASK_BUFFER_BYTES:
            fullest, largest = max(
                ((o, s) for o in self.outputs.values() for s in o.buffered), key=lambda found: found[0].buffered[found[1]][1]
            )
            self._flush(fullest, largest)

    def _flush(self, output: _Output, shard: str) -> None:
        import pyarrow as pa

        batches = output.buffers.pop(shard, [])
        rows, payload = output.buffered.pop(shard, (0, 0))
        if not batches:
            return
        if output.writer is None:
            self._open_file(output)
        output.writer.write_table(pa.Table.from_batches(batches, output.schema), row_group_size=max(rows, 1))
        output.rows += rows
        output.payload += payload
        if output.payload >= FILE_BYTES:
            self._close_file(output)

    def _open_file(self, output: _Output) -> None:
        import pyarrow.parquet as pq

        output.path = f"{output.folder.rstrip('/')}/{self.name}-{self.files:05d}.parquet"
        self.files += 1
        filesystem, local = filesystem_of(output.path)
        filesystem.create_dir(local.rsplit("/", 1)[0], recursive=True)
        # Standard Parquet timestamps (UTC-adjusted microseconds), as the Spark writer's TIMESTAMP_MICROS were.
        dictionary = [name for name in output.schema.names if name not in UNIQUE_COLUMNS]
        output.writer = pq.ParquetWriter(local, output.schema, filesystem=filesystem, compression="snappy", use_dictionary=dictionary)

    def _close_file(self, output: _Output, quietly: bool = False) -> None:
        if output.writer is None:
            return
        try:
            output.writer.close()
        except OSError:
            if not quietly:
                raise
        if not quietly and output.path is not None:
            output.written.append(WrittenFile(output.path, output.kind, output.rows))
        output.writer, output.path, output.rows, output.payload = None, None, 0, 0


def with_unconfirmed(results: list[ShardResult], spans: dict[str, set[tuple[int, int | None]]]) -> list[ShardResult]:
    """The manifest's entries with each shard's unconfirmed spans (records that may have been trimmed unread)."""
    return [replace(r, unconfirmed=tuple(sorted(spans.get(r.shard_id, ()), key=lambda s: s[0]))) for r in results]
