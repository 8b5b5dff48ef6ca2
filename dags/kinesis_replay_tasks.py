"""The Airflow side of each DAG task: hooks give the clients, the library's steps (kinesis_replay.steps) do the work.

Not a DAG file (see .airflowignore): the factory in kinesis_replay_dags.py imports it.
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, NotRequired, ParamSpec, TypedDict, TypeVar, cast

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook, BaseSessionFactory
from airflow.providers.amazon.aws.hooks.kinesis import KinesisHook
from airflow.providers.amazon.aws.hooks.s3 import S3Hook
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.sdk.observability import stats
from botocore.client import BaseClient
from botocore.config import Config
from botocore.credentials import ReadOnlyCredentials, RefreshableCredentials
from botocore.exceptions import NoCredentialsError

from kinesis_replay import airflow_config
from kinesis_replay.adapters import compaction as compaction_files
from kinesis_replay.adapters import iceberg_table, layout, table_maintenance
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.files import S3Access, reaching_s3
from kinesis_replay.adapters.kinesis_client import (
    CLIENT_CONFIG,
    POOL_CONNECTIONS,
    leave_throttling_to_call,
    pooled,
    seen_stream_arn,
    stream_retention,
)
from kinesis_replay.core.config import PipelineConfig, rebuilt
from kinesis_replay.core.errors import (
    BackfillError,
    ConfigError,
    CredentialsMissingError,
    KinesisReplayError,
    OutputIOError,
    OutputRefusedError,
    ParameterError,
)
from kinesis_replay.core.formats import is_s3
from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint, S3Endpoint
from kinesis_replay.core.refusals import RECOVER_PARAM
from kinesis_replay.core.state import Batch, Progress, RunKind
from kinesis_replay.core.streams import check_region
from kinesis_replay.launchers import credentials, emr_serverless, spark_submit
from kinesis_replay.steps import backfill, compaction, in_flight, maintenance, rebuild, recovery, redecode
from kinesis_replay.steps.commit import commit_batch
from kinesis_replay.steps.plan import FINISH_COMMIT, PlanResult, plan_batch
from kinesis_replay.steps.verify import verify_batch
from kinesis_replay.ui import status

if TYPE_CHECKING:  # the boto3 stubs are for type checking only
    from types_boto3_kinesis.client import KinesisClient

log = logging.getLogger(__name__)
# The replay job and its Data Source, shipped to Spark beside the library zip: this repository's spark_jobs/, or the
# installed package's kinesis_replay/spark_jobs/.
SPARK_JOBS = spark_submit.spark_jobs_dir()
# DynamoDB's and S3's clients: botocore retries their transient faults and throttling. Kinesis clients have a
# policy of their own (CLIENT_CONFIG): there, throttling is paced and counted by kinesis_replay.adapters.kinesis_client.
# The planner's and the commit's threads share the DynamoDB client too, hence the pool.
_RETRIES = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10, read_timeout=60, max_pool_connections=POOL_CONNECTIONS
)
START = airflow_config.START
load_pipelines = airflow_config.load_pipelines  # the config, with the checks only Airflow can make
SUMMARY_RANGES = 100  # a batch's XCom and Asset event carry its ranges up to this many shards

_P = ParamSpec("_P")
_R = TypeVar("_R")


# What the tasks hand each other and publish (XComs, and the output Asset's events). Airflow pushes each key of a
# returned dict as an XCom of its own, and a task of a newer release may read what an older one pushed: the keys
# and their meaning only grow. The stage tasks' XCom, one EMR Serverless job run per batch, is
# kinesis_replay.launchers.emr_serverless.JobRun.
class Planned(TypedDict):
    """plan's XCom: the batch the run works on, and what it does with it (the batch's other tasks read it)."""

    batch_id: int
    action: str  # REPLAY or FINISH_COMMIT: what is left to do for the batch
    resumed: bool  # the batch was planned by an earlier run
    ranges: int  # how many shards it reads
    stream_arn: NotRequired[str | None]  # the stream's ARN as the plan found it: the commit's lineage names the stream by it


class BatchFigures(TypedDict):
    """A committed (or backfilled) batch's figures: its task's XCom and the output Asset's event (batch_summary)."""

    pipeline: str
    kind: str  # "regular", "backfill", "staged" (a re-decode's batch, not yet visible) or "redecode"
    batch_id: int
    shards: int
    records: int
    bad_records: int
    bytes: int
    seconds: float
    path: str  # the batch's folder, or a table output's root
    table: NotRequired[str]  # a table output: its identifier, its catalog, and the snapshot that holds this batch
    catalog: NotRequired[str]
    snapshot_id: NotRequired[int | None]
    ranges: NotRequired[list[dict[str, Any]]]  # the ranges, up to SUMMARY_RANGES of them
    ranges_in: NotRequired[str]  # or the commit record that has them
    catch_up: NotRequired[status.CatchUpFigures]  # a regular batch's


class MaintenanceFigures(TypedDict):
    """The maintenance task's XCom: what it expired and removed."""

    expired_snapshots: int
    snapshots_kept: int
    orphans_removed: int
    left_alone: int  # files under the table's folders its writers never write (the log names them)
    dry_run: bool
    compacted_batches: int  # batches whose files compaction wrote again as few files as their size needs
    files_before: int  # ... the files they held before
    files_after: int  # ... and after


def fail_fast(step: Callable[_P, _R]) -> Callable[_P, _R]:
    """Fail the task at once, without waiting out its retries, on an error that running it again cannot fix."""

    @functools.wraps(step)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return step(*args, **kwargs)
        except KinesisReplayError as exc:
            if exc.retryable:
                raise
            raise AirflowFailException(f"{exc} [not retried: a retry cannot succeed until this is fixed]") from exc

    return run


def through_connection(step: Callable[Concatenate[PipelineConfig, _P], _R]) -> Callable[Concatenate[PipelineConfig, _P], _R]:
    """Run the task with every S3 access of its pipeline going through the pipeline's connection (files.reaching_s3)."""

    @functools.wraps(step)
    def run(pipeline: PipelineConfig, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with reaching_s3(s3_access(pipeline)):
            try:
                # Once a rebuild switched the table to payload.next_schema, every task decodes with it (a catalog read
                # only for a pipeline that sets one).
                return step(rebuild.as_decoded(pipeline), *args, **kwargs)
            except Exception as exc:
                missing = no_credentials(pipeline, exc)
                if missing is not None:
                    raise missing from exc
                if isinstance(exc, (OutputIOError, OutputRefusedError)) and f"pipeline {pipeline.name!r}" not in str(exc):
                    raise type(exc)(f"pipeline {pipeline.name!r}: {exc}") from exc
                raise

    return run


def no_credentials(pipeline: PipelineConfig, exc: BaseException) -> CredentialsMissingError | None:
    """The error for a task whose AWS client found no credentials to sign with (botocore's bare NoCredentialsError, alone
    or as the cause of one of ours), naming the pipeline, its connection and the service called; None for any other."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, NoCredentialsError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if not isinstance(cause, NoCredentialsError):
        return None
    service = _called_service(cause)
    conn_id = pipeline.kinesis_conn_id if service == "Kinesis" else pipeline.aws_conn_id
    source = (
        f" (the Glue catalog's credentials come from table.catalog_properties of pipeline {pipeline.name!r}, "
        "else the worker's default chain)"
        if service == "Glue"
        else ""
    )
    return CredentialsMissingError(
        f"pipeline {pipeline.name!r}: no AWS credentials to call {service or 'AWS'} with{source}: Airflow connection "
        f"{conn_id!r} holds no keys, role or profile that gave any, and neither did the worker's default chain "
        "(environment, shared files, instance or container role). A retry will not help until the connection has "
        f"credentials: give connection {conn_id!r} an access key, a role_arn or a profile, or name another with "
        f"{'stream_conn_id' if conn_id == pipeline.stream_conn_id else 'aws_conn_id'} in the pipelines config "
        '(docs/deployment.md: "Pointing it at real AWS")'
    )


def _called_service(exc: BaseException) -> str | None:
    """The AWS service whose call found no credentials (Kinesis, DynamoDB, S3, Glue...): botocore's client in its frames."""
    tb = exc.__traceback__
    while tb is not None:
        client = tb.tb_frame.f_locals.get("self")
        if isinstance(client, BaseClient):
            return str(client.meta.service_model.service_id)
        tb = tb.tb_next
    return None


def s3_access(pipeline: PipelineConfig) -> S3Access:
    """The pipeline's way to S3: its connection's session (credentials, an assumed role), region and S3 endpoint.

    A pipeline that reaches no S3 (a local output with the embedded catalog) gets the default chain, unused.
    """
    if not (is_s3(pipeline.output) or (pipeline.table is not None and not pipeline.table.embedded)):
        return S3Access()
    hook = S3Hook(aws_conn_id=pipeline.aws_conn_id)
    return S3Access(
        hook.get_session(),
        hook.conn_config.get_service_endpoint_url("s3"),
        hook.conn_config.region_name,
        f"connection {pipeline.aws_conn_id}",
    )


def kinesis_hook(pipeline: PipelineConfig) -> KinesisHook:
    """The stream's hook: its connection (``stream_conn_id``, else ``aws_conn_id``) with its credentials, an assumed role's
    included (the provider assumes the connection's ``role_arn``). A stream given by ARN is reached in the ARN's region:
    a connection that names another is refused naming both (botocore would check only the ARN's partition)."""
    config = pooled(CLIENT_CONFIG, pipeline.read.plan_concurrency)
    hook = KinesisHook(aws_conn_id=pipeline.kinesis_conn_id, config=config)
    named = hook.conn_config.region_name
    try:
        region = check_region(pipeline.stream, named, f"Airflow connection {pipeline.kinesis_conn_id!r}")
    except ValueError as exc:
        other = "" if pipeline.stream_conn_id else "; or give the stream a connection of its own with stream_conn_id"
        raise ConfigError(f"pipeline {pipeline.name!r}: {exc}{other}. Nothing was read or written") from None
    if region is not None and named is None:  # the connection names none: the ARN's, not the environment's
        hook = KinesisHook(aws_conn_id=pipeline.kinesis_conn_id, region_name=region, config=config)
    return hook


def kinesis_client(pipeline: PipelineConfig) -> KinesisClient:
    """The connection's Kinesis client, with the one retry policy of kinesis_replay.adapters.kinesis_client."""
    return leave_throttling_to_call(kinesis_hook(pipeline).conn)


def state_store(pipeline: PipelineConfig) -> DynamoDBStateStore:
    # A plain client, not DynamoDBHook's: that is a resource's meta.client, whose injected serializer would
    # wrap the typed attribute values the store writes a second time.
    client = AwsBaseHook(
        aws_conn_id=pipeline.aws_conn_id, client_type="dynamodb", config=pooled(_RETRIES, pipeline.read.plan_concurrency)
    ).conn
    return DynamoDBStateStore(client, pipeline.state_table)


# Each DAG's trigger parameters, as its Params declare them (tests/dags checks that each DAG declares no other). Airflow
# merges every key of a run's conf into its params, declared or not, so a misspelt key (`dryrun`) would be ignored and
# the run go on for real: the first task of each DAG refuses any other key (check_params). `redecode` is the backfill's
# re-decode of stored batches.
REGULAR_PARAMS = ("dry_run", "acknowledge_data_loss", RECOVER_PARAM)
BACKFILL_PARAMS = ("batches", iceberg_table.RESTORE_PARAM, "redecode", "rebuild", "copy_expired", "dry_run")
MAINTENANCE_PARAMS = ("dry_run", "orphan_age_hours", "compact", "target_file_size_mb")


def maintenance_dag_id(pipeline: PipelineConfig) -> str:
    return f"kinesis_replay_maintenance_{pipeline.name}"


def check_params(pipeline: PipelineConfig, dag_id: str, params: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Before anything runs: the run's params (its conf merged into the DAG's Params) hold no key the DAG does not take."""
    unknown = sorted(str(k) for k in params if k not in allowed)
    if unknown:
        raise ParameterError(
            f"pipeline {pipeline.name!r}: {dag_id} has no trigger parameter {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(allowed)}. Nothing was run: trigger it again with only those keys in its conf"
        )


def acknowledged(params: dict[str, Any]) -> frozenset[str]:
    """The shards whose lost records the operator accepted for this run (trigger parameter acknowledge_data_loss)."""
    return frozenset(params.get("acknowledge_data_loss") or ())


@fail_fast
@through_connection
def plan(pipeline: PipelineConfig, run_id: str, params: dict[str, Any]) -> Planned:
    """Resume the batch in flight or plan the next one; skip the run when no shard has anything new.

    With ``dry_run`` it writes nothing and reads no data: it logs the plan and its cost, then skips the run.
    With ``recover_from_output`` it first rebuilds the pipeline's lost state from the output's commit records
    (with ``dry_run``, it says what it would write and skips the run).
    """
    check_params(pipeline, pipeline.dag_id, params, REGULAR_PARAMS)
    store = state_store(pipeline)
    store.ensure_table()
    dry_run = bool(params.get("dry_run"))
    if params.get(RECOVER_PARAM):
        rebuilt = recovery.recover(pipeline, kinesis_client(pipeline), store, datetime.now(UTC), dry_run)
        if dry_run:
            raise AirflowSkipException(f"dry run: nothing was written; would {rebuilt.describe()}")
    result = plan_batch(pipeline, kinesis_client(pipeline), store, run_id, acknowledged=acknowledged(params), dry_run=dry_run)
    for shard_id, millis in result.lag_millis.items():
        stats.gauge(f"kinesis_replay.{pipeline.name}.shard.{shard_id}.millis_behind_latest", millis)
    for child, parents in result.waiting:
        log.info("shard %s waits for its parents %s to be drained", child, ", ".join(parents))
    if dry_run:
        raise AirflowSkipException(dry_run_report(pipeline, result))
    batch, action = result.batch, result.action  # both or neither
    if batch is None or action is None:
        raise AirflowSkipException(f"pipeline {pipeline.name}: no shard of stream {pipeline.stream} has records after its checkpoint")
    log.info(
        "pipeline %s: %s batch %d (%s) with %d ranges",
        pipeline.name, "resuming" if result.resumed else "planned", batch.batch_id, batch.status.value, len(batch.ranges),
    )  # fmt: skip
    return Planned(
        batch_id=batch.batch_id,
        action=action,
        resumed=result.resumed,
        ranges=len(batch.ranges),
        stream_arn=seen_stream_arn(pipeline.stream),
    )


def dry_run_report(pipeline: PipelineConfig, result: PlanResult) -> str:
    """What a run would do, logged and given as the reason the run is skipped."""
    if result.batch is None:
        return f"dry run of pipeline {pipeline.name}: no shard of stream {pipeline.stream} has anything new; nothing was written"
    batch = result.batch
    verb = "would resume" if result.resumed else "would plan"
    report = f"dry run of pipeline {pipeline.name}: {verb} " + backfill.describe(
        batch, backfill.estimate_batch(batch, pipeline.read, result.estimates), pipeline.read.consumer
    )
    report += "\nrecord and byte counts of new ranges are estimates (each shard's rate on its last batch); nothing was written or read"
    log.info("%s", report)
    return report


@fail_fast
@through_connection
def replay(pipeline: PipelineConfig, planned: Planned, params: dict[str, Any]) -> None:
    """Run the replay job on the batch's stored ranges; a failure is noted on the batch, which stays in flight."""
    store = state_store(pipeline)
    batch = in_flight.batch_to_replay(
        pipeline, kinesis_client(pipeline), store, planned["batch_id"], planned["action"], acknowledged(params)
    )
    if batch is not None:
        # A job that fails because another run committed the batch meanwhile (its commit removes this run's attempt
        # folder under the job) fails the run with that, not with Spark's FileNotFoundException, and is not retried.
        with in_flight.failure_recorded(pipeline, store, batch.batch_id), in_flight.committed_meanwhile(pipeline, store, batch.batch_id):
            submit(pipeline, batch, acknowledged(params))


def job_spec(
    pipeline: PipelineConfig, batch: Batch, accept_gaps: frozenset[str] = frozenset(), stream_config: Path | None = None
) -> JobSpec:
    """The replay job's input: the batch's ranges, the hooks' Kinesis and S3 endpoints and regions, and the stream's retention.
    ``stream_config``: the stream connection's profile file (stream_credentials), which the job's Kinesis clients load."""
    hook = kinesis_hook(pipeline)
    endpoint = KinesisEndpoint(hook.conn_region_name, hook.conn_config.get_service_endpoint_url("kinesis"))
    if stream_config is not None:
        endpoint = replace(endpoint, profile=credentials.STREAM_PROFILE, config_file=str(stream_config))
    retention = stream_retention(kinesis_client(pipeline), pipeline.stream, pipeline.read)
    s3 = s3_access(pipeline)
    return JobSpec.for_batch(pipeline, batch, endpoint, accept_gaps, retention, S3Endpoint(s3.region, s3.endpoint_url))


def submit(pipeline: PipelineConfig, batch: Batch, accept_gaps: frozenset[str] = frozenset(), kind: RunKind = RunKind.REGULAR) -> None:
    """spark-submit the replay job with the batch's spec; endpoint and credentials come from the hook. Its progress is
    stored under ``kind``, so a backfill's never replaces the regular batch's on the page."""
    given = job_credentials(pipeline, batch, pipeline_hook(pipeline))
    log.info("pipeline %s, batch %d: the job's AWS credentials: %s", pipeline.name, batch.batch_id, given.how)
    if given.warning:
        log.warning("pipeline %s, batch %d: %s", pipeline.name, batch.batch_id, given.warning)
    for_stream = stream_credentials(pipeline, batch)
    if for_stream is not None:
        log.info("pipeline %s, batch %d: the job's Kinesis credentials: %s", pipeline.name, batch.batch_id, for_stream.how)
        if for_stream.warning:
            log.warning("pipeline %s, batch %d: %s", pipeline.name, batch.batch_id, for_stream.warning)
    work = Path(tempfile.mkdtemp(prefix=f"kinesis-replay-{pipeline.name}-{batch.batch_id}-"))
    try:
        env = given.write(work)  # the config file with the role's base keys stays in this private folder
        stream_config = None if for_stream is None else for_stream.write(work)  # and so does the stream's
        spec_path = work / "batch.json"
        spec_path.write_text(job_spec(pipeline, batch, accept_gaps, stream_config).to_json())
        library = spark_submit.package_library(work / "kinesis_replay.zip")
        job, py_files = SPARK_JOBS / "replay_job.py", [library, SPARK_JOBS / "kinesis_source.py"]
        spark_submit.warm_up(pipeline, job, py_files, spark_submit.submit_env(pipeline.spark.master, {}))  # once per machine
        command = spark_submit.build_command(pipeline, batch.batch_id, spec_path, job, py_files)
        progress = status.ReplayProgress(
            pipeline.name,
            batch.batch_id,
            progress_publisher(pipeline),
            pipeline.read.progress_seconds,
            shards=[r.shard_id for r in batch.ranges],
            kind=kind,
        )
        spark_submit.run(
            command, spark_submit.submit_env(pipeline.spark.master, env), f"pipeline {pipeline.name}, batch {batch.batch_id}", progress.line
        )
        if failed := progress.close():
            stats.incr(f"kinesis_replay.{pipeline.name}.progress_write_failures", failed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def progress_publisher(pipeline: PipelineConfig) -> Callable[[Progress], None]:
    """Store the replay's progress for the status page; ReplayProgress logs and counts a failed write, which never stops the replay."""
    store = state_store(pipeline)

    def publish(progress: Progress) -> None:
        store.put_progress(progress, pipeline.name)

    return publish


def pipeline_hook(pipeline: PipelineConfig) -> AwsBaseHook:
    """The pipeline connection's hook (``aws_conn_id``), whose credentials the replay job gets for everything but the stream
    when the stream has a connection of its own."""
    return AwsBaseHook(aws_conn_id=pipeline.aws_conn_id, client_type="s3")


def job_credentials(pipeline: PipelineConfig, batch: Batch, hook: AwsBaseHook) -> credentials.JobCredentials:
    """How the replay job gets the connection's credentials: a profile that assumes its role, so that they last as long as the job."""
    connection, base = _connection(hook)
    session_name = credentials.session_name(pipeline.name, batch.batch_id)
    return credentials.for_job(connection, session_name, base, lambda: frozen_credentials(hook))


def stream_credentials(pipeline: PipelineConfig, batch: Batch) -> credentials.StreamCredentials | None:
    """How the replay job's Kinesis clients get the stream connection's credentials (``stream_conn_id``): a profile of their
    own that assumes its role (the stream's account's). None: the stream has no connection of its own, and the job's
    Kinesis clients take the job's credentials, as its other clients do."""
    if pipeline.stream_conn_id is None or pipeline.stream_conn_id == pipeline.aws_conn_id:
        return None
    hook = kinesis_hook(pipeline)
    connection, base = _connection(hook)
    session_name = credentials.session_name(pipeline.name, batch.batch_id)
    return credentials.for_stream(connection, session_name, base, lambda: frozen_credentials(hook))


def _connection(hook: AwsBaseHook) -> tuple[credentials.Connection, credentials.BaseCredentials | None]:
    """What the hook's connection says about credentials, in plain values, and the worker's base credentials where its role needs them."""
    conn = hook.conn_config
    role = None
    if conn.role_arn:
        sts = conn.get_service_endpoint_url("sts", sts_connection_assume=True)
        role = credentials.Role(conn.role_arn, conn.assume_role_method or "assume_role", dict(conn.assume_role_kwargs), sts)
    keys = None
    if conn.aws_access_key_id and conn.aws_secret_access_key:
        keys = credentials.Keys(conn.aws_access_key_id, conn.aws_secret_access_key, conn.aws_session_token)
    region = conn.region_name or hook.conn_region_name  # the latter resolves the region through a client of the hook's session
    connection = credentials.Connection(role, keys, conn.profile_name, region)
    base = None
    if role is not None and keys is None and conn.profile_name is None:
        base = worker_credentials(hook)
    return connection, base


def frozen_credentials(hook: AwsBaseHook) -> credentials.Keys:
    """The connection's credentials as they are now (an assumed role's expire, by default within the hour)."""
    return _keys(hook.get_credentials(), f"connection {hook.aws_conn_id}")


def worker_credentials(hook: AwsBaseHook) -> credentials.BaseCredentials | None:
    """What the worker's default chain gives the hook to assume the connection's role with, when the connection holds no keys."""
    found = BaseSessionFactory(conn=hook.conn_config, region_name=hook.conn_config.region_name).basic_session.get_credentials()
    if found is None:
        return None
    keys = _keys(found.get_frozen_credentials(), f"the worker's {found.method} credentials")
    return credentials.BaseCredentials(found.method, isinstance(found, RefreshableCredentials), keys)


def _keys(found: ReadOnlyCredentials, what: str) -> credentials.Keys:
    if not found.access_key or not found.secret_key:
        raise ConfigError(f"{what}: no access key, so there is nothing to give the replay job")
    return credentials.Keys(found.access_key, found.secret_key, found.token)


def stage_emr(pipeline: PipelineConfig, batch: Batch, accept_gaps: frozenset[str] = frozenset()) -> emr_serverless.JobRun:
    """Upload the job, its Data Source, the library zip and the batch spec for EMR Serverless; return the batch's job run.

    Every file goes under the batch's own prefix, replaced on each run, so a rerun submits the same job.
    """
    emr = pipeline.spark.emr_serverless
    if emr is None:
        raise ConfigError(f"pipeline {pipeline.name}: spark.emr_serverless is not configured, so there is nothing to stage")
    s3 = S3Hook(aws_conn_id=pipeline.aws_conn_id)
    work = Path(tempfile.mkdtemp(prefix=f"kinesis-replay-{pipeline.name}-{batch.batch_id}-"))
    try:
        spec_path = work / emr_serverless.SPEC_FILE
        spec = job_spec(pipeline, batch, accept_gaps)
        if pipeline.stream_conn_id not in (None, pipeline.aws_conn_id):
            log.warning(
                "pipeline %s: the EMR Serverless job reads stream %s with its runtime role (%s), not connection %s's "
                "credentials: that role must be able to read the stream (docs/deploy-aws.md: Streams in other accounts)",
                pipeline.name, pipeline.stream, emr.execution_role_arn, pipeline.stream_conn_id,
            )  # fmt: skip
        # The job runs in AWS: never an endpoint that only Airflow can reach.
        spec_path.write_text(
            replace(spec, kinesis=replace(spec.kinesis, endpoint_url=None), s3=replace(spec.s3, endpoint_url=None)).to_json()
        )
        library = spark_submit.package_library(work / emr_serverless.LIBRARY_ZIP)
        for upload in emr_serverless.uploads(emr.code_prefix, pipeline.name, batch.batch_id, SPARK_JOBS, library, spec_path):
            s3.load_file(str(upload.local), key=upload.key, bucket_name=upload.bucket, replace=True)
            log.info("staged %s", upload.uri)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return emr_serverless.job_run(pipeline, batch.batch_id)  # the pipeline's own arguments are set once, on partial()


@fail_fast
@through_connection
def stage(pipeline: PipelineConfig, planned: Planned, params: dict[str, Any]) -> list[emr_serverless.JobRun]:
    """The EMR Serverless counterpart of replay(): check retention, stage the batch; [] when there is nothing to run."""
    store = state_store(pipeline)
    batch = in_flight.batch_to_replay(
        pipeline, kinesis_client(pipeline), store, planned["batch_id"], planned["action"], acknowledged(params)
    )
    if batch is None:
        return []
    with in_flight.failure_recorded(pipeline, store, batch.batch_id):
        return [stage_emr(pipeline, batch, acknowledged(params))]


@fail_fast
@through_connection
def verify(pipeline: PipelineConfig, planned: Planned, params: dict[str, Any], run_id: str) -> None:
    """Check the output and manifest against the plan; a mismatch fails the run and moves nothing."""
    if planned["action"] == FINISH_COMMIT:
        return
    store = state_store(pipeline)
    with in_flight.failure_recorded(pipeline, store, planned["batch_id"]):
        verify_batch(pipeline, store, planned["batch_id"], acknowledged(params), run_id)


@fail_fast
@through_connection
def commit(pipeline: PipelineConfig, planned: Planned, run_id: str = "") -> BatchFigures:
    """Advance every checkpoint of the verified batch, conditionally, then mark it committed."""
    batch = commit_batch(pipeline, state_store(pipeline), planned["batch_id"], run_id=run_id)
    summary = batch_summary(pipeline, batch, "regular")
    behind = status.catch_up(batch, datetime.now(UTC))
    summary["catch_up"] = behind.to_dict()
    stats.gauge(f"kinesis_replay.{pipeline.name}.behind_seconds", behind.behind_seconds)
    log.info("pipeline %s: committed %s", pipeline.name, {k: v for k, v in summary.items() if k != "ranges"})
    log.info("pipeline %s: %s%s", pipeline.name, behind.describe(), "; the next batch is planned at once" if behind.behind else "")
    return summary


def catch_up_needed(summary: BatchFigures) -> bool:
    """Whether the batch just committed was capped, so the next one should run now rather than at the next interval."""
    behind = summary.get("catch_up")
    return behind is not None and bool(behind["capped_shards"])


def batch_summary(pipeline: PipelineConfig, batch: Batch, kind: str, send: bool = True) -> BatchFigures:
    """The batch's figures, sent as metrics (unless not ``send``) and carried in the output Asset's event."""
    result = batch.verified_result()
    # A regular batch: plan to commit. A backfill: its replay job's own time (the batch's commit was long before).
    seconds = (batch.committed_at - batch.created_at).total_seconds() if batch.committed_at and kind == "regular" else result.seconds
    if send:
        prefix = f"kinesis_replay.{pipeline.name}.{kind}_batch"
        stats.gauge(f"{prefix}.records", result.records)
        stats.gauge(f"{prefix}.bytes", result.bytes)
        stats.gauge(f"{prefix}.bad_records", result.bad_records)
        stats.timing(f"{prefix}.duration", seconds * 1000)
    summary = BatchFigures(
        pipeline=pipeline.name,
        kind=kind,
        batch_id=batch.batch_id,
        shards=len(batch.ranges),
        records=result.records,
        bad_records=result.bad_records,
        bytes=result.bytes,
        seconds=round(seconds, 3),
        path=layout.batch_path(pipeline.output, batch.batch_id) if pipeline.table is None else pipeline.output,
    )
    if pipeline.table is not None:  # the table, and the snapshot that holds this batch (read the table as of it to see the batch)
        summary["table"], summary["catalog"], summary["snapshot_id"] = pipeline.table.identifier, pipeline.table.catalog, batch.snapshot_id
    # The ranges ride along while they are few; a wide stream's (about 250 bytes each) are in the commit record.
    if len(batch.ranges) <= SUMMARY_RANGES:
        summary["ranges"] = [r.to_dict() for r in batch.ranges]
    else:
        summary["ranges_in"] = layout.commit_record_path(pipeline.output, batch.batch_id)
    return summary


def event_extra(summary: BatchFigures) -> dict[str, Any]:
    """A batch's figures as the output Asset's event carries them: the same JSON object."""
    return cast("dict[str, Any]", summary)  # a TypedDict is a dict; Airflow types an event's extra as any JSON object


@fail_fast  # its own AirflowFailException passes through; a missing or corrupt state table fails it at once too
@through_connection
def check_staleness(pipeline: PipelineConfig) -> None:
    """The regular DAG's task ``check``, the stuck check: fail, and so alert through the DAG's callbacks, when a record
    has waited too long to be committed."""
    found = in_flight.staleness(pipeline, state_store(pipeline))
    stats.gauge(f"kinesis_replay.{pipeline.name}.checkpoint_age_seconds", found.age_seconds)
    problem = found.problem(pipeline)
    if problem is not None:
        raise AirflowFailException(problem)
    log.info("pipeline %s: oldest uncommitted record waited %.0fs (limit %ds)", pipeline.name, found.age_seconds, found.limit_seconds)


@fail_fast
@through_connection
def select_backfill(
    pipeline: PipelineConfig, params: dict[str, Any], run_id: str = "", restored: list[BatchFigures] | None = None
) -> list[int]:
    """The committed batches to replay; refuses while a regular batch is in flight or when ranges left retention.

    With ``restore_table``: the committed batches the table lacks. Those whose verified files are still in the output
    are committed from them here (their figures appended to ``restored``); the others are returned, for a replay from
    the stream each.
    """
    check_params(pipeline, pipeline.backfill_dag_id, params, BACKFILL_PARAMS)
    if params.get("rebuild") and params.get(iceberg_table.RESTORE_PARAM):
        raise BackfillError(
            f"pipeline {pipeline.name!r}: give either rebuild or {iceberg_table.RESTORE_PARAM}, not both: a restore puts back "
            "batches as they were committed, a rebuild decodes them anew with payload.next_schema. Nothing was run"
        )
    if params.get(iceberg_table.RESTORE_PARAM):
        if params.get("batches"):
            raise BackfillError(
                f"pipeline {pipeline.name!r}: give either {iceberg_table.RESTORE_PARAM} or batches, not both. "
                f"{iceberg_table.RESTORE_PARAM} puts back every committed batch the table lacks, whichever they are (it takes "
                "no batches: try it with dry_run to see which); batches replays the batches it names into their own paths. "
                "Nothing was run"
            )
        in_flight.check_same_stream(pipeline, kinesis_client(pipeline))
        return restore_table(pipeline, bool(params.get("dry_run")), run_id, restored)
    if not params.get("batches"):
        raise BackfillError(
            f'pipeline {pipeline.name}: name the batches to replay ({{"batches": {{"batch_ids": [3, 7]}}}}, or from_batch and '
            f'to_batch, or start_time and end_time), or restore the table ({{"{iceberg_table.RESTORE_PARAM}": true}})'
        )
    backfill.parse_selection(params["batches"])  # a mistyped selection is refused before anything is called
    client = kinesis_client(pipeline)
    in_flight.check_same_stream(pipeline, client)
    redecode, rebuilding, copy_expired = bool(params.get("redecode")), bool(params.get("rebuild")), bool(params.get("copy_expired"))
    if copy_expired and not rebuilding:
        raise BackfillError(
            f"pipeline {pipeline.name!r}: copy_expired is a rebuild's (it copies the batches past the stream's retention "
            "under payload.next_schema's types): give it with rebuild: true. Nothing was run"
        )
    store = state_store(pipeline)
    selection, chosen = backfill.choose(
        pipeline, client, store, params["batches"], redecode=redecode, rebuild=rebuilding, copy_expired=copy_expired
    )
    if copy_expired and not params.get("dry_run"):
        copied = rebuild.stage_copies(pipeline, client, store, run_id)
        log.info("pipeline %s: staged copies of batches %s, past the stream's retention", pipeline.name, copied)
    if rebuilding and not chosen:
        raise AirflowSkipException(
            f"pipeline {pipeline.name}: the selection {selection.describe()} holds no batch the stream still holds; those "
            "past its retention are copied (copy_expired). Trigger the rebuild with a selection that has one to replay: "
            "its commit task switches once every committed batch is rebuilt or copied"
        )
    if params.get("dry_run"):
        for batch in chosen:
            estimated = backfill.estimate_batch(batch, pipeline.read)
            log.info("dry run: would replay %s", backfill.describe(batch, estimated, pipeline.read.consumer))
        raise AirflowSkipException(
            f"dry run of a backfill of {selection.describe()} in pipeline {pipeline.name}: nothing was read or written"
        )
    log.info("pipeline %s: backfilling %s", pipeline.name, ", ".join(str(b.batch_id) for b in chosen))
    return [b.batch_id for b in chosen]


def restore_table(pipeline: PipelineConfig, dry_run: bool, run_id: str, restored: list[BatchFigures] | None = None) -> list[int]:
    """The restore's first step: say what it puts back and from where; commit what the output's files hold (their
    figures appended to ``restored``)."""
    store = state_store(pipeline)
    plan = backfill.plan_restore(pipeline, kinesis_client(pipeline), store)
    report = plan.describe()
    log.info("%s", report)
    if dry_run:
        raise AirflowSkipException(f"dry run of a restore: nothing was read or written\n{report}")
    # The batches it cannot bring back go on too: each one's own task fails, naming it (backfill.committed_batch).
    failed = backfill.restore_from_files(pipeline, store, plan, run_id)
    if restored is not None:
        restored += [restore_figures(pipeline, store.get_batch(pipeline.name, b)) for b in plan.from_files if b not in failed]
    replay_ids = [*failed, *plan.from_stream, *plan.lost][: backfill.MAX_BATCHES_PER_RUN]
    if not replay_ids:
        raise AirflowSkipException(
            f"pipeline {pipeline.name}: restored {len(plan.from_files)} batches from the output's files; none to replay"
        )
    return sorted(replay_ids)


def restore_figures(pipeline: PipelineConfig, batch: Batch) -> BatchFigures:
    """A batch a restore committed from the output's files: its figures, with no replay time of its own (no metrics:
    the restore's log names it)."""
    summary = batch_summary(pipeline, batch, "restore", send=False)
    summary["seconds"] = 0.0
    return summary


@fail_fast
@through_connection
def backfill_batch(
    pipeline: PipelineConfig, batch_id: int, run_id: str = "", restore: bool = False, redecode: bool = False, rebuild: bool = False
) -> BatchFigures:
    """Replay one committed batch into its own paths and check it holds what it held; never touches a checkpoint. A
    ``rebuild``'s decodes with payload.next_schema (steps/rebuild.py)."""
    pipeline = rebuilt(pipeline) if rebuild else pipeline
    client = kinesis_client(pipeline)
    in_flight.check_same_stream(pipeline, client)  # as the regular run's: the select task's check, again just before Spark starts
    submit(
        pipeline, backfill.committed_batch(pipeline, state_store(pipeline), batch_id, client if restore else None), kind=RunKind.BACKFILL
    )
    return check_backfilled(pipeline, batch_id, run_id, restore, redecode, rebuild)


@fail_fast
@through_connection
def stage_backfill(pipeline: PipelineConfig, batch_id: int, restore: bool = False, rebuild: bool = False) -> emr_serverless.JobRun:
    """Stage one committed batch for an EMR Serverless replay (the backfill DAG's counterpart of stage())."""
    pipeline = rebuilt(pipeline) if rebuild else pipeline
    client = kinesis_client(pipeline)
    in_flight.check_same_stream(pipeline, client)
    return stage_emr(pipeline, backfill.committed_batch(pipeline, state_store(pipeline), batch_id, client if restore else None))


@fail_fast
@through_connection
def check_backfilled(
    pipeline: PipelineConfig, batch_id: int, run_id: str = "", restore: bool = False, redecode: bool = False, rebuild: bool = False
) -> BatchFigures:
    """The backfill DAG's task ``check`` after an EMR Serverless replay, and the end of backfill_batch otherwise.

    A backfilled batch must hold what its first run held (same shards, counts, checksums) and decode as the output holds
    it (unless ``redecode``); then it replaces the batch's folder or the table's files (or, restoring, joins the table)."""
    pipeline = rebuilt(pipeline) if rebuild else pipeline
    batch = backfill.check_replayed(pipeline, state_store(pipeline), batch_id, run_id, restore, redecode, rebuild)
    if batch.staged is not None and batch.staged_by == run_id:  # a re-decode of a table: readers see nothing new until ``commit``
        summary = batch_summary(pipeline, replace(batch, result=batch.staged, snapshot_id=None), "staged")
    else:
        summary = batch_summary(pipeline, batch, "backfill")
    log.info("pipeline %s: backfilled %s", pipeline.name, summary)
    return summary


@fail_fast
@through_connection
def commit_redecode(pipeline: PipelineConfig, params: dict[str, Any], run_id: str, batch_ids: list[int]) -> list[BatchFigures]:
    """The backfill DAG's last task: a re-decode of a table output becomes visible, every chosen batch at once, in one
    snapshot of each table (redecode.commit_redecoded). Skipped for a backfill without ``redecode``, a restore, and a
    directory output (whose check swaps each batch in on its own). A ``rebuild``'s switches the table to
    payload.next_schema once every committed batch is rebuilt (rebuild.switch), and is skipped, naming the batches
    still to rebuild, until then."""
    if params.get("rebuild") and pipeline.table is not None:
        found = rebuild.switch(pipeline, state_store(pipeline), run_id)
        if found.waiting:  # nothing committed: readers see the table as it was, and the page the staged batches
            raise AirflowSkipException(found.describe(pipeline))
        log.info("%s", found.describe(pipeline))
        return [batch_summary(pipeline, b, "rebuild") for b in found.switched]
    if not params.get("redecode") or params.get(iceberg_table.RESTORE_PARAM) or pipeline.table is None:
        raise AirflowSkipException(f"pipeline {pipeline.name}: no re-decode of a table to commit: each batch was committed by its check")
    batches = redecode.commit_redecoded(pipeline, state_store(pipeline), batch_ids, run_id)
    figures = [batch_summary(pipeline, b, "redecode") for b in batches]
    log.info("pipeline %s: re-decoded %s", pipeline.name, figures)
    return figures


@fail_fast
@through_connection
def maintain_table(pipeline: PipelineConfig, params: dict[str, Any], run_id: str = "") -> MaintenanceFigures:
    """Compact the batches whose files are more than their size needs (steps/compaction.py), then expire the table's old
    snapshots and remove its orphan files (table_maintenance has the defaults and why).

    Fails, after the expiry, when orphan removal was refused because the pipeline's state is missing.
    """
    check_params(pipeline, maintenance_dag_id(pipeline), params, MAINTENANCE_PARAMS)
    hours = params.get("orphan_age_hours", table_maintenance.DEFAULT_ORPHAN_AGE.total_seconds() / 3600)
    target = int(params.get("target_file_size_mb", compaction_files.TARGET_BYTES // 2**20)) * 2**20
    store = state_store(pipeline)
    compacted = compaction.Compaction(pipeline.name)
    if params.get("compact", True):
        compacted = compaction.compact(pipeline, store, run_id or "maintenance", target, dry_run=bool(params.get("dry_run")))
    found = maintenance.tidy_table(pipeline, state_store(pipeline), orphan_age=timedelta(hours=hours), dry_run=bool(params.get("dry_run")))
    if found is None:
        raise AirflowSkipException(
            f"pipeline {pipeline.name}: {iceberg_table.require_table(pipeline).describe()} has no commit yet: nothing to maintain"
        )
    log.info("pipeline %s: %s: %s", pipeline.name, iceberg_table.require_table(pipeline).describe(), found.summary())
    if found.orphans_refused is not None:
        raise AirflowFailException(found.orphans_refused)
    return MaintenanceFigures(
        expired_snapshots=len(found.expired_snapshots),
        snapshots_kept=found.snapshots_kept,
        orphans_removed=len(found.orphans_removed),
        left_alone=found.foreign_files,
        dry_run=found.dry_run,
        compacted_batches=len(compacted.compacted),
        files_before=compacted.files_before,
        files_after=compacted.files_after,
    )
