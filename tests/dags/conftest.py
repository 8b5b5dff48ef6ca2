"""DAG tests' fixtures: the tasks' clients and store replaced by the fakes' world of two committed batches."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinesis_replay_tasks as tasks
from fakes.world import World


@pytest.fixture
def tasks_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Two committed batches on the fakes; the tasks' clients and store are the fakes'."""
    built = World(tmp_path)
    for _ in range(2):
        built.produce(40)
        assert built.cycle() is not None
    monkeypatch.setattr(tasks, "state_store", lambda p: built.store)
    monkeypatch.setattr(tasks, "kinesis_client", lambda p: built.kinesis)
    return built
