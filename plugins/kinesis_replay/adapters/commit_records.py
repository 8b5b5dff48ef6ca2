"""The output's own copy of the ledger: a commit record per batch whose commit began, and the replays' results."""

from __future__ import annotations

from collections.abc import Iterable

from kinesis_replay.adapters.files import filesystem_of, is_file, names_the_store, read_json, read_result, write_json
from kinesis_replay.adapters.layout import COMMITS_DIR, RESULTS_DIR, commit_record_path
from kinesis_replay.core.errors import KinesisReplayError, OutputCorruptError, VerificationError
from kinesis_replay.core.state import Batch


def write_commit_record(output: str, batch: Batch) -> None:
    """The output's copy of a committing batch's ledger entry: its ranges, manifest and gaps."""
    write_json(commit_record_path(output, batch.batch_id), {"format": 1, "batch": batch.to_dict()})


def has_commit_record(output: str, batch_id: int) -> bool:
    return is_file(commit_record_path(output, batch_id))


@names_the_store
def batch_ids_in(folder: str) -> list[int]:
    """The ids of the ``batch_id=<id>.json`` files in a folder, in order (one listing of one folder)."""
    from pyarrow import fs

    filesystem, local = filesystem_of(folder)
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
    return batch_ids_in(f"{output.rstrip('/')}/{COMMITS_DIR}")


def result_batch_ids(output: str) -> list[int]:
    """The ids of the batches whose result manifests the output holds (committed or not), in order."""
    return batch_ids_in(f"{output.rstrip('/')}/{RESULTS_DIR}")


def read_commit_record(output: str, batch_id: int) -> Batch:
    path = commit_record_path(output, batch_id)
    data = read_json(path)
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
            attempt = read_result(output, batch_id).attempt
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
            data = read_json(commit_record_path(output, batch_id))
        except KinesisReplayError:
            found.add(batch_id)  # unreadable: what it names is unknown, so its files are kept
            continue
        if data is None:
            continue
        batch = data.get("batch") if isinstance(data, dict) else None
        if not isinstance(batch, dict) or batch.get("snapshot_id") is None:
            found.add(batch_id)
    return found
