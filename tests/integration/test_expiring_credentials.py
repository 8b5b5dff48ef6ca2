"""Credentials that expire while the job reads: a role connection's job renews them and commits; frozen ones fail it.

moto's STS hands out the role's credentials and never checks their expiry, so the Kinesis proxy does: it refuses
a session token TOKEN_LIFETIME seconds after it first sees it, as Kinesis refuses an expired one. The role is
assumed for DURATION seconds, so botocore renews its credentials RENEW_AFTER seconds after each AssumeRole (its
advisory refresh comes 15 minutes before expiry), well within the proxy's lifetime. The read budget makes
each shard's read last several lifetimes, however fast the machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.layout import COMMITS_DIR
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.launchers import credentials
from stack.harness import SUCCESS, batch_dirs, check_exactly_once, load_dags, read_output, run_dag
from stack.kinesis_proxy import KinesisProxy, ProxyLimits
from stack.producer import produce

RENEW_AFTER = 3
DURATION = 15 * 60 + RENEW_AFTER
TOKEN_LIFETIME = 6.0
# One GetRecords call a second of 5 records: a shard of 34 to 49 records (these keys, 4 shards) takes 7 to 10 s to read.
SLOW_READ = {"get_records_per_second": 1, "max_records_per_call": 5, "first_page_records": 5}
ROLE_ARN = "arn:aws:iam::123456789012:role/kinesis-replay"


@pytest.fixture
def proxy(stack: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[KinesisProxy]:
    """An expiring proxy before kinesalite, reached through aws_role: base keys, a role to assume, moto's STS."""
    running = KinesisProxy(stack.kinesis_url, ProxyLimits(token_lifetime=TOKEN_LIFETIME)).start()
    connection = stack.connection()
    connection["extra"]["service_config"]["kinesis"]["endpoint_url"] = running.url
    connection["extra"]["service_config"]["sts"] = {"endpoint_url": stack.moto_url}
    connection["extra"].update(role_arn=ROLE_ARN, assume_role_kwargs={"DurationSeconds": DURATION})
    monkeypatch.setenv("AIRFLOW_CONN_AWS_ROLE", json.dumps(connection))
    yield running
    running.stop()
    tokens = {shard: len(seen) for shard, seen in sorted(running.read_tokens.items())}
    print(f"session tokens seen: {len(running.session_tokens)}; refused as expired: {running.expired}; replay's per shard: {tokens}")


@pytest.fixture
def plan_then_pace(tmp_path: Path, airflow_db: Path, entry: dict[str, Any], proxy: KinesisProxy) -> Any:
    """Plan the batch at the default read budget, then give back the pipeline's DAG with the slow one for the replay.

    The planner reads each shard's newest records, shard after shard, at the same budget: paced, it would take
    several times as long as the replay. The budget is not part of the batch, so the replay may take another.
    """
    # One core per shard: the four ranges read side by side (mostly waiting on the budget), in one wave, not two.
    entry = {**entry, "aws_conn_id": "aws_role", "spark": {**entry["spark"], "master": "local[4]"}}
    config, dag_id = tmp_path / "pipelines.yaml", f"kinesis_replay_{entry['name']}"

    def run() -> Any:
        assert run_dag(load_dags(config, entry)[dag_id].partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
        proxy.read_tokens.clear()  # from here on, only the replay reads
        return load_dags(config, {**entry, "read": SLOW_READ})[dag_id]

    return run


def test_a_role_connections_job_renews_its_credentials_and_commits_the_batch_exactly_once(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, plan_then_pace: Any
) -> None:
    produced = produce(kinesis, entry["stream"], 160)
    assert run_dag(plan_then_pace()).tasks == SUCCESS
    assert proxy.expired == 0
    # Each shard's read outlived a token: its job session renewed the role's credentials and read on.
    assert max(len(tokens) for tokens in proxy.read_tokens.values()) >= 2, dict(proxy.read_tokens)
    result = check_exactly_once(produced, read_output(entry["output"]))
    assert result.ok, result
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED
    ends = {r.shard_id: r.end for r in batch.ranges}
    assert {sid: s.checkpoint for sid, s in store.get_shards(entry["name"]).items()} == ends
    assert store.get_head(entry["name"]).in_flight is None


def test_frozen_credentials_expire_mid_read_and_nothing_commits(
    kinesis: Any,
    store: DynamoDBStateStore,
    entry: dict[str, Any],
    proxy: KinesisProxy,
    plan_then_pace: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control: the job gets the role's credentials once, as before this change, and the same read fails."""

    def once(p: Any, batch: Any, hook: Any) -> credentials.JobCredentials:
        keys = tasks.frozen_credentials(hook)
        env = {"AWS_ACCESS_KEY_ID": keys.access_key, "AWS_SECRET_ACCESS_KEY": keys.secret_key, "AWS_SESSION_TOKEN": keys.token}
        return credentials.JobCredentials("the role's credentials, once", env)

    monkeypatch.setattr(tasks, "job_credentials", once)
    produce(kinesis, entry["stream"], 160)

    failed = run_dag(plan_then_pace())
    assert failed.tasks["replay"] == "failed" and failed.tasks["commit"] == "upstream_failed"
    assert proxy.expired > 0 and any(proxy.read_tokens.values())  # refused after the job had begun reading
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.FAILED and "ExpiredTokenException" in (batch.error or "")
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())
    assert store.get_head(entry["name"]).in_flight == 1  # the batch waits, with its ranges, for a run that can read it
    assert batch_dirs(entry["output"]) == [] and not (Path(entry["output"]) / COMMITS_DIR).exists()
