"""Reports each invalid pipeline of the kinesis-replay config as an import error of this Airflow DAG file.

It defines no DAG. kinesis_replay_dags.py builds the DAGs of the valid pipelines only, so one bad entry
(a missing or unknown key, a duplicate name, a shared output, a bad cron expression) stops only its own
pipeline, and this file's import error names the pipeline, the config file and the key. Errors that
concern the whole file (unreadable, not YAML, no `pipelines` list) fail kinesis_replay_dags.py itself.
"""

from __future__ import annotations

from pathlib import Path

import kinesis_replay_tasks as tasks
from kinesis_replay.core.config import resolve_config_path
from kinesis_replay.core.errors import ConfigError

CONFIG_PATH = resolve_config_path(Path(__file__).with_name("pipelines.yaml"))

try:
    _errors = tasks.load_pipelines(CONFIG_PATH).errors
except ConfigError:
    _errors = ()  # a whole-file error: kinesis_replay_dags.py reports it, once
if _errors:
    raise ConfigError(
        f"{len(_errors)} pipeline(s) of {CONFIG_PATH} are invalid and have no DAGs; every other pipeline runs:\n"
        + "\n".join(f"- {e.name or 'pipeline #' + str(e.index)}: {e.message}" for e in _errors)
    )
