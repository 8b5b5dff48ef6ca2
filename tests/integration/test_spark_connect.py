"""The replay job as a Spark Connect client: its driver calls nothing through a JVM of its own and keeps no
accumulator, so a server elsewhere runs its tasks (issue 33, point 7). The DAG's replay task still starts spark-submit;
this runs the job itself against a Connect server the test starts, on the local stack."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kinesis_replay.adapters.files import read_result
from kinesis_replay.adapters.layout import data_path, quarantine_data_path
from kinesis_replay.core.config import PayloadConfig
from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.launchers import spark_submit
from stack import local_stack
from stack.producer import produce, put_raw
from stack.spark_connect import ConnectServer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, stack: Any) -> Iterator[ConnectServer]:
    """A server whose Python workers reach the local stack with its keys, from the environment (as executors would)."""
    started = ConnectServer(tmp_path_factory.mktemp("connect"), dict(os.environ))
    try:
        started.start()
        yield started
    finally:
        started.stop()


def test_a_batch_replays_through_a_spark_connect_server_exactly_once(
    server: ConnectServer, stack: Any, kinesis: Any, stream: str, tmp_path: Path
) -> None:
    produced = produce(kinesis, stream, 40)
    bad = put_raw(kinesis, stream, "k", b"not JSON")
    shards = {}
    for record in [*produced, bad]:
        low, high = shards.get(record.shard_id, (int(record.sequence_number),) * 2)
        shards[record.shard_id] = (min(low, int(record.sequence_number)), max(high, int(record.sequence_number)))
    output = tmp_path / "out"
    spec = JobSpec(
        "connect", stream, 1, str(output), tuple(SequenceRange(s, low, high) for s, (low, high) in sorted(shards.items())),
        kinesis=KinesisEndpoint(local_stack.REGION, stack.kinesis_url), payload=PayloadConfig("json", "user STRING, index BIGINT"),
    )  # fmt: skip
    (tmp_path / "batch.json").write_text(spec.to_json())
    library = spark_submit.package_library(tmp_path / "kinesis_replay.zip")
    jobs = ROOT / "spark_jobs"
    done = subprocess.run(
        [sys.executable, str(jobs / "replay_job.py"), "--remote", server.url, "--artifacts", f"{library},{jobs / 'kinesis_source.py'}",
         "--spec", str(tmp_path / "batch.json")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(library), str(jobs)])},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    result = read_result(str(output), 1)
    assert result is not None and (result.records, result.bad_records) == (40, 1)
    rows = pq.read_table(data_path(str(output), 1, result.attempt))
    keys = sorted(zip(rows.column("sequence_number").to_pylist(), rows.column("sub_sequence_number").to_pylist(), strict=True))
    assert keys == sorted((p.sequence_number, p.sub_sequence_number) for p in produced)  # each record once
    assert sorted(rows.column("index").to_pylist()) == list(range(40))  # decoded by the server's Python workers
    quarantined = pq.read_table(quarantine_data_path(str(output), 1, result.attempt))  # for the quarantine table's commit
    assert quarantined.column("sequence_number").to_pylist() == [bad.sequence_number]
