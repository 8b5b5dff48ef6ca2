"""A replay task's writer: its files hold exactly the rows it was given, bounded row groups of one shard each, and its
report says what they hold, as the result manifest states it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fakes.pages import T0, page
from kinesis_replay.adapters import attempt_writer
from kinesis_replay.adapters.attempt_writer import AttemptWriter, TaskReport, combine
from kinesis_replay.adapters.files import arrow_row_schema, scan_rows
from kinesis_replay.core.errors import OutputIOError
from kinesis_replay.core.records import format_digest, row_digest


def spark_xxhash64(values: list[str | int | bytes | None]) -> int:
    """The test's own reading of Spark SQL's xxhash64(col, ...) of a row, written plainly, value by value: XXH64 of each
    value that is not null (a string's UTF-8, a BIGINT's 8 little-endian bytes, a binary's bytes), each seeded with
    the hash so far, from 42; a signed 64-bit number."""
    import struct

    import xxhash

    seed = 42
    for value in values:
        if value is not None:
            raw = struct.pack("<q", value) if isinstance(value, int) else value.encode() if isinstance(value, str) else value
            seed = xxhash.xxh64_intdigest(raw, seed=seed)
    return seed - 2**64 if seed >= 2**63 else seed


def expected(batches: list[pa.RecordBatch]) -> dict[str, tuple[int, int, int, int, int, str, str]]:
    """Per shard, from the rows one by one: records, bad, bytes, first, last, checksum and digest."""
    found: dict[str, list[int]] = {}
    for batch in batches:
        for row in batch.to_pylist():
            f = found.setdefault(row["shard_id"], [0, 0, 0, 2**600, -1, 0, 0])
            f[1 if row["decode_error"] else 0] += 1
            f[2] += len(row["data"])
            f[3], f[4] = min(f[3], int(row["sequence_number"])), max(f[4], int(row["sequence_number"]))
            values = [row[c] for c in attempt_writer.CHECKSUM_COLUMNS]
            f[5] += spark_xxhash64(values)
            f[6] += row_digest([str(v) for v in values[:4]], row["data"])
    return {s: (*f[:5], f"{f[5] % 2**64:016x}", format_digest(f[6])) for s, f in found.items()}  # type: ignore[misc]


def test_the_tests_reading_of_sparks_xxhash64_gives_sparks_own_values() -> None:
    # Values from Spark 4's own F.xxhash64("shard_id", "sequence_number", "sub_sequence_number", "partition_key", "data").
    assert spark_xxhash64(["shardId-000000000001", "49590338271490256608559692538361571095921575989136588898", 0, "pk-1", b"hello"]) == (
        8201749678454312936
    )
    assert spark_xxhash64(["s", "1", -5, "p\u00e9", None]) == 7977661003695380297  # a null is skipped
    assert spark_xxhash64(["s", "1", 2**40, None, bytes(range(256))]) == 2486050359900097406


def test_the_files_hold_every_row_once_and_the_report_says_what_they_hold(tmp_path: Path) -> None:
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part-00001-7", batch_id=42)
    pages = [
        page("shard-a", 0, 30, bad={3, 4}),
        page("shard-b", 100, 20),
        page("shard-a", 30, 10, start=T0 + timedelta(milliseconds=30)),
        page("shard-b", 120, 5, bad={0}),
    ]
    for p in pages:
        writer.write(p)
    report = TaskReport.from_json(writer.close().to_json())  # as it crosses from the task to the driver

    files, results = combine([report])
    data = [f for f in files if f.kind == "data"]
    bad = [f for f in files if f.kind == "quarantine"]
    assert sum(f.rows for f in data) == 62 and sum(f.rows for f in bad) == 3
    got = {r.shard_id: (r.records, r.bad_records, r.bytes, r.first_sequence_number, r.last_sequence_number, r.checksum, r.digest)
           for r in results}  # fmt: skip
    assert got == expected(pages)
    # Verify's own reading of the files agrees with the report, row for row.
    scanned = scan_rows([f.path for f in files])
    assert {s: (r.rows, format_digest(r.digest), r.duplicates) for s, r in scanned.items()} == {
        r.shard_id: (r.records + r.bad_records, r.digest, 0) for r in results
    }
    table = pq.read_table(data[0].path)
    assert table.schema.names == [*arrow_row_schema().names, "batch_id"] and set(table.column("batch_id").to_pylist()) == {42}
    assert not table.schema.field("batch_id").nullable  # as release 0.1.0 wrote it, and made its tables' column required
    # The quarantine table's files: the row columns and batch_id, whatever payload.schema says.
    assert pq.read_schema(bad[0].path).names == [*arrow_row_schema().names, "batch_id"]
    assert results[0].last_arrival == T0 + timedelta(milliseconds=39)


def test_each_row_group_holds_one_shards_consecutive_rows_so_its_statistics_bound_their_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attempt_writer, "ROW_GROUP_ROWS", 25)
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=None)
    # Two shards read at once: their pages interleave, each shard's in arrival order, the two shards' times overlapping.
    for i in range(7):
        writer.write(page("shard-a", 10 * i, 10, start=T0 + timedelta(milliseconds=10 * i)))
        writer.write(page("shard-b", 10 * i, 10, start=T0 + timedelta(milliseconds=10 * i + 5)))
    (written,) = [f for f in writer.close().files if f.kind == "data"]

    meta = pq.ParquetFile(written.path).metadata
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    arrival = arrow_row_schema().get_field_index("approximate_arrival_timestamp")
    shard = arrow_row_schema().get_field_index("shard_id")
    # Written when a buffer reaches 25 rows (30, at 10 a page), and what is left of each shard when the task ends.
    assert [g.num_rows for g in groups] == [30, 30, 30, 30, 10, 10]
    for g in groups:
        shards = g.column(shard).statistics
        assert shards.min == shards.max, "a row group holds one shard's rows"
        times = g.column(arrival).statistics
        assert times.has_min_max and (times.max - times.min) < timedelta(milliseconds=30)


def test_an_aborted_attempt_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt_writer, "ROW_GROUP_ROWS", 5)  # the rows are written as they come: open files to delete
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=1)
    writer.write(page("shard-a", 0, 10, bad=set(range(5))))
    assert len([p for p in tmp_path.rglob("*.parquet")]) == 2  # the data's file and the quarantine's
    writer.abort()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_task_that_read_nothing_reports_nothing_and_writes_no_file(tmp_path: Path) -> None:
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=1)
    writer.write(page("shard-a", 0, 0))
    assert writer.close() == TaskReport((), ()) and not (tmp_path / "data").exists()


def test_a_task_reading_many_shards_at_once_holds_at_most_its_buffer_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt_writer, "TASK_BUFFER_BYTES", 2000)  # about 200 of these records' payload
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=None)
    held = []
    for i in range(5):
        for shard in range(20):  # twenty ranges read at once, none of them ending
            writer.write(page(f"shard-{shard:02d}", 10 * i, 10, start=T0 + timedelta(milliseconds=10 * i)))
            held.append(sum(p for o in writer.outputs.values() for _, p in o.buffered.values()))
    report = writer.close()

    assert max(held) <= 2000 and sum(f.rows for f in report.files) == 1000
    assert {t.shard_id: t.records for t in report.shards} == {f"shard-{s:02d}": 50 for s in range(20)}


def test_a_shard_two_task_attempts_report_is_refused_rather_than_put_in_the_batch_twice(tmp_path: Path) -> None:
    reports = []
    for attempt in (1, 2):
        writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), f"part-t{attempt}", batch_id=1)
        writer.write(page("shard-a", 0, 10))
        reports.append(writer.close())
    with pytest.raises(OutputIOError, match="shard shard-a: two task attempts report its rows"):
        combine(reports)


def test_first_and_last_are_the_numbers_least_and_greatest_where_their_text_would_sort_otherwise(tmp_path: Path) -> None:
    """A shard's sequence numbers are as long as each other, and pyarrow finds the least and greatest text; a page whose
    numbers differ in length (9 and 10 here, where "10" sorts first as text) is compared as numbers."""
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=1)
    mixed = page("shard-a", 0, 12).set_column(2, "sequence_number", pa.array([str(n) for n in range(8, 20)]))
    writer.write(mixed)
    writer.write(page("shard-b", 100, 5))
    _, results = combine([writer.close()])
    bounds = [(r.first_sequence_number, r.last_sequence_number) for r in results]
    assert bounds == [(8, 19), (49_000_000_000_000_000_100, 49_000_000_000_000_000_104)]


def test_a_binary_columns_values_are_read_in_place_as_to_pylist_gives_them() -> None:
    column = pa.array([b"ab", b"", b"\x00\xff", b"xyz", b"", b"last"], pa.binary())
    for values in (column, column.slice(1, 4), column.slice(5), pa.array([b"", b""], pa.binary()), column.cast(pa.large_binary())):
        assert [bytes(v) for v in attempt_writer._binary_values(values)] == values.to_pylist()
    with_null = pa.array([b"a", None, b"c"], pa.binary())
    assert list(attempt_writer._binary_values(with_null.slice(1))) == [None, b"c"]


def test_no_dictionary_is_tried_for_the_columns_whose_values_never_repeat(tmp_path: Path) -> None:
    writer = AttemptWriter(str(tmp_path / "data"), str(tmp_path / "quarantine"), "part", batch_id=7)
    writer.write(page("shard-a", 0, 50))
    (written,) = writer.close().files
    chunks = pq.ParquetFile(written.path).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings for i in range(chunks.num_columns)}
    dictionary = {name for name, used in encodings.items() if any("DICTIONARY" in e for e in used)}
    assert dictionary.isdisjoint(attempt_writer.UNIQUE_COLUMNS)
    assert {"stream_name", "shard_id", "batch_id"} <= dictionary  # one value a page: a dictionary of one
