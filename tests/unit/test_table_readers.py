"""docs/table.md's "Reading the table" and "The quarantine table": every Python snippet runs, in order, against tables the
project's commits wrote."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kinesis_replay.adapters import iceberg_table, quarantine_table
from kinesis_replay.adapters.layout import commit_record_path, data_path, quarantine_data_path
from kinesis_replay.core.config import PipelineConfig, parse_config

ROOT = Path(__file__).resolve().parents[2]
DEMO_OUTPUT = "/tmp/kinesis-replay/demo"  # where the snippets read: the demo pipeline's output
NOON = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)  # the snippets' arrival-time filter
SHARDS = ("shardId-000000000000", "shardId-000000000001")


def snippets(heading: str = "Reading the table") -> list[str]:
    doc = (ROOT / "docs" / "table.md").read_text()
    section = doc.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def demo(output: Path) -> PipelineConfig:
    entry = {
        "name": "demo", "stream": "demo", "output": str(output), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"},
    }  # fmt: skip
    (pipeline,) = parse_config({"pipelines": [entry]})
    return pipeline


def commit(pipeline: PipelineConfig, batch_id: int, arrivals: list[datetime]) -> int:
    """One batch of one file per shard, committed as the pipeline commits it; its snapshot's id."""
    folder = Path(data_path(pipeline.output, batch_id, "a"))
    folder.mkdir(parents=True)
    paths = []
    for shard in SHARDS:
        n = len(arrivals)
        rows = {
            "stream_name": ["demo"] * n,
            "shard_id": [shard] * n,
            "sequence_number": [f"{batch_id}{i:03d}" for i in range(n)],
            "sub_sequence_number": [0] * n,
            "partition_key": ["k"] * n,
            "approximate_arrival_timestamp": pa.array(arrivals, pa.timestamp("us", tz="UTC")),
            "data": [b"{}"] * n,
            "decode_error": pa.nulls(n, pa.string()),
            "batch_id": [batch_id] * n,
        }
        path = folder / f"{shard}.parquet"
        pq.write_table(pa.table(rows), path)
        paths.append(str(path))
    return iceberg_table.commit_snapshot(pipeline, batch_id, "a", paths, run_id=f"run-{batch_id}")


def test_every_python_snippet_reads_the_table_as_the_docs_say(tmp_path: Path) -> None:
    output = tmp_path / "demo"
    pipeline = demo(output)
    hour = timedelta(hours=1)
    commit(pipeline, 1, [NOON - 2 * hour, NOON - hour])  # before noon: the arrival-time filter leaves it out
    commit(pipeline, 2, [NOON, NOON + hour, NOON + 2 * hour])
    commit(pipeline, 3, [NOON + 3 * hour])

    code = snippets()
    assert len(code) == 3, "the section's Python snippets changed: check what this test asserts"
    scope: dict[str, Any] = {}
    for snippet in code:
        exec(compile(snippet.replace(DEMO_OUTPUT, str(output)), "docs/table.md", "exec"), scope)

    assert sorted(scope["records"]["batch_id"].to_pylist()) == [2] * 6 + [3] * 2
    assert min(scope["records"]["approximate_arrival_timestamp"].to_pylist()) == NOON
    assert set(scope["frame"]["batch_id"]) == {2} and len(scope["frame"]) == 6
    assert scope["per_shard"] == [(SHARDS[0], 6), (SHARDS[1], 6)]
    assert sorted(set(scope["as_of"]["batch_id"].to_pylist())) == [1, 2], "as of batch 2: batches 1 and 2, not 3"
    assert scope["batch_then"].num_rows == 6


def quarantine(pipeline: PipelineConfig, batch_id: int, reasons: list[str]) -> int | None:
    """A batch's quarantined records, committed to the quarantine table as the commit step does; its snapshot's id."""
    folder = Path(quarantine_data_path(pipeline.output, batch_id, "a"))
    folder.mkdir(parents=True)
    n = len(reasons)
    rows = {
        "stream_name": ["demo"] * n,
        "shard_id": [SHARDS[0]] * n,
        "sequence_number": [f"{batch_id}9{i:02d}" for i in range(n)],
        "sub_sequence_number": [0] * n,
        "partition_key": ["k"] * n,
        "approximate_arrival_timestamp": pa.array([NOON] * n, pa.timestamp("us", tz="UTC")),
        "data": [b"not JSON"] * n,
        "decode_error": reasons,
        "batch_id": pa.array([batch_id] * n, pa.int64()),
    }
    path = folder / "part-00000-0-00000.parquet"
    pq.write_table(pa.table(rows), path)
    properties = iceberg_table.snapshot_properties(pipeline.name, batch_id, "a", f"run-{batch_id}")
    return quarantine_table.commit(pipeline, {batch_id: [str(path)]}, properties, properties)


def test_every_python_snippet_reads_the_quarantine_table_as_the_docs_say(tmp_path: Path) -> None:
    output = tmp_path / "demo"
    pipeline = demo(output)
    ids = {}
    for batch_id, reasons in ((1, ["blank payload"]), (2, ["not UTF-8: byte 0xff at offset 0 (invalid start byte)"] * 2), (3, [])):
        snapshot_id = commit(pipeline, batch_id, [NOON + timedelta(hours=batch_id)])
        ids[batch_id] = (snapshot_id, quarantine(pipeline, batch_id, reasons) if reasons else None)
    snapshot_id, quarantine_id = ids[2]  # the batch's commit record, as the commit step writes it (both ids under "batch")
    record = Path(commit_record_path(str(output), 2))
    record.parent.mkdir(parents=True)
    batch = {"batch_id": 2, "snapshot_id": snapshot_id, "quarantine_snapshot_id": quarantine_id}
    record.write_text(json.dumps({"format": 1, "batch": batch}))

    code = snippets("The quarantine table")
    assert len(code) == 2, "the section's Python snippets changed: check what this test asserts"
    scope: dict[str, Any] = {}
    for snippet in code:
        exec(compile(snippet.replace(DEMO_OUTPUT, str(output)), "docs/table.md", "exec"), scope)

    assert scope["rows"].num_rows == 2 and set(scope["rows"]["batch_id"].to_pylist()) == {2}
    assert scope["quarantined"].num_rows == 2 and set(scope["quarantined"]["batch_id"].to_pylist()) == {2}
    assert "decode_error" in scope["quarantined"].column_names
    assert sorted(set(scope["reasons"]["batch_id"])) == [2]
    assert scope["per_reason"] == [("not UTF-8: byte 0xff at offset 0 (invalid start byte)", 2), ("blank payload", 1)]
