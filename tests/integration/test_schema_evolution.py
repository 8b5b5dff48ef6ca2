"""Schema changes through a real pyiceberg table (issue 46, point 4): the embedded SQL catalog on a temporary folder, the
replay's own task writer and decoder, no Spark.

A field added to payload.schema joins the table; a widening Iceberg allows is made in the table's schema in the same
transaction that adds the batch's files, and a scan reads the older rows widened; a removed field stays, null in new
rows; a rename in payload.renamed_from renames the column, and the rows written under the old name keep their values
under the new one. A change Iceberg cannot make is refused at the plan, on the local stack's stream and state table,
before the stream is read: the table and the ledger are as they were.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from fakes.pages import page
from kinesis_replay.adapters import files, iceberg_table, layout, range_reader
from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine, page_rows
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.json_columns import JsonColumns
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult
from kinesis_replay.steps.backfill import choose
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.plan import plan_batch
from kinesis_replay.steps.verify import verify_batch

RUNBOOK = 'docs/operating.md: "We changed a type"'


def pipeline(root: Path, schema: str, renamed_from: dict[str, str] | None = None, **entry: Any) -> PipelineConfig:
    """A pipeline landing JSON payloads in an Iceberg table in the embedded catalog under ``root``."""
    payload: dict[str, Any] = {"format": "json", "schema": schema, **({"renamed_from": renamed_from} if renamed_from else {})}
    base = {"name": "orders", "stream": "orders", "output": str(root), "schedule": None, "initial_position": "TRIM_HORIZON",
            "state_table": "kr-orders", "spark": {}}  # fmt: skip
    return parse_config({"pipelines": [{**base, **entry, "payload": payload}]})[0]


def land(
    p: PipelineConfig, batch_id: int, payloads: list[dict[str, Any]], attempt: str = "a", written_by: PipelineConfig | None = None
) -> list[str]:
    """A batch's attempt as the replay's tasks write it (their writer, ``written_by``'s payload.schema decoded: ``p``'s
    unless an earlier config wrote it), then verify's check of its files against the table and the commit's snapshot."""
    rows = page("shardId-0", batch_id * 1000, len(payloads))
    data = pa.array([json.dumps(payload).encode() for payload in payloads], pa.binary())
    rows = rows.set_column(rows.schema.get_field_index("data"), "data", data)
    quarantine = f"{p.output}/_quarantine/{batch_id}-{attempt}"
    writer = AttemptWriter(
        layout.data_path(p.output, batch_id, attempt),
        quarantine,
        "part-00000",
        batch_id,
        JsonColumns((written_by or p).payload.schema or "", p.name),
    )
    writer.write(rows)
    written = [f.path for f in writer.close().files if f.kind == "data"]
    iceberg_table.check_files_fit(p, batch_id, attempt, written)
    iceberg_table.commit_snapshot(p, batch_id, attempt, written, f"run-{batch_id}")
    return written


def table(p: PipelineConfig) -> Any:
    found = iceberg_table.load_table(p)
    assert found is not None
    return found


def scanned(p: PipelineConfig, *columns: str) -> list[tuple[Any, ...]]:
    """The table's rows, oldest first (batch 1's before batch 2's), as tuples of ``columns``."""
    rows = table(p).scan().to_arrow().sort_by("sequence_number")
    return list(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))


def column_types(p: PipelineConfig) -> dict[str, str]:
    return {f.name: str(f.field_type) for f in table(p).schema().fields}


def test_an_added_field_joins_the_table_null_in_the_rows_before(tmp_path: Path) -> None:
    land(pipeline(tmp_path, "user STRING"), 1, [{"user": "a"}])
    p = pipeline(tmp_path, "user STRING, country STRING")
    land(p, 2, [{"user": "b", "country": "NL"}])
    assert column_types(p)["country"] == "string"
    assert scanned(p, "user", "country") == [("a", None), ("b", "NL")]


@pytest.mark.parametrize(
    ("before", "after", "old", "new", "widened"),
    [
        ("INT", "BIGINT", 7, 2**40, "long"),
        ("FLOAT", "DOUBLE", 1.5, 0.1, "double"),
        ("DECIMAL(10,2)", "DECIMAL(12,2)", 12345678.91, 1234567890.12, "decimal(12, 2)"),
    ],
    ids=["int to bigint", "float to double", "decimal(10,2) to decimal(12,2)"],
)
def test_a_widening_is_made_in_the_tables_schema_with_the_batch_and_a_scan_reads_old_and_new_rows_widened(
    tmp_path: Path, before: str, after: str, old: Any, new: Any, widened: str
) -> None:
    land(pipeline(tmp_path, f"user STRING, amount {before}"), 1, [{"user": "a", "amount": old}])
    first = table(pipeline(tmp_path, "user STRING")).current_snapshot()
    p = pipeline(tmp_path, f"user STRING, amount {after}")
    land(p, 2, [{"user": "b", "amount": new}])

    t = table(p)
    assert column_types(p)["amount"] == widened
    current = t.current_snapshot()
    assert current.parent_snapshot_id == first.snapshot_id  # one snapshot: the widening and the batch's files together
    assert current.schema_id == t.schema().schema_id != first.schema_id
    rows = t.scan().to_arrow().sort_by("sequence_number")
    assert str(rows.schema.field("amount").type) == {"long": "int64", "double": "double"}.get(widened, "decimal128(12, 2)")
    if isinstance(old, float) and widened.startswith("decimal"):
        old, new = Decimal(str(old)), Decimal(str(new))
    assert rows.column("amount").to_pylist() == [old, new]


def test_a_removed_field_stays_in_the_table_null_in_new_rows(tmp_path: Path) -> None:
    land(pipeline(tmp_path, "user STRING, amount INT"), 1, [{"user": "a", "amount": 3}])
    p = pipeline(tmp_path, "user STRING")
    land(p, 2, [{"user": "b", "amount": 4}])  # the payload still has it: payload.schema no longer takes it
    assert column_types(p)["amount"] == "int"
    assert scanned(p, "user", "amount") == [("a", 3), ("b", None)]


def test_a_rename_keeps_the_rows_landed_before_under_the_new_name_and_a_file_of_before_still_commits(tmp_path: Path) -> None:
    before = pipeline(tmp_path, "user STRING, amount INT")
    land(before, 1, [{"user": "a", "amount": 3}])
    p = pipeline(tmp_path, "user STRING, amount_eur BIGINT", {"amount_eur": "amount"})
    land(p, 2, [{"user": "b", "amount_eur": 4}])

    t = table(p)
    assert "amount" not in column_types(p) and column_types(p)["amount_eur"] == "long"  # renamed and widened at once
    field_id = t.schema().find_field("amount_eur").field_id
    mapping = {f.field_id: f.names for f in t.metadata.name_mapping()}
    assert mapping[field_id] == ["amount", "amount_eur"]  # batch 1's file still names it "amount"
    assert scanned(p, "user", "amount_eur") == [("a", 3), ("b", 4)]

    # A restore (or backfill) puts back a batch from files written before the rename: pyiceberg 0.12 alone refuses them.
    land(p, 1, [{"user": "c", "amount": 5}], attempt="b", written_by=before)
    assert scanned(p, "user", "amount_eur") == [("c", 5), ("b", 4)] and "amount" not in column_types(p)


# -- refused at the plan, on the local stack ---------------------------------------------------------------------------


class Reads:
    """A Kinesis client that records every use: a plan refused before the stream is read uses none."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return getattr(self.client, name)


def replay_into_table(p: PipelineConfig, client: Any, batch: Batch) -> None:
    """The batch's ranges read and written as the replay job's tasks write a table output's (their reader and writer,
    payload.schema decoded), its quarantine swapped in and its result manifest written: the replay, without Spark."""
    attempt = "a1"
    staging = f"{layout.staging_path(p.output, batch.batch_id)}/attempt={attempt}"
    columns = JsonColumns(p.payload.schema or "", p.name)
    writer = AttemptWriter(layout.data_path(p.output, batch.batch_id, attempt), f"{staging}/quarantine", "t0", batch.batch_id, columns)
    for rng in batch.ranges:
        for got in range_reader.iterate_range(client, p.stream, rng, p.read):
            writer.write(page_rows(p.stream, rng.shard_id, got))
    _, results = combine([writer.close()])
    files.replace_folder(f"{staging}/quarantine", layout.quarantine_path(p.output, batch.batch_id))
    files.remove_folder(layout.staging_path(p.output, batch.batch_id), missing_ok=True)
    decoding = Decoding.of(p.payload.format, p.payload.schema)
    files.write_json(
        layout.result_path(p.output, batch.batch_id), ReplayResult(p.name, batch.batch_id, tuple(results), 0.1, attempt, decoding).to_dict()
    )


def ledger(store: DynamoDBStateStore, name: str) -> tuple[Any, ...]:
    return store.get_head(name), store.get_shards(name), [(b.batch_id, b.status) for b in store.list_batches(name)]


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ("n STRING", 'column "n": the table\'s int, now string (STRING)'),
        ("price DECIMAL(12,3)", 'column "price": the table\'s decimal(10, 2), now decimal(12, 3) (DECIMAL(12,3))'),
        ("ratio FLOAT", 'column "ratio": the table\'s double, now float (FLOAT)'),
    ],
    ids=["int to string", "decimal(10,2) to decimal(12,3)", "double to float, a narrowing"],
)
def test_a_change_iceberg_cannot_make_is_refused_at_the_plan_naming_the_field_with_nothing_read_or_changed(
    kinesis: Any, stream: str, store: DynamoDBStateStore, entry: dict[str, Any], changed: str, named: str
) -> None:
    fields = {"n": "n INT", "price": "price DECIMAL(10,2)", "ratio": "ratio DOUBLE"}
    p = pipeline(
        Path(entry["output"]), f"user STRING, {', '.join(fields.values())}", **{k: entry[k] for k in ("name", "stream", "state_table")}
    )
    records = [{"PartitionKey": f"k{i}", "Data": json.dumps({"user": f"u{i}", "n": i, "price": i + 0.25, "ratio": i / 3}).encode()}
               for i in range(20)]  # fmt: skip
    kinesis.put_records(StreamName=stream, Records=records)
    planned = plan_batch(p, kinesis, store, "run-1").batch
    assert planned is not None
    replay_into_table(p, kinesis, planned)
    verify_batch(p, store, planned.batch_id, run_id="run-1")
    assert commit_batch(p, store, planned.batch_id, run_id="run-1").status == BatchStatus.COMMITTED
    kinesis.put_records(StreamName=stream, Records=records[:5])  # more to plan, were the plan to go on
    held, schema, snapshot = ledger(store, p.name), table(p).schema(), table(p).current_snapshot()

    column = changed.split()[0]
    refused = pipeline(Path(entry["output"]), f"user STRING, {', '.join(changed if n == column else f for n, f in fields.items())}",
                       **{k: entry[k] for k in ("name", "stream", "state_table")})  # fmt: skip
    reads = Reads(kinesis)
    with pytest.raises(ConfigError) as plan_refused:
        plan_batch(refused, reads, store, "run-2")
    with pytest.raises(ConfigError) as backfill_refused:
        choose(refused, reads, store, {"batch_ids": [1]})
    for message in (str(plan_refused.value), str(backfill_refused.value)):
        assert named in message and RUNBOOK in message and "Nothing was read or written." in message
    assert reads.used == []  # the stream was not read, not even listed
    assert ledger(store, p.name) == held
    after = table(p)
    assert after.schema() == schema and after.current_snapshot().snapshot_id == snapshot.snapshot_id
    assert len(after.scan().to_arrow()) == 20
