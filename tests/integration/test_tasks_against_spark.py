"""What the replay's tasks write, against what Spark makes of the same input, in one Spark session.

- The writer's report states the manifest (rows, bytes, sequence numbers, checksum, digest, last arrival) that Spark,
  reading the files the writer wrote, computes from them: the checksum is Spark's own xxhash64, so a backfill of a
  batch an older release replayed (whose manifest Spark computed) compares like with like.
- A JSON payload decodes in the task (json_columns) as it did with Spark's from_json before: the same records are
  quarantined, and the others get the same values, in columns of the same types as Spark's Parquet writer gave them,
  so a table an older release created takes the new files as they are (the same Iceberg schema).
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
from fakes.payload_cases import DECODABLE, SCHEMA, UNDECODABLE, VALUES
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
    Spark's Parquet writer: the indexes of the quarantined ones, and the others' columns as the files hold them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    corrupt = "_corrupt_record"
    rows = spark.createDataFrame([(i, p) for i, p in enumerate(payloads)], "i INT, data BINARY")
    text = F.col("data").cast("string")
    parsed = F.from_json(text, f"{SCHEMA}, {corrupt} STRING", {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt})
    undecoded = ~F.is_valid_utf8(text) | F.col("_parsed").isNull() | F.col("_parsed")[corrupt].isNotNull()
    fields = StructType.fromDDL(SCHEMA).fieldNames()
    decoded = rows.withColumn("_parsed", parsed).withColumn("bad", undecoded)
    bad = {r["i"] for r in decoded.where("bad").select("i").collect()}
    decoded.where("not bad").select("i", *(F.col("_parsed")[name].alias(name) for name in fields)).write.parquet(str(folder))
    return bad, pq.read_table(folder).sort_by("i")


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


def test_json_payloads_decode_in_the_task_as_spark_from_json_decoded_them(spark: Any, tmp_path: Path) -> None:
    spark_bad, spark_rows = spark_decoded(spark, PAYLOADS, tmp_path / "spark")
    decoded = pa.Table.from_batches([JsonColumns(SCHEMA, "orders").decode(payload_page(PAYLOADS))])
    errors = decoded.column("decode_error").to_pylist()
    ours_bad = {i for i, e in enumerate(errors) if e is not None}

    # The same records quarantined, each with its reason: the edge cases the issue names among them.
    assert sorted(ours_bad) == sorted(spark_bad)
    assert ours_bad == set(range(len(UNDECODABLE)))
    assert [errors[i] for i in range(len(UNDECODABLE))] == [reason for _, reason in UNDECODABLE]

    # The same values in the rows kept, column by column.
    kept = decoded.filter(pa.compute.is_null(decoded.column("decode_error")))
    assert [int(s) for s in kept.column("sequence_number").to_pylist()] == spark_rows.column("i").to_pylist()
    columns = [f.name for f in JsonColumns(SCHEMA, "orders").fields]
    for name in columns:
        assert comparable(kept.column(name)) == comparable(spark_rows.column(name)), name

    # The same column types as Spark's files: a table an older release created has the same Iceberg schema.
    ours = pa.schema([kept.schema.field(name) for name in columns])
    theirs = pa.schema([spark_rows.schema.field(name).remove_metadata() for name in columns])
    assert ours.equals(theirs), f"ours:\n{ours}\nSpark's:\n{theirs}"
    assert iceberg_schema(ours) == iceberg_schema(theirs)


def iceberg_schema(schema: pa.Schema) -> Any:
    """The Iceberg schema a table gets from a file of these columns (as iceberg_table.create_or_load_table makes it)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
