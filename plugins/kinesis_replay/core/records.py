"""GetRecords pages into rows: KPL aggregates deaggregated whole (aws-kinesis-agg), or kept as one bad row with the reason."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kinesis_replay.core.errors import VerificationError

# Every row's columns, in order, with their Spark SQL types: the one definition of the output's rows. The Spark
# job's schemas (kinesis_source.SCHEMA_DDL, files.arrow_row_schema) and the names a payload schema may not reuse
# (config.RECORD_COLUMNS) derive from it.
ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("stream_name", "STRING"),
    ("shard_id", "STRING"),
    ("sequence_number", "STRING"),  # exact: up to 129 decimal digits, more than any numeric type holds
    ("sub_sequence_number", "BIGINT"),
    ("partition_key", "STRING"),
    ("approximate_arrival_timestamp", "TIMESTAMP"),
    ("data", "BINARY"),
    ("decode_error", "STRING"),  # null, or why the record is quarantined
)
# The column a reader of the output gets from each batch's directory name (batch_id=<id>).
PARTITION_COLUMN = "batch_id"

# The row digest, which each replay task computes as it writes and verify recomputes from the files with pyarrow:
# a 64-bit hash of the row's identity and payload (the text columns joined by a newline, a null left out, then a
# newline and the data), summed over a shard's rows modulo 2**64, and written as the hash's name, a colon and 16
# hex digits ("xxh3:00ab..."). The hash is XXH3's 64 bits; results written before 2026-11-27 used md5's first 8 bytes
# and wrote the 16 digits alone. A digest is always checked with the hash it names (``digest_hash``), so a batch
# replayed by an older release verifies and compares as it did.
DIGEST_TEXT_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number", "partition_key")
DIGEST_SEPARATOR = "\n"
DIGEST_HASH = "xxh3"
DIGEST_HASHES = ("xxh3", "md5")


def row_hash(hash_name: str = DIGEST_HASH) -> Any:
    """The function from a joined row's bytes to its 64-bit digest term, for the hash of that name."""
    if hash_name == "xxh3":
        import xxhash

        return xxhash.xxh3_64_intdigest
    if hash_name == "md5":
        import hashlib

        md5 = hashlib.md5
        return lambda joined: int.from_bytes(md5(joined).digest()[:8], "big")
    raise ValueError(f"row digest hash {hash_name!r}: not one of {', '.join(DIGEST_HASHES)}")


def row_digest(text_parts: list[str | None], data: bytes | None, hash_name: str = DIGEST_HASH) -> int:
    """One row's digest term (see DIGEST_TEXT_COLUMNS)."""
    joined = DIGEST_SEPARATOR.join(p for p in text_parts if p is not None) + DIGEST_SEPARATOR
    return int(row_hash(hash_name)(joined.encode() + (data or b"")))


def format_digest(total: int, hash_name: str = DIGEST_HASH) -> str:
    digits = f"{total % 2**64:016x}"
    return digits if hash_name == "md5" else f"{hash_name}:{digits}"


def digest_hash(digest: str, where: str = "a result manifest") -> str:
    """The hash a written digest names: md5 for the 16 digits alone (results written before 2026-11-27)."""
    name, colon, _ = digest.rpartition(":")
    if not colon:
        return "md5"
    if name not in DIGEST_HASHES:
        raise VerificationError(
            f"{where}: row digest {digest!r} names the hash {name!r}, which this release does not know (it knows "
            f"{', '.join(DIGEST_HASHES)}): was it written by a newer release? A retry with this one cannot help"
        )
    return name


# The KPL's aggregated-record header (aws_kinesis_agg.MAGIC); checked here to skip the library for plain records.
KPL_MAGIC = b"\xf3\x89\x9a\xc2"


@dataclass
class Rows:
    """Column lists for one page: one entry per user record (a plain record is its own user record)."""

    sequence_number: list[str] = field(default_factory=list)
    sub_sequence_number: list[int] = field(default_factory=list)
    partition_key: list[str] = field(default_factory=list)
    approximate_arrival_timestamp: list[datetime] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    decode_error: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sequence_number)

    def append(self, record: dict[str, Any], sub: int, key: str, data: bytes, error: str | None) -> None:
        self.sequence_number.append(record["SequenceNumber"])
        self.sub_sequence_number.append(sub)
        self.partition_key.append(key)
        self.approximate_arrival_timestamp.append(record["ApproximateArrivalTimestamp"])
        self.data.append(data)
        self.decode_error.append(error)


def to_rows(page: list[dict[str, Any]]) -> Rows:
    """Rows of a GetRecords page, user records of an aggregate in sub-sequence order."""
    payloads = [record["Data"] for record in page]
    if not any(p.startswith(KPL_MAGIC) for p in payloads):  # no aggregate: a row per record, a column at a time
        return Rows(
            [r["SequenceNumber"] for r in page], [0] * len(page), [r["PartitionKey"] for r in page],
            [r["ApproximateArrivalTimestamp"] for r in page], payloads, [None] * len(page),
        )  # fmt: skip
    rows = Rows()
    for record in page:
        data: bytes = record["Data"]
        if not data.startswith(KPL_MAGIC):
            rows.append(record, 0, record["PartitionKey"], data, None)
            continue
        users, error = deaggregate(record)
        if error is not None:
            # Kept whole, with its reason: a bad row, counted and quarantined, never silently dropped.
            rows.append(record, 0, record["PartitionKey"], data, error)
            continue
        for sub, (key, user_data) in enumerate(users):
            rows.append(record, sub, key, user_data, None)
    return rows


def deaggregate(record: dict[str, Any]) -> tuple[list[tuple[str, bytes]], str | None]:
    """An aggregated record's user records (partition key, data), or the reason it can't be trusted.

    aws-kinesis-agg's deaggregator hands back an aggregate whose digest or protobuf is bad as if it
    were a plain record, and on a bad user record prints to stderr and stops part way. Both would
    lose user records without a trace, so the result here is all of the aggregate's user records,
    or none of them and an error.
    """
    # The deaggregator must come first: importing it puts its folder on sys.path, which its generated
    # messages_pb2 needs for a bare "import config_pb2".
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records  # isort: skip
    from aws_kinesis_agg import messages_pb2  # isort: skip
    from google.protobuf.message import DecodeError

    data: bytes = record["Data"]
    body = data[len(KPL_MAGIC) : -16]
    try:
        declared = len(messages_pb2.AggregatedRecord.FromString(body).records)
    except DecodeError as exc:
        return [], f"malformed KPL aggregate: undecodable protobuf ({exc})"
    try:
        users = [u["kinesis"] for u in iter_deaggregate_records([record], data_format="Boto3")]
    except Exception as exc:  # its own error path can fail too (an explicit hash key index out of range: IndexError)
        return [], f"malformed KPL aggregate: the deaggregator failed ({exc!r})"
    if not all(u.get("aggregated") for u in users):
        return [], "malformed KPL aggregate: its MD5 digest does not match its contents"
    if len(users) != declared or declared == 0:
        return [], f"malformed KPL aggregate: {len(users)} of its {declared} user records could be read"
    if not all(isinstance(u["partitionKey"], str) for u in users):  # its table of keys held bytes that are not UTF-8
        return [], "malformed KPL aggregate: a user record's partition key is not UTF-8"
    return [(u["partitionKey"], base64.b64decode(u["data"])) for u in users], None
