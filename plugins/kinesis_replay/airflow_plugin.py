"""The Airflow plugin: a kinesis-replay page under Browse showing the shards, lag and last batches of each pipeline the user may read."""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations at run time, and
# Request and the credentials type are imported inside create_app(), out of reach of string annotations.
import html
import logging
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from airflow.plugins_manager import AirflowPlugin

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

    from kinesis_replay.core.config import PipelineError

URL_PREFIX = "/kinesis-replay"
log = logging.getLogger(__name__)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_P = TypeVar("_P", bound=_Named)


def _readable_by(user: "BaseUser", pipelines: Iterable[_P]) -> list[_P]:
    """The pipelines all of whose DAGs Airflow's auth manager lets the user read (GET), asked in one batch."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dag import DagModel

    from kinesis_replay.core.airflow_names import dag_ids as _dag_ids

    pipelines = list(pipelines)
    wanted = {dag_id for p in pipelines for dag_id in _dag_ids(p.name)}
    # Asked with each DAG's team, as Airflow's own routes do: in multi-team mode a team's DAGs need the team.
    # A DAG not yet parsed has no team, and the auth manager still answers for its id.
    team_of = DagModel.get_dag_id_to_team_name_mapping(sorted(wanted)) if wanted else {}
    by_team: dict[str | None, set[str]] = {}
    for dag_id in wanted:
        by_team.setdefault(team_of.get(dag_id), set()).add(dag_id)
    auth_manager = get_auth_manager()
    readable: set[str] = set()
    for team, dag_ids in by_team.items():
        readable |= auth_manager.filter_authorized_dag_ids(dag_ids=dag_ids, user=user, method="GET", team_name=team)
    return [p for p in pipelines if readable.issuperset(_dag_ids(p.name))]


def _pipeline_views(user: "BaseUser") -> list[dict[str, Any]]:
    """The view of each configured pipeline the user may read, read through the pipeline's own connection (the hook owns the client)."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
    from kinesis_replay.airflow_config import load_pipelines, pipelines_path
    from kinesis_replay.core.airflow_names import missing_pool_message
    from kinesis_replay.core.errors import KinesisReplayError
    from kinesis_replay.ui.status import pipeline_view

    config = pipelines_path()  # $KINESIS_REPLAY_CONFIG, else <dags_folder>/pipelines.yaml: where the DAG factory looks by default
    views: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    loaded = load_pipelines(config)
    # An invalid pipeline shows its own error (it has no DAGs; the DAG processor reports it too); the others their state.
    invalid = [_Invalid(e) for e in loaded.errors]
    for bad in _readable_by(user, invalid):
        views.append({"name": bad.name, "stream": "-", "error": f"invalid config: {bad.error.message}", "shards": [], "batches": []})
    pools = _existing_pools()
    for p in _readable_by(user, loaded.pipelines):
        try:
            client = AwsBaseHook(aws_conn_id=p.aws_conn_id, client_type="dynamodb").conn
            view = pipeline_view(p, DynamoDBStateStore(client, p.state_table), now).to_dict()
        except KinesisReplayError as exc:  # a pipeline that has never run has no state table yet
            view = {"name": p.name, "stream": p.stream, "error": str(exc), "shards": [], "batches": []}
        except Exception as exc:  # its connection's own fault (no credentials, ...): it must not hide the other pipelines
            log.exception("kinesis-replay page: pipeline %s", p.name)
            view = {"name": p.name, "stream": p.stream, "error": f"{type(exc).__name__}: {exc}", "shards": [], "batches": []}
        view["pool"] = p.pool
        view["pool_error"] = (
            None if p.pool in pools else missing_pool_message([q.name for q in loaded.pipelines if q.pool == p.pool], p.pool)
        )
        views.append(view)
    return views


def _existing_pools() -> set[str]:
    """The names of Airflow's pools. Only Airflow's own processes can see them: a task (Task SDK) cannot, so a replay
    whose pool is missing just stays scheduled, and this page is where its pipeline learns why."""
    from airflow.models.pool import Pool

    return {pool.pool for pool in Pool.get_pools() if pool.pool}


class _Invalid:
    """An invalid pipeline entry, named for the permission check (by its index when it has no name)."""

    def __init__(self, error: "PipelineError") -> None:
        self.error = error
        self.name = error.name or f"#{error.index}"


def _age(seconds: float | None) -> str:
    from kinesis_replay.core.formats import duration

    return "-" if seconds is None else duration(seconds)


SHARD_ROWS = 20  # shards shown at once; the rest (a wide stream has a thousand) behind a "more shards" toggle


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # unreachable; typed so


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _seconds(n: float) -> str:
    from kinesis_replay.core.formats import duration

    return duration(n)


def _charts(v: dict[str, Any]) -> str:
    """Lag behind the tip at each plan, and each batch's records, bytes and duration: inline SVG (kinesis_replay.ui.charts)."""
    from kinesis_replay.ui.charts import Mark, bars, line

    history = v.get("history") or []
    lag = [
        Mark(h["batch_id"], h["behind_seconds"], f"batch {h['batch_id']} planned {h['created_at']}: {_seconds(h['behind_seconds'])} behind",
             datetime.fromisoformat(h["created_at"]))
        for h in history if h["behind_seconds"] is not None
    ]  # fmt: skip
    done = [h for h in history if h["records"] is not None]
    figures = [
        ("records", "Records per batch", _count, " records"),
        ("bytes", "Bytes per batch", _size, ""),
        ("seconds", "Duration per batch, plan to commit", _seconds, ""),
    ]
    panels = [line("lag", "Behind the tip at each plan (age of the oldest record waiting)", lag, _seconds)]
    for key, label, fmt, unit in figures:
        marks = [
            Mark(h["batch_id"], h[key], f"batch {h['batch_id']}: {fmt(h[key])}{unit}{_decoded(h) if key == 'records' else ''}")
            for h in done if h[key] is not None
        ]  # fmt: skip
        panels.append(bars(key, label, marks, fmt))
    return f'<div class="charts">{"".join(panels)}</div>'


def _decoded(h: dict[str, Any]) -> str:
    """What a day's batch says of its decoding on hover, after its records: quarantined, decoded as, re-decoded, staged."""
    from kinesis_replay.ui.status import NOT_RECORDED

    said = [f"{_count(h['bad_records'])} quarantined"] if h.get("bad_records") else []
    if h.get("decoding"):
        said.append("decoding not recorded" if h["decoding"] == NOT_RECORDED else f"decoded as {h['decoding']}")
    if h.get("redecoded"):
        said.append("re-decoded")
    if h.get("staged_by"):
        said.append(f"re-decode waiting for commit (run {h['staged_by']})")
    return "".join(f", {s}" for s in said)


def _decoding_cell(b: dict[str, Any]) -> str:
    """A batch's decoding: its fingerprint (said in full on hover), a mark when a re-decode made its rows, and a re-decode
    of it waiting for its selection's one commit, with the run."""
    from kinesis_replay.ui.status import NOT_RECORDED

    e = html.escape
    decoding, text = b.get("decoding"), b.get("decoding_text")
    shown = "-" if decoding is None else e(decoding) if decoding == NOT_RECORDED else f"<code>{e(decoding)}</code>"
    attrs = (f' data-decoding="{e(decoding)}"' if decoding else "") + (f' title="{e(text)}"' if text else "")
    marks = []
    if b.get("redecoded_by"):
        marks.append(f'<span class="redecoded" title="re-decoded by backfill run {e(b["redecoded_by"])}">re-decoded</span>')
    if b.get("staged_by"):
        hover = f' title="{e(b["staged_decoding_text"])}"' if b.get("staged_decoding_text") else ""
        marks.append(f'<span class="staged"{hover}>re-decode waiting for commit (run {e(b["staged_by"])})</span>')
    return f'<td class="decoding"{attrs}>{shown}{"".join(marks)}</td>'


def _progress(v: dict[str, Any]) -> str:
    """The in-flight batch's replay, and a running backfill's, per shard: records read so far against the estimate."""
    return "".join(_progress_table(p) for p in (v.get("progress"), v.get("backfill_progress")) if p)


def _progress_table(p: dict[str, Any]) -> str:
    e = html.escape
    backfill = p.get("kind") == "backfill"
    when = f"reported {p['updated_at']}" if p["updated_at"] else "no progress reported yet"
    of = "of" if backfill else "of about"  # a backfill's batch is committed: its manifest has the exact counts
    total = f"{p['read']:,} {of} {p['estimate']:,} records" if p["estimate"] else f"{p['read']:,} records"
    rows = []
    for s in sorted(p["shards"], key=lambda s: (s["done"], s["read"] / s["estimate"] if s["estimate"] else 0.0))[:SHARD_ROWS]:
        bar = f'<progress value="{min(s["read"], s["estimate"])}" max="{s["estimate"]}"></progress>' if s["estimate"] else ""
        estimate = "-" if s["estimate"] is None else f"{s['estimate']:,}"
        rows.append(f'<tr data-shard="{e(s["shard_id"])}" data-read="{s["read"]}"><td>{e(s["shard_id"])}</td><td>{s["read"]:,}</td>'
                    f"<td>{estimate}</td><td>{bar}</td><td>{'done' if s['done'] else 'reading'}</td></tr>")  # fmt: skip
    more = f"<p>{len(p['shards']) - SHARD_ROWS:,} more shards, furthest along last, not shown</p>" if len(p["shards"]) > SHARD_ROWS else ""
    if backfill:
        title, css, column = f"Backfill replaying batch {p['batch_id']}: {total}, {when}", "progress backfill", "committed"
    else:
        title, css, column = f"Batch {p['batch_id']} replaying ({p['status']}): {total}, {when}", "progress", "plan's estimate"
    return (
        f'<div class="{css}" data-batch="{p["batch_id"]}"><h3>{e(title)}</h3>'
        f"<table><tr><th>shard</th><th>read</th><th>{column}</th><th></th><th></th></tr>"
        f"{''.join(rows)}</table>{more}</div>"
    )


def _failures(v: dict[str, Any]) -> str:
    e = html.escape
    failures = v.get("failures") or []
    if not failures:
        return '<p class="failures none">No failure in the last day.</p>'
    rows = "".join(
        f'<tr data-batch="{f["batch_id"]}"><td>{f["batch_id"]}</td><td>{e(f["created_at"])}</td><td>{f["failures"]}</td>'
        f'<td>{e(f["status"])}</td><td class="cause">{e(f["error"])}</td></tr>'
        for f in failures
    )
    return ('<table class="failures"><caption>Last failures</caption><tr><th>batch</th><th>planned</th><th>failed attempts</th>'
            f"<th>status now</th><th>cause (the last)</th></tr>{rows}</table>")  # fmt: skip


def _shard_rows(shards: list[dict[str, Any]]) -> tuple[str, str]:
    """The shards most likely stuck first (open, oldest checkpoint, never committed before that), as table rows:
    the first SHARD_ROWS, then the rest."""
    e = html.escape

    def stuck_first(s: dict[str, Any]) -> tuple[bool, float]:
        age = s["checkpoint_age_seconds"]
        return s["finished"], -(float("inf") if age is None else age)

    rows = []
    for s in sorted(shards, key=stuck_first):
        lag = "-" if s["millis_behind_latest"] is None else f"{s['millis_behind_latest']:,}"
        rows.append(
            f'<tr data-shard="{e(s["shard_id"])}"><td>{e(s["shard_id"])}</td><td class=seq>{e(s["checkpoint"] or "-")}</td><td>{lag}</td>'
            f"<td>{_age(s['checkpoint_age_seconds'])}</td><td>{'finished' if s['finished'] else 'open'}</td></tr>"
        )
    return "".join(rows[:SHARD_ROWS]), "".join(rows[SHARD_ROWS:])


def _render(views: list[dict[str, Any]], base: str) -> str:
    e = html.escape
    parts = []
    for v in views:
        parts.append(
            f'<section class="pipeline" id="pipeline-{e(v["name"])}"><h2>{e(v["name"])} <small>stream {e(v["stream"])}</small></h2>'
        )
        if v.get("pool_error"):
            parts.append(f'<p class="error pool-error">{e(v["pool_error"])}</p>')
        if v.get("error"):
            parts.append(f'<p class="error">{e(v["error"])}</p></section>')
            continue
        flight = f"batch {v['in_flight']} in flight" if v["in_flight"] is not None else "no batch in flight"
        parts.append(
            f'<p>{e(flight)} · <a href="{e(base)}/dags/{e(v["dag_id"])}" target="_top">pipeline DAG</a> · '
            f'<a class="backfill" href="{e(base)}/dags/{e(v["backfill_dag_id"])}" target="_top">trigger a backfill</a></p>'
        )
        where = f"Output: {v['table']} at {v['output']}" if v.get("table") else f"Output: directory {v['output']}"
        parts.append(f'<p class="table">{e(where)}</p>')
        if v.get("consumer"):
            reads = (
                f"Reads over enhanced fan-out: consumer {v['consumer']} (registered by the pipeline if it was not there, tagged "
                "kinesis-replay:pipeline, never deregistered by it; it costs a shard-hour for each shard while registered)"
            )
            parts.append(f'<p class="consumer">{e(reads)}</p>')
        if v.get("behind_text"):
            parts.append(f'<p class="behind">{"Catching up" if v["behind"]["capped_shards"] else "Keeping up"}: {e(v["behind_text"])}</p>')
        parts.append(_progress(v))
        parts.append(_charts(v))
        parts.append(_failures(v))
        head = "<tr><th>shard</th><th>checkpoint</th><th>lag (ms behind)</th><th>checkpoint age</th><th>state</th></tr>"
        shown, rest = _shard_rows(v["shards"])
        parts.append(f"<table class=shards>{head}{shown}</table>")
        if rest:
            more = len(v["shards"]) - SHARD_ROWS
            parts.append(
                f'<details class="more-shards"><summary>{more:,} more shards</summary><table class=shards>{head}{rest}</table></details>'
            )
        parts.append("<table class=batches><tr><th>batch</th><th>status</th><th>shards</th><th>records</th>"
                     "<th>quarantined</th><th>bytes</th><th>seconds</th><th>planned</th><th>gaps</th><th>snapshot</th>"
                     "<th>decoding</th></tr>")  # fmt: skip
        for b in v["batches"]:
            cells = [b["batch_id"], b["status"], b["shards"], b["records"], b["bad_records"], b["bytes"],
                     None if b["seconds"] is None else f"{b['seconds']:.1f}", b["created_at"], b["gaps"], b.get("snapshot_id")]  # fmt: skip
            row = "".join(f"<td>{e('-' if c is None else str(c))}</td>" for c in cells) + _decoding_cell(b)
            title = f' title="{e(b["error"])}"' if b["error"] else ""
            parts.append(f'<tr class="status-{e(b["status"].lower())}" data-batch="{b["batch_id"]}"{title}>{row}</tr>')
        parts.append("</table></section>")
    body = "".join(parts) or '<p class="empty">No pipeline to show: none is configured, or you may read none of their DAGs.</p>'
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kinesis-replay</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}}table{{border-collapse:collapse;margin:.5rem 0 1.5rem}}
td,th{{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;font-size:.9rem}}td.seq{{font-family:monospace;font-size:.75rem}}
small{{color:#777;font-weight:normal}}.status-failed td{{background:#fde8e8}}.status-committed td:nth-child(2){{color:#13795b}}
.error{{color:#b00020}}caption{{text-align:left;font-weight:600;padding:.25rem 0}}td.cause{{max-width:48rem;font-size:.8rem}}
.charts{{display:grid;grid-template-columns:repeat(auto-fit,minmax(24rem,1fr));gap:.5rem 1.5rem;margin:.5rem 0 1rem}}
figure.chart{{margin:0}}figcaption{{font-size:.85rem;font-weight:600;margin-bottom:.2rem}}svg{{width:100%;height:auto}}
svg .axis{{stroke:#999;stroke-width:1}}svg .tick{{font-size:11px;fill:#666}}svg rect.mark{{fill:#3b73b9}}
svg .series{{stroke:#3b73b9;stroke-width:1.5}}svg circle.mark{{fill:#3b73b9}}svg .mark:hover{{fill:#e07b00}}
progress{{width:10rem}}td.decoding code{{font-size:.8rem}}
.redecoded,.staged{{margin-left:.4rem;padding:0 .3rem;border-radius:.2rem;font-size:.75rem}}.redecoded{{background:#e3eefb}}
.staged{{background:#fff1cc}}</style></head><body><h1>kinesis-replay</h1>{body}</body></html>"""


def create_app() -> Any:
    """The page's FastAPI app: every route needs a logged-in Airflow user (Airflow does not check plugin apps), and shows
    only the pipelines whose DAGs Airflow's auth manager lets that user read."""
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
        return JSONResponse(_pipeline_views(user))

    @app.get("/", response_class=HTMLResponse)
    def page(user: BaseUser = Depends(airflow_user)) -> HTMLResponse:
        base = os.environ.get("AIRFLOW__API__BASE_URL", "").rstrip("/")
        return HTMLResponse(_render(_pipeline_views(user), base))

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
