"""The moto server as the local stack runs it: moto's own command line, answering HTTP/1.1 with keep-alive.

moto_server answers HTTP/1.0, so each call opens a new connection and the server a new thread for it; AWS's
endpoints keep connections alive, and botocore reuses them. Measured on the state table's conditional puts: 4.5 ms
of the server's CPU and 2.8 ms of the client's a call with HTTP/1.0, 3.8 ms and 2.3 ms with keep-alive.

It also answers one request at a time. moto's handlers run in the server's threads without a lock of their own:
two TransactWriteItems at once may both pass their conditions before either writes, and a transaction that fails
restores a copy of the whole table taken before it began, undoing what another thread wrote meanwhile. DynamoDB
serializes conditional writes and transactions, and the protocol's guarantees rest on that (two commits racing for
one batch: exactly one must lose). moto's handlers hold the GIL anyway, so one at a time costs little.

And its TransactWriteItems backs up the whole table once per item of the transaction, not once per table: a
transaction of 100 puts into a table of 3,000 items took 6 s of the server's CPU (measured), where DynamoDB
answers it as one request. The backups are all taken before the first write, so one copy per table is the same
backup.

And its Query of a sort-key prefix sorts every item of the table by its keys, then every item of the partition,
before it compares one: a Query of the 4 shard# items of a pipeline whose partition holds 100,000 batch items took
1.9 s (bench-ledger), where DynamoDB reads the prefix's items only. Such a Query is answered from the partition's
items under the prefix; moto's own query then sorts, pages and projects them as before. The items are the same; a
page that ends the prefix may come without the LastEvaluatedKey moto adds when any other item of the partition follows.

And its Glue UpdateTable ignores the VersionId it is given, so an update from a stale version of a table replaces a
newer one: two writers that read the table at once both succeed, and the first one's commit is lost (a chaos
schedule's batch vanished from its table this way, under a competing writer's property changes). Glue refuses such an
update with ConcurrentModificationException, and the optimistic locking of pyiceberg's (and Iceberg's Java) Glue
catalog rests on that. Here too: an UpdateTable whose VersionId is not the table's current one is refused so.

    python tests/stack/moto_keepalive.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import copy
import inspect
import sys
import threading
from typing import Any

import moto.dynamodb.models as dynamodb_models
import moto.glue.responses as glue_responses
from moto.glue.exceptions import GlueClientError
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler
from moto.server import main

# Werkzeug keeps an HTTP/1.1 connection open, and sends a body without a length chunked.
MotoRequestHandler.protocol_version = "HTTP/1.1"

_ONE_AT_A_TIME = threading.Lock()
_dispatch = DomainDispatcherApplication.__call__


def _serialized(self: DomainDispatcherApplication, environ: dict[str, Any], start_response: Any) -> Any:
    # Flask dispatches the whole request inside this call; the response it returns is already computed.
    with _ONE_AT_A_TIME:
        return _dispatch(self, environ, start_response)


DomainDispatcherApplication.__call__ = _serialized  # type: ignore[method-assign]


class _OneBackupPerTable:
    """``copy`` as moto's transact_write_items sees it: a table is deep-copied once per transaction."""

    def __init__(self) -> None:
        self.tables: dict[int, Any] = {}

    def deepcopy(self, obj: Any, memo: Any = None) -> Any:
        if not isinstance(obj, dynamodb_models.Table):
            return copy.deepcopy(obj, memo)
        if id(obj) not in self.tables:
            self.tables[id(obj)] = copy.deepcopy(obj)
        return self.tables[id(obj)]

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


_transact_write_items = dynamodb_models.DynamoDBBackend.transact_write_items


def _transact_backing_up_each_table_once(self: Any, transact_items: list[dict[str, Any]]) -> None:
    dynamodb_models.copy = _OneBackupPerTable()  # one request at a time (above): no other thread sees it
    try:
        return _transact_write_items(self, transact_items)
    finally:
        dynamodb_models.copy = copy


dynamodb_models.DynamoDBBackend.transact_write_items = _transact_backing_up_each_table_once  # type: ignore[method-assign]

_query = dynamodb_models.Table.query
_QUERY_LOCK = threading.Lock()
_QUERY_PARAMETERS = inspect.signature(_query)


def _query_reading_the_prefix_only(self: Any, *args: Any, **kwargs: Any) -> Any:
    call = _QUERY_PARAMETERS.bind(self, *args, **kwargs).arguments
    hash_key, comparison, values = call["hash_key"], call["range_comparison"], call["range_objs"]
    if call.get("index_name") or comparison != "BEGINS_WITH" or hash_key is None or not self.range_key_attr or values[0].type != "S":
        return _query(self, *args, **kwargs)
    prefix = values[0].value
    with _QUERY_LOCK:  # the server answers one request at a time (above); moto in process (mock_aws) does not
        under = [item for key, item in self.items.get(hash_key, {}).items() if key.value.startswith(prefix)]
        self.all_items = lambda: under  # what moto's query reads its candidates from
        try:
            return _query(self, *args, **kwargs)
        finally:
            del self.all_items


dynamodb_models.Table.query = _query_reading_the_prefix_only  # type: ignore[method-assign]

_update_table = glue_responses.GlueResponse.update_table


def _update_table_at_its_version(self: Any) -> Any:
    version = self.parameters.get("VersionId")
    if version is not None:  # one request at a time (above): nothing moves between this look and the update
        name = self.parameters.get("TableInput", {}).get("Name")
        current = self.glue_backend.get_table(self.parameters.get("DatabaseName"), name).as_dict()["VersionId"]
        if str(version) != str(current):
            raise GlueClientError(
                "ConcurrentModificationException", f"Table {name} was updated: version {version} is not its current {current}"
            )
    return _update_table(self)


glue_responses.GlueResponse.update_table = _update_table_at_its_version  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
