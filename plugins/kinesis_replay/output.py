"""Where a batch's output and result manifest live, and reading them back (pyarrow, imported on use)."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from kinesis_replay.errors import VerificationError
from kinesis_replay.state import Manifest

BATCH_DIGITS = 10  # zero-padded so that batch directories list in order
MANIFESTS_DIR = "_manifests"  # a leading underscore: Spark and pyarrow readers skip it
QUARANTINE_DIR = "_quarantine"  # records that could not be decoded, with the reason, per batch
STAGING_DIR = "_staging"  # where the replay job writes a batch before swapping it into place


def batch_partition(batch_id: int) -> str:
    """The partition value of a batch: ``batch_id=0000000042``."""
    return f"{batch_id:0{BATCH_DIGITS}d}"


def batch_path(output: str, batch_id: int) -> str:
    """The only directory a batch's rows are written to; a rewrite of the batch replaces all of it."""
    return f"{output.rstrip('/')}/batch_id={batch_partition(batch_id)}"


def quarantine_path(output: str, batch_id: int) -> str:
    """The batch's quarantine partition: rows whose payload could not be decoded, with ``decode_error`` set."""
    return f"{output.rstrip('/')}/{QUARANTINE_DIR}/batch_id={batch_partition(batch_id)}"


def staging_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{STAGING_DIR}/batch_id={batch_partition(batch_id)}"


def manifest_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{MANIFESTS_DIR}/batch_id={batch_partition(batch_id)}.json"


def _filesystem(path: str) -> tuple[Any, str]:
    from pyarrow import fs

    if "://" not in path:
        return fs.LocalFileSystem(), os.path.abspath(path)
    if path.startswith("s3a://"):  # Hadoop's scheme for S3; pyarrow knows it as s3
        path = "s3://" + path[len("s3a://") :]
    return fs.FileSystem.from_uri(path)  # type: ignore[no-any-return]


def read_manifest(output: str, batch_id: int) -> Manifest:
    """The result manifest the replay job wrote for a batch; missing or unreadable is a VerificationError."""
    from pyarrow import fs

    path = manifest_path(output, batch_id)
    filesystem, local = _filesystem(path)
    if filesystem.get_file_info(local).type != fs.FileType.File:
        raise VerificationError(f"batch {batch_id}: no result manifest at {path}: the replay job did not finish")
    with filesystem.open_input_stream(local) as stream:
        try:
            return Manifest.from_dict(json.loads(stream.read()))
        except (ValueError, KeyError) as exc:
            raise VerificationError(f"batch {batch_id}: unreadable result manifest {path}: {exc!r}") from exc


def count_rows_by_shard(path: str) -> Counter[str]:
    """Rows per shard in the Parquet files under ``path`` (none if it does not exist), read with pyarrow."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from pyarrow import fs

    filesystem, local = _filesystem(path)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return Counter()
    dataset = ds.dataset(local, filesystem=filesystem, format="parquet")
    shard_ids = dataset.to_table(columns=["shard_id"]).column("shard_id")
    return Counter({row["values"]: row["counts"] for row in pc.value_counts(shard_ids).to_pylist()})
