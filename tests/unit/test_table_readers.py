"""docs/table.md's "Reading the table": every Python snippet runs, in order, against a table the project's commit wrote."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kinesis_replay.adapters import iceberg_table
from kinesis_replay.adapters.layout import data_path
from kinesis_replay.core.config import PipelineConfig, parse_config

ROOT = Path(__file__).resolve().parents[2]
DEMO_OUTPUT = "/tmp/kinesis-replay/demo"  # where the snippets read: the demo pipeline's output
NOON = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)  # the snippets' arrival-time filter
SHARDS = ("shardId-000000000000", "shardId-000000000001")


def snippets() -> list[str]:
    doc = (ROOT / "docs" / "table.md").read_text()
    section = doc.split("\n## Reading the table\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def demo(output: Path) -> PipelineConfig:
    entry = {
        "name": "demo", "stream": "demo", "output": str(output), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"},
    }  # fmt: skip
    (pipeline,) = parse_config({"pipelines": [entry]})
    return pipeline


def commit(pipeline: PipelineConfig, batch_id: int, arrivals: list[datetime]) -> None:
    """One batch of one file per shard, committed as the pipeline commits it."""
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
    iceberg_table.commit_snapshot(pipeline, batch_id, "a", paths, run_id=f"run-{batch_id}")


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
