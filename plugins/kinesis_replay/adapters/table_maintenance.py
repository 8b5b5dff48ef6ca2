"""Table maintenance: expire old snapshots, then remove the files that no remaining snapshot references.

Every committed batch adds one snapshot to the table, and every replay of a batch leaves the files it replaced
behind, still referenced by the snapshots before it. Without maintenance the table's metadata and storage grow
forever. ``maintain`` does both halves, in this order:

1. **Expire snapshots** older than ``history.expire.max-snapshot-age-ms`` (a table property; 5 days when unset,
   Iceberg's default), keeping at least the newest ``history.expire.min-snapshots-to-keep`` (default 1) and
   always the current snapshot and every branch or tag head. pyiceberg 0.12's ``ExpireSnapshots`` makes the
   metadata commit (on the project's transaction, see ``expire_snapshots``); the catalog applies it to the
   table's latest metadata, so a batch committed meanwhile is kept. It deletes no file: step 2 does.
2. **Remove orphan files** under the table's ``data/`` and ``metadata/`` folders (never elsewhere under its
   location, which is the pipeline's output root): files that no remaining snapshot references (data files,
   manifests, manifest lists, statistics) and that are not the current or a logged metadata file, and that were
   last modified longer ago than ``orphan_age`` (3 days by default, Iceberg's ``remove_orphan_files`` default).
   pyiceberg 0.12 has no orphan-file action, so this module holds the smallest correct one.

Only files the table's own writers produce are ever removed (``own_file``): under ``data/``, the files of an attempt
folder ``batch_id=<digits>/attempt=<attempt>/`` (the replay job's Parquet files, and the checksums Hadoop's local
file system writes beside them); under ``metadata/``, Iceberg's metadata files (``*.metadata.json``), manifest lists
(``snap-*.avro``), manifests (``<uuid>-m<N>.avro``) and statistics files (``*.stats``, ``*.puffin``; pyiceberg 0.12
writes none, Iceberg's Java writers do). A folder that holds an owner record (``_kinesis_replay_owner.json``), an
embedded catalog (``_catalog/``) or an output's commit records or result manifests is another pipeline's output root:
nothing under it is removed, whatever its name (such a root in the table's folders lost all its output once). Every
other file is left alone too, and reported (``Report.foreign``, and a warning naming the paths).

Why orphan removal cannot remove a file a reader needs, or one a batch in flight is about to commit:

- the files are listed first and the table is read afterwards, so a file committed while the listing ran is
  referenced by the metadata read after it;
- a file is referenced if any remaining snapshot holds it live, not only the current one, so time travel to any
  snapshot the expiry kept still works;
- a replay writes its files before its commit, and a commit follows its replay within minutes to hours, far
  inside ``orphan_age``; and files under a batch that the ledger says is in flight (``in_flight``) are kept
  whatever their age, for a batch that failed and waits for an operator;
- files under a batch whose commit record in the output names no snapshot yet (``committing``, asked only about
  the batches that hold removable files) are kept too: its commit was cut short between the record and the table
  commit, and the run that resumes it, or a recovery of a lost state table from the records, needs them;
- a caller that cannot trust the ledger (the pipeline's head item is missing: the state table was lost, emptied or
  replaced) passes ``refuse_orphans``, and no file is removed; expiry still runs, as it deletes no file and keeps
  the current snapshot, the only one a commit cut short can be in (nothing commits without a head);
- one location, one table: while the metadata folder holds a metadata file of another table (another ``table-uuid``:
  a second table created at the same location, by a mistyped table name or by hand), no orphan file is removed,
  as this table's references say nothing of that one's files (its metadata, manifests and data files would all look
  like orphans). The run names the files and the other table; expiry still runs, on this table's metadata alone.

Superseded files (a replayed batch's old files) are therefore removed by the first run after the snapshot that
still referenced them has expired: a backfill never deletes them itself, so a reader time travelling to the
batch's earlier snapshot reads it whole until the expiry.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from kinesis_replay.adapters import iceberg_table, layout
from kinesis_replay.core.errors import ConfigError, TableLocationTakenError
from kinesis_replay.core.holdings import BATCHES_PROPERTY

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

# Iceberg's own table properties and defaults (TableProperties.java), so a user sets them as Iceberg documents them.
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP_PROPERTY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE = timedelta(days=5)
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
# Iceberg's remove_orphan_files default: older than any write that has not committed yet could be.
DEFAULT_ORPHAN_AGE = timedelta(days=3)
_BATCH_IN_PATH = re.compile(r"(?:^|/)batch_id=(\d+)(?:/|$)")
_ATTEMPT_IN_PATH = re.compile(r"(?:^|/)attempt=([^/]+)(?:/|$)")
# What the table's own writers name their files, relative to the data and the metadata folder (see the module's doc).
_OWN_DATA_FILE = re.compile(r"batch_id=\d+/attempt=[^/]+/(?:[^/]+\.parquet|\.[^/]+\.parquet\.crc|_kinesis_replay_stats\.json)")
_OWN_METADATA_FILE = re.compile(
    r"[^/]+\.metadata\.json"  # vN.metadata.json, NNNNN-<uuid>.metadata.json (and Java's .gz.metadata.json)
    r"|snap-\d+-\d+-[0-9a-fA-F-]+\.avro"  # a manifest list: snap-<snapshot id>-<attempt>-<commit uuid>.avro
    r"|[0-9a-fA-F-]+-m\d+\.avro"  # a manifest: <commit uuid>-m<N>.avro
    r"|[^/]+\.(?:stats|puffin)"  # a statistics file
)
# A folder that holds one of these is a kinesis-replay output root (another pipeline's): nothing under it is the table's.
_ROOT_MARKERS = (layout.OWNER_FILE, iceberg_table.CATALOG_DIR, layout.COMMITS_DIR, layout.RESULTS_DIR)
_FOREIGN_NAMED_IN_LOG = 20  # a warning names this many of the paths left alone; the report holds them all


@dataclass(frozen=True)
class Policy:
    """What to keep. Built from the table's properties by ``policy_for``; the orphan age is the task's to choose."""

    max_snapshot_age: timedelta = DEFAULT_MAX_SNAPSHOT_AGE
    min_snapshots_to_keep: int = DEFAULT_MIN_SNAPSHOTS_TO_KEEP
    orphan_age: timedelta = DEFAULT_ORPHAN_AGE

    def __post_init__(self) -> None:
        if self.min_snapshots_to_keep < 1:
            raise ConfigError(f"{MIN_SNAPSHOTS_TO_KEEP_PROPERTY} must be at least 1, not {self.min_snapshots_to_keep}")
        if self.max_snapshot_age < timedelta(0):
            raise ConfigError(f"{MAX_SNAPSHOT_AGE_PROPERTY} must not be negative, not {self.max_snapshot_age}")
        if self.orphan_age < timedelta(hours=1):
            # A younger file may belong to a replay whose commit is still to come.
            raise ConfigError(f"orphan_age must be at least an hour, not {self.orphan_age}")

    def cutoff(self, now: datetime, age: timedelta) -> datetime:
        """``now - age``, or the earliest time there is when the age reaches further back (Iceberg's "never": Long.MAX_VALUE ms)."""
        try:
            return now - age
        except OverflowError:
            return datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Report:
    """What one maintenance run did (or, in a dry run, would do)."""

    expired_snapshots: tuple[int, ...]
    snapshots_kept: int
    orphans_removed: tuple[str, ...]
    too_young: int  # unreferenced files kept because they are younger than the orphan age
    in_flight: int  # unreferenced files kept because they belong to a batch in flight or whose commit was cut short
    dry_run: bool = False
    failed: tuple[str, ...] = field(default=())  # orphans whose delete failed (the next run tries again)
    committing: tuple[int, ...] = field(default=())  # batches kept because their commit record names no snapshot yet
    orphans_refused: str | None = None  # why no orphan file was looked for or removed (expiry ran)
    # Left alone as not the table's own (whatever their age): another output root nested in the table's folders, named
    # once as its folder with a trailing "/", and each other file its writers never write (see own_file).
    foreign: tuple[str, ...] = field(default=())
    foreign_files: int = 0  # the files under those paths

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        if self.orphans_refused is not None:
            expired = f"expired {len(self.expired_snapshots)} snapshots (kept {self.snapshots_kept})"
            return f"{expired}; removed no orphan file: {self.orphans_refused}"
        return (
            f"expired {len(self.expired_snapshots)} snapshots (kept {self.snapshots_kept}); {verb} "
            f"{len(self.orphans_removed)} orphan files; kept {self.too_young} younger than the orphan age and "
            f"{self.in_flight} of batches in flight"
            + (f" (commits cut short: batches {', '.join(map(str, self.committing))})" if self.committing else "")
            + (f"; {len(self.failed)} deletes failed" if self.failed else "")
            + (f"; left alone {self.foreign_files} files that are not the table's: {_some(self.foreign)}" if self.foreign else "")
        )


def _some(paths: Collection[str], most: int = 5) -> str:
    shown = ", ".join(list(paths)[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _name(table: Table) -> str:
    return ".".join(table.name())


def _int_property(table: Table, name: str, default: int) -> int:
    value = table.properties.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"table {_name(table)}: property {name} must be an integer, not {value!r}") from None


def policy_for(table: Table, orphan_age: timedelta = DEFAULT_ORPHAN_AGE) -> Policy:
    """The table's retention, from its ``history.expire.*`` properties (Iceberg's defaults when unset).

    An age longer than Python's timedelta holds (Iceberg's "never expire" is Long.MAX_VALUE ms) is held as the longest one.
    """
    max_age_ms = _int_property(table, MAX_SNAPSHOT_AGE_PROPERTY, int(DEFAULT_MAX_SNAPSHOT_AGE.total_seconds() * 1000))
    keep = _int_property(table, MIN_SNAPSHOTS_TO_KEEP_PROPERTY, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    try:
        return Policy(timedelta(milliseconds=min(max_age_ms, _LONGEST_MS)), keep, orphan_age)
    except ConfigError as exc:
        raise ConfigError(f"table {_name(table)}: {exc}; set the table's property to a valid value") from None


_LONGEST_MS = timedelta.max // timedelta(milliseconds=1)


def snapshots_to_expire(table: Table, policy: Policy, now: datetime) -> list[int]:
    """Snapshots older than the policy's age, except the newest ``min_snapshots_to_keep``, every ref's head, and the
    newest snapshot of the current ancestry that records what the table holds (kinesis_replay.core.holdings): another
    writer's snapshots on top of it (a compaction) must not leave the table with no such record."""
    metadata = table.metadata
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    recording = next(
        (s for s in iceberg_table.ancestry(table) if s.summary is not None and BATCHES_PROPERTY in s.summary.additional_properties), None
    )
    if recording is not None:
        protected.add(recording.snapshot_id)
    newest_first = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0), reverse=True)
    kept = {s.snapshot_id for s in newest_first[: policy.min_snapshots_to_keep]}
    cutoff_ms = int(policy.cutoff(now, policy.max_snapshot_age).timestamp() * 1000)
    return [
        s.snapshot_id
        for s in metadata.snapshots
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected and s.snapshot_id not in kept
    ]


def expire_snapshots(table: Table, policy: Policy, now: datetime, dry_run: bool = False) -> list[int]:
    """Expire what ``snapshots_to_expire`` names, in one metadata commit; returns their ids."""
    expired = snapshots_to_expire(table, policy, now)
    if expired and not dry_run:
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        # pyiceberg's own builder (table.maintenance.expire_snapshots()) re-reads its transaction's metadata, a deep
        # copy of the whole history, for every id it is given: quadratic, minutes for a thousand snapshots. The
        # project's transaction reads it once.
        ExpireSnapshots(transaction=iceberg_table.transaction(table, autocommit=True)).by_ids(expired).commit()
        log.info("table %s: expired %d snapshots", _name(table), len(expired))
    return expired


def _path(location: str) -> str:
    """A location as the table's file system lists it (``/dir/f`` for ``file:///dir/f``, ``bucket/key`` for s3)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO.parse_location(location)[2]


def referenced_files(table: Table, expiring: Collection[int] = ()) -> set[str]:
    """Every file some remaining snapshot (all but ``expiring``) or the metadata needs, as listed paths.

    A data file counts when a manifest of a remaining snapshot holds it live (added or existing): a file a
    snapshot deleted is still live in that snapshot's parent, and so referenced for as long as the parent remains.
    Each manifest is read once, however many snapshots share it.
    """
    metadata, io = table.metadata, table.io
    paths: set[str] = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    paths.update(s.statistics_path for s in metadata.statistics)
    paths.update(s.statistics_path for s in metadata.partition_statistics)
    manifests = {}
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id in expiring:
            continue
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests[manifest.manifest_path] = manifest
    for path, manifest in manifests.items():
        paths.add(path)
        paths.update(entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return {_path(p) for p in paths}


def _location(root: str, path: str) -> str:
    """A listed path as a location the table's FileIO deletes (``file:///dir/f``, ``s3://bucket/key``)."""
    scheme = root.split("://", 1)[0] if "://" in root else "file"
    return f"file://{path}" if scheme == "file" else f"{scheme}://{path}"


def table_folders(table: Table) -> list[str]:
    """The folders that hold the table's own files: ``data/`` and ``metadata/`` under its location (or where
    ``write.data.path`` and ``write.metadata.path`` say).

    Never the whole location: the table's location is the pipeline's output root, which also holds the result
    manifests, the commit records, the owner record, quarantine and the embedded catalog, none of them the table's.
    """
    location = table.location().rstrip("/")
    return [
        table.properties.get("write.data.path", f"{location}/data").rstrip("/"),
        table.properties.get("write.metadata.path", f"{location}/metadata").rstrip("/"),
    ]


@dataclass(frozen=True)
class Listing:
    """What the table's folders hold: the files its writers produce (with their modification times), and the rest."""

    files: list[tuple[str, datetime]]
    foreign: list[str]  # nested output roots (their folder, with a trailing "/") and single files, in order
    foreign_files: int  # the files under those paths


def own_file(kind: str, relative: str) -> bool:
    """Whether a path relative to the table's ``data`` or ``metadata`` folder (``kind``) is named as its writers name theirs."""
    return bool((_OWN_DATA_FILE if kind == "data" else _OWN_METADATA_FILE).fullmatch(relative))


def _sort_out(kind: str, folder: str, infos: list[tuple[str, str, bool, datetime]]) -> tuple[list[tuple[str, datetime]], list[str], int]:
    """Split one folder's recursive listing (path, base name, is a file, mtime) into own files and what is left alone."""
    roots = sorted(
        {path.rsplit("/", 1)[0] for path, name, is_file, _ in infos if (name == layout.OWNER_FILE) == is_file and name in _ROOT_MARKERS}
    )  # an owner record is a file, the other markers are folders
    own: list[tuple[str, datetime]] = []
    nested: dict[str, int] = {}
    stray: list[str] = []
    for path, _, is_file, mtime in infos:
        if not is_file:
            continue
        root = next((r for r in roots if path.startswith(r + "/")), None)
        if root is not None:
            nested[root] = nested.get(root, 0) + 1
        elif own_file(kind, path[len(folder) + 1 :]):
            own.append((path, mtime))
        else:
            stray.append(path)
    return own, sorted([f"{r}/" for r in nested] + stray), len(stray) + sum(nested.values())


def _utc(mtime: datetime | None) -> datetime:
    """A listed modification time in UTC; none known (a folder, or a store that gives none) counts as just now."""
    if mtime is None:
        return datetime.max.replace(tzinfo=UTC)
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=UTC)


def _listing(table: Table) -> Listing:
    """Every file under the table's folders, with its modification time, through the table's own file system, sorted
    into the table's own files and those it leaves alone."""
    from pyarrow import fs as pafs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = table.io
    if not isinstance(io, PyArrowFileIO):
        io = PyArrowFileIO(table.io.properties)
    files: list[tuple[str, datetime]] = []
    foreign: list[str] = []
    count = 0
    for kind, folder in zip(("data", "metadata"), table_folders(table), strict=True):
        scheme, netloc, root = PyArrowFileIO.parse_location(folder, io.properties)
        filesystem = io.fs_by_scheme(scheme, netloc)
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        listed = [(i.path, i.base_name, i.type == pafs.FileType.File, _utc(i.mtime)) for i in infos if i.type != pafs.FileType.NotFound]
        own, left, n = _sort_out(kind, root.rstrip("/"), listed)
        files += own
        foreign += left
        count += n
    return Listing(files, foreign, count)


def batch_of(path: str) -> int | None:
    """The batch whose partition a path is under (``.../batch_id=0000000042/...``), if any."""
    found = _BATCH_IN_PATH.search(path)
    return int(found.group(1)) if found else None


def attempt_of(path: str) -> str | None:
    """The attempt whose folder a path is under (``.../attempt=<attempt>/...``), if any."""
    found = _ATTEMPT_IN_PATH.search(path)
    return found.group(1) if found else None


Committing = Callable[[set[int]], Collection[int]]
"""Of the batches named, those whose commit began and has no snapshot yet (``commit_records.unfinished_commits``)."""
Replayed = Callable[[set[int]], Mapping[int, Collection[str]]]
"""Of the batches named, the attempts that wait for a commit: each one's last replay (``commit_records.last_replayed_attempts``)
and a re-decode's, staged in the ledger (``Batch.staged``)."""


def _committing(table: Table, candidates: list[str], committing: Committing | None) -> list[int]:
    """The batches of the candidate files whose commit began and has no snapshot yet: their files stay."""
    named = {b for b in map(batch_of, candidates) if b is not None}
    if committing is None or not named:
        return []
    kept = sorted(set(committing(named)) & named)
    if kept:
        log.warning(
            "table %s: kept the unreferenced files of batches %s: their commit records name no snapshot yet (a commit cut short, "
            "which the next run or a recovery finishes with these files)", _name(table), ", ".join(map(str, kept)),
        )  # fmt: skip
    return kept


def _left_alone(table: Table, listing: Listing, referenced: set[str]) -> Listing:
    """The listing without the files the table references (added by hand under names of their own: the table's); the
    rest of its foreign paths are logged as a warning, naming them."""
    if referenced & set(listing.foreign):
        kept = [f for f in listing.foreign if f not in referenced]
        listing = replace(listing, foreign=kept, foreign_files=listing.foreign_files - len(listing.foreign) + len(kept))
    if listing.foreign:
        shown = listing.foreign[:_FOREIGN_NAMED_IN_LOG]
        more = len(listing.foreign) - len(shown)
        log.warning(
            "table %s: left alone %d files under its folders %s that its writers did not write (another pipeline's output "
            "root, which holds an owner record, a _catalog, _commits or _manifests, or files put there by hand): %s%s. "
            "Maintenance never removes them; the table's readers never see them",
            _name(table), listing.foreign_files, " and ".join(table_folders(table)), ", ".join(shown),
            f" and {more} more" if more else "",
        )  # fmt: skip
    return listing


_UUID_IN_HEAD = re.compile(rb'"table-uuid"\s*:\s*"([^"]+)"')
_HEAD_BYTES = 8192  # Iceberg's writers put table-uuid within the first few keys of a metadata file


def metadata_uuid(table: Table, path: str) -> str | None:
    """The ``table-uuid`` a metadata file names, read from its first bytes (the whole file only if they do not say)."""
    import json
    import zlib

    with table.io.new_input(_location(table.location(), path)).open() as stream:
        head = stream.read(_HEAD_BYTES)
        rest = b""
        gz = path.endswith(".gz.metadata.json")
        text = zlib.decompressobj(wbits=31).decompress(head) if gz else head
        found = _UUID_IN_HEAD.search(text)
        if found is not None:
            return found.group(1).decode()
        rest = stream.read()
    whole = head + rest
    try:
        value = json.loads(zlib.decompress(whole, wbits=31) if gz else whole).get("table-uuid")
    except ValueError:
        return None
    return str(value) if value is not None else None


def other_tables_metadata(table: Table, listing: Listing, referenced: set[str]) -> list[tuple[str, str | None]]:
    """The metadata files under the table's metadata folder that it does not reference and that name another table
    (or none that can be read): (path, table-uuid). Read only where unreferenced: this table's own metadata files that
    fell out of its metadata log, and any other table's."""
    own = str(table.metadata.table_uuid)
    others: list[tuple[str, str | None]] = []
    for path, _ in listing.files:
        if not path.endswith(".metadata.json") or path in referenced:
            continue
        try:
            uuid = metadata_uuid(table, path)
        except OSError as exc:  # gone meanwhile, or unreadable: not known to be this table's
            log.warning("table %s: could not read metadata file %s: %s", _name(table), path, exc)
            uuid = None
        if uuid != own:
            others.append((path, uuid))
    return others


def _other_table_refusal(table: Table, others: list[tuple[str, str | None]]) -> str:
    uuids = sorted({u or "unreadable" for _, u in others})
    folder = table_folders(table)[1]
    return (
        f"table {_name(table)} (table-uuid {table.metadata.table_uuid}): its metadata folder {folder} holds {len(others)} "
        f"metadata files of another table (table-uuid {', '.join(uuids)}): {_some([p for p, _ in others])}. Two tables at "
        "one location share its folders, and what this table does not reference may be that one's metadata, manifests "
        "or data files: no orphan file is removed while it is there. Find that table (a table.name mistyped once makes "
        "one: the pipeline's refusal names it) and drop it from its catalog without purging its files, then move its "
        "metadata files out of the folder; or, if it is the one to keep, point the pipeline at it"
    )


def _listed_and_referenced(table: Table, expiring: Collection[int]) -> tuple[Listing, set[str]]:
    """The table's folders listed, then what its metadata references; TableLocationTakenError if another table's metadata is there."""
    listing = _listing(table)  # first: a file committed from now on is in the metadata read next
    table.refresh()
    referenced = referenced_files(table, expiring)
    others = other_tables_metadata(table, listing, referenced)
    if others:
        raise TableLocationTakenError(_other_table_refusal(table, others))
    return _left_alone(table, listing, referenced), referenced


def remove_orphan_files(
    table: Table,
    policy: Policy,
    now: datetime,
    in_flight: Collection[int] = (),
    dry_run: bool = False,
    expiring: Collection[int] = (),
    committing: Committing | None = None,
    replayed: Replayed | None = None,
) -> tuple[list[str], int, int, list[str], list[int], Listing]:
    """Delete the table's own files under its folders that nothing references and that are older than the orphan age.

    Returns (removed, kept as too young, kept as in flight, failed deletes, batches kept as committing, the listing,
    whose ``foreign`` paths were left alone whatever their age: see the module's doc). A dry run
    counts the snapshots ``expiring`` (not expired yet) as gone. ``committing`` is asked once, about the batches
    that hold files old enough to remove, and those it names keep them; so does ``replayed``, and the attempt it
    names for a batch (its last replay: a backfill's, waiting for its check) keeps its files.
    """
    listing, referenced = _listed_and_referenced(table, expiring)
    flying_ids = set(in_flight)
    cutoff = policy.cutoff(now, policy.orphan_age)
    candidates: list[str] = []
    too_young = flying = 0
    for path, mtime in sorted(listing.files):
        if path in referenced:
            continue
        if batch_of(path) in flying_ids:
            flying += 1
        elif mtime > cutoff:
            too_young += 1
        else:
            candidates.append(path)
    kept = _committing(table, candidates, committing)
    named = {b for b in map(batch_of, candidates) if b is not None}
    last = replayed(named) if replayed is not None and named else {}  # a backfill's attempt waiting for its commit
    removed: list[str] = []
    failed: list[str] = []
    for path in candidates:
        batch, attempt = batch_of(path), attempt_of(path)
        if batch in kept or (batch is not None and attempt is not None and attempt in last.get(batch, ())):
            flying += 1  # a commit cut short, or a replay (a backfill's) whose commit is still to come
        else:
            removed.append(path)
    io = table.io
    if not dry_run:
        for path in removed:
            try:
                io.delete(_location(table.location(), path))
            except OSError as e:
                log.warning("table %s: could not delete orphan %s: %s", _name(table), path, e)
                failed.append(path)
        removed = [p for p in removed if p not in set(failed)]
    return removed, too_young, flying, failed, kept, listing


def expire_and_remove(
    table: Table,
    orphan_age: timedelta = DEFAULT_ORPHAN_AGE,
    in_flight: Collection[int] = (),
    now: datetime | None = None,
    dry_run: bool = False,
    committing: Committing | None = None,
    refuse_orphans: str | None = None,
    replayed: Replayed | None = None,
) -> Report:
    """Expire snapshots by the table's retention, then remove orphan files; see the module's doc for the defaults.

    With ``refuse_orphans`` (why the ledger cannot be trusted), only the expiry runs, and the reason is logged as an error.
    """
    now = now or datetime.now(UTC)
    policy = policy_for(table, orphan_age)
    expired = expire_snapshots(table, policy, now, dry_run=dry_run)
    removed: list[str] = []
    failed: list[str] = []
    kept: list[int] = []
    too_young = flying = 0
    listing = Listing([], [], 0)
    if refuse_orphans is None:
        try:
            removed, too_young, flying, failed, kept, listing = remove_orphan_files(
                table,
                policy,
                now,
                in_flight,
                dry_run=dry_run,
                expiring=expired if dry_run else (),
                committing=committing,
                replayed=replayed,
            )
        except TableLocationTakenError as exc:  # one location, one table: nothing removed while another's metadata is there
            refuse_orphans = str(exc)
    if refuse_orphans is not None:
        log.error("table %s: no orphan file removed: %s", _name(table), refuse_orphans)
    report = Report(
        expired_snapshots=tuple(expired),
        snapshots_kept=len(table.metadata.snapshots) - (len(expired) if dry_run else 0),
        orphans_removed=tuple(removed),
        too_young=too_young,
        in_flight=flying,
        dry_run=dry_run,
        failed=tuple(failed),
        committing=tuple(kept),
        orphans_refused=refuse_orphans,
        foreign=tuple(listing.foreign),
        foreign_files=listing.foreign_files,
    )
    log.info("table %s: %s", _name(table), report.summary())
    return report
