"""The one loader of what an output root holds: its owner record and format, and what a task's checks need of it.

``load_root`` reads it once per task, for the decisions of kinesis_replay.core.ownership, and the replay job reads it
with ``load_job_root``. What an earlier release wrote is upgraded here, as it is read, and nowhere else:

- an owner record of a release that recorded no format, no stream creation time or no adopted batches reads as
  one with None, None and 0 (``_owner``);
- a root whose owner record names no format, or that has no owner record (a release before owner records), has the
  format its folders show (``layout_format``).

Every read is of the output's own files; nothing is written here (the claim's write is adapters.owner.write_owner).
"""

from __future__ import annotations

from typing import Any

from kinesis_replay.adapters import commit_records, iceberg_table
from kinesis_replay.adapters.files import filesystem_of, has_result, names_the_store, read_json, s3_list, s3_location
from kinesis_replay.adapters.layout import DATA_DIR, OWNER_FILE, owner_path
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.errors import KinesisReplayError, OutputCorruptError
from kinesis_replay.core.formats import is_s3
from kinesis_replay.core.output_root import Nesting, OtherRoot, Owner, RecordedFormat, RootSnapshot, TableSnapshot
from kinesis_replay.core.state import Head


def load_root(pipeline: PipelineConfig, head: Head | None = None, *, claim: bool = False) -> RootSnapshot:
    """What the pipeline's output root holds, as far as the checks of a task that knows ``head`` need it.

    Always its owner record (one read) and format (a listing of the root only when the record names none). Then, as
    the head and the record say:

    - the commit records' ids (a listing, a request per thousand batches on S3) when there is no owner record, the
      record names another state table, or there is no head item: the cases a lost, replaced or renamed state table
      leaves; the newest commit record when there is no owner record (whose root is it?), and the result manifests' ids
      too (a release before commit records);
    - whether the root holds the head's newest committed batch, and the next batch's commit record (two stats);
    - for a ``claim``, the owned roots around it, and while it has no owner record, inside it (adapters' bounds).

    A table output's table is ``load_table``'s, read once the root is known to be the pipeline's.
    """
    root = pipeline.output
    owner = read_owner(root)
    fmt = recorded_format(root, owner)
    committed = results = newest = holds_last = holds_next = nesting = None
    lost = head is not None and head.version == 0
    if owner is None or owner.state_table != pipeline.state_table or lost:
        committed = tuple(commit_records.committed_batch_ids(root))
    if owner is None:
        results = tuple(commit_records.result_batch_ids(root))
        newest = commit_records.read_commit_record(root, committed[-1]) if committed else None
    if head is not None and not lost:
        last = (head.in_flight or head.next_batch_id) - 1
        holds_last = last < 1 or commit_records.has_commit_record(root, last) or has_result(root, last)
        holds_next = head.in_flight is None and commit_records.has_commit_record(root, head.next_batch_id)
    if claim:
        around = tuple(owner_records_around(root))
        inside, complete = owner_record_inside(root) if owner is None and not around else (None, True)
        nesting = Nesting(around, inside, complete)
    return RootSnapshot(root, owner, fmt, committed, results, newest, holds_last, holds_next, nesting)


def load_table(pipeline: PipelineConfig, head: Head | None = None) -> TableSnapshot | None:
    """A table output's current snapshot as the holdings check reads it, and what its location holds when there is no
    table; None for a directory output, or when ``head`` says nothing is committed (no head item, or no batch before
    the next): then a catalog of the config's (not the embedded one, which the first commit creates under the root) is
    loaded all the same, so that one that can't load fails the plan before the root is claimed or the stream read,
    rather than the verify after the whole batch was (iceberg_table.load_catalog says whether it is retried)."""
    if pipeline.table is None:
        return None
    if head is not None and (head.version == 0 or (head.in_flight or head.next_batch_id) <= 1):
        if not pipeline.table.embedded:
            iceberg_table.load_catalog(pipeline)
        return None
    table = iceberg_table.existing_table(pipeline)
    state = iceberg_table.table_state(table)
    columns = iceberg_table.table_columns(table.metadata if table is not None else None)  # read from the metadata loaded
    taken = None if state.exists else iceberg_table.location_tables(pipeline)
    return TableSnapshot(state, taken, columns, iceberg_table.rebuilt_to(table))


def load_job_root(output: str) -> RootSnapshot:
    """What the replay job needs of the root it writes: its owner record and format."""
    owner = read_owner(output)
    return RootSnapshot(output, owner, recorded_format(output, owner))


def recorded_format(root: str, owner: Owner | None) -> RecordedFormat | None:
    """The format the output root was created in, and what says so; None while nothing does (a new or empty root)."""
    if owner is not None and owner.output_format is not None:
        return RecordedFormat(owner.output_format, f"as its owner record {owner_path(root)} says")
    # An owner record of a release that recorded no format, or none at all (a release before owner records).
    layout = layout_format(root)
    if layout == "directory":
        return RecordedFormat(layout, "it holds batch_id=<id>/ folders")
    if layout == "iceberg":
        return RecordedFormat(layout, "it holds the table's metadata/ or data/ folder")
    return None


def _owner(data: dict[str, Any]) -> Owner:
    """A record as any release wrote it, upgraded on read: what an older release did not record reads as its
    default (``adopted`` 0; ``output_format`` and ``stream_created`` None, which ``recorded_format`` and the stream
    check look up instead)."""
    recorded, created = data.get("output_format"), data.get("stream_created")
    return Owner(
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
        return _owner(data)
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


# How far a new claim looks below its root for another root's owner record (see owner_record_inside): a folder listing
# costs microseconds on local disk and an S3 request (a page of at most 1,000 keys) on S3.
INSIDE_SEARCH_FOLDERS = 2000
INSIDE_SEARCH_FOLDERS_S3 = 20


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
