"""The replay job as an EMR Serverless job run: the files to stage on S3 and EmrServerlessStartJobOperator's arguments.

Pure functions of plain values: no boto3, no Airflow. The DAG stages the uploads (with an S3 hook), then hands
``job_run_kwargs(pipeline, batch_id)`` to ``EmrServerlessStartJobOperator``. Every file of one batch lives under one prefix,

    <code_prefix>/<pipeline>/batch_id=<id>/replay_job.py, kinesis_source.py, kinesis_replay.zip, batch.json

so a rerun of the batch replaces exactly its own files, as it replaces exactly its own output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def job_run_kwargs(pipeline: PipelineConfig, batch_id: int) -> dict[str, Any]:
    """``EmrServerlessStartJobOperator``'s arguments (providers-amazon 9.x) for one batch of a pipeline with ``spark.emr_serverless``.

    The config reader has checked every value (ids, role ARN, S3 URIs). The run is polled every ``poll_seconds``
    for at most ``submit_timeout_seconds``, the limit a spark-submit replay has too.
    """
    emr = pipeline.spark.emr_serverless
    if emr is None:
        raise ConfigError(f"pipeline {pipeline.name}: spark.emr_serverless is not configured")
    base = batch_prefix(emr.code_prefix, pipeline.name, batch_id)
    kwargs: dict[str, Any] = {
        "application_id": emr.application_id,
        "execution_role_arn": emr.execution_role_arn,
        "job_driver": {
            "sparkSubmit": {
                "entryPoint": f"{base}/{JOB_FILE}",
                "entryPointArguments": ["--spec", f"{base}/{SPEC_FILE}"],
                "sparkSubmitParameters": spark_submit_parameters(
                    [f"{base}/{LIBRARY_ZIP}", f"{base}/{SOURCE_FILE}"], job_conf(pipeline, emr)
                ),
            }
        },
        "configuration_overrides": None,
        "name": f"kinesis-replay-{pipeline.name}-batch-{batch_id}",
        "deferrable": emr.deferrable,
        "waiter_delay": emr.poll_seconds,
        "waiter_max_attempts": max(1, -(-pipeline.spark.submit_timeout_seconds // emr.poll_seconds)),
    }
    if emr.log_uri is not None:
        kwargs["configuration_overrides"] = {"monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": emr.log_uri}}}
    return kwargs


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
