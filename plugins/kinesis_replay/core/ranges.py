"""Closed sequence-number ranges, the unit of work a batch fixes per shard, and the pure rules of planning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


def parse_sequence_number(value: object, what: str = "sequence number") -> int:
    """Parse a Kinesis sequence number (a decimal string of up to 129 digits) into an int.

    Sequence numbers are compared as integers, never as strings: "9" > "10" as text.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{what} must be a decimal string, got {value!r}")
    text = str(value)
    if not text.isdigit() or not text.isascii() or len(text) > 129:
        raise ValueError(f"{what} must be a decimal integer of at most 129 digits, got {text!r}")
    return int(text)


def format_sequence_number(value: int) -> str:
    """The exact decimal form, the only form a sequence number is stored or sent in."""
    return str(value)


@dataclass(frozen=True)
class SequenceRange:
    """One shard's records of one batch. Both sequence numbers are inclusive.

    ``start`` is the sequence number of the first record after the committed checkpoint, found at
    planning time; the reader opens AT_SEQUENCE_NUMBER(start) and a different first record is a gap.
    For an open shard ``end`` is the newest record that existed at planning time. For a closed shard
    (``to_shard_end``) the range runs to SHARD_END and ``end`` is the shard's EndingSequenceNumber,
    an upper bound that need not be a record's number. ``previous_checkpoint`` is what the commit
    conditions the checkpoint's advance on (None: the shard has never been committed).
    """

    shard_id: str
    start: int
    end: int
    previous_checkpoint: int | None = None
    to_shard_end: bool = False
    start_arrival: datetime | None = None  # when the start record arrived: how close the range is to retention

    def __post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"range of {self.shard_id} starts after it ends: {self.start} > {self.end}")
        if self.previous_checkpoint is not None and self.previous_checkpoint >= self.start:
            raise ValueError(
                f"range of {self.shard_id} starts at {self.start}, not after its previous checkpoint {self.previous_checkpoint}"
            )

    def contains(self, sequence_number: int) -> bool:
        return self.start <= sequence_number <= self.end

    def describe(self) -> str:
        end = f"SHARD_END (<= {self.end})" if self.to_shard_end else str(self.end)
        return f"{self.shard_id} [{self.start} .. {end}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "start": format_sequence_number(self.start),
            "end": format_sequence_number(self.end),
            "previous_checkpoint": (None if self.previous_checkpoint is None else format_sequence_number(self.previous_checkpoint)),
            "to_shard_end": self.to_shard_end,
            "start_arrival": None if self.start_arrival is None else self.start_arrival.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SequenceRange:
        shard_id = str(data["shard_id"])
        previous = data.get("previous_checkpoint")
        return cls(
            shard_id=shard_id,
            start=parse_sequence_number(data["start"], f"start of {shard_id}"),
            end=parse_sequence_number(data["end"], f"end of {shard_id}"),
            previous_checkpoint=(None if previous is None else parse_sequence_number(previous, f"checkpoint of {shard_id}")),
            to_shard_end=bool(data.get("to_shard_end", False)),
            start_arrival=datetime.fromisoformat(data["start_arrival"]) if data.get("start_arrival") else None,
        )


@dataclass(frozen=True)
class ShardInfo:
    """What ListShards says of one shard, with sequence numbers parsed."""

    shard_id: str
    parent_shard_ids: tuple[str, ...]
    starting_sequence_number: int
    ending_sequence_number: int | None  # set once the shard is closed

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None


def shards_to_plan(shards: Sequence[ShardInfo], finished: Mapping[str, bool]) -> tuple[list[ShardInfo], list[tuple[ShardInfo, list[str]]]]:
    """Split the listed shards into those a plan may read and those that must wait for their parents.

    A shard already drained (finished) is never read again. A child waits until every parent that
    is still listed has been finished, so no child record lands in an earlier batch than any of its
    parents' records. A parent no longer listed has left the stream's retention: nothing is left
    of it to read, so it does not hold its children back.
    """
    listed = {shard.shard_id for shard in shards}
    ready: list[ShardInfo] = []
    waiting: list[tuple[ShardInfo, list[str]]] = []
    for shard in sorted(shards, key=lambda s: s.shard_id):
        if finished.get(shard.shard_id, False):
            continue
        blocking = [p for p in shard.parent_shard_ids if p in listed and not finished.get(p, False)]
        if blocking:
            waiting.append((shard, blocking))
        else:
            ready.append(shard)
    return ready, waiting
