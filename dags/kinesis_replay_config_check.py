"""Reports each invalid pipeline of the kinesis-replay config as an import error of this Airflow DAG file.

It defines no DAG. kinesis_replay_dags.py builds the DAGs of the valid pipelines only, so one bad entry
(a missing or unknown key, a duplicate name, a shared output, a bad cron expression) stops only its own
pipeline, and this file's import error names the pipeline, the config file and the key. Errors that
concern the whole file (unreadable, not YAML, no `pipelines` list) fail kinesis_replay_dags.py itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import kinesis_replay_tasks as tasks
from kinesis_replay.airflow_config import existing_pipelines_path
from kinesis_replay.core.config import CONFIG_ENV, resolve_config_path
from kinesis_replay.core.errors import ConfigError

CONFIG_PATH = resolve_config_path(Path(__file__).with_name("pipelines.yaml"))


def report_invalid(config: str | os.PathLike[str] | None = None) -> None:
    """Raise one ConfigError naming each invalid pipeline of the config (found as build_dags finds it), if any.

    Called from a DAG file of its own, so that the error is that file's import error and the valid pipelines' DAGs,
    built by another file, run on. A whole-file error (missing, not YAML) is left to build_dags, which reports it once.
    """
    try:
        path = existing_pipelines_path(config)
        errors = tasks.load_pipelines(path).errors
    except ConfigError:
        return  # a whole-file error: the DAG factory's file reports it, once
    if errors:
        raise ConfigError(
            f"{len(errors)} pipeline(s) of {path} are invalid and have no DAGs; every other pipeline runs:\n"
            + "\n".join(f"- {e.name or 'pipeline #' + str(e.index)}: {e.message}" for e in errors)
        )


# As this repository's DAG file it checks dags/pipelines.yaml or $KINESIS_REPLAY_CONFIG; imported by its name, as the
# installed package's module, it checks nothing until report_invalid is called.
if __name__ != "kinesis_replay_config_check":
    report_invalid(None if os.environ.get(CONFIG_ENV) else CONFIG_PATH)
