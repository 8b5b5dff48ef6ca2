"""Deaggregation: every user record of a KPL aggregate, with its own key and sub-sequence number, or one bad row."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from aws_kinesis_agg.aggregator import RecordAggregator

from kinesis_replay.core.records import KPL_MAGIC, to_rows

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def record(seq: str, data: bytes, key: str = "k") -> dict[str, Any]:
    return {"SequenceNumber": seq, "PartitionKey": key, "Data": data, "ApproximateArrivalTimestamp": NOW}


def aggregate(n: int) -> bytes:
    aggregator = RecordAggregator()
    for i in range(n):
        aggregator.add_user_record(f"user-{i}", f"payload-{i}".encode())
    return aggregator.clear_and_get().get_contents()[2]  # type: ignore[no-any-return]


def with_digest(body: bytes) -> bytes:
    return KPL_MAGIC + body + hashlib.md5(body).digest()


def test_plain_records_pass_through_untouched() -> None:
    rows = to_rows([record("10", b"plain", "p")])
    assert (rows.sequence_number, rows.sub_sequence_number, rows.partition_key, rows.data, rows.decode_error) == (
        ["10"], [0], ["p"], [b"plain"], [None],
    )  # fmt: skip


def test_an_aggregate_becomes_its_user_records_in_order() -> None:
    rows = to_rows([record("10", aggregate(3), "outer"), record("11", b"plain")])
    assert rows.sequence_number == ["10", "10", "10", "11"]
    assert rows.sub_sequence_number == [0, 1, 2, 0]
    assert rows.partition_key == ["user-0", "user-1", "user-2", "k"]
    assert rows.data[:3] == [b"payload-0", b"payload-1", b"payload-2"] and rows.decode_error == [None] * 4


def test_an_aggregate_with_a_wrong_digest_is_one_bad_row_not_a_plain_record() -> None:
    corrupt = aggregate(3)[:-1] + b"\x00"
    rows = to_rows([record("10", corrupt)])
    assert rows.data == [corrupt] and rows.decode_error == ["malformed KPL aggregate: its MD5 digest does not match its contents"]


def test_an_aggregate_whose_user_record_points_past_the_key_table_is_bad_whole() -> None:
    # One partition key, two user records, the second naming key index 5: the library would yield the first and stop.
    body = b"\x0a\x02k0" + b"\x1a\x05\x08\x00\x1a\x01a" + b"\x1a\x05\x08\x05\x1a\x01b"
    rows = to_rows([record("10", with_digest(body))])
    assert len(rows) == 1 and rows.decode_error[0] == "malformed KPL aggregate: 1 of its 2 user records could be read"


def test_an_undecodable_aggregate_body_is_bad() -> None:
    rows = to_rows([record("10", with_digest(b"\xff\xff\xff\xff"))])
    assert len(rows) == 1 and (rows.decode_error[0] or "").startswith("malformed KPL aggregate: undecodable protobuf")


def test_an_aggregate_whose_explicit_hash_key_index_is_out_of_range_is_bad_not_a_crash() -> None:
    """aws-kinesis-agg's own error path indexes the table again and raises IndexError: once, every replay failed so."""
    # Key table ["k0"], hash key table ["1"], one user record naming hash key index 5.
    body = b"\x0a\x02k0" + b"\x12\x011" + b"\x1a\x07\x08\x00\x10\x05\x1a\x01a"
    rows = to_rows([record("10", with_digest(body))])
    assert len(rows) == 1 and (rows.decode_error[0] or "").startswith("malformed KPL aggregate: the deaggregator failed (IndexError")


def test_an_aggregate_whose_partition_key_is_not_utf8_is_bad() -> None:
    """The deaggregator hands such a key back as bytes, which the table's string column then refused: a crash of the task."""
    body = b"\x0a\x02\xff\xfe" + b"\x1a\x05\x08\x00\x1a\x01a"
    rows = to_rows([record("10", with_digest(body))])
    assert len(rows) == 1 and rows.decode_error == ["malformed KPL aggregate: a user record's partition key is not UTF-8"]
    assert rows.partition_key == ["k"]  # the outer record's, as for any bad aggregate
