"""Backfill: choose committed batches to replay into their own paths, and estimate what reading them costs."""

from __future__ import annotations

import logging
import math
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kinesis_replay.adapters import commit_records, file_stats, files, iceberg_table, layout, quarantine_table
from kinesis_replay.adapters.kinesis_client import stream_retention
from kinesis_replay.adapters.output_root import load_root, load_table
from kinesis_replay.core import decoded, ownership
from kinesis_replay.core.config import PipelineConfig, ReadConfig
from kinesis_replay.core.errors import (
    BackfillError,  # re-exported: the DAG tasks and tests name backfill.BackfillError
    BatchNotRestorableError,
    DataLossError,
    TableMetadataLostError,
    VerificationError,
)
from kinesis_replay.core.formats import MAX_BATCH_ID
from kinesis_replay.core.holdings import Commit, Ledger, Mismatch, TableState, compare, listed
from kinesis_replay.core.ledger import committed_batches, ledger_of, ledger_rows
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.records import digest_hash
from kinesis_replay.core.refusals import describe_mismatch, recovery_hint, refuse
from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult, ShardResult, StateStore
from kinesis_replay.steps import commit, in_flight, verify

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)


# The most batches one backfill run replays. Each chosen batch becomes one mapped replay task and one Spark
# job (an EMR Serverless job run), so this bounds what a run asks of the scheduler and the cluster. Airflow
# refuses a mapping longer than [core] max_map_length (1024 by default), but only after the select task
# has run; 100 regular batches are about 8 hours of the stream at a 5-minute schedule. A larger backfill
# is split into several runs (max_active_runs=1 queues them one after the other).
MAX_BATCHES_PER_RUN = 100
# An ISO 8601 timestamp is at most about 35 characters ("2026-11-01T00:00:00.123456789+00:00").
MAX_TIMESTAMP_LENGTH = 64
# The regular DAG's acknowledge_data_loss parameter names at most this many shards: more than any stream
# we expect has, open and closed (Kinesis's default shard quota is a few hundred per account and region),
# and it bounds what a run's conf holds and the plan task reads (at most about 640 KB). A shard id is
# "shardId-" and 12 digits, 20 characters.
MAX_ACKNOWLEDGED_SHARDS = 10_000
MAX_SHARD_ID_LENGTH = 64

# The JSON schema of the regular DAG's `acknowledge_data_loss` trigger parameter: unique shard ids, bounded.
ACKNOWLEDGE_DATA_LOSS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string", "pattern": "^shardId-[0-9]+$", "maxLength": MAX_SHARD_ID_LENGTH},
    "uniqueItems": True,
    "maxItems": MAX_ACKNOWLEDGED_SHARDS,
}


# The JSON schema of the backfill's `batches` trigger parameter: exactly one of three ways to choose.
# Airflow validates each parameter on its own, so the choice lives in one object parameter, and an
# invalid one is refused by the trigger form (and the REST API) before any run is created. Its sizes are
# bounded here; what JSON schema cannot say (the width of an id range, the batches a window selects) is
# checked by parse_selection and select_batches.
_BATCH_ID: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_BATCH_ID}
_TIMESTAMP: dict[str, Any] = {"type": "string", "format": "date-time", "maxLength": MAX_TIMESTAMP_LENGTH}
SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "batch_ids": {"type": "array", "items": _BATCH_ID, "minItems": 1, "maxItems": MAX_BATCHES_PER_RUN, "uniqueItems": True},
        "from_batch": _BATCH_ID,
        "to_batch": _BATCH_ID,
        "start_time": _TIMESTAMP,
        "end_time": _TIMESTAMP,
    },
    # Exactly one way: a bound needs its pair, and two ways need at least three keys. Written so, not as a oneOf,
    # so that Airflow's refusal says what is wrong ("'to_batch' is a dependency of 'from_batch'"), not only "is
    # not valid under any of the given schemas".
    "minProperties": 1,
    "maxProperties": 2,
    "dependentRequired": {"from_batch": ["to_batch"], "to_batch": ["from_batch"], "start_time": ["end_time"], "end_time": ["start_time"]},
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
            return f"batches {listed(self.batch_ids)}"
        if self.from_batch is not None:
            return f"batches {self.from_batch} to {self.to_batch}"
        return f"batches covering {self.start_time} .. {self.end_time}"


def parse_selection(value: Mapping[str, Any]) -> Selection:
    """The selection from the trigger parameter, with the checks a JSON schema cannot express (order of bounds,
    width of a range). Sizes are checked before anything proportional to them is built."""
    if "batch_ids" in value:
        ids = value["batch_ids"]
        if not isinstance(ids, list | tuple) or not ids:
            raise BackfillError(f"batch_ids is not a list of batch ids: {_shown(ids)}")
        if len(ids) > MAX_BATCHES_PER_RUN:
            raise BackfillError(
                f"batch_ids names {len(ids)} batches, more than the {MAX_BATCHES_PER_RUN} one backfill run replays; "
                "split the backfill into several runs"
            )
        return Selection(batch_ids=tuple(_batch_id(i, "batch_ids") for i in ids))
    if "from_batch" in value:
        low, high = _batch_id(value["from_batch"], "from_batch"), _batch_id(value["to_batch"], "to_batch")
        _check_range(low, high)
        return Selection(from_batch=low, to_batch=high)
    start, end = (_timestamp(value, key) for key in ("start_time", "end_time"))
    if start >= end:
        raise BackfillError(f"start_time {start.isoformat()} is not before end_time {end.isoformat()}")
    return Selection(start_time=start, end_time=end)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = MAX_TIMESTAMP_LENGTH


def _shown(value: object) -> str:
    """A parameter's value for an error message, cut short: a parameter of any size is never echoed whole."""
    return _SHORT.repr(value)


def _batch_id(value: object, key: str) -> int:
    """A batch id as JSON writes an integer. JSON schema counts 3.0 as an integer, and Python counts true as 1: the
    trigger form lets both through, so both are refused here, as are "3" and any other value that is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH_ID:
        raise BackfillError(
            f"{key}: {_shown(value)} is not a batch id (an integer from 1 to {MAX_BATCH_ID}, written without quotes or a "
            "decimal point). Nothing was run"
        )
    return value


def _check_range(low: int, high: int) -> None:
    if low > high:
        raise BackfillError(f"from_batch {low} is after to_batch {high}")
    if high - low + 1 > MAX_BATCHES_PER_RUN:
        raise BackfillError(
            f"from_batch {low} to to_batch {high} is {high - low + 1} batches, more than the {MAX_BATCHES_PER_RUN} "
            f"one backfill run replays; split the backfill into runs of at most {MAX_BATCHES_PER_RUN} batches "
            f"(the first: from_batch {low}, to_batch {low + MAX_BATCHES_PER_RUN - 1})"
        )


def _timestamp(value: Mapping[str, Any], key: str) -> datetime:
    raw = value[key]
    if not isinstance(raw, str) or len(raw) > MAX_TIMESTAMP_LENGTH:
        raise BackfillError(f"{key} is not an ISO 8601 timestamp of at most {MAX_TIMESTAMP_LENGTH} characters: {_shown(raw)}")
    try:
        ts = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BackfillError(f"{key} is not an ISO 8601 timestamp: {_shown(raw)}") from exc
    if ts.tzinfo is None:
        raise BackfillError(f"{key} needs a time zone: {_shown(raw)}")
    return ts


def select_batches(pipeline_name: str, selection: Selection, ledger: Iterable[Batch], newest: int | None = None) -> list[Batch]:
    """The committed batches the selection names, in id order; anything else named is an error that says why.

    A time window selects every committed batch whose records may have arrived in it: from its
    earliest range start to the moment it was planned (no record of a batch arrived after that).
    ``ledger`` holds at least the batches the selection could name (see ``candidates``); ``newest`` is the
    ledger's newest id, when ``ledger`` is only part of it.
    """
    by_id = {b.batch_id: b for b in ledger}
    newest = max(by_id, default=0) if newest is None else newest
    if selection.start_time is not None and selection.end_time is not None:
        start, end = selection.start_time, selection.end_time
        chosen = sorted(
            (b for b in by_id.values() if b.status == BatchStatus.COMMITTED and _earliest(b) <= end and b.created_at >= start),
            key=lambda b: b.batch_id,
        )  # as long as the ledger at most, whatever the window
        if not chosen:
            raise BackfillError(
                f"pipeline {pipeline_name!r}: no committed batch holds records from {start.isoformat()} to {end.isoformat()}"
            )
        if len(chosen) > MAX_BATCHES_PER_RUN:
            raise BackfillError(
                f"pipeline {pipeline_name!r}: the window {start.isoformat()} to {end.isoformat()} selects {len(chosen)} committed batches "
                f"({chosen[0].batch_id} to {chosen[-1].batch_id}), more than the {MAX_BATCHES_PER_RUN} one backfill run replays; "
                f"give a narrower window, or from_batch and to_batch at most {MAX_BATCHES_PER_RUN} apart, in several runs"
            )
        return chosen
    wanted: Sequence[int]
    if selection.batch_ids:
        if len(selection.batch_ids) > MAX_BATCHES_PER_RUN:
            raise BackfillError(f"{len(selection.batch_ids)} batch ids, more than the {MAX_BATCHES_PER_RUN} one backfill run replays")
        wanted = sorted(selection.batch_ids)
    elif selection.from_batch is not None and selection.to_batch is not None:
        _check_range(selection.from_batch, selection.to_batch)  # before the range is built
        wanted = range(selection.from_batch, selection.to_batch + 1)
    else:
        raise BackfillError(f"pipeline {pipeline_name!r}: the selection names no batch ids, no id range and no time window")
    missing = [i for i in wanted if i not in by_id]
    if missing and newest == 0:
        raise BackfillError(
            f"pipeline {pipeline_name!r}: no batch {listed(missing)}: the ledger holds no batch yet (has the pipeline committed "
            "one? does state_table name its table?)"
        )
    if missing:
        raise BackfillError(f"pipeline {pipeline_name!r}: no batch {listed(missing)} in the ledger (it holds 1 to {newest})")
    open_ = [f"{i} ({by_id[i].status.value})" for i in wanted if by_id[i].status != BatchStatus.COMMITTED]
    if open_:
        raise BackfillError(
            f"pipeline {pipeline_name!r}: only committed batches can be backfilled; not committed: {listed(open_)}. "
            "A batch in flight is finished by the pipeline's own next run."
        )
    return [by_id[i] for i in wanted]


def choose(
    pipeline: PipelineConfig,
    kinesis_client: KinesisClient,
    store: StateStore,
    value: Mapping[str, Any],
    now: datetime | None = None,
    redecode: bool = False,
    rebuild: bool = False,
    copy_expired: bool = False,
) -> tuple[Selection, list[Batch]]:
    """The committed batches a backfill's ``batches`` parameter selects, checked before anything is read.

    Refused when the output is not this pipeline's, when payload.schema changes the table's columns in a way Iceberg
    cannot (the replayed files could never be committed), while a regular batch is in flight (the two would
    compete for the stream's read limits), when a range has left the stream's retention, and (unless ``redecode``)
    when a batch was decoded with other payload settings than the pipeline's now, naming both. A ``rebuild`` (which
    decodes with payload.next_schema, steps/rebuild.py) is refused instead when it cannot start, and when any committed
    batch has left the stream's retention, naming every one: it must read them all again, unless ``copy_expired`` says
    to copy those from their files (steps/rebuild.stage_copies), which leaves them out of the selection.
    """
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    selection = parse_selection(value)
    head = store.get_head(pipeline.name)
    # A backfill replaces batches of a whole table, never builds one; where no snapshot records what the table holds,
    # each batch's rows are compared with the ledger's, so a backfill never commits over another writer's partial delete.
    ledger, held = ledger_of(head, pipeline, store), load_table(pipeline, head)
    refuse(ownership.table_refusal(pipeline, held, ledger, ledger_rows(held.state, ledger) if held else None))
    if rebuild:
        refuse(ownership.rebuild_refusal(pipeline, held))
    else:
        refuse(ownership.schema_refusal(pipeline, held))  # the replayed files must fit the table as a regular batch's
    newest = head.next_batch_id - 1
    retention = stream_retention(kinesis_client, pipeline.stream, pipeline.read) if selection.start_time else None
    chosen = select_batches(pipeline.name, selection, candidates(store, pipeline.name, selection, newest, retention), newest)
    refuse(ownership.decoding_refusal(pipeline, chosen, redecode or rebuild))
    if head.in_flight is not None:
        raise BackfillError(
            f"pipeline {pipeline.name}: regular batch {head.in_flight} is in flight; a backfill waits until it is committed "
            "(the pipeline's next run finishes it), so that the two never compete for the stream's read limits"
        )
    retention = retention or stream_retention(kinesis_client, pipeline.stream, pipeline.read)
    if rebuild and copy_expired:  # those the stream no longer holds are copied from their files, not replayed
        gone = {b.batch_id for b, _ in in_flight.beyond_retention(pipeline, chosen, retention, now or datetime.now(UTC))}
        chosen = [b for b in chosen if b.batch_id not in gone]
    elif rebuild:  # it reads every committed batch again: those it cannot are named before any is read
        in_flight.check_all_retention(pipeline, committed_batches(store, pipeline.name), retention, now or datetime.now(UTC))
    for batch in chosen:
        in_flight.check_retention(pipeline, batch, retention, now or datetime.now(UTC))
    return selection, chosen


# Planning clocks of different workers may disagree by a little: a window's search starts this many batches early.
WINDOW_MARGIN = 25
# The ledger is read in slices of this many ids while a window's batches are looked for.
WINDOW_SLICE = 500
RESTORE_PROPERTY = "kinesis-replay.restore"  # a restore's snapshot of re-decoded batches names its run here


def candidates(store: StateStore, pipeline_name: str, selection: Selection, newest: int, retention: timedelta | None) -> list[Batch]:
    """The part of the ledger a selection can name, read without reading the rest.

    Ids and id ranges read exactly those batches. A window [start, end] reads from the first batch planned at
    or after ``start`` (found by bisecting the ids, which are planned in time order), to the last batch
    planned before ``end`` + the stream's retention: a batch planned later cannot hold a record from the
    window, since every record in the stream when it was planned had arrived within the retention.
    """
    if selection.batch_ids:
        return list(store.get_batches(pipeline_name, selection.batch_ids).values())
    if selection.from_batch is not None and selection.to_batch is not None:
        _check_range(selection.from_batch, selection.to_batch)
        return list(store.get_batches(pipeline_name, range(selection.from_batch, min(selection.to_batch, newest) + 1)).values())
    if selection.start_time is None or selection.end_time is None or retention is None:
        return []
    try:
        horizon = selection.end_time + retention
    except OverflowError:  # an end such as 9999-12-31, meaning "until now": every batch planned after start
        horizon = datetime.max.replace(tzinfo=UTC)
    found: list[Batch] = []
    first = max(1, _first_planned_since(store, pipeline_name, selection.start_time, newest) - WINDOW_MARGIN)
    for low in range(first, newest + 1, WINDOW_SLICE):
        part = store.get_batches(pipeline_name, range(low, min(newest, low + WINDOW_SLICE - 1) + 1)).values()
        found += [b for b in part if b.created_at <= horizon]
        if any(b.created_at > horizon for b in part):
            break
    return found


# A probe of the bisection reads this many ids from its middle, so that a few ids missing from the ledger
# (left out by a restore) do not stop it.
_PROBE = 4


def _first_planned_since(store: StateStore, pipeline_name: str, since: datetime, newest: int) -> int:
    """An id from which reading on finds every batch planned at or after ``since``: about log2(ids) reads.

    The lowest such batch's id, or lower: a probe that finds no batch counts as "not before", which only
    makes the read that follows start earlier.
    """
    low, high = 1, newest + 1
    while low < high:
        middle = (low + high) // 2
        probe = store.get_batches(pipeline_name, range(middle, min(newest, middle + _PROBE - 1) + 1))
        batch = probe[min(probe)] if probe else None
        if batch is None or batch.created_at >= since:
            high = middle
        else:
            low = batch.batch_id + 1
    return low


def committed_batch(
    pipeline: PipelineConfig, store: StateStore, batch_id: int, kinesis_client: KinesisClient | None = None, now: datetime | None = None
) -> Batch:
    """One chosen batch, read again when its replay starts; the output must still be this pipeline's.

    With ``kinesis_client`` (a restore's replay), its ranges must still be in the stream: a restore names each batch
    it cannot bring back by failing that batch's own task, while the others are restored.
    """
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    batch = store.get_batch(pipeline.name, batch_id)
    if kinesis_client is not None:
        retention = stream_retention(kinesis_client, pipeline.stream, pipeline.read)
        try:
            in_flight.check_retention(pipeline, batch, retention, now or datetime.now(UTC))
        except DataLossError as exc:
            attempt = batch.result.attempt if batch.result is not None else None
            folder = layout.data_path(pipeline.output, batch_id, attempt) if attempt else f"{pipeline.output}/{layout.DATA_DIR}"
            raise BatchNotRestorableError(
                f"pipeline {pipeline.name!r}, batch {batch_id} cannot be restored to {iceberg_table.require_table(pipeline).describe()}: "
                f"its verified files are gone from {folder}, and its records from stream {pipeline.stream} ({exc}). Put its "
                "attempt's files back (from a backup of the output) and run the restore again; until then the table lacks "
                "it, and the pipeline refuses to plan, naming it. Nothing was written."
            ) from exc
    return batch


def check_replayed(
    pipeline: PipelineConfig,
    store: StateStore,
    batch_id: int,
    run_id: str = "",
    restore: bool = False,
    redecode: bool = False,
    rebuild: bool = False,
) -> Batch:
    """A backfilled batch must hold what its first run held: shard by shard, the same rows and checksum; and decode as
    the output holds it (``decoded_differences``), unless ``redecode`` says to accept a new decoding.

    The replay job stages a committed batch's folders (a directory output's rows, the quarantine); they are checked
    there and only then swapped into the batch's own (files.swap_in, finished by the next run if cut short), so a
    refused backfill changes nothing readers see. For a table output, the checked attempt's files then replace the
    batch's in one snapshot, whose id the ledger and the commit record keep. Until that snapshot, readers see the
    batch's earlier files; from it on, the new ones: never both, never none. The replaced files stay for older
    snapshots until snapshot expiry removes them.

    A ``rebuild``'s attempt (decoded with payload.next_schema: ``pipeline`` is config.rebuilt's) is staged as a
    re-decode's, and is not held to the table's columns as they are: its switch changes them (steps/rebuild.py).
    """
    redecode = redecode or rebuild
    batch = store.get_batch(pipeline.name, batch_id)
    first_run = batch.verified_result()
    result = files.read_result(pipeline.output, batch_id)
    record = layout.swap_record_path(pipeline.output, batch_id)
    if files.finish_swap(record):  # this check passed before, and was cut short while swapping: finished now
        log.info("pipeline %s, batch %d: finished swapping in attempt %s, which was verified", pipeline.name, batch_id, result.attempt)
        staged = False
    else:
        # The job stages a committed batch's folders, and names the attempt; one that found no commit record swapped them.
        staged = result.attempt is not None and files.is_file(layout.commit_record_path(pipeline.output, batch_id))
    # A re-decode's attempt waits for its selection's commit: what that commit needs of its files' footers is taken from
    # them as this check reads them, and kept beside the attempt (file_stats: its sidecar).
    collector = file_stats.Collector() if redecode and not restore and pipeline.table is not None else None
    verify.check_files(pipeline, batch_id, result, staged, fit=not rebuild, collector=collector)
    _check_raw(pipeline, batch_id, first_run, result)
    if staged:
        what = "restore" if restore else "backfill"
        found = decoded_differences(pipeline, batch_id, result)
        if found.difference is not None and redecode:
            log.warning("pipeline %s, batch %d: re-decoded as asked (redecode): %s", pipeline.name, batch_id, found.difference.describe())
        decoded.check(pipeline.name, batch_id, found, redecode, what)
        if pipeline.table is None:
            _swap_in(pipeline, batch_id, result)
    elif pipeline.table is None:
        log.warning("pipeline %s, batch %d: the replay job swapped the batch's folder in itself (it found no commit record), "
                    "so its decoded values could not be compared with the earlier ones", pipeline.name, batch_id)  # fmt: skip
    if pipeline.table is not None:
        replayed = replace(batch, result=result)
        if redecode and not restore:  # waits, verified, for its selection's one commit (commit_redecoded)
            if collector is not None and result.attempt is not None:
                file_stats.write_sidecar(pipeline.output, batch_id, result.attempt, collector.summaries())
            staged_batch = replace(batch, staged=result, staged_by=run_id or batch.run_id)
            store.set_staged(staged_batch, expected=BatchStatus.COMMITTED)
            log.info("pipeline %s, batch %d: re-decoded attempt %s verified; it waits for the selection's commit",
                     pipeline.name, batch_id, result.attempt)  # fmt: skip
            return staged_batch
        kind = Commit.RESTORE if restore else Commit.BACKFILL
        ledger = ledger_of(store.get_head(pipeline.name), pipeline, store)
        snapshot_id = commit.commit_to_table(pipeline, replayed, run_id or batch.run_id, kind, ledger)
        quarantined = commit.quarantine_to_table(pipeline, replayed, run_id or batch.run_id)
        # The ledger and the commit record name the replayed attempt, whose files the snapshots hold: the first run's
        # files go with the snapshots before them, and a recovery from the commit records rebuilds what the tables hold.
        # A re-decode staged before this replay is of files this one replaced: dropped, so that its commit cannot put them back.
        batch = replace(replayed, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined, staged=None, staged_by=None)
        store.set_replayed(batch, expected=BatchStatus.COMMITTED)
        commit_records.write_commit_record(pipeline.output, batch)
        files.remove_folder(layout.quarantine_path(pipeline.output, batch_id), missing_ok=True)  # a release's before the table
        return batch
    return replace(batch, result=result)  # a directory's ledger keeps the first run's; the caller reports this run's


def _check_raw(pipeline: PipelineConfig, batch_id: int, first_run: ReplayResult, result: ReplayResult) -> None:
    """The replay read the records the first run read, shard by shard: rows, bounds, checksum and row digest.

    Which of them are quarantined is the decoding's, not the records': rows and bad rows are compared as one count here,
    and which records are quarantined (and why) by the decoded comparison, which names a decoder change as such.
    """
    before, after = first_run.by_shard(), result.by_shard()

    def same(a: ShardResult | None, b: ShardResult | None) -> bool:
        if a is None or b is None:
            return False
        a, b = (replace(r, records=r.records + r.bad_records, bad_records=0) for r in (a, b))
        where = f"pipeline {pipeline.name!r}, batch {batch_id}, shard {a.shard_id}"
        if a.digest is None or b.digest is None or digest_hash(a.digest, where) != digest_hash(b.digest, where):
            # A first run of a release before row digests, or before the hash changed: its digest was checked against
            # its own files then; the rest (rows, bounds, checksum) compare as they are.
            return replace(a, digest=None) == replace(b, digest=None)
        return a == b

    changed = sorted(sid for sid in set(before) | set(after) if not same(before.get(sid), after.get(sid)))
    if changed:
        raise VerificationError(
            f"pipeline {pipeline.name!r}, batch {batch_id}: the backfill wrote different rows than the batch's first run "
            f"for shards {', '.join(changed)} (first run: {[before[s].to_dict() for s in changed if s in before]}; "
            f"now: {[after[s].to_dict() for s in changed if s in after]}). Nothing was replaced: readers still see the "
            "batch as it was"
        )


def decoded_differences(pipeline: PipelineConfig, batch_id: int, result: ReplayResult) -> decoded.Comparison:
    """The staged attempt's decoded values against what the output holds for the batch now, row by row: for a table,
    the batch's data files in the current snapshot; for a directory, the batch's folder; and the quarantine.

    Read from the files themselves, so batches of any release compare, whatever their manifests record."""
    held = _held_files(pipeline, batch_id) + files.parquet_files(layout.quarantine_path(pipeline.output, batch_id))
    if pipeline.table is not None:
        held += [f.file_path for found in quarantine_table.batch_files(quarantine_table.load(pipeline), [batch_id]).values() for f in found]
    staged = files.batch_files(pipeline, batch_id, result, staged=True)
    staged += files.parquet_files(files.quarantine_folder(pipeline, batch_id, result, staged=True))
    before, after = files.read_decoded(held), files.read_decoded(staged)
    if files.decoded_equal(before, after):
        return decoded.Comparison(None, before.num_rows, 0, 0)
    found = decoded.compare(files.decoded_rows(before), files.decoded_rows(after))
    if found.only_before or found.only_after:
        log.info("pipeline %s, batch %d: the output holds %d rows the replay did not write, and lacks %d it wrote",
                 pipeline.name, batch_id, found.only_before, found.only_after)  # fmt: skip
    return found


def _held_files(pipeline: PipelineConfig, batch_id: int) -> list[str]:
    """The files that hold the batch's rows for readers now: its folder's, or those of the table's current snapshot."""
    if pipeline.table is None:
        return files.parquet_files(layout.batch_path(pipeline.output, batch_id))
    table = iceberg_table.load_table(pipeline)
    return [f.file_path for f in iceberg_table.batch_data_files(table, batch_id)] if table is not None else []


def _swap_in(pipeline: PipelineConfig, batch_id: int, result: ReplayResult) -> None:
    """A directory output's verified attempt's staged folders into the batch's own: its rows and its quarantine."""
    attempt = result.attempt or ""
    output = pipeline.output
    moves = [
        (layout.staged_data_path(output, batch_id, attempt), layout.batch_path(output, batch_id)),
        (layout.staged_quarantine_path(output, batch_id, attempt), layout.quarantine_path(output, batch_id)),
    ]
    files.swap_in(layout.swap_record_path(output, batch_id), moves)
    files.remove_folder(layout.staging_path(output, batch_id), missing_ok=True, prune_parent=True)


def _earliest(batch: Batch) -> datetime:
    arrivals = [r.start_arrival for r in batch.ranges if r.start_arrival is not None]
    return min(arrivals) if arrivals else batch.created_at


@dataclass(frozen=True)
class Estimate:
    """What reading some ranges costs on each path: by GetRecords at the shared per-shard read limit (calls, time), and
    over enhanced fan-out at a consumer's own 2 MiB/s a shard (time, subscriptions, the bytes' price). Records and bytes
    are None when unknown."""

    shards: int
    records: int | None
    bytes: int | None
    get_records_calls: int | None
    seconds_at_limit: float | None
    efo_seconds: float | None = None  # the slowest shard's bytes at 2 MiB/s
    subscriptions: int | None = None  # one a shard, and one more each 5 minutes a subscription lasts at most

    @property
    def efo_retrieval_dollars(self) -> float | None:
        """The bytes' enhanced fan-out data retrieval at EFO_DOLLARS_PER_GB: an estimate, at one region's list price."""
        return None if self.bytes is None else self.bytes / 2**30 * EFO_DOLLARS_PER_GB


# Enhanced fan-out's own read limit, and its prices as an estimate: Kinesis's provisioned-mode list prices in us-east-1
# (read 2026-11; other regions and on-demand mode differ): per GB a consumer reads, and per hour a consumer is
# registered, for each shard of the stream, whether it reads or not.
EFO_BYTES_PER_SECOND = 2 * 1024 * 1024
EFO_SUBSCRIPTION_SECONDS = 300
EFO_DOLLARS_PER_GB = 0.013
EFO_DOLLARS_PER_SHARD_HOUR = 0.015


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
    pushed = {r.shard_id: sizes.get(r.shard_id, 0) / EFO_BYTES_PER_SECOND for r in ranges}
    subscriptions = sum(1 + int(s // EFO_SUBSCRIPTION_SECONDS) for s in pushed.values())
    return Estimate(
        len(ranges),
        sum(records.values()),
        sum(sizes.values()),
        sum(calls.values()),
        seconds,
        max(pushed.values(), default=0.0),
        subscriptions,
    )


def estimate_batch(batch: Batch, limits: ReadConfig, planned: Mapping[str, tuple[int, int]] | None = None) -> Estimate:
    """A batch's cost: exact from its manifest when it has one, else from planning's per-range estimates."""
    if batch.result is not None:
        counts = {s.shard_id: s.records + s.bad_records for s in batch.result.shards}
        return estimate(batch.ranges, counts, {s.shard_id: s.bytes for s in batch.result.shards}, limits)
    if planned and len(planned) == len(batch.ranges):
        return estimate(batch.ranges, {k: v[0] for k, v in planned.items()}, {k: v[1] for k, v in planned.items()}, limits)
    return estimate(batch.ranges, None, None, limits)


def describe(batch: Batch, est: Estimate, consumer: str | None = None) -> str:
    """A dry run's account of one batch: its ranges and what replaying them costs on each path, the one the pipeline
    reads by (read.consumer: enhanced fan-out, else GetRecords) first."""
    lines = [f"batch {batch.batch_id} ({batch.status.value}), {est.shards} shard ranges:"]
    lines += [f"  {r.describe()}" for r in batch.ranges]
    if est.records is None:
        lines.append("  records and bytes: unknown until read; reading stays within the per-shard budget")
        return "\n".join(lines)
    shared = (
        f"by GetRecords{'' if consumer is None else ' (without read.consumer)'}: {est.get_records_calls} calls against the "
        f"shard budget every consumer of the stream shares, about {est.seconds_at_limit:.1f}s at the per-shard read limit"
    )
    retrieval = est.efo_retrieval_dollars or 0.0
    pushed = (
        f"over enhanced fan-out{f' (consumer {consumer})' if consumer else ' (with read.consumer)'}: about {est.efo_seconds or 0.0:.1f}s "
        f"at the consumer's own 2 MiB/s a shard, {est.subscriptions} subscriptions, ${retrieval:.4f} of data retrieval; a "
        f"registered consumer also costs ${EFO_DOLLARS_PER_SHARD_HOUR} a shard-hour for each shard of the stream whether it "
        f"reads or not (${EFO_DOLLARS_PER_SHARD_HOUR * 24 * est.shards:.2f} a day for {est.shards} shards; us-east-1 list prices, "
        "an estimate)"
    )
    lines.append(f"  {est.records} records, {est.bytes} bytes:")
    lines += [f"  - {shared}", f"  - {pushed}"] if consumer is None else [f"  - {pushed}", f"  - {shared}"]
    return "\n".join(lines)


@dataclass(frozen=True)
class Restore:
    """What a restore puts back: each committed batch the table's current snapshot lacks (or holds other rows of), and
    where it comes from. A batch whose verified files are still in the output is committed from them; one whose files
    are gone is replayed from the stream, while its ranges are within the retention; the rest cannot come back."""

    pipeline_name: str
    ledger: Ledger
    state: TableState
    from_files: tuple[int, ...]
    from_stream: tuple[int, ...]
    lost: tuple[int, ...]
    metadata_lost: bool  # the catalog names a metadata file that is gone: its entry is dropped before the table is made
    # The newest metadata file of the pipeline's own table at its location, which the catalog no longer names (dropped, or
    # its newest metadata lost): registered again before anything is restored, never a second table made beside it.
    register: str | None = None
    # Re-decoded batches the table holds in an older decoding (rolled back past their re-decode): their verified files
    # go back in one snapshot, which records the ledger's count of re-decodes again.
    decodings: tuple[int, ...] = ()

    def describe(self) -> str:
        held = self.state.holdings.describe() if self.state.exists else "nothing (there is no table)"
        lines = [
            f"pipeline {self.pipeline_name}: the table holds {held}; the ledger says batches 1 to {self.ledger.last} are committed.",
            f"  from the output's verified files: {len(self.from_files)} batches ({listed(self.from_files) or 'none'})",
            f"  replayed from the stream: {len(self.from_stream)} batches ({listed(self.from_stream) or 'none'})",
        ]
        if self.decodings:
            lines.append(
                f"  held in an older decoding (the table was rolled back past a re-decode): {len(self.decodings)} batches "
                f"({listed(self.decodings)}), their re-decoded files put back in one snapshot"
            )
        if self.metadata_lost:
            lines.append("  the catalog's entry names a metadata file that is gone: it is dropped")
        if self.register is not None:
            lines.append(f"  the pipeline's own table is registered again in its catalog from {self.register}, at its location")
        elif not self.state.exists:
            lines.append("  the table is created by the first batch restored")
        if self.lost:
            lines.append(
                f"  CANNOT be restored: {len(self.lost)} batches ({listed(self.lost)}): their files are gone from the output "
                "and their ranges from the stream (past its retention)"
            )
        return "\n".join(lines)


def plan_restore(pipeline: PipelineConfig, kinesis_client: KinesisClient, store: StateStore, now: datetime | None = None) -> Restore:
    """Which committed batches the table lacks, and where each comes back from; reads no data file and writes nothing.

    Refused when the table holds a batch the ledger has not committed (a restore only puts back), and when the
    pipeline has no ledger (recover the state table first).
    """
    refuse(ownership.owner_refusal(pipeline, load_root(pipeline)))
    iceberg_table.require_table(pipeline)  # a directory pipeline has no table to restore
    head = store.get_head(pipeline.name)
    if head.version == 0:
        raise BackfillError(
            f"pipeline {pipeline.name!r}: state table {pipeline.state_table} holds no ledger for the pipeline, so there is "
            f"nothing to restore the table to. {recovery_hint(pipeline)}"
        )
    ledger = ledger_of(head, pipeline, store)
    metadata_lost = False
    try:
        table = iceberg_table.existing_table(pipeline)
    except TableMetadataLostError:
        table, metadata_lost = None, True
    state = iceberg_table.table_state(table)
    mismatch = compare(state, ledger, ledger_rows(state, ledger))
    taken = iceberg_table.location_tables(pipeline) if table is None else None
    if mismatch is not None and taken is not None and not taken.own(pipeline):  # one location, one table
        raise BackfillError(
            f"{describe_mismatch(pipeline, state, ledger, mismatch, taken)} A restore never creates a table at a location "
            "that holds another table's metadata. Nothing was written."
        )
    if mismatch is not None and mismatch.extra:
        raise BackfillError(
            f"{describe_mismatch(pipeline, state, ledger, mismatch, taken)} A restore only puts back batches the ledger "
            "committed; it never removes any. Nothing was written."
        )
    wanted = sorted(set(mismatch.missing if mismatch else ()) | set(_differing(pipeline, table, state, ledger, mismatch)))
    # Held with other rows: the verified attempt's files replace them if the table no longer references any of them (another
    # writer's delete rewrote them); else (some are still the batch's in the table) a new attempt, from the stream, does.
    held = {b for b in wanted if b in state.holdings}
    retention = stream_retention(kinesis_client, pipeline.stream, pipeline.read) if wanted else None
    from_files, from_stream, lost = [], [], []
    for low in range(0, len(wanted), WINDOW_SLICE):
        chosen = store.get_batches(pipeline.name, wanted[low : low + WINDOW_SLICE])
        for batch_id in wanted[low : low + WINDOW_SLICE]:
            batch = chosen[batch_id]
            if _files_kept(pipeline, batch) and (batch_id not in held or not _attempt_in_table(pipeline, table, batch)):
                from_files.append(batch_id)
                continue
            try:
                in_flight.check_retention(pipeline, batch, retention or timedelta(0), now or datetime.now(UTC))
                from_stream.append(batch_id)
            except DataLossError:
                lost.append(batch_id)
    if len(from_stream) > MAX_BATCHES_PER_RUN:
        log.warning("pipeline %s: %d batches need a replay from the stream; this run replays the first %d, run the restore "
                    "again for the rest", pipeline.name, len(from_stream), MAX_BATCHES_PER_RUN)  # fmt: skip
    register = taken.newest if taken is not None else None
    behind = _decodings_behind(pipeline, store, table, ledger, set(wanted)) if mismatch is not None and mismatch.redecodes else ()
    return Restore(pipeline.name, ledger, state, tuple(from_files), tuple(from_stream), tuple(lost), metadata_lost, register, behind)


def _decodings_behind(pipeline: PipelineConfig, store: StateStore, table: Any, ledger: Ledger, wanted: set[int]) -> tuple[int, ...]:
    """The re-decoded batches (the ledger's figures say so) whose files in the table's current snapshot are not their
    verified attempt's: a rollback past their re-decode brought back an older decoding. Read from the figures (a
    hundred batches a read, as the page reads them) and one scan of the table a hundred batches at a time.

    Refused, writing nothing, when one of them no longer has its verified files: the restore cannot put its decoding
    back, and a replay from the stream could not either while the table is behind the ledger."""
    where = f"pipeline {pipeline.name!r}: {iceberg_table.require_table(pipeline).describe()}"
    redecoded: list[int] = []
    for low in range(1, ledger.last + 1, WINDOW_SLICE):
        summaries = store.get_summaries(pipeline.name, range(low, min(ledger.last, low + WINDOW_SLICE - 1) + 1))
        redecoded += [b for b in sorted(summaries) if summaries[b].figures.get("redecoded") and b not in wanted]
    behind: list[int] = []
    gone: list[int] = []
    for low in range(0, len(redecoded), MAX_BATCHES_PER_RUN):
        ids = redecoded[low : low + MAX_BATCHES_PER_RUN]
        held = iceberg_table.selection_data_files(table, ids) if table is not None else {}
        chosen = store.get_batches(pipeline.name, ids)
        for batch_id in ids:
            attempt = chosen[batch_id].verified_result().attempt or ""
            folder = iceberg_table.iceberg_location(layout.data_path(pipeline.output, batch_id, attempt)) + "/"
            if all(f.file_path.startswith(folder) for f in held.get(batch_id, [])):
                continue  # its re-decoded files, or none (every record quarantined): as the ledger says
            (behind if _files_kept(pipeline, chosen[batch_id]) else gone).append(batch_id)
    if gone:
        raise BackfillError(
            f"{where} holds batches {listed(gone)} in an older decoding (it was rolled back past their re-decode), and "
            "their re-decoded files are gone from the output: the restore cannot put that decoding back. Put the "
            "attempts' files back from a backup of the output, then run the restore again. Nothing was written."
        )
    return tuple(behind)


def _differing(pipeline: PipelineConfig, table: Any, state: TableState, ledger: Ledger, mismatch: Mismatch | None) -> list[int]:
    """Batches the table holds with another number of rows than the ledger verified (rows deleted or added by another
    writer). Where no snapshot records the holdings, the guard's comparison named them already (``mismatch.differing``);
    else they are looked for only when the snapshot's row count says some are, from the manifests' partition summaries
    and the ledger's figures (``ledger.verified``: no range or manifest is read)."""
    if table is None or mismatch is None or not mismatch.records:
        return []
    where = f"pipeline {pipeline.name!r}: {iceberg_table.require_table(pipeline).describe()}"
    if state.deletes:
        raise BackfillError(
            f"{where} holds {state.deletes} rows deleted by delete files, which another writer made (kinesis-replay never "
            "writes them), and a restore replaces a batch's data files but cannot remove delete files. Apply them first "
            "(Spark: CALL <catalog>.system.rewrite_data_files(table => '<table>', options => map('delete-file-threshold', '1'))), "
            "then run the restore again: it replays the batches whose rows are gone. Nothing was written."
        )
    if mismatch.differing:
        return [batch_id for batch_id, _, _ in mismatch.differing]
    counts = iceberg_table.partition_counts(table)
    strangers = sorted(b for b in counts if not 1 <= b <= ledger.last and b != ledger.in_flight)
    if strangers:
        raise BackfillError(
            f"{where} holds rows of batch_id {listed(strangers)}, which the ledger has not committed (batches 1 to "
            f"{ledger.last}): another writer added them. A restore puts back only committed batches; delete those rows "
            "with Iceberg's tools, then run the restore again. Nothing was written."
        )
    verified = ledger.verified(range(1, ledger.last + 1)) if ledger.verified is not None else {}
    return [b for b in range(1, ledger.last + 1) if b in state.holdings and counts.get(b, 0) != verified.get(b, 0)]


def _attempt_in_table(pipeline: PipelineConfig, table: Any, batch: Batch) -> bool:
    """Some of the batch's files in the table's current snapshot are its verified attempt's."""
    attempt = batch.result.attempt if batch.result is not None else None
    if table is None or attempt is None:
        return False
    folder = iceberg_table.iceberg_location(layout.data_path(pipeline.output, batch.batch_id, attempt))
    return any(f.file_path.startswith(folder + "/") for f in iceberg_table.batch_data_files(table, batch.batch_id))


def _files_kept(pipeline: PipelineConfig, batch: Batch) -> bool:
    """The batch's verified attempt still has its files in the output (or had none: every record quarantined or gone)."""
    result = batch.result
    if result is None or result.attempt is None:
        return False
    if result.records == 0:
        return True
    return bool(files.parquet_files(layout.data_path(pipeline.output, batch.batch_id, result.attempt)))


def restore_from_files(pipeline: PipelineConfig, store: StateStore, plan: Restore, run_id: str) -> list[int]:
    """Commit each batch whose verified files are still in the output, after checking them again (rows, digests);
    returns the batches whose files no longer verify, for a replay from the stream."""
    if plan.metadata_lost:
        catalog = iceberg_table.load_catalog(pipeline)
        identifier = iceberg_table.require_table(pipeline).identifier
        log.warning("pipeline %s: dropping the catalog's entry for %s, whose metadata file is gone", pipeline.name, identifier)
        catalog.drop_table(identifier)
    if plan.register is not None:  # the pipeline's own table, which the catalog no longer names: back, with its history
        catalog = iceberg_table.load_catalog(pipeline)
        identifier = iceberg_table.require_table(pipeline).identifier
        log.warning("pipeline %s: registering %s again from %s", pipeline.name, identifier, plan.register)
        catalog.register_table(identifier, plan.register)
        iceberg_table.check_table_owner(pipeline, catalog.load_table(identifier))
        # Its snapshot references the files of every batch it held, those that can never come back among them.
        iceberg_table.forget_gone_batches(pipeline, plan.lost, run_id)
    if plan.decodings:
        _restore_decodings(pipeline, store, plan, run_id)
    failed = []
    for batch_id in plan.from_files:
        batch = store.get_batch(pipeline.name, batch_id)
        result = batch.verified_result()
        try:
            verify.check_files(pipeline, batch_id, result)
        except VerificationError as exc:
            log.warning("pipeline %s, batch %d: its files no longer verify (%s); it is replayed from the stream",
                        pipeline.name, batch_id, exc)  # fmt: skip
            failed.append(batch_id)
            continue
        _commit_restored(pipeline, store, batch, run_id, plan.ledger)
    return failed


def _restore_decodings(pipeline: PipelineConfig, store: StateStore, plan: Restore, run_id: str) -> None:
    """Put the re-decoded batches' verified files back in one snapshot, whose holdings record the ledger's count of
    re-decodes again (the guard's comparison passes only once all of them are back); found, not made again, by a
    resumed restore. Their files are checked first (rows, digests): one that no longer verifies refuses it, writing nothing."""
    chosen = store.get_batches(pipeline.name, plan.decodings)
    for batch_id, batch in chosen.items():
        try:
            verify.check_files(pipeline, batch_id, batch.verified_result())
        except VerificationError as exc:
            raise BackfillError(
                f"pipeline {pipeline.name!r}, batch {batch_id}: its re-decoded files no longer verify ({exc}), so the restore "
                "cannot put its decoding back. Nothing was written."
            ) from exc
    replacements = {b: files.batch_files(pipeline, b, chosen[b].verified_result()) for b in plan.decodings}
    records = {b: (chosen[b].verified_result().records,) * 2 for b in plan.decodings}
    key = {iceberg_table.PIPELINE_PROPERTY: pipeline.name, RESTORE_PROPERTY: run_id}
    check = commit.table_check(pipeline, Commit.RESTORE, plan.decodings[0], plan.ledger)
    properties = {**key, iceberg_table.RUN_PROPERTY: run_id}
    counted = plan.ledger.redecodes
    snapshot_id = iceberg_table.replace_batches(pipeline, replacements, records, properties, key, check, lambda _: counted)
    for batch_id in plan.decodings:
        restored = replace(chosen[batch_id], snapshot_id=snapshot_id)
        store.set_replayed(restored, expected=BatchStatus.COMMITTED)
        commit_records.write_commit_record(pipeline.output, restored)
    log.info("pipeline %s: re-decoded batches %s put back in their decoding in snapshot %d", pipeline.name,
             listed(plan.decodings), snapshot_id)  # fmt: skip


def _commit_restored(pipeline: PipelineConfig, store: StateStore, batch: Batch, run_id: str, ledger: Ledger) -> Batch:
    snapshot_id = commit.commit_to_table(pipeline, batch, run_id, Commit.RESTORE, ledger)
    quarantined = commit.quarantine_to_table(pipeline, batch, run_id)  # found as it is, unless the quarantine table lost it too
    restored = replace(batch, snapshot_id=snapshot_id, quarantine_snapshot_id=quarantined, staged=None, staged_by=None)
    store.set_replayed(restored, expected=BatchStatus.COMMITTED)
    commit_records.write_commit_record(pipeline.output, restored)
    log.info("pipeline %s: batch %d restored to the table in snapshot %d", pipeline.name, batch.batch_id, snapshot_id)
    return restored
