"""The rules between an output root and the state table, decided over snapshots made by hand: no file, no endpoint, no Spark.

Each decision of kinesis_replay.core.ownership, and the whole text of each refusal it returns (as its error class says
whether a retry helps). tests/unit/test_output_root.py holds the same rules to a real output folder, through the loader.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import OutputOwnershipError, StateLostError, TableMismatchError
from kinesis_replay.core.holdings import Commit, Holdings, Ledger, TableState
from kinesis_replay.core.output_root import Nesting, OtherRoot, Owner, RecordedFormat, RootSnapshot, TableSnapshot
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.refusals import (
    CommitRecordsOfAnother,
    FormatChanged,
    HoldsAnotherRoot,
    InsideAnotherRoot,
    KeptWithAnotherStateTable,
    NoOwnerRecord,
    OfAnotherStream,
    OutputLacksCommitted,
    OwnedByAnotherPipeline,
    Refusal,
    StateBehindOutput,
    StateMissingButOutputHolds,
    StreamCreatedAgain,
    TableDisagrees,
    refuse,
)
from kinesis_replay.core.state import Batch, BatchStatus, Head

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
ROOT = "/lake/raw/orders"


def pipeline(**changes: object) -> PipelineConfig:
    entry = {
        "name": "orders", "stream": "orders-stream", "output": ROOT, "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"}, **changes,
    }  # fmt: skip
    (p,) = parse_config({"pipelines": [entry]})
    return p


ORDERS = pipeline()
OWNER = Owner("orders", "orders-stream", "kr-state", "2026-11-01T00:00:00+00:00", 0, "iceberg", "2026-10-01T00:00:00+00:00")
OWNED = RootSnapshot(ROOT, OWNER, RecordedFormat("iceberg", "as its owner record says"))
NEW = RootSnapshot(ROOT, None, None, committed=(), results=())


def record(batch_id: int, name: str = "orders", stream: str = "orders-stream") -> Batch:
    rng = SequenceRange("shardId-000000000000", 10, 19)
    return Batch(name, batch_id, BatchStatus.COMMITTED, (rng,), stream, "run", NOW, NOW)


def text(refusal: Refusal | None) -> str:
    assert refusal is not None
    return refusal.message()


def test_the_owner_pipeline_stream_format_and_table_go_on() -> None:
    assert ownership.owner_refusal(ORDERS, OWNED) is None
    refuse(ownership.owner_refusal(ORDERS, OWNED))  # nothing to raise


def test_a_root_with_no_owner_record_is_refused_to_a_replay_backfill_or_commit() -> None:
    refusal = ownership.owner_refusal(ORDERS, NEW)
    assert refusal == NoOwnerRecord(ORDERS)
    assert text(refusal) == (
        f"pipeline 'orders': output {ROOT} has no owner record (_kinesis_replay_owner.json); the pipeline's plan writes it "
        "before anything else, so the output was moved or deleted since. If output is still where the pipeline's batches "
        "are, its next run's plan writes the record again (once the output's commit records are found to be the "
        "pipeline's); else point output back to where they are. Nothing was written."
    )
    with pytest.raises(OutputOwnershipError, match="has no owner record"):
        refuse(refusal)


def test_another_pipelines_or_streams_root_is_refused() -> None:
    payments = pipeline(name="payments")
    assert text(ownership.owner_refusal(payments, OWNED)) == (
        f"pipeline 'payments' may not write output {ROOT}: it belongs to pipeline 'orders' (stream orders-stream, state "
        "table kr-state, since 2026-11-01T00:00:00+00:00). Both would number their batches from 1 and replace each "
        "other's. Give each pipeline an output root of its own. Nothing was written."
    )
    other_stream = pipeline(stream="other")
    assert ownership.owner_refusal(other_stream, OWNED) == OfAnotherStream(other_stream, "orders-stream")
    assert text(ownership.owner_refusal(other_stream, OWNED)) == (
        f"pipeline 'orders': output {ROOT} holds stream orders-stream, and the config now names stream other; shard ids "
        "of two streams would share one set of checkpoints. Give the new stream a new pipeline and output root. Nothing "
        "was written."
    )
    assert isinstance(ownership.owner_refusal(payments, OWNED), OwnedByAnotherPipeline)


@pytest.mark.parametrize(("configured", "created"), [("directory", "iceberg"), ("iceberg", "directory")])
def test_a_root_is_written_only_in_the_format_it_was_created_in(configured: str, created: str) -> None:
    p = pipeline(output_format=configured)
    root = replace(OWNED, owner=replace(OWNER, output_format=created), format=RecordedFormat(created, "its folders say"))
    refusal = ownership.owner_refusal(p, root)
    assert refusal == FormatChanged(p, created, "its folders say")
    default = " (output_format's default, when a pipeline does not set it)" if configured == "iceberg" else ""
    assert text(refusal).startswith(
        f"pipeline 'orders': output {ROOT} was created as a {created} output (its folders say), and the pipeline's "
        f"output_format is now {configured}{default}. Writing it so would "
    )
    assert text(refusal).endswith(
        f"Set output_format: {created} for pipeline 'orders' in the pipelines config to go on as before; a {configured} "
        "output needs a new output root (a new pipeline). Nothing was written."
    )
    assert ownership.format_refusal(p, None) is None  # a new or empty root: any format


def test_another_state_table_is_a_lost_state_unless_a_new_table_is_allowed() -> None:
    moved = pipeline(state_table="kr-state-2")
    refusal = ownership.owner_refusal(moved, OWNED)
    assert refusal == KeptWithAnotherStateTable(moved, "kr-state")
    assert refusal.as_error().__class__ is StateLostError
    assert "Point state_table back to kr-state, or, if the table was moved on purpose, rebuild its state in kr-state-2. " in text(refusal)
    assert '{"recover_from_output": true, "dry_run": true}' in text(refusal)
    assert ownership.owner_refusal(moved, OWNED, new_table=True) is None


def test_before_a_plan_a_new_state_table_is_a_fresh_start_only_while_nothing_is_committed() -> None:
    moved = pipeline(state_table="kr-state-2")
    assert ownership.before_plan(moved, Head(), replace(OWNED, committed=())) is None
    assert isinstance(ownership.before_plan(moved, Head(), replace(OWNED, committed=(1, 2))), KeptWithAnotherStateTable)
    adopted = replace(OWNED, owner=replace(OWNER, adopted=3), committed=())  # batches of a release before commit records
    assert isinstance(ownership.before_plan(moved, Head(), adopted), KeptWithAnotherStateTable)


def test_before_a_plan_a_missing_head_over_committed_batches_is_refused() -> None:
    refusal = ownership.before_plan(ORDERS, Head(), replace(OWNED, committed=(1, 2, 3)))
    assert refusal == StateMissingButOutputHolds(ORDERS, (1, 2, 3))
    assert text(refusal).startswith(
        f"pipeline 'orders': state table kr-state holds no state for the pipeline, but its output {ROOT} holds 3 committed "
        "batches (up to batch 3). The table was deleted, emptied or replaced; planning now would start the stream over and "
        'replace those batches. To rebuild the state from the output, trigger kinesis_replay_orders with {"recover_from_output"'
    )
    assert ownership.before_plan(ORDERS, Head(), replace(OWNED, committed=())) is None  # a fresh start


def test_a_missing_head_over_a_root_of_a_release_before_commit_records_is_not_told_to_recover() -> None:
    older = RootSnapshot(ROOT, None, RecordedFormat("iceberg", "its folders say"), committed=(), results=(1, 2))
    refusal = ownership.before_plan(ORDERS, Head(), older)
    assert refusal == StateMissingButOutputHolds(ORDERS, ())
    assert "holds results of batches written before it kept commit records (_manifests)" in text(refusal)
    assert "restore the state table from a backup, or land the stream in a new output root (a new pipeline)." in text(refusal)
    assert "recover_from_output" not in text(refusal)


def test_before_a_plan_a_head_ahead_of_or_behind_the_output_is_refused() -> None:
    ahead = ownership.before_plan(ORDERS, Head(next_batch_id=6, in_flight=5, version=9), replace(OWNED, holds_last=False))
    assert ahead == OutputLacksCommitted(ORDERS, 4)
    assert text(ahead) == (
        f"pipeline 'orders': state table kr-state says batches up to 4 are committed, but output {ROOT} does not hold batch "
        "4. The output was changed in the config, moved or deleted. Point output back to where the batches are, or move "
        "all of it (with its _commits, _manifests and owner record) to the new root. Nothing was written."
    )
    behind = ownership.before_plan(ORDERS, Head(next_batch_id=3, version=3), replace(OWNED, holds_last=True, holds_next=True))
    assert behind == StateBehindOutput(ORDERS, 3)
    assert text(behind).startswith(
        f"pipeline 'orders': state table kr-state is behind output {ROOT}: the table would plan batch 3 anew, and the output "
        "already holds it committed (a table restored from an old backup?). Planning would replace it. Delete the "
        "pipeline's items from the table (those under pipeline#orders and pipeline#orders#shards#<k>: docs/state-table.md), "
        "then recover. "
    )
    in_step = replace(OWNED, holds_last=True, holds_next=False)
    assert ownership.before_plan(ORDERS, Head(next_batch_id=4, version=4), in_step) is None


@pytest.mark.parametrize(
    ("newest", "says"),
    [
        (record(7, name="payments", stream="payments-stream"), "are of pipeline 'payments' (stream payments-stream), whose output it is."),
        (record(7, stream="other-stream"), "hold stream other-stream, and the config now names stream orders-stream;"),
    ],
)
def test_a_root_whose_owner_record_is_gone_is_another_pipelines_when_its_newest_commit_record_says_so(newest: Batch, says: str) -> None:
    root = RootSnapshot(ROOT, None, RecordedFormat("iceberg", "its folders say"), committed=(1, 7), results=(1, 7), newest=newest)
    refusal = ownership.before_plan(ORDERS, Head(next_batch_id=8, version=8), root)
    assert refusal == CommitRecordsOfAnother(ORDERS, 7, newest.pipeline_name, newest.stream)
    assert (
        f"output {ROOT} has no owner record (_kinesis_replay_owner.json: deleted?), and its commit records (_commits, up to batch 7)"
        in text(refusal)
    )
    assert says in text(refusal)
    assert ownership.records_refusal(ORDERS, replace(root, newest=record(7))) is None  # the pipeline's own records


def test_a_stream_created_again_under_the_name_is_refused() -> None:
    created = datetime(2026, 11, 20, tzinfo=UTC)
    refusal = ownership.stream_refusal(ORDERS, created, OWNER)
    assert refusal == StreamCreatedAgain(ORDERS, created.isoformat(), OWNER.stream_created or "")
    assert text(refusal).startswith(
        "pipeline 'orders': stream orders-stream was created at 2026-11-20T00:00:00+00:00, but output "
        f"{ROOT} holds batches of a stream of that name created at 2026-10-01T00:00:00+00:00: the stream was deleted"
    )
    assert ownership.stream_refusal(ORDERS, datetime.fromisoformat(OWNER.stream_created or ""), OWNER) is None
    assert ownership.stream_refusal(ORDERS, created, replace(OWNER, stream_created=None)) is None  # an older record
    assert isinstance(ownership.claim(ORDERS, OWNED, NOW, created), StreamCreatedAgain)


def test_the_first_claim_of_a_new_root_records_owner_format_and_stream_and_a_dry_run_records_nothing() -> None:
    created = datetime(2026, 10, 1, tzinfo=UTC)
    verdict = ownership.claim(ORDERS, replace(NEW, nesting=Nesting()), NOW, created)
    assert verdict == ownership.Claim(
        Owner("orders", "orders-stream", "kr-state", NOW.isoformat(), 0, "iceberg", created.isoformat()), replace=False
    )
    assert ownership.claim(ORDERS, replace(NEW, nesting=Nesting()), NOW, created, dry_run=True) == ownership.Claim()
    assert ownership.claim(ORDERS, OWNED, NOW, created) == ownership.Claim()  # claimed already, with nothing to fill in


def test_a_claim_fills_in_what_an_older_owner_record_lacks() -> None:
    older = replace(OWNED, owner=replace(OWNER, output_format=None, stream_created=None), format=None)
    verdict = ownership.claim(ORDERS, older, NOW, datetime(2026, 10, 1, tzinfo=UTC))
    assert verdict == ownership.Claim(OWNER, replace=True, filled=True)


def test_a_claim_of_a_root_of_a_release_before_owner_records_adopts_its_batches() -> None:
    older = RootSnapshot(ROOT, None, RecordedFormat("iceberg", "its folders say"), committed=(), results=(1, 2, 5))
    verdict = ownership.claim(ORDERS, older, NOW)
    assert isinstance(verdict, ownership.Claim) and verdict.record is not None
    assert verdict.record.adopted == 5
    assert isinstance(ownership.claim(pipeline(output_format="directory"), older, NOW), FormatChanged)


def test_a_claim_never_takes_over_another_pipelines_root_nor_adopts_a_new_state_table_once_anything_is_committed() -> None:
    assert isinstance(ownership.claim(pipeline(name="payments"), OWNED, NOW), OwnedByAnotherPipeline)
    moved = pipeline(state_table="kr-state-2")
    assert isinstance(ownership.claim(moved, replace(OWNED, committed=(1,)), NOW), KeptWithAnotherStateTable)
    verdict = ownership.claim(moved, replace(OWNED, committed=()), NOW)
    assert isinstance(verdict, ownership.Claim) and verdict.replace and verdict.record is not None
    assert verdict.record.state_table == "kr-state-2"


def test_a_new_root_inside_or_holding_another_pipelines_root_is_refused_naming_it() -> None:
    outer = OtherRoot("/lake/raw", "/lake/raw/_kinesis_replay_owner.json", replace(OWNER, pipeline_name="raw"))
    inside = ownership.claim(ORDERS, replace(NEW, nesting=Nesting(around=(outer,))), NOW, dry_run=True)
    assert inside == InsideAnotherRoot(ORDERS, outer)
    assert text(inside).startswith(
        f"pipeline 'orders' may not claim output {ROOT}: it is inside output /lake/raw of pipeline 'raw' (stream "
        "orders-stream, state table kr-state; owner record /lake/raw/_kinesis_replay_owner.json). "
    )
    unreadable = OtherRoot("/lake/raw/orders/x", "/lake/raw/orders/x/_kinesis_replay_owner.json", None, "AccessDenied")
    holds = ownership.claim(ORDERS, replace(NEW, nesting=Nesting(inside=unreadable)), NOW)
    assert holds == HoldsAnotherRoot(ORDERS, unreadable)
    record = "/lake/raw/orders/x/_kinesis_replay_owner.json"
    assert f"it holds output /lake/raw/orders/x of a pipeline whose owner record {record} cannot be read here (AccessDenied)" in text(holds)


def test_a_root_claimed_before_nesting_was_refused_goes_on_with_a_warning_as_does_a_search_cut_short() -> None:
    outer = OtherRoot("/lake/raw", "/lake/raw/_kinesis_replay_owner.json", replace(OWNER, pipeline_name="raw"))
    verdict = ownership.claim(ORDERS, replace(OWNED, nesting=Nesting(around=(outer,))), NOW)
    assert isinstance(verdict, ownership.Claim) and verdict.record is None
    assert verdict.warnings[0].startswith(f"pipeline orders: output {ROOT} is inside output /lake/raw of pipeline 'raw'")
    cut_short = ownership.claim(ORDERS, replace(NEW, nesting=Nesting(complete=False)), NOW)
    assert isinstance(cut_short, ownership.Claim) and cut_short.record is not None
    assert "holds more folders than a claim looks through" in cut_short.warnings[0]


def table(*held: int, exists: bool = True) -> TableSnapshot:
    return TableSnapshot(TableState(Holdings.of(held, 10 * len(held)), 10 * len(held), exists=exists))


def test_a_table_that_holds_what_the_ledger_committed_goes_on() -> None:
    assert ownership.table_refusal(ORDERS, table(1, 2, 3), Ledger(3)) is None
    assert ownership.table_refusal(ORDERS, None, Ledger(3)) is None  # no table loaded: a directory output


def test_a_table_rolled_back_is_refused_naming_the_batches_it_lacks_and_the_restore() -> None:
    refusal = ownership.table_refusal(ORDERS, table(1), Ledger(3))
    assert isinstance(refusal, TableDisagrees) and isinstance(refusal.as_error(), TableMismatchError)
    message = text(refusal)
    assert "; it lacks batches 2-3" in message or "; it lacks batches 2, 3" in message
    assert "Was it rolled back to an older snapshot, its metadata restored from an older file, or created anew?" in message
    assert '{"restore_table": true, "dry_run": true}' in message
    assert message.endswith("Nothing was written.")


def test_a_table_ahead_of_the_ledger_is_refused_with_the_recovery_as_the_way_back() -> None:
    message = text(ownership.table_refusal(ORDERS, table(1, 2, 3, 4), Ledger(3)))
    assert "which the ledger has not committed" in message
    assert '{"recover_from_output": true, "dry_run": true}' in message


def test_a_commit_refuses_a_table_that_lacks_earlier_batches_and_a_restore_only_one_that_holds_more() -> None:
    verdict = ownership.commit_verdict(ORDERS, Commit.REGULAR, 4, Ledger(3, 4), table(1, 2).state, None)
    assert isinstance(verdict, TableDisagrees)
    assert text(verdict).endswith("Batch 4 was not committed to the table, and no checkpoint moved.")
    assert ownership.commit_verdict(ORDERS, Commit.RESTORE, 2, Ledger(3), table(1).state, None) is None
    assert isinstance(ownership.commit_verdict(ORDERS, Commit.RESTORE, 2, Ledger(3), table(1, 2, 3, 4).state, None), TableDisagrees)
    assert ownership.commit_verdict(ORDERS, Commit.REGULAR, 4, Ledger(3, 4), table(1, 2, 3).state, None) is None


def test_the_replay_job_refuses_another_pipelines_root_or_layout_and_writes_a_root_with_no_record() -> None:
    assert ownership.job_refusal("orders", 3, "orders-stream", "iceberg", OWNED) is None
    assert ownership.job_refusal("orders", 3, "orders-stream", "iceberg", RootSnapshot(ROOT, None, None)) is None
    other = ownership.job_refusal("payments", 3, "payments-stream", "iceberg", OWNED)
    assert (
        text(other)
        == f"pipeline 'payments', batch 3: output {ROOT} belongs to pipeline 'orders' (stream orders-stream); nothing was written"
    )
    layout = ownership.job_refusal("orders", 3, "orders-stream", "directory", OWNED)
    assert text(layout) == (
        f"pipeline 'orders', batch 3: output {ROOT} holds the iceberg layout and the job was asked for output_format "
        "directory; nothing was written"
    )
