"""Verify reads the batch's files before anything is committed: per shard, the rows, their keys once each, and the row digest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kinesis_replay.adapters import layout
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import VerificationError
from kinesis_replay.core.records import DIGEST_HASH, digest_hash, format_digest, row_digest
from kinesis_replay.core.state import ReplayResult, ShardResult
from kinesis_replay.steps.verify import check_files

Row = tuple[str, str, int, str, bytes]  # shard, sequence number, sub-sequence number, partition key, data


def pipeline(root: Path) -> PipelineConfig:
    entry = {"name": "orders", "stream": "orders", "output": str(root), "schedule": None, "initial_position": "TRIM_HORIZON",
             "state_table": "t", "spark": {}}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def write(root: Path, rows: list[Row]) -> None:
    folder = Path(layout.data_path(str(root), 1, "a"))
    folder.mkdir(parents=True, exist_ok=True)
    columns = ("shard_id", "sequence_number", "sub_sequence_number", "partition_key", "data")
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
    pq.write_table(table.set_column(2, "sub_sequence_number", table.column(2).cast(pa.int64())), folder / "part-0.parquet")


def result(rows: list[Row], hash_name: str = DIGEST_HASH) -> ReplayResult:
    shards = []
    for shard in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == shard]
        digest = format_digest(sum(row_digest([r[0], r[1], str(r[2]), r[3]], r[4], hash_name) for r in mine), hash_name)
        seqs = [int(r[1]) for r in mine]
        shards.append(ShardResult(shard, len(mine), sum(len(r[4]) for r in mine), min(seqs), max(seqs), "x", digest=digest))
    return ReplayResult("orders", 1, tuple(shards), attempt="a")


ROWS: list[Row] = [("s0", "10", 0, "k", b"a"), ("s0", "11", 0, "k", b"b"), ("s0", "11", 1, "k", b"c"), ("s1", "20", 0, "k", b"d")]


def test_files_that_hold_the_manifests_rows_pass(tmp_path: Path) -> None:
    write(tmp_path, ROWS)
    check_files(pipeline(tmp_path), 1, result(ROWS))


def test_a_row_repeated_in_place_of_another_is_found_by_its_key(tmp_path: Path) -> None:
    write(tmp_path, [*ROWS[:2], ROWS[1], ROWS[3]])  # the count per shard still matches
    with pytest.raises(VerificationError, match=r"batch 1: the batch's files hold a \(sequence number, sub-sequence number\) more"):
        check_files(pipeline(tmp_path), 1, result(ROWS))


@pytest.mark.parametrize("hash_name", ["xxh3", "md5"])
def test_a_changed_payload_is_found_by_the_row_digest(tmp_path: Path, hash_name: str) -> None:
    write(tmp_path, [*ROWS[:3], ("s1", "20", 0, "k", b"changed")])
    changed = r"batch 1, shard s1: the row digest of the files is (xxh3:)?[0-9a-f]{16}, the manifest says"
    with pytest.raises(VerificationError, match=changed):
        check_files(pipeline(tmp_path), 1, result(ROWS, hash_name))


def test_a_manifest_of_a_release_before_the_hash_changed_verifies_with_md5(tmp_path: Path) -> None:
    """Results written before 2026-11-27 hold md5's first 8 bytes as 16 hex digits alone; verify reads that as md5."""
    write(tmp_path, ROWS)
    old = result(ROWS, "md5")
    assert all(s.digest and len(s.digest) == 16 and digest_hash(s.digest) == "md5" for s in old.shards)
    check_files(pipeline(tmp_path), 1, old)
    assert all(s.digest and digest_hash(s.digest) == "xxh3" for s in result(ROWS).shards)


def test_an_md5_row_digest_is_the_one_earlier_releases_wrote() -> None:
    # md5 of "s0\n10\n0\nk\n" + b"a", its first 8 bytes: the term the Spark job and the writer computed before XXH3.
    import hashlib

    assert row_digest(["s0", "10", "0", "k"], b"a", "md5") == int.from_bytes(hashlib.md5(b"s0\n10\n0\nk\na").digest()[:8], "big")
    assert format_digest(2**64 + 5, "md5") == "0000000000000005" and format_digest(5) == "xxh3:0000000000000005"


def test_a_digest_of_an_unknown_hash_or_of_two_hashes_in_one_manifest_is_refused_naming_the_shard(tmp_path: Path) -> None:
    write(tmp_path, ROWS)
    made = result(ROWS)
    unknown = replace(made, shards=(replace(made.shards[0], digest="sha1:0123456789abcdef"), *made.shards[1:]))
    with pytest.raises(VerificationError, match=r"batch 1, shard s0: row digest 'sha1:0123456789abcdef' names the hash 'sha1', which"):
        check_files(pipeline(tmp_path), 1, unknown)
    mixed = replace(made, shards=(result(ROWS, "md5").shards[0], *made.shards[1:]))
    with pytest.raises(VerificationError, match=r"batch 1: the manifest's row digests name more than one hash \(md5, xxh3\)"):
        check_files(pipeline(tmp_path), 1, mixed)
    check_files(pipeline(tmp_path), 1, made)  # the files themselves are the manifest's


def test_a_manifest_without_an_attempt_is_refused_for_a_table_output(tmp_path: Path) -> None:
    write(tmp_path, ROWS)
    old = ReplayResult("orders", 1, result(ROWS).shards)
    with pytest.raises(VerificationError, match="names no attempt, so it was written by a replay job of another release"):
        check_files(pipeline(tmp_path), 1, old)


def test_an_attempt_whose_files_are_gone_is_named_not_counted_as_empty(tmp_path: Path) -> None:
    """A run that commits a batch removes the attempts it did not commit; a concurrent run's verify then finds its own
    attempt's folder gone, and says so, instead of reporting the shards' rows as none."""
    gone = r"batch 1: the result manifest names attempt a, whose files are gone from .*attempt=a\. A run"
    with pytest.raises(VerificationError, match=gone):
        check_files(pipeline(tmp_path), 1, result(ROWS))
