"""The replay job as spark-submit runs it: a range it cannot honour fails loudly and leaves no batch output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay import spark_submit
from kinesis_replay.config import parse_config
from kinesis_replay.ranges import SequenceRange
from stack.harness import ROOT
from stack.producer import produce


def test_an_unreachable_range_end_fails_the_job_naming_stream_shard_and_range(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any
) -> None:
    produced = produce(kinesis, entry["stream"], 50)
    shard = produced[0].shard_id
    seqs = sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)
    rng = SequenceRange(shard, seqs[0], seqs[-1] + 10**20)  # an end no record will ever have
    spec = {
        "pipeline": entry["name"], "stream": entry["stream"], "batch_id": 1, "output": entry["output"],
        "ranges": [rng.to_dict()], "aws": {"region_name": "us-east-1", "endpoint_url": stack.kinesis_url}, "read": {},
    }  # fmt: skip
    (tmp_path / "batch.json").write_text(json.dumps(spec))
    pipeline = parse_config({"pipelines": [entry]})[0]
    jobs = ROOT / "spark_jobs"
    command = spark_submit.build_command(
        pipeline, 1, tmp_path / "batch.json", jobs / "replay_job.py",
        [spark_submit.package_library(tmp_path / "lib.zip"), jobs / "kinesis_source.py"],
    )  # fmt: skip
    with pytest.raises(spark_submit.SparkSubmitError) as failure:
        spark_submit.run(command, spark_submit.submit_env(pipeline.spark.master, {}), "pipeline p, batch 1")
    message = str(failure.value)
    assert f"stream {entry['stream']}, range {shard} [{seqs[0]} .. {rng.end}]" in message
    assert "could not read until the end sequence number of the range" in message
    assert not (Path(entry["output"]) / "batch_id=0000000001").exists()
    assert not (Path(entry["output"]) / "_manifests").exists()
