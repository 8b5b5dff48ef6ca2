"""Containers of docker-compose.yml's stack killed with SIGKILL while the demo pipeline runs its cycles.

Each schedule is seeded: rounds of records produced, a cycle triggered, and after a random moment one or two of the
stack's containers killed: the scheduler (where the replay task and its Spark driver run), the DAG processor, the
triggerer, the Spark worker (the executors) and master, the api-server, Postgres, and moto (the state table).
kinesalite is never killed: it stands for Kinesis, which keeps its records.

A kill is one of two, both SIGKILL:
- `docker kill`, as an operator's hand: Docker counts it as a stop, so `restart: unless-stopped` leaves the container
  down, and after a random while it is started again (`docker compose start`), as the operator would;
- the container's main process killed from the host, as a crash or the kernel's OOM killer does: Docker sees it die,
  and `restart: unless-stopped` brings it back by itself.

moto keeps DynamoDB in memory: a killed moto comes back without the state table. The next plan refuses, naming the
lost table, and the recovery docs/deployment.md gives for it (a run with recover_from_output, a dry run first)
rebuilds the state from the output's commit records: the only fix the schedule makes, and the one the docs give.

Afterwards every record the stream holds is in the table exactly once, and every snapshot adds whole batches.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from typing import Any

import pytest
from test_stack import DAG, all_landed, exactly_once

from stack.compose_stack import DEMO, LONG_RUNNING, WORK, Compose, StackClient, log
from stack.producer import produce

KILLABLE = (
    "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "spark-worker", "spark-master",
    "airflow-apiserver", "postgres", "moto",
)  # fmt: skip
# make test-compose COMPOSE_SEEDS=...; .ci/run runs the first only (docs/testing.md says why).
SEEDS = tuple(int(s) for s in os.environ.get("COMPOSE_SEEDS", "11,29,47").split(","))
ROUNDS = 3
RECORDS_PER_ROUND = 200
pytestmark = pytest.mark.timeout(2700)  # pyproject's 600 s is too short: a schedule waits out the stack's restarts and recoveries


def kill(compose: Compose, service: str, how: str) -> None:
    """SIGKILL to a service's container: ``docker`` with `docker kill`, ``crash`` to its main process from the host."""
    (container,) = [c["Name"] for c in compose.containers() if c["Service"] == service]
    if how == "docker":
        subprocess.run(["docker", "kill", container], check=True, capture_output=True)
        return
    pid = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container], check=True, capture_output=True, text=True)
    os.kill(int(pid.stdout), signal.SIGKILL)


def recover_if_lost(client: StackClient, events: list[str]) -> None:
    """A plan refused because moto forgot the state table: the documented recovery, a dry run first."""
    if client.state_table_exists() and client.store().get_head(DEMO["name"]).version != 0:
        return
    runs = client.request(f"/api/v2/dags/{DAG}/dagRuns?order_by=-start_date&limit=1")[1]["dag_runs"]
    if not runs or client.task_states(DAG, runs[0]["dag_run_id"]).get("plan") != "failed":
        return
    log_text = client.task_log(DAG, runs[0]["dag_run_id"], "plan")
    assert "holds no state for the pipeline" in log_text, log_text[-2000:]
    for conf in ({"recover_from_output": True, "dry_run": True}, {"recover_from_output": True}):
        run_id = client.trigger(DAG, conf)
        state = client.wait_run(DAG, run_id)
        events.append(f"recover{' (dry run)' if 'dry_run' in conf else ''}: {state}")


def settle(compose: Compose, events: list[str]) -> None:
    """Every long-running service healthy again: restarted by Docker, else started with `docker compose up -d`."""
    try:
        compose.wait_healthy(timeout=240)
    except RuntimeError:
        down = [s for s, (state, health, _) in compose.states().items() if s in LONG_RUNNING and (state, health) != ("running", "healthy")]
        events.append(f"not back by themselves: {down}; docker compose up -d")
        compose("up", "-d", timeout=900)
        compose.wait_healthy()


@pytest.mark.parametrize("seed", SEEDS)
def test_containers_killed_while_the_pipeline_runs_lose_and_duplicate_nothing(
    seed: int, compose: Compose, client: StackClient, record_property: Any
) -> None:
    rng, events, started = random.Random(seed), [], time.monotonic()
    kinesis = client.boto("kinesis")
    for round_ in range(ROUNDS):
        produce(kinesis, DEMO["stream"], RECORDS_PER_ROUND, start_index=10_000 * seed + RECORDS_PER_ROUND * round_)
        run_id = client.trigger(DAG)
        time.sleep(rng.uniform(2, 45))
        victims = [(v, rng.choice(("docker", "crash"))) for v in rng.sample(KILLABLE, rng.choice((1, 1, 2)))]
        for victim, how in victims:
            kill(compose, victim, how)
        stopped = [v for v, how in victims if how == "docker"]
        if stopped:  # the operator notices, and starts what they killed again
            time.sleep(rng.uniform(5, 60))
            compose("start", *stopped, timeout=300)
        try:
            state = client.wait_run(DAG, run_id, timeout=900)
        except TimeoutError as e:
            state = str(e)
        what = ", ".join(f"{v} ({'docker kill, started again' if how == 'docker' else 'crashed'})" for v, how in victims)
        events.append(f"{time.monotonic() - started:.0f} s, round {round_}: killed {what}; the cycle: {state}")
        settle(compose, events)
        recover_if_lost(client, events)

    for attempt in range(8):  # clean cycles until the stream has landed, recovering a state table moto lost
        if client.state_table_exists() and all_landed(client):
            break
        run_id = client.trigger(DAG)
        state = client.wait_run(DAG, run_id)
        events.append(f"{time.monotonic() - started:.0f} s, drain {attempt + 1}: {state} {client.task_states(DAG, run_id)}")
        recover_if_lost(client, events)
    result, lake = exactly_once(client)
    outcome = {
        "seed": seed, "rounds": ROUNDS, "records": result.expected, "rows": result.rows, "lost": result.lost,
        "duplicated": result.duplicated, "unexpected": result.unexpected, "history": lake["history"],
        "seconds": round(time.monotonic() - started), "landed": all_landed(client), "events": events,
    }  # fmt: skip
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / f"faults-{seed}.json").write_text(json.dumps(outcome, indent=1))
    log(json.dumps(outcome))
    record_property("compose_faults", json.dumps(outcome))
    assert outcome["landed"], events
    assert result.ok and lake["history"] == [], (result, lake["history"], events)
