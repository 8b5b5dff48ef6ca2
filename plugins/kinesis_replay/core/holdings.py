"""What a table holds, as its snapshots record it: which batches, and how many records the ledger counted in them.

Every snapshot a commit makes carries the table's holdings in its summary, where Iceberg versions them: a rollback,
a restored metadata file or a table created anew brings back the holdings of the snapshot it lands on, never the
newest. (A table property would not do: Iceberg does not roll properties back with snapshots.) So a reader of the
current snapshot alone can tell which batches the table holds, and compare them with the ledger's committed batches:

- ``kinesis-replay.batches``: the batch ids, as inclusive ranges (``1-57``, or ``1-3,5-9`` while a restore runs);
- ``kinesis-replay.records``: the records of those batches, summed from the ledger's verified count of each as it
  was committed. Iceberg's own ``total-records`` of the snapshot counts the rows its files hold: a snapshot made by
  another writer (a delete, an overwrite) shows as the two disagreeing;
- ``kinesis-replay.committed-through``: the highest batch id held, for a reader who wants only that;
- ``kinesis-replay.redecodes``: how many re-decodes (and rebuilds' switches) the table's history has made visible,
  carried forward by every commit. The ledger's head keeps the same count: a table behind it was rolled back past a
  re-decode, and holds the batches' old decoding with the same counts, which nothing else would tell.

Standard library only: the table's adapter reads and writes the summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

BATCHES_PROPERTY = "kinesis-replay.batches"
RECORDS_PROPERTY = "kinesis-replay.records"
THROUGH_PROPERTY = "kinesis-replay.committed-through"
REDECODES_PROPERTY = "kinesis-replay.redecodes"
SHOWN_IDS = 5  # a message names this many batch ids, then says how many more


@dataclass(frozen=True)
class Holdings:
    """Batch ids as sorted, disjoint, non-adjacent inclusive ranges, and the ledger's record count of those batches."""

    ranges: tuple[tuple[int, int], ...] = ()
    records: int = 0
    redecodes: int = 0  # the re-decodes made visible in the table's history (0 in a release's summary before they were counted)

    @classmethod
    def of(cls, batch_ids: Iterable[int], records: int = 0, redecodes: int = 0) -> Holdings:
        return cls(_ranges(sorted(set(batch_ids))), records, redecodes)

    @property
    def through(self) -> int:
        """The highest batch id held (0 for none)."""
        return self.ranges[-1][1] if self.ranges else 0

    @property
    def count(self) -> int:
        return sum(high - low + 1 for low, high in self.ranges)

    def __contains__(self, batch_id: object) -> bool:
        return isinstance(batch_id, int) and any(low <= batch_id <= high for low, high in self.ranges)

    def ids(self) -> Iterator[int]:
        for low, high in self.ranges:
            yield from range(low, high + 1)

    def add(self, batch_id: int, records: int) -> Holdings:
        """The holdings once ``batch_id`` (with its ``records``) is added; a batch held already keeps its count."""
        if batch_id in self:
            return self
        return Holdings(_merge([*self.ranges, (batch_id, batch_id)]), self.records + records, self.redecodes)

    def missing_from(self, low: int, high: int) -> list[int]:
        """The ids from ``low`` to ``high`` (inclusive) that are not held."""
        missing: list[int] = []
        at = low
        for first, last in self.ranges:
            if last < at:
                continue
            if first > high:
                break
            missing.extend(range(at, min(first, high + 1)))
            at = last + 1
        missing.extend(range(at, high + 1))
        return missing

    def outside(self, low: int, high: int) -> list[int]:
        """The ids held that are not from ``low`` to ``high``."""
        found: list[int] = []
        for first, last in self.ranges:
            found.extend(range(first, min(last, low - 1) + 1))
            found.extend(range(max(first, high + 1), last + 1))
        return found

    def to_summary(self) -> dict[str, str]:
        return {
            BATCHES_PROPERTY: ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranges),
            RECORDS_PROPERTY: str(self.records),
            THROUGH_PROPERTY: str(self.through),
            REDECODES_PROPERTY: str(self.redecodes),
        }

    @classmethod
    def from_summary(cls, summary: Mapping[str, str]) -> Holdings | None:
        """The holdings a snapshot's summary records; None for a snapshot that records none (another writer's, or a
        release before holdings were recorded). A malformed value is a ValueError naming it."""
        text = summary.get(BATCHES_PROPERTY)
        if text is None:
            return None
        try:
            pairs = [part.split("-", 1) if "-" in part else [part, part] for part in text.split(",") if part]
            ids = [(int(a), int(b)) for a, b in pairs]
            records = int(summary.get(RECORDS_PROPERTY, "0"))
        except ValueError:
            raise ValueError(f"snapshot summary property {BATCHES_PROPERTY}={text!r} is not a list of batch id ranges") from None
        try:
            redecodes = int(summary.get(REDECODES_PROPERTY, "0"))
        except ValueError:
            raise ValueError(f"snapshot summary property {REDECODES_PROPERTY}={summary[REDECODES_PROPERTY]!r} is not a count") from None
        return cls(_merge(ids), records, redecodes)

    def describe(self) -> str:
        if not self.ranges:
            return "no batch"
        if self.ranges[0][0] == self.ranges[0][1] and len(self.ranges) == 1:
            return f"batch {self.ranges[0][0]}"
        return "batches " + ", ".join(f"{a}" if a == b else f"{a} to {b}" for a, b in self.ranges)


def listed(ids: Sequence[object], limit: int = SHOWN_IDS) -> str:
    """Ids for a message: the first few, then how many more (``7, 8, 9, 10, 11 and 95 more``)."""
    shown = ", ".join(map(str, ids[:limit]))
    return shown if len(ids) <= limit else f"{shown} and {len(ids) - limit} more"


def _ranges(ids: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for i in ids:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return tuple(out)


def _merge(pairs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for low, high in sorted(pairs):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(high, out[-1][1]))
        else:
            out.append((low, high))
    return tuple(out)


@dataclass(frozen=True)
class TableState:
    """A table's current snapshot as the holdings check reads it."""

    holdings: Holdings  # what the newest snapshot a commit made says the table holds
    total_records: int | None  # Iceberg's own count of the rows the current snapshot's data files hold (None: unknown)
    foreign: tuple[str, ...] = ()  # snapshots made after that one by another writer: "<id> (<operation>)", newest first
    exists: bool = True  # False: no table (never created, dropped, or its catalog lost)
    deletes: int = 0  # position and equality deletes in the current snapshot: only another writer makes them
    derived: bool = False  # no snapshot of the ancestry records holdings: read from the table's partitions
    # With ``derived``: the rows of each batch in the current snapshot, from its partition statistics (no data file read).
    partitions: Mapping[int, int] | None = None


VerifiedRecords = Callable[[Sequence[int]], Mapping[int, int]]
"""Of the committed batches named, the rows the ledger verified in each (its manifest's records, summed over its shards;
quarantined records are not the table's): what a table's partition statistics are compared with."""


@dataclass(frozen=True)
class Ledger:
    """What the ledger says a table must hold: batches 1 to ``last``, all committed, and the batch in flight, if any,
    whose table commit may have been made before its commit was cut short.

    ``verified`` reads the ledger's count of each batch's rows; it is asked only when no snapshot of the table records
    the holdings (``TableState.derived``): the table's own statistics are then evidence to compare with the ledger,
    never a replacement for it. None (a caller with no ledger at hand): the partitions are taken as they are.
    """

    last: int
    in_flight: int | None = None
    verified: VerifiedRecords | None = field(default=None, compare=False, repr=False)
    redecodes: int = 0  # the re-decodes the ledger made visible (its head's count): the table's summary must not be behind


class Commit(StrEnum):
    """Which kind of commit puts a batch in the table: each requires its own of the table (ownership.commit_verdict)."""

    REGULAR = "regular"  # a batch's first commit: the table holds the batches before it
    BACKFILL = "backfill"  # a committed batch replayed: the table holds every committed batch, this one among them
    RESTORE = "restore"  # a committed batch the table lacks put back: the table holds no batch the ledger lacks


@dataclass(frozen=True)
class Mismatch:
    """How a table's current snapshot disagrees with the ledger."""

    missing: list[int]  # committed batches the table lacks
    extra: list[int]  # batches the table holds that the ledger has not committed
    records: bool  # the snapshot's files hold another number of rows than the ledger counted in its batches
    # (batch, rows in the table, rows the ledger verified) of each committed batch the table holds with other rows:
    # found only where no snapshot records the holdings, from the partition statistics (``compare``'s ``verified``).
    differing: list[tuple[int, int, int]] = field(default_factory=list)
    # (the table's count, the ledger's) of re-decodes made visible, when the table's is behind: rolled back past one.
    redecodes: tuple[int, int] | None = None


def compare(state: TableState, ledger: Ledger, verified: Mapping[int, int] | None = None) -> Mismatch | None:
    """The table's holdings against the ledger's committed batches, from the current snapshot's summary alone.

    Where no snapshot records the holdings (``state.derived``), they were read from the table's partitions, and their
    sum is the table's own row count: it says nothing. With ``verified`` (the ledger's rows of batches 1 to ``last``),
    each batch is compared instead: a batch with rows in the table and another count in the ledger differs, and a batch
    with no rows in the table is missing unless the ledger verified none (every record quarantined, or gone).
    """
    if state.derived and state.partitions is not None and verified is not None:
        return _compare_partitions(state, state.partitions, ledger, verified)
    held = state.holdings
    missing = held.missing_from(1, ledger.last)
    extra = [i for i in held.outside(1, ledger.last) if i != ledger.in_flight]
    records = (state.total_records is not None and state.total_records != held.records) or state.deletes > 0
    # A count ahead of the ledger's is a re-decode's commit cut short before its head write: the resumed commit writes it.
    # Holdings read from the partitions (``derived``) cannot tell it: a restore's check of each batch's files would.
    behind = (held.redecodes, ledger.redecodes) if held.redecodes < ledger.redecodes and not state.derived else None
    return Mismatch(missing, extra, records, redecodes=behind) if missing or extra or records or behind else None


def _compare_partitions(state: TableState, rows: Mapping[int, int], ledger: Ledger, verified: Mapping[int, int]) -> Mismatch | None:
    missing: list[int] = []
    differing: list[tuple[int, int, int]] = []
    for batch_id in range(1, ledger.last + 1):
        held, counted = rows.get(batch_id), verified.get(batch_id)
        if held is None:
            if counted is None or counted > 0:  # a batch the ledger lacks an entry of is not taken as empty
                missing.append(batch_id)
        elif held != counted:
            differing.append((batch_id, held, -1 if counted is None else counted))
    extra = sorted(b for b in rows if not 1 <= b <= ledger.last and b != ledger.in_flight)
    records = bool(differing) or state.deletes > 0 or (state.total_records is not None and state.total_records != sum(rows.values()))
    return Mismatch(missing, extra, records, differing) if missing or extra or records else None


def ledger_holdings(state: TableState, ledger: Ledger, verified: Mapping[int, int]) -> Holdings:
    """What a table whose holdings were read from its partitions holds, counted as the ledger counts it: the batches
    with rows (and those of 1 to ``last`` the ledger verified none in), each with the ledger's rows where it has them.

    A commit records these, so that rows another writer deleted stay a difference between the snapshot's summary and
    Iceberg's ``total-records`` until they are restored, whichever batch the commit is of.
    """
    rows = state.partitions or {}
    empty = (b for b in range(1, ledger.last + 1) if b not in rows and verified.get(b) == 0)
    ids = sorted({*state.holdings.ids(), *empty})
    counted = sum(verified.get(b, rows.get(b, 0)) if 1 <= b <= ledger.last else rows.get(b, 0) for b in ids)
    return Holdings.of(ids, counted, ledger.redecodes)  # the partitions cannot tell the count: the ledger's is taken
