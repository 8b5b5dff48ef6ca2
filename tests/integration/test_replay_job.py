"""The replay job as spark-submit runs it: a range it cannot honour fails loudly and leaves no batch output."""

from __future__ import annotations

import contextlib
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.adapters import layout
from kinesis_replay.adapters.owner import write_owner
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint
from kinesis_replay.core.output_root import Owner
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.launchers import jvm_archive, spark_submit
from stack.harness import ROOT
from stack.producer import produce


def test_an_unreachable_range_end_fails_the_job_naming_stream_shard_and_range(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any
) -> None:
    produced = produce(kinesis, entry["stream"], 50)
    shard = produced[0].shard_id
    seqs = sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)
    rng = SequenceRange(shard, seqs[0], seqs[-1] + 10**20)  # an end no record will ever have
    spec = JobSpec(entry["name"], entry["stream"], 1, entry["output"], (rng,), kinesis=KinesisEndpoint("us-east-1", stack.kinesis_url))
    (tmp_path / "batch.json").write_text(spec.to_json())
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
    assert not (Path(entry["output"]) / "batch_id=0000000001").exists() and not (Path(entry["output"]) / "data").exists()
    assert not (Path(entry["output"]) / "_manifests").exists()


def test_the_warm_up_records_the_jvm_class_archive_and_the_replay_job_maps_it(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path / "jvm"))
    replay = one_record_replay(kinesis, entry, tmp_path, stack)
    spark_submit.warm_up(replay.pipeline, replay.job, replay.py_files, spark_submit.submit_env("local[2]", {}))
    archive = jvm_archive.for_spark(spark_submit.LOCAL_DRIVER_JAVA_OPTIONS)
    assert archive is not None and archive.ready() and archive.disabled() is None
    # The JVM's own account of where each class came from: Spark's, from the archive, not from its jar.
    classes = tmp_path / "classes.log"
    replay.run({"JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={classes}"})
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in classes.read_text()
    assert sorted(p.name for p in (tmp_path / "jvm").iterdir()) == [archive.path.name, archive.size_file.name]
    # The job's phases: the read and write from the first Kinesis call on, a part of the whole phase (tasks start first).
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kinesis-replay: phases: ")][-1:]
    phases = json.loads(line.split(": ", 2)[2])
    assert 0 < phases["from_first_call"] < phases["read_write"]


def test_a_warm_up_the_jvm_cannot_record_disables_the_archive_and_replays_run_as_before(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Spark distribution's conf folder holds templates, and the launcher puts it first on the class path: the
    # JVM then does the whole job and exits 1, unable to record ("Cannot have non-empty directory in paths").
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-env.sh.template").write_text("# a template, as Spark ships them\n")
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path / "jvm"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    replay = one_record_replay(kinesis, entry, tmp_path, stack)
    spark_submit.warm_up(replay.pipeline, replay.job, replay.py_files, spark_submit.submit_env("local[2]", {}))
    archive = jvm_archive.for_spark(spark_submit.LOCAL_DRIVER_JAVA_OPTIONS)
    assert archive is not None and not archive.ready()
    assert f"pipeline {entry['name']}: the JVM's warm-up job" in (archive.disabled() or "")
    assert "Cannot have non-empty directory in paths" in (archive.disabled() or "")
    replay.run({})  # without an archive, and without failing


def test_a_local_job_starts_while_every_port_of_sparks_web_ui_is_taken(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any
) -> None:
    """As when 17 replays run at once on one worker: Spark's UI would try 4040 and the 16 ports after it, then fail the job."""
    replay = one_record_replay(kinesis, {**entry, "spark": {"master": "local[2]"}}, tmp_path, stack)  # the defaults only
    held = []
    with contextlib.ExitStack() as ports:
        for port in range(4040, 4040 + 17):
            listener = ports.enter_context(socket.socket())
            with contextlib.suppress(OSError):  # already taken by something else: taken all the same
                listener.bind(("0.0.0.0", port))
                listener.listen()
                held.append(port)
        replay.run({})  # the manifest holds the record
    assert held, "no port of 4040..4056 could be held for the test"


def test_the_job_writes_nothing_into_a_root_another_pipeline_owns(kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any) -> None:
    replay = one_record_replay(kinesis, entry, tmp_path, stack)
    owner = Owner("payments", "payments-stream", "kr-other", "2026-11-01T00:00:00+00:00")
    write_owner(str(replay.output), owner)
    with pytest.raises(spark_submit.SparkSubmitError) as failure:
        replay.run({})
    assert f"output {replay.output} belongs to pipeline 'payments' (stream payments-stream); nothing was written" in str(failure.value)
    assert sorted(p.name for p in replay.output.iterdir()) == [layout.OWNER_FILE]  # no staging, no batch, no manifest

    # Its own root, recorded with the other layout (the config's output_format changed since): refused as well.
    other = "directory" if replay.pipeline.output_format == "iceberg" else "iceberg"
    own = Owner(entry["name"], entry["stream"], "kr", "2026-11-01T00:00:00+00:00", 0, other)
    write_owner(str(replay.output), own, replace=True)
    with pytest.raises(spark_submit.SparkSubmitError) as failure:
        replay.run({})
    assert f"holds the {other} layout and the job was asked for output_format {replay.pipeline.output_format}" in str(failure.value)
    assert sorted(p.name for p in replay.output.iterdir()) == [layout.OWNER_FILE]


@dataclass
class OneRecordReplay:
    pipeline: Any
    job: Path
    py_files: list[Path]
    spec: Path
    output: Path

    def run(self, env: dict[str, str]) -> None:
        command = spark_submit.build_command(self.pipeline, 1, self.spec, self.job, self.py_files)
        spark_submit.run(command, spark_submit.submit_env(self.pipeline.spark.master, env), "pipeline p, batch 1")
        result = json.loads((self.output / "_manifests" / "batch_id=0000000001.json").read_text())
        assert [s["records"] for s in result["shards"]] == [1]


def one_record_replay(kinesis: Any, entry: dict[str, Any], tmp_path: Path, stack: Any) -> OneRecordReplay:
    """A batch of one record, and what spark-submit needs to replay it."""
    (produced,) = produce(kinesis, entry["stream"], 1)
    seq = int(produced.sequence_number)
    spec = JobSpec(
        entry["name"],
        entry["stream"],
        1,
        entry["output"],
        (SequenceRange(produced.shard_id, seq, seq),),
        kinesis=KinesisEndpoint("us-east-1", stack.kinesis_url),
    )
    (tmp_path / "batch.json").write_text(spec.to_json())
    jobs = ROOT / "spark_jobs"
    py_files = [spark_submit.package_library(tmp_path / "lib.zip"), jobs / "kinesis_source.py"]
    pipeline = parse_config({"pipelines": [entry]})[0]
    return OneRecordReplay(pipeline, jobs / "replay_job.py", py_files, tmp_path / "batch.json", Path(entry["output"]))
