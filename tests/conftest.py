"""Shared fixtures: a local stack on free ports, and a throwaway Airflow home set before Airflow is imported."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Airflow reads its configuration when it is first imported: point it at a scratch home first.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kinesis-replay-airflow-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # dag.test() writes a changed DAG to the database only when 30 s have passed since its last write: a test that
        # changes a pipeline (its output moved) would run the new DAG or the old one depending on its timing.
        "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
        "KINESIS_REPLAY_CONFIG": str(ROOT / "dags" / "pipelines.yaml"),
    }
)
# The replay job's class-data-sharing archive: the first replay task records it, the rest map it; kept in the scratch folder.
os.environ.setdefault("KINESIS_REPLAY_JVM_CACHE", str(ROOT / ".stack" / "jvm"))
# Importing Airflow replaces the root logger's handlers. Done here, before any test, so that it never removes the
# handler pytest's caplog adds for a test (a test that first imported Airflow would capture nothing).
import airflow.sdk  # noqa: E402, F401


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """kinesalite and the moto server on free ports, reached over HTTP; the environment points boto3 and Airflow at them."""
    from stack import local_stack

    state = tmp_path_factory.mktemp("stack")
    running = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    saved = {k: os.environ.get(k) for k in running.env()}
    os.environ.update(running.env())
    yield running
    local_stack.stop(state)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata database (SQLite) in the scratch home, migrated once per session."""
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, env=dict(os.environ))
    return _AIRFLOW_HOME


@pytest.fixture
def stream(stack: object) -> Iterator[str]:
    """A fresh 4-shard stream of its own for each test, deleted after it.

    kinesalite, like an account, allows 200 open shards; a worker's tests would use them up.
    """
    from botocore.exceptions import ClientError

    from stack.producer import ensure_stream, kinesis_client

    client = kinesis_client()
    name = f"test-{uuid.uuid4().hex[:10]}"
    ensure_stream(client, name, 4)
    yield name
    with contextlib.suppress(ClientError):  # a test may have deleted it itself
        client.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compose", action="store_true", help="collect tests/compose: docker-compose.yml's stack under a Docker engine")
    parser.addoption("--installed", action="store_true", help="collect tests/installed: make dist's wheel installed into a fresh venv")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/compose starts the Docker stack (21 minutes cold with one schedule): `make test-compose` runs it, `make test` does not."""
    if collection_path == ROOT / "tests" / "compose" and not config.getoption("--compose"):
        return True
    # tests/installed builds the package and installs it into a fresh virtualenv: `make test-dist` runs it, `make test` does not.
    if collection_path == ROOT / "tests" / "installed" and not config.getoption("--installed"):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
        if "compose" in item.path.parts:
            item.add_marker(pytest.mark.compose)
        if "installed" in item.path.parts:
            item.add_marker(pytest.mark.installed)


# The fault-schedule tests (tests/integration/test_chaos.py) each record their totals as a user property; the
# session ends with one line over all of them. User properties travel from pytest-xdist's workers to here.
_CHAOS_TOTALS: list[dict[str, int]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _CHAOS_TOTALS.extend(json.loads(value) for name, value in report.user_properties if name == "chaos")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _CHAOS_TOTALS:
        totals = {key: sum(t[key] for t in _CHAOS_TOTALS) for key in ("records", "lost", "duplicated")}
        terminalreporter.write_line(
            f"schedules: {len(_CHAOS_TOTALS)}, records: {totals['records']}, lost: {totals['lost']}, duplicated: {totals['duplicated']}"
        )
