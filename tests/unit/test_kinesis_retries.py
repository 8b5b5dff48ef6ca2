"""One retry policy per error: kinesis.call waits out and counts throttling, botocore retries transport faults.

A real botocore client against a scripted HTTP endpoint on localhost, so that every retry is a request the
endpoint sees: a throttle retried by both layers would show as more requests than call() counted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from kinesis_replay import kinesis
from kinesis_replay.config import ReadConfig
from kinesis_replay.errors import RangeReadError

THROTTLE = (400, {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded for shard"})
SERVER_ERROR = (500, {"__type": "InternalFailure", "message": "internal failure"})
OK = (200, {"Shards": []})
FAST = ReadConfig(throttle_base_seconds=0.001, throttle_max_seconds=0.001, max_throttle_retries=3)


class ScriptedKinesis:
    """Answers each request with the next scripted reply (the last one repeats) and counts the requests."""

    def __init__(self, replies: list[tuple[int, dict[str, Any]]]) -> None:
        self.replies, self.requests = replies, 0
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                status, body = script.replies[min(script.requests, len(script.replies) - 1)]
                script.requests += 1
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def endpoint() -> Iterator[Any]:
    made: list[ScriptedKinesis] = []

    def make(replies: list[tuple[int, dict[str, Any]]]) -> ScriptedKinesis:
        made.append(ScriptedKinesis(replies))
        return made[-1]

    yield make
    for server in made:
        server.server.shutdown()


def client(url: str, policy: bool = True) -> Any:
    made = boto3.client(
        "kinesis", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x", config=kinesis.CLIENT_CONFIG
    )
    return kinesis.leave_throttling_to_call(made) if policy else made


def test_each_throttle_is_one_request_retried_and_counted_by_call(endpoint: Any) -> None:
    served = endpoint([THROTTLE, THROTTLE, OK])
    stats = kinesis.ReadStats()
    answer = kinesis.call(client(served.url).list_shards, "ListShards", FAST, stats, StreamName="s")
    assert answer["Shards"] == []
    assert (served.requests, stats.throttled) == (3, 2)


def test_throttling_beyond_the_budget_fails_after_exactly_its_retries(endpoint: Any) -> None:
    served = endpoint([THROTTLE])
    stats = kinesis.ReadStats()
    with pytest.raises(RangeReadError, match="still throttled after 3 retries"):
        kinesis.call(client(served.url).list_shards, "ListShards", FAST, stats, StreamName="s")
    assert (served.requests, stats.throttled) == (4, 3)


def test_a_server_error_is_retried_by_botocore_without_counting_as_a_throttle(endpoint: Any) -> None:
    served = endpoint([SERVER_ERROR, OK])
    stats = kinesis.ReadStats()
    kinesis.call(client(served.url).list_shards, "ListShards", FAST, stats, StreamName="s")
    assert (served.requests, stats.throttled) == (2, 0)


def test_without_the_policy_botocore_would_retry_throttles_out_of_calls_sight(endpoint: Any) -> None:
    served = endpoint([THROTTLE, THROTTLE, OK])
    stats = kinesis.ReadStats()
    kinesis.call(client(served.url, policy=False).list_shards, "ListShards", FAST, stats, StreamName="s")
    assert (served.requests, stats.throttled) == (3, 0)  # the two throttles were botocore's, and call() saw none
