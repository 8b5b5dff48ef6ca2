"""A run's trigger parameters: a key no DAG takes, a restore given batches, and a batch id that is not an integer are
refused by the DAG's first task, before anything is read or written (issue 44, point 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from fakes.world import World
from kinesis_replay.core.errors import ParameterError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tasks_world: World) -> World:
    return tasks_world


def snapshot(world: World) -> tuple[Any, ...]:
    """The ledger and the output: what a refused trigger must leave as it was."""
    files = sorted((p.relative_to(world.pipeline.output), p.stat().st_mtime_ns) for p in Path(world.pipeline.output).rglob("*"))
    return world.store.get_head("orders"), world.store.get_shards("orders"), world.store.list_batches("orders"), files


@pytest.mark.parametrize(
    ("task", "params", "allowed"),
    [
        ("plan", {"dry_run": False, "dryrun": True}, "dry_run, acknowledge_data_loss, recover_from_output"),
        (
            "select_backfill",
            {"batches": {"batch_ids": [1]}, "dryrun": True},
            "batches, restore_table, redecode, rebuild, copy_expired, dry_run",
        ),
        ("maintain_table", {"dry_run": False, "orphan_age_hour": 1}, "dry_run, orphan_age_hours, compact, target_file_size_mb"),
    ],
)
def test_a_key_the_dag_does_not_take_is_refused_naming_the_allowed_ones_before_anything_runs(
    world: World, task: str, params: dict[str, Any], allowed: str
) -> None:
    before = snapshot(world)
    unknown = next(k for k in params if k not in allowed.split(", "))
    refusal = rf"has no trigger parameter '{unknown}'; it takes {allowed}\. Nothing was run"
    with pytest.raises(AirflowFailException, match=refusal) as refused:
        if task == "plan":
            tasks.plan(world.pipeline, "manual__1", params)
        else:
            getattr(tasks, task)(world.pipeline, params)
    assert isinstance(refused.value.__cause__, ParameterError)
    assert f"pipeline {world.pipeline.name!r}" in str(refused.value)
    assert snapshot(world) == before


def test_the_trigger_parameters_allowed_are_the_ones_each_dag_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KINESIS_REPLAY_CONFIG", str(ROOT / "dags" / "pipelines.yaml"))
    dags = DagBag(dag_folder=str(ROOT / "dags")).dags
    assert set(dags["kinesis_replay_demo"].params.keys()) == set(tasks.REGULAR_PARAMS)
    assert set(dags["kinesis_replay_maintenance_demo"].params.keys()) == set(tasks.MAINTENANCE_PARAMS)
    backfill = set(dags["kinesis_replay_backfill_demo"].params.keys())
    # redecode is allowed ahead of its Param (the re-decode of stored batches): every declared one is allowed, and only it may wait.
    assert backfill <= set(tasks.BACKFILL_PARAMS) and set(tasks.BACKFILL_PARAMS) - backfill <= {"redecode"}


def test_a_restore_given_batches_is_refused_saying_what_each_does(world: World) -> None:
    before = snapshot(world)
    params = {"restore_table": True, "batches": {"batch_ids": [1]}, "dry_run": False}
    with pytest.raises(AirflowFailException, match=r"give either restore_table or batches, not both\. restore_table puts back") as refused:
        tasks.select_backfill(world.pipeline, params, "manual__1")
    assert "batches replays the batches it names" in str(refused.value) and "Nothing was run" in str(refused.value)
    assert snapshot(world) == before


def test_a_rebuild_with_a_restore_is_refused_saying_what_each_does(world: World) -> None:
    before = snapshot(world)
    params = {"restore_table": True, "rebuild": True, "dry_run": False}
    with pytest.raises(AirflowFailException, match=r"give either rebuild or restore_table, not both: a restore puts back") as refused:
        tasks.select_backfill(world.pipeline, params, "manual__1")
    assert "payload.next_schema" in str(refused.value) and "Nothing was run" in str(refused.value)
    assert snapshot(world) == before


def test_copy_expired_without_a_rebuild_is_refused_naming_what_it_is_for(world: World) -> None:
    before = snapshot(world)
    with pytest.raises(AirflowFailException, match=r"copy_expired is a rebuild's .* give it with rebuild: true\. Nothing was run"):
        tasks.select_backfill(world.pipeline, {"batches": {"batch_ids": [1]}, "copy_expired": True}, "manual__1")
    assert snapshot(world) == before


@pytest.mark.parametrize(
    ("batches", "shown"),
    [
        ({"batch_ids": [2.0]}, "batch_ids: 2.0"),
        ({"batch_ids": [1, True]}, "batch_ids: True"),
        ({"batch_ids": ["2"]}, "batch_ids: '2'"),
        ({"from_batch": 1.0, "to_batch": 2}, "from_batch: 1.0"),
        ({"from_batch": 1, "to_batch": 2.5}, "to_batch: 2.5"),
    ],
)
def test_a_batch_id_that_is_not_an_integer_is_refused_naming_the_value(world: World, batches: dict[str, Any], shown: str) -> None:
    before = snapshot(world)
    with pytest.raises(AirflowFailException, match=rf"{shown} is not a batch id \(an integer from 1 to") as refused:
        tasks.select_backfill(world.pipeline, {"batches": batches, "dry_run": False}, "manual__1")
    assert "written without quotes or a decimal point" in str(refused.value)
    assert snapshot(world) == before


def test_integer_ids_still_select_their_batches(world: World) -> None:
    from kinesis_replay.steps import backfill

    _, chosen = backfill.choose(world.pipeline, world.kinesis, world.store, {"batch_ids": [2, 1]}, now=world.clock())
    assert [b.batch_id for b in chosen] == [1, 2]
