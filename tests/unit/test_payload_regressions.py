"""Every payload the tasks' decoder once decoded otherwise than Spark's from_json decodes as from_json does (the values
recorded in fakes/payload_cases.py, which the side-by-side test holds to Spark), and the decoder's version changes
whenever what it decodes does."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest

from fakes.payload_cases import DECODABLE, REGRESSIONS, SCHEMA, UNDECODABLE, VALUES, Regression, generated_payloads
from kinesis_replay.core.ddl import parse_ddl_schema
from kinesis_replay.core.payloads import DECODER_VERSION, decode_json

# What the decoder makes of the named cases and of the first generated payloads, digested (values and decisions, not
# the reasons' words), by DECODER_VERSION. A change of the digest is a change of decoding: bump DECODER_VERSION (a
# batch records it) and record the new digest under it.
DECODED_DIGESTS = {"json-tasks/2": "3cebe246d0d0d5cef792ca025d73e231eb0e1f81fdf8f044081d107c55e9a655"}
DIGESTED_GENERATED = 1000


def _nan_free(value: Any) -> Any:
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


@pytest.mark.parametrize("case", REGRESSIONS, ids=[case.name for case in REGRESSIONS])
def test_a_payload_that_once_differed_decodes_as_spark_from_json_does(case: Regression) -> None:
    values, reason = decode_json(parse_ddl_schema(SCHEMA), case.payload)
    if case.expected is None:
        assert values is None and reason is not None
    else:
        assert reason is None
        assert values is not None
        assert {k: _nan_free(v) for k, v in values.items() if v is not None} == case.expected


def test_the_decoder_version_changes_whenever_what_it_decodes_does() -> None:
    schema = parse_ddl_schema(SCHEMA)
    payloads = [p for p, _ in UNDECODABLE] + DECODABLE + VALUES + [case.payload for case in REGRESSIONS]
    payloads += generated_payloads(DIGESTED_GENERATED)
    digest = hashlib.sha256()
    for payload in payloads:
        values, reason = decode_json(schema, payload)
        shown = "quarantined" if reason is not None else repr(sorted((k, repr(v)) for k, v in (values or {}).items()))
        digest.update(shown.encode("utf-8", "surrogatepass") + b"\n")
    assert DECODED_DIGESTS.get(DECODER_VERSION) == digest.hexdigest(), (
        f"the decoder decodes {DECODER_VERSION}'s payloads otherwise ({digest.hexdigest()}): bump DECODER_VERSION"
    )
