"""The status page's new parts, rendered on their own: charts with the right numbers, the replay's progress, the failures,
and each batch's quarantined records and decoding."""

from __future__ import annotations

import html
import json
import logging
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_ledger_reads import EVERY, CountingStore, ledger_batch
from test_ledger_reads import T0 as LEDGER_T0
from test_ledger_reads import pipeline as ledger_pipeline

from fakes.memory_store import MemoryStateStore
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import ProgressNotStoredError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch, BatchStatus, Head, Progress, ReplayResult, RunKind, ShardResult
from kinesis_replay.ui import status
from kinesis_replay.ui.charts import Mark, bars, line
from kinesis_replay.ui.status import ReplayProgress

T0 = datetime(2026, 11, 1, tzinfo=UTC)
S = 10**50
DECODED = Decoding.of("json", "n INT")
REDECODED = Decoding.of("json", "n BIGINT")
RAW = Decoding.of("raw", None)


def values(svg: str) -> list[tuple[int, str]]:
    return [(int(b), v) for b, v in re.findall(r'class="mark" data-batch="(\d+)" data-value="([^"]+)"', svg)]


def test_bars_carry_each_batch_figure_and_scale_from_zero() -> None:
    svg = bars("records", "Records", [Mark(1, 100, "batch 1: 100"), Mark(2, 50, "batch 2: 50")], str)
    assert values(svg) == [(1, "100"), (2, "50")]
    heights = [float(h) for h in re.findall(r'height="([\d.]+)"><title>', svg)]
    assert heights[0] == 2 * heights[1]  # 100 is twice 50
    assert "<title>batch 2: 50</title>" in svg and ">batch 1<" in svg and ">batch 2<" in svg


def test_a_line_over_time_places_each_plan_at_its_time() -> None:
    marks = [Mark(i, v, f"batch {i}", T0 + timedelta(minutes=m)) for i, v, m in [(1, 30.5, 0), (2, 0, 1), (3, 61, 4)]]
    svg = line("lag", "Behind", marks, lambda s: f"{s:.0f}s")
    assert values(svg) == [(1, "30.500"), (2, "0"), (3, "61")]
    xs = [float(x) for x in re.findall(r'cx="([\d.]+)"', svg)]
    assert (xs[1] - xs[0]) * 3 == xs[2] - xs[1]  # one minute, then three
    assert "2026-11-01 00:00" in svg and "2026-11-01 00:04" in svg


def test_charts_with_nothing_to_draw_say_so() -> None:
    assert "no batch yet" in bars("records", "Records", [], str) and "no measurement yet" in line("lag", "Behind", [], str)


def test_the_replay_progress_follows_the_jobs_lines_and_writes_at_most_every_interval() -> None:
    published: list[Progress] = []
    now = [0.0]
    progress = ReplayProgress("p", 4, published.append, every_seconds=10, clock=lambda: now[0])
    progress.line("WARN kinesis_source: shardId-000000000001 [100 .. 900]: 300 records read, at 400 (arrived ...)")
    assert published == []  # within the interval: kept for the next write
    now[0] = 11
    progress.line("shardId-000000000002 [5 .. SHARD_END (<= 90)]: 20 records read, at 25")
    progress.line("Spark's own line, ignored")
    progress.line("shardId-000000000001 [100 .. 900]: done, 801 records, 12.0 KiB in 2.0s")
    first = {"shardId-000000000001": 300, "shardId-000000000002": 20}
    assert [(p.batch_id, dict(p.records), p.done) for p in published] == [(4, first, frozenset())]
    assert progress.close() == 0
    assert (published[-1].records, published[-1].done) == (
        {"shardId-000000000001": 801, "shardId-000000000002": 20},
        frozenset({"shardId-000000000001"}),
    )
    progress.flush()
    assert len(published) == 2  # nothing new: no write


def test_the_replay_progress_covers_every_shard_of_the_batch_from_the_start_under_its_run_kind() -> None:
    published: list[Progress] = []
    progress = ReplayProgress("p", 4, published.append, every_seconds=0, shards=["s0", "s1", "s2"], kind=RunKind.BACKFILL)
    progress.line("s1 [100 .. 900]: 30 records read, at 130")
    assert [(p.kind, dict(p.records)) for p in published] == [(RunKind.BACKFILL, {"s0": 0, "s1": 30, "s2": 0})]


def test_a_failed_progress_write_is_logged_once_counted_and_never_stops_the_replay(caplog: pytest.LogCaptureFixture) -> None:
    published: list[Progress] = []

    def publish(progress: Progress) -> None:
        if len(published) < 3:
            published.append(progress)
            raise ProgressNotStoredError("pipeline 'p', regular batch 4: 1 of 1 progress items not stored: throttled")
        published.append(progress)

    progress = ReplayProgress("p", 4, publish, every_seconds=0, shards=[f"s{i}" for i in range(200)])
    with caplog.at_level(logging.WARNING, logger="kinesis_replay.ui.status"):
        for i in range(200):  # a tick per line: 200 writes tried, the first three fail
            progress.line(f"s{i} [100 .. 900]: done, 10 records, 1.0 KiB in 1.0s")
        assert progress.close() == 3
    assert sum(published[-1].records.values()) == 2_000 and len(published[-1].done) == 200  # the last write has every count
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # the first failure, then the count: not one line per failed write
    assert warnings[0].startswith("pipeline p, regular batch 4: the replay's progress was not stored") and "throttled" in warnings[0]
    assert warnings[1] == "pipeline p, regular batch 4: 3 of 200 writes of the replay's progress failed"


def test_a_batch_records_how_far_behind_its_plan_found_the_pipeline_and_its_figures() -> None:
    ranges = (SequenceRange("a", S, S + 9, None, False, T0), SequenceRange("b", S, S + 9, None, False, T0 + timedelta(seconds=30)))
    batch = Batch("p", 1, BatchStatus.PLANNED, ranges, "s", "r", created_at=T0 + timedelta(minutes=2))
    assert batch.behind_seconds == 120  # the oldest record waiting, at planning time
    assert batch.figures() == {"shards": 2, "behind_seconds": 120, "records": None, "bytes": None, "bad_records": None}
    results = (ShardResult("a", 10, 1000, S, S + 9, "x"), ShardResult("b", 8, 900, S, S + 9, "y", bad_records=2))
    written = batch.with_status(BatchStatus.WRITTEN, result=ReplayResult("p", 1, results))
    assert written.figures() == {"shards": 2, "behind_seconds": 120, "records": 18, "bytes": 1900, "bad_records": 2}


def test_the_page_draws_a_days_batches_the_replay_in_flight_and_the_last_failures() -> None:
    from kinesis_replay.airflow_plugin import _render

    history = [
        {"batch_id": i, "status": "COMMITTED", "created_at": (T0 + timedelta(minutes=i)).isoformat(), "seconds": 40.0 + i,
         "records": 100 * i, "bytes": 2048 * i, "behind_seconds": 60.0 + i, "shards": 4}
        for i in (1, 2, 3)
    ]  # fmt: skip
    view = {
        "name": "p", "stream": "s", "output": "/lake/p", "dag_id": "d", "backfill_dag_id": "b", "in_flight": 4, "shards": [], "batches": [],
        "history": history,
        "failures": [{"batch_id": 4, "status": "FAILED", "failures": 2, "created_at": "2026-11-01T00:04:00+00:00",
                      "error": "spark-submit exited with 1: kinesis-replay: replay failed: shard s0 ran dry"}],
        "progress": {"batch_id": 4, "status": "PLANNED", "updated_at": "2026-11-01T00:04:30+00:00", "read": 120, "estimate": 400,
                     "shards": [{"shard_id": "s0", "read": 100, "estimate": 200, "done": False},
                                {"shard_id": "s1", "read": 20, "estimate": 200, "done": False}]},
        "backfill_progress": {"batch_id": 2, "kind": "backfill", "status": "COMMITTED", "updated_at": "2026-11-01T00:04:20+00:00",
                              "read": 150, "estimate": 200, "shards": [{"shard_id": "s9", "read": 150, "estimate": 200, "done": False}]},
    }  # fmt: skip
    page = _render([view], "http://airflow")
    charts = dict(re.findall(r'<figure class="chart chart-(\w+)">(.*?)</figure>', page))
    assert values(charts["lag"]) == [(1, "61"), (2, "62"), (3, "63")]
    assert values(charts["records"]) == [(1, "100"), (2, "200"), (3, "300")]
    assert values(charts["bytes"]) == [(1, "2048"), (2, "4096"), (3, "6144")]
    assert values(charts["seconds"]) == [(1, "41"), (2, "42"), (3, "43")]
    assert "Batch 4 replaying (PLANNED): 120 of about 400 records" in page
    assert '<tr data-shard="s1" data-read="20">' in page and '<progress value="20" max="200">' in page
    # A running backfill's replay is shown apart, against the counts its batch committed; the regular batch's stays.
    regular, backfill = re.findall(r'<div class="(progress[^"]*)" data-batch="(\d+)">', page)
    assert (regular, backfill) == (("progress", "4"), ("progress backfill", "2"))
    assert "Backfill replaying batch 2: 150 of 200 records, reported 2026-11-01T00:04:20+00:00" in page
    assert "kinesis-replay: replay failed: shard s0 ran dry" in page and "<td>2</td>" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.replace('href="http://airflow/', ""))  # nothing from elsewhere


def test_a_wide_stream_shows_its_most_stuck_shards_and_folds_the_rest() -> None:
    from kinesis_replay.airflow_plugin import SHARD_ROWS, _render

    shards = [
        {"shard_id": f"shardId-{i:012d}", "checkpoint": str(S + i), "finished": False, "last_batch_id": 1,
         "millis_behind_latest": 0, "checkpoint_age_seconds": float(i)}
        for i in range(1000)
    ]  # fmt: skip
    view = {
        "name": "p",
        "stream": "s",
        "output": "/lake/p",
        "dag_id": "d",
        "backfill_dag_id": "b",
        "in_flight": None,
        "shards": shards,
        "batches": [],
    }
    page = _render([view], "")
    shown, folded = page.split('<details class="more-shards">')
    assert f"<summary>{1000 - SHARD_ROWS:,} more shards</summary>" in folded
    assert re.findall(r'data-shard="shardId-0*(\d+)"', shown) == [str(i) for i in range(999, 999 - SHARD_ROWS, -1)]  # oldest first
    assert len(re.findall("data-shard=", folded)) == 1000 - SHARD_ROWS


class OneBatchStore:
    """Just what the backfill's progress reads: one committed batch."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def get_batches(self, pipeline_name: str, batch_ids: object) -> dict[int, Batch]:
        return {self.batch.batch_id: self.batch}


def test_a_backfills_progress_is_shown_against_its_committed_counts_only_while_it_runs() -> None:
    from kinesis_replay.core.config import parse_config
    from kinesis_replay.ui.status import _backfill_progress

    entry = {"name": "p", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST", "state_table": "t", "spark": {}}
    p = parse_config({"pipelines": [entry]})[0]
    ranges = (SequenceRange("a", S, S + 9, None, False, T0), SequenceRange("b", S, S + 9, None, False, T0))
    result = ReplayResult("p", 2, (ShardResult("a", 10, 1000, S, S + 9, "x"), ShardResult("b", 8, 900, S, S + 9, "y", bad_records=2)))
    store: Any = OneBatchStore(Batch("p", 2, BatchStatus.COMMITTED, ranges, "s", "r", T0, result=result))
    running = Progress(2, {"a": 4, "b": 10}, frozenset({"b"}), T0, RunKind.BACKFILL)
    view = _backfill_progress(store, p, running, T0 + timedelta(minutes=1))
    assert view is not None and (view["kind"], view["read"], view["estimate"]) == ("backfill", 14, 20)
    assert [(s["shard_id"], s["read"], s["estimate"], s["done"]) for s in view["shards"]] == [("a", 4, 10, False), ("b", 10, 10, True)]
    assert _backfill_progress(store, p, running, T0 + timedelta(hours=1)) is None  # silent for long: failed or killed
    finished = Progress(2, {"a": 10, "b": 10}, frozenset({"a", "b"}), T0, RunKind.BACKFILL)
    assert _backfill_progress(store, p, finished, T0 + timedelta(minutes=1)) is None


def decoded(batch: Batch, decoding: Decoding, bad_records: int = 0) -> Batch:
    """A committed batch of the long ledger's, decoded so (and with so many of each shard's records quarantined)."""
    assert batch.result is not None
    shards = tuple(replace(s, bad_records=bad_records) for s in batch.result.shards)
    return replace(batch, result=replace(batch.result, decoding=decoding, shards=shards))


def shown(*batches: Batch) -> tuple[dict[str, Any], str, Any]:
    """The page of a ledger of these batches (ids from 1): its view as the JSON API serves it, its HTML, and the store's
    reads, counted."""
    from kinesis_replay.airflow_plugin import _render

    store = MemoryStateStore()
    store.restore("orders", Head(next_batch_id=len(batches) + 1), [], batches)
    counting: Any = CountingStore(store)
    view = status.pipeline_view(ledger_pipeline(), counting, LEDGER_T0 + (len(batches) + 1) * EVERY).to_dict()
    return view, _render([json.loads(json.dumps(view))], ""), counting


def batch_row(page: str, batch_id: int) -> str:
    table = page.split("<table class=batches>")[1]
    found = re.search(rf'<tr [^>]*data-batch="{batch_id}"[^>]*>(.*?)</tr>', table)
    assert found is not None, table
    return found.group(1)


def records_title(page: str, batch_id: int) -> str:
    chart = re.search(r'<figure class="chart chart-records">(.*?)</figure>', page)
    assert chart is not None
    found = re.search(rf'data-batch="{batch_id}" data-value="[^"]*"[^>]*><title>([^<]*)</title>', chart.group(1))
    assert found is not None, chart.group(1)
    return html.unescape(found.group(1))


def test_each_batch_shows_its_quarantined_records() -> None:
    view, page, _ = shown(decoded(ledger_batch(1), DECODED), decoded(ledger_batch(2), DECODED, bad_records=3))
    assert [(b["batch_id"], b["bad_records"]) for b in view["batches"]] == [(2, 6), (1, 0)]
    assert [(h["batch_id"], h["bad_records"]) for h in view["history"]] == [(1, 0), (2, 6)]
    assert "<th>quarantined</th>" in page
    assert re.findall(r"<td>([^<]*)</td>", batch_row(page, 2))[3:5] == ["20", "6"]  # records, quarantined
    assert records_title(page, 2).startswith("batch 2: 20 records, 6 quarantined,")
    assert "quarantined" not in records_title(page, 1)  # none: nothing said


def test_each_batch_shows_the_decoding_it_was_committed_with_said_in_full_on_hover() -> None:
    view, page, _ = shown(decoded(ledger_batch(1), DECODED), decoded(ledger_batch(2), RAW))
    (second, first) = view["batches"]
    assert (first["decoding"], first["decoding_text"]) == (DECODED.fingerprint, DECODED.describe())
    assert (second["decoding"], second["decoding_text"]) == (RAW.fingerprint, "raw payloads (not decoded)")
    assert [h["decoding"] for h in view["history"]] == [DECODED.fingerprint, RAW.fingerprint]  # a summary: the fingerprint alone
    cell = f'<td class="decoding" data-decoding="{DECODED.fingerprint}" title="{html.escape(DECODED.describe())}">'
    assert cell + f"<code>{DECODED.fingerprint}</code></td>" in batch_row(page, 1)
    assert "<th>decoding</th>" in page and "json payloads, schema 'n INT', decoder json-tasks/" in html.unescape(batch_row(page, 1))
    assert records_title(page, 1) == f"batch 1: 20 records, decoded as {DECODED.fingerprint}"


def test_a_batch_of_a_release_that_recorded_no_decoding_says_not_recorded_and_one_without_a_result_nothing() -> None:
    planned = replace(ledger_batch(2), status=BatchStatus.PLANNED, committed_at=None, result=None)
    view, page, _ = shown(ledger_batch(1), planned)  # the long ledger's batches record none: a 0.1.0 manifest's
    assert [(b["batch_id"], b["decoding"]) for b in view["batches"]] == [(2, None), (1, "not recorded")]
    assert view["batches"][1]["decoding_text"].startswith("not recorded (a release up to 0.1.0")
    assert [h["decoding"] for h in view["history"]] == ["not recorded", None]
    assert '<td class="decoding" data-decoding="not recorded" title="not recorded (a release up to 0.1.0' in batch_row(page, 1)
    assert '<td class="decoding">-</td>' in batch_row(page, 2)
    assert records_title(page, 1) == "batch 1: 20 records, decoding not recorded"


def test_a_re_decoded_batch_is_marked_with_the_run_that_re_decoded_it_and_the_others_are_not() -> None:
    redecoded = replace(decoded(ledger_batch(2), REDECODED), redecoded_by="manual__2026-01-02T00:00:00+00:00")
    view, page, _ = shown(decoded(ledger_batch(1), DECODED), redecoded)
    assert [(b["batch_id"], b["decoding"], b["redecoded_by"]) for b in view["batches"]] == [
        (2, REDECODED.fingerprint, "manual__2026-01-02T00:00:00+00:00"),
        (1, DECODED.fingerprint, None),
    ]
    assert [h["redecoded"] for h in view["history"]] == [False, True]
    mark = '<span class="redecoded" title="re-decoded by backfill run manual__2026-01-02T00:00:00+00:00">re-decoded</span>'
    assert mark in batch_row(page, 2) and "re-decoded" not in batch_row(page, 1)
    assert records_title(page, 2) == f"batch 2: 20 records, decoded as {REDECODED.fingerprint}, re-decoded"
    assert "re-decoded" not in records_title(page, 1)


def test_a_re_decode_waiting_for_its_commit_is_shown_with_its_run_and_the_committed_decoding_stays() -> None:
    committed = decoded(ledger_batch(2), DECODED)
    assert committed.result is not None
    staged = replace(committed, staged=replace(committed.result, decoding=REDECODED, attempt="a2"), staged_by="manual__r")
    view, page, _ = shown(decoded(ledger_batch(1), DECODED), staged)
    assert [(b["batch_id"], b["decoding"], b["staged_by"]) for b in view["batches"]] == [
        (2, DECODED.fingerprint, "manual__r"),  # readers still see the committed decoding until the selection commits
        (1, DECODED.fingerprint, None),
    ]
    assert view["batches"][0]["staged_decoding_text"] == REDECODED.describe()
    assert [h["staged_by"] for h in view["history"]] == [None, "manual__r"]
    waiting = f'<span class="staged" title="{html.escape(REDECODED.describe())}">re-decode waiting for commit (run manual__r)</span>'
    assert waiting in batch_row(page, 2) and "waiting for commit" not in batch_row(page, 1)
    assert records_title(page, 2).endswith(", re-decode waiting for commit (run manual__r)")
    assert "waiting for commit" not in records_title(page, 1)


def test_the_decodings_cost_the_page_no_read() -> None:
    plain = [ledger_batch(i) for i in range(1, 13)]
    committed = decoded(ledger_batch(12), DECODED)
    assert committed.result is not None
    marked = [
        *plain[:10],
        replace(decoded(ledger_batch(11), REDECODED), redecoded_by="manual__a"),
        replace(committed, staged=replace(committed.result, decoding=REDECODED), staged_by="manual__b"),
    ]
    reads = []
    for batches in (plain, marked):
        _, _, counting = shown(*batches)
        reads.append((counting.read, counting.summaries))
    assert reads[0] == reads[1] == (10, 12)  # the last ten batches, and the day's summaries: as many as before


def test_a_pipeline_reading_over_enhanced_fan_out_names_its_consumer_and_what_it_costs_and_others_say_nothing() -> None:
    from kinesis_replay.airflow_plugin import _render

    store = MemoryStateStore()
    store.restore("orders", Head(next_batch_id=2), [], [ledger_batch(1)])
    plain = ledger_pipeline()
    efo = replace(plain, read=replace(plain.read, consumer="orders-replay"))
    now = LEDGER_T0 + 2 * EVERY
    with_consumer = status.pipeline_view(efo, store, now).to_dict()
    assert with_consumer["consumer"] == "orders-replay"
    page = _render([json.loads(json.dumps(with_consumer))], "")
    shown_line = re.search(r'<p class="consumer">([^<]*)</p>', page)
    assert shown_line is not None and "consumer orders-replay" in shown_line.group(1) and "never deregistered" in shown_line.group(1)
    without = status.pipeline_view(plain, store, now).to_dict()
    assert without["consumer"] is None and 'class="consumer"' not in _render([without], "")
