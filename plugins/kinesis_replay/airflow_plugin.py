"""The Airflow plugin: a kinesis-replay page under Browse showing every pipeline's shards, lag and last batches."""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations at run time, and
# Request and the credentials type are imported inside create_app(), out of reach of string annotations.
import html
import os
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/kinesis-replay"


def _pipeline_views() -> list[dict[str, Any]]:
    """Each configured pipeline's view, read through the pipeline's own connection (the hook owns the client)."""
    from airflow.configuration import conf
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from kinesis_replay.config import load_config, resolve_config_path
    from kinesis_replay.dynamodb_store import DynamoDBStateStore
    from kinesis_replay.errors import KinesisReplayError
    from kinesis_replay.status import pipeline_view

    config = resolve_config_path(Path(conf.get("core", "dags_folder")) / "pipelines.yaml")
    views = []
    now = datetime.now(UTC)
    for p in load_config(config):
        try:
            client = AwsBaseHook(aws_conn_id=p.aws_conn_id, client_type="dynamodb").conn
            views.append(pipeline_view(p, DynamoDBStateStore(client, p.state_table), now).to_dict())
        except KinesisReplayError as exc:  # a pipeline that has never run has no state table yet
            views.append({"name": p.name, "stream": p.stream, "error": str(exc), "shards": [], "batches": []})
    return views


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{int(seconds % 60):02d}s"


def _render(views: list[dict[str, Any]], base: str) -> str:
    e = html.escape
    parts = []
    for v in views:
        parts.append(
            f'<section class="pipeline" id="pipeline-{e(v["name"])}"><h2>{e(v["name"])} <small>stream {e(v["stream"])}</small></h2>'
        )
        if v.get("error"):
            parts.append(f'<p class="error">{e(v["error"])}</p></section>')
            continue
        flight = f"batch {v['in_flight']} in flight" if v["in_flight"] is not None else "no batch in flight"
        parts.append(
            f'<p>{e(flight)} · <a href="{e(base)}/dags/{e(v["dag_id"])}" target="_top">pipeline DAG</a> · '
            f'<a class="backfill" href="{e(base)}/dags/{e(v["backfill_dag_id"])}" target="_top">trigger a backfill</a></p>'
        )
        parts.append(
            "<table class=shards><tr><th>shard</th><th>checkpoint</th><th>lag (ms behind)</th><th>checkpoint age</th><th>state</th></tr>"
        )
        for s in v["shards"]:
            lag = "-" if s["millis_behind_latest"] is None else f"{s['millis_behind_latest']:,}"
            parts.append(
                f"<tr><td>{e(s['shard_id'])}</td><td class=seq>{e(s['checkpoint'] or '-')}</td><td>{lag}</td>"
                f"<td>{_age(s['checkpoint_age_seconds'])}</td><td>{'finished' if s['finished'] else 'open'}</td></tr>"
            )
        parts.append("</table><table class=batches><tr><th>batch</th><th>status</th><th>shards</th><th>records</th>"
                     "<th>bad</th><th>bytes</th><th>seconds</th><th>planned</th><th>gaps</th></tr>")  # fmt: skip
        for b in v["batches"]:
            cells = [b["batch_id"], b["status"], b["shards"], b["records"], b["bad_records"], b["bytes"],
                     None if b["seconds"] is None else f"{b['seconds']:.1f}", b["created_at"], b["gaps"]]  # fmt: skip
            row = "".join(f"<td>{e('-' if c is None else str(c))}</td>" for c in cells)
            title = f' title="{e(b["error"])}"' if b["error"] else ""
            parts.append(f'<tr class="status-{e(b["status"].lower())}"{title}>{row}</tr>')
        parts.append("</table></section>")
    body = "".join(parts) or "<p>No pipelines are configured.</p>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kinesis-replay</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}}table{{border-collapse:collapse;margin:.5rem 0 1.5rem}}
td,th{{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;font-size:.9rem}}td.seq{{font-family:monospace;font-size:.75rem}}
small{{color:#777;font-weight:normal}}.status-failed td{{background:#fde8e8}}.status-committed td:nth-child(2){{color:#13795b}}
.error{{color:#b00020}}</style></head><body><h1>kinesis-replay</h1>{body}</body></html>"""


def create_app() -> Any:
    """The page's FastAPI app: every route needs a logged-in Airflow user (Airflow does not check plugin apps)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user
    from fastapi import Depends, FastAPI, HTTPException, Request, status
    from fastapi.responses import HTMLResponse, JSONResponse
    from fastapi.security import HTTPAuthorizationCredentials

    async def airflow_user(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(bearer_scheme)) -> BaseUser:
        try:
            return await get_user(request, None, bearer)
        except HTTPException as exc:
            accept = request.headers.get("accept", "")
            if "text/html" in accept and "application/json" not in accept:
                login = get_auth_manager().get_url_login(next_url=str(request.url))
                raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": login}) from exc
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail=exc.detail, headers={"WWW-Authenticate": "Bearer"}) from exc

    app = FastAPI(title="kinesis-replay", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/api/pipelines")
    def pipelines(user: BaseUser = Depends(airflow_user)) -> JSONResponse:
        return JSONResponse(_pipeline_views())

    @app.get("/", response_class=HTMLResponse)
    def page(user: BaseUser = Depends(airflow_user)) -> HTMLResponse:
        base = os.environ.get("AIRFLOW__API__BASE_URL", "").rstrip("/")
        return HTMLResponse(_render(_pipeline_views(), base))

    return app


class KinesisReplayPlugin(AirflowPlugin):
    name = "kinesis_replay"
    external_views = [
        {"name": "Kinesis replay", "href": "kinesis-replay/", "destination": "nav", "category": "browse", "url_route": "kinesis-replay"}
    ]

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        # Built on demand: only the api-server asks for it, and nothing heavy happens when plugins are imported.
        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "kinesis-replay"}]
