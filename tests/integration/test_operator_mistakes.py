"""Ordinary operator mistakes through the real DAGs: each is refused before anything is written, and nothing is lost.

Two pipelines on one output, a state table deleted or renamed, an output changed in the config. After each
refusal the tests check what the output and the ledger hold; after each recovery, exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.layout import OWNER_FILE
from kinesis_replay.adapters.output_root import read_owner
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.state import BatchStatus
from stack.harness import (
    SUCCESS,
    batch_dirs,
    check_exactly_once,
    load_dags,
    pipeline_entry,
    read_output,
    run_dag,
    scheduler_asset_pass,
)
from stack.producer import ensure_stream, produce


def asset_event_uris(pipeline_name: str) -> list[str]:
    """The URI of the Asset each of the pipeline's commits emitted an event on, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetModel.uri).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
        return list(session.scalars(query.where(AssetModel.name == f"kinesis_replay_{pipeline_name}").order_by(AssetEvent.timestamp)))


@pytest.fixture
def dag_for(tmp_path: Path, airflow_db: Path) -> Any:
    def build(entry: dict[str, Any]) -> Any:
        return load_dags(tmp_path / f"{entry['name']}-{uuid.uuid4().hex[:6]}.yaml", entry)[f"kinesis_replay_{entry['name']}"]

    return build


def plan_error(entry: dict[str, Any], params: dict[str, Any] | None = None) -> str:
    """The plan task's own exception for this config: not retried, and what it says."""
    (pipeline,) = parse_config({"pipelines": [entry]})
    with pytest.raises(AirflowFailException) as raised:
        tasks.plan(pipeline, "manual__test", params or {})
    return str(raised.value)


def refused_plan(dag: Any, entry: dict[str, Any]) -> str:
    """Run the pipeline's DAG, whose plan must fail outright (the run failed, not up for retry), and return what the
    plan says."""
    refused = run_dag(dag)
    assert refused.state == "failed" and refused.tasks["plan"] == "failed", refused
    return plan_error(entry)


def ledger(store: DynamoDBStateStore, name: str) -> dict[str, Any]:
    """Everything the state table holds of a pipeline, comparable before and after."""
    return {
        "head": store.get_head(name),
        "shards": store.get_shards(name),
        "batches": [(b.batch_id, b.status, b.ranges) for b in store.list_batches(name)],
    }


def test_a_renamed_state_table_is_refused_and_a_recovery_adopts_it(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    produced = produce(kinesis, entry["stream"], 150)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    before = ledger(store, entry["name"])
    renamed = {**entry, "state_table": f"{entry['state_table']}-new"}
    produced += produce(kinesis, entry["stream"], 50, start_index=150)
    try:
        message = refused_plan(dag_for(renamed), renamed)
        assert f"output {entry['output']} is kept with state table {entry['state_table']}" in message
        assert f"the config now names state table {renamed['state_table']}" in message
        assert ledger(store, entry["name"]) == before  # the old table is untouched
        new_store = DynamoDBStateStore(dynamodb, renamed["state_table"])
        assert new_store.get_head(entry["name"]).version == 0 and new_store.list_batches(entry["name"]) == []

        assert run_dag(dag_for(renamed), run_conf={"recover_from_output": True}).tasks == SUCCESS
        owner = read_owner(entry["output"])
        assert owner is not None and owner.state_table == renamed["state_table"]
        assert [b.batch_id for b in new_store.list_batches(entry["name"])] == [1, 2]
        landed = check_exactly_once(produced, read_output(entry["output"]))
        assert landed.ok and landed.rows == 200, landed
    finally:
        dynamodb.delete_table(TableName=renamed["state_table"])


def test_a_changed_output_is_refused_and_a_moved_one_goes_on(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any, tmp_path: Path
) -> None:
    """A directory output: a table's metadata holds absolute paths, so a table is not moved by moving its files."""
    entry = {**entry, "output_format": "directory"}
    produced = produce(kinesis, entry["stream"], 100)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    before = ledger(store, entry["name"])
    moved = {**entry, "output": str(tmp_path / "moved")}
    produced += produce(kinesis, entry["stream"], 60, start_index=100)

    message = refused_plan(dag_for(moved), moved)
    assert (
        f"state table {entry['state_table']} says batches up to 1 are committed, but output {moved['output']} does not hold batch 1"
        in message
    )
    assert not Path(moved["output"]).exists()  # never claimed
    assert ledger(store, entry["name"]) == before

    shutil.move(entry["output"], moved["output"])  # moved whole, owner record and commit records with it
    assert json.loads((Path(moved["output"]) / OWNER_FILE).read_text())["pipeline"] == entry["name"]
    # The refused run registered the pipeline's Asset at the new root; the scheduler activates it on its next loop.
    scheduler_asset_pass()
    assert run_dag(dag_for(moved)).tasks == SUCCESS
    assert asset_event_uris(entry["name"]) == [f"file://{entry['output']}", f"file://{moved['output']}"]  # the commit names the new root
    landed = check_exactly_once(produced, read_output(moved["output"]))
    assert landed.ok and landed.rows == 160, landed


def test_a_directory_pipeline_upgraded_without_output_format_is_refused_until_it_says_directory(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    """output_format's default became iceberg: a directory pipeline that never set it must not start a table."""
    directory = {**entry, "output_format": "directory"}
    produced = produce(kinesis, entry["stream"], 100)
    assert run_dag(dag_for(directory)).tasks == SUCCESS
    root = Path(entry["output"])
    owner_file = root / OWNER_FILE
    assert json.loads(owner_file.read_text())["output_format"] == "directory"
    # As an older release wrote it: no output_format. Its batch_id=<id>/ folders say what the root is.
    record = json.loads(owner_file.read_text())
    del record["output_format"]
    owner_file.write_text(json.dumps(record))
    before = ledger(store, entry["name"])
    upgraded = {k: v for k, v in entry.items() if k != "output_format"}
    produced += produce(kinesis, entry["stream"], 60, start_index=100)

    message = refused_plan(dag_for(upgraded), upgraded)
    assert (
        f"pipeline {entry['name']!r}: output {entry['output']} was created as a directory output (it holds batch_id=<id>/ folders)"
        in message
    )
    assert "and the pipeline's output_format is now iceberg (output_format's default, when a pipeline does not set it)" in message
    assert f"Set output_format: directory for pipeline {entry['name']!r} in the pipelines config" in message
    assert ledger(store, entry["name"]) == before  # nothing planned
    assert not (root / "metadata").exists() and not (root / "data").exists() and not (root / "_catalog").exists()  # no table
    assert "output_format" not in json.loads(owner_file.read_text())

    # As the message says: the plan of output_format: directory goes on (batch 2 beside batch 1), recording the format.
    # That batch's replay and commit are a directory output's like any other (tests/unit/test_output_root.py,
    # test_an_older_owner_record_over_batch_folders_counts_as_a_directory_output, checks the same rules on a local folder).
    assert run_dag(dag_for(directory).partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
    assert json.loads(owner_file.read_text())["output_format"] == "directory"  # recorded by that plan
    assert [(b[0], b[1]) for b in ledger(store, entry["name"])["batches"]] == [(1, BatchStatus.COMMITTED), (2, BatchStatus.PLANNED)]
    assert batch_dirs(root) == ["batch_id=0000000001"] and check_exactly_once(produced[:100], read_output(root)).ok
    assert f"as its owner record {owner_file} says" in plan_error(upgraded)  # and from now on the record says so


def test_a_lost_or_renamed_table_is_refused_until_it_is_registered_again(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    """Once, the next commit created the table anew, holding only the later batches, and maintenance then deleted the
    earlier batches' files as orphans: a loss no run reported."""
    from pyiceberg.catalog.sql import SqlCatalog

    from kinesis_replay.adapters import iceberg_table

    produced = produce(kinesis, entry["stream"], 120)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    before = ledger(store, entry["name"])
    produced += produce(kinesis, entry["stream"], 40, start_index=120)

    # table.name changed in the config: the catalog has no such table.
    renamed = {**entry, "table": {"name": "orders_v2"}}
    message = refused_plan(dag_for(renamed), renamed)
    assert "table kinesis_replay.orders_v2 in catalog kinesis_replay (sql, embedded) (output" in message
    assert "(sql, embedded) (output" in message and "does not exist, and the ledger" in message
    assert "batches 1 to 1 are committed; it lacks batch 1" in message
    assert "table.* changed in the config" in message and "Nothing was written" in message

    # The embedded catalog deleted (its folder looks like a temporary one): refused, and no empty catalog is made.
    catalog_dir = Path(entry["output"]) / iceberg_table.CATALOG_DIR
    shutil.rmtree(catalog_dir)
    message = refused_plan(dag_for(entry), entry)
    assert "embedded catalog (_catalog/) deleted?" in message and '"restore_table": true, "dry_run": true' in message
    assert not catalog_dir.exists()
    assert ledger(store, entry["name"]) == before

    # The table's files are all there: registering it again on its newest metadata file (as Iceberg documents) serves as
    # well as the restore the message names (tests/integration/test_table_guards.py); the pipeline then goes on.
    catalog_dir.mkdir()
    (p,) = parse_config({"pipelines": [entry]})
    newest = max((Path(entry["output"]) / "metadata").glob("*.metadata.json"), key=lambda f: f.stat().st_mtime)
    catalog = SqlCatalog(p.table.catalog, **iceberg_table.catalog_properties(p.table, p.output))
    catalog.create_namespace_if_not_exists(p.table.namespace)
    catalog.register_table(p.table.identifier, f"file://{newest}")
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok and landed.rows == 160, landed


def test_a_stream_deleted_and_created_again_under_its_name_is_refused(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    """A new stream starts its shard ids over: once, a shard the pipeline had finished was skipped for good, and the
    others' checkpoints were read as the old stream's (a loss reported, if at all, as trimmed by retention)."""
    produce(kinesis, entry["stream"], 60)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    owner = read_owner(entry["output"])
    assert owner is not None and owner.stream_created is not None
    before = ledger(store, entry["name"])

    kinesis.delete_stream(StreamName=entry["stream"], EnforceConsumerDeletion=True)
    kinesis.get_waiter("stream_not_exists").wait(StreamName=entry["stream"], WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    ensure_stream(kinesis, entry["stream"], 2)
    produce(kinesis, entry["stream"], 30)

    message = refused_plan(dag_for(entry), entry)
    assert f"stream {entry['stream']} was created at " in message and f"created at {owner.stream_created}" in message
    assert "deleted and created again" in message and "Nothing was written" in message
    assert ledger(store, entry["name"]) == before and read_owner(entry["output"]) == owner


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_root_owned_by_or_in_or_around_another_pipelines_table_is_refused_and_its_maintenance_removes_only_its_own(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any, tmp_path: Path
) -> None:
    """Another pipeline given an owned root (spelled another way) is refused. Once, a pipeline of a second deployment
    (another config file and state table) was given an output root in a table's data/ folder; it committed its batch,
    and the table's maintenance then removed all of its output (data, metadata, catalog, commit records, owner record)
    as 15 orphan files, while its ledger still said committed."""
    produced = produce(kinesis, entry["stream"], 120)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    root = Path(entry["output"])
    before, files_before = ledger(store, entry["name"]), files_under(root)
    other_table = f"kr-{uuid.uuid4().hex[:8]}"
    other_store = DynamoDBStateStore(dynamodb, other_table)
    other_store.ensure_table()
    other_stream = f"other-{uuid.uuid4().hex[:8]}"
    ensure_stream(kinesis, other_stream, 2)
    try:
        produce(kinesis, other_stream, 40)
        name = entry["name"] + "b"
        # The same root, spelled another way (and a pipeline of this deployment's config would be refused alike).
        intruder = pipeline_entry(name, other_stream, f"file://{root}/./", other_table, retries=2)  # no retry waits out a refusal
        message = refused_plan(dag_for(intruder), intruder)
        owned = f"pipeline {name!r} may not write output {root}: it belongs to pipeline {entry['name']!r} (stream {entry['stream']}"
        assert owned in message
        assert ledger(other_store, name) == {"head": other_store.get_head("none"), "shards": {}, "batches": []}
        for other, relation in ((root / "data" / "replay", "is inside"), (root.parent, "holds")):
            intruder = pipeline_entry(name, other_stream, other, other_table, retries=2)
            message = refused_plan(dag_for(intruder), intruder)
            assert f"pipeline {name!r} may not claim output {other}: it {relation} output {root} of pipeline {entry['name']!r}" in message
            assert "an output root outside" in message and "Nothing was written." in message
            assert ledger(other_store, name) == {"head": other_store.get_head("none"), "shards": {}, "batches": []}
            assert read_owner(str(other)) is None
    finally:
        kinesis.delete_stream(StreamName=other_stream, EnforceConsumerDeletion=True)
    assert files_under(root) == files_before and ledger(store, entry["name"]) == before
    assert check_exactly_once(produced, read_output(entry["output"])).ok  # the owner's batch is whole, and only it
    owner = read_owner(entry["output"])
    assert owner is not None and (owner.pipeline_name, owner.stream) == (entry["name"], entry["stream"])

    # What a release before the check let in: the other pipeline's whole output in the table's data/ folder (here a
    # copy of this pipeline's own, shaped as the table's files are), a note beside it, and a genuine orphan of the
    # table's: an attempt no snapshot took. All a month old; maintenance runs with the shortest orphan age.
    nested = root / "data" / "replay"
    shutil.copytree(root, nested, ignore=shutil.ignore_patterns("data"))
    shutil.copytree(root / "data" / "batch_id=0000000001", nested / "data" / "batch_id=0000000001")
    (root / "data" / "notes.txt").write_text("who wrote this?")
    (live,) = (root / "data" / "batch_id=0000000001").iterdir()
    stale = root / "data" / "batch_id=0000000001" / "attempt=stale"
    shutil.copytree(live, stale)
    month_ago = time.time() - 30 * 86400
    for path in root.rglob("*"):
        os.utime(path, (month_ago, month_ago))
    everything = files_under(root)
    left_alone = {p: b for p, b in everything.items() if not p.startswith(f"{stale}/")}
    assert len(left_alone) < len(everything)  # the stale attempt holds files
    assert sum(p.startswith(f"{nested}/") for p in left_alone) >= 10

    dags = load_dags(tmp_path / "maintenance.yaml", entry)
    # Without compaction, which would write the batch's files again: what this test counts is what orphan removal takes.
    maintained = run_dag(dags[f"kinesis_replay_maintenance_{entry['name']}"], run_conf={"orphan_age_hours": 1, "compact": False})

    assert maintained.state == "success", maintained
    assert files_under(root) == left_alone  # the stale attempt's files went, and nothing else
    assert ledger(store, entry["name"]) == before
    assert check_exactly_once(produced, read_output(entry["output"])).ok


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_catalog_that_cannot_load_fails_the_plan_before_the_root_is_claimed_or_the_stream_read(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, a catalog that could not load was found only at verify: after the root was claimed and the whole batch
    read, and an unreachable one then retried the replay. Now the plan loads it first, and says which key to fix."""
    from kinesis_replay.adapters import kinesis_client
    from kinesis_replay.core.errors import CatalogUnreachableError

    produced = produce(kinesis, entry["stream"], 80)
    listed: list[str] = []
    list_shards = kinesis_client.list_shards
    monkeypatch.setattr(kinesis_client, "list_shards", lambda *a, **k: listed.append("ListShards") or list_shards(*a, **k))
    root, name = Path(entry["output"]), entry["name"]
    fix = f"table.catalog_properties of pipeline {name!r} in the pipelines config"
    for properties, says in (
        (
            {"type": "sql"},
            f"cannot load Iceberg catalog 'lake' (table kinesis_replay.{name} in catalog lake (sql)): ValueError: URI missing",
        ),
        ({"py-catalog-impl": "no_such_module.Catalog"}, "ValueError: Could not initialize Catalog: no_such_module.Catalog"),
    ):
        bad = {**entry, "table": {"catalog": "lake", "catalog_properties": properties}}
        message = refused_plan(dag_for(bad), bad)  # failed outright: a config mistake is not retried
        assert f"pipeline {name!r}: " in message and says in message and f"Fix {fix}" in message, message
        assert not root.exists() and listed == []  # never claimed, the stream never read
        assert ledger(store, name) == {"head": store.get_head("none"), "shards": {}, "batches": []}

    # An endpoint that does not answer: retried (an outage may end), but still before the claim and any read.
    unreachable = {
        **entry,
        "table": {"catalog": "lake", "catalog_properties": {"type": "rest", "uri": f"http://127.0.0.1:{closed_port()}"}},
    }
    (p,) = parse_config({"pipelines": [unreachable]})
    with pytest.raises(CatalogUnreachableError) as raised:
        tasks.plan(p, "manual__test", {})
    assert raised.value.retryable and "the catalog did not answer" in str(raised.value) and fix in str(raised.value)
    assert not root.exists() and listed == []
    assert ledger(store, name) == {"head": store.get_head("none"), "shards": {}, "batches": []}

    # As the message says: the key fixed (here, back to the embedded catalog), the pipeline lands everything.
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok and landed.rows == 80, landed
    before, listed[:] = ledger(store, name), []
    bad = {**entry, "table": {"catalog": "lake", "catalog_properties": {"type": "sql"}}}  # and with batches committed
    assert "URI missing" in refused_plan(dag_for(bad), bad) and listed == []
    assert ledger(store, name) == before and check_exactly_once(produced, read_output(entry["output"])).ok


def test_a_root_whose_owner_record_was_deleted_is_refused_to_another_pipeline_and_taken_up_again_by_its_own(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    """Once, a second pipeline on a root whose owner record was deleted was told to recover_from_output, and the recovery
    then refused ("no owner record"): advice that could not be followed, and, had it worked, a takeover of another
    pipeline's batches. Now the root's commit records say whose it is: the other pipeline is told to take a root of its
    own; the pipeline whose records they are goes on, or (its state table lost too) recovers, as its messages say."""
    produced = produce(kinesis, entry["stream"], 100)
    assert run_dag(dag_for(entry)).tasks == SUCCESS
    root, name = Path(entry["output"]), entry["name"]
    owner_file = root / OWNER_FILE
    owner_file.unlink()
    before = ledger(store, name)

    intruder = {**entry, "name": name + "b"}
    for params in ({}, {"recover_from_output": True}):
        refused = run_dag(dag_for(intruder), run_conf=params)
        assert refused.state == "failed" and refused.tasks["plan"] == "failed", refused
        message = plan_error(intruder, params)
        assert (
            f"pipeline {intruder['name']!r} may not write output {entry['output']}: output {entry['output']} has no owner record" in message
        )
        assert f"are of pipeline {name!r} (stream {entry['stream']}), whose output it is" in message
        assert f"Give pipeline {intruder['name']!r} an output root of its own" in message and "recover_from_output" not in message
        assert not owner_file.exists() and ledger(store, intruder["name"]) == {"head": store.get_head("none"), "shards": {}, "batches": []}
    assert ledger(store, name) == before and check_exactly_once(produced, read_output(root)).ok

    # That the pipeline whose records they are goes on, its plan writing its owner record again, is
    # tests/unit/test_output_root.py's (test_a_root_whose_owner_record_is_gone_is_another_pipelines_when_its_commit_records_say_so).
    # Its owner record and its state table both lost: the plan advises a recovery, which works as written.
    dynamodb.delete_table(TableName=store.table)
    dynamodb.get_waiter("table_not_exists").wait(TableName=store.table)
    produced += produce(kinesis, entry["stream"], 100, start_index=100)
    message = refused_plan(dag_for(entry), entry)
    assert "holds 1 committed batches (up to batch 1)" in message and '"recover_from_output": true' in message
    assert not owner_file.exists()
    dry = run_dag(dag_for(entry), run_conf={"recover_from_output": True, "dry_run": True})  # the advice's two steps, as written
    assert dry.skipped and store.get_head(name).version == 0 and not owner_file.exists()
    assert run_dag(dag_for(entry), run_conf={"recover_from_output": True}).tasks == SUCCESS  # rebuilt, then batch 2
    owner = read_owner(entry["output"])
    assert owner is not None and (owner.pipeline_name, owner.stream, owner.state_table) == (name, entry["stream"], entry["state_table"])
    assert [(b.batch_id, b.status) for b in store.list_batches(name)] == [(i, BatchStatus.COMMITTED) for i in (1, 2)]
    landed = check_exactly_once(produced, read_output(root))
    assert landed.ok and landed.rows == 200, landed
