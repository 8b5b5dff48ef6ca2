"""Reading and writing the output's files through pyarrow's file systems (imported on use): local disk and S3 alike.

S3 is reached the way the task's caller says (``reaching_s3``): in a DAG task, through the pipeline's Airflow
connection, its credentials, region and S3 endpoint (``service_config.s3.endpoint_url``); outside one, through
boto3's and pyarrow's default chain.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from kinesis_replay.adapters.layout import (
    batch_data_path,
    batch_path,
    data_path,
    quarantine_data_path,
    quarantine_path,
    result_path,
    staged_data_path,
    staged_quarantine_path,
)
from kinesis_replay.core.decoded import DECODED_KEY
from kinesis_replay.core.errors import KinesisReplayError, OutputCorruptError, OutputIOError, OutputRefusedError, VerificationError
from kinesis_replay.core.formats import is_s3, s3_uri
from kinesis_replay.core.records import DIGEST_HASH, PARTITION_COLUMN, ROW_COLUMNS
from kinesis_replay.core.state import ReplayResult

if TYPE_CHECKING:  # a type hint only: batch_files and quarantine_folder read a pipeline's output and table
    from kinesis_replay.core.config import PipelineConfig


def arrow_row_schema() -> Any:
    """The output files' columns (records.ROW_COLUMNS) as a pyarrow schema, without the partition column."""
    import pyarrow as pa

    types = {"STRING": pa.string(), "BIGINT": pa.int64(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "BINARY": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in ROW_COLUMNS])


@dataclass(frozen=True)
class S3Access:
    """How this process reaches S3: a boto3 session's credentials, a region and an endpoint, or the default chain.

    A DAG task builds one from the pipeline's connection (its hook's session, whose assumed role's credentials are
    refreshed as they expire) and reaches the output through it for the task's length (``reaching_s3``): the owner
    record, the commit records, verify's reads, maintenance, and the Iceberg catalog's file IO where the catalog's own
    properties do not say otherwise. ``S3Access()`` is the default chain: boto3's and pyarrow's, environment included.
    """

    session: Any = None  # a boto3 Session; None: the default chain
    endpoint_url: str | None = None  # e.g. http://127.0.0.1:5000 for the local stack, a VPC endpoint, MinIO
    region: str | None = None
    source: str = "the default credential chain"  # who configured this, for errors: "connection aws_default"
    _clients: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def client(self) -> Any:
        """A boto3 S3 client: the session's, made once per access; else the default chain's, made per use, as it was."""
        if self.session is None:
            import boto3

            return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=self.region)
        if "s3" not in self._clients:
            self._clients["s3"] = self.session.client("s3", endpoint_url=self.endpoint_url, region_name=self.region)
        return self._clients["s3"]

    def _keys(self) -> Any:
        """The session's credentials as they are now (refreshed first if they are about to expire); None: none found."""
        found = self.session.get_credentials() if self.session is not None else None
        return found.get_frozen_credentials() if found is not None else None

    def filesystem(self, uri: str) -> tuple[Any, str]:
        """pyarrow's S3 file system for ``uri`` (``s3://bucket/key``) and the path within it, made per use (keys expire).

        Without an endpoint the bucket's own region is asked for, as pyarrow's ``from_uri`` does; the default chain
        is ``from_uri`` itself.
        """
        from pyarrow import fs

        if self.session is None and self.endpoint_url is None and self.region is None:
            return fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
        path = uri.split("://", 1)[1].rstrip("/")
        options: dict[str, Any] = {}
        keys = self._keys()
        if keys is not None:
            options.update(access_key=keys.access_key, secret_key=keys.secret_key, session_token=keys.token)
        if self.endpoint_url:
            url = urlsplit(self.endpoint_url)
            options.update(scheme=url.scheme or "https", endpoint_override=url.netloc + url.path.rstrip("/"))
            if self.region:
                options["region"] = self.region
        else:
            options["region"] = _bucket_region(path.split("/", 1)[0], self.region)
        return fs.S3FileSystem(**options), path

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's S3 FileIO properties for the same credentials, region and endpoint (empty for the default chain)."""
        found: dict[str, str] = {}
        keys = self._keys()
        if keys is not None:
            found.update({"s3.access-key-id": keys.access_key, "s3.secret-access-key": keys.secret_key})
            if keys.token:
                found["s3.session-token"] = keys.token
        if self.region:
            found["s3.region"] = self.region
        if self.endpoint_url:
            found["s3.endpoint"] = self.endpoint_url
        return found


_S3_ACCESS: ContextVar[S3Access] = ContextVar("kinesis_replay_s3_access", default=S3Access())  # noqa: B039 (frozen)


@contextmanager
def reaching_s3(access: S3Access) -> Iterator[S3Access]:
    """Reach S3 through ``access`` in this block (this thread, and the tasks a contextvars-aware pool runs for it)."""
    token = _S3_ACCESS.set(access)
    try:
        yield access
    finally:
        _S3_ACCESS.reset(token)


def s3_access() -> S3Access:
    """How S3 is reached here and now: the block's ``reaching_s3``, else the default chain."""
    return _S3_ACCESS.get()


_F = TypeVar("_F", bound=Callable[..., Any])


def names_the_store(call: _F) -> _F:
    """An OSError from S3 (pyarrow's, which names neither the output nor how it was reached) as an OutputIOError
    naming both. The call's first argument is the path (or a list of paths); local disk's errors pass as they are."""

    @functools.wraps(call)
    def run(path: str | list[str], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(path, *args, **kwargs)
        except OSError as exc:
            where = path if isinstance(path, str) else (path[0] if path else "")
            if not is_s3(where):
                raise
            access = s3_access()
            raise OutputIOError(
                f"cannot reach {where} through {access.source} (S3 endpoint {access.endpoint_url or 'from the region'}): {exc}. "
                "Check the connection's S3 endpoint (extra service_config.s3.endpoint_url), its credentials and the bucket; "
                "the task is retried"
            ) from exc

    return cast(_F, run)


def iceberg_location(path: str) -> str:
    """A path as Iceberg readers want it: ``s3://`` for Hadoop's ``s3a://``, ``file://`` before a local path."""
    if "://" not in path:
        return "file://" + path
    return s3_uri(path)


def filesystem_of(path: str) -> tuple[Any, str]:
    """pyarrow's file system for ``path`` and the path within it: local disk, or S3 through ``s3_access()``."""
    from pyarrow import fs

    if "://" not in path:
        return fs.LocalFileSystem(), os.path.abspath(path)
    uri = s3_uri(path)
    if uri.startswith("s3://"):
        return s3_access().filesystem(uri)
    return fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]


@functools.cache
def _bucket_region(bucket: str, fallback: str | None) -> str | None:
    """The bucket's region (one HEAD request, once per bucket and process); the connection's when S3 does not say."""
    from pyarrow import fs

    try:
        return str(fs.resolve_s3_region(bucket))
    except OSError:
        return fallback


@names_the_store
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


@names_the_store
def remove_folder(path: str, missing_ok: bool = False, prune_parent: bool = False) -> None:
    """Delete a folder and everything under it (on S3, every object under the prefix); ``missing_ok``: none is fine.

    ``prune_parent``: the folder's parent goes too if nothing is left in it. On S3, pyarrow keeps a deleted folder's
    parent as an empty marker object: a batch's ``_staging/batch_id=<id>/`` removed would leave ``_staging/`` behind.
    """
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    if missing_ok and filesystem.get_file_info(local).type == fs.FileType.NotFound:
        return
    filesystem.delete_dir(local)
    parent = local.rsplit("/", 1)[0]
    if prune_parent and "://" in path and not filesystem.get_file_info(fs.FileSelector(parent, allow_not_found=True)):
        filesystem.delete_dir(parent)  # only a marker is left (a file written meanwhile would fail its attempt's verify)


@names_the_store
def replace_folder(source: str, target: str) -> None:
    """Put the files under ``source`` at ``target``, in place of what ``target`` held; with no ``source``, remove ``target``.

    On local disk the folder is renamed; on S3, which has no rename, each object is copied (S3's CopyObject, no bytes
    through this process) and the source removed after. Either way ``target`` is missing from the delete to the move: a
    reader of a directory output may find the batch absent for that moment, never half of it twice.
    """
    from pyarrow import fs

    filesystem, src = filesystem_of(source)
    _, dst = filesystem_of(target)
    if filesystem.get_file_info(dst).type == fs.FileType.Directory:
        filesystem.delete_dir(dst)
    if filesystem.get_file_info(src).type != fs.FileType.Directory:
        return
    if _put_folder(filesystem, src, dst, on_s3="://" in source):
        filesystem.delete_dir(src)


def _put_folder(filesystem: Any, src: str, dst: str, on_s3: bool) -> bool:
    """The folder ``src`` put at ``dst`` (where nothing is): renamed on local disk; on S3, which has no rename, each object
    copied (S3's CopyObject, no bytes through this process). Returns whether ``src`` is still there (copied)."""
    from pyarrow import fs

    filesystem.create_dir(dst.rsplit("/", 1)[0], recursive=True)
    if not on_s3:
        filesystem.move(src, dst)
        return False
    for info in filesystem.get_file_info(fs.FileSelector(src, recursive=True)):
        if info.type == fs.FileType.File:
            filesystem.copy_file(info.path, dst + info.path[len(src) :])
    return True


@names_the_store
def is_folder(path: str) -> bool:
    """Whether ``path`` is a folder holding something (on S3: whether any object is under the prefix)."""
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    return bool(filesystem.get_file_info(local).type == fs.FileType.Directory)


def begin_swap(record: str, moves: Sequence[tuple[str, str]]) -> None:
    """Record a swap of staged folders into place (each ``(staged, target)``), before any of them moves.

    Called only once what is staged was verified: from the record on, the swap is finished whatever happens
    (``finish_swap``, by this call's own caller or by the next run that finds the record). A staged folder that does
    not exist (no row of that kind) stands for "nothing": its target is removed.
    """
    write_json(record, {"moves": [{"from": source, "to": target, "staged": is_folder(source), "done": False} for source, target in moves]})


def finish_swap(record: str) -> bool:
    """Finish the swap ``record`` describes, if there is one; returns whether there was.

    Each move in turn: the target is removed and the staged folder put there (renamed on local disk; on S3, which
    has no rename, each object copied), the move is marked done in the record, and only then is the staged folder
    removed. A swap cut short at any point is finished by calling this again: a move not marked done still has its
    whole staged folder (on local disk, none at all once it was renamed, which means it is done). On local disk a
    reader finds the batch absent from the removal of the target to the rename, never half of it, nor two attempts of
    it; on S3 the copies make that moment longer.
    """
    data = read_json(record)
    if data is None:
        return False
    moves = data["moves"]
    for move in moves:
        if not move["done"]:
            _move_in(move["from"], move["to"], bool(move["staged"]))
            move["done"] = True
            write_json(record, data)
        remove_folder(move["from"], missing_ok=True)
    remove_file(record)
    return True


def swap_in(record: str, moves: Sequence[tuple[str, str]]) -> None:
    """Swap verified staged folders into place, resumably (``begin_swap``, then ``finish_swap``)."""
    begin_swap(record, moves)
    finish_swap(record)


@names_the_store
def _move_in(source: str, target: str, staged: bool) -> None:
    from pyarrow import fs

    filesystem, src = filesystem_of(source)
    _, dst = filesystem_of(target)
    if staged and filesystem.get_file_info(src).type != fs.FileType.Directory:
        return  # renamed into place already (local disk), by the try this one finishes
    if filesystem.get_file_info(dst).type == fs.FileType.Directory:
        filesystem.delete_dir(dst)
    if staged:
        _put_folder(filesystem, src, dst, on_s3="://" in source)  # a copied staged folder goes once the move is marked done


@names_the_store
def remove_file(path: str) -> None:
    """Delete one file; none there is fine."""
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    if filesystem.get_file_info(local).type == fs.FileType.File:
        filesystem.delete_file(local)


@names_the_store
def remove_files_except(folder: str, keep: Iterable[str]) -> list[str]:
    """Delete every file under ``folder`` that ``keep`` does not name (paths or URIs); returns what was deleted."""
    from pyarrow import fs

    filesystem, local = filesystem_of(folder)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return []
    # The paths within the folder's file system: local ones made absolute, a URI's without its scheme (a file system
    # per kept path would cost an S3 file system, and its credentials, for each of a 1,000-shard batch's files).
    kept = {os.path.abspath(path) if "://" not in path else s3_uri(path).split("://", 1)[1].rstrip("/") for path in keep}
    gone = [
        i.path
        for i in filesystem.get_file_info(fs.FileSelector(local, recursive=True))
        if i.type == fs.FileType.File and i.path not in kept
    ]
    for path in gone:
        filesystem.delete_file(path)
    return gone


@names_the_store
def is_file(path: str) -> bool:
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    return bool(filesystem.get_file_info(local).type == fs.FileType.File)


def has_result(output: str, batch_id: int) -> bool:
    return is_file(result_path(output, batch_id))


def read_result(output: str, batch_id: int) -> ReplayResult:
    """The ``ReplayResult`` the replay job wrote for a batch (its result manifest); missing or unreadable is a VerificationError."""
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


@names_the_store
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


@names_the_store
def parquet_files(path: str) -> list[str]:
    """The Parquet files under a folder (none if it does not exist), as full paths or URIs, in order."""
    return list(parquet_listing(path))


@names_the_store
def file_facts(paths: list[str]) -> dict[str, tuple[int, int | None]]:
    """Each file's size and modification time in nanoseconds (None where the store gives none); a path that is not a
    file is left out."""
    from pyarrow import fs

    if not paths:
        return {}
    filesystem, _ = filesystem_of(paths[0])
    infos = filesystem.get_file_info([filesystem_of(p)[1] for p in paths])
    return {p: (i.size, i.mtime_ns) for p, i in zip(paths, infos, strict=True) if i.type == fs.FileType.File}


@names_the_store
def parquet_listing(path: str) -> dict[str, tuple[int, int | None]]:
    """The Parquet files under a folder (none if it does not exist), as full paths or URIs, in order, each with its size
    and its modification time in nanoseconds (None where the store gives none), from one listing."""
    from pyarrow import fs

    filesystem, local = filesystem_of(path)
    if filesystem.get_file_info(local).type != fs.FileType.Directory:
        return {}
    infos = filesystem.get_file_info(fs.FileSelector(local, recursive=True))
    found = sorted((i for i in infos if i.type == fs.FileType.File and i.base_name.endswith(".parquet")), key=lambda i: i.path)
    prefix = f"{path.split('://', 1)[0]}://" if "://" in path else ""
    return {f"{prefix}{i.path}": (i.size, i.mtime_ns) for i in found}


def batch_files(pipeline: PipelineConfig, batch_id: int, result: ReplayResult, staged: bool = False) -> list[str]:
    """The files that hold the batch's rows: its attempt's table files, or its directory's (``staged``: those its attempt
    staged, not yet swapped into the batch's folder)."""
    return list(batch_listing(pipeline, batch_id, result, staged))


def batch_listing(pipeline: PipelineConfig, batch_id: int, result: ReplayResult, staged: bool = False) -> dict[str, tuple[int, int | None]]:
    """``batch_files``, each with its size and modification time as listed (``parquet_listing``)."""
    if pipeline.table is None:
        if staged and result.attempt is not None:
            return parquet_listing(staged_data_path(pipeline.output, batch_id, result.attempt))
        return parquet_listing(batch_path(pipeline.output, batch_id))
    if result.attempt is None:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the result manifest names no attempt, so it was written by a "
            "replay job of another release (or for a directory output); deploy one release to both sides and run the batch again"
        )
    files = parquet_listing(data_path(pipeline.output, batch_id, result.attempt))
    if not files and result.records:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the result manifest names attempt {result.attempt}, whose files "
            f"are gone from {data_path(pipeline.output, batch_id, result.attempt)}. A run that commits the batch "
            "removes the attempts it did not commit, so another run replaying the batch at the same time may have committed "
            "it; otherwise they were deleted. Nothing was committed by this run; the next run replays the batch if it is "
            "still in flight"
        )
    return files


def quarantine_folder(pipeline: PipelineConfig, batch_id: int, result: ReplayResult, staged: bool = False) -> str:
    """Where the attempt of ``result`` wrote the batch's quarantined records.

    A table output's attempt writes them to a folder of its own, for the quarantine table's commit
    (``layout.quarantine_data_path``); one of a release before the quarantine table (whose attempt folder holds none)
    to ``layout.quarantine_path``, where they stay until the batch is replayed again. A directory output's attempt
    stages them (``staged``: a committed batch's replay) until its check swaps them into ``layout.quarantine_path``.
    """
    legacy = quarantine_path(pipeline.output, batch_id)
    if pipeline.table is not None and result.attempt is not None:
        own = quarantine_data_path(pipeline.output, batch_id, result.attempt)
        return own if staged or parquet_files(own) or not parquet_files(legacy) else legacy
    if staged and result.attempt is not None:
        return staged_quarantine_path(pipeline.output, batch_id, result.attempt)
    return legacy


@dataclass(frozen=True)
class ShardRows:
    """What a shard's rows in a set of files add up to: their count, their row digest, and repeated (sequence, sub-sequence) pairs."""

    rows: int
    digest: int  # the sum of records.row_digest over the rows (not yet reduced modulo 2**64)
    duplicates: int  # rows whose (sequence number, sub-sequence number) an earlier row of the shard has


@names_the_store
def scan_rows(files: list[str], digest_hash: str = DIGEST_HASH, footers: dict[str, tuple[Any, int]] | None = None) -> dict[str, ShardRows]:
    """Rows, row digest (with the named hash: records.row_hash) and repeated keys per shard, read file by file and batch
    by batch with pyarrow; ``footers``, when given, takes each file's footer as read (pyarrow's FileMetaData) and its size.

    Memory stays bounded by a record batch, plus the shards' keys (no payload) for the uniqueness check.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from kinesis_replay.core.records import DIGEST_SEPARATOR, DIGEST_TEXT_COLUMNS, row_hash

    term = row_hash(digest_hash)
    digests: Counter[str] = Counter()
    keys: list[Any] = []
    columns = [*DIGEST_TEXT_COLUMNS, "data"]
    for path in files:
        filesystem, local = filesystem_of(path)
        with filesystem.open_input_file(local) as stream:
            parquet = pq.ParquetFile(stream)
            if footers is not None:
                footers[path] = (parquet.metadata, stream.size())
            for batch in parquet.iter_batches(columns=columns, batch_size=65536):
                text = [pc.cast(batch.column(c), pa.string()) for c in DIGEST_TEXT_COLUMNS]
                joined = pc.binary_join_element_wise(*text, "", DIGEST_SEPARATOR, null_handling="skip")
                data = pc.fill_null(pc.cast(batch.column("data"), pa.binary()), b"")
                rows = pc.binary_join_element_wise(pc.cast(joined, pa.binary()), data, b"")
                for shard, value in zip(batch.column("shard_id").to_pylist(), rows.to_pylist(), strict=True):
                    digests[shard] += term(value)
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


# The columns that are not decoded values: the record as the stream held it (checked by the row digest), and the
# partition a table's files carry. The rest are payload.schema's columns and decode_error (the quarantine's reason).
RAW_COLUMNS = frozenset(name for name, _ in ROW_COLUMNS if name != "decode_error") | {PARTITION_COLUMN}


@names_the_store
def read_decoded(files: list[str]) -> Any:
    """The decoded columns of a batch's rows in ``files`` (data and quarantine alike), with each row's key (shard id,
    sequence number, sub-sequence number), in key order, as one Arrow table; files of other columns are unified (a
    column one file lacks is null there)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(DECODED_KEY)
    tables = []
    for path in files:
        filesystem, local = filesystem_of(path)
        with filesystem.open_input_file(local) as stream:
            parquet = pq.ParquetFile(stream)
            names = [n for n in parquet.schema_arrow.names if n not in RAW_COLUMNS]
            tables.append(parquet.read(columns=keys + names))
    if not tables:
        return pa.table({"shard_id": pa.array([], pa.string()), "sequence_number": pa.array([], pa.string()),
                         "sub_sequence_number": pa.array([], pa.int64())})  # fmt: skip
    table = pa.concat_tables(tables, promote_options="permissive")
    return table.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def decoded_equal(before: Any, after: Any) -> bool:
    """Whether two ``read_decoded`` tables hold the same rows and values (the common case, found without Python's loop)."""
    return bool(before.schema.names == after.schema.names and before.equals(after))


def decoded_rows(table: Any) -> Iterator[tuple[tuple[str, str, int], dict[str, Any]]]:
    """A ``read_decoded`` table's rows as (key, decoded values), in key order, a record batch at a time."""
    names = [n for n in table.schema.names if n not in DECODED_KEY]
    for batch in table.to_batches(max_chunksize=65536):
        for row in batch.to_pylist():
            yield (row["shard_id"], row["sequence_number"], row["sub_sequence_number"]), {n: row.get(n) for n in names}


@names_the_store
def copy_parquet(source: str, target: str, cast: Mapping[str, Any] | None = None) -> int:
    """A Parquet file copied to ``target``, each column ``cast`` names cast to its Arrow type there (safely: a value that
    does not fit raises pyarrow's ArrowInvalid, naming it); every other column as it was. Returns the rows copied."""
    import pyarrow.parquet as pq

    source_fs, source_path = filesystem_of(source)
    target_fs, target_path = filesystem_of(target)
    table = pq.read_table(source_path, filesystem=source_fs)
    for name, arrow_type in (cast or {}).items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, table.column(name).cast(arrow_type, safe=True))
    target_fs.create_dir(target_path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, target_path, filesystem=target_fs)
    return int(table.num_rows)


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


@names_the_store
def write_json(path: str, data: Any) -> None:
    """Write a small JSON file whole (one PUT on S3; on local disk a temporary file renamed into place)."""
    filesystem, local = filesystem_of(path)
    body = json_bytes(data)
    if "://" in path:  # S3 has no folders: making one would leave an empty marker object behind (a swap's _staging/)
        with filesystem.open_output_stream(local) as stream:
            stream.write(body)
        return
    filesystem.create_dir(local.rsplit("/", 1)[0], recursive=True)
    tmp = f"{local}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, local)


# S3's answers that its own fault or a throttle explains (after the client's retries): a later try may get through.
S3_TRANSIENT_CODES = frozenset({"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"})


def s3_failure(exc: Any, what: str, advice: str) -> KinesisReplayError:
    """The error for S3's refusal of a call on the output (a botocore ClientError): retried only when S3 is at fault.

    A call that never reached S3 (botocore's transport errors) names the endpoint and how it was reached, and is retried.
    """
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        access = s3_access()
        return OutputIOError(
            f"{what}. S3 did not answer through {access.source} (S3 endpoint {access.endpoint_url or 'from the region'}). "
            "Check the connection's S3 endpoint (extra service_config.s3.endpoint_url), its credentials and the bucket; "
            "the task is retried"
        )
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if status >= 500 or exc.response.get("Error", {}).get("Code") in S3_TRANSIENT_CODES:
        return OutputIOError(f"{what}. S3 failed on its side; the task is retried")
    return OutputRefusedError(f"{what}. {advice}")


def s3_location(path: str) -> tuple[str, str]:
    """A URI of S3 (s3://, or a Hadoop scheme: see formats.s3_uri) as (bucket, key without a trailing slash)."""
    bucket, _, key = path.split("://", 1)[1].partition("/")
    return bucket, key.strip("/")


def s3_list(bucket: str, prefix: str, **options: Any) -> dict[str, Any]:
    """One ListObjectsV2 page (through ``s3_access()``, as the owner record's conditional write); none for no bucket."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        page = dict(s3_access().client().list_objects_v2(Bucket=bucket, Prefix=prefix, **options))
    except (ClientError, BotoCoreError) as exc:
        if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            return {}  # nothing is owned there (the claim's write then says the bucket is missing)
        raise s3_failure(
            exc,
            f"cannot list s3://{bucket}/{prefix} to look for other pipelines' owner records: {exc}",
            """The pipeline's role needs s3:ListBucket on the bucket (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return page


def put_if_absent_on_s3(path: str, body: bytes, who: str) -> bool:
    """Create the object at ``path`` unless it exists (S3's conditional write); returns whether this call created it.

    The client is ``s3_access()``'s, as are pyarrow's file systems for the output's other files.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, key = path.split("://", 1)[1].partition("/")
    try:
        s3_access().client().put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except (ClientError, BotoCoreError) as exc:
        # 412: the key exists; 409: another conditional write to it is in progress. Either way another claim won.
        code = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise s3_failure(
            exc,
            f"{who}: cannot write the owner record {path}: {exc}",
            """Check that the bucket exists and that the pipeline's role may s3:PutObject there (docs/deployment.md: "The IAM policy")""",
        ) from exc
    return True
