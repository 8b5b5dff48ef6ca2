"""Backfill: choose committed batches to replay into their own paths, and estimate what reading them costs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinesis_replay.config import ReadConfig
from kinesis_replay.errors import KinesisReplayError
from kinesis_replay.ranges import SequenceRange
from kinesis_replay.state import Batch, BatchStatus


class BackfillError(KinesisReplayError):
    """The backfill's parameters select nothing that can be replayed; the message says which and why."""


_ONLY = {
    "batch_ids": ("from_batch", "to_batch", "start_time", "end_time"),
    "range": ("batch_ids", "start_time", "end_time"),
    "window": ("batch_ids", "from_batch", "to_batch"),
}

# The JSON schema of the backfill's `batches` trigger parameter: exactly one of three ways to choose.
# Airflow validates each parameter on its own, so the choice lives in one object parameter, and an
# invalid one is refused by the trigger form (and the REST API) before any run is created.
SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "batch_ids": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "uniqueItems": True},
        "from_batch": {"type": "integer", "minimum": 1},
        "to_batch": {"type": "integer", "minimum": 1},
        "start_time": {"type": "string", "format": "date-time"},
        "end_time": {"type": "string", "format": "date-time"},
    },
    "oneOf": [
        {"required": ["batch_ids"], "not": {"anyOf": [{"required": [k]} for k in _ONLY["batch_ids"]]}},
        {"required": ["from_batch", "to_batch"], "not": {"anyOf": [{"required": [k]} for k in _ONLY["range"]]}},
        {"required": ["start_time", "end_time"], "not": {"anyOf": [{"required": [k]} for k in _ONLY["window"]]}},
    ],
}


@dataclass(frozen=True)
class Selection:
    """Which stored batches to replay: a list of ids, an inclusive id range, or a time window."""

    batch_ids: tuple[int, ...] = ()
    from_batch: int | None = None
    to_batch: int | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    def describe(self) -> str:
        if self.batch_ids:
            return f"batches {', '.join(map(str, self.batch_ids))}"
        if self.from_batch is not None:
            return f"batches {self.from_batch} to {self.to_batch}"
        return f"batches covering {self.start_time} .. {self.end_time}"


def parse_selection(value: Mapping[str, Any]) -> Selection:
    """The selection from the trigger parameter, with the checks a JSON schema cannot express (order of bounds)."""
    if "batch_ids" in value:
        return Selection(batch_ids=tuple(int(i) for i in value["batch_ids"]))
    if "from_batch" in value:
        low, high = int(value["from_batch"]), int(value["to_batch"])
        if low > high:
            raise BackfillError(f"from_batch {low} is after to_batch {high}")
        return Selection(from_batch=low, to_batch=high)
    start, end = (_timestamp(value, key) for key in ("start_time", "end_time"))
    if start >= end:
        raise BackfillError(f"start_time {start.isoformat()} is not before end_time {end.isoformat()}")
    return Selection(start_time=start, end_time=end)


def _timestamp(value: Mapping[str, Any], key: str) -> datetime:
    text = str(value[key]).replace("Z", "+00:00")
    try:
        ts = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BackfillError(f"{key} is not an ISO 8601 timestamp: {value[key]!r}") from exc
    if ts.tzinfo is None:
        raise BackfillError(f"{key} needs a time zone: {value[key]!r}")
    return ts


def select_batches(pipeline: str, selection: Selection, ledger: Iterable[Batch]) -> list[Batch]:
    """The committed batches the selection names, in id order; anything else named is an error that says why.

    A time window selects every committed batch whose records may have arrived in it: from its
    earliest range start to the moment it was planned (no record of a batch arrived after that).
    """
    by_id = {b.batch_id: b for b in ledger}
    if selection.start_time is not None and selection.end_time is not None:
        start, end = selection.start_time, selection.end_time
        chosen = [
            b for b in by_id.values()
            if b.status == BatchStatus.COMMITTED and _earliest(b) <= end and b.created_at >= start
        ]  # fmt: skip
        if not chosen:
            raise BackfillError(f"pipeline {pipeline!r}: no committed batch holds records from {start.isoformat()} to {end.isoformat()}")
        return sorted(chosen, key=lambda b: b.batch_id)
    if selection.batch_ids:
        wanted: Sequence[int] = sorted(selection.batch_ids)
    else:
        assert selection.from_batch is not None and selection.to_batch is not None
        wanted = range(selection.from_batch, selection.to_batch + 1)
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise BackfillError(
            f"pipeline {pipeline!r}: no batch {', '.join(map(str, missing))} in the ledger (it holds 1 to {max(by_id, default=0)})"
        )
    open_ = [f"{i} ({by_id[i].status.value})" for i in wanted if by_id[i].status != BatchStatus.COMMITTED]
    if open_:
        raise BackfillError(
            f"pipeline {pipeline!r}: only committed batches can be backfilled; not committed: {', '.join(open_)}. "
            "A batch in flight is finished by the pipeline's own next run."
        )
    return [by_id[i] for i in wanted]


def _earliest(batch: Batch) -> datetime:
    arrivals = [r.start_arrival for r in batch.ranges if r.start_arrival is not None]
    return min(arrivals) if arrivals else batch.created_at


@dataclass(frozen=True)
class Estimate:
    """What reading some ranges costs at the per-shard read limit. Records and bytes are None when unknown."""

    shards: int
    records: int | None
    bytes: int | None
    get_records_calls: int | None
    seconds_at_limit: float | None


def estimate(
    ranges: Sequence[SequenceRange], records: Mapping[str, int] | None, sizes: Mapping[str, int] | None, limits: ReadConfig
) -> Estimate:
    """Per shard: ceil(records / records per call) GetRecords calls, and the time they need at the calls-per-second
    and bytes-per-second budgets; shards are read in parallel, so the slowest shard sets the time."""
    if records is None or sizes is None:
        return Estimate(len(ranges), None, None, None, None)
    calls = {r.shard_id: max(1, math.ceil(records.get(r.shard_id, 0) / limits.max_records_per_call)) for r in ranges}
    seconds = max(
        (max(calls[r.shard_id] / limits.get_records_per_second, sizes.get(r.shard_id, 0) / limits.bytes_per_second) for r in ranges),
        default=0.0,
    )
    return Estimate(len(ranges), sum(records.values()), sum(sizes.values()), sum(calls.values()), seconds)


def estimate_batch(batch: Batch, limits: ReadConfig, planned: Mapping[str, tuple[int, int]] | None = None) -> Estimate:
    """A batch's cost: exact from its manifest when it has one, else from planning's per-range estimates."""
    if batch.manifest is not None:
        counts = {s.shard_id: s.records + s.bad_records for s in batch.manifest.shards}
        return estimate(batch.ranges, counts, {s.shard_id: s.bytes for s in batch.manifest.shards}, limits)
    if planned and len(planned) == len(batch.ranges):
        return estimate(batch.ranges, {k: v[0] for k, v in planned.items()}, {k: v[1] for k, v in planned.items()}, limits)
    return estimate(batch.ranges, None, None, limits)


def describe(batch: Batch, est: Estimate) -> str:
    """A dry run's account of one batch: its ranges and what replaying them costs."""
    lines = [f"batch {batch.batch_id} ({batch.status.value}), {est.shards} shard ranges:"]
    lines += [f"  {r.describe()}" for r in batch.ranges]
    if est.records is None:
        lines.append("  records and bytes: unknown until read; reading stays within the per-shard budget")
    else:
        lines.append(
            f"  {est.records} records, {est.bytes} bytes: {est.get_records_calls} GetRecords calls, "
            f"about {est.seconds_at_limit:.1f}s at the per-shard read limit"
        )
    return "\n".join(lines)
