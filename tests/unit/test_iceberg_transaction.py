"""The commit's transaction computes the table's metadata once per staged change, not once per read."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.update import update_table_metadata
from pyiceberg.types import LongType, NestedField

from kinesis_replay import iceberg_table


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
