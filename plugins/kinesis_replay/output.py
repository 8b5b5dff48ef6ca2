"""Where a batch's output, result manifest and commit record live, who owns the output, and reading them back.

Through pyarrow's file systems (imported on use), so the same code serves local disk and S3.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kinesis_replay.errors import (
    KinesisReplayError,
    OutputCorruptError,
    OutputIOError,
    OutputRefusedError,
    VerificationError,
)
from kinesis_replay.formats import is_s3, path_batch_id, s3_uri
from kinesis_replay.records import ROW_COLUMNS
from kinesis_replay.state import Batch, Manifest

MANIFESTS_DIR = "_manifests"  # a leading underscore: Spark and pyarrow readers skip it
QUARANTINE_DIR = "_quarantine"  # records that could not be decoded, with the reason, per batch
STAGING_DIR = "_staging"  # where the replay job writes a batch before swapping it into place
# One JSON file per batch whose commit began: the output's own copy of the ledger, from which a lost state
# table is rebuilt. Written after the batch is COMMITTING and before any checkpoint moves.
COMMITS_DIR = "_commits"
OWNER_FILE = "_kinesis_replay_owner.json"  # who owns this output root: one pipeline, one stream, one state table
# A table output's data files (Iceberg's own layout under the table location, which is the output root): one folder per
# attempt of a batch, so that a replay never overwrites a file a snapshot references. Not for reading directly.
DATA_DIR = "data"


def arrow_row_schema() -> Any:
    """The output files' columns (records.ROW_COLUMNS) as a pyarrow schema, without the partition column."""
    import pyarrow as pa

    types = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "BINARY": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in ROW_COLUMNS])


def batch_path(output: str, batch_id: int) -> str:
    """The only directory a batch's rows are written to; a rewrite of the batch replaces all of it."""
    return f"{output.rstrip('/')}/batch_id={path_batch_id(batch_id)}"


def data_path(output: str, batch_id: int, attempt: str) -> str:
    """Where one attempt of a batch writes its table files: ``<output>/data/batch_id=<id>/attempt=<attempt>``.

    A batch's rows are deterministic; its files are per attempt, and the table's snapshot says which attempt is live.
    """
    return f"{output.rstrip('/')}/{DATA_DIR}/batch_id={path_batch_id(batch_id)}/attempt={attempt}"


def attempt_paths(output: str, batch_id: int) -> dict[str, str]:
    """The batch's attempt folders under the table's data (attempt -> path), whether or not a snapshot references them."""
    from pyarrow import fs

    folder = f"{output.rstrip('/')}/{DATA_DIR}/batch_id={path_batch_id(batch_id)}"
    filesystem, local = _filesystem(folder)
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
    filesystem, local = _filesystem(path)
    filesystem.delete_dir(local)


def quarantine_path(output: str, batch_id: int) -> str:
    """The batch's quarantine partition: rows whose payload could not be decoded, with ``decode_error`` set."""
    return f"{output.rstrip('/')}/{QUARANTINE_DIR}/batch_id={path_batch_id(batch_id)}"


def staging_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{STAGING_DIR}/batch_id={path_batch_id(batch_id)}"


def manifest_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{MANIFESTS_DIR}/batch_id={path_batch_id(batch_id)}.json"


def commit_record_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{COMMITS_DIR}/batch_id={path_batch_id(batch_id)}.json"


def owner_path(output: str) -> str:
    return f"{output.rstrip('/')}/{OWNER_FILE}"


def _filesystem(path: str) -> tuple[Any, str]:
    from pyarrow import fs

    if "://" not in path:
        return fs.LocalFileSystem(), os.path.abspath(path)
    return fs.FileSystem.from_uri(s3_uri(path))  # type: ignore[no-any-return]


def _is_file(path: str) -> bool:
    from pyarrow import fs

    filesystem, local = _filesystem(path)
    return bool(filesystem.get_file_info(local).type == fs.FileType.File)


def has_manifest(output: str, batch_id: int) -> bool:
    return _is_file(manifest_path(output, batch_id))


def read_manifest(output: str, batch_id: int) -> Manifest:
    """The result manifest the replay job wrote for a batch; missing or unreadable is a VerificationError."""
    path = manifest_path(output, batch_id)
    try:
        data = _read_json(path)
    except KinesisReplayError as exc:
        raise VerificationError(f"batch {batch_id}: unreadable result manifest {path}: {exc}") from exc
    if data is None:
        raise VerificationError(f"batch {batch_id}: no result manifest at {path}: the replay job did not finish")
    try:
        return Manifest.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
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


def parquet_files(path: str) -> list[str]:
    """The Parquet files under a folder (none if it does not exist), as full paths or URIs, in order."""
    from pyarrow import fs

    filesystem, local = _filesystem(path)
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

    from kinesis_replay.records import DIGEST_SEPARATOR, DIGEST_TEXT_COLUMNS

    digests: Counter[str] = Counter()
    keys: list[Any] = []
    columns = [*DIGEST_TEXT_COLUMNS, "data"]
    for path in files:
        filesystem, local = _filesystem(path)
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


def _read_json(path: str) -> Any | None:
    """A small JSON file's content, or None when there is no file at ``path``."""
    if not _is_file(path):
        return None
    filesystem, local = _filesystem(path)
    with filesystem.open_input_stream(local) as stream:
        try:
            return json.loads(stream.read())
        except ValueError as exc:
            raise OutputCorruptError(f"{path} is not valid JSON ({exc}); it was not written by kinesis-replay, or was cut short") from exc


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True).encode()


def _write_json(path: str, data: Any) -> None:
    """Write a small JSON file whole (one PUT on S3; on local disk a temporary file renamed into place)."""
    filesystem, local = _filesystem(path)
    filesystem.create_dir(local.rsplit("/", 1)[0], recursive=True)
    body = _json_bytes(data)
    if "://" in path:
        with filesystem.open_output_stream(local) as stream:
            stream.write(body)
        return
    tmp = f"{local}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, local)


@dataclass(frozen=True)
class Owner:
    """The record at the output root of who writes there. Every plan, replay, backfill and commit checks it first."""

    pipeline: str
    stream: str
    state_table: str
    created_at: str  # ISO 8601; when the pipeline first claimed the root
    # The highest batch whose results the root held when it was claimed: written by a version of kinesis-replay that
    # kept no commit records. 0 for a new root, whose commit records are then complete: no record, no commit.
    adopted: int = 0
    # The root's layout, "iceberg" or "directory", recorded when the root is claimed: a pipeline never writes one layout
    # into a root that holds the other. None in a record of a release that recorded none (see layout_format).
    output_format: str | None = None
    # When the stream was created (ISO 8601, Kinesis's StreamCreationTimestamp): a stream deleted and created again
    # under the same name starts its shard ids over. None in a record of a release that recorded none.
    stream_created: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_owner(output: str) -> Owner | None:
    """The root's owner record; None when it has none, OutputCorruptError when it cannot be read as one."""
    redo = (
        f"If output {output} is the pipeline's, move that file aside: the pipeline's next plan writes it again once it has "
        "found the output's commit records to be the pipeline's. Else point the pipeline's output elsewhere"
    )
    try:
        data = _read_json(owner_path(output))
    except OutputCorruptError as exc:
        raise OutputCorruptError(f"{exc}. {redo}") from exc
    if data is None:
        return None
    try:
        recorded, created = data.get("output_format"), data.get("stream_created")
        return Owner(
            str(data["pipeline"]), str(data["stream"]), str(data["state_table"]), str(data["created_at"]),
            int(data.get("adopted", 0)), str(recorded) if recorded is not None else None,
            str(created) if created is not None else None,
        )  # fmt: skip
    except (KeyError, TypeError) as exc:
        raise OutputCorruptError(f"{owner_path(output)}: not an owner record (missing {exc}). {redo}") from exc


def layout_format(output: str) -> str | None:
    """The format the root's own folders show, for a root whose owner record names none (one listing of the root).

    ``batch_id=<id>/`` folders at the root are a directory output's batches; else Iceberg's ``metadata/`` or ``data/``
    folder is a table's. None when the root holds neither (no batch was written, or there is no root).
    """
    from pyarrow import fs

    filesystem, local = _filesystem(output)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return None
    folders = {i.base_name for i in filesystem.get_file_info(fs.FileSelector(local)) if i.type == fs.FileType.Directory}
    if any(name.startswith("batch_id=") for name in folders):
        return "directory"
    if folders & {"metadata", DATA_DIR}:
        return "iceberg"
    return None


def write_owner(output: str, owner: Owner, replace: bool = False) -> Owner:
    """Claim the root for ``owner`` and return whoever holds it afterwards.

    The first claim wins outright, wherever two pipelines claim one new root at the same instant: on local disk the
    file is created exclusively, on S3 by a conditional PUT (``If-None-Match: *``, which S3 refuses when the key
    exists). Any other file system gets a PUT after a read: there the later of two simultaneous claims wins, each
    then sees the winner, and the loser stops at its next check. ``replace`` overwrites (a recovery's adoption).
    """
    path = owner_path(output)
    if replace:
        _write_json(path, owner.to_dict())
    elif "://" not in path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(_json_bytes(owner.to_dict()))
    elif is_s3(path):
        _put_if_absent_on_s3(path, _json_bytes(owner.to_dict()), f"pipeline {owner.pipeline!r}")
    elif read_owner(output) is None:
        _write_json(path, owner.to_dict())
    found = read_owner(output)
    if found is None:
        raise OutputIOError(f"the owner record {path} vanished right after it was written; the task is retried")
    return found


# How far a new claim looks below its root for another root's owner record (see owner_record_inside): a folder listing
# costs microseconds on local disk and an S3 request (a page of at most 1,000 keys) on S3.
INSIDE_SEARCH_FOLDERS = 2000
INSIDE_SEARCH_FOLDERS_S3 = 20


@dataclass(frozen=True)
class OtherRoot:
    """Another output root found around or inside a root: where it is, its owner record, and who that names."""

    root: str  # written as the root looked from is (a local path, or a URI of its scheme)
    record: str
    owner: Owner | None  # None when the record cannot be read (not JSON, or outside what the role may read)
    unreadable: str | None = None  # why not


def _uri(like: str, path: str) -> str:
    """A path a file system listed, written as ``like`` is: a local path, or a URI of its scheme."""
    return f"{like.split('://', 1)[0]}://{path}" if "://" in like else path


def _other_root(like: str, folder: str) -> OtherRoot:
    root = _uri(like, folder)
    try:
        return OtherRoot(root, owner_path(root), read_owner(root))
    except (KinesisReplayError, OSError) as exc:
        return OtherRoot(root, owner_path(root), None, str(exc))


# S3's answers that its own fault or a throttle explains (after the client's retries): a later try may get through.
S3_TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"})


def _s3_failure(exc: Any, what: str, advice: str) -> KinesisReplayError:
    """The error for S3's refusal of a call on the output (a botocore ClientError): retried only when S3 is at fault."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or exc.response.get("Error", {}).get("Code") in S3_TRANSIENT_CODES:
        return OutputIOError(f"{what}. S3 failed on its side; the task is retried")
    return OutputRefusedError(f"{what}. {advice}")


def _s3_location(path: str) -> tuple[str, str]:
    """A URI of S3 (s3://, or a Hadoop scheme: see formats.s3_uri) as (bucket, key without a trailing slash)."""
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key.strip("/")


def _s3_list(bucket: str, prefix: str, **options: Any) -> dict[str, Any]:
    """One ListObjectsV2 page (boto3's default client, as for the owner record's conditional write); none for no bucket."""
    import boto3
    from botocore.exceptions import ClientError

    try:
        page = dict(boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix, **options))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            return {}  # nothing is owned there (the claim's write then says the bucket is missing)
        raise _s3_failure(
            exc,
            f"cannot list s3://{bucket}/{prefix} to look for other pipelines' owner records: {exc}",
            """The pipeline's role needs s3:ListBucket on the bucket (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return page


def owner_records_around(output: str) -> list[OtherRoot]:
    """The output roots that hold this one: an owner record in any of its parent folders, nearest first.

    One ListObjectsV2 per parent on S3 (``raw/orders`` costs two: ``raw/`` and the bucket's top; a listing, not a
    HEAD, because a role may read only its own prefix while it may list the whole bucket); one stat per parent on
    local disk and other file systems.
    """
    from pyarrow import fs

    if is_s3(output):
        bucket, key = _s3_location(output)
        parents = key.split("/")[:-1] if key else []
        found = []
        for depth in range(len(parents), -1, -1):
            record = "/".join([*parents[:depth], OWNER_FILE])
            contents = _s3_list(bucket, record, MaxKeys=1).get("Contents", [])
            if contents and contents[0]["Key"] == record:
                found.append(_other_root(output, "/".join([bucket, *parents[:depth]])))
        return found
    filesystem, local = _filesystem(output)
    parents = []
    folder = local.rstrip("/")
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        parents.append(folder or "/")
    records = [f"{p.rstrip('/')}/{OWNER_FILE}" for p in parents]
    infos = filesystem.get_file_info(records) if records else []
    return [_other_root(output, p) for p, i in zip(parents, infos, strict=True) if i.type == fs.FileType.File]


def owner_record_inside(output: str) -> tuple[OtherRoot | None, bool]:
    """The nearest output root below this one (an owner record in a folder under it), breadth first; and whether the
    search saw every folder under the root.

    Bounded: at most INSIDE_SEARCH_FOLDERS folder listings on local disk and other file systems, and
    INSIDE_SEARCH_FOLDERS_S3 on S3, one ListObjectsV2 page each (a new root is empty or nearly: one request). A
    pipeline's root puts its owner record at its top, so a root nested a level or two down is found in a few listings.
    """
    from pyarrow import fs

    s3 = is_s3(output)
    limit = INSIDE_SEARCH_FOLDERS_S3 if s3 else INSIDE_SEARCH_FOLDERS
    if s3:
        bucket, key = _s3_location(output)
        queue = [f"{key}/" if key else ""]
    else:
        filesystem, local = _filesystem(output)
        queue = [local.rstrip("/") or "/"]
    complete, listed = True, 0
    while queue:
        if listed == limit:
            return None, False
        folder = queue.pop(0)
        listed += 1
        if s3:
            page = _s3_list(bucket, folder, Delimiter="/", MaxKeys=1000)
            names = {c["Key"][len(folder) :] for c in page.get("Contents", [])}
            subfolders = [c["Prefix"] for c in page.get("CommonPrefixes", [])]
            complete = complete and not page.get("IsTruncated", False)
            here = f"{bucket}/{folder.rstrip('/')}"
        else:
            infos = filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True))
            names = {i.base_name for i in infos if i.type == fs.FileType.File}
            subfolders = sorted(i.path for i in infos if i.type == fs.FileType.Directory)
            here = folder
        if listed > 1 and OWNER_FILE in names:
            return _other_root(output, here), complete
        queue += subfolders
    return None, complete


def _put_if_absent_on_s3(path: str, body: bytes, who: str) -> bool:
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
        raise _s3_failure(
            exc,
            f"{who}: cannot write the owner record {path}: {exc}",
            """Check that the bucket exists and that the pipeline's role may s3:PutObject there (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return True


def write_commit_record(output: str, batch: Batch) -> None:
    """The output's copy of a committing batch's ledger entry: its ranges, manifest and gaps."""
    _write_json(commit_record_path(output, batch.batch_id), {"format": 1, "batch": batch.to_dict()})


def has_commit_record(output: str, batch_id: int) -> bool:
    return _is_file(commit_record_path(output, batch_id))


def _batch_ids_in(folder: str) -> list[int]:
    """The ids of the ``batch_id=<id>.json`` files in a folder, in order (one listing of one folder)."""
    from pyarrow import fs

    filesystem, local = _filesystem(folder)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return []
    ids = []
    for info in filesystem.get_file_info(fs.FileSelector(local)):
        name = info.base_name
        if info.type == fs.FileType.File and name.startswith("batch_id=") and name.endswith(".json"):
            ids.append(int(name[len("batch_id=") : -len(".json")]))
    return sorted(ids)


def committed_batch_ids(output: str) -> list[int]:
    """The ids of the batches whose commit records the output holds, in order."""
    return _batch_ids_in(f"{output.rstrip('/')}/{COMMITS_DIR}")


def manifest_batch_ids(output: str) -> list[int]:
    """The ids of the batches whose result manifests the output holds (committed or not), in order."""
    return _batch_ids_in(f"{output.rstrip('/')}/{MANIFESTS_DIR}")


def holds_commits(output: str, owner: Owner | None) -> bool:
    """Whether the output holds committed batches.

    With an owner record, the commit records say (and the batches the root held when it was claimed count).
    Without one, the root was written, if at all, by a version that kept no commit records: any batch result
    may be committed.
    """
    if owner is not None:
        return owner.adopted > 0 or bool(committed_batch_ids(output))
    return bool(manifest_batch_ids(output))


def read_commit_record(output: str, batch_id: int) -> Batch:
    path = commit_record_path(output, batch_id)
    data = _read_json(path)
    if data is None:
        raise OutputCorruptError(f"no commit record at {path}: it was removed from the output since it was listed")
    try:
        return Batch.from_dict(data["batch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise OutputCorruptError(f"{path}: unreadable commit record: {exc!r}") from exc


def last_replayed_attempts(output: str, batch_ids: Iterable[int]) -> dict[int, str]:
    """Of these batches, the attempt each one's last replay wrote (its result manifest), whatever became of it.

    A backfill's attempt is in no snapshot from its replay until its check commits it, and with EMR Serverless the
    checks of a backfill of many batches start only after every replay ended. One read per batch named; an
    unreadable manifest keeps nothing, and fails nothing (the batch's other attempts are judged as before).
    """
    found: dict[int, str] = {}
    for batch_id in sorted(set(batch_ids)):
        try:
            attempt = read_manifest(output, batch_id).attempt
        except VerificationError:
            continue
        if attempt is not None:
            found[batch_id] = attempt
    return found


def unfinished_commits(output: str, batch_ids: Iterable[int]) -> set[int]:
    """Of these batches, those whose commit record names no table snapshot yet (or cannot be read).

    A commit writes its record before its table commit, so a batch whose record has no ``snapshot_id`` was cut
    short in between: its files are in no snapshot, and the run that resumes the commit, or a recovery from the
    records, puts them in the table. A batch with no record never began its commit. One read per batch named.
    """
    found = set()
    for batch_id in sorted(set(batch_ids)):
        try:
            data = _read_json(commit_record_path(output, batch_id))
        except KinesisReplayError:
            found.add(batch_id)  # unreadable: what it names is unknown, so its files are kept
            continue
        if data is None:
            continue
        batch = data.get("batch") if isinstance(data, dict) else None
        if not isinstance(batch, dict) or batch.get("snapshot_id") is None:
            found.add(batch_id)
    return found
