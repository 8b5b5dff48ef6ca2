"""What the replay's tasks write, against what Spark makes of the same input, in one Spark session.

- The writer's report states the manifest (rows, bytes, sequence numbers, checksum, digest, last arrival) that Spark,
  reading the files the writer wrote, computes from them: the checksum is Spark's own xxhash64, so a backfill of a
  batch an older release replayed (whose manifest Spark computed) compares like with like.
- A JSON payload decodes in the task (json_columns) as it did with Spark's from_json before: the same records are
  quarantined, and the others get the same values, in columns of the same types as Spark's Parquet writer gave them,
  so a table an older release created takes the new files as they are (the same Iceberg schema). The payloads: the
  named cases of fakes/payload_cases.py, its regressions (whose recorded values are checked to be Spark's here), and
  10,000 generated ones, all decoded by one from_json job.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fakes.pages import T0, page
from fakes.payload_cases import DECODABLE, REGRESSIONS, SCHEMA, UNDECODABLE, VALUES, generated_payloads
from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine
from kinesis_replay.adapters.files import arrow_row_schema, scan_rows
from kinesis_replay.adapters.json_columns import JsonColumns
from kinesis_replay.adapters.layout import data_path, quarantine_path
from kinesis_replay.core.records import DIGEST_SEPARATOR, DIGEST_TEXT_COLUMNS, format_digest
from kinesis_replay.core.state import ShardResult

pytestmark = pytest.mark.integration

SEQ_WIDTH = 130  # sequence numbers have at most 129 digits: left-padded, they order as text as they do as numbers


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # As the replay job's Spark writer wrote them: standard Parquet timestamps, not INT96.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    yield session
    session.stop()


def spark_summary(spark: Any, paths: list[str]) -> list[ShardResult]:
    """The manifest's entries as the replay job computed them with Spark, from the files, before its tasks reported them
    (the row digest with md5, as results written then name it)."""
    from pyspark.sql import functions as F

    written = spark.read.parquet(*paths)
    text = F.concat_ws(DIGEST_SEPARATOR, *(F.col(c).cast("string") for c in DIGEST_TEXT_COLUMNS), F.lit(""))
    digest = F.conv(F.substring(F.md5(F.concat(text.cast("binary"), F.coalesce(F.col("data"), F.lit(bytearray())))), 1, 16), 16, 10)
    seq = F.lpad("sequence_number", SEQ_WIDTH, "0")
    row_hash = F.xxhash64("shard_id", "sequence_number", "sub_sequence_number", "partition_key", "data")
    rows = (
        written.groupBy("shard_id")
        .agg(
            F.count_if(F.col("decode_error").isNull()).alias("records"),
            F.count_if(F.col("decode_error").isNotNull()).alias("bad"),
            F.sum(F.length("data")).alias("bytes"),
            F.min(seq).alias("first"),
            F.max(seq).alias("last"),
            F.sum(row_hash.cast("decimal(38,0)")).alias("hash"),
            F.sum(digest.cast("decimal(20,0)").cast("decimal(38,0)")).alias("digest"),
            F.max(F.unix_micros("approximate_arrival_timestamp")).alias("last_arrival"),
        )
        .collect()
    )
    return [
        ShardResult(
            shard_id=r["shard_id"],
            records=int(r["records"]),
            bytes=int(r["bytes"] or 0),
            first_sequence_number=int(r["first"]),
            last_sequence_number=int(r["last"]),
            checksum=f"{int(r['hash']) % 2**64:016x}",
            bad_records=int(r["bad"]),
            last_arrival=datetime.fromtimestamp(r["last_arrival"] / 1e6, UTC),
            digest=format_digest(int(r["digest"]), "md5"),
        )
        for r in sorted(rows, key=lambda r: r["shard_id"])
    ]


def test_the_writers_report_states_what_spark_computes_from_the_same_files(spark: Any, tmp_path: Path) -> None:
    output, batch_id, attempt = str(tmp_path / "out"), 7, "20261126T120000Z-abcd1234"
    pages = [
        page("shard-a", 0, 300, bad={3, 4, 250}), page("shard-b", 1000, 200),
        page("shard-a", 300, 100, start=T0 + timedelta(milliseconds=300)), page("shard-b", 1200, 5, bad={0, 4}),
    ]  # fmt: skip
    reports = []
    for task, shard in enumerate(("shard-a", "shard-b")):  # a task per shard, as the job places them
        writer = AttemptWriter(data_path(output, batch_id, attempt), quarantine_path(output, batch_id), f"part-{task:05d}", batch_id)
        for p in pages:
            if p.column("shard_id")[0].as_py() == shard:
                writer.write(p)
        reports.append(writer.close())
    _, reported = combine(reports)

    folders = [data_path(output, batch_id, attempt), quarantine_path(output, batch_id)]
    by_spark = spark_summary(spark, folders)
    assert [replace(r, digest=None) for r in by_spark] == [replace(r, digest=None) for r in reported]
    # The digests: the report's XXH3 is verify's reading of the files, and verify's md5 reading is what the job computed
    # with Spark then, so that results written before the hash changed still verify.
    files = [str(f) for folder in folders for f in sorted(Path(folder).rglob("*.parquet"))]
    for hash_name, expected in (("xxh3", reported), ("md5", by_spark)):
        scanned = scan_rows(files, hash_name)
        assert [format_digest(scanned[r.shard_id].digest, hash_name) for r in expected] == [r.digest for r in expected], hash_name
    assert all(r.digest and r.digest.startswith("xxh3:") for r in reported)
    assert [(r.records, r.bad_records) for r in reported] == [(397, 3), (203, 2)]


PAYLOADS = [p for p, _ in UNDECODABLE] + DECODABLE + VALUES
GENERATED = generated_payloads()
# Every payload the module compares, in one from_json job: the named cases first, their indexes kept.
ALL_PAYLOADS = PAYLOADS + [case.payload for case in REGRESSIONS] + GENERATED


def payload_page(payloads: list[bytes]) -> pa.RecordBatch:
    """One shard's rows whose sequence numbers are the payloads' indexes."""
    n = len(payloads)
    columns = {
        "stream_name": ["s"] * n, "shard_id": ["shard-a"] * n, "sequence_number": [str(i) for i in range(n)],
        "sub_sequence_number": [0] * n, "partition_key": ["k"] * n, "approximate_arrival_timestamp": [T0] * n,
        "data": payloads, "decode_error": [None] * n,
    }  # fmt: skip
    return pa.RecordBatch.from_pydict(columns, schema=arrow_row_schema())


def spark_decoded(spark: Any, payloads: list[bytes], folder: Path) -> tuple[set[int], pa.Table]:
    """The payloads decoded as the replay job decoded them with Spark (from_json, permissive), the rows it kept written by
    Spark's Parquet writer: the indexes of the quarantined ones, and the others' columns as the files hold them (one
    Spark job: every row is written, with whether it was quarantined)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    corrupt = "_corrupt_record"
    # Into Spark through a Parquet file: thousands of payloads cross faster so than as Python rows.
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": pa.array(range(len(payloads)), pa.int32()), "data": pa.array(payloads, pa.binary())}),
                   folder / "payloads.parquet")  # fmt: skip
    rows = spark.read.parquet(str(folder / "payloads.parquet"))
    text = F.col("data").cast("string")
    parsed = F.from_json(text, f"{SCHEMA}, {corrupt} STRING", {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt})
    undecoded = ~F.is_valid_utf8(text) | F.col("_parsed").isNull() | F.col("_parsed")[corrupt].isNotNull()
    fields = StructType.fromDDL(SCHEMA).fieldNames()
    decoded = rows.withColumn("_parsed", parsed).withColumn("bad", undecoded)
    decoded.select("i", "bad", *(F.col("_parsed")[name].alias(name) for name in fields)).write.parquet(str(folder / "out"))
    table = pq.read_table(folder / "out").sort_by("i")
    bad = pa.compute.fill_null(table.column("bad"), True)
    quarantined = set(table.filter(bad).column("i").to_pylist())
    return quarantined, table.filter(pa.compute.invert(bad)).drop_columns(["bad"])


def comparable(column: pa.ChunkedArray) -> list[Any]:
    """A column's values, dates and timestamps as numbers (Spark's years go past Python's), NaN as a string."""
    if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
        column = column.cast(pa.int64() if pa.types.is_timestamp(column.type) else pa.int32())
    return [_nan_free(v) for v in column.to_pylist()]


def _nan_free(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def decoded_by_spark(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[set[int], pa.Table]:
    return spark_decoded(spark, ALL_PAYLOADS, tmp_path_factory.mktemp("spark") / "decoded")


@pytest.fixture(scope="module")
def decoded_by_tasks() -> pa.Table:
    return pa.Table.from_batches([JsonColumns(SCHEMA, "orders").decode(payload_page(ALL_PAYLOADS))])


def differences(ours: pa.Table, spark_bad: set[int], spark_rows: pa.Table, indexes: range) -> list[str]:
    """Where the tasks' decoding of the payloads at ``indexes`` differs from Spark's, one line a difference: the
    quarantine decision, or the column and both values."""
    errors = ours.column("decode_error").to_pylist()
    found = [
        f"payload {i}: {'quarantined' if errors[i] else 'decoded'} by the tasks ({errors[i]}), "
        f"{'quarantined' if i in spark_bad else 'decoded'} by Spark: {ALL_PAYLOADS[i][:200]!r}"
        for i in indexes
        if (errors[i] is not None) != (i in spark_bad)
    ]
    theirs = {i: n for n, i in enumerate(spark_rows.column("i").to_pylist())}
    kept = [i for i in indexes if errors[i] is None and i in theirs]
    for name in [f.name for f in JsonColumns(SCHEMA, "orders").fields]:
        our_values = comparable(ours.column(name).take(kept))
        their_values = comparable(spark_rows.column(name).take([theirs[i] for i in kept]))
        found += [
            f"payload {i}, column {name}: ours {a!r:.300}, Spark's {b!r:.300}: {ALL_PAYLOADS[i][:200]!r}"
            for i, a, b in zip(kept, our_values, their_values, strict=True)
            if a != b
        ]
    return found


def test_json_payloads_decode_in_the_task_as_spark_from_json_decoded_them(
    decoded_by_spark: tuple[set[int], pa.Table], decoded_by_tasks: pa.Table
) -> None:
    spark_bad, spark_rows = decoded_by_spark
    decoded = decoded_by_tasks.slice(0, len(PAYLOADS))
    errors = decoded.column("decode_error").to_pylist()

    # The same records quarantined, each with its reason: the edge cases the issue names among them.
    assert {i for i in spark_bad if i < len(PAYLOADS)} == set(range(len(UNDECODABLE)))
    assert [errors[i] for i in range(len(UNDECODABLE))] == [reason for _, reason in UNDECODABLE]
    assert {i for i, e in enumerate(errors) if e is not None} == set(range(len(UNDECODABLE)))

    # The same values in the rows kept, column by column.
    assert differences(decoded_by_tasks, spark_bad, spark_rows, range(len(PAYLOADS))) == []

    # The same column types as Spark's files: a table an older release created has the same Iceberg schema.
    columns = [f.name for f in JsonColumns(SCHEMA, "orders").fields]
    ours = pa.schema([decoded.schema.field(name) for name in columns])
    theirs = pa.schema([spark_rows.schema.field(name).remove_metadata() for name in columns])
    assert ours.equals(theirs), f"ours:\n{ours}\nSpark's:\n{theirs}"
    assert iceberg_schema(ours) == iceberg_schema(theirs)


def test_the_regressions_record_what_spark_from_json_makes_of_them(decoded_by_spark: tuple[set[int], pa.Table]) -> None:
    # The unit tests hold the tasks' decoder to these records (tests/unit/test_payload_regressions.py): this holds the
    # records to Spark.
    spark_bad, spark_rows = decoded_by_spark
    indexes = range(len(PAYLOADS), len(PAYLOADS) + len(REGRESSIONS))
    kept = spark_rows.filter(pa.compute.is_in(spark_rows.column("i"), pa.array(indexes, pa.int32())))
    columns = {name: comparable(kept.column(name)) for name in kept.column_names if name != "i"}
    rows = {i: {name: values[n] for name, values in columns.items()} for n, i in enumerate(kept.column("i").to_pylist())}
    for n, case in zip(indexes, REGRESSIONS, strict=True):
        if case.expected is None:
            assert n in spark_bad, case.name
        else:
            assert n not in spark_bad, case.name
            found = {name: value for name, value in rows[n].items() if value is not None}
            assert found == {name: _nan_free(value) for name, value in case.expected.items()}, case.name


def test_generated_payloads_decode_in_the_task_as_spark_from_json_decodes_them(
    decoded_by_spark: tuple[set[int], pa.Table], decoded_by_tasks: pa.Table
) -> None:
    spark_bad, spark_rows = decoded_by_spark
    start = len(ALL_PAYLOADS) - len(GENERATED)
    found = differences(decoded_by_tasks, spark_bad, spark_rows, range(start, len(ALL_PAYLOADS)))
    assert found == [], f"{len(found)} differences, the first ones:\n" + "\n".join(found[:30])
    # The generator reaches both sides of each decision: quarantined payloads and kept ones, by the thousand.
    quarantined = len([i for i in spark_bad if i >= start])
    assert 2000 < quarantined < len(GENERATED) - 2000, quarantined


def iceberg_schema(schema: pa.Schema) -> Any:
    """The Iceberg schema a table gets from a file of these columns (as iceberg_table.create_or_load_table makes it)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
