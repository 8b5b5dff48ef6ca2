"""The rules between the output and the state table, on a real local output folder: owner, lost table, moved output.

Each check loads the root as a step does (adapters.output_root) and decides as it does (core.ownership): the plan's
``check_before_plan`` and ``claim_output``, and the owner check every replay, backfill and commit makes first. The
decisions themselves, and each refusal's whole text, are tests/unit/test_ownership.py's.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kinesis_replay.adapters import commit_records, layout
from kinesis_replay.adapters.output_root import load_root, read_owner
from kinesis_replay.adapters.owner import write_owner
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import KinesisReplayError, OutputOwnershipError, StateLostError
from kinesis_replay.core.output_root import Owner
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.refusals import RECOVER_PARAM, refuse
from kinesis_replay.core.state import Batch, BatchStatus, Head, ReplayResult, ShardResult
from kinesis_replay.steps import plan
from kinesis_replay.steps.plan import check_before_plan

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def pipeline(root: Path, **changes: object) -> PipelineConfig:
    entry = {
        "name": "orders", "stream": "orders-stream", "output": str(root), "schedule": None, "initial_position": "TRIM_HORIZON",
        "state_table": "kr-state", "spark": {"master": "local[1]"}, **changes,
    }  # fmt: skip
    (p,) = parse_config({"pipelines": [entry]})
    return p


def claim_output(p: PipelineConfig, now: datetime, stream_created: datetime | None = None, dry_run: bool = False) -> None:
    plan.claim_output(p, load_root(p, claim=True), now, stream_created, dry_run)


def require_owner(p: PipelineConfig) -> None:
    """What a replay, backfill or commit checks first."""
    refuse(ownership.owner_refusal(p, load_root(p)))


def committed(p: PipelineConfig, batch_id: int) -> Batch:
    rng = SequenceRange("shardId-000000000000", 10 * batch_id, 10 * batch_id + 9, 10 * batch_id - 1 if batch_id > 1 else None)
    result = ReplayResult(p.name, batch_id, (ShardResult(rng.shard_id, 10, 100, rng.start, rng.end, "00"),))
    return Batch(p.name, batch_id, BatchStatus.COMMITTED, (rng,), p.stream, "run", NOW, NOW, result)


def test_the_first_plan_claims_a_new_root_and_a_dry_run_does_not(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    check_before_plan(p, Head())
    assert read_owner(p.output) is None  # checking writes nothing
    claim_output(p, NOW)
    owner = read_owner(p.output)
    assert owner == Owner("orders", "orders-stream", "kr-state", NOW.isoformat(), adopted=0, output_format="iceberg")
    claim_output(p, datetime.now(UTC))  # a second claim changes nothing
    assert read_owner(p.output) == owner


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "payments"}, "pipeline 'payments' may not write output {root}: it belongs to pipeline 'orders' (stream orders-stream"),
        ({"stream": "other"}, "output {root} holds stream orders-stream, and the config now names stream other"),
    ],
)
def test_a_root_owned_by_another_pipeline_or_stream_is_refused(tmp_path: Path, change: dict[str, str], message: str) -> None:
    owner = pipeline(tmp_path / "out")
    claim_output(owner, NOW)
    intruder = pipeline(tmp_path / "out" / "." / "", **change)
    with pytest.raises(OutputOwnershipError) as raised:
        check_before_plan(intruder, Head())
    assert message.format(root=owner.output) in str(raised.value)
    with pytest.raises(OutputOwnershipError):
        require_owner(intruder)  # replay, backfill and commit check it too
    with pytest.raises(OutputOwnershipError):
        claim_output(intruder, NOW)  # a claim never takes over an owned root
    assert read_owner(owner.output) == Owner("orders", "orders-stream", "kr-state", NOW.isoformat(), output_format="iceberg")


def test_replay_backfill_and_commit_refuse_a_root_with_no_owner_record(tmp_path: Path) -> None:
    with pytest.raises(OutputOwnershipError, match="has no owner record"):
        require_owner(pipeline(tmp_path / "out"))


def test_a_missing_head_with_committed_batches_in_the_output_is_refused(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    claim_output(p, NOW)
    for i in (1, 2, 3):
        commit_records.write_commit_record(p.output, committed(p, i))
    with pytest.raises(StateLostError) as raised:
        check_before_plan(p, Head())
    text = str(raised.value)
    assert f"state table kr-state holds no state for the pipeline, but its output {p.output} holds 3 committed batches" in text
    assert '{"recover_from_output": true, "dry_run": true}' in text


def test_a_missing_head_with_only_uncommitted_results_is_a_fresh_start(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    claim_output(p, NOW)
    result = Path(layout.result_path(p.output, 1))
    result.parent.mkdir(parents=True)
    result.write_text("{}")  # batch 1 replayed, never committed: the new batch 1 replaces it
    check_before_plan(p, Head())


def test_a_root_written_before_owner_records_counts_its_results_as_committed(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    result = Path(layout.result_path(p.output, 7))
    result.parent.mkdir(parents=True)
    result.write_text("{}")
    with pytest.raises(StateLostError, match="written before it kept commit records"):
        check_before_plan(p, Head())
    claim_output(p, NOW)  # adopted by a pipeline whose table holds its state
    owner = read_owner(p.output)
    assert owner is not None and owner.adopted == 7
    with pytest.raises(StateLostError):
        check_before_plan(p, Head())


def test_a_head_ahead_of_the_output_means_the_output_moved(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "new")
    with pytest.raises(StateLostError, match=f"says batches up to 4 are committed, but output {p.output} does not hold batch 4"):
        check_before_plan(p, Head(next_batch_id=6, in_flight=5, version=9))
    assert not Path(p.output).exists()


def test_a_head_behind_the_output_is_refused(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out", output_format="directory")  # the ledger against the output: no table in it
    claim_output(p, NOW)
    for i in (1, 2, 3):
        commit_records.write_commit_record(p.output, committed(p, i))
    check_before_plan(p, Head(next_batch_id=4, version=4))  # in step
    with pytest.raises(StateLostError, match=r"is behind output .* would plan batch 3 anew"):
        check_before_plan(p, Head(next_batch_id=3, version=3))  # an old backup of the table


def test_a_renamed_state_table_is_refused_once_anything_is_committed(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    claim_output(p, NOW)
    renamed = replace(p, state_table="kr-state-2")
    check_before_plan(renamed, Head())  # nothing committed: the new table is a fresh start
    commit_records.write_commit_record(p.output, committed(p, 1))
    with pytest.raises(StateLostError, match="is kept with state table kr-state, and the config now names state table kr-state-2"):
        check_before_plan(renamed, Head())
    with pytest.raises(StateLostError):
        claim_output(renamed, NOW)  # nor does a claim, on its own, adopt the new table
    owner = read_owner(p.output)
    assert owner is not None and owner.state_table == "kr-state"


def test_a_commit_record_round_trips_the_ledger_entry(tmp_path: Path) -> None:
    p = pipeline(tmp_path / "out")
    batch = committed(p, 2)
    commit_records.write_commit_record(p.output, batch)
    assert commit_records.read_commit_record(p.output, 2) == batch
    assert commit_records.committed_batch_ids(p.output) == [2]
    assert json.loads(Path(layout.commit_record_path(p.output, 2)).read_text())["format"] == 1


def format_refusal(p: PipelineConfig, created: str, why: str) -> str:
    configured = p.output_format
    default = " (output_format's default, when a pipeline does not set it)" if configured == "iceberg" else ""
    return (
        f"pipeline 'orders': output {p.output} was created as a {created} output ({why}), and the pipeline's "
        f"output_format is now {configured}{default}. Writing it so would "
    )


def old_owner_record(root: Path) -> None:
    """An owner record as a release that recorded no output_format wrote it."""
    root.mkdir(parents=True, exist_ok=True)
    record = {"pipeline": "orders", "stream": "orders-stream", "state_table": "kr-state", "created_at": NOW.isoformat(), "adopted": 0}
    (root / layout.OWNER_FILE).write_text(json.dumps(record))


def directory_batch(root: Path, batch_id: int) -> None:
    """A batch a directory output committed: its folder and its commit record."""
    folder = Path(layout.batch_path(str(root), batch_id))
    folder.mkdir(parents=True)
    (folder / "part-00000.parquet").write_bytes(b"PAR1")
    commit_records.write_commit_record(str(root), committed(pipeline(root, output_format="directory"), batch_id))


@pytest.mark.parametrize(("created", "now"), [("directory", "iceberg"), ("iceberg", "directory")])
def test_the_claim_records_the_output_format_and_every_later_write_refuses_another(tmp_path: Path, created: str, now: str) -> None:
    p = pipeline(tmp_path / "out", output_format=created)
    claim_output(p, NOW)
    owner = read_owner(p.output)
    assert owner is not None and owner.output_format == created
    changed = pipeline(tmp_path / "out", output_format=now)
    record = f"as its owner record {layout.owner_path(p.output)} says"
    for check in (lambda: check_before_plan(changed, Head(next_batch_id=1, version=1)),
                  lambda: require_owner(changed), lambda: claim_output(changed, NOW)):  # fmt: skip
        with pytest.raises(OutputOwnershipError) as raised:
            check()
        text = str(raised.value)
        assert text.startswith(format_refusal(changed, created, record))
        assert f"Set output_format: {created} for pipeline 'orders' in the pipelines config to go on as before" in text
    assert read_owner(p.output) == owner  # refused, and the record still says what the root is
    require_owner(p)  # the format it was created in goes on


def test_an_older_owner_record_over_batch_folders_counts_as_a_directory_output(tmp_path: Path) -> None:
    """The upgrade the default's change would break: a directory pipeline that never set output_format."""
    root = tmp_path / "out"
    old_owner_record(root)
    directory_batch(root, 1)
    upgraded = pipeline(root)  # output_format not set: iceberg
    for check in (lambda: check_before_plan(upgraded, Head(next_batch_id=2, version=2)),
                  lambda: require_owner(upgraded), lambda: claim_output(upgraded, NOW)):  # fmt: skip
        with pytest.raises(OutputOwnershipError) as raised:
            check()
        assert str(raised.value).startswith(format_refusal(upgraded, "directory", "it holds batch_id=<id>/ folders"))
        assert "start an Iceberg table at the next batch, while the batches before it stay in batch_id=<id>/ folders" in str(raised.value)
    owner = read_owner(str(root))
    assert owner is not None and owner.output_format is None  # a refusal writes nothing
    assert sorted(p.name for p in root.iterdir()) == [layout.COMMITS_DIR, layout.OWNER_FILE, "batch_id=0000000001"]  # no table started
    kept = pipeline(root, output_format="directory")  # what the message says to do
    check_before_plan(kept, Head(next_batch_id=2, version=2))
    claim_output(kept, NOW)
    owner = read_owner(str(root))
    assert owner is not None and owner.output_format == "directory" and owner.created_at == NOW.isoformat()  # recorded now
    with pytest.raises(OutputOwnershipError, match=r"as its owner record .* says"):
        require_owner(upgraded)


def test_an_older_owner_record_over_a_root_with_no_batch_records_the_configured_format(tmp_path: Path) -> None:
    root = tmp_path / "out"
    old_owner_record(root)
    p = pipeline(root)
    require_owner(p)  # nothing says what the root is: nothing to refuse
    claim_output(p, NOW)
    owner = read_owner(str(root))
    assert owner is not None and owner.output_format == "iceberg"


def test_an_older_owner_record_over_a_table_counts_as_an_iceberg_output(tmp_path: Path) -> None:
    root = tmp_path / "out"
    old_owner_record(root)
    (root / "metadata").mkdir()
    with pytest.raises(OutputOwnershipError) as raised:
        require_owner(pipeline(root, output_format="directory"))
    assert str(raised.value).startswith(
        format_refusal(pipeline(root, output_format="directory"), "iceberg", "it holds the table's metadata/ or data/ folder")
    )
    require_owner(pipeline(root))


def test_a_root_written_before_owner_records_is_claimed_only_in_the_format_of_its_folders(tmp_path: Path) -> None:
    root = tmp_path / "out"
    directory_batch(root, 1)
    upgraded = pipeline(root)
    with pytest.raises(OutputOwnershipError, match=r"was created as a directory output \(it holds batch_id=<id>/ folders\)"):
        check_before_plan(upgraded, Head(next_batch_id=2, version=2))
    with pytest.raises(OutputOwnershipError):
        claim_output(upgraded, NOW)
    assert read_owner(str(root)) is None  # not claimed as a table
    claim_output(pipeline(root, output_format="directory"), NOW)
    owner = read_owner(str(root))
    assert owner is not None and owner.output_format == "directory"


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def claimed_with_a_batch(root: Path) -> PipelineConfig:
    """Pipeline orders with batch 1 committed in its table's layout: an attempt folder's file and a commit record."""
    p = pipeline(root)
    claim_output(p, NOW)
    commit_records.write_commit_record(p.output, committed(p, 1))
    part = Path(layout.data_path(p.output, 1, "a")) / "part-00000.parquet"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"rows")
    return p


@pytest.mark.parametrize("inside", ["data/other", "data/batch_id=0000000001", "x/y/z"])
def test_a_root_inside_another_deployments_root_is_refused_before_anything_is_written(tmp_path: Path, inside: str) -> None:
    """Once, a pipeline of another deployment (another config file and state table, so the config's own overlap check
    could not see it) wrote into a table's data/ folder, and that table's maintenance removed all of it."""
    a = claimed_with_a_batch(tmp_path / "a")
    before = files_under(tmp_path)
    b = pipeline(tmp_path / "a" / inside, name="payments", stream="payments-stream", state_table="kr-state-2")

    for dry_run in (True, False):
        with pytest.raises(OutputOwnershipError) as raised:
            claim_output(b, NOW, dry_run=dry_run)
        assert not raised.value.retryable

    text = str(raised.value)
    assert text.startswith(
        f"pipeline 'payments' may not claim output {b.output}: it is inside output {a.output} of pipeline 'orders' "
        f"(stream orders-stream, state table kr-state; owner record {layout.owner_path(a.output)})."
    )
    assert text.endswith(f"Give pipeline 'payments' an output root outside {a.output}, in its pipelines config. Nothing was written.")
    assert files_under(tmp_path) == before  # not even a folder for the new root
    assert read_owner(b.output) is None and commit_records.committed_batch_ids(a.output) == [1]


def test_a_root_that_holds_another_deployments_root_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    a = claimed_with_a_batch(tmp_path / "lake" / "orders" / "v1")
    before = files_under(tmp_path)
    b = pipeline(tmp_path / "lake", name="payments", stream="payments-stream", state_table="kr-state-2")

    for dry_run in (True, False):
        with pytest.raises(OutputOwnershipError) as raised:
            claim_output(b, NOW, dry_run=dry_run)

    text = str(raised.value)
    assert text.startswith(f"pipeline 'payments' may not claim output {b.output}: it holds output {a.output} of pipeline 'orders' ")
    assert f"Give pipeline 'payments' an output root outside {a.output} that does not hold it either" in text
    assert text.endswith("Nothing was written.")
    assert files_under(tmp_path) == before and read_owner(b.output) is None


def test_a_root_of_an_unreadable_owner_record_around_it_is_refused_naming_the_record(tmp_path: Path) -> None:
    record = Path(layout.owner_path(str(tmp_path / "a")))
    record.parent.mkdir()
    record.write_text("not json")
    b = pipeline(tmp_path / "a" / "b")
    expected = f"inside output {tmp_path / 'a'} of a pipeline whose owner record {record} cannot be read"
    with pytest.raises(OutputOwnershipError, match=expected):
        claim_output(b, NOW)
    assert not Path(b.output).exists()


def test_roots_claimed_before_nesting_was_refused_keep_working_and_the_inner_one_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = claimed_with_a_batch(tmp_path / "a")
    b = pipeline(tmp_path / "a" / "data" / "other", name="payments", stream="payments-stream", state_table="kr-state-2")
    claim = Owner("payments", "payments-stream", "kr-state-2", NOW.isoformat(), output_format="iceberg")
    write_owner(b.output, claim)  # claimed by a release that did not look around
    a_before, b_before = read_owner(a.output), read_owner(b.output)

    claim_output(a, NOW)  # already claimed: not looked under again
    claim_output(b, NOW)

    assert (read_owner(a.output), read_owner(b.output)) == (a_before, b_before)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"output {b.output} is inside output {a.output} of pipeline 'orders'" in w for w in warned), warned


def test_roots_beside_each_other_are_claimed(tmp_path: Path) -> None:
    claimed_with_a_batch(tmp_path / "lake" / "orders")
    beside = pipeline(tmp_path / "lake" / "orders-2", name="payments", stream="payments-stream", state_table="kr-state-2")
    claim_output(beside, NOW)  # a name that starts like the other root's is not inside it
    owner = read_owner(beside.output)
    assert owner is not None and owner.pipeline_name == "payments"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"name": "payments"},
            "pipeline 'payments' may not write output {root}: output {root} has no owner record (_kinesis_replay_owner.json: "
            "deleted?), and its commit records (_commits, up to batch 2) are of pipeline 'orders' (stream orders-stream), whose "
            "output it is. Both would number their batches from 1 and replace each other's. Give pipeline 'payments' an output "
            "root of its own; pipeline 'orders''s next run writes its owner record again. Nothing was written.",
        ),
        ({"stream": "other"}, "(_commits, up to batch 2) hold stream orders-stream, and the config now names stream other"),
    ],
)
def test_a_root_whose_owner_record_is_gone_is_another_pipelines_when_its_commit_records_say_so(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    """Whatever the intruder's state table holds: no plan claims it, and no recovery takes it over."""
    from kinesis_replay.steps import recovery

    owner = pipeline(tmp_path / "out", output_format="directory")  # no table: the guards of the output alone
    claim_output(owner, NOW)
    for i in (1, 2):
        commit_records.write_commit_record(owner.output, committed(owner, i))
    Path(layout.owner_path(owner.output)).unlink()
    intruder = pipeline(tmp_path / "out", output_format="directory", **change)
    for head in (Head(), Head(next_batch_id=3, version=2)):
        with pytest.raises(OutputOwnershipError) as raised:
            check_before_plan(intruder, head)
        assert message.format(root=owner.output) in str(raised.value)
        assert RECOVER_PARAM not in str(raised.value)
    with pytest.raises(OutputOwnershipError, match="Nothing was written"):
        recovery.recover(intruder, None, None, NOW)  # type: ignore[arg-type]  # refused before any client is used
    assert read_owner(owner.output) is None and commit_records.committed_batch_ids(owner.output) == [1, 2]
    check_before_plan(owner, Head(next_batch_id=3, version=2))  # the pipeline whose records they are goes on
    claim_output(owner, NOW)  # and its plan claims the root again
    found = read_owner(owner.output)
    assert found is not None and (found.pipeline_name, found.stream) == ("orders", "orders-stream")


def test_a_lost_state_table_over_results_without_commit_records_is_not_told_to_recover(tmp_path: Path) -> None:
    """A recovery needs commit records: advising one there would be advice that cannot be followed."""
    p = pipeline(tmp_path / "out")
    result = Path(layout.result_path(p.output, 7))
    result.parent.mkdir(parents=True)
    result.write_text("{}")
    with pytest.raises(StateLostError) as raised:
        check_before_plan(p, Head())
    assert "A recovery needs the commit records (_commits) that this output has none of" in str(raised.value)
    assert RECOVER_PARAM not in str(raised.value)


def test_a_plan_that_resumes_a_batch_writes_a_deleted_owner_record_again(tmp_path: Path) -> None:
    """Else every run would resume the batch, and its replay refuse it for the missing record, for ever."""
    from kinesis_replay.steps import plan

    p = pipeline(tmp_path / "out", output_format="directory")
    claim_output(p, NOW)
    for i in (1, 2):
        commit_records.write_commit_record(p.output, committed(p, i))
    Path(layout.owner_path(p.output)).unlink()
    in_flight = replace(committed(p, 3), status=BatchStatus.FAILED)

    class Ledger:
        def get_head(self, name: str) -> Head:
            return Head(next_batch_id=4, in_flight=3, version=3)

        def get_batch(self, name: str, batch_id: int) -> Batch:
            return in_flight

    with pytest.raises(OutputOwnershipError, match="its next run's plan writes the record again"):
        require_owner(p)  # the replay's refusal, and its advice
    result = plan.plan_batch(p, None, Ledger(), "run", NOW, dry_run=True)  # type: ignore[arg-type]
    assert result.resumed and read_owner(p.output) is None  # a dry run writes nothing
    result = plan.plan_batch(p, None, Ledger(), "run", NOW)  # type: ignore[arg-type]
    assert result.resumed and result.batch == in_flight
    require_owner(p)  # the replay goes on
    owner = read_owner(p.output)
    assert owner is not None and (owner.pipeline_name, owner.stream, owner.state_table) == ("orders", "orders-stream", "kr-state")


@pytest.mark.parametrize(
    ("text", "says"),
    [("{not json", "is not valid JSON"), (json.dumps({"pipeline": "orders"}), "not an owner record (missing 'stream')")],
    ids=["not JSON", "a field missing"],
)
def test_a_malformed_owner_record_fails_the_plan_at_once_saying_what_to_do(tmp_path: Path, text: str, says: str) -> None:
    """A retry reads the same file: the task fails at once, and moving the file aside lets the plan write it again."""
    from kinesis_replay.core.errors import OutputCorruptError

    p = pipeline(tmp_path / "out")
    record = Path(layout.owner_path(p.output))
    record.parent.mkdir(parents=True)
    record.write_text(text)
    with pytest.raises(OutputCorruptError, match=f"{record}:? .*{re.escape(says)}") as raised:
        claim_output(p, NOW)
    assert not raised.value.retryable and "move that file aside: the pipeline's next plan writes it again" in str(raised.value)
    assert record.read_text() == text  # nothing overwrote it
    record.rename(record.with_name("owner.json.bad"))  # the advice, followed: the next plan claims the (empty) root again
    claim_output(p, NOW)
    assert read_owner(p.output) is not None and read_owner(p.output).pipeline_name == "orders"  # type: ignore[union-attr]


def test_a_directory_pipeline_asked_for_its_table_fails_at_once_saying_what_it_can_do(tmp_path: Path) -> None:
    from kinesis_replay.adapters import iceberg_table
    from kinesis_replay.core.errors import NoTableError

    p = pipeline(tmp_path / "out", output_format="directory")
    with pytest.raises(NoTableError, match="pipeline 'orders' has output_format directory, so it has no Iceberg table") as raised:
        iceberg_table.require_table(p)
    assert not raised.value.retryable
    assert 'trigger kinesis_replay_backfill_orders with {"batches": {"batch_ids": [3, 7]}}' in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_another_pipelines_root_is_refused_before_the_pipelines_catalog_is_loaded(tmp_path: Path) -> None:
    """The plan decides whose the root is before it reads the table: an intruder whose catalog cannot load is told the
    root is another's, which is what to fix first (the catalog is only read once the root is the pipeline's)."""
    owner = pipeline(tmp_path / "out")
    claim_output(owner, NOW)
    intruder = pipeline(tmp_path / "out", name="payments")
    assert intruder.table is not None
    unreachable = {"type": "rest", "uri": "http://127.0.0.1:1"}
    intruder = replace(intruder, table=replace(intruder.table, catalog="lake", catalog_properties=unreachable))
    with pytest.raises(OutputOwnershipError, match="it belongs to pipeline 'orders'"):
        check_before_plan(intruder, Head(next_batch_id=1, version=1))
    with pytest.raises(KinesisReplayError, match="cannot load Iceberg catalog 'lake'"):  # its own root: the catalog's turn
        check_before_plan(replace(intruder, output=str(tmp_path / "own")), Head(next_batch_id=1, version=1))
    assert read_owner(owner.output) == Owner("orders", "orders-stream", "kr-state", NOW.isoformat(), output_format="iceberg")
