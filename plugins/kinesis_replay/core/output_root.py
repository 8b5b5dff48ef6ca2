"""What an output root holds, as one typed snapshot: its owner record, its format, and what the checks need of its ledger.

A task reads it once (kinesis_replay.adapters.output_root.load_root), before it decides anything
(kinesis_replay.core.ownership), and then acts. The snapshot holds the current shapes only: the loader upgrades what an
earlier release wrote (an owner record without a format, a root with no owner record at all) as it reads it, so that
no decision knows about releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kinesis_replay.core.holdings import TableState
from kinesis_replay.core.schema_changes import TableColumn
from kinesis_replay.core.state import Batch

if TYPE_CHECKING:
    from kinesis_replay.core.config import PipelineConfig


@dataclass(frozen=True)
class Owner:
    """The record at the output root of who writes there. Every plan, replay, backfill and commit checks it first."""

    pipeline_name: str
    stream: str
    state_table: str
    created_at: str  # ISO 8601; when the pipeline first claimed the root
    # The highest batch whose results the root held when it was claimed: written by a version of kinesis-replay that
    # kept no commit records. 0 for a new root, whose commit records are then complete: no record, no commit.
    adopted: int = 0
    # The root's layout, "iceberg" or "directory", recorded when the root is claimed: a pipeline never writes one layout
    # into a root that holds the other. None in a record of a release that recorded none (the loader reads the root's
    # folders instead: RootSnapshot.format).
    output_format: str | None = None
    # When the stream was created (ISO 8601, Kinesis's StreamCreationTimestamp): a stream deleted and created again
    # under the same name starts its shard ids over. None in a record of a release that recorded none.
    stream_created: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as stored: the pipeline's name under ``pipeline``, as every release wrote it."""
        return {
            "pipeline": self.pipeline_name, "stream": self.stream, "state_table": self.state_table,
            "created_at": self.created_at, "adopted": self.adopted, "output_format": self.output_format,
            "stream_created": self.stream_created,
        }  # fmt: skip


@dataclass(frozen=True)
class OtherRoot:
    """Another output root found around or inside a root: where it is, its owner record, and who that names."""

    root: str  # written as the root looked from is (a local path, or a URI of its scheme)
    record: str
    owner: Owner | None  # None when the record cannot be read (not JSON, or outside what the role may read)
    unreadable: str | None = None  # why not


@dataclass(frozen=True)
class RecordedFormat:
    """The format a root was created in, and what says so (its owner record, or, for an older root, its folders)."""

    format: str  # "iceberg" or "directory"
    why: str


@dataclass(frozen=True)
class Nesting:
    """The owned roots around a root (nearest first), and the nearest inside it, for a claim (``check_nesting``)."""

    around: tuple[OtherRoot, ...] = ()
    inside: OtherRoot | None = None  # looked for only while the root has no owner record
    complete: bool = True  # whether the search inside saw every folder


class LocationHolding(Protocol):
    """What a table's location holds besides the pipeline's table (adapters.iceberg_table.LocationTables)."""

    @property
    def in_catalog(self) -> tuple[str, ...]: ...

    @property
    def newest(self) -> str: ...

    def own(self, pipeline: PipelineConfig) -> bool: ...

    def describe(self, pipeline: PipelineConfig) -> str: ...


@dataclass(frozen=True)
class TableSnapshot:
    """A table output's current snapshot as the holdings check reads it, and, when there is no table, what its location
    holds (an ``iceberg_table.LocationTables``, or None); ``columns``: the table's top-level columns, for the schema
    check (core/schema_changes), empty when there is no table; ``rebuilt_to``: the fingerprint of the decoding a
    rebuild's switch made the table's (its table property), None before any."""

    state: TableState
    taken: LocationHolding | None = None
    columns: tuple[TableColumn, ...] = ()
    rebuilt_to: str | None = None


@dataclass(frozen=True)
class RootSnapshot:
    """What one output root holds, as far as the task that loaded it needs: None is "not read", never "none there".

    ``owner`` and ``format`` are always read. What else is read depends on the head the task loaded it for
    (``adapters.output_root.load_root`` says when each one is): the listings cost a request per thousand batches on S3,
    so a regular plan reads none of them.
    """

    root: str
    owner: Owner | None
    format: RecordedFormat | None  # None: a new or empty root, whose format nothing says yet
    committed: tuple[int, ...] | None = None  # the ids of the root's commit records, in order
    results: tuple[int, ...] | None = None  # the ids of its result manifests (committed or not), in order
    newest: Batch | None = None  # the newest commit record, read when the root has no owner record
    holds_last: bool | None = None  # whether it holds the head's newest committed batch (its commit record or result)
    holds_next: bool | None = None  # whether it holds a commit record of the head's next batch
    nesting: Nesting | None = None  # read for a claim
    table: TableSnapshot | None = None  # read for a table output whose ledger holds batches

    def holds_commits(self) -> bool:
        """Whether the root holds committed batches: with an owner record, its commit records say (and the batches the
        root held when it was claimed count); without one, the root was written, if at all, by a release that kept no
        commit records, and any batch result may be committed."""
        if self.owner is not None:
            return self.owner.adopted > 0 or bool(self.committed)
        return bool(self.results)
