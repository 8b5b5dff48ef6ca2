"""The StateStore on DynamoDB through a boto3 client: one table, conditional writes, transactions."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as BotoConnectionError

from kinesis_replay.core.airflow_names import dag_ids
from kinesis_replay.core.errors import (
    ACCESS_REFUSED_CODES,
    ConfigError,
    EndpointUnreachableError,
    KinesisReplayError,
    ProgressNotStoredError,
    StateConflictError,
    StateCorruptError,
    StateTableMissingError,
    access_refused,
)
from kinesis_replay.core.ranges import format_sequence_number
from kinesis_replay.core.state import (
    Batch,
    BatchStatus,
    BatchSummary,
    Head,
    Progress,
    RunKind,
    ShardState,
)

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_dynamodb.client import DynamoDBClient

# Sequence numbers are stored as strings: DynamoDB numbers keep only 38 digits, sequence numbers have up to 129.
from kinesis_replay.adapters.dynamodb_items import (
    CORRUPT_HINT,
    PART_FIELDS,
    PROGRESS_SHARDS,
    STATE_TABLE_KEYS,
    TRANSACTION_ITEMS,
    N,
    S,
    batch_from_item,
    batch_item,
    batch_items,
    batch_sk,
    head_from_item,
    now_iso,
    part_sk,
    pk,
    progress_from_items,
    progress_items,
    progress_sk,
    shard_from_item,
    shard_item,
    split_field,
    summary_from_item,
)


def _checkpoint_is(checkpoint: int | None) -> tuple[str, dict[str, Any]]:
    """The condition that a shard item's checkpoint is still ``checkpoint`` (None: never committed)."""
    if checkpoint is None:
        return "attribute_not_exists(#checkpoint)", {}
    return "#checkpoint = :expected", {":expected": S(format_sequence_number(checkpoint))}


class DynamoDBStateStore:
    """Checkpoints and the batch ledger in one DynamoDB table keyed by (pk, sk).

    | pk                 | sk                   | holds                                                  |
    | pipeline#<name>    | head                 | next_batch_id, in_flight, version                      |
    | pipeline#<name>    | shard#<shard id>     | checkpoint, finished, parents, start_position, ...     |
    | pipeline#<name>    | batch#<000000000042> | status, ranges, stream, run_id, times, manifest, ...   |
    | pipeline#<name>    | progress#<kind>#<n>  | batch_id, records and done of PROGRESS_SHARDS shards   |

    Every expression names its attributes through ExpressionAttributeNames: several natural names
    (``status``, ``stream``) are DynamoDB reserved words, and moto does not say so.
    """

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self.client = client
        self.table = table

    # -- plumbing -----------------------------------------------------------------------------

    def _call(self, operation: str, pipeline_name: str, what: str, **kwargs: Any) -> Any:
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
        """The error for a call on a table that does not exist: only the regular DAG's plan step creates it (ensure_table)."""
        dag_id = dag_ids(pipeline_name)[0]
        return StateTableMissingError(
            f"pipeline {pipeline_name!r}: state table {self.table} does not exist ({what}). Only the plan step of {dag_id} "
            f"creates it: if the pipeline never ran, trigger {dag_id} first. If it ran before, the table was deleted or "
            f"state_table names another one: check state_table of pipeline {pipeline_name!r} in the pipelines config, then trigger "
            f"{dag_id}, whose plan creates the table and, if the output holds committed batches, says how to recover their state"
        )

    def _query(self, pipeline_name: str, prefix: str) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":pk": S(pk(pipeline_name)), ":prefix": S(prefix)},
            "ConsistentRead": True,
        }
        while True:
            page = self._call("query", pipeline_name, f"reading {prefix}* of pipeline {pipeline_name!r}", **kwargs)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _get(self, pipeline_name: str, sk: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._call(
            "get_item", pipeline_name, f"reading {sk} of pipeline {pipeline_name!r}",
            TableName=self.table, Key={"pk": S(pk(pipeline_name)), "sk": S(sk)}, ConsistentRead=True,
        ).get("Item")  # fmt: skip
        return item

    def _transact(self, pipeline_name: str, what: str, items: list[dict[str, Any]]) -> None:
        try:
            self._call("transact_write_items", pipeline_name, what, TransactItems=items)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
                raise StateConflictError(f"{what}: another run changed the state first ({', '.join(reasons)})") from exc
            raise

    # -- table --------------------------------------------------------------------------------

    def ensure_table(self) -> None:
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

    # -- head ---------------------------------------------------------------------------------

    def get_head(self, pipeline_name: str) -> Head:
        item = self._get(pipeline_name, "head")
        return Head() if item is None else head_from_item(item)

    # -- shards -------------------------------------------------------------------------------

    def get_shards(self, pipeline_name: str) -> dict[str, ShardState]:
        shards = (shard_from_item(i) for i in self._query(pipeline_name, "shard#"))
        return {s.shard_id: s for s in shards}

    def put_shard_if_absent(self, pipeline_name: str, shard: ShardState) -> ShardState:
        item = shard_item(pipeline_name, shard)
        try:
            self._call(
                "put_item", pipeline_name, f"storing shard {shard.shard_id} of pipeline {pipeline_name!r}",
                TableName=self.table, Item=item,
                ConditionExpression="attribute_not_exists(#pk)", ExpressionAttributeNames={"#pk": "pk"},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )  # fmt: skip
            return shard
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return shard_from_item(_old_item(exc) or self._get(pipeline_name, f"shard#{shard.shard_id}") or item)

    def put_shards_if_absent(self, pipeline_name: str, shards: Sequence[ShardState]) -> dict[str, ShardState]:
        """Store newly seen shards, TRANSACTION_ITEMS to a transaction, each conditioned on being absent.

        A first plan of a wide stream stores an item for every shard: ten transactions for 1,000 shards instead
        of 1,000 writes, with each item's condition kept. A transaction that a concurrent plan beat (one of its
        shards is already stored) changes nothing; its shards are then stored one by one, each coming back as
        stored, so the start positions a concurrent plan fixed first are the ones used.
        """
        stored: dict[str, ShardState] = {}
        for first in range(0, len(shards), TRANSACTION_ITEMS):
            chunk = shards[first : first + TRANSACTION_ITEMS]
            items = [
                {"Put": {"TableName": self.table, "Item": shard_item(pipeline_name, shard),
                         "ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"}}}
                for shard in chunk
            ]  # fmt: skip
            try:
                self._transact(
                    pipeline_name, f"storing shards {chunk[0].shard_id} to {chunk[-1].shard_id} of pipeline {pipeline_name!r}", items
                )
                stored.update((shard.shard_id, shard) for shard in chunk)
            except StateConflictError:
                stored.update((shard.shard_id, self.put_shard_if_absent(pipeline_name, shard)) for shard in chunk)
        return stored

    def advance_checkpoint(self, pipeline_name: str, shard_id: str, previous: int | None, new: int, batch_id: int, finished: bool) -> None:
        what = f"pipeline {pipeline_name!r}, shard {shard_id}: advancing the checkpoint from {previous} to {new} (batch {batch_id})"
        names = {"#checkpoint": "checkpoint", "#finished": "finished", "#last": "last_batch_id", "#updated": "updated_at"}
        condition, values = _checkpoint_is(previous)
        values.update(
            {
                ":new": S(format_sequence_number(new)),
                ":finished": {"BOOL": finished},
                ":batch": N(batch_id),
                ":now": S(now_iso()),
            }
        )
        try:
            self._call(
                "update_item", pipeline_name, what, TableName=self.table,
                Key={"pk": S(pk(pipeline_name)), "sk": S(f"shard#{shard_id}")},
                UpdateExpression="SET #checkpoint = :new, #finished = :finished, #last = :batch, #updated = :now",
                ConditionExpression=condition, ExpressionAttributeNames=names, ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            stored = _old_item(exc)
            checkpoint = stored.get("checkpoint", {}).get("S")
            last_batch = stored.get("last_batch_id", {}).get("N")
            if checkpoint == format_sequence_number(new) and last_batch == str(batch_id):
                return  # this batch already moved it: a resumed commit is idempotent
            raise StateConflictError(f"{what}: the stored checkpoint is {checkpoint} (batch {last_batch})") from exc

    def mark_finished(self, pipeline_name: str, shard_id: str, checkpoint: int | None) -> None:
        what = f"pipeline {pipeline_name!r}, shard {shard_id}: marking the drained shard finished at checkpoint {checkpoint}"
        condition, values = _checkpoint_is(checkpoint)
        values.update({":true": {"BOOL": True}, ":now": S(now_iso())})
        try:
            self._call(
                "update_item", pipeline_name, what, TableName=self.table,
                Key={"pk": S(pk(pipeline_name)), "sk": S(f"shard#{shard_id}")},
                UpdateExpression="SET #finished = :true, #updated = :now", ConditionExpression=condition,
                ExpressionAttributeNames={"#checkpoint": "checkpoint", "#finished": "finished", "#updated": "updated_at"},
                ExpressionAttributeValues=values,
            )  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise StateConflictError(f"{what}: the checkpoint moved meanwhile") from exc
            raise

    # -- batches ------------------------------------------------------------------------------

    def create_batch(self, batch: Batch, head: Head) -> Head:
        new_head = Head(next_batch_id=batch.batch_id + 1, in_flight=batch.batch_id, version=head.version + 1)
        key = {"pk": S(pk(batch.pipeline_name)), "sk": S("head")}
        if head.version == 0:
            head_op: dict[str, Any] = {"Put": {
                "TableName": self.table,
                "Item": {**key, "next_batch_id": N(new_head.next_batch_id), "in_flight": N(batch.batch_id),
                         "version": N(new_head.version), "updated_at": S(now_iso())},
                "ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"},
            }}  # fmt: skip
        else:
            head_op = {"Update": {
                "TableName": self.table, "Key": key,
                "UpdateExpression": "SET #next = :next, #flight = :batch, #version = :new_version, #updated = :now",
                "ConditionExpression": "#version = :version AND attribute_not_exists(#flight)",
                "ExpressionAttributeNames": {"#next": "next_batch_id", "#flight": "in_flight", "#version": "version",
                                             "#updated": "updated_at"},
                "ExpressionAttributeValues": {":next": N(new_head.next_batch_id), ":batch": N(batch.batch_id),
                                              ":new_version": N(new_head.version), ":version": N(head.version), ":now": S(now_iso())},
            }}  # fmt: skip
        item, parts = batch_item(batch)
        batch_op = {"Put": {
            "TableName": self.table, "Item": item,
            "ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"},
        }}  # fmt: skip
        part_ops = [{"Put": {"TableName": self.table, "Item": part}} for part in parts]
        what = f"pipeline {batch.pipeline_name!r}: planning batch {batch.batch_id}"
        self._transact(batch.pipeline_name, what, [head_op, batch_op, *part_ops])
        return new_head

    def get_batch(self, pipeline_name: str, batch_id: int) -> Batch:
        item = self._get(pipeline_name, batch_sk(batch_id))
        if item is None:
            raise StateCorruptError(f"pipeline {pipeline_name!r}: batch {batch_id} is not in state table {self.table}. {CORRUPT_HINT}")
        (batch,) = self._batches_from_items([item])
        return batch

    def list_batches(self, pipeline_name: str) -> list[Batch]:
        return self._batches_from_items(list(self._query(pipeline_name, "batch#")))

    # BatchGetItem reads at most 100 items a call.
    GET_CHUNK = 100

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        keys = [{"pk": S(pk(pipeline_name)), "sk": S(batch_sk(b))} for b in sorted(set(batch_ids))]
        items = self._get_items(pipeline_name, keys, f"reading {len(keys)} batches of pipeline {pipeline_name!r}")
        return {b.batch_id: b for b in self._batches_from_items(items)}

    # What get_summaries reads of a batch item: never its ranges, manifest or their parts.
    SUMMARY_ATTRIBUTES = ("batch_id", "status", "created_at", "committed_at", "attempts", "error", "figures", "failures", "last_error")

    def get_summaries(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, BatchSummary]:
        keys = [{"pk": S(pk(pipeline_name)), "sk": S(batch_sk(b))} for b in sorted(set(batch_ids))]
        names = {f"#a{i}": name for i, name in enumerate(self.SUMMARY_ATTRIBUTES)}
        projection = {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}
        items = self._get_items(
            pipeline_name, keys, f"reading the figures of {len(keys)} batches of pipeline {pipeline_name!r}", projection
        )
        return {summary.batch_id: summary for summary in (summary_from_item(item, pipeline_name, self.table) for item in items)}

    def put_progress(self, progress: Progress, pipeline_name: str) -> None:
        """Write the progress PROGRESS_SHARDS shards (in shard id order) to an item, under its run kind.

        Every piece is tried; a piece that fails leaves that piece's previous counts, and the failures are
        raised together once the rest are written (the caller logs them: progress is for the page only).
        """
        shards = sorted(set(progress.records) | progress.done)
        chunks = [shards[i : i + PROGRESS_SHARDS] for i in range(0, len(shards), PROGRESS_SHARDS)] or [[]]
        what = f"pipeline {pipeline_name!r}, {progress.kind.value} batch {progress.batch_id}"
        failed: list[str] = []
        for n, (chunk, item) in enumerate(zip(chunks, progress_items(progress, pipeline_name, chunks), strict=True)):
            try:
                self._call("put_item", pipeline_name, f"{what}: storing the replay's progress (item {n})", TableName=self.table, Item=item)
            except (ClientError, BotoCoreError, KinesisReplayError) as exc:
                shown = f"shards {chunk[0]} to {chunk[-1]}" if chunk else "no shard yet"
                failed.append(f"{progress_sk(progress.kind, n)} ({shown}): {exc}")
        if failed:
            raise ProgressNotStoredError(
                f"{what}: {len(failed)} of {len(chunks)} progress items not stored in state table {self.table}: {'; '.join(failed)}"
            )

    def get_progress(self, pipeline_name: str) -> dict[RunKind, Progress]:
        """The last progress of each kind of run, from one Query of the ``progress#`` items (a few KB per 100 shards).

        Pieces left by an earlier, wider batch stay under the key prefix: only the pieces of the batch written
        last are read back, and where a shard is in two of them (a replay saw a new shard and shifted the
        pieces), the later write's counts win.
        """
        return progress_from_items(pipeline_name, list(self._query(pipeline_name, "progress#")))

    def _get_items(
        self, pipeline_name: str, keys: list[dict[str, Any]], what: str, projection: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The items of these keys that exist, GET_CHUNK keys a call; keys left unread by a busy table are asked again, later."""
        found: list[dict[str, Any]] = []
        for i in range(0, len(keys), self.GET_CHUNK):
            request: dict[str, Any] = {self.table: {"Keys": keys[i : i + self.GET_CHUNK], "ConsistentRead": True, **(projection or {})}}
            for attempt in itertools.count():
                page = self._call("batch_get_item", pipeline_name, what, RequestItems=request)
                found += page["Responses"].get(self.table, [])
                request = page.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))
        return found

    def update_batch(self, batch: Batch, expected: BatchStatus) -> None:
        names = {"#status": "status", "#attempts": "attempts", "#updated": "updated_at", "#flight": "in_flight"}
        values: dict[str, Any] = {
            ":status": S(batch.status.value), ":expected": S(expected.value),
            ":attempts": N(batch.attempts), ":now": S(now_iso()), ":batch": N(batch.batch_id),
        }  # fmt: skip
        sets = ["#status = :status", "#attempts = :attempts", "#updated = :now"]
        removes: list[str] = []
        names["#error"] = "error"
        if batch.error is None:
            removes.append("#error")
        else:
            sets.append("#error = :error")
            values[":error"] = S(batch.error)
        if batch.status == BatchStatus.FAILED and batch.error is not None:
            # A new failure: counted, and its cause kept after verify clears 'error' (the page's last failures).
            names.update({"#failures": "failures", "#last_error": "last_error"})
            sets += ["#failures = if_not_exists(#failures, :zero) + :one", "#last_error = :error"]
            values.update({":zero": N(0), ":one": N(1)})
        result = None if batch.result is None else json.dumps(batch.result.to_dict())
        parts: list[dict[str, Any]] = []
        for field_name, text in (("gaps", json.dumps([g.to_dict() for g in batch.gaps])), ("manifest", result)):
            parts += self._set_field(batch, field_name, text, names, values, sets, removes)
        names["#figures"] = "figures"
        sets.append("#figures = :figures")
        values[":figures"] = S(json.dumps(batch.figures()))
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        head_key = {"pk": S(pk(batch.pipeline_name)), "sk": S("head")}
        self._transact(
            batch.pipeline_name,
            f"pipeline {batch.pipeline_name!r}: setting batch {batch.batch_id} from {expected.value} to {batch.status.value}",
            [
                {"ConditionCheck": {
                    "TableName": self.table, "Key": head_key, "ConditionExpression": "#flight = :batch",
                    "ExpressionAttributeNames": {"#flight": "in_flight"}, "ExpressionAttributeValues": {":batch": N(batch.batch_id)},
                }},
                {"Update": {
                    "TableName": self.table, "Key": {"pk": S(pk(batch.pipeline_name)), "sk": S(batch_sk(batch.batch_id))},
                    "UpdateExpression": expression, "ConditionExpression": "#status = :expected",
                    "ExpressionAttributeNames": {k: v for k, v in names.items() if k != "#flight"},
                    "ExpressionAttributeValues": {k: v for k, v in values.items() if k != ":batch"},
                }},
                *({"Put": {"TableName": self.table, "Item": part}} for part in parts),
            ],
        )  # fmt: skip

    def _set_field(
        self,
        batch: Batch,
        field_name: str,
        text: str | None,
        names: dict[str, str],
        values: dict[str, Any],
        sets: list[str],
        removes: list[str],
    ) -> list[dict[str, Any]]:
        """Add a field to an update: set inline (and its parts removed), or removed and returned as part items to put."""
        inline, parts = split_field(batch, field_name, text)
        for attr in (field_name, f"{field_name}_parts"):
            names[f"#{attr}"] = attr
            if attr in inline:
                sets.append(f"#{attr} = :{attr}")
                values[f":{attr}"] = inline[attr]
            else:
                removes.append(f"#{attr}")
        return parts

    def set_replayed(self, batch: Batch, expected: BatchStatus) -> None:
        if batch.snapshot_id is None or batch.result is None:
            raise ValueError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: a replayed batch needs its manifest and snapshot")
        what = (
            f"pipeline {batch.pipeline_name!r}: keeping the replayed attempt {batch.result.attempt} and snapshot {batch.snapshot_id} "
            f"with batch {batch.batch_id}"
        )
        names = {"#snapshot": "snapshot_id", "#updated": "updated_at", "#status": "status", "#figures": "figures"}
        values: dict[str, Any] = {
            ":snapshot": N(batch.snapshot_id), ":now": S(now_iso()), ":expected": S(expected.value),
            ":figures": S(json.dumps(batch.figures())),
        }  # fmt: skip
        sets = ["#snapshot = :snapshot", "#updated = :now", "#figures = :figures"]
        removes: list[str] = []
        # The manifest as update_batch writes it: inline, or in part items written in the same transaction, so the
        # status condition covers them too and the ledger never names one attempt's manifest with another's snapshot.
        parts = self._set_field(batch, "manifest", json.dumps(batch.result.to_dict()), names, values, sets, removes)
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        self._transact(
            batch.pipeline_name,
            what,
            [
                {"Update": {
                    "TableName": self.table, "Key": {"pk": S(pk(batch.pipeline_name)), "sk": S(batch_sk(batch.batch_id))},
                    "UpdateExpression": expression, "ConditionExpression": "#status = :expected",
                    "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                }},
                *({"Put": {"TableName": self.table, "Item": part}} for part in parts),
            ],
        )  # fmt: skip

    def complete_batch(self, batch: Batch, committed_at: datetime) -> None:
        key = {"pk": S(pk(batch.pipeline_name))}
        # The table snapshot that holds the batch is kept in the same write that marks it COMMITTED.
        snapshot_set, snapshot_names, snapshot_values = "", {}, {}
        if batch.snapshot_id is not None:
            snapshot_set, snapshot_names = ", #snapshot = :snapshot", {"#snapshot": "snapshot_id"}
            snapshot_values = {":snapshot": N(batch.snapshot_id)}
        self._transact(
            batch.pipeline_name,
            f"pipeline {batch.pipeline_name!r}: completing the commit of batch {batch.batch_id}",
            [
                {"Update": {
                    "TableName": self.table, "Key": {**key, "sk": S(batch_sk(batch.batch_id))},
                    "UpdateExpression": "SET #status = :committed, #committed_at = :at, #updated = :at" + snapshot_set,
                    "ConditionExpression": "#status = :committing",
                    "ExpressionAttributeNames": {"#status": "status", "#committed_at": "committed_at", "#updated": "updated_at",
                                                 **snapshot_names},
                    "ExpressionAttributeValues": {":committed": S(BatchStatus.COMMITTED.value), ":at": S(committed_at.isoformat()),
                                                  ":committing": S(BatchStatus.COMMITTING.value), **snapshot_values},
                }},
                {"Update": {
                    "TableName": self.table, "Key": {**key, "sk": S("head")},
                    "UpdateExpression": "REMOVE #flight SET #version = #version + :one, #updated = :at",
                    "ConditionExpression": "#flight = :batch",
                    "ExpressionAttributeNames": {"#flight": "in_flight", "#version": "version", "#updated": "updated_at"},
                    "ExpressionAttributeValues": {":batch": N(batch.batch_id), ":one": N(1), ":at": S(committed_at.isoformat())},
                }},
            ],
        )  # fmt: skip

    # -- recovery -----------------------------------------------------------------------------

    # Each restoring transaction is the head's absence and TRANSACTION_ITEMS - 1 puts.
    RESTORE_CHUNK = TRANSACTION_ITEMS - 1

    def restore(self, pipeline_name: str, head: Head, shards: Sequence[ShardState], batches: Sequence[Batch]) -> None:
        key = {"pk": S(pk(pipeline_name)), "sk": S("head")}
        no_head = {"ConditionCheck": {
            "TableName": self.table, "Key": key, "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": "pk"},
        }}  # fmt: skip
        puts = [item for b in batches for item in batch_items(b)] + [shard_item(pipeline_name, s) for s in shards]
        for i in range(0, len(puts), self.RESTORE_CHUNK):
            chunk = [{"Put": {"TableName": self.table, "Item": item}} for item in puts[i : i + self.RESTORE_CHUNK]]
            self._transact(
                pipeline_name, f"pipeline {pipeline_name!r}: restoring its state (items {i + 1} to {i + len(chunk)})", [no_head, *chunk]
            )
        self._transact(pipeline_name, f"pipeline {pipeline_name!r}: restoring its head", [{"Put": {
            "TableName": self.table,
            "Item": {**key, "next_batch_id": N(head.next_batch_id), "version": N(1), "updated_at": S(now_iso()),
                     **({"in_flight": N(head.in_flight)} if head.in_flight is not None else {})},
            "ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"},
        }}])  # fmt: skip

    def _batches_from_items(self, items: list[dict[str, Any]]) -> list[Batch]:
        """Batches from their items, with the part items of all of them read together (GET_CHUNK keys a call)."""
        keys = [
            {"pk": item["pk"], "sk": S(part_sk(int(item["batch_id"]["N"]), name, n))}
            for item in items
            for name in PART_FIELDS
            for n in range(int(item.get(f"{name}_parts", {}).get("N", 0)))
        ]
        pipeline_name = items[0]["pk"]["S"].removeprefix("pipeline#") if items else ""
        parts = self._get_items(pipeline_name, keys, f"reading the part items of {len(items)} batches of pipeline_name {pipeline_name!r}")
        pages = {p["sk"]["S"]: p["text"]["S"] for p in parts}
        return [batch_from_item(item, pages) for item in items]


def _old_item(exc: ClientError) -> dict[str, Any]:
    """What a conditional write that failed found in the table (ReturnValuesOnConditionCheckFailure=ALL_OLD), or {}."""
    item = exc.response.get("Item")
    return item if isinstance(item, dict) else {}
