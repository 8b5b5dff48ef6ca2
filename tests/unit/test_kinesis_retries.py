"""One retry policy per error: kinesis.call waits out and counts throttling, botocore retries transport faults.

A real botocore client against a scripted HTTP endpoint on localhost, so that every retry is a request the
endpoint sees: a throttle retried by both layers would show as more requests than call() counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import botocore
import pytest
from botocore.config import Config

import kinesis_replay
from kinesis_replay.adapters import kinesis_client as kinesis
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import AccessRefusedError, RangeReadError
from stack.scripted_kinesis import OK, SERVER_ERROR, THROTTLE, ScriptedKinesis

FAST = ReadConfig(throttle_base_seconds=0.001, throttle_max_seconds=0.001, max_throttle_retries=3)


@pytest.fixture
def endpoint() -> Iterator[Any]:
    made: list[ScriptedKinesis] = []

    def make(replies: list[tuple[int, dict[str, Any]]]) -> ScriptedKinesis:
        made.append(ScriptedKinesis(replies))
        return made[-1]

    yield make
    for server in made:
        server.stop()


def client(url: str, policy: bool = True) -> Any:
    made = boto3.client(
        "kinesis",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=kinesis.CLIENT_CONFIG,
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


def test_a_pipeline_planning_more_shards_at_once_gets_a_connection_for_each_thread() -> None:
    wide = kinesis.pooled(kinesis.CLIENT_CONFIG, 300)
    assert wide.max_pool_connections == 300
    assert wide.retries == kinesis.CLIENT_CONFIG.retries and wide.read_timeout == kinesis.CLIENT_CONFIG.read_timeout
    assert kinesis.pooled(kinesis.CLIENT_CONFIG, 4).max_pool_connections == kinesis.POOL_CONNECTIONS  # never below the default


def test_every_call_says_it_is_kinesis_replay_and_keeps_the_airflow_hooks_user_agent_extra(endpoint: Any) -> None:
    """A fixed User-Agent (botocore's default one is rebuilt from its parts twice a call): the hook's extra still follows it."""
    served = endpoint([OK])
    hooked = kinesis.CLIENT_CONFIG.merge(Config(user_agent_extra="Airflow/3.3.0 AmPP/9.0 Caller/kinesis_replay_tasks"))
    made = boto3.client("kinesis", endpoint_url=served.url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x", config=hooked)  # fmt: skip
    kinesis.call(kinesis.leave_throttling_to_call(made).list_shards, "ListShards", FAST, StreamName="s")
    [sent] = served.user_agents
    assert sent.startswith(f"kinesis-replay/{kinesis_replay.__version__} Python/") and f"Botocore/{botocore.__version__}" in sent
    assert sent.endswith(" Airflow/3.3.0 AmPP/9.0 Caller/kinesis_replay_tasks")


def test_a_refused_caller_fails_at_once_naming_what_it_did_and_the_iam_policy(endpoint: Any) -> None:
    """Once a raw ClientError: not a kinesis-replay error, so the task waited out its retries for the same answer."""
    denied = (400, {"__type": "AccessDeniedException", "message": "User: arn:aws:sts::1:assumed-role/r is not authorized"})
    served = endpoint([denied])
    refused = r"stream s, shard 0: ListShards: AWS refused the call \(AccessDeniedException: User"
    with pytest.raises(AccessRefusedError, match=refused) as caught:
        kinesis.call(client(served.url).list_shards, "stream s, shard 0: ListShards", FAST, kinesis.ReadStats(), StreamName="s")
    assert served.requests == 1 and not caught.value.retryable
    assert 'docs/deployment.md, "The IAM policy"' in str(caught.value)


def test_an_error_the_caller_handles_itself_stays_botocore_s(endpoint: Any) -> None:
    """InvalidArgumentException (a trimmed checkpoint) and ExpiredIteratorException are answered by call()'s callers."""
    from botocore.exceptions import ClientError

    served = endpoint([(400, {"__type": "InvalidArgumentException", "message": "StartingSequenceNumber is not valid"})])
    with pytest.raises(ClientError, match="InvalidArgumentException"):
        kinesis.call(client(served.url).list_shards, "ListShards", FAST, kinesis.ReadStats(), StreamName="s")


def test_a_kms_throttle_of_an_encrypted_stream_is_waited_out_like_a_shard_s(endpoint: Any) -> None:
    """Once, the first KMSThrottlingException failed the whole batch, to be read again from its start."""
    served = endpoint([(400, {"__type": "KMSThrottlingException", "message": "Rate exceeded"}), OK])
    stats = kinesis.ReadStats()
    assert kinesis.call(client(served.url).list_shards, "ListShards", FAST, stats, StreamName="s")["Shards"] == []
    assert (served.requests, stats.throttled) == (2, 1)
