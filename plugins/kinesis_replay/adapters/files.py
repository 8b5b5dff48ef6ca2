"""Reading and writing the output's files through pyarrow's file systems (imported on use): local disk and S3 alike."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kinesis_replay.adapters.layout import batch_data_path, data_path, result_path
from kinesis_replay.core.errors import KinesisReplayError, OutputCorruptError, OutputIOError, OutputRefusedError, VerificationError
from kinesis_replay.core.formats import s3_uri
from kinesis_replay.core.records import ROW_COLUMNS
from kinesis_replay.core.state import ReplayResult


def arrow_row_schema() -> Any:
    """The output files' columns (records.ROW_COLUMNS) as a pyarrow schema, without the partition column."""
    import pyarrow as pa

    types = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "BINARY": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in ROW_COLUMNS])


def attempt_paths(output: str, batch_id: int) -> dict[str, str]:
    """The batch's attempt folders under the table's data (attempt -> path), whether or not a snapshot references them."""
    from pyarrow import fs

    folder = batch_data_path(output, batch_id)
    filesystem, local = filesystem_of(folder)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return {}
    found = {}
    for info in filesystem.get_file_info(fs.FileSelector(local)):
        if info.type == fs.FileType.Directory and info.base_name.startswith("attempt="):
            attempt = info.base_name[len("attempt=") :]
            found[attempt] = data_path(output, batch_id, attempt)
    return found


def remove_folder(path: str) -> None:
    """Delete a folder and everything under it (on S3, every object under the prefix)."""
    filesystem, local = filesystem_of(path)
    filesystem.delete_dir(local)


def filesystem_of(path: str) -> tuple[Any, str]:
    from pyarrow import fs

    if "://" not in path:
        return fs.LocalFileSystem(), os.path.abspath(path)
    return fs.FileSystem.from_uri(s3_uri(path))  # type: ignore[no-any-return]


def is_file(path: str) -> bool:
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    return bool(filesystem.get_file_info(local).type == fs.FileType.File)


def has_result(output: str, batch_id: int) -> bool:
    return is_file(result_path(output, batch_id))


def read_result(output: str, batch_id: int) -> ReplayResult:
    """The result manifest the replay job wrote for a batch; missing or unreadable is a VerificationError."""
    path = result_path(output, batch_id)
    try:
        data = read_json(path)
    except KinesisReplayError as exc:
        raise VerificationError(f"batch {batch_id}: unreadable result manifest {path}: {exc}") from exc
    if data is None:
        raise VerificationError(f"batch {batch_id}: no result manifest at {path}: the replay job did not finish")
    try:
        return ReplayResult.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise VerificationError(f"batch {batch_id}: unreadable result manifest {path}: {exc!r}") from exc


def count_rows_by_shard(path: str) -> Counter[str]:
    """Rows per shard in the Parquet files under ``path`` (none if it does not exist), read with pyarrow."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return Counter()
    dataset = ds.dataset(local, filesystem=filesystem, format="parquet")
    shard_ids = dataset.to_table(columns=["shard_id"]).column("shard_id")
    return Counter({row["values"]: row["counts"] for row in pc.value_counts(shard_ids).to_pylist()})


def parquet_files(path: str) -> list[str]:
    """The Parquet files under a folder (none if it does not exist), as full paths or URIs, in order."""
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return []
    infos = filesystem.get_file_info(fs.FileSelector(local, recursive=True))
    found = sorted(i.path for i in infos if i.type == fs.FileType.File and i.base_name.endswith(".parquet"))
    if "://" not in path:
        return found
    scheme = path.split("://", 1)[0]
    return [f"{scheme}://{f}" for f in found]


@dataclass(frozen=True)
class ShardRows:
    """What a shard's rows in a set of files add up to: their count, their row digest, and repeated (sequence, sub-sequence) pairs."""

    rows: int
    digest: int  # the sum of records.row_digest over the rows (not yet reduced modulo 2**64)
    duplicates: int  # rows whose (sequence number, sub-sequence number) an earlier row of the shard has


def scan_rows(files: list[str]) -> dict[str, ShardRows]:
    """Rows, row digest and repeated keys per shard, read file by file and batch by batch with pyarrow.

    Memory stays bounded by a record batch, plus the shards' keys (no payload) for the uniqueness check.
    """
    import hashlib

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from kinesis_replay.core.records import DIGEST_SEPARATOR, DIGEST_TEXT_COLUMNS

    digests: Counter[str] = Counter()
    keys: list[Any] = []
    columns = [*DIGEST_TEXT_COLUMNS, "data"]
    for path in files:
        filesystem, local = filesystem_of(path)
        with filesystem.open_input_file(local) as stream:
            for batch in pq.ParquetFile(stream).iter_batches(columns=columns, batch_size=65536):
                text = [pc.cast(batch.column(c), pa.string()) for c in DIGEST_TEXT_COLUMNS]
                joined = pc.binary_join_element_wise(*text, "", DIGEST_SEPARATOR, null_handling="skip")
                data = pc.fill_null(pc.cast(batch.column("data"), pa.binary()), b"")
                rows = pc.binary_join_element_wise(pc.cast(joined, pa.binary()), data, b"")
                for shard, value in zip(batch.column("shard_id").to_pylist(), rows.to_pylist(), strict=True):
                    digests[shard] += int.from_bytes(hashlib.md5(value).digest()[:8], "big")
                keys.append(pa.table({c: batch.column(c) for c in DIGEST_TEXT_COLUMNS[:3]}))
    if not keys:
        return {}
    table = pa.concat_tables(keys)
    counts = table.group_by(list(DIGEST_TEXT_COLUMNS[:3])).aggregate([([], "count_all")])
    rows = Counter(table.column("shard_id").to_pylist())
    repeated: Counter[str] = Counter()
    for shard, count in zip(counts.column("shard_id").to_pylist(), counts.column("count_all").to_pylist(), strict=True):
        repeated[shard] += count - 1
    return {shard: ShardRows(rows[shard], digests[shard], repeated[shard]) for shard in sorted(rows)}


def read_json(path: str) -> Any | None:
    """A small JSON file's content, or None when there is no file at ``path``."""
    if not is_file(path):
        return None
    filesystem, local = filesystem_of(path)
    with filesystem.open_input_stream(local) as stream:
        try:
            return json.loads(stream.read())
        except ValueError as exc:
            raise OutputCorruptError(f"{path} is not valid JSON ({exc}); it was not written by kinesis-replay, or was cut short") from exc


def json_bytes(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True).encode()


def write_json(path: str, data: Any) -> None:
    """Write a small JSON file whole (one PUT on S3; on local disk a temporary file renamed into place)."""
    filesystem, local = filesystem_of(path)
    filesystem.create_dir(local.rsplit("/", 1)[0], recursive=True)
    body = json_bytes(data)
    if "://" in path:
        with filesystem.open_output_stream(local) as stream:
            stream.write(body)
        return
    tmp = f"{local}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, local)


# S3's answers that its own fault or a throttle explains (after the client's retries): a later try may get through.
S3_TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"})


def s3_failure(exc: Any, what: str, advice: str) -> KinesisReplayError:
    """The error for S3's refusal of a call on the output (a botocore ClientError): retried only when S3 is at fault."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or exc.response.get("Error", {}).get("Code") in S3_TRANSIENT_CODES:
        return OutputIOError(f"{what}. S3 failed on its side; the task is retried")
    return OutputRefusedError(f"{what}. {advice}")


def s3_location(path: str) -> tuple[str, str]:
    """A URI of S3 (s3://, or a Hadoop scheme: see formats.s3_uri) as (bucket, key without a trailing slash)."""
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key.strip("/")


def s3_list(bucket: str, prefix: str, **options: Any) -> dict[str, Any]:
    """One ListObjectsV2 page (boto3's default client, as for the owner record's conditional write); none for no bucket."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        page = dict(boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix, **options))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            return {}  # nothing is owned there (the claim's write then says the bucket is missing)
        raise s3_failure(
            exc,
            f"cannot list s3://{bucket}/{prefix} to look for other pipelines' owner records: {exc}",
            """The pipeline's role needs s3:ListBucket on the bucket (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return page


def put_if_absent_on_s3(path: str, body: bytes, who: str) -> bool:
    """Create the object at ``path`` unless it exists (S3's conditional write); returns whether this call created it.

    The client is boto3's default (the same credential chain and ``AWS_ENDPOINT_URL_S3`` as pyarrow's file system).
    """
    import boto3
    from botocore.exceptions import ClientError

    bucket, _, key = path.split("://", 1)[1].partition("/")
    try:
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        # 412: the key exists; 409: another conditional write to it is in progress. Either way another claim won.
        if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise s3_failure(
            exc,
            f"{who}: cannot write the owner record {path}: {exc}",
            """Check that the bucket exists and that the pipeline's role may s3:PutObject there (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return True
