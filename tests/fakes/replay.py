"""A batch replayed without Spark, for the steps' unit tests: into a directory output, or a table output's attempt folders.

It reads each range with the library's own reader (range_reader.iterate_range, what the Spark job's tasks call per
range) and writes with the job's own task writer (attempt_writer): the batch's Parquet files under layout.batch_path,
its quarantine, and its result manifest from the writer's report, as the replay job does for a directory output
(a committed batch's folders staged, as the job stages them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kinesis_replay.adapters import files, layout, range_reader
from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine, page_rows
from kinesis_replay.adapters.json_columns import JsonColumns
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.state import Batch, ReplayResult

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


def table_pipeline(root: Path, name: str = "orders", stream: str = "orders", **changes: Any) -> PipelineConfig:
    """A pipeline landing in an Iceberg table of the embedded catalog (SQLite under the output root), its reads unpaced."""
    return directory_pipeline(root, name, stream, output_format="iceberg", **changes)


def replay(
    pipeline: PipelineConfig, client: Any, batch: Batch, accept_gap: frozenset[str] = frozenset(), attempt: str = "fake"
) -> ReplayResult:
    """Read the batch's ranges from ``client`` and write its files and result manifest as the job's tasks do (its writer,
    one task reading the ranges in turn, a JSON payload with a schema decoded on the way), then put them in place as its
    driver does: swapped into the batch's folders for a batch in flight, left staged for a committed one (a backfill's),
    whose check swaps them in; returns the manifest."""
    output, batch_id = pipeline.output, batch.batch_id
    payload = pipeline.payload
    columns = JsonColumns(payload.schema, pipeline.name) if payload.format == "json" and payload.schema else None
    table = pipeline.table is not None
    files.finish_swap(layout.swap_record_path(output, batch_id))
    files.remove_folder(layout.staging_path(output, batch_id), missing_ok=True)
    if table:  # the job's folders of a table output's attempt: its own data and quarantine folders, never swapped
        data, quarantine = layout.data_path(output, batch_id, attempt), layout.quarantine_data_path(output, batch_id, attempt)
    else:
        data, quarantine = layout.staged_data_path(output, batch_id, attempt), layout.staged_quarantine_path(output, batch_id, attempt)
    writer = AttemptWriter(data, quarantine, "part-00000-t0", batch_id if table else None, columns)
    for rng in batch.ranges:
        for page in range_reader.iterate_range(client, pipeline.stream, rng, pipeline.read, accept_gap=rng.shard_id in accept_gap):
            writer.write(page_rows(pipeline.stream, rng.shard_id, page))
    _, results = combine([writer.close()])
    staged = files.is_file(layout.commit_record_path(output, batch_id))
    if not staged and not table:
        moves = [(data, layout.batch_path(output, batch_id)), (quarantine, layout.quarantine_path(output, batch_id))]
        files.swap_in(layout.swap_record_path(output, batch_id), moves)
        files.remove_folder(layout.staging_path(output, batch_id), missing_ok=True)
    decoding = Decoding.of(pipeline.payload.format, pipeline.payload.schema)
    result = ReplayResult(pipeline.name, batch_id, tuple(results), 0.1, attempt if staged or table else None, decoding)
    files.write_json(layout.result_path(output, batch_id), result.to_dict())
    return result
