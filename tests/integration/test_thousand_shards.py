"""A stream of 1,000 open shards: planned, replayed, verified and committed exactly once; the page and a backfill work."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.airflow_plugin import SHARD_ROWS, _render
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.state import RunKind
from kinesis_replay.steps import backfill
from kinesis_replay.ui.status import pipeline_view
from stack.harness import SUCCESS, check_exactly_once, load_dags, pipeline_entry, read_output, run_dag
from stack.producer import ensure_stream, kinesis_client, produce_to_every_shard

SHARDS = 1_000


@pytest.fixture
def wide_stream(stack: object) -> Iterator[str]:
    client = kinesis_client()
    name = f"wide-{uuid.uuid4().hex[:8]}"
    ensure_stream(client, name, SHARDS)
    yield name
    with contextlib.suppress(Exception):
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def test_a_thousand_shard_stream_lands_exactly_once(
    wide_stream: str, store: DynamoDBStateStore, state_table: str, tmp_path: Path, airflow_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kinesis = kinesis_client()
    produced = produce_to_every_shard(kinesis, wide_stream, 2)
    assert len({p.shard_id for p in produced}) == SHARDS
    entry = pipeline_entry(f"w{uuid.uuid4().hex[:8]}", wide_stream, tmp_path / "out", state_table)
    dags = load_dags(tmp_path / "wide.yaml", entry)
    dag, backfill_dag = dags[f"kinesis_replay_{entry['name']}"], dags[f"kinesis_replay_backfill_{entry['name']}"]

    started = time.monotonic()
    assert run_dag(dag).tasks == SUCCESS
    print(f"1,000 shards: one cycle in {time.monotonic() - started:.1f}s")
    assert check_exactly_once(produced, read_output(entry["output"])).ok

    [batch] = store.list_batches(entry["name"])
    assert batch.status.value == "COMMITTED" and len(batch.ranges) == SHARDS and batch.result is not None
    assert len(batch.result.shards) == SHARDS and batch.result.records == len(produced)
    last = {p.shard_id: max(int(q.sequence_number) for q in produced if q.shard_id == p.shard_id) for p in produced}
    assert {s.shard_id: s.checkpoint for s in store.get_shards(entry["name"]).values()} == last

    # Planning found every end with a probe or two, not by reading the shards.
    assert "finding their ends took" in caplog.text

    p = parse_config({"pipelines": [entry]})[0]
    view = pipeline_view(p, store, datetime.now(UTC))
    assert len(view.shards) == SHARDS and view.batches[0].records == len(produced) and view.in_flight is None
    assert (view.history[-1]["records"], view.history[-1]["shards"]) == (len(produced), SHARDS)  # the chart's figures
    progress = store.get_progress(entry["name"])[RunKind.REGULAR]  # the replay's last progress, 100 shards to an item
    assert sum(progress.records.values()) == len(produced) and len(progress.done) == SHARDS
    page = _render([view.to_dict()], "")
    assert page.count("data-shard=") == SHARDS and f"{SHARDS - SHARD_ROWS:,} more shards" in page  # the rest folded

    # A backfill selects the 1,000-range batch, prices it, and replays it identically; nothing moves.
    _, chosen = backfill.choose(p, kinesis, store, {"batch_ids": [1]})
    assert [b.batch_id for b in chosen] == [1] and len(chosen[0].ranges) == SHARDS
    assert backfill.estimate_batch(chosen[0], p.read).records == len(produced)
    shards, head = store.get_shards(entry["name"]), store.get_head(entry["name"])
    replayed = run_dag(backfill_dag, run_conf={"batches": {"batch_ids": [1]}})
    assert replayed.tasks == {"select": "success", "replay": "success", "commit": "skipped"}, replayed
    assert check_exactly_once(produced, read_output(entry["output"])).ok
    assert store.get_shards(entry["name"]) == shards and store.get_head(entry["name"]) == head
    # The backfill's progress is stored apart: the regular batch's last progress is still there, unchanged.
    stored = store.get_progress(entry["name"])
    assert stored[RunKind.REGULAR] == progress, "a backfill replaced the regular batch's progress"
    assert (stored[RunKind.BACKFILL].batch_id, len(stored[RunKind.BACKFILL].done)) == (1, SHARDS)

    # A second cycle with nothing new plans nothing, and reads each shard once.
    again = run_dag(dag)
    assert again.skipped, again
