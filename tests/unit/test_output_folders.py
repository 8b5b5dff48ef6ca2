"""Folders of the output on local disk: one replaced by another whole, and files no task reported removed."""

from __future__ import annotations

from pathlib import Path

from kinesis_replay.adapters.files import remove_files_except, remove_folder, replace_folder


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_folder_replaces_another_whole_and_no_source_just_removes_the_target(tmp_path: Path) -> None:
    (tmp_path / "staging/data/sub").mkdir(parents=True)
    (tmp_path / "staging/data/a.parquet").write_bytes(b"new a")
    (tmp_path / "staging/data/sub/b.parquet").write_bytes(b"new b")
    (tmp_path / "out/batch_id=1").mkdir(parents=True)
    (tmp_path / "out/batch_id=1/old.parquet").write_bytes(b"old")

    replace_folder(str(tmp_path / "staging/data"), str(tmp_path / "out/batch_id=1"))

    assert tree(tmp_path / "out") == {"batch_id=1/a.parquet": b"new a", "batch_id=1/sub/b.parquet": b"new b"}
    assert not (tmp_path / "staging/data").exists()
    replace_folder(str(tmp_path / "staging/nothing"), str(tmp_path / "out/batch_id=1"))
    assert tree(tmp_path / "out") == {}


def test_files_no_task_reported_are_removed_and_the_reported_ones_kept(tmp_path: Path) -> None:
    folder = tmp_path / "attempt=a"
    folder.mkdir()
    for name in ("part-00000-t1-00000.parquet", "part-00000-t7-00000.parquet", "part-00001-t2-00000.parquet"):
        (folder / name).write_bytes(b"x")

    gone = remove_files_except(str(folder), [str(folder / "part-00000-t7-00000.parquet"), str(folder / "part-00001-t2-00000.parquet")])

    assert [Path(p).name for p in gone] == ["part-00000-t1-00000.parquet"]
    assert sorted(p.name for p in folder.iterdir()) == ["part-00000-t7-00000.parquet", "part-00001-t2-00000.parquet"]
    assert remove_files_except(str(tmp_path / "none"), []) == []
    remove_folder(str(tmp_path / "none"), missing_ok=True)
