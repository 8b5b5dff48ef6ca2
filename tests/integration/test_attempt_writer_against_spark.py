"""The task writer's report against the replay job's own summary: Spark, reading the files the writer wrote, states
the same manifest (rows, bytes, sequence numbers, checksum, digest, last arrival) as the report made while writing."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from fakes.pages import T0, page
from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine
from kinesis_replay.adapters.layout import data_path, quarantine_path
from kinesis_replay.core.job_spec import JobSpec
from kinesis_replay.core.ranges import SequenceRange

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark_jobs"))


import replay_job

pytestmark = pytest.mark.integration


def test_the_writers_report_states_what_the_jobs_summary_of_the_same_files_states(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    output, batch_id, attempt = str(tmp_path / "out"), 7, "20261126T120000Z-abcd1234"
    ranges = tuple(SequenceRange(s, 1, 2) for s in ("shard-a", "shard-b"))
    spec = JobSpec("orders", "orders-stream", batch_id, output, ranges)
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

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        summarized = replay_job.summarize(spark, spec, 0.0, attempt)
    finally:
        spark.stop()

    assert list(summarized.shards) == reported
    assert [(r.records, r.bad_records) for r in reported] == [(397, 3), (203, 2)]
