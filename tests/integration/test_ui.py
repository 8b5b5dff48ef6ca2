"""The kinesis-replay page in Airflow's UI, in a real headless Chromium: it needs the Airflow login, shows the state, and
shows a user only the pipelines whose DAGs Airflow lets them read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack.harness import ROOT, SUCCESS, load_dags, run_dag
from stack.local_stack import free_port, wait_for_http
from stack.producer import produce

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]  # fmt: skip


NO_DAGS = "nodags"  # a viewer who may read no DAG: see tests/stack/auth_manager.py
BROKEN_CONN = "kr_broken_endpoint"


@pytest.fixture(scope="module")
def served_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pipelines config the api-server reads on each request: each test writes its own pipeline into it."""
    return tmp_path_factory.mktemp("ui") / "pipelines.yaml"


@pytest.fixture
def pipeline(kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], served_config: Path, airflow_db: Path) -> dict[str, Any]:
    """A pipeline that has committed a batch, and is the one the api-server's config names."""
    produce(kinesis, entry["stream"], 150)
    assert run_dag(load_dags(served_config, entry)[f"kinesis_replay_{entry['name']}"]).tasks == SUCCESS
    return entry


@pytest.fixture(scope="module")
def api_server(stack: object, airflow_db: Path, served_config: Path) -> Iterator[str]:
    """Airflow's api-server, with the plugin, on a free port of 127.0.0.1, one for the module; stopped afterwards.

    Its users: ``admin``, and a viewer who may read no DAG (tests/stack/auth_manager.py; every role of Airflow's
    SimpleAuthManager may read every DAG).
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KINESIS_REPLAY_CONFIG": str(served_config),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__CORE__AUTH_MANAGER": "stack.auth_manager.NoDagAccessAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"admin:admin,{NO_DAGS}:viewer",
        "KINESIS_REPLAY_TEST_NO_DAG_USERS": NO_DAGS,
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        # A connection whose client cannot even be made (boto3 refuses the endpoint): see the invalid-pipeline test.
        f"AIRFLOW_CONN_{BROKEN_CONN.upper()}": json.dumps({"conn_type": "aws", "extra": {"endpoint_url": "not a url"}}),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
    }
    log_path = served_config.parent / "api-server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        ["airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_http(f"{base}/api/v2/monitor/health", 120, "Airflow's api-server", proc, log_path)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def request(url: str, headers: dict[str, str] | None = None, data: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={**(headers or {}), **({"Content-Type": "application/json"} if body else {})})
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def login(base: str, airflow_db: Path, username: str = "admin") -> str:
    password = json.loads((airflow_db / "simple_auth_manager_passwords.json.generated").read_text())[username]
    status, _, body = request(f"{base}/auth/token", data={"username": username, "password": password})
    assert status in (200, 201), f"{username} could not log in: {body!r}"
    return str(json.loads(body)["access_token"])


def test_the_page_refuses_anonymous_requests(api_server: str) -> None:
    status, _, body = request(f"{api_server}/kinesis-replay/api/pipelines", {"Accept": "application/json"})
    assert status == 401 and b"Not authenticated" in body
    status, headers, _ = request(f"{api_server}/kinesis-replay/", {"Accept": "text/html"})
    assert status == 303 and "/auth/login" in headers["location"]  # the login page, which comes back here


def test_a_user_who_may_read_no_dag_sees_no_pipeline(api_server: str, entry: dict[str, Any], served_config: Path, airflow_db: Path) -> None:
    served_config.write_text(yaml.safe_dump({"pipelines": [entry]}))  # configured; it needs no run to be listed
    admin = {"Authorization": f"Bearer {login(api_server, airflow_db)}"}
    status, _, body = request(f"{api_server}/kinesis-replay/api/pipelines", admin)
    assert status == 200 and [v["name"] for v in json.loads(body)] == [entry["name"]]

    no_dags = {"Authorization": f"Bearer {login(api_server, airflow_db, NO_DAGS)}"}
    status, _, body = request(f"{api_server}/kinesis-replay/api/pipelines", no_dags)
    assert (status, json.loads(body)) == (200, [])
    status, _, body = request(f"{api_server}/kinesis-replay/", {**no_dags, "Accept": "text/html"})
    page = body.decode()
    assert status == 200 and 'class="pipeline"' not in page and entry["name"] not in page
    assert "you may read none of their DAGs" in page


def test_an_invalid_pipeline_shows_its_own_error_and_the_others_their_state(
    api_server: str, entry: dict[str, Any], served_config: Path, airflow_db: Path
) -> None:
    broken = {**entry, "name": entry["name"] + "x", "output": entry["output"] + "x", "initial_position": "OLDEST"}
    # Valid to the config's own checks; only Airflow refuses the schedule, so the pipeline has no DAGs.
    bad_cron = {**entry, "name": entry["name"] + "c", "output": entry["output"] + "c", "schedule": "*/99 * * foo *"}
    # Valid, but its connection fails with an error of boto3's own, not of kinesis-replay's.
    bad_conn = {**entry, "name": entry["name"] + "e", "output": entry["output"] + "e", "aws_conn_id": BROKEN_CONN}
    served_config.write_text(yaml.safe_dump({"pipelines": [entry, broken, bad_cron, bad_conn]}))
    admin = {"Authorization": f"Bearer {login(api_server, airflow_db)}"}
    status, _, body = request(f"{api_server}/kinesis-replay/api/pipelines", admin)
    assert status == 200, body  # once, one bad entry answered a bare 500 for every pipeline
    views = {v["name"]: v for v in json.loads(body)}
    assert set(views) == {entry["name"], broken["name"], bad_cron["name"], bad_conn["name"]}
    assert "not a url" in views[bad_conn["name"]]["error"]  # once, a bare 500 for every pipeline
    assert f"pipelines[1] ({broken['name']}).initial_position: must be one of" in views[broken["name"]]["error"]
    # Once, the page loaded the config without Airflow's checks and showed this pipeline as if it ran.
    assert f"pipeline {bad_cron['name']}: schedule: '*/99 * * foo *' is not a valid schedule" in views[bad_cron["name"]]["error"]
    assert views[entry["name"]]["output"] == entry["output"]  # the valid one shows its state (no run yet: nothing in it)
    status, _, body = request(f"{api_server}/kinesis-replay/", {**admin, "Accept": "text/html"})
    assert status == 200 and "invalid config" in body.decode()


def test_the_page_shows_shards_checkpoints_lag_and_batches_in_a_browser(
    api_server: str, pipeline: dict[str, Any], store: DynamoDBStateStore, airflow_db: Path
) -> None:
    from playwright.sync_api import sync_playwright

    token = login(api_server, airflow_db)
    status, _, body = request(f"{api_server}/kinesis-replay/api/pipelines", {"Authorization": f"Bearer {token}"})
    assert status == 200
    (view,) = json.loads(body)
    shards = store.get_shards(pipeline["name"])
    assert {s["shard_id"]: s["checkpoint"] for s in view["shards"]} == {sid: str(s.checkpoint) for sid, s in shards.items()}
    assert all(s["millis_behind_latest"] is not None and s["checkpoint_age_seconds"] is not None for s in view["shards"])

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(airflow_db / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            browser.add_cookies([{"name": "_token", "value": token, "url": api_server}])
            page = browser.new_page()
            page.goto(f"{api_server}/kinesis-replay/")
            section = page.locator(f"#pipeline-{pipeline['name']}")
            text = section.inner_text()
            assert f"stream {pipeline['stream']}" in text and "no batch in flight" in text
            for sid, shard in shards.items():
                assert sid in text and str(shard.checkpoint) in text
            batch = store.get_batch(pipeline["name"], 1)
            assert section.locator("tr.status-committed").count() == 1 and f"{batch.result.records}" in text  # type: ignore[union-attr]
            assert batch.snapshot_id is not None and str(batch.snapshot_id) in text  # the batch's table snapshot
            assert f"table kinesis_replay.{pipeline['name']} in catalog kinesis_replay (sql, embedded)" in text
            assert section.locator("a.backfill").get_attribute("href") == f"{api_server}/dags/kinesis_replay_backfill_{pipeline['name']}"
            # The charts, drawn by the server as SVG, carry the ledger's figures: one mark per batch.
            records = section.locator("figure.chart-records .mark")
            assert [(m.get_attribute("data-batch"), m.get_attribute("data-value")) for m in records.all()] == [
                ("1", str(batch.result.records))  # type: ignore[union-attr]
            ]
            assert section.locator("figure.chart-lag circle.mark").count() == 1 and section.locator("figure.chart-records svg").is_visible()
            page.screenshot(path=str(ARTIFACTS / "kinesis-replay-page.png"), full_page=True)

            page.goto(f"{api_server}/plugin/kinesis-replay")  # the same page, inside Airflow's own UI (Browse menu)
            framed = page.frame_locator("iframe").locator(f"#pipeline-{pipeline['name']}")
            framed.wait_for(timeout=60_000)
            assert pipeline["stream"] in framed.inner_text()
            page.screenshot(path=str(ARTIFACTS / "kinesis-replay-in-airflow.png"), full_page=True)
        finally:
            browser.close()
