"""How a batch's payloads were decoded: the payload settings and the decoder's version, recorded with every batch.

A batch is a record of what the stream held (its ranges, counts and raw digest) and of how it was decoded. The
replay job puts a ``Decoding`` into its ``ReplayResult``, so the ledger entry and the output's commit record of every
batch carry it; a later replay of the batch (a backfill, a restore) names both decodings when its values differ. A
manifest written before decodings were recorded (release 0.1.0: Spark's ``from_json`` on Java 17, in the JVM) has
none, and reads as ``EARLIER``: upgraded on read, never rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kinesis_replay.core.payloads import DECODER_VERSION

RAW = "raw"  # payloads kept as bytes: nothing is decoded, whatever the release
# Releases up to 0.1.0 decoded JSON payloads with Spark's from_json (Jackson) on Java 17, and recorded nothing.
EARLIER_DECODER = "spark-from_json/java17"


@dataclass(frozen=True)
class Decoding:
    """The payload settings (format and schema) a batch was decoded with, and the decoder that did it."""

    format: str
    schema: str | None
    decoder: str

    @classmethod
    def of(cls, payload_format: str, schema: str | None) -> Decoding:
        """How this release decodes payloads of the given settings."""
        return cls(payload_format, schema if payload_format != RAW else None, DECODER_VERSION if payload_format != RAW else RAW)

    @property
    def fingerprint(self) -> str:
        """16 hex digits that change with any of the three: two batches decoded alike have the same one."""
        text = json.dumps([self.format, self.schema, self.decoder], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        if self.format == RAW:
            return "raw payloads (not decoded)"
        if self == EARLIER:
            return "not recorded (a release up to 0.1.0, which decoded JSON with Spark's from_json on Java 17)"
        return f"{self.format} payloads, schema {self.schema!r}, decoder {self.decoder} ({self.fingerprint})"

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "schema": self.schema, "decoder": self.decoder, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Decoding:
        """A recorded decoding; a manifest written before they were recorded (None) reads as ``EARLIER``."""
        if data is None:
            return EARLIER
        return cls(str(data["format"]), None if data.get("schema") is None else str(data["schema"]), str(data["decoder"]))


# What a manifest of release 0.1.0 or earlier says of its decoding: nothing. Its format and schema were the
# pipeline's at the time, which no record keeps; the decoder was Spark's.
EARLIER = Decoding(format="unrecorded", schema=None, decoder=EARLIER_DECODER)
