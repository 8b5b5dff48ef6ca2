"""The patched commit (pyiceberg_patches): the metadata computed once per staged change, never deep-copied, and pyiceberg's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.update import update_table_metadata
from pyiceberg.types import LongType, NestedField

from kinesis_replay.adapters import iceberg_table, pyiceberg_patches

pytestmark = pytest.mark.skipif(not pyiceberg_patches.PATCHED, reason=f"the patches do not apply: {pyiceberg_patches.why_not}")


def test_metadata_is_computed_once_per_staged_change_and_commits_as_pyicebergs_own(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("lake")
    table = catalog.create_table("lake.orders", Schema(NestedField(1, "batch_id", LongType(), required=False)))

    with iceberg_table.transaction(table) as tx:
        first = tx.table_metadata
        assert tx.table_metadata is first, "an unchanged transaction reuses its metadata"
        tx.set_properties({"kinesis-replay.test": "1"})
        changed = tx.table_metadata
        assert changed is not first and changed.properties["kinesis-replay.test"] == "1"
        # The same metadata as pyiceberg's own computation (which also deep-copies it and stamps the time).
        ours, theirs = changed, update_table_metadata(table.metadata, tx._updates)
        assert ours.model_copy(update={"last_updated_ms": 0}) == theirs.model_copy(update={"last_updated_ms": 0})

    assert catalog.load_table("lake.orders").properties["kinesis-replay.test"] == "1"


def test_the_catalogs_commit_writes_pyicebergs_metadata_without_its_deep_copy(tmp_path: Path) -> None:
    import pyarrow as pa

    properties = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}"}
    plain = SqlCatalog("t", **properties)
    lean = pyiceberg_patches.stage_without_deep_copy(SqlCatalog("t", **properties))
    plain.create_namespace("lake")
    table = lean.create_table("lake.orders", Schema(NestedField(1, "batch_id", LongType(), required=False)))
    rows = pa.table({"batch_id": pa.array([1, 2], pa.int64())})
    for round_ in range(3):  # a history: the metadata log and snapshots grow
        tx = table.transaction()
        tx.set_properties({"kinesis-replay.round": str(round_)})
        tx.append(rows)
        args = (table, table.name(), tx._requirements, tx._updates)
        ours, theirs = lean._update_and_stage_table(*args), plain._update_and_stage_table(*args)
        # The same next version in the same folder (the file name's other part is a random UUID).
        assert ours.metadata_location.rsplit("-", 5)[0] == theirs.metadata_location.rsplit("-", 5)[0]
        assert ours.metadata.model_copy(update={"last_updated_ms": 0}) == theirs.metadata.model_copy(update={"last_updated_ms": 0})
        tx.commit_transaction()  # through the lean catalog: the table loaded from it commits through it
    reloaded = plain.load_table("lake.orders")
    assert [s.summary.operation.value for s in reloaded.snapshots()] == ["append"] * 3
    assert reloaded.properties["kinesis-replay.round"] == "2" and len(reloaded.metadata.metadata_log) == 3
    assert reloaded.scan().to_arrow().num_rows == 6


def test_a_commit_parses_the_metadata_file_once_and_still_loses_a_race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.serializers import FromInputFile

    properties = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}"}
    plain = SqlCatalog("t", **properties)
    plain.create_namespace("lake")
    schema = Schema(NestedField(1, "batch_id", LongType(), required=False))
    plain.create_table("lake.orders", schema, properties={iceberg_table.COMMIT_RETRIES_PROPERTY: "0"})  # as the pipeline's
    rows = pa.table({"batch_id": pa.array([1, 2], pa.int64())})
    parsed: list[str] = []
    parse = FromInputFile.table_metadata
    monkeypatch.setattr(FromInputFile, "table_metadata", staticmethod(lambda f, *a, **k: parsed.append(f.location) or parse(f, *a, **k)))

    def lean() -> SqlCatalog:  # a commit task's catalog: a new process, nothing parsed yet
        return pyiceberg_patches.parse_each_metadata_file_once(pyiceberg_patches.stage_without_deep_copy(SqlCatalog("t", **properties)))

    table = lean().load_table("lake.orders")
    table.append(rows)  # the catalog's commit finds the pointer where the load found it: no second parse
    assert len(parsed) == 1 and plain.load_table("lake.orders").scan().to_arrow().num_rows == 2

    stale = lean().load_table("lake.orders")
    plain.load_table("lake.orders").append(rows)  # another writer moves the pointer
    with pytest.raises(CommitFailedException):
        stale.append(rows)  # the optimistic check still refuses a commit on stale metadata
    assert plain.load_table("lake.orders").scan().to_arrow().num_rows == 4
