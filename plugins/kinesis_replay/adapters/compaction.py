"""A batch's verified files written again as few files as its size needs: what maintenance's compaction commits.

A replay writes a data file per Spark task (two here, up to one a core on a cluster), so a table of one-minute batches
gathers thousands of small files a day, and managed compaction (Glue's, S3 Tables') acts only on partitions of more
than 100 files: on ``identity(batch_id)`` it never starts. Compaction reads the batch's verified attempt's files with
pyarrow and writes them into an attempt folder of its own (``layout.data_path``), one file per ``target_bytes`` of
the sources, each shard's records one row group (or a few, past ``ROW_GROUP_ROWS``) in sequence-number order, so a
row group still holds one shard's consecutive records and its statistics still bound their arrival times. The
attempt's quarantined records are copied into the new attempt's quarantine folder as they are: the attempt is whole,
and every later commit of it (a restore, a resumed commit) finds the quarantine it names.

The files are checked against the batch's ledger entry before any commit (verify.check_files), as a backfill's are.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from kinesis_replay.adapters import layout
from kinesis_replay.adapters.attempt_writer import FILE_BYTES, ROW_GROUP_ROWS, UNIQUE_COLUMNS
from kinesis_replay.adapters.files import filesystem_of, parquet_files, remove_folder

TARGET_BYTES = FILE_BYTES  # Iceberg's own default target file size (write.target-file-size-bytes): 512 MiB


@dataclass(frozen=True)
class Rewritten:
    """What compaction wrote for a batch: its data files and its quarantine files, in the new attempt's folders."""

    data: tuple[str, ...]
    quarantine: tuple[str, ...]


def files_needed(total_bytes: int, target_bytes: int = TARGET_BYTES) -> int:
    """How many files a batch of ``total_bytes`` needs at ``target_bytes`` a file (at least one)."""
    return max(1, math.ceil(total_bytes / max(1, target_bytes)))


def rewrite(output: str, batch_id: int, source_attempt: str, attempt: str, target_bytes: int = TARGET_BYTES) -> Rewritten:
    """Write the batch's rows of ``source_attempt`` again as attempt ``attempt``: data files by ``target_bytes`` of the
    sources' sizes, shard by shard; the quarantine folder's files copied. A folder left by an earlier try of the same
    attempt is removed first, so a retried compaction never adds to what a cut-short one wrote."""
    data_folder = layout.data_path(output, batch_id, attempt)
    quarantine_folder = layout.quarantine_data_path(output, batch_id, attempt)
    remove_folder(data_folder, missing_ok=True)
    remove_folder(quarantine_folder, missing_ok=True)
    sources = parquet_files(layout.data_path(output, batch_id, source_attempt))
    data = _rewrite_rows(sources, data_folder, target_bytes)
    quarantined = parquet_files(layout.quarantine_data_path(output, batch_id, source_attempt))
    copied = _rewrite_rows(quarantined, quarantine_folder, target_bytes) if quarantined else []
    return Rewritten(tuple(data), tuple(copied))


def _rewrite_rows(sources: Sequence[str], folder: str, target_bytes: int) -> list[str]:
    """The sources' rows in as few files as their size needs: each shard's rows sorted by sequence number (as an
    integer) and sub-sequence number, a shard's rows never split across files."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tables, sizes = [], 0
    for path in sources:
        filesystem, local = filesystem_of(path)
        sizes += filesystem.get_file_info(local).size or 0
        with filesystem.open_input_file(local) as stream:
            tables.append(pq.read_table(stream))
    if not tables or sum(t.num_rows for t in tables) == 0:
        return []
    rows = pa.concat_tables(tables)
    # Sequence numbers are decimal strings of up to 128 bits: ordered by length, then as text, they order as integers.
    sequence = rows.column("sequence_number")
    keys = pa.table({
        "shard": rows.column("shard_id"), "width": pc.utf8_length(sequence), "sequence": sequence,
        "sub": rows.column("sub_sequence_number") if "sub_sequence_number" in rows.column_names else pa.nulls(rows.num_rows, pa.int64()),
    })  # fmt: skip
    order = pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in keys.column_names])
    rows = rows.take(order)
    shards = rows.column("shard_id").to_pylist()
    starts = [0, *(i for i in range(1, len(shards)) if shards[i] != shards[i - 1]), len(shards)]
    per_file = sizes / files_needed(sizes, target_bytes)  # the sources' bytes a file takes, counted shard by shard
    dictionary = [name for name in rows.schema.names if name not in UNIQUE_COLUMNS]
    filesystem, local_folder = filesystem_of(folder)
    filesystem.create_dir(local_folder, recursive=True)
    written: list[str] = []
    writer, in_file = None, 0.0
    try:
        for low, high in itertools.pairwise(starts):
            if writer is None or in_file >= per_file:
                if writer is not None:
                    writer.close()
                written.append(f"{folder.rstrip('/')}/compacted-{len(written):05d}.parquet")
                writer = pq.ParquetWriter(
                    filesystem_of(written[-1])[1], rows.schema, filesystem=filesystem, compression="snappy", use_dictionary=dictionary
                )
                in_file = 0.0
            writer.write_table(rows.slice(low, high - low), row_group_size=ROW_GROUP_ROWS)
            in_file += sizes * (high - low) / rows.num_rows
    finally:
        if writer is not None:
            writer.close()
    return written
