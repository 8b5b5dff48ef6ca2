"""The contract suite's one fixture: every test runs against the in-memory store and DynamoDBStateStore on moto."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.memory_store import MemoryStateStore


@pytest.fixture(
    params=[pytest.param("memory"), pytest.param("dynamodb", marks=pytest.mark.integration)],
)
def store(request: pytest.FixtureRequest) -> Any:
    """A store with a fresh table of its own: in memory, or DynamoDB on the session's moto server (no Spark)."""
    if request.param == "memory":
        return MemoryStateStore(f"kr-{uuid.uuid4().hex[:8]}")
    import boto3

    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore

    request.getfixturevalue("stack")  # the moto server, started once per session
    table = DynamoDBStateStore(boto3.client("dynamodb"), f"kr-{uuid.uuid4().hex[:8]}")
    table.ensure_table()
    return table


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.integration)])
def missing_store(request: pytest.FixtureRequest) -> Any:
    """A store whose table does not exist yet."""
    table = f"kr-missing-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        return MemoryStateStore(table, exists=False)
    import boto3

    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore

    request.getfixturevalue("stack")
    return DynamoDBStateStore(boto3.client("dynamodb"), table)


@pytest.fixture(params=["memory", pytest.param("kinesalite", marks=pytest.mark.integration)])
def stream_client(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """(a Kinesis client, a fresh 4-shard stream of its own): in memory, or on the session's kinesalite."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        from fakes.memory_kinesis import MemoryKinesis

        client: Any = MemoryKinesis()
        client.create_stream(StreamName=name, ShardCount=4)
        yield client, name
        return
    from stack.producer import ensure_stream, kinesis_client

    request.getfixturevalue("stack")
    client = kinesis_client()
    ensure_stream(client, name, 4)
    yield client, name
    client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)
