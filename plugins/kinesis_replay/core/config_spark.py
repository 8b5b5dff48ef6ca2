"""The pipelines config's `spark` section and its `emr_serverless`: each key declared once (kinesis_replay.core.options)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.options import exact, option, section
from kinesis_replay.core.roots import split_s3_uri

_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/")


def _s3_prefix(uri: str) -> str:
    """``s3://bucket/prefix``, without a trailing slash."""
    try:
        split_s3_uri(uri, "the value")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return uri.rstrip("/")


@section
class EmrServerlessConfig:
    """Run the replay job as an EMR Serverless job run instead of through spark-submit.

    The job file, its Data Source, the library zip and the batch spec are uploaded under
    ``code_prefix`` (``s3://bucket/prefix``), one folder per batch.
    """

    application_id: str = option("an existing SPARK application (EMR 7.x) that runs the job")
    execution_role_arn: str = option(
        "the IAM role the job runs as (`arn:aws:iam::<account>:role/<name>`)",
        pattern=_ROLE,
        must="must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)",
    )
    code_prefix: str = option("`s3://bucket/prefix` where each batch's job files are staged", check=_s3_prefix)
    log_uri: str | None = option("S3 prefix for driver and executor logs", default=None, check=_s3_prefix)
    venv_archive: str | None = option("S3 URI of a venv-pack archive holding the job's dependencies", default=None, check=_s3_prefix)
    deferrable: bool = option("wait in the triggerer; needs aiobotocore on Airflow's side", default=False)
    poll_seconds: int = option("how often the job run's state is polled", default=30, minimum=1)


# What every replay job gets, under spark-submit or EMR Serverless, unless the pipeline's spark.conf says otherwise:
# - spark.log.level: Spark's INFO lines (hundreds a run) would bury the job's own progress in the driver's log.
# - ARROW_DEFAULT_MEMORY_POOL in the Python workers' environment: Arrow's own allocations go through the C library's
#   malloc, whose freed pages the task hands back (kinesis_source.return_large_blocks), rather than mimalloc, which
#   keeps a heap per thread. The task puts pyarrow's allocations on malloc itself; this reaches what Arrow allocates
#   from its default pool directly, from the worker's start. The largest worker of a 400,000-record job: 209 -> 194 MiB,
#   171 at 4,000 records (181), for the same CPU (BENCHMARKS.md, the memory target; docs/configuration.md).
# - spark.python.worker.faulthandler.enabled: a Python worker that dies of a signal (a segfault in native code) has
#   Python's fault handler name it ("Fatal Python error: Segmentation fault"); the JVM puts that line in its crash message,
#   which the launcher reports as the root cause, where it would otherwise say only "EOFException" (spark_submit.WorkerLines).
DEFAULT_SPARK_CONF: Mapping[str, str] = {
    "spark.log.level": "WARN",
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "system",
    "spark.python.worker.faulthandler.enabled": "true",
}


def as_text(properties: Mapping[Any, Any]) -> dict[str, str]:
    """Properties as the text Spark and pyiceberg take: YAML's true is "true"."""
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in properties.items()}


def _spark_conf(value: object) -> dict[str, str]:
    conf = value or {}
    if not isinstance(conf, Mapping):
        raise ValueError(f"must be a mapping of Spark properties, got {type(conf).__name__}")
    for k, v in conf.items():
        if not isinstance(k, str) or not k.startswith("spark."):
            raise ValueError(f"keys must be Spark properties starting with 'spark.', got {k!r}")
        exact(k, "the property ")
        if isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{k} must be a scalar, got {v!r}")
    return as_text(conf)


@section
class SparkConfig:
    master: str = option(
        "spark-submit's `--master`: `local[...]`, `spark://host:7077`, `yarn`, `k8s://...`; "
        "see [The JVM of a local job](#the-jvm-of-a-local-job)",
        default="local[*]",
    )
    conf: Mapping[str, str] = option(
        "Spark properties, each passed as `--conf` (EMR Serverless: in `sparkSubmitParameters`, so no whitespace)",
        default_factory=dict,
        parse=_spark_conf,
    )
    submit_timeout_seconds: int = option(
        "the replay task's execution timeout; the job is killed when it expires", default=6 * 3600, minimum=1
    )
    emr_serverless: EmrServerlessConfig | None = option(
        "set (instead of `spark.master`): EMR Serverless runs the job, not spark-submit; "
        "see [EMR Serverless](deployment.md#emr-serverless)",
        default=None,
    )
