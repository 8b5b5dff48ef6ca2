"""The owner record at an output root (one pipeline, one stream, one state table), and owned roots around or inside a root."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from kinesis_replay.adapters.files import (
    filesystem_of,
    json_bytes,
    names_the_store,
    put_if_absent_on_s3,
    read_json,
    s3_list,
    s3_location,
    write_json,
)
from kinesis_replay.adapters.layout import DATA_DIR, OWNER_FILE, owner_path
from kinesis_replay.core.errors import KinesisReplayError, OutputCorruptError, OutputIOError
from kinesis_replay.core.formats import is_s3


@dataclass(frozen=True)
class Owner:
    """The record at the output root of who writes there. Every plan, replay, backfill and commit checks it first."""

    pipeline_name: str
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
        """The record as stored: the pipeline's name under ``pipeline``, as every release wrote it."""
        stored = asdict(self)
        stored["pipeline"] = stored.pop("pipeline_name")
        return stored

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        """A record as any release wrote it, upgraded on read: what an older release did not record reads as its
        default (``adopted`` 0; ``output_format`` and ``stream_created`` None, which their readers look up instead)."""
        recorded, created = data.get("output_format"), data.get("stream_created")
        return cls(
            str(data["pipeline"]), str(data["stream"]), str(data["state_table"]), str(data["created_at"]),
            int(data.get("adopted", 0)), str(recorded) if recorded is not None else None,
            str(created) if created is not None else None,
        )  # fmt: skip


def read_owner(output: str) -> Owner | None:
    """The root's owner record; None when it has none, OutputCorruptError when it cannot be read as one."""
    redo = (
        f"If output {output} is the pipeline's, move that file aside: the pipeline's next plan writes it again once it has "
        "found the output's commit records to be the pipeline's. Else point the pipeline's output elsewhere"
    )
    try:
        data = read_json(owner_path(output))
    except OutputCorruptError as exc:
        raise OutputCorruptError(f"{exc}. {redo}") from exc
    if data is None:
        return None
    try:
        return Owner.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise OutputCorruptError(f"{owner_path(output)}: not an owner record (missing {exc}). {redo}") from exc


@names_the_store
def layout_format(output: str) -> str | None:
    """The format the root's own folders show, for a root whose owner record names none (one listing of the root).

    ``batch_id=<id>/`` folders at the root are a directory output's batches; else Iceberg's ``metadata/`` or ``data/``
    folder is a table's. None when the root holds neither (no batch was written, or there is no root).
    """
    from pyarrow import fs

    filesystem, local = filesystem_of(output)
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
        write_json(path, owner.to_dict())
    elif "://" not in path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(json_bytes(owner.to_dict()))
    elif is_s3(path):
        put_if_absent_on_s3(path, json_bytes(owner.to_dict()), f"pipeline {owner.pipeline_name!r}")
    elif read_owner(output) is None:
        write_json(path, owner.to_dict())
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


@names_the_store
def owner_records_around(output: str) -> list[OtherRoot]:
    """The output roots that hold this one: an owner record in any of its parent folders, nearest first.

    One ListObjectsV2 per parent on S3 (``raw/orders`` costs two: ``raw/`` and the bucket's top; a listing, not a
    HEAD, because a role may read only its own prefix while it may list the whole bucket); one stat per parent on
    local disk and other file systems.
    """
    from pyarrow import fs

    if is_s3(output):
        bucket, key = s3_location(output)
        parents = key.split("/")[:-1] if key else []
        found = []
        for depth in range(len(parents), -1, -1):
            record = "/".join([*parents[:depth], OWNER_FILE])
            contents = s3_list(bucket, record, MaxKeys=1).get("Contents", [])
            if contents and contents[0]["Key"] == record:
                found.append(_other_root(output, "/".join([bucket, *parents[:depth]])))
        return found
    filesystem, local = filesystem_of(output)
    parents = []
    folder = local.rstrip("/")
    while "/" in folder:
        folder = folder.rsplit("/", 1)[0]
        parents.append(folder or "/")
    records = [f"{p.rstrip('/')}/{OWNER_FILE}" for p in parents]
    infos = filesystem.get_file_info(records) if records else []
    return [_other_root(output, p) for p, i in zip(parents, infos, strict=True) if i.type == fs.FileType.File]


@names_the_store
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
        bucket, key = s3_location(output)
        queue = [f"{key}/" if key else ""]
    else:
        filesystem, local = filesystem_of(output)
        queue = [local.rstrip("/") or "/"]
    complete, listed = True, 0
    while queue:
        if listed == limit:
            return None, False
        folder = queue.pop(0)
        listed += 1
        if s3:
            page = s3_list(bucket, folder, Delimiter="/", MaxKeys=1000)
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
