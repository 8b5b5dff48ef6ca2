"""The replay job as an EMR Serverless job run: the files to stage on S3 and EmrServerlessStartJobOperator's arguments.

Pure functions of plain values: no boto3, no Airflow. The DAG gives ``operator_args(pipeline)`` to the operator's
``partial()``; its stage task uploads a batch's files (with an S3 hook) and returns ``job_run(pipeline, batch_id)``,
which the operator's ``expand_kwargs()`` makes one job run. Every file of one batch lives under one prefix,

    <code_prefix>/<pipeline>/batch_id=<id>/replay_job.py, kinesis_source.py, kinesis_replay.zip, batch.json

so a rerun of the batch replaces exactly its own files, as it replaces exactly its own output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from kinesis_replay.core.config import DEFAULT_SPARK_CONF, EmrServerlessConfig, PipelineConfig
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.formats import path_batch_id
from kinesis_replay.core.roots import split_s3_uri

JOB_FILE = "replay_job.py"
SOURCE_FILE = "kinesis_source.py"
LIBRARY_ZIP = "kinesis_replay.zip"
SPEC_FILE = "batch.json"
# Where EMR Serverless unpacks a --conf spark.archives=<venv.tar.gz>#environment on driver and executors.
VENV_PYTHON = "./environment/bin/python"


@dataclass(frozen=True)
class Upload:
    """One file to copy to S3 before the job run starts."""

    local: Path
    bucket: str
    key: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class SparkSubmit(TypedDict):
    """EMR Serverless's ``jobDriver.sparkSubmit``, as its API spells the keys."""

    entryPoint: str
    entryPointArguments: list[str]
    sparkSubmitParameters: str


class JobDriver(TypedDict):
    sparkSubmit: SparkSubmit


class JobRun(TypedDict):
    """One batch's job run: the stage task's XCom, each one a mapped replay's keyword arguments (``expand_kwargs``).

    Stored in Airflow's XCom table as the JSON object it is. A run staged by an earlier release stored these same
    three keys, so a run in progress across an upgrade goes on: the keys only grow, like the other XComs'.
    """

    job_driver: JobDriver
    configuration_overrides: dict[str, Any] | None  # the log prefix's monitoring configuration, if there is one
    name: str


class OperatorArgs(TypedDict):
    """The pipeline's part of the operator's arguments, the same for every batch: given once, to ``partial()``."""

    application_id: str
    execution_role_arn: str
    deferrable: bool
    waiter_delay: int
    waiter_max_attempts: int


class JobRunKwargs(OperatorArgs, JobRun):
    """All of ``EmrServerlessStartJobOperator``'s arguments for one batch."""


def batch_prefix(code_prefix: str, pipeline_name: str, batch_id: int) -> str:
    """The S3 URI under which one batch's job files live."""
    bucket, prefix = split_s3_uri(code_prefix, "code_prefix")
    key = "/".join(part for part in (prefix, pipeline_name, f"batch_id={path_batch_id(batch_id)}") if part)
    return f"s3://{bucket}/{key}"


def uploads(code_prefix: str, pipeline_name: str, batch_id: int, spark_jobs: Path, library_zip: Path, spec: Path) -> list[Upload]:
    """What the job run reads from S3: the job file, its Data Source, the library zip, and the batch spec."""
    bucket, prefix = split_s3_uri(batch_prefix(code_prefix, pipeline_name, batch_id), "code_prefix")
    files = [(spark_jobs / JOB_FILE, JOB_FILE), (spark_jobs / SOURCE_FILE, SOURCE_FILE), (library_zip, LIBRARY_ZIP), (spec, SPEC_FILE)]
    return [Upload(local=local, bucket=bucket, key=f"{prefix}/{name}") for local, name in files]


def spark_submit_parameters(py_files: list[str], conf: Mapping[str, str]) -> str:
    """``--py-files a,b --conf k=v ...``, sorted like build_command's, so two runs of a batch submit the same text."""
    for key, value in conf.items():
        if any(c.isspace() for c in f"{key}{value}"):
            # EMR Serverless splits sparkSubmitParameters on whitespace; it has no quoting.
            raise ConfigError(f"spark.conf {key}: EMR Serverless cannot pass a value with whitespace, got {value!r}")
    parts = ["--py-files", ",".join(py_files)]
    for key, value in sorted(conf.items()):
        parts += ["--conf", f"{key}={value}"]
    return " ".join(parts)


def job_run_kwargs(pipeline: PipelineConfig, batch_id: int) -> JobRunKwargs:
    """``EmrServerlessStartJobOperator``'s arguments (providers-amazon 9.x) for one batch of a pipeline with ``spark.emr_serverless``:
    the pipeline's (``operator_args``) and the batch's (``job_run``)."""
    return JobRunKwargs(**operator_args(pipeline), **job_run(pipeline, batch_id))


def operator_args(pipeline: PipelineConfig) -> OperatorArgs:
    """The operator's arguments that every batch of the pipeline shares.

    The config reader has checked every value (ids, role ARN, S3 URIs). The run is polled every ``poll_seconds``
    for at most ``submit_timeout_seconds``, the limit a spark-submit replay has too.
    """
    emr = _emr(pipeline)
    return OperatorArgs(
        application_id=emr.application_id,
        execution_role_arn=emr.execution_role_arn,
        deferrable=emr.deferrable,
        waiter_delay=emr.poll_seconds,
        waiter_max_attempts=max(1, -(-pipeline.spark.submit_timeout_seconds // emr.poll_seconds)),
    )


def job_run(pipeline: PipelineConfig, batch_id: int) -> JobRun:
    """One batch's job run: the job file and the spec staged under the batch's prefix, the run named for the batch."""
    emr = _emr(pipeline)
    base = batch_prefix(emr.code_prefix, pipeline.name, batch_id)
    parameters = spark_submit_parameters([f"{base}/{LIBRARY_ZIP}", f"{base}/{SOURCE_FILE}"], job_conf(pipeline, emr))
    driver = SparkSubmit(
        entryPoint=f"{base}/{JOB_FILE}", entryPointArguments=["--spec", f"{base}/{SPEC_FILE}"], sparkSubmitParameters=parameters
    )
    overrides = None
    if emr.log_uri is not None:
        overrides = {"monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": emr.log_uri}}}
    return JobRun(
        job_driver=JobDriver(sparkSubmit=driver), configuration_overrides=overrides, name=f"kinesis-replay-{pipeline.name}-batch-{batch_id}"
    )


def _emr(pipeline: PipelineConfig) -> EmrServerlessConfig:
    if pipeline.spark.emr_serverless is None:
        raise ConfigError(f"pipeline {pipeline.name}: spark.emr_serverless is not configured")
    return pipeline.spark.emr_serverless


def job_conf(pipeline: PipelineConfig, emr: EmrServerlessConfig) -> dict[str, str]:
    """The job's Spark properties: the defaults, the pipeline's own, and the packed virtualenv's Python if there is one.

    ``venv_archive`` is an S3 URI of a packed virtualenv (venv-pack) holding the job's dependencies (boto3,
    pyarrow, aws-kinesis-agg); without it the release image's Python must have them.
    """
    conf = {**DEFAULT_SPARK_CONF, **pipeline.spark.conf}
    if emr.venv_archive is not None:
        conf.update(
            {
                "spark.archives": f"{emr.venv_archive}#environment",
                "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": VENV_PYTHON,
                "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": VENV_PYTHON,
                "spark.executorEnv.PYSPARK_PYTHON": VENV_PYTHON,
            }
        )
    return conf
