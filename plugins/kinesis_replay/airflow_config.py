"""The config checks only Airflow can make, shared by the DAG files and the plugin's page.

An adapter, like airflow_plugin: kinesis_replay.core.config (the domain core) imports no Airflow.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import UTC, datetime
from pathlib import Path

from kinesis_replay.core import config
from kinesis_replay.core.config import CONFIG_ENV, LoadedConfig, PipelineConfig, PipelineError
from kinesis_replay.core.errors import ConfigError

START = datetime(2026, 1, 1, tzinfo=UTC)


CONFIG_FILE = "pipelines.yaml"


def pipelines_path(given: str | os.PathLike[str] | None = None) -> Path:
    """The pipelines config: ``given``, else ``$KINESIS_REPLAY_CONFIG``, else pipelines.yaml in Airflow's DAGs folder.

    The status page has no argument to be given: it reads the latter two, so a deployment whose DAG file passes a path
    of its own sets the variable too (docs/deployment.md, "Installing the package").
    """
    if given is not None:
        return Path(given)
    if found := os.environ.get(CONFIG_ENV):
        return Path(found)
    from airflow.configuration import conf

    return Path(conf.get("core", "dags_folder")) / CONFIG_FILE


def existing_pipelines_path(given: str | os.PathLike[str] | None = None) -> Path:
    """pipelines_path(given), refused with where it came from and how to point elsewhere when there is no such file."""
    path = pipelines_path(given)
    if not path.is_file():
        source = (
            "the path given to build_dags"
            if given is not None
            else (f"${CONFIG_ENV}" if os.environ.get(CONFIG_ENV) else f"pipelines.yaml in Airflow's DAGs folder (${CONFIG_ENV} is not set)")
        )
        raise ConfigError(
            f"the kinesis-replay pipelines config {path} does not exist: it is {source}. Write the file there, or set "
            f"${CONFIG_ENV} to its path (docs/configuration.md, docs/deployment.md)"
        )
    return path


def load_pipelines(path: str | os.PathLike[str]) -> LoadedConfig:
    """The config's valid pipelines and an error for each invalid one, with the checks only Airflow can make.

    One bad entry must stop only its own pipeline. An invalid cron expression shows only when Airflow
    validates the DAG's timetable, so it is checked here, on a DAG that is never registered. The DAG files
    and the page both load the config here, so a pipeline that has no DAGs shows its error on the page.
    """
    loaded = config.load_pipelines(path)
    valid, errors = [], list(loaded.errors)
    for pipeline in loaded.pipelines:
        problem = airflow_problem(pipeline)
        if problem is None:
            valid.append(pipeline)
        else:
            errors.append(PipelineError(-1, pipeline.name, f"{path}: pipeline {pipeline.name}: {problem}"))
    return LoadedConfig(tuple(valid), tuple(errors))


def airflow_problem(pipeline: PipelineConfig) -> str | None:
    """Why Airflow could not run the pipeline's DAGs, or None."""
    from airflow.sdk import DAG

    try:
        DAG(dag_id=f"{pipeline.dag_id}_schedule_check", schedule=pipeline.schedule, start_date=START).timetable.validate()
    except Exception as exc:  # Airflow raises several kinds for a bad schedule
        return f"schedule: {pipeline.schedule!r} is not a valid schedule: {exc}"
    if (
        pipeline.spark.emr_serverless is not None
        and pipeline.spark.emr_serverless.deferrable
        and importlib.util.find_spec("aiobotocore") is None
    ):
        return (
            "spark.emr_serverless.deferrable needs aiobotocore in Airflow's environment "
            "(pip install 'apache-airflow-providers-amazon[aiobotocore]'), or set deferrable: false"
        )
    return None
