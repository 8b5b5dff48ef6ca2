"""The local stack's moto server (tests/stack/moto_keepalive.py): a Query of a sort-key prefix reads that prefix only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import moto.dynamodb.models as dynamodb_models
import pytest
from moto import mock_aws

from stack import moto_keepalive  # noqa: F401  (fixes moto as the stack's server runs it)

TABLE = "kr-state"
# The item kinds of a pipeline's partition in the state table, in sort-key order, and one whose key only starts alike.
SORT_KEYS = ("batch#000000000001", "batch#000000000002", "head", "progress#regular#0000", "shard#1", "shard#2", "shard#3", "shardz")


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        )  # fmt: skip
        for pk in ("pipeline#a", "pipeline#b"):
            for sk in SORT_KEYS:
                client.put_item(TableName=TABLE, Item={"pk": {"S": pk}, "sk": {"S": sk}, "n": {"N": str(len(sk))}})
        yield client


def shard_keys(client: Any, **extra: Any) -> list[str]:
    """Every page of a Query of pipeline a's shard# items, one item a page."""
    kwargs: dict[str, Any] = {
        "TableName": TABLE, "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)", "Limit": 1,
        "ExpressionAttributeValues": {":pk": {"S": "pipeline#a"}, ":prefix": {"S": "shard#"}}, **extra,
    }  # fmt: skip
    keys = []
    while True:
        page = client.query(**kwargs)
        keys += [item["sk"]["S"] for item in page["Items"]]
        if "LastEvaluatedKey" not in page:
            return keys
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def test_a_prefix_query_never_reads_the_whole_table_and_finds_the_same_items(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same items, in the same order; only a page that ends the prefix may come without moto's LastEvaluatedKey
    (moto gives one when any item of the partition follows, DynamoDB when it stopped at the Limit)."""

    def whole_table(_self: Any) -> list[Any]:
        raise AssertionError("the query read every item of the table")

    monkeypatch.setattr(dynamodb_models.Table, "all_items", whole_table)
    as_the_store_asks = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="#pk = :pk AND begins_with(#sk, :prefix)", ConsistentRead=True,
        ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
        ExpressionAttributeValues={":pk": {"S": "pipeline#a"}, ":prefix": {"S": "shard#"}},
    )  # fmt: skip
    assert [item["sk"]["S"] for item in as_the_store_asks["Items"]] == ["shard#1", "shard#2", "shard#3"]
    assert shard_keys(dynamodb) == ["shard#1", "shard#2", "shard#3"]
    assert shard_keys(dynamodb, ScanIndexForward=False) == ["shard#3", "shard#2", "shard#1"]
    projected = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)", ProjectionExpression="sk",
        ExpressionAttributeValues={":pk": {"S": "pipeline#b"}, ":prefix": {"S": "progress#"}},
    )  # fmt: skip
    assert projected["Items"] == [{"sk": {"S": "progress#regular#0000"}}]
    nothing = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
        ExpressionAttributeValues={":pk": {"S": "pipeline#c"}, ":prefix": {"S": "shard#"}},
    )  # fmt: skip
    assert nothing["Items"] == []
    (table,) = [t for backend in dynamodb_models.dynamodb_backends.values() for b in backend.values() for t in b.tables.values()]
    assert "all_items" not in vars(table)  # the candidates were the query's alone


def test_other_queries_are_moto_s_own(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    whole_table_reads: list[int] = []
    own = dynamodb_models.Table.all_items

    def counted(self: Any) -> list[Any]:
        whole_table_reads.append(1)
        return own(self)

    monkeypatch.setattr(dynamodb_models.Table, "all_items", counted)
    between = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk AND sk BETWEEN :a AND :b",
        ExpressionAttributeValues={":pk": {"S": "pipeline#a"}, ":a": {"S": "head"}, ":b": {"S": "shard#2"}},
    )  # fmt: skip
    assert [item["sk"]["S"] for item in between["Items"]] == ["head", "progress#regular#0000", "shard#1", "shard#2"]
    whole = dynamodb.query(TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "pipeline#b"}})
    assert whole["Count"] == 8
    assert len(whole_table_reads) == 2  # each answered by moto's own query, from every item of the table
