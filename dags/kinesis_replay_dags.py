"""
### kinesis-replay: `plan → replay → verify → commit`

Lands a Kinesis stream in Parquet exactly once, one bounded batch per run.

1. **plan** resumes the batch in flight, or fixes a closed sequence-number range per shard (from just
   after the committed checkpoint to the newest record now) and stores it in the state table. Nothing
   new: the run is skipped.
2. **replay** runs the Spark job (`spark_jobs/replay_job.py`) on exactly those ranges and overwrites
   the batch's own partition `<output>/batch_id=<id>/`.
3. **verify** checks the result manifest and the files against the plan.
4. **commit** advances each shard's checkpoint with a conditional write, then marks the batch committed.

If anything fails nothing moves: the next run replays the same batch, with the same ranges, into the
same paths. One DAG per pipeline in the pipelines config (`$KINESIS_REPLAY_CONFIG`, else
`dags/pipelines.yaml`).

**Lost data.** When records the pipeline has not read yet are gone from the stream (trimmed by
retention), the run fails and names the shard. To accept the loss and go on, trigger a run with
`acknowledge_data_loss` listing those shards: the gap is recorded in the batch ledger.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, get_current_context, task

import kinesis_replay_tasks as tasks
from kinesis_replay.config import PipelineConfig, load_config, resolve_config_path

CONFIG_PATH = resolve_config_path(Path(__file__).with_name("pipelines.yaml"))


def build_dag(p: PipelineConfig) -> DAG:
    with DAG(
        dag_id=p.dag_id,
        schedule=p.schedule,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,  # one regular batch in flight per pipeline; the state table enforces it too
        default_args={
            "retries": p.retries,
            "retry_delay": timedelta(seconds=p.retry_delay_seconds),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=30),
        },
        doc_md=__doc__,
        tags=["kinesis-replay", f"stream:{p.stream}"],
        params={
            "acknowledge_data_loss": Param(
                [],
                type="array",
                items={"type": "string", "pattern": "^shardId-[0-9]+$"},
                uniqueItems=True,
                title="Acknowledge data loss on these shards",
                description="Shard ids whose records, gone from the stream, may be skipped; each gap is recorded in the ledger.",
            ),
        },
    ) as dag:

        @task(task_id="plan")
        def plan() -> dict[str, Any]:
            context = get_current_context()
            return tasks.plan(p, context["run_id"], context["params"])

        @task(task_id="replay", execution_timeout=timedelta(seconds=p.spark.submit_timeout_seconds))
        def replay(planned: dict[str, Any]) -> None:
            tasks.replay(p, planned, get_current_context()["params"])

        @task(task_id="verify")
        def verify(planned: dict[str, Any]) -> None:
            context = get_current_context()
            tasks.verify(p, planned, context["params"], context["run_id"])

        @task(task_id="commit")
        def commit(planned: dict[str, Any]) -> dict[str, Any]:
            return tasks.commit(p, planned)

        planned = plan()
        replay(planned) >> verify(planned) >> commit(planned)
    return dag


for _pipeline in load_config(CONFIG_PATH):
    globals()[_pipeline.dag_id] = build_dag(_pipeline)
