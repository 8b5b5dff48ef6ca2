"""A long ledger written straight into a state table: the store's own items, 25 to a BatchWriteItem call.

For tests and benchmarks of reading a ledger of months. The store's restore writes the same items, but in
conditional transactions, which the moto server takes about 30 ms an item to apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_replay.adapters.dynamodb_items import batch_items
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.state import Batch, Head

# BatchWriteItem takes at most 25 items a call.
CHUNK = 25


def write_ledger(store: DynamoDBStateStore, pipeline_name: str, batches: Sequence[Batch]) -> None:
    """Put every batch, then the head after the newest one (no batch in flight)."""
    items = [item for b in batches for item in batch_items(b)]  # the store's items, written without its conditions
    for i in range(0, len(items), CHUNK):
        request = {store.table: [{"PutRequest": {"Item": item}} for item in items[i : i + CHUNK]]}
        while request:
            request = store.client.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
    store.restore(pipeline_name, Head(next_batch_id=max((b.batch_id for b in batches), default=0) + 1), [], [])
