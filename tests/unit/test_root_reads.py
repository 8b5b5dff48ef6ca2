"""How often a step reads the output's owner record: once per task, as the loader reads it (adapters.output_root).

Every plan, replay and commit loads what the root holds once and decides over that; the claim's write reads the record
back only when it did not win outright. A read counted here is a request on S3, at every run of every pipeline.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fakes.replay import replay
from fakes.world import World
from kinesis_replay.adapters import output_root
from kinesis_replay.adapters.layout import OWNER_FILE
from kinesis_replay.steps import in_flight
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.verify import verify_batch


class Reads:
    """The owner-record reads, by the step the test says it is in."""

    def __init__(self) -> None:
        self.step = ""
        self.by_step: Counter[str] = Counter()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    counted = Reads()
    read_json = output_root.read_json

    def counting(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(OWNER_FILE):
            counted.by_step[counted.step] += 1
        return read_json(path, *args, **kwargs)

    monkeypatch.setattr(output_root, "read_json", counting)
    return counted


def test_each_plan_replay_and_commit_reads_the_owner_record_once(tmp_path: Path, reads: Reads) -> None:
    world = World(tmp_path)
    for n in (1, 2):  # the first plan claims a new root, the second finds it claimed
        world.produce(20)
        reads.step = f"plan {n}"
        batch = world.plan()
        assert batch is not None
        reads.step = f"replay {n}"
        in_flight.batch_to_replay(world.pipeline, world.kinesis, world.store, batch.batch_id, None, now=world.clock.now)
        replay(world.pipeline, world.kinesis, batch)
        reads.step = f"verify {n}"
        verify_batch(world.pipeline, world.store, batch.batch_id)
        reads.step = f"commit {n}"
        commit_batch(world.pipeline, world.store, batch.batch_id)
    assert dict(reads.by_step) == {"plan 1": 1, "replay 1": 1, "commit 1": 1, "plan 2": 1, "replay 2": 1, "commit 2": 1}
    assert world.landed() == world.expected()
