"""Payloads through the real DAG: KPL aggregates deaggregated exactly once, bad records quarantined and counted."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.state import BatchStatus
from stack.harness import SUCCESS, check_exactly_once, load_dags, pipeline_entry, read_output, run_dag
from stack.producer import Produced, ensure_stream, kinesis_client, produce, produce_aggregated, put_raw


@pytest.fixture
def run(tmp_path: Path, airflow_db: Path) -> Any:
    def run_pipeline(entry: dict[str, Any], **kwargs: Any) -> Any:
        dag = load_dags(tmp_path / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]
        return run_dag(dag, **kwargs)

    return run_pipeline


MALFORMED_AGGREGATE = b"".join([b"\xf3\x89\x9a\xc2", b"\x0a\x02k0", b"\x1a\x04\x08\x05\x1a\x00", b"0" * 16])  # index 5 of 1 keys


@dataclass(frozen=True)
class RawBatch:
    """One raw-payload batch, landed by one cycle: plain records and KPL aggregates, and one malformed aggregate."""

    entry: dict[str, Any]
    store: DynamoDBStateStore
    produced: list[Produced]  # every user record, plain or aggregated
    bad: Produced
    tasks: dict[str, str]


@pytest.fixture(scope="module")
def raw_batch(stack: Any, airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawBatch]:
    """The tests below read different things of the same outcome: one Spark run, where each took one before.

    A stream and a state table of the module's own (the per-test fixtures are function-scoped).
    """
    kinesis = kinesis_client()
    stream, table = f"test-{uuid.uuid4().hex[:10]}", f"kr-{uuid.uuid4().hex[:8]}"
    ensure_stream(kinesis, stream, 4)
    store = DynamoDBStateStore(boto3.client("dynamodb"), table)
    store.ensure_table()
    work = tmp_path_factory.mktemp("raw-batch")
    entry = pipeline_entry(f"p{uuid.uuid4().hex[:8]}", stream, work / "out", table, payload={"max_bad_share": 0.5})
    produced = produce(kinesis, stream, 60)
    produced += produce_aggregated(kinesis, stream, aggregates=12, per_aggregate=25, start_index=60)
    produced += produce(kinesis, stream, 40, start_index=360)  # plain after aggregated, in the same shards
    bad = put_raw(kinesis, stream, "k0", MALFORMED_AGGREGATE)
    dag = load_dags(work / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]
    yield RawBatch(entry, store, produced, bad, run_dag(dag).tasks)
    kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


def test_kpl_aggregates_and_plain_records_land_once_per_user_record(raw_batch: RawBatch) -> None:
    assert raw_batch.tasks == SUCCESS
    produced = raw_batch.produced
    table = read_output(raw_batch.entry["output"])
    result = check_exactly_once(produced, table)
    assert result.ok and result.rows == 400, result
    keyed = dict(zip(zip(table["sequence_number"].to_pylist(), table["sub_sequence_number"].to_pylist(), strict=True),
                     table["partition_key"].to_pylist(), strict=True))  # fmt: skip
    assert all(keyed[(p.sequence_number, p.sub_sequence_number)] == p.partition_key for p in produced)  # the user record's key
    assert max(table["sub_sequence_number"].to_pylist()) == 24


def test_a_malformed_aggregate_is_quarantined_and_counted_not_lost(raw_batch: RawBatch) -> None:
    """Beside good aggregates and plain records, every one of which lands."""
    assert raw_batch.tasks == SUCCESS
    assert check_exactly_once(raw_batch.produced, read_output(raw_batch.entry["output"])).ok
    quarantined = read_output(raw_batch.entry["output"], quarantine=True)
    assert quarantined["sequence_number"].to_pylist() == [raw_batch.bad.sequence_number]
    assert quarantined["data"].to_pylist() == [MALFORMED_AGGREGATE]  # kept whole, untouched
    assert "malformed KPL aggregate" in quarantined["decode_error"].to_pylist()[0]
    result = raw_batch.store.get_batch(raw_batch.entry["name"], 1).result
    assert result is not None and (result.records, result.bad_records) == (len(raw_batch.produced), 1)


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
    broken = put_raw(kinesis, entry["stream"], "k0", MALFORMED_AGGREGATE).sequence_number  # quarantined before any JSON is read
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
    assert kept.pop(broken) == (MALFORMED_AGGREGATE, "malformed KPL aggregate: its MD5 digest does not match its contents")  # kept
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
