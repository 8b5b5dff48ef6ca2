"""docker-compose.yml's stack, started under a real Docker engine the way README tells a user to, and used as they would.

One stack for the module (conftest.py): `docker compose up --build` with a .env made from .env.example, every service
healthy. The demo pipeline lands its stream on the stack's Spark cluster; the table, read through its catalog in a
container of the stack, holds every record the stream holds exactly once; the status page and a backfill answer over
the api-server; a placeholder secret stops a stack at check-secrets; a stack brought down and up again goes on where
its ledger stood, through the documented recovery of the state table moto forgot. The container kills are in
test_stack_faults.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from stack.compose_stack import DEMO, Compose, StackClient, env_from_example
from stack.harness import ExactlyOnce, check_exactly_once, request_json

DAG, BACKFILL = f"kinesis_replay_{DEMO['name']}", f"kinesis_replay_backfill_{DEMO['name']}"
DEMO_RECORDS = 1000  # what demo-producer puts at each start (docker-compose.yml)
# pyproject's 600 s is too short: the first test's set-up starts the stack, building every image on a cold machine.
pytestmark = pytest.mark.timeout(2700)


def exactly_once(client: StackClient) -> tuple[ExactlyOnce, dict[str, Any]]:
    """The stream's records against the table's rows, and the lake as read."""
    import pyarrow as pa

    lake = client.lake()
    shard, sequence, sub, _, data = zip(*lake["rows"], strict=True) if lake["rows"] else ((),) * 5
    rows = pa.table(
        {"shard_id": shard, "sequence_number": sequence, "sub_sequence_number": sub, "data": [base64.b64decode(d) for d in data]},
        schema=pa.schema(
            [("shard_id", pa.string()), ("sequence_number", pa.string()), ("sub_sequence_number", pa.int64()), ("data", pa.binary())]
        ),
    )
    return check_exactly_once(client.stream_records(), rows), lake


def all_landed(client: StackClient) -> bool:
    """Every record the stream holds is at or below its shard's checkpoint, and no batch is in flight."""
    store = client.store()
    head, shards = store.get_head(DEMO["name"]), store.get_shards(DEMO["name"])
    upto = {sid: s.checkpoint or 0 for sid, s in shards.items()}
    return head.in_flight is None and all(int(r.sequence_number) <= upto.get(r.shard_id, 0) for r in client.stream_records())


def cycle(client: StackClient, conf: dict[str, Any] | None = None, timeout: float = 900) -> tuple[str, dict[str, str], str]:
    """One run of the demo DAG, triggered over REST; its end state, its tasks' states and its id."""
    run_id = client.trigger(DAG, conf)
    state = client.wait_run(DAG, run_id, timeout)
    return state, client.task_states(DAG, run_id), run_id


def drain(client: StackClient, cycles: int = 6) -> list[tuple[str, dict[str, str], str]]:
    """Cycles until the stream has landed (a run can find its batch already taken by a scheduled run: it then fails
    at plan, naming the run in flight, and the next one goes on)."""
    runs = []
    for _ in range(cycles):
        if client.state_table_exists() and all_landed(client):
            return runs
        runs.append(cycle(client))
    assert all_landed(client), f"the stream did not land in {cycles} cycles: {runs}"
    return runs


def test_the_stack_lands_the_demo_stream_exactly_once_and_answers_its_users(compose: Compose, client: StackClient) -> None:
    states = compose.states()
    assert {s for s, (state, health, _) in states.items() if (state, health) == ("running", "healthy")} >= {
        "postgres", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
        "kinesalite", "moto", "spark-master", "spark-worker",
    }, states  # fmt: skip
    assert {s: states[s][::2] for s in ("check-secrets", "airflow-init", "demo-producer")} == {
        s: ("exited", 0) for s in ("check-secrets", "airflow-init", "demo-producer")
    }
    assert len(client.stream_records()) == DEMO_RECORDS

    # The demo DAG runs on its schedule (unpaused at creation) and when triggered: either way, batches land.
    status, dag = client.request(f"/api/v2/dags/{DAG}")
    assert status == 200 and dag["is_paused"] is False and dag["timetable_summary"] == "*/5 * * * *", dag
    drain(client)
    store = client.store()
    head = store.get_head(DEMO["name"])
    assert head.next_batch_id >= 2 and head.in_flight is None
    result, lake = exactly_once(client)
    assert result.ok and result.rows == DEMO_RECORDS, result
    assert lake["history"] == [], lake["history"]

    # The Spark cluster did the reading: the master lists the jobs' applications as finished.
    status, master = request_json("http://127.0.0.1:8081/json/")
    assert status == 200 and master["status"] == "ALIVE" and len(master["workers"]) == 1 and master["completedapps"], master

    # The status page, through the api-server, to a logged-in user (and to no one else).
    status, page = client.request("/kinesis-replay/")
    assert status == 200 and "demo" in page, page[:500]
    status, (view,) = client.request("/kinesis-replay/api/pipelines")
    assert status == 200 and view["name"] == "demo" and view["pool_error"] is None, view
    status, _ = client.request("/kinesis-replay/api/pipelines", auth=False)
    assert status in (401, 403)

    # A backfill of the first batch, over the REST API: it succeeds, and neither the ledger nor the rows move.
    shards = store.get_shards(DEMO["name"])
    run_id = client.trigger(BACKFILL, {"batches": {"from_batch": 1, "to_batch": 1}})
    assert client.wait_run(BACKFILL, run_id) == "success", client.task_states(BACKFILL, run_id)
    assert store.get_shards(DEMO["name"]) == shards and store.get_head(DEMO["name"]).next_batch_id == head.next_batch_id
    again, lake = exactly_once(client)
    assert again.ok and again.rows == DEMO_RECORDS, again
    assert lake["history"] == [], lake["history"]


def test_a_placeholder_secret_stops_the_stack_at_check_secrets(compose: Compose, tmp_path: Any) -> None:
    """A .env with a secret left at CHANGE_ME: `docker compose up` (attached, as README says) shows check-secrets' message
    naming it and the command that generates one, and no other service starts. Compose 2.40 exits 0 all the same: what
    tells a user is the message, and `docker compose ps`, which lists nothing running."""
    other = Compose(project=f"{compose.project}-secrets", env_file=tmp_path / ".env")
    other.env_file.write_text(env_from_example(AIRFLOW_JWT_SECRET="CHANGE_ME"))
    try:
        result = other("up", check=False, timeout=300)
        shown = result.stdout + result.stderr
        assert "check-secrets: AIRFLOW_JWT_SECRET is still a placeholder; set it in .env to the output of:" in shown, shown
        assert 'python3 -c "import secrets; print(secrets.token_hex(32))"' in shown
        assert "the stack does not start until each variable above is set" in shown
        assert 'service "check-secrets" didn\'t complete successfully: exit 1' in shown
        assert "POSTGRES_PASSWORD" not in shown and "AIRFLOW_FERNET_KEY" not in shown  # the good ones are not named
        states = other.states()
        assert states.pop("check-secrets")[::2] == ("exited", 1)
        assert {s: state for s, (state, _, _) in states.items() if state != "created"} == {}, "a service started"
        assert other.running() == []
    finally:
        other("down", "-v", "--remove-orphans", check=False)


def test_a_stack_brought_down_and_up_again_goes_on_through_the_documented_recovery(compose: Compose, client: StackClient) -> None:
    """`docker compose down`, then `up`: Postgres, the lake and kinesalite's streams are in volumes and stay; moto keeps
    its tables in memory, so the state table is gone. The next cycle refuses, naming the lost state table and the
    recovery; the recovery docs/deployment.md gives (a run with recover_from_output, a dry run first) rebuilds the
    state from the output's commit records, and the pipeline lands what demo-producer put at the new start."""
    drain(client)
    before = client.store().get_head(DEMO["name"])
    compose("down", timeout=600)
    assert compose.running() == []
    compose("up", "-d", timeout=1800)
    compose.wait_healthy()
    assert not client.state_table_exists() or client.store().get_head(DEMO["name"]).version == 0
    assert len(client.stream_records()) == 2 * DEMO_RECORDS  # the stream kept its records; demo-producer put more

    state, tasks, run_id = cycle(client)
    assert (state, tasks.get("plan")) == ("failed", "failed"), tasks
    log = client.task_log(DAG, run_id, "plan")
    assert "holds no state for the pipeline" in log and "recover_from_output" in log, log[-3000:]
    result, _ = exactly_once(client)
    assert result.rows == DEMO_RECORDS and result.duplicated == 0  # nothing was written by the refused run

    state, tasks, _ = cycle(client, {"recover_from_output": True, "dry_run": True})
    assert state == "success", tasks
    assert client.store().get_head(DEMO["name"]).version == 0, "a dry run writes no state"
    state, tasks, _ = cycle(client, {"recover_from_output": True})
    assert state == "success", tasks
    after = client.store().get_head(DEMO["name"])
    assert after.next_batch_id >= before.next_batch_id + 1, (before, after)
    drain(client)
    result, lake = exactly_once(client)
    assert result.ok and result.rows == 2 * DEMO_RECORDS, result
    assert lake["history"] == [], lake["history"]
