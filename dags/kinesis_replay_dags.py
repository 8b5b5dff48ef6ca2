"""
### kinesis-replay: `plan → replay → verify → commit`

Lands a Kinesis stream in an Apache Iceberg table (or plain Parquet folders) exactly once, one bounded batch per run.

1. **plan** resumes the batch in flight, or fixes a closed sequence-number range per shard (from just
   after the committed checkpoint to the newest record now) and stores it in the state table. Nothing
   new: the run is skipped.
2. **replay** runs the Spark job (`spark_jobs/replay_job.py`) on exactly those ranges and writes the
   batch's Parquet files into a folder of this attempt's own, `<output>/data/batch_id=<id>/attempt=<attempt>/`,
   invisible to readers until the commit (a directory output: it overwrites `<output>/batch_id=<id>/`).
   With `spark.emr_serverless` configured, a
   **stage** task first uploads the job and the batch spec to S3, and replay is an EMR Serverless job run.
3. **verify** checks the result manifest and the files against the plan: per shard, the bounds, the count,
   the row checksum, and that no record appears twice.
4. **commit** puts the attempt's files into the table in one Iceberg snapshot, advances each shard's
   checkpoint with a conditional write, then marks the batch committed, and emits an event on the
   pipeline's output Asset (batch id, ranges and snapshot id in its extra).
5. **check**, the stuck check, fails, and so alerts, when a record has waited longer than `max_checkpoint_age_minutes`.
6. **catch_up** and **plan_next**: a batch is capped by `max_batch` (its arrival span, its estimated read
   time). When one was, the pipeline is behind: plan_next queues the next run at once, without waiting
   for the schedule, until a batch reaches the tip. The commit's log says how far behind, and when it
   will have caught up at the pace of the last batch.

If anything fails nothing moves: the next run replays the same batch, with the same ranges, and the table
never shows a batch that was not verified. One DAG per pipeline in the pipelines config (`$KINESIS_REPLAY_CONFIG`, else
`dags/pipelines.yaml`).

**Dry run.** Trigger with `dry_run` to see the plan (shards, ranges, record and byte estimates, the
GetRecords calls and the time they need at the read limit) without writing or reading anything.

**Lost data.** When records the pipeline has not read yet are gone from the stream (trimmed by
retention), the run fails and names the shard. To accept the loss and go on, trigger a run with
`acknowledge_data_loss` listing those shards: the gap is recorded in the batch ledger.

**Lost state.** The output root records its owner (pipeline, stream, state table) and a commit record
for every batch. A run whose state table is missing, emptied, renamed or behind the output stops before
planning. Trigger a run with `recover_from_output` (first with `dry_run`) to rebuild the state from the
output; the pipeline then goes on exactly where the lost table stood.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, Param, XComArg, get_current_context, task

import kinesis_replay_lineage as lineage
import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.compaction import TARGET_BYTES
from kinesis_replay.adapters.iceberg_table import RESTORE_PARAM
from kinesis_replay.adapters.table_maintenance import DEFAULT_ORPHAN_AGE
from kinesis_replay.airflow_config import existing_pipelines_path
from kinesis_replay.core.config import CONFIG_ENV, PipelineConfig, resolve_config_path
from kinesis_replay.core.refusals import RECOVER_PARAM
from kinesis_replay.core.roots import output_key
from kinesis_replay.launchers import emr_serverless
from kinesis_replay.steps.backfill import ACKNOWLEDGE_DATA_LOSS_SCHEMA, SELECTION_SCHEMA

CONFIG_PATH = resolve_config_path(Path(__file__).with_name("pipelines.yaml"))
START = tasks.START
# Above the weight of any backfill replay (1, or 2 with its EMR Serverless check), whatever Airflow's weight rule adds.
REGULAR_REPLAY_PRIORITY = 10

BACKFILL_DOC = """
### kinesis-replay backfill: replay stored batches into their own paths

Trigger by hand with `batches`, one of:
`{"batch_ids": [3, 7]}`, `{"from_batch": 3, "to_batch": 7}` (inclusive), or
`{"start_time": "2026-11-01T00:00:00Z", "end_time": "2026-11-02T00:00:00Z"}` (every committed batch
whose records may have arrived in that window). Each chosen batch is replayed from its stored ranges
into a new attempt's folder and must come out identical to its first run (same rows, same checksum); one
snapshot then replaces the batch's files in the table, so a reader sees it whole throughout (a directory
output: it overwrites `<output>/batch_id=<id>/`). No checkpoint moves. Refused, before anything is read, while the pipeline's regular batch
is in flight, for batches that are not committed, and for ranges that have left the stream's retention.
The batches replay one at a time: every replay of the pipeline, regular or backfill, takes the one slot of
its Airflow pool (`kinesis_replay_<name>` unless the config's `pool` says otherwise), so the shards are never
read harder than the per-shard budget. A replay that stays *scheduled* may be waiting for a pool that does not
exist: the Kinesis replay page (Browse) says so, with the command that creates it.
`dry_run` shows what would be read, and its cost, without reading.

Tasks: **select** chooses the batches; **replay**, one per batch, replays it, checks it against its first run and
commits it. With `spark.emr_serverless` configured, **stage** uploads each batch's job, **replay** is its job run, and
**check** then checks the batch against its first run and commits it (not the regular DAG's stuck check).
**commit** is skipped, except for a re-decode.

**Re-decode** with `"redecode": true` beside `batches` after a payload.schema or decoder change (a backfill of
batches decoded otherwise is refused without it, naming both decodings): the raw records must match the first
run's, the decoding may change. Each replayed batch waits, verified, in the ledger (the page shows it); **commit**
then makes the whole selection (at most 100 batches) the table's in one snapshot, and its quarantined records the
quarantine table's in one more: readers see the old decoding or the new one, never a mix
(docs/operating.md: "Fixing the data").

**Rebuild** with `"rebuild": true` beside `batches`, for a type change Iceberg cannot make in place (int to string, a
narrowing, a decimal's scale): payload.schema keeps the table's types, so the regular batches keep landing, and
payload.next_schema says the new ones. Each replayed batch is decoded with next_schema and waits, verified, in the
ledger; **commit** switches the table to next_schema in one snapshot once every committed batch is rebuilt (run
the rebuild again for the batches it names until then), and from then on every batch decodes with it
(docs/operating.md: "We changed a type"). A committed batch past the stream's retention is named before anything is read;
`"copy_expired": true` copies such batches from their files instead, each replaced column cast to its new type.

**Restore the table** with `{"restore_table": true}` (try `"dry_run": true` first) when the pipeline refuses
because the table lacks committed batches: rolled back to an older snapshot, dropped from its catalog, its
metadata deleted or restored from an older file, or rows deleted by another writer. It puts back exactly the
committed batches the table's current snapshot lacks: from the output's files where they still verify against
the ledger, else replayed from the stream; it creates the table only if there is none, and names any batch it
cannot bring back (files gone, and its records past the stream's retention). No checkpoint moves.
"""


def output_asset(pipeline: PipelineConfig) -> Asset:
    """The pipeline's output: every committed batch, regular or backfilled, is an event on it.

    Its URI is the root in the one spelling roots.output_key gives it (``s3a://`` and ``s3n://`` as ``s3://``), so that
    one root is one Asset however the config spells it, and a downstream DAG has one URI to schedule on."""
    uri = output_key(pipeline.output) if "://" in pipeline.output else f"file://{pipeline.output}"
    return Asset(name=f"kinesis_replay_{pipeline.name}", uri=uri)


TAG_LENGTH = 100  # the longest tag Airflow stores; a stream's name may have 128 characters


def stream_tag(pipeline: PipelineConfig) -> str:
    """The tag that finds a stream's DAGs in the UI's filter: a long name is cut to fit, never refused."""
    return f"stream:{pipeline.stream}"[:TAG_LENGTH]


def default_args(pipeline: PipelineConfig) -> dict[str, Any]:
    return {
        "retries": pipeline.retries,
        "retry_delay": timedelta(seconds=pipeline.retry_delay_seconds),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
    }


def emr_replay(pipeline: PipelineConfig, staged: XComArg, priority_weight: int = 1) -> Any:
    """EMR Serverless runs the replay job: one job run per emr_serverless.JobRun that a stage task returned."""
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator

    return EmrServerlessStartJobOperator.partial(
        task_id="replay",
        aws_conn_id=pipeline.aws_conn_id,
        pool=pipeline.pool,  # a deferred job run holds its slot: the pool is created with --include-deferred
        priority_weight=priority_weight,
        execution_timeout=timedelta(seconds=pipeline.spark.submit_timeout_seconds),
        map_index_template="{{ task.name }}",
        **emr_serverless.operator_args(pipeline),
    ).expand_kwargs(staged)


def build_dag(pipeline: PipelineConfig) -> DAG:
    asset = output_asset(pipeline)
    with DAG(
        dag_id=pipeline.dag_id,
        schedule=pipeline.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,  # one regular batch in flight per pipeline; the state table enforces it too
        default_args=default_args(pipeline),
        doc_md=__doc__,
        tags=["kinesis-replay", stream_tag(pipeline)],
        params={
            "dry_run": Param(False, type="boolean", title="Dry run", description="Show the plan and its cost; write and read nothing."),
            "acknowledge_data_loss": Param(
                [],
                title="Acknowledge data loss on these shards",
                description="Shard ids whose records, gone from the stream, may be skipped; each gap is recorded in the ledger.",
                **ACKNOWLEDGE_DATA_LOSS_SCHEMA,
            ),
            RECOVER_PARAM: Param(
                False,
                type="boolean",
                title="Recover the state from the output",
                description="Rebuild a lost state table's checkpoints and ledger from the output's commit records, then go on.",
            ),
        },
    ) as dag:

        @task(task_id="plan")
        def plan() -> tasks.Planned:
            context = get_current_context()
            return tasks.plan(pipeline, context["run_id"], context["params"])

        # The regular batch takes the pool's next free slot before a backfill's remaining batches do.
        @task(
            task_id="replay",
            pool=pipeline.pool,
            priority_weight=REGULAR_REPLAY_PRIORITY,
            execution_timeout=timedelta(seconds=pipeline.spark.submit_timeout_seconds),
        )
        def replay(planned: tasks.Planned) -> None:
            tasks.replay(pipeline, planned, get_current_context()["params"])

        @task(task_id="stage")
        def stage(planned: tasks.Planned) -> list[emr_serverless.JobRun]:
            return tasks.stage(pipeline, planned, get_current_context()["params"])

        # With EMR Serverless, replay is a job run per staged batch; none when a verified batch only needs its commit.
        @task(task_id="verify", trigger_rule="none_failed_min_one_success" if pipeline.spark.emr_serverless else "all_success")
        def verify(planned: tasks.Planned) -> None:
            context = get_current_context()
            tasks.verify(pipeline, planned, context["params"], context["run_id"])

        @task(task_id="commit", outlets=[asset])
        def commit(planned: tasks.Planned) -> tasks.BatchFigures:
            context = get_current_context()
            summary = tasks.commit(pipeline, planned, context["run_id"])
            context["outlet_events"][asset].extra = tasks.event_extra(summary)
            lineage.attach(context, pipeline, summary, planned.get("stream_arn"))  # its OpenLineage event, when the provider is on
            return summary

        @task(task_id="check", trigger_rule="none_failed", retries=0)
        def check_staleness() -> None:
            tasks.check_staleness(pipeline)

        @task.short_circuit(task_id="catch_up")
        def catch_up(summary: tasks.BatchFigures) -> bool:
            return tasks.catch_up_needed(summary)

        # A capped batch left records behind: queue the next run now. max_active_runs=1 starts it when this one ends.
        plan_next = TriggerDagRunOperator(task_id="plan_next", trigger_dag_id=pipeline.dag_id, conf={}, retries=0)

        planned: Any = plan()  # an XComArg: each task below gets plan's dict when it runs
        replayed = (
            replay(planned) if pipeline.spark.emr_serverless is None else emr_replay(pipeline, stage(planned), REGULAR_REPLAY_PRIORITY)
        )
        committed: Any = commit(planned)
        replayed >> verify(planned) >> committed >> check_staleness()
        catch_up(committed) >> plan_next
    return dag


def build_backfill_dag(pipeline: PipelineConfig) -> DAG:
    asset = output_asset(pipeline)
    with DAG(
        dag_id=pipeline.backfill_dag_id,
        schedule=None,  # by hand only
        start_date=START,
        catchup=False,
        max_active_runs=1,  # two backfills never write the same batch's paths at once
        default_args={**default_args(pipeline), "retries": 0},
        doc_md=BACKFILL_DOC,
        tags=["kinesis-replay", "backfill", stream_tag(pipeline)],
        params={
            "batches": Param(
                None,
                title="Batches to replay",
                description=(
                    'Exactly one of: {"batch_ids": [3, 7]}, or {"from_batch": 3, "to_batch": 7}, or '
                    '{"start_time": ISO 8601, "end_time": ISO 8601}. More than two keys mix two ways. '
                    "Leave empty to restore the table."
                ),
                **{**SELECTION_SCHEMA, "type": ["object", "null"]},
            ),
            RESTORE_PARAM: Param(
                False,
                type="boolean",
                title="Restore the table",
                description=(
                    "Put back every committed batch the table lacks (rolled back, dropped, its metadata lost): from the "
                    "output's verified files, or replayed from the stream. Try it with dry_run first."
                ),
            ),
            "redecode": Param(
                False,
                type="boolean",
                title="Re-decode",
                description=(
                    "Decode the batches anew with the pipeline's payload settings, after a payload.schema or decoder change. "
                    "Without it a backfill of batches decoded otherwise is refused before anything is read, naming both "
                    "decodings. The raw records must match the first run's either way; the selection becomes visible at once."
                ),
            ),
            "rebuild": Param(
                False,
                type="boolean",
                title="Rebuild",
                description=(
                    "Decode the batches with payload.next_schema, for a type change Iceberg cannot make in place; the table "
                    "switches to it in one snapshot once every committed batch is rebuilt, regular batches landing meanwhile."
                ),
            ),
            "copy_expired": Param(
                False,
                type="boolean",
                title="Copy expired batches",
                description=(
                    "With rebuild: copy the committed batches past the stream's retention from their files, each replaced "
                    "column cast to its new type, instead of refusing the rebuild."
                ),
            ),
            "dry_run": Param(False, type="boolean", title="Dry run", description="Show what would be read and its cost; read nothing."),
        },
    ) as dag:

        @task(task_id="select")
        def select() -> list[int]:
            context = get_current_context()
            restored: list[tasks.BatchFigures] = []  # a restore's batches committed from the output's files, here
            try:
                return tasks.select_backfill(pipeline, context["params"], context["run_id"], restored)
            finally:
                lineage.attach(context, pipeline, restored)

        @task(
            task_id="replay",
            pool=pipeline.pool,  # one slot: the mapped batches replay one after another, never all at once
            outlets=[asset],
            map_index_template="batch {{ task.op_kwargs['batch_id'] }}",
            execution_timeout=timedelta(seconds=pipeline.spark.submit_timeout_seconds),
        )
        def replay(batch_id: int) -> tasks.BatchFigures:
            context = get_current_context()
            params = context["params"]
            summary = tasks.backfill_batch(
                pipeline, batch_id, context["run_id"], bool(params.get(RESTORE_PARAM)), bool(params.get("redecode")),
                bool(params.get("rebuild")),
            )  # fmt: skip
            context["outlet_events"][asset].extra = tasks.event_extra(summary)
            lineage.attach(context, pipeline, summary)
            return summary

        @task(task_id="stage", map_index_template="batch {{ task.op_kwargs['batch_id'] }}")
        def stage(batch_id: int) -> emr_serverless.JobRun:
            params = get_current_context()["params"]
            return tasks.stage_backfill(pipeline, batch_id, bool(params.get(RESTORE_PARAM)), bool(params.get("rebuild")))

        @task(task_id="check", outlets=[asset], map_index_template="batch {{ task.op_kwargs['batch_id'] }}")
        def check_backfilled(batch_id: int) -> tasks.BatchFigures:
            context = get_current_context()
            params = context["params"]
            summary = tasks.check_backfilled(
                pipeline, batch_id, context["run_id"], bool(params.get(RESTORE_PARAM)), bool(params.get("redecode")),
                bool(params.get("rebuild")),
            )  # fmt: skip
            context["outlet_events"][asset].extra = tasks.event_extra(summary)
            lineage.attach(context, pipeline, summary)
            return summary

        @task(task_id="commit", outlets=[asset])
        def commit_redecode(batch_ids: list[int]) -> list[tasks.BatchFigures]:
            context = get_current_context()
            figures = tasks.commit_redecode(pipeline, context["params"], context["run_id"], batch_ids)
            # One event for the selection, made visible at once: each batch's figures, as a backfill's event carries one.
            kind = "rebuild" if context["params"].get("rebuild") else "redecode"
            context["outlet_events"][asset].extra = {"kind": kind, "batches": [tasks.event_extra(f) for f in figures]}
            lineage.attach(context, pipeline, figures)
            return figures

        chosen = select()
        if pipeline.spark.emr_serverless is None:
            replayed = replay.expand(batch_id=chosen)
        else:
            replayed = emr_replay(pipeline, stage.expand(batch_id=chosen)) >> check_backfilled.expand(batch_id=chosen)
        replayed >> commit_redecode(chosen)  # type: ignore[arg-type]  # the select task's XComArg: its list, at run time
    return dag


ORPHAN_AGE_HOURS = int(DEFAULT_ORPHAN_AGE / timedelta(hours=1))
TARGET_FILE_SIZE_MB = TARGET_BYTES // 2**20

MAINTENANCE_DOC = f"""
### kinesis-replay maintenance: compact each batch's files, expire the table's old snapshots, remove its orphan files

Daily by default. Each batch adds a snapshot and a file per Spark task, and each backfill leaves the replaced files to
the snapshots before it; without this the table's metadata, its files and storage grow forever.

0. **Compaction** (`compact`, on by default): each committed batch whose files are more than its size needs at `target_file_size_mb` a file
   (512, Iceberg's default) is written again as that many files, each shard's records one row group in sequence
   order, checked against its ledger entry as a backfill's files are, and committed in one snapshot for up to 100
   batches (readers see every batch's old files or its new ones). A batch a backfill, re-decode or restore replaced
   meanwhile keeps what that wrote. The replaced files stay for the snapshots before it, until expiry.
1. **Snapshot expiry** by the table's own properties, as Iceberg names them: `history.expire.max-snapshot-age-ms`
   (5 days when unset) and `history.expire.min-snapshots-to-keep` (1). The current snapshot always stays. Time
   travel reaches back as far as the snapshots kept.
2. **Orphan files**: files under the table's `data/` and `metadata/` that no remaining snapshot references, last
   written more than `orphan_age_hours` ago ({ORPHAN_AGE_HOURS} by default: no replay waits that long for its commit). The batch
   in flight keeps its files whatever their age. Nothing else under the output root is touched.
   Only files the table's writers write are removed: attempt folders' files under `data/`, Iceberg's metadata
   files, manifest lists, manifests and statistics under `metadata/`. Another pipeline's root in those folders
   (an owner record, `_catalog/`, `_commits/`) and any other file are left alone, named in a warning, and counted
   (`left_alone`). A new root inside another pipeline's root, or around one, is refused at its plan.

Trigger with `dry_run` to see what it would compact, expire and remove.
"""


def build_maintenance_dag(pipeline: PipelineConfig) -> DAG:
    with DAG(
        dag_id=maintenance_dag_id(pipeline),
        schedule=MAINTENANCE_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args={**default_args(pipeline), "retries": 1},
        doc_md=MAINTENANCE_DOC,
        tags=["kinesis-replay", "maintenance", stream_tag(pipeline)],
        params={
            "dry_run": Param(False, type="boolean", title="Dry run", description="Name what would be expired and removed; change nothing."),
            "compact": Param(
                True, type="boolean", title="Compact", description="Write each batch's files again as few files as its size needs."
            ),
            "target_file_size_mb": Param(
                TARGET_FILE_SIZE_MB,
                type="integer",
                minimum=1,
                maximum=1024 * 1024,
                title="Target file size (MiB)",
                description="Compact each batch into files of about this size (Iceberg's write.target-file-size-bytes).",
            ),
            "orphan_age_hours": Param(
                ORPHAN_AGE_HOURS,
                type="integer",
                minimum=1,
                maximum=87600,
                title="Orphan age (hours)",
                description="Remove unreferenced files older than this (1 hour to 10 years).",
            ),
        },
    ) as dag:

        @task(task_id="maintain")
        def maintain() -> tasks.MaintenanceFigures:
            context = get_current_context()
            return tasks.maintain_table(pipeline, context["params"], context["run_id"])

        maintain()
    return dag


maintenance_dag_id = tasks.maintenance_dag_id


MAINTENANCE_SCHEDULE = "@daily"


def build_dags(config: str | os.PathLike[str] | None = None) -> dict[str, DAG]:
    """Every DAG of the config's valid pipelines, by DAG id: what a DAG file puts in its globals for Airflow to find.

    ``config``: the pipelines file; else ``$KINESIS_REPLAY_CONFIG``, else pipelines.yaml in Airflow's DAGs folder, where
    the status page looks too. A file that is not there is refused, naming the path and where it came from.

    Only the valid pipelines: an invalid one is reported by kinesis_replay_config_check, as an import error of that
    file. An import error here would mark every pipeline's DAGs stale, and the scheduler would stop them all.
    """
    path = existing_pipelines_path(config)
    dags: dict[str, DAG] = {}
    for pipeline in tasks.load_pipelines(path).pipelines:
        dags[pipeline.dag_id] = build_dag(pipeline)
        dags[pipeline.backfill_dag_id] = build_backfill_dag(pipeline)
        if pipeline.table is not None:  # a plain directory output has no table to maintain
            dags[maintenance_dag_id(pipeline)] = build_maintenance_dag(pipeline)
    return dags


# As a DAG file (this repository's dags/, which Airflow imports under a module name of its own), this file builds the
# DAGs of dags/pipelines.yaml or $KINESIS_REPLAY_CONFIG. Imported by its name, as the installed package's module, it
# builds none: the user's DAG file calls build_dags (docs/deployment.md, "Installing the package").
if __name__ != "kinesis_replay_dags":
    globals().update(build_dags(None if os.environ.get(CONFIG_ENV) else CONFIG_PATH))  # an error names the variable when it is set
