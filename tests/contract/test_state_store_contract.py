"""The StateStore contract: every method and every refusal, run against the in-memory store and DynamoDB on moto.

What the steps' unit tests rely on in tests/fakes/memory_store.py is checked here against DynamoDBStateStore too, so
the fake cannot drift. Each refusal asserts what the store holds afterwards: a refused write changes nothing.
What only DynamoDB has (items of bounded size, the calls a read makes, its endpoint) is in
tests/integration/test_dynamodb_store.py.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kinesis_replay.core.errors import StateConflictError, StateCorruptError, StateTableMissingError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import (
    Batch,
    BatchStatus,
    Gap,
    Head,
    PlanNotes,
    Progress,
    ReplayResult,
    RunKind,
    ShardResult,
    ShardState,
    StartPosition,
)

S = 49680458800076825667891419458951111266169532991963922434
NOW = datetime(2026, 11, 22, tzinfo=UTC)
SHARD0, SHARD1 = "shardId-000000000000", "shardId-000000000001"


def planned(pipeline_name: str = "orders", batch_id: int = 1, previous: int | None = None) -> Batch:
    ranges = (SequenceRange(SHARD0, S + 1, S + 50, previous), SequenceRange(SHARD1, S + 2, S + 9, previous))
    return Batch(pipeline_name, batch_id, BatchStatus.PLANNED, ranges, "stream", "manual__1", NOW)


def manifest_of(batch: Batch, attempt: str | None = None, records: int = 50) -> ReplayResult:
    shards = tuple(ShardResult(r.shard_id, records, 100 * records, r.start, r.end, "0123456789abcdef") for r in batch.ranges)
    return ReplayResult(batch.pipeline_name, batch.batch_id, shards, 1.0, attempt)


def wide(batch_id: int = 1, shards: int = 1_000) -> Batch:
    """A batch of a 1,000-shard stream: DynamoDB keeps its ranges, manifest and lag measurements in part items."""
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    ranges = tuple(SequenceRange(s, S + 1, S + 50, S, False, NOW) for s in ids)
    lag = PlanNotes(lag_millis=dict.fromkeys(ids, 1234))
    return Batch("orders", batch_id, BatchStatus.PLANNED, ranges, "stream", "manual__1", NOW, notes=lag)


def to_committing(store: Any, batch: Batch) -> Batch:
    """The planned batch taken through WRITTEN to COMMITTING, as verify and commit take it."""
    written = batch.with_status(BatchStatus.WRITTEN, result=manifest_of(batch), attempts=1)
    store.update_batch(written, expected=BatchStatus.PLANNED)
    committing = written.with_status(BatchStatus.COMMITTING)
    store.update_batch(committing, expected=BatchStatus.WRITTEN)
    return committing


# -- the table --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.get_head("orders"),
        lambda store: store.get_shards("orders"),
        lambda store: store.get_batches("orders", [1]),
        lambda store: store.get_summaries("orders", [1]),
        lambda store: store.list_batches("orders"),
        lambda store: store.get_progress("orders"),
        lambda store: store.create_batch(planned(), Head()),
        lambda store: store.put_shard_if_absent("orders", ShardState(SHARD0)),
        lambda store: store.put_shards_if_absent("orders", [ShardState(SHARD0)]),
        lambda store: store.restore("orders", Head(next_batch_id=1), [], []),
    ],
    ids=[
        "get_head", "get_shards", "get_batches", "get_summaries", "list_batches", "get_progress", "create_batch",
        "put_shard_if_absent", "put_shards_if_absent", "restore",
    ],
)  # fmt: skip
def test_a_missing_state_table_fails_at_once_naming_the_table_the_pipeline_and_what_creates_it(missing_store: Any, call: Any) -> None:
    """Only the plan step creates the state table; every other step meeting none fails without a retry, and creates none."""
    with pytest.raises(StateTableMissingError) as raised:
        call(missing_store)
    message = str(raised.value)
    assert not raised.value.retryable
    assert message.startswith(f"pipeline 'orders': state table {missing_store.table} does not exist"), message
    assert "Only the plan step of kinesis_replay_orders creates it" in message and "check state_table of pipeline 'orders'" in message
    with pytest.raises(StateTableMissingError):  # nothing but ensure_table created it
        missing_store.get_head("orders")
    missing_store.ensure_table()  # as the advice says: the plan creates it, and the same call then goes through
    call(missing_store)
    missing_store.ensure_table()  # and again, on a table that exists
    assert missing_store.get_head("other") == Head()


def test_the_other_calls_on_a_missing_table_name_it_too(missing_store: Any) -> None:
    with pytest.raises(StateTableMissingError, match="does not exist"):
        missing_store.get_batch("orders", 1)
    with pytest.raises(StateTableMissingError, match="does not exist"):
        missing_store.advance_checkpoint("orders", SHARD0, S, S + 1, 1, False)


# -- the head and the ledger ------------------------------------------------------------------------------------------


def test_a_new_pipeline_has_an_empty_head_and_ledger(store: Any) -> None:
    assert store.get_head("orders") == Head(next_batch_id=1, in_flight=None, version=0)
    assert store.list_batches("orders") == [] and store.get_shards("orders") == {} and store.get_progress("orders") == {}
    assert store.get_batches("orders", [1, 2]) == {} and store.get_summaries("orders", [1]) == {}


def test_a_planned_batch_round_trips_with_exact_sequence_numbers(store: Any) -> None:
    batch = replace(
        planned(),
        gaps=(Gap(SHARD0, S, S + 1, "manual__1", "plan"),),
        notes=PlanNotes(lag_millis={SHARD0: 5}, capped={SHARD1: 7}, other={"newer": [1, "two"]}),
        error="an earlier cause",
    )
    head = store.create_batch(batch, Head())
    assert head == Head(next_batch_id=2, in_flight=1, version=1) == store.get_head("orders")
    assert store.get_batch("orders", 1) == batch
    assert store.list_batches("orders") == [batch] and store.get_batches("orders", [1, 1, 7]) == {1: batch}


def test_a_second_plan_from_the_same_head_loses_and_changes_nothing(store: Any) -> None:
    store.create_batch(planned(), Head())
    other = replace(planned(), run_id="manual__2")
    with pytest.raises(StateConflictError, match="pipeline 'orders': planning batch 1: another run changed the state first") as raised:
        store.create_batch(other, Head())
    assert raised.value.retryable
    assert store.get_head("orders") == Head(2, 1, 1) and store.get_batch("orders", 1).run_id == "manual__1"


def test_no_batch_is_planned_while_one_is_in_flight(store: Any) -> None:
    head = store.create_batch(planned(), Head())
    with pytest.raises(StateConflictError, match="planning batch 2"):
        store.create_batch(planned(batch_id=2), head)
    assert store.get_head("orders") == head and [b.batch_id for b in store.list_batches("orders")] == [1]


def test_a_plan_from_a_stale_head_version_loses(store: Any) -> None:
    first = planned()
    store.create_batch(first, Head())
    store.complete_batch(to_committing(store, first), NOW)
    current = store.get_head("orders")
    assert current == Head(next_batch_id=2, in_flight=None, version=2)
    with pytest.raises(StateConflictError, match="planning batch 2"):
        store.create_batch(planned(batch_id=2), replace(current, version=1))
    assert store.get_head("orders") == current and store.get_batches("orders", [2]) == {}
    assert store.create_batch(planned(batch_id=2), current) == Head(next_batch_id=3, in_flight=2, version=3)


def test_the_heads_count_of_redecodes_only_rises_and_outlives_plans_and_commits(store: Any) -> None:
    with pytest.raises(StateConflictError, match="recording 1 re-decodes"):
        store.record_redecodes("orders", 1)  # no head: nothing was committed, so nothing can have been re-decoded
    assert store.get_head("orders") == Head()
    first = planned()
    store.create_batch(first, Head())
    store.complete_batch(to_committing(store, first), NOW)
    store.record_redecodes("orders", 2)
    store.record_redecodes("orders", 2)  # a resumed commit's second write
    store.record_redecodes("orders", 1)  # an older count never lowers it
    assert store.get_head("orders") == Head(next_batch_id=2, in_flight=None, version=2, redecodes=2)
    head = store.create_batch(planned(batch_id=2), store.get_head("orders"))
    assert head.redecodes == 2 and store.get_head("orders").redecodes == 2
    store.complete_batch(to_committing(store, planned(batch_id=2)), NOW)
    assert store.get_head("orders") == Head(next_batch_id=3, in_flight=None, version=4, redecodes=2)


def test_a_restored_head_keeps_its_count_of_redecodes(store: Any) -> None:
    store.restore("orders", Head(next_batch_id=3, redecodes=4), [], [])
    assert store.get_head("orders") == Head(next_batch_id=3, in_flight=None, version=1, redecodes=4)


def test_a_plan_of_a_batch_id_the_ledger_holds_loses_even_from_the_current_head(store: Any) -> None:
    kept = replace(planned(batch_id=2), status=BatchStatus.COMMITTED, committed_at=NOW)
    store.restore("orders", Head(next_batch_id=2), [], [kept])
    with pytest.raises(StateConflictError, match="planning batch 2"):
        store.create_batch(planned(batch_id=2), store.get_head("orders"))
    assert store.get_head("orders") == Head(next_batch_id=2, in_flight=None, version=1) and store.get_batch("orders", 2) == kept


def test_pipelines_do_not_see_each_others_state(store: Any) -> None:
    store.create_batch(planned("orders"), Head())
    store.create_batch(planned("payments"), Head())
    store.put_shard_if_absent("payments", ShardState(SHARD0))
    assert [b.pipeline_name for b in store.list_batches("payments")] == ["payments"]
    assert store.get_shards("orders") == {} and store.get_head("orders").in_flight == 1


def test_a_batch_not_in_the_ledger_is_corrupt_state_naming_the_table(store: Any) -> None:
    with pytest.raises(StateCorruptError, match=rf"pipeline 'orders': batch 3 is not in state table {store.table}\. To rebuild") as raised:
        store.get_batch("orders", 3)
    assert not raised.value.retryable


def test_the_ledger_is_listed_in_id_order_and_read_by_id(store: Any) -> None:
    batches = [replace(planned(batch_id=i), status=BatchStatus.COMMITTED, committed_at=NOW) for i in (10, 2, 1)]
    store.restore("orders", Head(next_batch_id=11), [], batches)
    assert [b.batch_id for b in store.list_batches("orders")] == [1, 2, 10]
    assert sorted(store.get_batches("orders", [10, 1, 5])) == [1, 10]


def test_a_stored_batch_cannot_be_changed_through_what_was_passed_or_read(store: Any) -> None:
    notes = {SHARD0: 5}
    batch = replace(planned(), notes=PlanNotes(lag_millis=notes))
    store.create_batch(batch, Head())
    notes[SHARD0] = 99
    read = store.get_batch("orders", 1)
    assert read.notes.lag_millis == {SHARD0: 5}
    read.notes.lag_millis[SHARD0] = 42  # type: ignore[index]
    assert store.get_batch("orders", 1).notes.lag_millis == {SHARD0: 5}


# -- shards and checkpoints -------------------------------------------------------------------------------------------


def test_the_first_stored_start_position_wins(store: Any) -> None:
    first = ShardState(SHARD0, parent_shard_ids=("shardId-p",), start_position=StartPosition("AT_TIMESTAMP", NOW))
    later = ShardState(SHARD0, start_position=StartPosition("AT_TIMESTAMP", datetime(2027, 1, 1, tzinfo=UTC)))
    assert store.put_shard_if_absent("orders", first) == first
    assert store.put_shard_if_absent("orders", later).start_position == first.start_position
    stored = store.get_shards("orders")[SHARD0]
    assert replace(stored, updated_at=None) == first and stored.updated_at is not None and stored.updated_at.tzinfo is not None


def test_new_shards_are_stored_a_transaction_at_a_time_and_the_first_stored_start_wins(store: Any) -> None:
    """150 shards take two transactions; one shard a concurrent plan stored first fails the second, whose shards are
    then stored one by one: that shard keeps the start the other plan fixed, the rest get this plan's."""
    later = StartPosition("AT_TIMESTAMP", datetime(2027, 1, 1, tzinfo=UTC))
    shards = [ShardState(f"shardId-{i:012d}", start_position=later) for i in range(150)]
    first = ShardState("shardId-000000000120", start_position=StartPosition("AT_TIMESTAMP", NOW))
    store.put_shard_if_absent("orders", first)
    stored = store.put_shards_if_absent("orders", shards)
    assert stored["shardId-000000000120"].start_position == first.start_position
    assert all(stored[s.shard_id] == s for s in shards if s.shard_id != first.shard_id)
    in_table = store.get_shards("orders")
    assert len(in_table) == 150 and in_table["shardId-000000000120"].start_position == first.start_position
    assert {sid: s.start_position for sid, s in in_table.items() if sid != first.shard_id} == dict.fromkeys(
        (s.shard_id for s in shards if s.shard_id != first.shard_id), later
    )


def test_storing_no_new_shards_stores_nothing(store: Any) -> None:
    assert store.put_shards_if_absent("orders", []) == {} and store.get_shards("orders") == {}


def test_a_checkpoint_moves_only_from_the_expected_previous_value(store: Any) -> None:
    store.put_shard_if_absent("orders", ShardState(SHARD0))
    store.advance_checkpoint("orders", SHARD0, None, S + 50, 1, finished=False)
    with pytest.raises(
        StateConflictError,
        match=rf"shard {SHARD0}: advancing the checkpoint from None to {S + 60}.*stored checkpoint is {S + 50} \(batch 1\)",
    ):
        store.advance_checkpoint("orders", SHARD0, None, S + 60, 2, finished=False)
    with pytest.raises(StateConflictError, match=rf"stored checkpoint is {S + 50} \(batch 1\)"):
        store.advance_checkpoint("orders", SHARD0, S + 49, S + 60, 2, finished=False)
    assert (store.get_shards("orders")[SHARD0].checkpoint, store.get_shards("orders")[SHARD0].last_batch_id) == (S + 50, 1)
    store.advance_checkpoint("orders", SHARD0, S + 50, S + 60, 2, finished=True)
    shard = store.get_shards("orders")[SHARD0]
    assert (shard.checkpoint, shard.finished, shard.last_batch_id) == (S + 60, True, 2)


def test_advancing_again_for_the_same_batch_is_a_no_op_and_for_another_batch_a_conflict(store: Any) -> None:
    store.put_shard_if_absent("orders", ShardState(SHARD0))
    store.advance_checkpoint("orders", SHARD0, None, S + 50, 1, finished=False)
    store.advance_checkpoint("orders", SHARD0, None, S + 50, 1, finished=False)  # a resumed commit
    with pytest.raises(StateConflictError, match=rf"stored checkpoint is {S + 50} \(batch 1\)"):
        store.advance_checkpoint("orders", SHARD0, None, S + 50, 2, finished=False)  # the same value, another batch's
    shard = store.get_shards("orders")[SHARD0]
    assert (shard.checkpoint, shard.last_batch_id) == (S + 50, 1)


def test_a_checkpoint_of_a_shard_never_stored_does_not_move_from_a_value(store: Any) -> None:
    with pytest.raises(StateConflictError, match=r"the stored checkpoint is None \(batch None\)"):
        store.advance_checkpoint("orders", SHARD0, S, S + 1, 1, finished=False)
    assert store.get_shards("orders") == {}


def test_a_drained_shard_is_marked_finished_only_at_its_checkpoint(store: Any) -> None:
    store.put_shard_if_absent("orders", ShardState(SHARD0))
    store.put_shard_if_absent("orders", ShardState(SHARD1))
    store.advance_checkpoint("orders", SHARD0, None, S + 50, 1, finished=False)
    with pytest.raises(
        StateConflictError, match=rf"shard {SHARD0}: marking the drained shard finished at checkpoint {S + 49}: the checkpoint moved"
    ):
        store.mark_finished("orders", SHARD0, S + 49)
    with pytest.raises(StateConflictError, match="the checkpoint moved meanwhile"):
        store.mark_finished("orders", SHARD0, None)
    assert not store.get_shards("orders")[SHARD0].finished
    store.mark_finished("orders", SHARD0, S + 50)
    store.mark_finished("orders", SHARD1, None)  # a closed shard that held nothing
    shards = store.get_shards("orders")
    assert (shards[SHARD0].finished, shards[SHARD0].checkpoint, shards[SHARD0].last_batch_id) == (True, S + 50, 1)
    assert (shards[SHARD1].finished, shards[SHARD1].checkpoint) == (True, None)
    with pytest.raises(StateConflictError):
        store.mark_finished("orders", "shardId-never-stored", S)


# -- status changes ---------------------------------------------------------------------------------------------------


def test_only_the_batch_in_flight_can_change_status(store: Any) -> None:
    store.create_batch(planned(), Head())
    with pytest.raises(StateConflictError, match="pipeline 'orders': setting batch 2 from PLANNED to FAILED"):
        store.update_batch(planned(batch_id=2).with_status(BatchStatus.FAILED), expected=BatchStatus.PLANNED)
    assert store.get_batches("orders", [2]) == {} and store.get_batch("orders", 1) == planned()


def test_a_status_change_is_conditioned_on_the_stored_status(store: Any) -> None:
    store.create_batch(planned(), Head())
    written = planned().with_status(BatchStatus.WRITTEN, result=manifest_of(planned()), attempts=1)
    with pytest.raises(StateConflictError, match="setting batch 1 from FAILED to WRITTEN"):
        store.update_batch(written, expected=BatchStatus.FAILED)
    assert store.get_batch("orders", 1) == planned()


def test_a_status_change_writes_the_status_manifest_attempts_error_and_gaps_only(store: Any) -> None:
    store.create_batch(replace(planned(), notes=PlanNotes(lag_millis={SHARD0: 5})), Head())
    gap = Gap(SHARD0, S, None, "manual__2", "replay")
    changed = replace(
        planned().with_status(BatchStatus.WRITTEN, result=manifest_of(planned()), attempts=2, gaps=(gap,)),
        run_id="manual__2", stream="another", notes=PlanNotes(), snapshot_id=9, committed_at=NOW,
    )  # fmt: skip
    store.update_batch(changed, expected=BatchStatus.PLANNED)
    stored = store.get_batch("orders", 1)
    assert (stored.status, stored.result, stored.attempts, stored.gaps, stored.error) == (
        BatchStatus.WRITTEN, manifest_of(planned()), 2, (gap,), None
    )  # fmt: skip
    assert (stored.run_id, stored.stream, stored.notes, stored.snapshot_id, stored.committed_at, stored.ranges) == (
        "manual__1", "stream", PlanNotes(lag_millis={SHARD0: 5}), None, None, planned().ranges
    )  # fmt: skip
    store.update_batch(replace(stored, result=None, gaps=()), expected=BatchStatus.WRITTEN)  # WRITTEN again, without them
    assert (store.get_batch("orders", 1).result, store.get_batch("orders", 1).gaps) == (None, ())


def test_failures_are_counted_and_the_last_cause_kept_after_a_later_attempt_succeeds(store: Any) -> None:
    batch = wide()
    store.create_batch(batch, Head())
    failed = batch
    for cause in ("first cause", "second cause"):
        failed = failed.with_status(BatchStatus.FAILED, attempts=failed.attempts + 1, error=cause)
        store.update_batch(failed, expected=BatchStatus.PLANNED if cause == "first cause" else BatchStatus.FAILED)
    assert store.get_batch("orders", 1).error == "second cause"
    result = ReplayResult("orders", 1, tuple(ShardResult(r.shard_id, 50, 5_000, S + 1, S + 50, "0123456789abcdef") for r in batch.ranges))
    store.update_batch(failed.with_status(BatchStatus.WRITTEN, result=result, attempts=3, error=None), expected=BatchStatus.FAILED)

    (summary,) = store.get_summaries("orders", [1, 2]).values()  # batch 2 does not exist
    assert (summary.batch_id, summary.status, summary.error, summary.failures, summary.last_error, summary.attempts) == (
        1, BatchStatus.WRITTEN, None, 2, "second cause", 3
    )  # fmt: skip
    assert (summary.created_at, summary.committed_at) == (NOW, None)
    assert summary.figures == {"shards": 1_000, "behind_seconds": 0.0, "records": 50_000, "bytes": 5_000_000, "bad_records": 0}
    assert store.get_batch("orders", 1).error is None


def test_a_failure_without_a_cause_is_not_counted(store: Any) -> None:
    store.create_batch(planned(), Head())
    store.update_batch(planned().with_status(BatchStatus.FAILED, attempts=1), expected=BatchStatus.PLANNED)
    summary = store.get_summaries("orders", [1])[1]
    assert (summary.status, summary.failures, summary.last_error) == (BatchStatus.FAILED, 0, None)


def test_completing_a_commit_clears_the_batch_in_flight_in_the_same_write(store: Any) -> None:
    store.create_batch(planned(), Head())
    committing = to_committing(store, planned())
    store.complete_batch(replace(committing, snapshot_id=7), NOW + timedelta(seconds=1))
    assert store.get_head("orders") == Head(next_batch_id=2, in_flight=None, version=2)
    stored = store.get_batch("orders", 1)
    assert (stored.status, stored.committed_at, stored.snapshot_id, stored.result) == (
        BatchStatus.COMMITTED, NOW + timedelta(seconds=1), 7, committing.result
    )  # fmt: skip
    assert store.get_summaries("orders", [1])[1].committed_at == NOW + timedelta(seconds=1)
    with pytest.raises(StateConflictError, match="pipeline 'orders': completing the commit of batch 1"):
        store.complete_batch(committing, NOW + timedelta(seconds=2))
    assert store.get_batch("orders", 1) == stored and store.get_head("orders").version == 2


def test_a_commit_is_completed_only_from_committing(store: Any) -> None:
    store.create_batch(planned(), Head())
    written = planned().with_status(BatchStatus.WRITTEN, result=manifest_of(planned()), attempts=1)
    store.update_batch(written, expected=BatchStatus.PLANNED)
    with pytest.raises(StateConflictError, match="completing the commit of batch 1"):
        store.complete_batch(written, NOW)
    assert store.get_batch("orders", 1).status == BatchStatus.WRITTEN and store.get_head("orders") == Head(2, 1, 1)


def test_a_completion_without_a_snapshot_keeps_the_stored_one(store: Any) -> None:
    """A resumed commit's batch may come from before the table step stored the snapshot."""
    committing = replace(planned(), status=BatchStatus.COMMITTING, result=manifest_of(planned()), snapshot_id=5)
    store.restore("orders", Head(next_batch_id=2, in_flight=1), [], [committing])
    store.complete_batch(replace(committing, snapshot_id=None), NOW)
    assert store.get_batch("orders", 1).snapshot_id == 5 and store.get_head("orders") == Head(2, None, 2)


def test_a_commit_of_a_batch_no_longer_in_flight_is_refused(store: Any) -> None:
    committing = replace(planned(), status=BatchStatus.COMMITTING, result=manifest_of(planned()))
    store.restore("orders", Head(next_batch_id=2), [], [committing])  # the head names no batch in flight
    with pytest.raises(StateConflictError, match="completing the commit of batch 1"):
        store.complete_batch(committing, NOW)
    assert store.get_batch("orders", 1).status == BatchStatus.COMMITTING and store.get_head("orders") == Head(2, None, 1)


# -- backfills --------------------------------------------------------------------------------------------------------


def committed(batch: Batch, attempt: str) -> Batch:
    """The batch committed with a manifest of ``attempt``, as the ledger holds it after its first run."""
    result = ReplayResult(
        "orders",
        batch.batch_id,
        tuple(ShardResult(r.shard_id, 50, 5_000, S + 1, S + 50, "0123456789abcdef") for r in batch.ranges),
        1.0,
        attempt,
    )
    return replace(batch, status=BatchStatus.COMMITTED, committed_at=NOW, result=result, snapshot_id=1)


@pytest.mark.parametrize("make", [planned, wide], ids=["inline", "in-parts"])
def test_a_backfill_keeps_the_replayed_manifest_with_its_snapshot_in_one_conditional_write(store: Any, make: Any) -> None:
    first = committed(make(), "a")
    store.restore("orders", Head(next_batch_id=2), [], [first])
    assert first.result is not None
    replayed = replace(first, result=replace(first.result, attempt="b", seconds=2.0), snapshot_id=2)

    store.set_replayed(replayed, expected=BatchStatus.COMMITTED)

    stored = store.get_batch("orders", 1)
    assert stored == replayed and stored.result is not None and (stored.result.attempt, stored.snapshot_id) == ("b", 2)
    # Conditioned on the status: a batch that is not COMMITTED keeps its manifest and snapshot.
    with pytest.raises(StateConflictError, match=r"pipeline 'orders': keeping the replayed attempt c and snapshot 3 with batch 1"):
        store.set_replayed(replace(replayed, result=replace(first.result, attempt="c"), snapshot_id=3), expected=BatchStatus.WRITTEN)
    assert store.get_batch("orders", 1) == replayed


@pytest.mark.parametrize("make", [planned, wide], ids=["inline", "in-parts"])
def test_a_compactions_write_loses_to_a_replay_that_kept_its_own_snapshot_meanwhile(store: Any, make: Any) -> None:
    first = committed(make(), "a")
    store.restore("orders", Head(next_batch_id=2), [], [first])
    assert first.result is not None and first.snapshot_id == 1
    backfilled = replace(first, result=replace(first.result, attempt="b"), snapshot_id=2)
    store.set_replayed(backfilled, expected=BatchStatus.COMMITTED)  # a backfill, after the compaction read the entry
    compacted = replace(first, result=replace(first.result, attempt="compacted"), snapshot_id=3)
    with pytest.raises(StateConflictError, match="keeping the replayed attempt compacted and snapshot 3 with batch 1"):
        store.set_replayed(compacted, expected=BatchStatus.COMMITTED, previous_snapshot=1)
    assert store.get_batch("orders", 1) == backfilled
    store.set_replayed(compacted, expected=BatchStatus.COMMITTED, previous_snapshot=2)  # read again: it names snapshot 2
    assert store.get_batch("orders", 1) == compacted


@pytest.mark.parametrize("make", [planned, wide], ids=["inline", "in-parts"])
def test_a_redecode_stages_its_attempt_beside_the_committed_one_then_replaces_it_with_both_snapshots(store: Any, make: Any) -> None:
    first = replace(committed(make(), "a"), quarantine_snapshot_id=11)
    store.restore("orders", Head(next_batch_id=2), [], [first])
    assert first.result is not None
    attempt = replace(first.result, attempt="r", seconds=3.0)

    store.set_staged(replace(first, staged=attempt, staged_by="backfill-1"), expected=BatchStatus.COMMITTED)

    stored = store.get_batch("orders", 1)
    # The committed result and snapshots stay what readers see until the selection's commit.
    assert (stored.result, stored.snapshot_id, stored.quarantine_snapshot_id) == (first.result, 1, 11)
    assert (stored.staged, stored.staged_by, stored.redecoded_by) == (attempt, "backfill-1", None)
    assert store.get_summaries("orders", [1])[1].figures["staged"] == "backfill-1"
    with pytest.raises(StateConflictError, match="staging the re-decoded attempt r of batch 1"):
        store.set_staged(replace(first, staged=attempt, staged_by="backfill-2"), expected=BatchStatus.WRITTEN)
    assert store.get_batch("orders", 1).staged_by == "backfill-1"

    done = replace(
        stored, result=attempt, snapshot_id=5, quarantine_snapshot_id=None, staged=None, staged_by=None, redecoded_by="backfill-1"
    )
    store.set_replayed(done, expected=BatchStatus.COMMITTED)

    assert store.get_batch("orders", 1) == done
    figures = store.get_summaries("orders", [1])[1].figures
    assert (figures["redecoded"], "staged" in figures) == (True, False)


def test_a_commit_keeps_the_quarantine_tables_snapshot_with_the_batch(store: Any) -> None:
    batch = replace(planned(), status=BatchStatus.COMMITTING, result=manifest_of(planned()))
    store.restore("orders", Head(next_batch_id=2, in_flight=1), [], [batch])
    store.complete_batch(replace(batch, snapshot_id=4, quarantine_snapshot_id=9), NOW)
    stored = store.get_batch("orders", 1)
    assert (stored.status, stored.snapshot_id, stored.quarantine_snapshot_id) == (BatchStatus.COMMITTED, 4, 9)


def test_a_replayed_batch_needs_its_manifest_and_snapshot_and_one_not_in_the_ledger_is_refused(store: Any) -> None:
    first = committed(planned(), "a")
    with pytest.raises(ValueError, match="a replayed batch needs its manifest and snapshot"):
        store.set_replayed(replace(first, snapshot_id=None), expected=BatchStatus.COMMITTED)
    with pytest.raises(ValueError, match="a replayed batch needs its manifest and snapshot"):
        store.set_replayed(replace(first, result=None), expected=BatchStatus.COMMITTED)
    with pytest.raises(StateConflictError, match="keeping the replayed attempt a and snapshot 1 with batch 1"):
        store.set_replayed(first, expected=BatchStatus.COMMITTED)
    assert store.list_batches("orders") == []


def test_a_replay_keeps_the_figures_of_its_manifest(store: Any) -> None:
    first = committed(planned(), "a")
    store.restore("orders", Head(next_batch_id=2), [], [first])
    assert store.get_summaries("orders", [1])[1].figures["records"] == 100
    store.set_replayed(replace(first, result=manifest_of(first, "b", records=7), snapshot_id=2), expected=BatchStatus.COMMITTED)
    summary = store.get_summaries("orders", [1])[1]
    assert (summary.figures["records"], summary.figures["bytes"], summary.status, summary.committed_at) == (
        14, 1_400, BatchStatus.COMMITTED, NOW
    )  # fmt: skip


# -- progress ---------------------------------------------------------------------------------------------------------


def progress_of(batch_id: int, shards: int, kind: RunKind = RunKind.REGULAR, read: int = 7) -> Progress:
    ids = [f"shardId-{i:012d}" for i in range(shards)]
    return Progress(batch_id, {s: read * i for i, s in enumerate(ids)}, frozenset(ids[::2]), NOW, kind)


def test_the_progress_of_1000_shards_reads_back_whole(store: Any) -> None:
    progress = progress_of(3, 1_000)
    store.put_progress(progress, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: progress}


def test_a_backfills_progress_never_replaces_the_regular_batchs(store: Any) -> None:
    regular, backfill = progress_of(5, 250), progress_of(2, 300, RunKind.BACKFILL, read=3)
    store.put_progress(regular, "orders")
    store.put_progress(backfill, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: regular, RunKind.BACKFILL: backfill}
    assert store.get_progress("payments") == {}  # nor another pipeline's


def test_a_narrower_later_batch_reads_back_only_its_own_progress(store: Any) -> None:
    store.put_progress(progress_of(1, 250), "orders")  # three items; the next batch writes over the first only
    later = replace(progress_of(2, 50), updated_at=NOW + timedelta(minutes=5))
    store.put_progress(later, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: later}


def test_a_done_shard_without_a_count_reads_back_as_none_read_and_an_empty_progress_as_empty(store: Any) -> None:
    store.put_progress(Progress(4, {SHARD0: 3}, frozenset({SHARD1}), NOW), "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: Progress(4, {SHARD0: 3, SHARD1: 0}, frozenset({SHARD1}), NOW)}
    empty = Progress(5, {}, frozenset(), NOW + timedelta(minutes=1))
    store.put_progress(empty, "orders")
    assert store.get_progress("orders") == {RunKind.REGULAR: empty}


# -- recovery ---------------------------------------------------------------------------------------------------------


def test_a_restore_writes_the_ledger_the_shards_and_then_the_head(store: Any) -> None:
    batches = [replace(wide(i), status=BatchStatus.COMMITTED, committed_at=NOW) for i in (1, 2)]
    shards = [ShardState(SHARD0, checkpoint=S + 50, last_batch_id=2), ShardState(SHARD1, finished=True, parent_shard_ids=(SHARD0,))]
    store.restore("orders", Head(next_batch_id=3), shards, batches)
    assert store.get_head("orders") == Head(next_batch_id=3, in_flight=None, version=1)
    assert store.list_batches("orders") == batches and store.get_batches("orders", [1, 2]) == {1: batches[0], 2: batches[1]}
    assert {k: replace(v, updated_at=None) for k, v in store.get_shards("orders").items()} == {s.shard_id: s for s in shards}
    assert store.get_summaries("orders", [2])[2].failures == 0


def test_a_restore_is_refused_while_the_pipeline_has_a_head_and_writes_nothing(store: Any) -> None:
    store.create_batch(planned(), Head())
    kept = replace(planned(batch_id=5), status=BatchStatus.COMMITTED, committed_at=NOW)
    with pytest.raises(StateConflictError, match="pipeline 'orders': restoring its state"):
        store.restore("orders", Head(next_batch_id=6), [ShardState(SHARD0, checkpoint=S)], [kept])
    with pytest.raises(StateConflictError, match="pipeline 'orders': restoring its head"):
        store.restore("orders", Head(next_batch_id=6), [], [])
    assert store.get_head("orders") == Head(2, 1, 1) and store.get_batches("orders", [5]) == {} and store.get_shards("orders") == {}


def test_a_restore_replaces_what_a_restore_cut_short_left(store: Any) -> None:
    """A restore cut short leaves items and no head: the next one writes over them, the head last."""
    store.put_shard_if_absent("orders", ShardState(SHARD0, checkpoint=S))
    store.restore("orders", Head(next_batch_id=1), [ShardState(SHARD0, checkpoint=S + 9, last_batch_id=3)], [])
    shard = store.get_shards("orders")[SHARD0]
    assert (shard.checkpoint, shard.last_batch_id) == (S + 9, 3) and store.get_head("orders") == Head(1, None, 1)
