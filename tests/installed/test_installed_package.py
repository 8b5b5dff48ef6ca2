"""The package as a user installs it (`make test-dist`; issue 48): make dist's wheel, built from its sdist, installed
into a fresh virtualenv with uv (constraints: requirements.txt, the tested set), and nothing of this repository on the
path: no PYTHONPATH, the repository's dags/ and plugins/ folders unused, the working folder elsewhere. A fresh
AIRFLOW_HOME holds a pipelines file and a DAG file of a comment and two lines; `airflow dags test` runs the pipeline's
DAG against the session's local stack (plan, replay on local Spark from the installed job, verify, commit), every
record lands once, and the status page answers from the installed plugin, loaded through its entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from kinesis_replay import __version__
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack.harness import check_exactly_once, pipeline_entry, read_output, request_json
from stack.local_stack import free_port, wait_for_http
from stack.producer import kinesis_client, produce

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"  # requirements.txt installs it beside this Python
# The user's DAG file. Airflow's safe mode parses only files that mention both "airflow" and "dag": the comment does.
DAG_FILE = """\
# Airflow DAGs of kinesis-replay: one set per pipeline of pipelines.yaml in this folder (or $KINESIS_REPLAY_CONFIG).
from kinesis_replay_dags import build_dags
globals().update(build_dags())
"""
RECORDS = 300
FIGURES: dict[str, str] = {}  # printed at the end: the issue asks for them measured


@dataclass(frozen=True)
class Installed:
    venv: Path
    python: Path
    site_packages: Path
    work: Path  # the working folder of every command, outside this repository


@pytest.fixture(autouse=True)
def figures(record_property: Any) -> Iterator[None]:
    """Each test's figures so far, as a user property: tests/installed/conftest.py prints them at the end of the session."""
    yield
    record_property("dist_figures", json.dumps(FIGURES))


def _timed(what: str, command: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = subprocess.run([str(c) for c in command], text=True, capture_output=True, **kwargs)
    FIGURES[what] = f"{time.monotonic() - started:.1f} s"
    assert done.returncode == 0, f"{what} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def user_env(venv: Path, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A user's environment: the fresh venv's bin first, and none of this repository's paths or the suite's settings."""
    mine = {str(Path(sys.executable).parent), str(Path(sys.executable).resolve().parent)}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in mine and not p.startswith(str(ROOT))]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "KINESIS_REPLAY", "PYTEST", "PYSPARK", "SPARK_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        {
            "PATH": os.pathsep.join([str(venv / "bin"), *path]),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "KINESIS_REPLAY_JVM_CACHE": str(home / "jvm"),
            **(extra or {}),
        }
    )
    return env


def json_out(stdout: str) -> Any:
    """The JSON an Airflow command printed, after whatever it logged to stdout first."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith(("[", "{")):
            return json.loads(line)
    raise AssertionError(f"no JSON in: {stdout[-2000:]}")


@pytest.fixture(scope="module")
def user(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The user's folder, outside this repository: the build, the venv, the Airflow homes. Not pytest's tmp_path, whose
    numbered folders another session's pytest on this machine removes after three newer ones. Kept when a test failed."""
    work = Path(tempfile.mkdtemp(prefix="kinesis-replay-user-"))
    yield work
    if request.session.testsfailed:
        sys.stderr.write(f"\nmake test-dist: the user's folder is kept for its logs: {work}\n")
    else:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def dist(user: Path) -> Path:
    """make dist's build: the sdist, and the wheel built from it."""
    out = user / "dist"
    _timed("build (sdist, then the wheel from it)", [UV, "build", "--out-dir", out, ROOT], cwd=ROOT)
    (wheel,) = out.glob(f"kinesis_replay-{__version__}-py3-none-any.whl")
    (sdist,) = out.glob(f"kinesis_replay-{__version__}.tar.gz")
    FIGURES["wheel"] = f"{wheel.stat().st_size / 1024:.0f} KiB"
    FIGURES["sdist"] = f"{sdist.stat().st_size / 1024:.0f} KiB"
    return wheel


@pytest.fixture(scope="module")
def installed(dist: Path, user: Path) -> Installed:
    """A fresh virtualenv holding the wheel with its spark extra, resolved against requirements.txt as constraints."""
    work = user
    venv = work / "venv"
    env = user_env(venv, work / "unused-home")
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter this venv was made from, not the venv
    _timed("uv venv", [UV, "venv", "--python", base, venv], cwd=work, env=env)
    python = venv / "bin" / "python"
    _timed(
        "install into the fresh venv (uv pip install, constraints requirements.txt)",
        [UV, "pip", "install", "--python", python, "--constraint", ROOT / "requirements.txt", f"{dist}[spark]"],
        cwd=work,
        env=env,
    )
    where = _timed("import check", [python, "-c", "import kinesis_replay, kinesis_replay_dags, sys; print(kinesis_replay.__file__)"],
                   cwd=work, env=env).stdout.strip()  # fmt: skip
    site_packages = Path(where).parents[1]
    assert site_packages.is_relative_to(venv) and not Path(where).is_relative_to(ROOT), where
    FIGURES["venv size"] = subprocess.run(["du", "-sh", str(venv)], text=True, capture_output=True).stdout.split()[0]
    return Installed(venv, python, site_packages, work)


@pytest.fixture
def home(installed: Installed, stack: Any, stream: str) -> Iterator[tuple[Path, dict[str, Any], dict[str, str]]]:
    """A fresh AIRFLOW_HOME: dags/ holds pipelines.yaml (one pipeline on this test's stream) and the user's DAG file."""
    home = installed.work / f"airflow-{uuid.uuid4().hex[:6]}"
    (home / "dags").mkdir(parents=True)
    (home / "plugins").mkdir()  # empty: the page must come from the package's entry point
    state_table = f"kr-{uuid.uuid4().hex[:8]}"
    DynamoDBStateStore(boto3.client("dynamodb"), state_table).ensure_table()
    entry = pipeline_entry(f"p{uuid.uuid4().hex[:8]}", stream, home / "lake" / "out", state_table)
    (home / "dags" / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [entry]}))
    (home / "dags" / "kinesis_replay_pipelines.py").write_text(DAG_FILE)
    env = user_env(installed.venv, home, stack.env())
    _timed("airflow db migrate", ["airflow", "db", "migrate"], cwd=installed.work, env=env)
    yield home, entry, env


@pytest.mark.timeout(2400)
def test_the_installed_package_lands_a_pipeline_through_airflow_and_serves_its_page(
    installed: Installed, home: tuple[Path, dict[str, Any], dict[str, str]]
) -> None:
    airflow_home, entry, env = home
    dag_id = f"kinesis_replay_{entry['name']}"
    produced = produce(kinesis_client(), entry["stream"], RECORDS)

    listed = _timed("airflow dags list --local", ["airflow", "dags", "list", "--local", "-o", "json"], cwd=installed.work, env=env)
    assert dag_id in {d["dag_id"] for d in json_out(listed.stdout)}, listed.stdout[-2000:]
    ran = _timed("airflow dags test (plan, replay, verify, commit)", ["airflow", "dags", "test", dag_id], cwd=installed.work, env=env)
    log = ran.stdout + ran.stderr
    (airflow_home / "dags-test.log").write_text(log)
    # The job and its library came from the installed package, not from this repository.
    job = installed.site_packages / "kinesis_replay" / "spark_jobs" / "replay_job.py"
    assert str(job) in log, f"the spark-submit command does not name {job}; log in {airflow_home / 'dags-test.log'}"
    assert f"{ROOT}/spark_jobs" not in log and f"{ROOT}/plugins" not in log

    runs = _timed("airflow dags list-runs", ["airflow", "dags", "list-runs", dag_id, "-o", "json"], cwd=installed.work, env=env)
    assert [r["state"] for r in json_out(runs.stdout)] == ["success"], runs.stdout
    store = DynamoDBStateStore(boto3.client("dynamodb"), entry["state_table"])
    assert [b.status.value for b in store.list_batches(entry["name"])] == ["COMMITTED"]
    landed = check_exactly_once(produced, read_output(entry["output"]))
    assert landed.ok, str(landed)

    _check_page(installed, airflow_home, entry, env)


def _check_page(installed: Installed, airflow_home: Path, entry: dict[str, Any], env: dict[str, str]) -> None:
    """The installed plugin's page, through Airflow's api-server: loaded from the entry point, answering for the pipeline."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_env = {**env, "AIRFLOW__API__BASE_URL": base, "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False"}
    log_path = airflow_home / "api-server.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            ["airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
            cwd=installed.work, env=server_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        started = time.monotonic()
        wait_for_http(f"{base}/api/v2/monitor/health", 180, "the installed Airflow's api-server", proc, log_path)
        FIGURES["api-server up"] = f"{time.monotonic() - started:.1f} s"
        password = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        status, body = request_json(f"{base}/auth/token", {"username": "admin", "password": password})
        assert status in (200, 201), body
        token = body["access_token"]
        status, plugins = request_json(f"{base}/api/v2/plugins", token=token)
        assert status == 200, plugins
        ours = [p for p in plugins["plugins"] if p["name"] == "kinesis_replay"]
        assert len(ours) == 1 and f"kinesis-replay=={__version__}" in ours[0]["source"], plugins  # the entry point, once
        status, views = request_json(f"{base}/kinesis-replay/api/pipelines", token=token)
        assert status == 200, views
        (view,) = [v for v in views if v["name"] == entry["name"]]
        assert [b["status"] for b in view["batches"]] == ["COMMITTED"], view
        request = urllib.request.Request(f"{base}/kinesis-replay/", headers={"Authorization": f"Bearer {token}", "Accept": "text/html"})
        with urllib.request.urlopen(request, timeout=60) as page:
            assert page.status == 200 and f'id="pipeline-{entry["name"]}"' in page.read().decode()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_dag_file_naming_a_missing_pipelines_file_fails_its_import_naming_the_path(installed: Installed) -> None:
    home = installed.work / "airflow-missing"
    (home / "dags").mkdir(parents=True)
    missing = home / "conf" / "pipelines.yaml"
    (home / "dags" / "kinesis_replay_pipelines.py").write_text(DAG_FILE.replace("build_dags()", f"build_dags({str(missing)!r})"))
    script = (
        "from airflow.dag_processing.dagbag import DagBag; import json, sys; "
        "bag = DagBag(dag_folder=sys.argv[1]); print(json.dumps(bag.import_errors))"
    )
    done = _timed("DagBag of a DAG file naming a missing file", [installed.python, "-c", script, home / "dags"],
                  cwd=installed.work, env=user_env(installed.venv, home))  # fmt: skip
    (error,) = json_out(done.stdout).values()
    assert f"the kinesis-replay pipelines config {missing} does not exist: it is the path given to build_dags" in error


LAUNCHERS = """
import json, sys, tempfile, zipfile
from pathlib import Path
import kinesis_replay_tasks as tasks
from kinesis_replay.launchers import emr_serverless, spark_submit
work = Path(tempfile.mkdtemp())
library = spark_submit.package_library(work / "kinesis_replay.zip")
spec = work / "batch.json"
spec.write_text("{}")
staged = emr_serverless.uploads("s3://code/prefix", "p", 7, tasks.SPARK_JOBS, library, spec)
print(json.dumps({
    "jobs": str(tasks.SPARK_JOBS),
    "missing": [str(u.local) for u in staged if not u.local.is_file()],
    "keys": [u.key for u in staged],
    "zip": zipfile.ZipFile(library).namelist(),
}))
"""


def test_the_installed_launchers_find_the_job_and_zip_the_installed_library(installed: Installed) -> None:
    """What spark-submit and EMR Serverless's stage task ship, from the installed package: the job from
    kinesis_replay/spark_jobs/, the library's zip of every installed module but the job."""
    done = _timed("the launchers' files", [installed.python, "-c", LAUNCHERS], cwd=installed.work,
                  env=user_env(installed.venv, installed.work / "no-home"))  # fmt: skip
    found = json_out(done.stdout)
    assert found["jobs"] == str(installed.site_packages / "kinesis_replay" / "spark_jobs") and found["missing"] == []
    assert [k.rsplit("/", 1)[1] for k in found["keys"]] == ["replay_job.py", "kinesis_source.py", "kinesis_replay.zip", "batch.json"]
    shipped = {n for n in found["zip"] if n.endswith(".py")}
    expected = {
        p.relative_to(installed.site_packages).as_posix()
        for p in (installed.site_packages / "kinesis_replay").rglob("*.py")
        if "spark_jobs" not in p.parts
    }
    assert shipped == expected and "kinesis_replay/launchers/spark_submit.py" in shipped
