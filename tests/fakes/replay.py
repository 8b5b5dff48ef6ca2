"""A batch replayed without Spark into a directory output, for the steps' unit tests.

It reads each range with the library's own reader (range_reader.iterate_range, what the Spark job's source calls per
range), turns pages into rows with records.to_rows, and writes what the replay job writes for a directory output: the
batch's Parquet files under layout.batch_path and its result manifest, with the row digest verify recomputes. The
manifest's ``checksum`` is the row digest too (Spark's xxhash64 is the replay job's; backfills only compare a replay's
checksums with another's, both made here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kinesis_replay.adapters import files, layout, range_reader
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.records import format_digest, row_digest, to_rows
from kinesis_replay.core.state import Batch, ReplayResult, ShardResult

# A fake stream answers at once: Kinesis's per-shard call budgets would only make the tests wait.
UNPACED = {"get_records_per_second": 1e9, "get_shard_iterator_per_second": 1e9, "bytes_per_second": 1e12}


def directory_pipeline(root: Path, name: str = "orders", stream: str = "orders", **changes: Any) -> PipelineConfig:
    """A pipeline landing in a local directory (no Iceberg catalog, no Spark) with a state table named after it, its
    reads unpaced."""
    entry = {
        "name": name, "stream": stream, "output": str(root), "output_format": "directory", "schedule": None,
        "initial_position": "TRIM_HORIZON", "state_table": f"kr-{name}", "spark": {}, "read": dict(UNPACED), **changes,
    }  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def replay(pipeline: PipelineConfig, client: Any, batch: Batch, accept_gap: frozenset[str] = frozenset()) -> ReplayResult:
    """Read the batch's ranges from ``client`` and write its files and result manifest; returns the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    results = []
    for rng in batch.ranges:
        mine: list[dict[str, Any]] = []
        for page in range_reader.iterate_range(client, pipeline.stream, rng, pipeline.read, accept_gap=rng.shard_id in accept_gap):
            got = to_rows(page)
            columns = {name: getattr(got, name) for name in (
                "sequence_number", "sub_sequence_number", "partition_key", "approximate_arrival_timestamp", "data", "decode_error",
            )}  # fmt: skip
            mine += [
                {"stream_name": pipeline.stream, "shard_id": rng.shard_id, **{name: values[i] for name, values in columns.items()}}
                for i in range(len(got))
            ]
        if not mine:
            continue  # a range every record of which was gone: no row, no shard in the manifest
        digest = sum(
            row_digest([r["shard_id"], r["sequence_number"], str(r["sub_sequence_number"]), r["partition_key"]], r["data"]) for r in mine
        )
        seqs = [int(r["sequence_number"]) for r in mine]
        results.append(
            ShardResult(
                rng.shard_id, len(mine), sum(len(r["data"]) for r in mine), min(seqs), max(seqs), format_digest(digest),
                last_arrival=max(r["approximate_arrival_timestamp"] for r in mine), digest=format_digest(digest),
            )
        )  # fmt: skip
        rows += mine
    folder = Path(layout.batch_path(pipeline.output, batch.batch_id))
    if folder.exists():
        for old in folder.glob("*.parquet"):
            old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    schema = files.arrow_row_schema()
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, folder / "part-00000.parquet")
    result = ReplayResult(pipeline.name, batch.batch_id, tuple(results), 0.1)
    path = Path(layout.result_path(pipeline.output, batch.batch_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=2))
    return result
