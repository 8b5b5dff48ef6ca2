"""The commit tasks' OpenLineage (docs/lineage.md): off means nothing imported; a lineage that fails never fails a commit."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import kinesis_replay_lineage as lineage
import kinesis_replay_tasks as tasks
from kinesis_replay.core.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
ENTRY = {"name": "orders", "stream": "orders", "output": "/tmp/kr-lineage/out", "schedule": None, "initial_position": "TRIM_HORIZON",
         "state_table": "t", "spark": {}}  # fmt: skip
FIGURES = {"pipeline": "orders", "kind": "regular", "batch_id": 3, "shards": 1, "records": 10, "bad_records": 0, "bytes": 100,
           "seconds": 1.0, "path": "/tmp/kr-lineage/out", "snapshot_id": 7, "ranges": [{"shard_id": "shardId-0"}]}  # fmt: skip

# Airflow's plugins and listeners loaded as a task runner loads them, the DAGs built, and a commit task's attach called:
# which OpenLineage modules are then imported, and which listeners registered.
PROBE = """
import json, sys
sys.path[:0] = [{dags!r}, {plugins!r}]
from airflow.sdk.listener import get_listener_manager
import kinesis_replay_dags, kinesis_replay_lineage
from kinesis_replay.core.config import parse_config
(p,) = parse_config({{"pipelines": [{entry!r}]}})
task = type("Task", (), {{}})()
kinesis_replay_lineage.attach({{"task": task}}, p, {figures!r})
listeners = [type(x).__name__ for x in get_listener_manager().pm.get_plugins()]
mods = sorted(m for m in sys.modules if m.startswith(("openlineage", "airflow.providers.openlineage.plugins.listener",
                                                      "airflow.providers.openlineage.extractors")))
print(json.dumps({{"listeners": listeners, "modules": mods}}))
"""


def probe(tmp_path: Path, **env: str) -> dict[str, Any]:
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [ENTRY]}))
    code = PROBE.format(dags=str(ROOT / "dags"), plugins=str(ROOT / "plugins"), entry=ENTRY, figures=FIGURES)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__OPENLINEAGE__", "OPENLINEAGE_"))}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, "KINESIS_REPLAY_CONFIG": str(config), **env},
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "env",
    [{}, {"AIRFLOW__OPENLINEAGE__DISABLED": "True", "AIRFLOW__OPENLINEAGE__TRANSPORT": '{"type": "console"}'}],
    ids=["no transport", "disabled"],
)
def test_without_a_transport_or_disabled_no_listener_is_registered_and_nothing_of_openlineage_is_imported(
    tmp_path: Path, env: dict[str, str]
) -> None:
    found = probe(tmp_path, **env)
    assert "OpenLineageListener" not in found["listeners"] and found["modules"] == [], found


def test_with_a_transport_the_providers_listener_is_registered(tmp_path: Path) -> None:
    """The control for the test above: the same probe sees the listener once a transport is configured."""
    assert "OpenLineageListener" in probe(tmp_path, AIRFLOW__OPENLINEAGE__TRANSPORT='{"type": "console"}')["listeners"]


def test_a_lineage_that_cannot_be_built_is_logged_and_never_raised(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    (pipeline,) = parse_config({"pipelines": [{**ENTRY, "stream": "gone"}]})
    lineage._ARNS.clear()

    def no_stream(p: Any) -> Any:
        def describe(**kwargs: Any) -> Any:
            raise RuntimeError("ResourceNotFoundException: stream gone not found")

        return SimpleNamespace(describe_stream_summary=describe)

    monkeypatch.setattr(tasks, "kinesis_client", no_stream)
    task = SimpleNamespace()
    lineage.attach({"task": task}, pipeline, dict(FIGURES))
    with caplog.at_level(logging.WARNING):
        assert task.get_openlineage_facets_on_complete(None) is None
    assert "pipeline orders: batch 3 is committed; its OpenLineage inputs, outputs and facets were left out" in caplog.text
    assert "stream gone not found" in caplog.text


def test_the_providers_objects_for_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    (pipeline,) = parse_config({"pipelines": [ENTRY]})
    lineage._ARNS.clear()
    arn = {"StreamDescriptionSummary": {"StreamARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders"}}
    monkeypatch.setattr(tasks, "kinesis_client", lambda p: SimpleNamespace(describe_stream_summary=lambda **kw: arn))
    task = SimpleNamespace()
    lineage.attach({"task": task}, pipeline, dict(FIGURES))
    found = task.get_openlineage_facets_on_complete(None)
    from openlineage.client.serde import Serde

    assert [(d.namespace, d.name) for d in found.inputs] == [("arn:aws:kinesis:us-east-1:000000000000", "stream/orders")]
    (out,) = found.outputs
    assert (out.namespace, out.name) == ("file", "/tmp/kr-lineage/out")
    assert json.loads(Serde.to_json(out.outputFacets["outputStatistics"]))["rowCount"] == 10
    facet = json.loads(Serde.to_json(found.run_facets["kinesisReplayBatch"]))
    assert {k: facet[k] for k in ("batch_id", "snapshot_id", "ranges")} == {"batch_id": 3, "snapshot_id": 7, "ranges": FIGURES["ranges"]}
    assert facet["_producer"] == "https://github.com/kinesis-replay/kinesis-replay" and "seconds" not in facet


def test_a_staged_batch_of_a_redecode_gives_no_lineage_until_its_commit() -> None:
    """Staged, a re-decode's or rebuild's batch is not the table's yet: its replay task names no output."""
    (pipeline,) = parse_config({"pipelines": [ENTRY]})
    task = SimpleNamespace()
    lineage.attach({"task": task}, pipeline, {**FIGURES, "kind": "staged", "snapshot_id": None})
    assert not hasattr(task, "get_openlineage_facets_on_complete")
    lineage.attach({"task": task}, pipeline, [{**FIGURES, "kind": "redecode"}])
    assert hasattr(task, "get_openlineage_facets_on_complete")
