"""One DynamoDB table's calls, as the state store makes them: each error named (an unreachable endpoint, a refused
caller, a missing table), paged queries, batched reads, transactions whose refusal is a lost race."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError

from kinesis_replay.adapters.dynamodb_items import STATE_TABLE_KEYS, S, pk
from kinesis_replay.core.airflow_names import dag_ids
from kinesis_replay.core.errors import (
    ACCESS_REFUSED_CODES,
    ConfigError,
    EndpointUnreachableError,
    StateConflictError,
    StateTableMissingError,
    access_refused,
)

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_dynamodb.client import DynamoDBClient


def missing_table(table: str, pipeline_name: str, what: str) -> StateTableMissingError:
    """The error for a call on a table that does not exist: only the regular DAG's plan step creates it (ensure_table)."""
    dag_id = dag_ids(pipeline_name)[0]
    return StateTableMissingError(
        f"pipeline {pipeline_name!r}: state table {table} does not exist ({what}). Only the plan step of {dag_id} "
        f"creates it: if the pipeline never ran, trigger {dag_id} first. If it ran before, the table was deleted or "
        f"state_table names another one: check state_table of pipeline {pipeline_name!r} in the pipelines config, then trigger "
        f"{dag_id}, whose plan creates the table and, if the output holds committed batches, says how to recover their state"
    )


class StateTable:
    """The state table's calls: what a DynamoDBStateStore's methods are made of."""

    GET_CHUNK = 100  # BatchGetItem reads at most 100 items a call

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self.client = client
        self.table = table

    def call(self, operation: str, pipeline_name: str, what: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, operation)(**kwargs)
        except (BotoConnectionError, ReadTimeoutError) as exc:
            raise EndpointUnreachableError(f"state table {self.table}: {what}: cannot reach DynamoDB: {exc}") from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                raise self.missing(pipeline_name, what) from exc
            if code in ACCESS_REFUSED_CODES:
                raise access_refused(f"state table {self.table}: {what}", code, exc.response["Error"].get("Message", "")) from exc
            raise  # the callers handle the codes they expect (a failed condition, a cancelled transaction)

    def missing(self, pipeline_name: str, what: str) -> StateTableMissingError:
        return missing_table(self.table, pipeline_name, what)

    def query(self, pipeline_name: str, prefix: str, key: str | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """The items under the pipeline's partition key (or ``key``, another of its keys) whose sort key starts with
        ``prefix``, page after page (``limit`` items a page)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":pk": S(key or pk(pipeline_name)), ":prefix": S(prefix)},
            "ConsistentRead": True,
            **({"Limit": limit} if limit else {}),
        }
        while True:
            page = self.call("query", pipeline_name, f"reading {prefix}* of pipeline {pipeline_name!r}", **kwargs)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, pipeline_name: str, sk: str, key: str | None = None) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.call(
            "get_item", pipeline_name, f"reading {sk} of pipeline {pipeline_name!r}",
            TableName=self.table, Key={"pk": S(key or pk(pipeline_name)), "sk": S(sk)}, ConsistentRead=True,
        ).get("Item")  # fmt: skip
        return item

    def transact(self, pipeline_name: str, what: str, items: list[dict[str, Any]]) -> None:
        try:
            self.call("transact_write_items", pipeline_name, what, TransactItems=items)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
                raise StateConflictError(f"{what}: another run changed the state first ({', '.join(reasons)})") from exc
            raise

    def ensure(self) -> None:
        """Create the table if it is missing (on-demand billing) and wait until it is active."""
        try:
            self._check_key_schema(self.client.describe_table(TableName=self.table)["Table"])
            return
        except (BotoConnectionError, ReadTimeoutError) as exc:
            raise EndpointUnreachableError(f"state table {self.table}: cannot reach DynamoDB: {exc}") from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ACCESS_REFUSED_CODES:
                raise access_refused(f"state table {self.table}: DescribeTable", code, exc.response["Error"].get("Message", "")) from exc
            if code != "ResourceNotFoundException":
                raise
        try:
            self.client.create_table(
                TableName=self.table,
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":  # created concurrently
                raise
        self.client.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})

    def _check_key_schema(self, table: Mapping[str, Any]) -> None:
        """An existing table must have kinesis-replay's keys: a typo may name another application's table."""
        keys = {k["AttributeName"]: k["KeyType"] for k in table.get("KeySchema", [])}
        types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
        found = {name: (kind, types.get(name)) for name, kind in keys.items()}
        if found != STATE_TABLE_KEYS:
            shown = ", ".join(f"{name} ({kind}, {t})" for name, (kind, t) in sorted(found.items())) or "none"
            raise ConfigError(
                f"state table {self.table} exists with the keys {shown}; kinesis-replay's state table has pk (HASH, S) and "
                "sk (RANGE, S). Is state_table the name of another application's table? Name a table of kinesis-replay's own "
                "(the plan step creates it)"
            )

    def get_items(
        self, pipeline_name: str, keys: list[dict[str, Any]], what: str, projection: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The items of these keys that exist, GET_CHUNK keys a call; keys left unread by a busy table are asked again, later."""
        found: list[dict[str, Any]] = []
        for i in range(0, len(keys), self.GET_CHUNK):
            request: dict[str, Any] = {self.table: {"Keys": keys[i : i + self.GET_CHUNK], "ConsistentRead": True, **(projection or {})}}
            for attempt in itertools.count():
                page = self.call("batch_get_item", pipeline_name, what, RequestItems=request)
                found += page["Responses"].get(self.table, [])
                request = page.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))
        return found
