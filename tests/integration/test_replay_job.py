"""The replay job as spark-submit runs it: a range it cannot honour fails loudly and leaves no batch output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay import jvm_archive, spark_submit
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


def test_the_first_local_job_records_the_jvm_class_archive_and_the_next_one_maps_it(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path / "jvm"))
    produced = produce(kinesis, entry["stream"], 20)
    shard = produced[0].shard_id
    seqs = sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)
    pipeline = parse_config({"pipelines": [entry]})[0]
    jobs = ROOT / "spark_jobs"
    library = spark_submit.package_library(tmp_path / "lib.zip")

    def replay(batch_id: int, env: dict[str, str]) -> None:
        spec = {
            "pipeline": entry["name"], "stream": entry["stream"], "batch_id": batch_id, "output": entry["output"],
            "ranges": [SequenceRange(shard, seqs[0], seqs[-1]).to_dict()],
            "aws": {"region_name": "us-east-1", "endpoint_url": stack.kinesis_url}, "read": {},
        }  # fmt: skip
        (tmp_path / f"{batch_id}.json").write_text(json.dumps(spec))
        command = spark_submit.build_command(
            pipeline, batch_id, tmp_path / f"{batch_id}.json", jobs / "replay_job.py", [library, jobs / "kinesis_source.py"]
        )
        spark_submit.run(command, spark_submit.submit_env(pipeline.spark.master, env), f"pipeline p, batch {batch_id}")
        manifest = json.loads((Path(entry["output"]) / "_manifests" / f"batch_id={batch_id:010d}.json").read_text())
        assert [s["records"] for s in manifest["shards"]] == [len(seqs)]

    replay(1, {})
    (recorded,) = (tmp_path / "jvm").glob("*.jsa")
    assert jvm_archive.ClassArchive(recorded).ready()
    # The JVM's own account of where each class came from: Spark's, from the archive, not from its jar.
    classes = tmp_path / "classes.log"
    replay(2, {"JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={classes}"})
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in classes.read_text()
    assert list((tmp_path / "jvm").glob("*.jsa")) == [recorded]
