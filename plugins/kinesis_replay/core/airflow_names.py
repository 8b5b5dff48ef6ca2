"""The names a pipeline takes in Airflow: its DAG ids and pools, and the commands that make the pools."""

from __future__ import annotations

import shlex
from collections.abc import Iterable


def dag_ids(pipeline_name: str) -> tuple[str, str]:
    """The DAGs the factory builds for a pipeline: its regular runs and its backfills."""
    return f"kinesis_replay_{pipeline_name}", f"kinesis_replay_backfill_{pipeline_name}"


# Each replay reads every shard of the stream at the full per-shard read budget (read.*), so the pool has one slot.
POOL_SLOTS = 1
AIRFLOW_DEFAULT_POOL = "default_pool"  # Airflow's own pool, for every task that names none


def pool_set_args(pool: str) -> list[str]:
    """The command that creates (or resets) a pipelines' pool: one slot, deferred replays counted as running.

    A replay on EMR Serverless may wait deferred in the triggerer; a pool counts deferred tasks only with
    --include-deferred, and without it a second replay would start while the first still reads.
    """
    return ["airflow", "pools", "set", pool, str(POOL_SLOTS), "kinesis-replay: one replay at a time", "--include-deferred"]


def pool_set_command(pools: Iterable[str]) -> str:
    """The shell command that creates the pools, one ``airflow pools set`` each."""
    return " && ".join(shlex.join(pool_set_args(pool)) for pool in sorted(set(pools)))


def missing_pool_message(pipeline_names: Iterable[str], pool: str) -> str:
    """What a missing pool means, naming it, the pipelines whose pool it is and the command that creates it."""
    names = ", ".join(sorted(pipeline_names))
    return (
        f"Airflow pool {pool!r} does not exist: the replays of pipeline(s) {names} (regular and backfill) wait for it "
        f"forever, and only the scheduler's log says so. Create it: {pool_set_command([pool])}"
    )
