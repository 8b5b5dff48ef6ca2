"""Staged folders swapped into place from a record, resumably: a swap cut short at any step is finished by the next call,
and leaves the batch's folder whole (old, or new) or absent meanwhile, never half of one or both."""

from __future__ import annotations

import json
from pathlib import Path

from kinesis_replay.adapters import files


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def staged(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A batch folder and quarantine of an earlier attempt, the new attempt's staged data (no quarantine), and the moves."""
    out = tmp_path / "out"
    (out / "batch_id=1").mkdir(parents=True)
    (out / "batch_id=1/old.parquet").write_bytes(b"old")
    (out / "_quarantine/batch_id=1").mkdir(parents=True)
    (out / "_quarantine/batch_id=1/old-bad.parquet").write_bytes(b"old bad")
    (out / "_staging/batch_id=1/attempt=a/data").mkdir(parents=True)
    (out / "_staging/batch_id=1/attempt=a/data/new.parquet").write_bytes(b"new")
    moves = [
        (str(out / "_staging/batch_id=1/attempt=a/data"), str(out / "batch_id=1")),
        (str(out / "_staging/batch_id=1/attempt=a/quarantine"), str(out / "_quarantine/batch_id=1")),
    ]
    return out, moves


def test_a_swap_puts_the_staged_folders_in_place_and_removes_a_target_with_nothing_staged(tmp_path: Path) -> None:
    out, moves = staged(tmp_path)
    record = str(out / "_staging/batch_id=1/swap.json")

    files.swap_in(record, moves)

    assert tree(out / "batch_id=1") == {"new.parquet": b"new"}
    assert tree(out / "_quarantine") == {}  # the new attempt quarantined nothing
    assert not Path(record).exists() and tree(out / "_staging") == {}
    assert files.finish_swap(record) is False  # nothing left to finish


def test_a_swap_cut_short_after_its_first_rename_is_finished_from_its_record(tmp_path: Path) -> None:
    out, moves = staged(tmp_path)
    record = out / "_staging/batch_id=1/swap.json"
    files.begin_swap(str(record), moves)
    # Cut short after the first move's rename, before the record said so: the staged folder is gone, the record not done.
    (out / "batch_id=1/old.parquet").unlink()
    (out / "batch_id=1").rmdir()
    Path(moves[0][0]).rename(out / "batch_id=1")
    assert not json.loads(record.read_text())["moves"][0]["done"]

    assert files.finish_swap(str(record)) is True

    assert tree(out / "batch_id=1") == {"new.parquet": b"new"} and tree(out / "_quarantine") == {}
    assert not record.exists()


def test_a_swap_cut_short_before_any_move_is_finished_and_a_done_move_is_not_redone(tmp_path: Path) -> None:
    out, moves = staged(tmp_path)
    record = out / "_staging/batch_id=1/swap.json"
    files.begin_swap(str(record), moves)
    assert tree(out / "batch_id=1") == {"old.parquet": b"old"}  # recorded, nothing moved yet: readers see the old batch whole

    files.finish_swap(str(record))
    assert tree(out / "batch_id=1") == {"new.parquet": b"new"}

    # A record left with every move done (cut short before its removal) moves nothing again.
    done = {"moves": [{"from": src, "to": dst, "staged": True, "done": True} for src, dst in moves]}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(done))
    assert files.finish_swap(str(record)) is True
    assert tree(out / "batch_id=1") == {"new.parquet": b"new"} and not record.exists()
