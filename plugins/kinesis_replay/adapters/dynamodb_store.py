"""The StateStore on DynamoDB through a boto3 client: one table, conditional writes, transactions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from kinesis_replay.core.errors import (
    KinesisReplayError,
    ProgressNotStoredError,
    StateConflictError,
    StateCorruptError,
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
    LAYOUT_SK,
    PART_FIELDS,
    PROGRESS_SHARDS,
    SHARD_KEYS,
    TRANSACTION_ITEMS,
    N,
    S,
    batch_from_item,
    batch_item,
    batch_items,
    batch_sk,
    head_from_item,
    layout_from_item,
    layout_item,
    now_iso,
    page_of,
    part_sk,
    pk,
    progress_from_items,
    progress_items,
    progress_sk,
    shard_from_item,
    shard_item,
    shard_keys_pk,
    shard_pk,
    shard_sk,
    split_field,
    summary_from_item,
)
from kinesis_replay.adapters.dynamodb_table import StateTable


def _checkpoint_is(checkpoint: int | None) -> tuple[str, dict[str, Any]]:
    """The condition that a shard item's checkpoint is still ``checkpoint`` (None: never committed)."""
    if checkpoint is None:
        return "attribute_not_exists(#checkpoint)", {}
    return "#checkpoint = :expected", {":expected": S(format_sequence_number(checkpoint))}


class DynamoDBStateStore:
    """Checkpoints and the batch ledger in one DynamoDB table keyed by (pk, sk).

    | pk                        | sk                   | holds                                                  |
    | pipeline#<name>           | head                 | next_batch_id, in_flight, version                      |
    | pipeline#<name>           | layout               | shard_keys: how many keys the shard items are under    |
    | pipeline#<name>#shards#<k>| shard#<shard id>     | checkpoint, finished, parents, start_position, ...     |
    | pipeline#<name>           | batch#<000000000042> | status, ranges, stream, run_id, times, manifest, ...   |
    | pipeline#<name>           | progress#<kind>#<n>  | batch_id, records and done of PROGRESS_SHARDS shards   |

    A shard's item is under key ``k`` = CRC-32 of its id modulo the layout's ``shard_keys``; a pipeline of an earlier
    release has no layout item and its shard items under ``pipeline#<name>`` (read and written there, as one key).

    Every expression names its attributes through ExpressionAttributeNames: several natural names
    (``status``, ``stream``) are DynamoDB reserved words, and moto does not say so.
    """

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self.client = client
        self.table = table
        self.db = StateTable(client, table)
        # Each pipeline's count of shard keys, once read or written: it never changes for a pipeline's items (a count
        # is written once, before the first shard item, and a restore writes its own under the head's absence).
        self._layouts: dict[str, int] = {}
        self._layout_lock = threading.Lock()

    def ensure_table(self) -> None:
        """Create the table if it is missing (on-demand billing) and wait until it is active."""
        self.db.ensure()

    # -- head ---------------------------------------------------------------------------------

    def get_head(self, pipeline_name: str) -> Head:
        item = self.db.get(pipeline_name, "head")
        return Head() if item is None else head_from_item(item)

    # -- shards -------------------------------------------------------------------------------

    def shard_keys(self, pipeline_name: str) -> int | None:
        """How many partition keys the pipeline's shard items are under: its layout item's count, 1 for a pipeline of an
        earlier release (shard items under its own key, no layout item), None while it has neither."""
        with self._layout_lock:
            if pipeline_name in self._layouts:
                return self._layouts[pipeline_name]
        item = self.db.get(pipeline_name, LAYOUT_SK)
        if item is not None:
            keys = layout_from_item(item, pipeline_name, self.table)
        elif next(self.db.query(pipeline_name, "shard#", limit=1), None) is not None:
            keys = 1
        else:
            return None
        with self._layout_lock:
            self._layouts[pipeline_name] = keys
        return keys

    def _claim_layout(self, pipeline_name: str) -> int:
        """The pipeline's count of shard keys, written now (SHARD_KEYS) if it has none: before its first shard item, so
        no shard item is ever without the count that says where it is. A concurrent plan's count, written first, wins."""
        keys = self.shard_keys(pipeline_name)
        if keys is not None:
            return keys
        try:
            self.db.call(
                "put_item", pipeline_name, f"storing the layout of pipeline {pipeline_name!r}'s shard items",
                TableName=self.table, Item=layout_item(pipeline_name, SHARD_KEYS),
                ConditionExpression="attribute_not_exists(#pk)", ExpressionAttributeNames={"#pk": "pk"},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )  # fmt: skip
            keys = SHARD_KEYS
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            keys = layout_from_item(_old_item(exc) or self.db.get(pipeline_name, LAYOUT_SK) or {}, pipeline_name, self.table)
        with self._layout_lock:
            self._layouts[pipeline_name] = keys
        return keys

    def _stored_shard_keys(self, pipeline_name: str, what: str) -> int:
        """The count of shard keys of a pipeline whose shard is written to (a checkpoint moved, a shard marked): with no
        shard item stored at all, no shard is, and the write's condition cannot hold."""
        keys = self.shard_keys(pipeline_name)
        if keys is None:
            raise StateConflictError(
                f"{what}: the stored checkpoint is None (batch None): state table {self.table} holds no shard item of the pipeline"
            )
        return keys

    def get_shards(self, pipeline_name: str) -> dict[str, ShardState]:
        keys = self.shard_keys(pipeline_name)
        if keys is None:
            return {}
        if keys == 1:
            items = list(self.db.query(pipeline_name, "shard#"))
        else:  # one Query a key, a few at once

            def under(k: int) -> list[dict[str, Any]]:
                return list(self.db.query(pipeline_name, "shard#", key=shard_keys_pk(pipeline_name, k)))

            with ThreadPoolExecutor(max_workers=min(keys, 8), thread_name_prefix="shard-keys") as pool:
                items = [item for found in pool.map(under, range(keys)) for item in found]
        shards = (shard_from_item(i) for i in items)
        return {s.shard_id: s for s in sorted(shards, key=lambda s: s.shard_id)}

    def put_shard_if_absent(self, pipeline_name: str, shard: ShardState) -> ShardState:
        keys = self._claim_layout(pipeline_name)
        item = shard_item(pipeline_name, shard, keys)
        try:
            self.db.call(
                "put_item", pipeline_name, f"storing shard {shard.shard_id} of pipeline {pipeline_name!r}",
                TableName=self.table, Item=item,
                ConditionExpression="attribute_not_exists(#pk)", ExpressionAttributeNames={"#pk": "pk"},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )  # fmt: skip
            return shard
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            key = shard_pk(pipeline_name, shard.shard_id, keys)
            return shard_from_item(_old_item(exc) or self.db.get(pipeline_name, shard_sk(shard.shard_id), key) or item)

    def put_shards_if_absent(self, pipeline_name: str, shards: Sequence[ShardState]) -> dict[str, ShardState]:
        """Store newly seen shards, TRANSACTION_ITEMS to a transaction, each conditioned on being absent.

        A first plan of a wide stream stores an item for every shard: ten transactions for 1,000 shards instead
        of 1,000 writes, with each item's condition kept. A transaction that a concurrent plan beat (one of its
        shards is already stored) changes nothing; its shards are then stored one by one, each coming back as
        stored, so the start positions a concurrent plan fixed first are the ones used.
        """
        stored: dict[str, ShardState] = {}
        keys = self._claim_layout(pipeline_name) if shards else 1
        for first in range(0, len(shards), TRANSACTION_ITEMS):
            chunk = shards[first : first + TRANSACTION_ITEMS]
            items = [
                {"Put": {"TableName": self.table, "Item": shard_item(pipeline_name, shard, keys),
                         "ConditionExpression": "attribute_not_exists(#pk)", "ExpressionAttributeNames": {"#pk": "pk"}}}
                for shard in chunk
            ]  # fmt: skip
            try:
                self.db.transact(
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
        keys = self._stored_shard_keys(pipeline_name, what)
        try:
            self.db.call(
                "update_item", pipeline_name, what, TableName=self.table,
                Key={"pk": S(shard_pk(pipeline_name, shard_id, keys)), "sk": S(shard_sk(shard_id))},
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
        keys = self._stored_shard_keys(pipeline_name, what)
        try:
            self.db.call(
                "update_item", pipeline_name, what, TableName=self.table,
                Key={"pk": S(shard_pk(pipeline_name, shard_id, keys)), "sk": S(shard_sk(shard_id))},
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
        # The update below keeps the item's redecodes; a head read before a re-decode's count rose says fewer (harmless:
        # the count is compared only with a table's, where fewer refuses nothing more).
        new_head = replace(head, next_batch_id=batch.batch_id + 1, in_flight=batch.batch_id, version=head.version + 1)
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
        self.db.transact(batch.pipeline_name, what, [head_op, batch_op, *part_ops])
        return new_head

    def get_batch(self, pipeline_name: str, batch_id: int) -> Batch:
        item = self.db.get(pipeline_name, batch_sk(batch_id))
        if item is None:
            raise StateCorruptError(f"pipeline {pipeline_name!r}: batch {batch_id} is not in state table {self.table}. {CORRUPT_HINT}")
        (batch,) = self._batches_from_items([item])
        return batch

    def list_batches(self, pipeline_name: str) -> list[Batch]:
        return self._batches_from_items(list(self.db.query(pipeline_name, "batch#")))

    def get_batches(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, Batch]:
        keys = [{"pk": S(pk(pipeline_name)), "sk": S(batch_sk(b))} for b in sorted(set(batch_ids))]
        items = self.db.get_items(pipeline_name, keys, f"reading {len(keys)} batches of pipeline {pipeline_name!r}")
        return {b.batch_id: b for b in self._batches_from_items(items)}

    # What get_summaries reads of a batch item: never its ranges, manifest or their parts.
    SUMMARY_ATTRIBUTES = ("batch_id", "status", "created_at", "committed_at", "attempts", "error", "figures", "failures", "last_error")

    def get_summaries(self, pipeline_name: str, batch_ids: Iterable[int]) -> dict[int, BatchSummary]:
        keys = [{"pk": S(pk(pipeline_name)), "sk": S(batch_sk(b))} for b in sorted(set(batch_ids))]
        names = {f"#a{i}": name for i, name in enumerate(self.SUMMARY_ATTRIBUTES)}
        projection = {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}
        items = self.db.get_items(
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
                stored = f"{what}: storing the replay's progress (item {n})"
                self.db.call("put_item", pipeline_name, stored, TableName=self.table, Item=item)
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
        return progress_from_items(pipeline_name, list(self.db.query(pipeline_name, "progress#")))

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
        self.db.transact(
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

    def set_replayed(self, batch: Batch, expected: BatchStatus, previous_snapshot: int | None = None) -> None:
        if batch.snapshot_id is None or batch.result is None:
            raise ValueError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: a replayed batch needs its manifest and snapshot")
        what = (
            f"pipeline {batch.pipeline_name!r}: keeping the replayed attempt {batch.result.attempt} and snapshot {batch.snapshot_id} "
            f"with batch {batch.batch_id}"
        )
        names: dict[str, str] = {"#snapshot": "snapshot_id"}
        values: dict[str, Any] = {":snapshot": N(batch.snapshot_id)}
        sets = ["#snapshot = :snapshot"]
        removes: list[str] = []
        plain = {
            "quarantine_snapshot_id": None if batch.quarantine_snapshot_id is None else N(batch.quarantine_snapshot_id),
            "redecoded_by": None if batch.redecoded_by is None else S(batch.redecoded_by),
            "staged_by": None if batch.staged_by is None else S(batch.staged_by),
        }
        for attr, value in plain.items():
            self._set_plain(attr, value, names, values, sets, removes)
        # The manifest as update_batch writes it: inline, or in part items written in the same transaction, so the
        # status condition covers them too and the ledger never names one attempt's manifest with another's snapshot.
        parts = self._set_field(batch, "manifest", json.dumps(batch.result.to_dict()), names, values, sets, removes)
        staged = json.dumps(batch.staged.to_dict()) if batch.staged is not None else None
        parts += self._set_field(batch, "staged", staged, names, values, sets, removes)
        condition = ""
        if previous_snapshot is not None:
            condition, values[":previous_snapshot"] = " AND #snapshot = :previous_snapshot", N(previous_snapshot)
        self._update_committed(batch, what, expected, names, values, sets, removes, parts, condition)

    def set_staged(self, batch: Batch, expected: BatchStatus) -> None:
        if batch.staged is None or batch.staged_by is None:
            raise ValueError(f"pipeline {batch.pipeline_name!r}, batch {batch.batch_id}: a staged re-decode needs its manifest and run")
        what = f"pipeline {batch.pipeline_name!r}: staging the re-decoded attempt {batch.staged.attempt} of batch {batch.batch_id}"
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets: list[str] = []
        removes: list[str] = []
        self._set_plain("staged_by", S(batch.staged_by), names, values, sets, removes)
        parts = self._set_field(batch, "staged", json.dumps(batch.staged.to_dict()), names, values, sets, removes)
        self._update_committed(batch, what, expected, names, values, sets, removes, parts)

    @staticmethod
    def _set_plain(
        attr: str, value: dict[str, str] | None, names: dict[str, str], values: dict[str, Any], sets: list[str], removes: list[str]
    ) -> None:
        names[f"#{attr}"] = attr
        if value is None:
            removes.append(f"#{attr}")
        else:
            sets.append(f"#{attr} = :{attr}")
            values[f":{attr}"] = value

    def _update_committed(
        self, batch: Batch, what: str, expected: BatchStatus, names: dict[str, str], values: dict[str, Any], sets: list[str],
        removes: list[str], parts: list[dict[str, Any]], condition: str = "",
    ) -> None:  # fmt: skip
        """One transaction: the batch item's update (with its figures and time), conditioned on its status, and the part
        items of its long fields."""
        names.update({"#updated": "updated_at", "#status": "status", "#figures": "figures"})
        values.update({":now": S(now_iso()), ":expected": S(expected.value), ":figures": S(json.dumps(batch.figures()))})
        sets += ["#updated = :now", "#figures = :figures"]
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        self.db.transact(
            batch.pipeline_name,
            what,
            [
                {"Update": {
                    "TableName": self.table, "Key": {"pk": S(pk(batch.pipeline_name)), "sk": S(batch_sk(batch.batch_id))},
                    "UpdateExpression": expression, "ConditionExpression": "#status = :expected" + condition,
                    "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                }},
                *({"Put": {"TableName": self.table, "Item": part}} for part in parts),
            ],
        )  # fmt: skip

    def record_redecodes(self, pipeline_name: str, redecodes: int) -> None:
        what = f"pipeline {pipeline_name!r}: recording {redecodes} re-decodes made visible"
        try:
            self.db.call(
                "update_item", pipeline_name, what, TableName=self.table,
                Key={"pk": S(pk(pipeline_name)), "sk": S("head")},
                UpdateExpression="SET #redecodes = :n",
                ConditionExpression="attribute_exists(#pk) AND (attribute_not_exists(#redecodes) OR #redecodes < :n)",
                ExpressionAttributeNames={"#redecodes": "redecodes", "#pk": "pk"}, ExpressionAttributeValues={":n": N(redecodes)},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            if not _old_item(exc):  # no head: nothing was ever committed, so no re-decode can have been made visible
                raise StateConflictError(f"{what}: the pipeline has no head") from exc
            # as many or more recorded already (a resumed commit's second write, or a later re-decode's)

    def complete_batch(self, batch: Batch, committed_at: datetime) -> None:
        key = {"pk": S(pk(batch.pipeline_name))}
        # The table snapshot that holds the batch is kept in the same write that marks it COMMITTED.
        snapshot_set, snapshot_names, snapshot_values = "", {}, {}
        if batch.snapshot_id is not None:
            snapshot_set, snapshot_names = ", #snapshot = :snapshot", {"#snapshot": "snapshot_id"}
            snapshot_values = {":snapshot": N(batch.snapshot_id)}
        if batch.quarantine_snapshot_id is not None:
            snapshot_set += ", #quarantine = :quarantine"
            snapshot_names = {**snapshot_names, "#quarantine": "quarantine_snapshot_id"}
            snapshot_values = {**snapshot_values, ":quarantine": N(batch.quarantine_snapshot_id)}
        self.db.transact(
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
        # The shard items go where the pipeline's layout says (an earlier release's stays one key), and a pipeline with
        # none gets one, put first: no shard item is ever without the count that says where it is.
        keys = self.shard_keys(pipeline_name)
        layout: list[dict[str, Any]] = []
        if keys is None and shards:
            keys, layout = SHARD_KEYS, [layout_item(pipeline_name, SHARD_KEYS)]
        puts = layout + [item for b in batches for item in batch_items(b)] + [shard_item(pipeline_name, s, keys or 1) for s in shards]
        for i in range(0, len(puts), self.RESTORE_CHUNK):
            chunk = [{"Put": {"TableName": self.table, "Item": item}} for item in puts[i : i + self.RESTORE_CHUNK]]
            self.db.transact(
                pipeline_name, f"pipeline {pipeline_name!r}: restoring its state (items {i + 1} to {i + len(chunk)})", [no_head, *chunk]
            )
        self.db.transact(pipeline_name, f"pipeline {pipeline_name!r}: restoring its head", [{"Put": {
            "TableName": self.table,
            "Item": {**key, "next_batch_id": N(head.next_batch_id), "version": N(1), "updated_at": S(now_iso()),
                     **({"in_flight": N(head.in_flight)} if head.in_flight is not None else {}),
                     **({"redecodes": N(head.redecodes)} if head.redecodes else {})},
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
        parts = self.db.get_items(pipeline_name, keys, f"reading the part items of {len(items)} batches of pipeline_name {pipeline_name!r}")
        pages = {p["sk"]["S"]: page_of(p) for p in parts}
        return [batch_from_item(item, pages) for item in items]


def _old_item(exc: ClientError) -> dict[str, Any]:
    """What a conditional write that failed found in the table (ReturnValuesOnConditionCheckFailure=ALL_OLD), or {}."""
    item = exc.response.get("Item")
    return item if isinstance(item, dict) else {}
