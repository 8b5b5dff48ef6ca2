"""The upgrade suite: every earlier release's outputs and state tables, taken over by the current code.

Each release under ``tests/releases/<version>/`` keeps its source (``source.tar.gz``). A test unpacks it, runs that
release's own DAGs with ``dag.test()`` in a process of its own (``tests/releases/build.py``) against this session's
local stack and Airflow database, as its users ran it, and leaves what a user's deployment holds at the upgrade: a
table or a directory with committed batches, the state table, and a batch in flight. The current code then takes
over the same config, state table and output, and must plan, replay, verify and commit new batches, finish the batch
in flight, backfill and restore old batches, run maintenance, and hold every record exactly once with every value
the earlier release wrote unchanged. A new release adds its folder; CHANGELOG.md says what each needs (nothing, so far).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.dynamodb_items import SHARD_KEYS
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.state import BatchStatus
from stack.harness import SUCCESS, load_dags, output_table, read_output, run_dag
from stack.producer import Produced

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ROOT / "tests" / "releases"
VERSIONS = sorted(p.name for p in RELEASES.iterdir() if (p / "source.tar.gz").exists())
KEY_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number")
SCHEMA = "user STRING, amount DOUBLE, note STRING, tags ARRAY<STRING>"
# JSON payloads whose decoding changed once (issue 44): doubles in a STRING column, Jackson's non-numeric numbers,
# an escaped single quote, deep nesting; and ordinary ones, and ones no release decodes.
TRICKY = [
    b'{"user": "u-1", "amount": 1.5, "note": "plain", "tags": ["a", "b"]}',
    b'{"user": "u-2", "amount": 1e23, "note": 1e23}',
    b'{"user": "u-3", "amount": 2e23, "note": 2e23}',
    b'{"user": "u-4", "amount": 5e-324, "note": 5e-324}',
    b'{"user": "u-5", "note": {"x": 8.41e21}}',
    b'{"user": "u-6", "note": 2.82879384806159E17, "amount": 2.82879384806159E17}',
    b'{"user": "u-7", "amount": -INF}',
    b'{"user": "u-8", "amount": +INF}',
    b'{"user": "u-9", "amount": +Infinity}',
    b'{"user": "u-10", "note": "it\\\'s"}',
    b'{"user": "u-11", "note": ' + b"[" * 950 + b"]" * 950 + b"}",
    b'{"user": "u-12", "amount": "NaN", "tags": [1, 2.5, true]}',
    b"not json at all",
    b'{"user": "u-13", "amount": "abc"}',
]


@dataclass(frozen=True)
class Earlier:
    """An earlier release unpacked, and what its runs did."""

    version: str
    source: Path
    runs: list[dict[str, Any]]


def unpack(version: str, into: Path) -> Path:
    source = into / f"release-{version}"
    if not source.exists():
        with tarfile.open(RELEASES / version / "source.tar.gz") as archive:
            archive.extractall(source, filter="data")
    return source


def run_release(version: str, work: Path, entries: list[dict[str, Any]], steps: list[dict[str, Any]]) -> Earlier:
    """Run the earlier release's DAGs (``steps``, in order) in a process of its own; their outputs stay for the test."""
    source = unpack(version, work)
    spec, result = work / f"steps-{uuid.uuid4().hex[:6]}.json", work / "result.json"
    spec.write_text(json.dumps({"entries": entries, "steps": steps}))
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(source / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(source / "plugins"),
        # KINESIS_REPLAY_JVM_CACHE stays the session's: an archive's name hashes the JVM, Spark's jars and the options,
        # so the earlier release maps the one this session's first replay recorded, or records its own beside it.
        "PYTHONPATH": "",
    }
    done = subprocess.run(
        [sys.executable, str(RELEASES / "build.py"), str(source), str(spec), str(result)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"release {version} failed to build its outputs:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return Earlier(version, source, json.loads(result.read_text()))


def produce_step(stream: str, payloads: list[bytes]) -> dict[str, Any]:
    records = [[f"k{i % 7}", base64.b64encode(p).decode()] for i, p in enumerate(payloads)]
    return {"produce": {"stream": stream, "records": records}}


def produced_by(earlier: Earlier) -> list[Produced]:
    return [
        Produced(shard, seq, key, base64.b64decode(data)) for step in earlier.runs for shard, seq, key, data in step.get("produced", [])
    ]


def rows_by_key(table: pa.Table) -> dict[tuple[Any, ...], str]:
    """Each row by its record's key: every column a reader sees, as text (so that a NaN equals itself)."""
    rows: dict[tuple[Any, ...], str] = {}
    for row in table.to_pylist():
        key = tuple(row[c] for c in KEY_COLUMNS)
        assert key not in rows, f"record {key} is in the output twice"
        rows[key] = repr(sorted(row.items()))
    return rows


def landed_once(produced: list[Produced], output: Path) -> Counter[str]:
    """Every produced record once in the output, as a row or as a quarantined record; the tally says where."""
    keys = [(p.shard_id, p.sequence_number, p.sub_sequence_number) for p in produced]
    rows = read_output(output)
    bad = read_output(output, quarantine=True)
    found = Counter(zip(*(rows.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))
    found.update(zip(*(bad.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))
    assert {k: n for k, n in found.items() if n > 1} == {}, "records in the output twice"
    assert set(found) == set(keys), f"lost {set(keys) - set(found)}; unexpected {set(found) - set(keys)}"
    return Counter(rows=len(rows), quarantined=len(bad))


def quarantined_keys(output: Path) -> set[tuple[Any, ...]]:
    bad = read_output(output, quarantine=True)
    return set(zip(*(bad.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))


def batch_rows(output: Path, batch_id: int, keep_batch: bool = True) -> dict[tuple[Any, ...], str]:
    table = read_output(output)
    rows = table.filter(pc.equal(table.column("batch_id"), batch_id))
    return rows_by_key(rows if keep_batch else rows.drop_columns(["batch_id"]))


@pytest.fixture
def fresh(tmp_path: Path, stream: str, airflow_db: Path) -> dict[str, Any]:
    """A pipeline entry the earlier release creates everything for: its state table, its output, its table."""
    name = f"up{uuid.uuid4().hex[:8]}"
    return {
        "name": name,
        "stream": stream,
        "output": str(tmp_path / "out"),
        "schedule": None,
        "initial_position": "TRIM_HORIZON",
        "state_table": f"kr-{name}",
        "retries": 0,
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
    }


def dags_of(tmp_path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    return load_dags(tmp_path / "pipelines.yaml", entry)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_json_table_pipeline_goes_on_after_the_upgrade(version: str, tmp_path: Path, fresh: dict[str, Any], dynamodb: Any) -> None:
    """Table output, JSON payloads: a committed batch and a replayed, uncommitted one, left by the earlier release."""
    entry = {**fresh, "payload": {"format": "json", "schema": SCHEMA, "max_bad_share": 0.5}}
    dag_id, backfill_id = f"kinesis_replay_{entry['name']}", f"kinesis_replay_backfill_{entry['name']}"
    earlier = run_release(
        version,
        tmp_path,
        [entry],
        [
            produce_step(entry["stream"], TRICKY),
            {"run": {"dag": dag_id}},
            produce_step(entry["stream"], TRICKY[:6]),
            {"run": {"dag": dag_id, "tasks": ["plan", "replay"]}},  # written, never verified nor committed
        ],
    )
    assert earlier.runs[1]["state"] == "success", earlier.runs[1]
    output = Path(entry["output"])
    store = DynamoDBStateStore(dynamodb, entry["state_table"])
    planned = store.get_batch(entry["name"], 2)
    assert store.get_head(entry["name"]).in_flight == 2 and planned.status == BatchStatus.PLANNED
    first = batch_rows(output, 1)
    assert len(first) >= 10 and set(batch_rows(output, 2)) == set()  # written, never committed: no reader sees it
    (attempt,) = output.glob("data/batch_id=0000000002/attempt=*")
    written = rows_by_key(pq.read_table(attempt).drop_columns(["batch_id"]))

    # The current code takes over the same config, state table and output.
    dags = dags_of(tmp_path, entry)
    produced = produced_by(earlier)
    later = [b'{"user": "u-new", "amount": 3.25, "note": "after the upgrade"}', *TRICKY[1:4]]
    produced += produced_now(entry["stream"], later)  # arrive before the rerun: not in batch 2
    assert run_dag(dags[dag_id]).state == "success"  # finishes the batch in flight, with the same ranges
    resumed = store.get_batch(entry["name"], 2)
    assert resumed.status == BatchStatus.COMMITTED and resumed.ranges == planned.ranges
    assert batch_rows(output, 2, keep_batch=False) == written  # as the earlier release wrote it
    assert run_dag(dags[dag_id]).tasks == SUCCESS  # a new batch, on the earlier release's table
    assert store.get_batch(entry["name"], 3).status == BatchStatus.COMMITTED and len(batch_rows(output, 3)) == len(later)
    assert DynamoDBStateStore(dynamodb, entry["state_table"]).shard_keys(entry["name"]) == 1  # its shard items stay where they were
    landed_once(produced, output)
    assert batch_rows(output, 1) == first, "a value the earlier release wrote changed"

    quarantined = quarantined_keys(output)
    backfill = run_dag(dags[backfill_id], run_conf={"batches": {"batch_ids": [1]}})
    assert backfill.state == "success", backfill
    assert batch_rows(output, 1) == first, "the backfill changed a value the earlier release wrote"
    assert quarantined_keys(output) == quarantined, "the backfill quarantined other records than the earlier release"
    landed_once(produced, output)

    # Maintenance on the earlier release's table, then a rollback to its first snapshot with Iceberg's own tool:
    # refused at the next run, and restored from the output's files.
    assert run_dag(dags[f"kinesis_replay_maintenance_{entry['name']}"]).state == "success"
    table = output_table(output)
    oldest = next(s for s in table.snapshots() if s.summary["kinesis-replay.batch-id"] == "1")
    table.manage_snapshots().rollback_to_snapshot(oldest.snapshot_id).commit()
    head = store.get_head(entry["name"])
    assert run_dag(dags[dag_id]).state == "failed"
    assert store.get_head(entry["name"]) == head and read_output(output).num_rows == len(first)
    assert run_dag(dags_of(tmp_path, entry)[backfill_id], run_conf={"restore_table": True}).state == "success"
    assert batch_rows(output, 1) == first
    assert landed_once(produced, output) == Counter(rows=len(produced) - len(quarantined), quarantined=len(quarantined))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_directory_pipeline_goes_on_after_the_upgrade(version: str, tmp_path: Path, fresh: dict[str, Any], dynamodb: Any) -> None:
    """Directory output, raw payloads: a committed batch and a planned one, left by the earlier release."""
    entry = {**fresh, "output_format": "directory"}
    dag_id, backfill_id = f"kinesis_replay_{entry['name']}", f"kinesis_replay_backfill_{entry['name']}"
    payloads = [f'{{"n": {i}}}'.encode() for i in range(30)]
    earlier = run_release(
        version,
        tmp_path,
        [entry],
        [
            produce_step(entry["stream"], payloads[:20]),
            {"run": {"dag": dag_id}},
            produce_step(entry["stream"], payloads[20:]),
            {"run": {"dag": dag_id, "tasks": ["plan"]}},  # planned, nothing read
        ],
    )
    assert earlier.runs[1]["state"] == "success", earlier.runs[1]
    output = Path(entry["output"])
    store = DynamoDBStateStore(dynamodb, entry["state_table"])
    assert store.get_head(entry["name"]).in_flight == 2
    first = batch_rows(output, 1)
    assert len(first) == 20

    dags = dags_of(tmp_path, entry)
    assert run_dag(dags[dag_id]).state == "success"  # replays and commits the planned batch
    assert [b.status for b in store.list_batches(entry["name"])] == [BatchStatus.COMMITTED] * 2
    produced = produced_by(earlier)
    landed_once(produced, output)
    assert batch_rows(output, 1) == first

    backfill = run_dag(dags[backfill_id], run_conf={"batches": {"batch_ids": [1]}})
    assert backfill.state == "success", backfill
    assert batch_rows(output, 1) == first
    landed_once(produced, output)

    # The state table lost: the output's commit records, the earlier release's among them, rebuild it, and the
    # current code plans its first batch on the earlier release's checkpoints.
    committed = [(b.batch_id, b.ranges) for b in store.list_batches(entry["name"])]
    dynamodb.delete_table(TableName=entry["state_table"])
    dynamodb.get_waiter("table_not_exists").wait(TableName=entry["state_table"])
    produced += produced_now(entry["stream"], [b"after the upgrade"] * 5)
    refused = run_dag(dags_of(tmp_path, entry)[dag_id])
    assert refused.tasks["plan"] == "failed" and refused.tasks["commit"] == "upstream_failed", refused
    (pipeline,) = parse_config({"pipelines": [entry]})
    with pytest.raises(AirflowFailException) as raised:  # what the plan task said
        tasks.plan(pipeline, "manual__test", {})
    assert f"pipeline {entry['name']!r}: state table {entry['state_table']} holds no state" in str(raised.value)
    assert f"output {entry['output']} holds 2 committed batches (up to batch 2)" in str(raised.value)
    assert '"recover_from_output": true' in str(raised.value)
    assert store.get_head(entry["name"]).version == 0 and store.list_batches(entry["name"]) == []  # nothing planned
    dry = run_dag(dags_of(tmp_path, entry)[dag_id], run_conf={"recover_from_output": True, "dry_run": True})
    assert dry.skipped and store.get_head(entry["name"]).version == 0 and store.get_shards(entry["name"]) == {}
    assert run_dag(dags_of(tmp_path, entry)[dag_id], run_conf={"recover_from_output": True}).tasks == SUCCESS
    assert [(b.batch_id, b.ranges) for b in store.list_batches(entry["name"])][:2] == committed
    assert [b.status for b in store.list_batches(entry["name"])] == [BatchStatus.COMMITTED] * 3
    # The recovered state is written as the current release writes it: the shard items spread over their keys.
    assert DynamoDBStateStore(dynamodb, entry["state_table"]).shard_keys(entry["name"]) == SHARD_KEYS
    assert batch_rows(output, 1) == first
    landed_once(produced, output)


def produced_now(stream: str, payloads: list[bytes]) -> list[Produced]:
    from stack.producer import kinesis_client, put_raw

    client = kinesis_client()
    return [put_raw(client, stream, f"k{i % 7}", p) for i, p in enumerate(payloads)]
