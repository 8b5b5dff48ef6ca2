"""The local stack's kinesalite fixes are applied once, and refuse a kinesalite they were not written for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stack import local_stack

KINESALITE = Path(local_stack.__file__).parent / "node_modules" / "kinesalite"


@pytest.fixture
def kinesalite_copy(tmp_path: Path) -> Path:
    if not KINESALITE.exists():
        pytest.fail("kinesalite is not installed: `make test` installs it")
    target = tmp_path / "kinesalite"
    for folder in ("actions", "db"):
        shutil.copytree(KINESALITE / folder, target / folder)
    return target


@pytest.mark.parametrize(("name", "fixes"), [("actions/getShardIterator.js", 2), ("actions/getRecords.js", 2), ("db/index.js", 2)])
def test_each_fix_is_applied_once(kinesalite_copy: Path, name: str, fixes: int) -> None:
    source = kinesalite_copy / name
    local_stack.patch_kinesalite(kinesalite_copy)
    once = source.read_text()
    local_stack.patch_kinesalite(kinesalite_copy)
    assert source.read_text() == once and once.count("patched by kinesis-replay") == fixes


def test_an_unknown_kinesalite_is_refused(kinesalite_copy: Path) -> None:
    (kinesalite_copy / "actions" / "getShardIterator.js").write_text("// another version\n")
    with pytest.raises(RuntimeError, match=r"is not kinesalite 3\.3\.3's"):
        local_stack.patch_kinesalite(kinesalite_copy)


def test_an_earlier_fix_is_patched_over(kinesalite_copy: Path) -> None:
    """A kinesalite patched by an earlier version of local_stack (make does not reinstall it) gets today's fix."""
    source = kinesalite_copy / "actions" / "getShardIterator.js"
    local_stack.patch_kinesalite(kinesalite_copy)
    source.write_text(source.read_text().replace(local_stack._AT_TIMESTAMP_FIX, local_stack._AT_TIMESTAMP_EARLIER_FIX))
    local_stack.patch_kinesalite(kinesalite_copy)
    text = source.read_text()
    assert local_stack._AT_TIMESTAMP_FIX in text and local_stack._AT_TIMESTAMP_EARLIER_FIX not in text
