"""Integration fixtures: a pipeline of its own per test, on the session's local stack."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack import local_stack
from stack.harness import pipeline_entry


@pytest.fixture
def kinesis(stack: object) -> Any:
    from stack.producer import kinesis_client

    return kinesis_client()


@pytest.fixture
def dynamodb(stack: object) -> Any:
    return boto3.client("dynamodb")


@pytest.fixture
def state_table(dynamodb: Any) -> str:
    name = f"kr-{uuid.uuid4().hex[:8]}"
    DynamoDBStateStore(dynamodb, name).ensure_table()
    return name


@pytest.fixture
def store(dynamodb: Any, state_table: str) -> DynamoDBStateStore:
    return DynamoDBStateStore(dynamodb, state_table)


@pytest.fixture
def entry(tmp_path: Path, stream: str, state_table: str) -> dict[str, Any]:
    """A pipelines-config entry reading this test's stream into this test's output."""
    return pipeline_entry(f"p{uuid.uuid4().hex[:8]}", stream, tmp_path / "out", state_table)


@pytest.fixture
def bucket(stack: object) -> str:
    """A bucket of this test's own on the moto server, made with the test's own S3 client."""
    name = f"lake-{uuid.uuid4().hex[:8]}"
    local_stack.s3_client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def openlineage_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The OpenLineage provider on, as its plugin turns it on when a transport is configured: its listener registered
    with the task runner's listener manager, emitting through its file transport (docs/lineage.md). Emission runs in a
    thread of this process (``execute_in_thread``) rather than a fork of the pytest worker. Gives a reader of the
    events emitted since."""
    from airflow.providers.openlineage import conf
    from airflow.providers.openlineage.plugins import listener as ol_listener
    from airflow.sdk.listener import get_listener_manager

    events = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": str(events), "append": True}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "kinesis-replay-tests")

    def clear() -> None:
        for cached in vars(conf).values():
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()

    clear()
    assert not conf.is_disabled()
    listener = ol_listener.get_openlineage_listener()
    manager = get_listener_manager()
    manager.add_listener(listener)

    def read() -> list[dict[str, Any]]:
        return [json.loads(line) for line in events.read_text().splitlines() if line.strip()] if events.exists() else []

    try:
        yield read
    finally:
        manager.pm.unregister(listener)
        monkeypatch.undo()
        clear()


@pytest.fixture(scope="session")
def efo_endpoint(stack: local_stack.Stack) -> Iterator[Any]:
    """The project's enhanced fan-out endpoint (tests/stack/efo_server.py) in front of the session's kinesalite, over HTTP/2."""
    from stack.efo_server import EfoServer

    server = EfoServer(stack.kinesis_url).start()
    yield server
    server.stop()


@pytest.fixture
def efo(efo_endpoint: Any) -> Any:
    """The endpoint with this test's rules: Kinesis's, unless the test sets others (``efo.reset(Rules(...))``)."""
    efo_endpoint.reset()
    return efo_endpoint
