"""A first load larger than max_batch lands as several capped batches, one after another, exactly once."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.airflow_plugin import _render
from kinesis_replay.core.config import parse_config
from kinesis_replay.ui.status import pipeline_view
from stack.harness import SUCCESS, check_exactly_once, load_dags, queued_runs, read_output, run_dag, run_queued
from stack.producer import produce

CAP_SECONDS = 6


def test_a_capped_initial_load_lands_as_several_batches_and_catches_up_at_once(
    kinesis: Any, entry: dict[str, Any], store: DynamoDBStateStore, tmp_path: Path, airflow_db: Path
) -> None:
    # Records arriving over about 18 seconds, three times the cap, in puts of 20 every 0.4 s: at least two capped
    # batches, then the one that reaches the tip. Where each capped range ends is tests/unit/test_plan_steps.py's.
    produced = []
    for i in range(45):
        produced += produce(kinesis, entry["stream"], 20, start_index=20 * i)
        time.sleep(0.4)
    capped = {**entry, "schedule": "@daily", "max_batch": {"span": f"{CAP_SECONDS}s"}}
    dag = load_dags(tmp_path / "p.yaml", capped)[f"kinesis_replay_{entry['name']}"]

    first = run_dag(dag)
    assert first.tasks == {**SUCCESS, "plan_next": "success"}, first  # capped: the next run is queued at once
    # The page says how far behind the pipeline is, and when it will have caught up.
    view = pipeline_view(parse_config({"pipelines": [capped]})[0], store, datetime.now(UTC)).to_dict()
    assert view["behind"]["capped_shards"] == 4 and view["behind"]["behind_seconds"] > CAP_SECONDS
    assert view["behind"]["behind_records"] > 0
    assert "Catching up: 4 capped shards are" in _render([view], "") and "behind the tip, about" in view["behind_text"]
    queued = queued_runs(dag.dag_id)
    assert len(queued) == 1 and queued[0][3] == "DagRunTriggeredByType.OPERATOR", queued  # by plan_next, not the schedule
    then = run_queued(dag)
    assert [r.tasks for r in then[:-1]] == [{**SUCCESS, "plan_next": "success"}] * (len(then) - 1), then
    assert then[-1].tasks == SUCCESS, then  # the last batch reached the tip: nothing more is queued
    assert not queued_runs(dag.dag_id)

    ledger = store.list_batches(entry["name"])
    assert len(ledger) == 1 + len(then) >= 3 and all(b.status.value == "COMMITTED" for b in ledger)
    for batch in ledger:
        assert batch.result is not None
        results = batch.result.by_shard()
        for rng in batch.ranges:  # each range holds records that arrived within the cap of its first
            last = results[rng.shard_id].last_arrival
            assert rng.start_arrival is not None and last is not None
            assert (last - rng.start_arrival).total_seconds() < CAP_SECONDS, (batch.batch_id, rng.describe())
    assert [bool(b.notes.capped) for b in ledger] == [True] * (len(ledger) - 1) + [False]
    caught_up = pipeline_view(parse_config({"pipelines": [capped]})[0], store, datetime.now(UTC))
    assert caught_up.behind_text == "within one batch of the tip"
    assert check_exactly_once(produced, read_output(entry["output"])).ok
