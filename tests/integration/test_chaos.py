"""Exactly once under randomized fault schedules: fixed seeds, the real DAGs and Spark job, the output read with pyarrow.

Each seed is a test of its own, so that pytest-xdist (make test runs two workers) balances them with the rest. A few
seeds run again with the output on S3 (moto) and the table in Glue, for the faults that land on the storage.

`make chaos SCHEDULES=N` runs the same schedules with random seeds (tests/stack/chaos.py); `CHAOS_OUTPUT=s3` on S3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError

from stack import chaos
from stack.faults import StateFault, StateTableProxy

# The fewest seeds whose schedules take every fault and step, a cap before a cycle, and a re-decode of a committed batch
# cut short in its commit: a cover of 1..20000 with as few Spark steps (17, as many as before the re-decode step) and
# records as it allows, and of those, one whose faults and steps find something to act on: each cycle's fault finds a
# batch to plan (a Spark kill, a job to kill), and the table steps, the backfill and the state table's deletion find
# committed batches (after failed cycles alone, such a step finds no table, or nothing to lose). 17869 cuts a commit
# right after its table commit, 3113 commits to the table concurrently with a cycle; the table steps drop the table
# (9096, 11102), roll it back past a backfill's snapshot (3113) and delete its metadata (16710), each then restored as
# docs/operating.md says; 11102 then adds a field to payload.schema and re-decodes the batch, its commit task dying
# between the table's snapshot and the quarantine table's, and clears the failed task (a recovery that triggers the
# re-decode again replays it again: a Spark job more). 4241 re-decodes a batch (its commit's ledger write refused, the
# task cleared) and then rolls the table back past the re-decode: the counts agree, only the decoding is older, and the
# next plan must refuse it and the restore put the re-decoded files back (it went unnoticed before the snapshots and
# the ledger's head counted re-decodes; no seed of the cover does both). None takes the re-decode's
# died_before_commit_record, which failed the checker when these seeds were chosen and passes since the re-decode's
# commit writes each batch's commit record first (the cover holds as it was: each step still acts).
SEEDS = (2730, 2842, 3113, 4241, 4709, 5750, 9096, 11102, 16710, 17869)
STEPS = 3
SPARK_STEPS = 2
# The schedules run again on S3, for the faults that land on the storage; each costs about 2.5 minutes, so three. In a
# pipeline's first cycle the state table's 4th write is verify's (the shards, the plan, the replay's progress, then
# verify), so "state_unreachable write=4" there fails verify. 2097: verify fails, and the job replaying the batch again
# is killed while it writes its files to S3. 16606: the commit is cut short right after its Glue commit, then the
# table's metadata/ is deleted from S3 and restored from the output. 9998: another writer commits to the table in Glue
# during the batch's commit, which retries on Glue's new version; then the batch is re-decoded, and the state table goes
# dark at the ledger's update, after both tables' Glue commits; clearing the commit task finishes it.
S3_SEEDS = (2097, 16606, 9998)


def test_the_seeds_cover_every_fault() -> None:
    steps = [step for seed in SEEDS for step in chaos.generate(seed, STEPS, SPARK_STEPS)]
    assert {s.fault for s in steps if s.kind == "cycle"} == set(chaos.CYCLE_FAULTS)
    assert {s.kind for s in steps} == set(chaos.STEP_KINDS)
    assert {s.fault for s in steps if s.kind == "lose_state"} == set(chaos.LOSSES)
    assert {s.fault for s in steps if s.kind == "table"} == set(chaos.TABLE_FAULTS)
    capped_cycles = [seed for seed in SEEDS if "cycle" in [s.kind for s in chaos.generate(seed, STEPS, SPARK_STEPS)][_cap(seed) :]]
    assert capped_cycles, "no schedule runs a cycle after capping its batches"
    assert any(_redecodes_a_committed_batch(seed, COMMIT_CUTS) for seed in SEEDS), "no schedule cuts a re-decode's commit short"
    assert IN_A_WORKER_PROCESS in SEEDS, "no schedule runs in a worker process of its own, as make chaos runs them"


# Re-decode faults that cut its commit short after the table's snapshot: what a recovery must finish, never redo.
COMMIT_CUTS = ("died_before_quarantine", "ledger_unreachable")


def _redecodes_a_committed_batch(seed: int, faults: tuple[str, ...]) -> bool:
    """The schedule re-decodes, with one of ``faults``, after cycles that leave a committed batch and none in flight."""
    steps = chaos.generate(seed, STEPS, SPARK_STEPS)
    kinds = [s.kind for s in steps]
    if "redecode" not in kinds:
        return False
    before = [s for s in steps[: kinds.index("redecode")] if s.kind in ("cycle", "backfill", "lose_state")]
    clean = ("none", "throttle", "concurrent", "concurrent_table_commits")
    return steps[kinds.index("redecode")].fault in faults and bool(before) and all(s.kind == "cycle" and s.fault in clean for s in before)


def test_the_s3_seeds_take_the_faults_that_land_on_the_storage() -> None:
    schedules = {seed: chaos.generate(seed, STEPS, SPARK_STEPS) for seed in S3_SEEDS}
    faults = {s.fault for steps in schedules.values() for s in steps if s.kind in ("cycle", "table")}
    assert {"kill_spark_write", "state_unreachable_after_table_commit", "concurrent_table_commits", "lose_metadata"} <= faults
    first_cycles = [next(s for s in steps if s.kind == "cycle") for steps in schedules.values()]
    assert any((c.fault, c.n) == ("state_unreachable", 4) for c in first_cycles), "no S3 schedule fails verify"
    assert any(_redecodes_a_committed_batch(seed, COMMIT_CUTS) for seed in S3_SEEDS), "no S3 schedule cuts a re-decode's commit short"


def _cap(seed: int) -> int:
    kinds = [s.kind for s in chaos.generate(seed, STEPS, SPARK_STEPS)]
    return kinds.index("cap") if "cap" in kinds else len(kinds)


# The seed that runs as `make chaos` runs every schedule: in a worker process of its own (tests/stack/chaos.py --worker),
# with a copy of the session's Airflow database, so that the plumbing of `make chaos` stays tested. The others run in
# this pytest worker's process, as the other DAG tests do: a process of its own would start Python, import Airflow and
# start dag.test()'s in-process execution API again, about 12 s of CPU a schedule on a busy 2-core machine.
IN_A_WORKER_PROCESS = 17869


def run_schedule(seed: int, stack: Any, work: Path, monkeypatch: pytest.MonkeyPatch, output: str = "local") -> chaos.Outcome:
    if seed == IN_A_WORKER_PROCESS:
        _, (outcome,) = chaos.run_schedules([seed], STEPS, SPARK_STEPS, stack, work, workers=1, echo=lambda _: None, output=output)
        return outcome
    # A schedule points the tasks' aws_default connection at its proxies: the session's is restored afterwards.
    for name in ("AIRFLOW_CONN_AWS_DEFAULT", "KINESIS_REPLAY_CONFIG"):
        monkeypatch.setenv(name, os.environ[name])
    return chaos.run_one(seed, STEPS, SPARK_STEPS, stack, work, output)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fault_schedule_lands_every_record_exactly_once(
    seed: int, airflow_db: Path, stack: object, tmp_path: Path, record_property: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One schedule on the session's local stack and Airflow database (``run_schedule``).

    pytest-xdist spreads the schedules over the cores with the rest of the suite; conftest.py prints the
    one-line total over all of them at the end of the session.
    """
    outcome = run_schedule(seed, stack, tmp_path, monkeypatch)
    record_property("chaos", json.dumps({"records": outcome.records, "lost": outcome.lost, "duplicated": outcome.duplicated}))
    assert outcome.ok, outcome.report()
    assert outcome.records > 0 and outcome.lost == outcome.duplicated == 0, outcome.report()


@pytest.mark.parametrize("seed", S3_SEEDS)
def test_a_fault_schedule_on_s3_lands_every_record_exactly_once(
    seed: int, airflow_db: Path, stack: object, tmp_path: Path, record_property: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, the output at s3://<bucket>/raw/<pipeline> on the moto server and the table in its Glue: the job's tasks
    write to S3, the kill moments watch S3 (an upload begun, an object written), and the checker reads S3."""
    outcome = run_schedule(seed, stack, tmp_path, monkeypatch, output="s3")
    record_property("chaos", json.dumps({"records": outcome.records, "lost": outcome.lost, "duplicated": outcome.duplicated}))
    assert outcome.ok, outcome.report()
    assert outcome.records > 0 and outcome.lost == outcome.duplicated == 0, outcome.report()


def test_the_state_table_proxy_loses_an_answer_or_goes_dark_as_armed(stack: Any, dynamodb: Any, state_table: str) -> None:
    """The harness's own faults, checked against moto: a lost answer leaves the write applied; dark means no answer at all."""
    proxy = StateTableProxy(stack.moto_url).start()
    try:
        client = boto3.client("dynamodb", endpoint_url=proxy.url, config=Config(retries={"total_max_attempts": 1}))

        def put(n: int) -> None:
            client.put_item(TableName=state_table, Item={"pk": {"S": "chaos"}, "sk": {"S": str(n)}})

        proxy.arm(StateFault("lost_ack", write=2))
        put(1)
        with pytest.raises(ConnectionClosedError):
            put(2)
        put(3)
        assert proxy.fired == "lost_ack at write 2 (PutItem)"
        stored = dynamodb.query(TableName=state_table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "chaos"}})
        assert sorted(item["sk"]["S"] for item in stored["Items"]) == ["1", "2", "3"]  # the lost answer's write was applied

        proxy.arm(StateFault("unreachable", write=1))
        with pytest.raises(ConnectionClosedError):
            put(4)
        with pytest.raises(ConnectionClosedError):
            client.get_item(TableName=state_table, Key={"pk": {"S": "chaos"}, "sk": {"S": "1"}})  # reads too, once dark
        assert "4" not in [i["sk"]["S"] for i in dynamodb.scan(TableName=state_table)["Items"]]
    finally:
        proxy.stop()
