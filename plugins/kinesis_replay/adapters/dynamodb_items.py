"""The state table's items: each record of the ledger as a DynamoDB item and back, as pure functions.

No client here and no condition: the store's conditional writes (dynamodb_store) build on these. Sequence numbers
are stored as strings: DynamoDB numbers keep only 38 digits, sequence numbers have up to 129.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kinesis_replay.core.errors import StateCorruptError
from kinesis_replay.core.formats import sort_key_batch_id
from kinesis_replay.core.ranges import SequenceRange, format_sequence_number, parse_sequence_number
from kinesis_replay.core.state import (
    Batch,
    BatchStatus,
    BatchSummary,
    Gap,
    Head,
    PlanNotes,
    Progress,
    ReplayResult,
    RunKind,
    ShardState,
    StartPosition,
)

# What to do about a state table that holds what kinesis-replay never writes (an item edited or written by hand).
CORRUPT_HINT = (
    "To rebuild the pipeline's state from the output, point state_table at a new table and recover it "
    '(docs/operating.md: "Recovering a lost state table")'
)


def pk(pipeline_name: str) -> str:
    return f"pipeline#{pipeline_name}"


# A pipeline's shard items are spread over SHARD_KEYS partition keys of their own, so that a commit's checkpoint writes
# (one a shard) are not all held to one partition's 1,000 write units a second. The count is the pipeline's layout item's
# (written before its first shard item); a pipeline of an earlier release has no layout item and its shard items under
# its own key: it is read and written as it is (a count of 1). docs/state-table.md, "At 10,000 shards".
SHARD_KEYS = 16
LAYOUT_SK = "layout"


def shard_sk(shard_id: str) -> str:
    return f"shard#{shard_id}"


def shard_pk(pipeline_name: str, shard_id: str, keys: int) -> str:
    """The partition key of a shard's item, of ``keys`` the pipeline's shard items are spread over (1: its own key)."""
    if keys == 1:
        return pk(pipeline_name)
    return shard_keys_pk(pipeline_name, zlib.crc32(shard_id.encode()) % keys)


def shard_keys_pk(pipeline_name: str, k: int) -> str:
    return f"{pk(pipeline_name)}#shards#{k}"


def layout_item(pipeline_name: str, keys: int) -> dict[str, Any]:
    return {"pk": S(pk(pipeline_name)), "sk": S(LAYOUT_SK), "shard_keys": N(keys), "updated_at": S(now_iso())}


def layout_from_item(item: Mapping[str, Any], pipeline_name: str, table: str) -> int:
    try:
        keys = int(item["shard_keys"]["N"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StateCorruptError(
            f"pipeline {pipeline_name!r}: the layout item in state table {table} has no shard_keys number ({exc!r}). {CORRUPT_HINT}"
        ) from exc
    if keys < 1:
        raise StateCorruptError(
            f"pipeline {pipeline_name!r}: the layout item in state table {table} says {keys} shard keys. {CORRUPT_HINT}"
        )
    return keys


def batch_sk(batch_id: int) -> str:
    return f"batch#{sort_key_batch_id(batch_id)}"


def part_sk(batch_id: int, field: str, page: int) -> str:
    """A page of one of a batch's long JSON fields: beside the batch, outside the ``batch#`` prefix the ledger is listed by."""
    return f"part#{sort_key_batch_id(batch_id)}#{field}#{page:04d}"


# A batch's JSON fields that grow with the shard count: the ranges, the manifest, the gaps, the lag measurements.
# Each is kept in the batch item up to INLINE_BYTES; a longer one is compressed and cut into part items of PART_BYTES,
# so no item nears DynamoDB's 400 KB, and the batch item says how many (``<field>_parts``). Parts are written in the same
# transaction as the batch item that names them, so each write's conditions cover them too.
PART_FIELDS = ("ranges", "manifest", "gaps", "extra", "staged")
INLINE_BYTES = 32 * 1024
PART_BYTES = 300 * 1024
ZLIB_LEVEL = 6  # zlib's default

TRANSACTION_ITEMS = 100  # the most actions one TransactWriteItems may hold

# A replay's progress is stored PROGRESS_SHARDS shards to an item (about 6 KB), one set of items per run kind, each
# replaced by the next replay of that kind: the item count follows the widest batch, never the ledger's length.
PROGRESS_SHARDS = 100
STATE_TABLE_KEYS = {"pk": ("HASH", "S"), "sk": ("RANGE", "S")}  # the state table's key schema: name -> (key type, type)


def progress_sk(kind: RunKind, chunk: int) -> str:
    """One piece of the last progress of a kind of run; the batch it belongs to is in the item, not in its key."""
    return f"progress#{kind.value}#{chunk:04d}"


def S(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def N(value: int) -> dict[str, str]:
    """A number attribute value (DynamoDB takes numbers as strings)."""
    return {"N": str(value)}


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def shard_from_item(item: dict[str, Any]) -> ShardState:
    shard_id = item["shard_id"]["S"]
    start = item.get("start_position")
    return ShardState(
        shard_id=shard_id,
        checkpoint=parse_sequence_number(item["checkpoint"]["S"], f"checkpoint of {shard_id}") if "checkpoint" in item else None,
        finished=item.get("finished", {}).get("BOOL", False),
        parent_shard_ids=tuple(p["S"] for p in item.get("parents", {}).get("L", [])),
        start_position=StartPosition.from_dict(json.loads(start["S"])) if start else None,
        last_batch_id=int(item["last_batch_id"]["N"]) if "last_batch_id" in item else None,
        updated_at=datetime.fromisoformat(item["updated_at"]["S"]) if "updated_at" in item else None,
    )


def shard_item(pipeline_name: str, shard: ShardState, keys: int = 1) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": S(shard_pk(pipeline_name, shard.shard_id, keys)),
        "sk": S(shard_sk(shard.shard_id)),
        "shard_id": S(shard.shard_id),
        "finished": {"BOOL": shard.finished},
        "parents": {"L": [S(p) for p in shard.parent_shard_ids]},
        "updated_at": S(now_iso()),
    }
    if shard.start_position is not None:
        item["start_position"] = S(json.dumps(shard.start_position.to_dict()))
    if shard.checkpoint is not None:
        item["checkpoint"] = S(format_sequence_number(shard.checkpoint))
    if shard.last_batch_id is not None:
        item["last_batch_id"] = N(shard.last_batch_id)
    return item


def batch_item(batch: Batch) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The batch's item, and the part items its long JSON fields need (none for a batch of a few shards)."""
    item: dict[str, Any] = {
        "pk": S(pk(batch.pipeline_name)),
        "sk": S(batch_sk(batch.batch_id)),
        "batch_id": N(batch.batch_id),
        "status": S(batch.status.value),
        "stream": S(batch.stream),
        "run_id": S(batch.run_id),
        "created_at": S(batch.created_at.isoformat()),
        "attempts": N(batch.attempts),
        "updated_at": S(now_iso()),
        "figures": S(json.dumps(batch.figures())),
    }
    fields = {
        "ranges": json.dumps([r.to_dict() for r in batch.ranges]),
        "gaps": json.dumps([g.to_dict() for g in batch.gaps]) if batch.gaps else None,
        "extra": json.dumps(batch.notes.to_dict()) if batch.notes else None,
        "manifest": json.dumps(batch.result.to_dict()) if batch.result is not None else None,
        "staged": json.dumps(batch.staged.to_dict()) if batch.staged is not None else None,
    }
    parts: list[dict[str, Any]] = []
    for name, text in fields.items():
        inline, field_parts = split_field(batch, name, text)
        item.update(inline)
        parts += field_parts
    if batch.committed_at is not None:
        item["committed_at"] = S(batch.committed_at.isoformat())
    if batch.error is not None:
        item["error"] = S(batch.error)
    if batch.snapshot_id is not None:
        item["snapshot_id"] = N(batch.snapshot_id)
    if batch.quarantine_snapshot_id is not None:
        item["quarantine_snapshot_id"] = N(batch.quarantine_snapshot_id)
    for name in ("staged_by", "redecoded_by"):
        if (value := getattr(batch, name)) is not None:
            item[name] = S(value)
    return item, parts


def batch_items(batch: Batch) -> list[dict[str, Any]]:
    item, parts = batch_item(batch)
    return [item, *parts]


def split_field(batch: Batch, name: str, text: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A JSON field as the batch item's attribute, or as a count of part items and the parts ({}, [] for None).

    A field too long for the item is compressed (zlib), then cut into parts of PART_BYTES, each a binary ``zlib``
    attribute: the ranges of 10,000 shards (3.3 MB of JSON, 56-digit sequence numbers) take 0.9 MB, so a plan's one
    transaction (the head, the batch item, its parts) stays within DynamoDB's 4 MB, and its write units fall with it.
    Parts written as ``text`` by earlier releases are read as they are (``page_of``, ``json_field``).
    """
    if text is None:
        return {}, []
    if len(text) <= INLINE_BYTES:
        return {name: S(text)}, []
    packed = zlib.compress(text.encode(), ZLIB_LEVEL)
    pages = [packed[i : i + PART_BYTES] for i in range(0, len(packed), PART_BYTES)]
    key = S(pk(batch.pipeline_name))
    parts = [{"pk": key, "sk": S(part_sk(batch.batch_id, name, n)), "zlib": {"B": page}} for n, page in enumerate(pages)]
    return {f"{name}_parts": N(len(pages))}, parts


Page = str | bytes  # a part item's page: JSON text (written before parts were compressed), or a piece of zlib's stream


def page_of(part: dict[str, Any]) -> Page:
    """A part item's page, as it was written: compressed bytes, or an earlier release's text."""
    if "zlib" in part:
        page: bytes = part["zlib"]["B"]
        return page
    text: str = part["text"]["S"]
    return text


def json_field(item: dict[str, Any], name: str, pages: Mapping[str, Page]) -> Any:
    """A JSON field of a batch item, inline or joined from its part items' ``pages``; None when it has neither."""
    if name in item:
        return json.loads(item[name]["S"])
    if f"{name}_parts" not in item:
        return None
    pipeline_name, batch_id = item["pk"]["S"].removeprefix("pipeline#"), int(item["batch_id"]["N"])
    sks = [part_sk(batch_id, name, n) for n in range(int(item[f"{name}_parts"]["N"]))]
    missing = [sk for sk in sks if sk not in pages]
    if missing:
        raise StateCorruptError(
            f"pipeline {pipeline_name!r}: batch {batch_id} lacks the part items {', '.join(missing)} of its {name}. {CORRUPT_HINT}"
        )
    texts = [page for sk in sks if isinstance(page := pages[sk], str)]
    if len(texts) == len(sks):
        return json.loads("".join(texts))
    packed = [page for sk in sks if isinstance(page := pages[sk], bytes)]
    if len(packed) != len(sks):  # every part of a field is written in one transaction, all alike
        raise StateCorruptError(
            f"pipeline {pipeline_name!r}: batch {batch_id}'s part items of its {name} mix text and compressed pages. {CORRUPT_HINT}"
        )
    try:
        return json.loads(zlib.decompress(b"".join(packed)))
    except zlib.error as exc:
        raise StateCorruptError(
            f"pipeline {pipeline_name!r}: batch {batch_id}'s part items of its {name} do not decompress ({exc}). {CORRUPT_HINT}"
        ) from exc


def batch_from_item(item: dict[str, Any], pages: Mapping[str, Page]) -> Batch:
    pipeline_name = item["pk"]["S"].removeprefix("pipeline#")
    try:
        return Batch(
            pipeline_name=pipeline_name,
            batch_id=int(item["batch_id"]["N"]),
            status=BatchStatus(item["status"]["S"]),
            ranges=tuple(SequenceRange.from_dict(r) for r in json_field(item, "ranges", pages)),
            stream=item["stream"]["S"],
            run_id=item["run_id"]["S"],
            created_at=datetime.fromisoformat(item["created_at"]["S"]),
            committed_at=datetime.fromisoformat(item["committed_at"]["S"]) if "committed_at" in item else None,
            result=ReplayResult.from_dict(result) if (result := json_field(item, "manifest", pages)) is not None else None,
            attempts=int(item.get("attempts", {}).get("N", 0)),
            error=item["error"]["S"] if "error" in item else None,
            gaps=tuple(Gap.from_dict(g) for g in json_field(item, "gaps", pages) or ()),
            notes=PlanNotes.from_dict(json_field(item, "extra", pages) or {}),
            snapshot_id=int(item["snapshot_id"]["N"]) if "snapshot_id" in item else None,
            quarantine_snapshot_id=int(item["quarantine_snapshot_id"]["N"]) if "quarantine_snapshot_id" in item else None,
            staged=ReplayResult.from_dict(staged) if (staged := json_field(item, "staged", pages)) is not None else None,
            staged_by=item["staged_by"]["S"] if "staged_by" in item else None,
            redecoded_by=item["redecoded_by"]["S"] if "redecoded_by" in item else None,
        )
    except (KeyError, ValueError) as exc:
        raise StateCorruptError(f"pipeline {pipeline_name!r}: unreadable batch item {item.get('sk')}: {exc!r}. {CORRUPT_HINT}") from exc


def head_from_item(item: dict[str, Any]) -> Head:
    return Head(
        next_batch_id=int(item["next_batch_id"]["N"]),
        in_flight=int(item["in_flight"]["N"]) if "in_flight" in item else None,
        version=int(item["version"]["N"]),
        redecodes=int(item["redecodes"]["N"]) if "redecodes" in item else 0,  # a release's head before they were counted: none
    )


def summary_from_item(item: dict[str, Any], pipeline_name: str, table: str) -> BatchSummary:
    """A batch's figures from its item's summary attributes (the store's SUMMARY_ATTRIBUTES projection: no key)."""
    batch_id = int(item["batch_id"]["N"])
    try:
        return BatchSummary(
            batch_id=batch_id,
            status=BatchStatus(item["status"]["S"]),
            created_at=datetime.fromisoformat(item["created_at"]["S"]),
            committed_at=datetime.fromisoformat(item["committed_at"]["S"]) if "committed_at" in item else None,
            attempts=int(item.get("attempts", {}).get("N", 0)),
            error=item["error"]["S"] if "error" in item else None,
            figures=json.loads(item["figures"]["S"]) if "figures" in item else {},
            failures=int(item.get("failures", {}).get("N", 0)),
            last_error=item["last_error"]["S"] if "last_error" in item else None,
        )
    except (KeyError, ValueError) as exc:
        where = f"pipeline {pipeline_name!r}: batch {batch_id} in table {table}"
        raise StateCorruptError(f"{where} is malformed: {exc!r}. {CORRUPT_HINT}") from exc


def progress_items(progress: Progress, pipeline_name: str, chunks: list[list[str]]) -> list[dict[str, Any]]:
    """One item per chunk of shard ids, under the run's kind."""
    return [
        {
            "pk": S(pk(pipeline_name)),
            "sk": S(progress_sk(progress.kind, n)),
            "batch_id": N(progress.batch_id),
            "records": S(json.dumps({s: progress.records.get(s, 0) for s in chunk})),
            "done": S(json.dumps([s for s in chunk if s in progress.done])),
            "updated_at": S(progress.updated_at.isoformat()),
        }
        for n, chunk in enumerate(chunks)
    ]


def progress_from_items(pipeline_name: str, items: list[dict[str, Any]]) -> dict[RunKind, Progress]:
    """The last progress of each kind of run from its ``progress#`` items.

    Pieces left by an earlier, wider batch stay under the key prefix: only the pieces of the batch written
    last are read back, and where a shard is in two of them (a replay saw a new shard and shifted the
    pieces), the later write's counts win.
    """
    latest: dict[RunKind, list[tuple[datetime, int, dict[str, Any]]]] = {}
    for item in items:
        try:
            kind, batch_id = RunKind(item["sk"]["S"].split("#")[1]), int(item["batch_id"]["N"])
            updated = datetime.fromisoformat(item["updated_at"]["S"])
        except (KeyError, IndexError, ValueError) as exc:
            raise StateCorruptError(f"pipeline {pipeline_name!r}: unreadable progress item {item.get('sk')}: {exc!r}") from exc
        latest.setdefault(kind, []).append((updated, batch_id, item))
    found: dict[RunKind, Progress] = {}
    for kind, pieces in latest.items():
        newest = max(pieces, key=lambda p: p[0])[1]
        records: dict[str, int] = {}
        done: set[str] = set()
        for _, _, item in sorted((p for p in pieces if p[1] == newest), key=lambda p: p[0]):
            try:
                counts, finished = json.loads(item["records"]["S"]), set(json.loads(item["done"]["S"]))
            except (KeyError, ValueError) as exc:
                raise StateCorruptError(f"pipeline {pipeline_name!r}: unreadable progress item {item['sk']['S']}: {exc!r}") from exc
            for shard, count in counts.items():
                records[shard] = int(count)
                (done.add if shard in finished else done.discard)(shard)
        updated_at = max(p[0] for p in pieces if p[1] == newest)
        found[kind] = Progress(newest, records, frozenset(done), updated_at, kind)
    return found
