"""Payloads through the real DAG: KPL aggregates deaggregated exactly once, bad records quarantined and counted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.state import BatchStatus
from stack.harness import SUCCESS, check_exactly_once, load_dags, read_output, run_dag
from stack.producer import produce, produce_aggregated, put_raw


@pytest.fixture
def run(tmp_path: Path, airflow_db: Path) -> Any:
    def run_pipeline(entry: dict[str, Any], **kwargs: Any) -> Any:
        dag = load_dags(tmp_path / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]
        return run_dag(dag, **kwargs)

    return run_pipeline


def test_kpl_aggregates_and_plain_records_land_once_per_user_record(kinesis: Any, entry: dict[str, Any], run: Any) -> None:
    produced = produce(kinesis, entry["stream"], 60)
    produced += produce_aggregated(kinesis, entry["stream"], aggregates=12, per_aggregate=25, start_index=60)
    produced += produce(kinesis, entry["stream"], 40, start_index=360)  # plain after aggregated, in the same shards
    assert run(entry).tasks == SUCCESS
    table = read_output(entry["output"])
    result = check_exactly_once(produced, table)
    assert result.ok and result.rows == 400, result
    keyed = dict(zip(zip(table["sequence_number"].to_pylist(), table["sub_sequence_number"].to_pylist(), strict=True),
                     table["partition_key"].to_pylist(), strict=True))  # fmt: skip
    assert all(keyed[(p.sequence_number, p.sub_sequence_number)] == p.partition_key for p in produced)  # the user record's key
    assert max(table["sub_sequence_number"].to_pylist()) == 24


def test_a_malformed_aggregate_is_quarantined_and_counted_not_lost(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], run: Any
) -> None:
    good = produce(kinesis, entry["stream"], 30)
    blob = produce_aggregated(kinesis, entry["stream"], 1, 3)  # one good aggregate, to corrupt a copy of
    aggregate = b"".join([b"\xf3\x89\x9a\xc2", b"\x0a\x02k0", b"\x1a\x04\x08\x05\x1a\x00", b"0" * 16])  # index 5 of 1 keys
    bad = put_raw(kinesis, entry["stream"], "k0", aggregate)
    assert run({**entry, "payload": {"max_bad_share": 0.5}}).tasks == SUCCESS
    assert check_exactly_once(good + blob, read_output(entry["output"])).ok
    quarantined = read_output(entry["output"], quarantine=True)
    assert quarantined["sequence_number"].to_pylist() == [bad.sequence_number]
    assert quarantined["data"].to_pylist() == [aggregate]  # kept whole, untouched
    assert "malformed KPL aggregate" in quarantined["decode_error"].to_pylist()[0]
    result = store.get_batch(entry["name"], 1).result
    assert result is not None and (result.records, result.bad_records) == (33, 1)


def test_json_payloads_become_columns_and_undecodable_ones_are_quarantined_with_the_field_at_fault(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], run: Any
) -> None:
    good = produce(kinesis, entry["stream"], 100)  # no amount, no meta: both null
    extra = put_raw(kinesis, entry["stream"], "k", b'{"user": "u-x", "index": 1000, "amount": 5, "meta": {"id": 7}, "other": [1, "x"]}')
    reasons = {
        b"not json": "not valid JSON: Expecting value: line 1 column 1 (char 0)",
        b"\xff\xfe{}": "not UTF-8: byte 0xff at offset 0 (invalid start byte)",
        b"  \n": "blank payload",
        b"null": "not a JSON object (got null)",
        b"[1, 2]": "not a JSON object (got array)",
        b'{"user": "u", "amount": "abc"}': 'field "amount": expected BIGINT, got string "abc"',
        b'{"user": "u", "meta": {"id": 1.5}}': 'field "meta.id": expected INT, got 1.5',
        b'{"meta": {"id": 1099511627776}}': 'field "meta.id": expected INT, got 1099511627776, out of range',
    }
    bad = {put_raw(kinesis, entry["stream"], "k", data).sequence_number: (data, reason) for data, reason in reasons.items()}
    aggregate = b"".join([b"\xf3\x89\x9a\xc2", b"\x0a\x02k0", b"\x1a\x04\x08\x05\x1a\x00", b"0" * 16])  # index 5 of 1 keys
    broken = put_raw(kinesis, entry["stream"], "k0", aggregate).sequence_number  # quarantined before any JSON is read
    schema = "user STRING, `index` BIGINT, amount BIGINT, meta STRUCT<id: INT>"
    assert run({**entry, "payload": {"format": "json", "schema": schema, "max_bad_share": 0.5}}).tasks == SUCCESS
    table = read_output(entry["output"])
    assert check_exactly_once([*good, extra], table).ok
    decoded = {
        row["index"]: (row["user"], row["amount"], row["meta"]) for row in table.select(["index", "user", "amount", "meta"]).to_pylist()
    }
    assert decoded == {
        **{json.loads(p.data)["index"]: (json.loads(p.data)["user"], None, None) for p in good},  # a missing field is null
        1000: ("u-x", 5, {"id": 7}),  # a field the schema does not name is dropped
    }
    quarantined = read_output(entry["output"], quarantine=True).select(["sequence_number", "data", "decode_error"]).to_pylist()
    # Each row kept whole, with why: the field and the type at fault, or why the payload is no JSON object at all.
    kept = {row["sequence_number"]: (row["data"], row["decode_error"]) for row in quarantined}
    assert kept.pop(broken) == (aggregate, "malformed KPL aggregate: its MD5 digest does not match its contents")  # kept
    assert kept == bad
    assert store.get_batch(entry["name"], 1).result.bad_records == len(reasons) + 1  # type: ignore[union-attr]


def test_too_many_bad_records_fail_the_batch_and_move_nothing(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], run: Any
) -> None:
    produce(kinesis, entry["stream"], 40)
    for _ in range(10):
        put_raw(kinesis, entry["stream"], "k", b"{broken")
    result = run({**entry, "payload": {"format": "json", "schema": "user STRING"}})
    assert result.tasks["verify"] == "failed" and result.tasks["commit"] == "upstream_failed"
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.FAILED
    assert "10 of 50 records (20.0%) could not be decoded, more than payload.max_bad_share (5.0%)" in (batch.error or "")
    folder = re.search(r"(\S*/quarantine/data/batch_id=0000000001/attempt=[^/\s]+)", batch.error or "")
    assert folder is not None, batch.error  # the attempt's own quarantine folder: no table holds it, as nothing committed
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())
    assert len(read_output(entry["output"], quarantine=True)) == 0
    # Where the error sends the operator: each record there says why.
    reasons = pq.read_table(folder.group(1))["decode_error"].to_pylist()
    assert reasons == ["not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"] * 10
