"""A smoke test against a third-party Kinesis: npm's kinesis-local 0.6.2 (kinesis-mock) serves SubscribeToShard over
HTTP/2 on TLS (ALPN), as Kinesis does. Our transport and botocore's parser read its event stream, and a range read over
enhanced fan-out equals the same range read by GetRecords: the wire format is Kinesis's, not only our test endpoint's.

kinesis-mock's own gaps (an AT_SEQUENCE_NUMBER it cannot find starts from the shard's first record, no ChildShards,
no 2 MB/s pacing) are not exercised: the range's start is a record it holds, on an open shard. One gap is bridged:
kinesis-mock sends no ``initial-response`` message before the events, which Kinesis does (the first message of an
RPC-protocol event stream, in Smithy's spec) and botocore requires ("First event was not of type initial-response"),
so this test's transport puts one in front of kinesis-mock's stream. Everything after it is kinesis-mock's, byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kinesis_replay.adapters.efo_reader import iterate_range_efo, resolve_consumer
from kinesis_replay.adapters.efo_transport import OPERATION_EVENT, send_over_http2
from kinesis_replay.adapters.kinesis_client import ReadStats
from kinesis_replay.adapters.range_reader import iterate_range
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.ranges import SequenceRange
from stack import event_stream, local_stack
from stack.producer import produce, produce_aggregated

KINESIS_LOCAL = local_stack.HERE / "node_modules" / "kinesis-local"


@pytest.fixture(scope="module")
def kinesis_mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kinesis-local on a free TLS port (its self-signed certificate), for this module."""
    if not (KINESIS_LOCAL / "main.js").exists():
        raise RuntimeError(f"kinesis-local is not installed: run `npm ci --prefix {local_stack.HERE}` (make does)")
    tls, plain, log = local_stack.free_port(), local_stack.free_port(), tmp_path_factory.mktemp("kinesis-mock") / "kinesis-mock.log"
    env = {**os.environ, "KINESIS_MOCK_TLS_PORT": str(tls), "KINESIS_MOCK_PLAIN_PORT": str(plain), "LOG_LEVEL": "WARN",
           "KINESIS_MOCK_CERT_PATH": str(KINESIS_LOCAL / "server.json"), "REGISTER_STREAM_CONSUMER_DURATION": "300ms",
           "CREATE_STREAM_DURATION": "0ms"}  # fmt: skip
    with Path(log).open("wb") as out:
        proc = subprocess.Popen(["node", str(KINESIS_LOCAL / "main.js")], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        local_stack._wait_for_port(tls, "kinesis-local", proc, Path(log))
        yield f"https://127.0.0.1:{tls}"
    finally:
        proc.kill()  # it keeps running on SIGTERM; it holds nothing worth a clean stop
        proc.wait(10)


def _client(url: str) -> Any:
    # kinesis-mock accepts any credentials; these are not secrets. Its TLS certificate is self-signed.
    key = local_stack.LOCAL_KEY
    return boto3.client(
        "kinesis", endpoint_url=url, region_name="us-east-1", verify=False, aws_access_key_id=key, aws_secret_access_key=key
    )


def _with_initial_response(request: Any, **_: Any) -> Any:
    """Our transport (its certificate check off: kinesis-mock's is self-signed), with the initial-response kinesis-mock omits."""
    response = send_over_http2(request, verify=False)
    if response.status_code == 200:
        body, events = response.raw, response.raw.stream

        def stream(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            yield event_stream.initial_response()
            yield from events(*args, **kwargs)

        body.stream = stream
    return response


def test_a_range_read_over_kinesis_mocks_subscribe_to_shard_equals_its_getrecords_read(kinesis_mock: str) -> None:
    client = _client(kinesis_mock)
    stream = f"mock-{uuid.uuid4().hex[:6]}"
    client.create_stream(StreamName=stream, ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    produced = (
        produce(client, stream, 30)
        + produce_aggregated(client, stream, 5, 3, start_index=100)
        + produce(client, stream, 20, start_index=200)
    )
    numbers = sorted({int(p.sequence_number) for p in produced})
    rng = SequenceRange(produced[0].shard_id, numbers[3], numbers[-4])  # from a middle record to one before the tip
    limits = ReadConfig(subscribe_interval_seconds=0.0)
    efo = _client(kinesis_mock)
    efo.meta.events.register(OPERATION_EVENT, _with_initial_response)
    consumer = resolve_consumer(efo, stream, "smoke", limits)  # registered, CREATING for 300 ms, then ACTIVE
    stats = ReadStats()
    over_efo: list[dict[str, Any]] = [r for page in iterate_range_efo(efo, stream, consumer, rng, limits, stats) for r in page]
    by_get_records = [r for page in iterate_range(client, stream, rng, limits, sleep=lambda s: None) for r in page]
    assert [r["SequenceNumber"] for r in over_efo] == [r["SequenceNumber"] for r in by_get_records]
    assert [(r["Data"], r["PartitionKey"], r["ApproximateArrivalTimestamp"]) for r in over_efo] == [
        (r["Data"], r["PartitionKey"], r["ApproximateArrivalTimestamp"]) for r in by_get_records
    ]
    assert len(over_efo) == len(numbers) - 6 and stats.subscriptions == 1
