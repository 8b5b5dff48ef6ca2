"""Pages of rows as the range reader hands them to the replay task's writer: one shard's records, in arrival order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from kinesis_replay.adapters.files import arrow_row_schema

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def page(shard: str, first: int, count: int, bad: set[int] = frozenset(), start: datetime = T0) -> pa.RecordBatch:  # type: ignore[assignment]
    """``count`` records of a shard, one a millisecond from ``start``; those at the offsets in ``bad`` undecodable."""
    numbers = range(first, first + count)
    columns = {
        "stream_name": ["orders"] * count,
        "shard_id": [shard] * count,
        "sequence_number": [str(49_000_000_000_000_000_000 + n) for n in numbers],
        "sub_sequence_number": [n % 3 for n in numbers],
        "partition_key": [f"k\u00e9{n % 7}" for n in numbers],
        "approximate_arrival_timestamp": [start + timedelta(milliseconds=n - first) for n in numbers],
        "data": [b"" if n % 11 == 0 else f'{{"n": {n}}}'.encode() for n in numbers],
        "decode_error": ["malformed KPL aggregate: undecodable protobuf" if n - first in bad else None for n in numbers],
    }
    return pa.RecordBatch.from_pydict(columns, schema=arrow_row_schema())
