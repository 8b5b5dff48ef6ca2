"""The record of how a batch was decoded: in every manifest this release writes, read back from older ones."""

from __future__ import annotations

from kinesis_replay.core.decoding import EARLIER, EARLIER_DECODER, RAW, Decoding
from kinesis_replay.core.payloads import DECODER_VERSION
from kinesis_replay.core.state import ReplayResult, ShardResult

SCHEMA = "user STRING, amount DOUBLE"


def result(decoding: Decoding = EARLIER) -> ReplayResult:
    shard = ShardResult("shardId-000000000000", records=3, bytes=30, first_sequence_number=1, last_sequence_number=3, checksum="7")
    return ReplayResult("p", 4, (shard,), 1.5, decoding=decoding)


def test_a_json_pipeline_is_decoded_by_this_release_s_decoder_and_a_raw_one_by_none() -> None:
    assert Decoding.of("json", SCHEMA) == Decoding("json", SCHEMA, DECODER_VERSION)
    assert Decoding.of("raw", None) == Decoding(RAW, None, RAW)


def test_the_fingerprint_changes_with_the_format_the_schema_and_the_decoder() -> None:
    base = Decoding("json", SCHEMA, DECODER_VERSION)
    others = [Decoding("raw", SCHEMA, DECODER_VERSION), Decoding("json", f"{SCHEMA}, n INT", DECODER_VERSION)]
    others.append(Decoding("json", SCHEMA, "another decoder"))
    assert len({base.fingerprint, *(o.fingerprint for o in others)}) == 4
    assert base.fingerprint == Decoding("json", SCHEMA, DECODER_VERSION).fingerprint and len(base.fingerprint) == 16


def test_a_manifest_carries_its_decoding_to_the_ledger_and_back() -> None:
    decoding = Decoding.of("json", SCHEMA)
    stored = result(decoding).to_dict()
    assert stored["decoding"] == {"format": "json", "schema": SCHEMA, "decoder": DECODER_VERSION, "fingerprint": decoding.fingerprint}
    assert ReplayResult.from_dict(stored).decoding == decoding


def test_a_manifest_of_release_0_1_0_reads_as_decoded_by_spark_s_from_json() -> None:
    stored = result().to_dict()
    assert "decoding" not in stored  # as 0.1.0 wrote it
    read = ReplayResult.from_dict(stored).decoding
    assert read == EARLIER and read.decoder == EARLIER_DECODER
    assert "from_json on Java 17" in read.describe() and "not recorded" in read.describe()
