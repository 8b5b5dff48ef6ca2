"""Integration fixtures: a pipeline of its own per test, on the session's local stack."""

from __future__ import annotations

import uuid
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
