"""The pipeline's metrics reach StatsD: batch records and bytes, each shard's lag, the checkpoint age."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.harness import SUCCESS, load_dags, run_dag
from stack.producer import produce


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A UDP listener on 127.0.0.1 as the StatsD server, and Airflow's metrics pointed at it.

    dag.test() runs tasks in this process, where nothing initializes Airflow's metrics; a task process does
    it in task_runner.main() with the same two calls as below.
    """
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    lines: list[str] = []
    stopping = threading.Event()

    def receive() -> None:
        while not stopping.is_set():
            try:
                lines.extend(sock.recv(65536).decode().splitlines())
            except TimeoutError:
                continue

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    listener = threading.Thread(target=receive, daemon=True)
    listener.start()
    yield lines
    stopping.set()
    listener.join()
    sock.close()
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)


def test_a_cycle_sends_batch_shard_and_checkpoint_metrics(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, airflow_db: Path, statsd: list[str]
) -> None:
    produced = produce(kinesis, entry["stream"], 120)
    dag = load_dags(tmp_path / "pipelines.yaml", entry)[f"kinesis_replay_{entry['name']}"]
    assert run_dag(dag).tasks == SUCCESS
    prefix = f"airflow.kinesis_replay.{entry['name']}"
    assert f"{prefix}.regular_batch.records:{len(produced)}|g" in statsd
    assert f"{prefix}.regular_batch.bad_records:0|g" in statsd
    assert any(line.startswith(f"{prefix}.regular_batch.bytes:") for line in statsd)
    assert any(line.startswith(f"{prefix}.regular_batch.duration:") and line.endswith("|ms") for line in statsd)
    shards = {p.shard_id for p in produced}
    assert {line.split(".shard.")[1].split(".")[0] for line in statsd if ".millis_behind_latest:" in line} == shards
    age = wait_for(statsd, f"{prefix}.checkpoint_age_seconds:")  # sent by the last task: UDP may still be on its way
    assert float(age.split(":")[1].split("|")[0]) == 0  # committed: nothing waits


def wait_for(lines: list[str], start: str, seconds: float = 5) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = [line for line in lines if line.startswith(start)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no metric {start}... among {lines}")
