"""The text forms on disk and in the state table: their exact spelling, which existing outputs and tables hold."""

from __future__ import annotations

import pytest

from kinesis_replay.adapters.dynamodb_items import batch_sk, part_sk
from kinesis_replay.adapters.iceberg_table import iceberg_location
from kinesis_replay.adapters.layout import batch_path, commit_record_path, data_path
from kinesis_replay.core.formats import MAX_BATCH_ID, ProgressLine, duration, is_s3, path_batch_id, s3_uri, sort_key_batch_id


def test_a_batch_id_is_padded_to_10_digits_in_paths_and_12_in_sort_keys() -> None:
    assert path_batch_id(42) == "0000000042"
    assert sort_key_batch_id(42) == "000000000042"
    assert batch_path("/lake/orders", 42) == "/lake/orders/batch_id=0000000042"
    assert data_path("s3://b/orders/", 42, "a1") == "s3://b/orders/data/batch_id=0000000042/attempt=a1"
    assert commit_record_path("/lake/orders", 7) == "/lake/orders/_commits/batch_id=0000000007.json"
    assert batch_sk(42) == "batch#000000000042"
    assert part_sk(42, "ranges", 3) == "part#000000000042#ranges#0003"


def test_the_largest_batch_id_fills_the_path_width_and_lists_in_order() -> None:
    assert path_batch_id(MAX_BATCH_ID) == "9999999999"
    assert sorted([path_batch_id(10), path_batch_id(9), path_batch_id(MAX_BATCH_ID)]) == ["0000000009", "0000000010", "9999999999"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("s3a://bucket/orders", "s3://bucket/orders"),
        ("s3n://bucket/orders", "s3://bucket/orders"),
        ("s3://bucket/orders", "s3://bucket/orders"),
        ("gs://bucket/orders", "gs://bucket/orders"),
        ("/lake/s3a://x", "/lake/s3a://x"),
    ],
)
def test_hadoop_s3_schemes_are_written_as_s3(path: str, expected: str) -> None:
    assert s3_uri(path) == expected
    assert is_s3(path) == expected.startswith("s3://")


def test_iceberg_locations_use_the_same_rule() -> None:
    assert iceberg_location("s3a://bucket/orders") == "s3://bucket/orders"
    assert iceberg_location("/lake/orders") == "file:///lake/orders"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (45.9, "45s"), (119, "119s"), (120, "2m00s"), (725, "12m05s"), (3599, "59m59s"), (3600, "1h00m"), (90000, "25h00m")],
)
def test_a_duration_reads_as_seconds_minutes_or_hours(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


@pytest.mark.parametrize(
    "line",
    [
        ProgressLine("shardId-000000000001 [100 .. 900]", 300, False, "at 400 (arrived 2026-11-01T00:00:00+00:00)"),
        ProgressLine("shardId-000000000002 [5 .. SHARD_END (<= 90)]", 20, False, "at 25"),
        ProgressLine("shardId-000000000001 [100 .. 900]", 801, True, "12.0 KiB in 2.0s (400 records/s, 6 KiB/s); 3 GetRecords calls"),
        ProgressLine("s1 [100 .. 900]", 0, True),
    ],
)
def test_a_progress_line_reads_back_as_written_behind_the_log_s_prefix(line: ProgressLine) -> None:
    assert ProgressLine.parse(line.to_line()) == line
    assert ProgressLine.parse(f"26/11/26 14:05:50 WARN kinesis_replay.spark: {line.to_line()}") == line


def test_a_progress_line_of_an_older_job_still_reads() -> None:
    # As the replay job of the previous release logged them, with %-formatting, after log4j's prefix.
    reading = "26/11/26 14:05:50 WARN kinesis_replay.spark: shardId-000000000003 [100 .. 900]: 300 records read, at 400 (arrived ...)"
    done = (
        "shardId-000000000003 [100 .. 900]: done, 801 records, 12.0 KiB in 2.0s (400 records/s, 6 KiB/s); 3 GetRecords calls, "
        "0 throttled (0.0s waited), 0.0s pacing to the budget, 0 expired iterators"
    )
    found = ProgressLine.parse(reading)
    assert found is not None and (found.shard_id, found.records, found.done) == ("shardId-000000000003", 300, False)
    assert found.detail == "at 400 (arrived ...)"
    found = ProgressLine.parse(done)
    assert found is not None and (found.shard_id, found.records, found.done) == ("shardId-000000000003", 801, True)
    assert found.to_line() == done  # written back word for word


@pytest.mark.parametrize(
    "line",
    [
        "kinesis-replay: phases: {}",
        "shardId-000000000003: 300 records read",  # no range
        "shardId-000000000003 [100 .. 900]: reading",
        "",
    ],
)
def test_any_other_line_is_not_progress(line: str) -> None:
    assert ProgressLine.parse(line) is None
