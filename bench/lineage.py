"""`make bench-lineage`: what OpenLineage adds to a commit task, beside the commit itself (docs/lineage.md).

The target (the lineage issue): with lineage on, the commit task's time grows by at most ``TARGET_MS``. This measures,
side by side and interleaved (each repetition runs every variant at every width, in an order that rotates), in one
process:

- the commit without lineage: the library's commit of a batch (one Parquet file per shard, as the replay job writes
  them) to a table on the embedded SQL catalog, ``iceberg_table.commit_snapshot``, as bench/table_commit.py commits;
- what lineage adds to the task once it has committed: ``kinesis_replay_lineage.attach`` with the batch's figures
  (``kinesis_replay_tasks.batch_summary`` of the batch just committed, its snapshot id included), then the provider's
  own listener, ``OpenLineageListener.on_task_instance_success``, called with a task instance of the real commit task
  of the DAG the factory builds: the provider's ExtractorManager calls the task's
  ``get_openlineage_facets_on_complete``, its adapter builds the COMPLETE RunEvent (with Airflow's own run facets),
  serialises it, and its client emits it through the file transport into a temporary file. Each event is read back
  and checked (one more line; its batch, its input and output, its run facet). Three ways:

  - thread, warm: ``[openlineage] execute_in_thread`` (as the integration test runs it), the stream's ARN cached;
  - thread, cold: the same with the ARN cache emptied first, so a Kinesis client is made from the connection and one
    DescribeStreamSummary goes to a local kinesalite;
  - fork, cold: the provider's default, a forked process per event, which the listener waits for. The child does the
    lookup, so its cache dies with it: under the default every event is cold.

- our mapping alone: ``attach`` and the ``get_openlineage_facets_on_complete`` call (warm), no provider around it.

Widths: 4 shards, and wide batches past ``SUMMARY_RANGES`` (100), whose figures carry ``ranges_in`` rather than the
ranges, and 100 itself, the most ranges an event carries. Writes BENCHMARKS.md's lineage section.

    python bench/lineage.py --shards 4 100 200 --runs 7
"""

# Markdown table rows and the section's prose are long lines.
# ruff: noqa: E501

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "dags"), str(ROOT / "tests"), str(HERE)]

import report  # noqa: E402
import table_commit  # noqa: E402

TARGET_MS = 50.0  # the issue's: the commit task's time grows by at most this much with lineage on
STREAM = "bench-stream"
COMMIT = "commit, no lineage"
THREAD_WARM = "lineage: thread, ARN warm"
THREAD_COLD = "lineage: thread, ARN cold"
FORK_COLD = "lineage: fork (default), ARN cold"
FORK_KNOWN = "lineage: fork (default), ARN known"
FORK_BARE = "provider's own event (fork), no lineage of ours"
MAPPING = "our mapping alone (attach + facets), warm"
CLIENT = "a Kinesis client made from the connection"
CALL = "DescribeStreamSummary"
LINEAGE_WAYS = (THREAD_WARM, THREAD_COLD, FORK_COLD, FORK_KNOWN, FORK_BARE)


def start_kinesalite(state: Path) -> tuple[str | None, str]:
    """A kinesalite on a free port (no moto: nothing here needs it), and a one-shard stream; (its URL, "") or (None, why not)."""
    from stack import local_stack

    try:
        port = local_stack.free_port()
        proc = local_stack._spawn("kinesalite", local_stack.kinesalite_command(port), state)
        local_stack._wait_for_port(port, "kinesalite", proc, state / "kinesalite.log")
    except (OSError, RuntimeError) as exc:
        return None, f"kinesalite could not be started here ({exc})"
    import boto3

    url = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "kinesis", endpoint_url=url, region_name=local_stack.REGION, aws_access_key_id="bench", aws_secret_access_key="bench"
    )
    client.create_stream(StreamName=STREAM, ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName=STREAM, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    return url, ""


def set_environment(tmp: Path, kinesis_url: str | None, events: Path) -> None:
    """Before Airflow is imported: the connection (its Kinesis endpoint kinesalite's) and the provider on, with a file transport."""
    from stack import local_stack

    extra: dict[str, Any] = {"region_name": local_stack.REGION}
    if kinesis_url:
        extra["service_config"] = {"kinesis": {"endpoint_url": kinesis_url}}
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({"conn_type": "aws", "login": "bench", "password": "bench", "extra": extra})
    os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps({"type": "file", "log_file_path": str(events), "append": True})
    os.environ["AIRFLOW__OPENLINEAGE__NAMESPACE"] = "kinesis-replay-bench"
    os.environ.setdefault("AIRFLOW_HOME", str(tmp / "airflow"))


def set_execution(thread: bool) -> None:
    """``[openlineage] execute_in_thread``, read anew (the provider caches its configuration)."""
    from airflow.providers.openlineage import conf

    os.environ["AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD"] = str(thread)
    for cached in vars(conf).values():
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    assert conf.execute_in_thread() is thread


def runtime_task_instance(dag: Any, task: Any) -> Any:
    """A task instance of the commit task as the task runner holds it once the task succeeded (no scheduler, no database)."""
    from airflow.sdk.api.datamodels._generated import DagRun, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    now = datetime.now(UTC)
    run_id = f"scheduled__{now.isoformat()}"
    dag_run = DagRun(
        dag_id=dag.dag_id, run_id=run_id, logical_date=now, data_interval_start=now - timedelta(minutes=5), data_interval_end=now,
        run_after=now, start_date=now, end_date=None, run_type="scheduled", state="running", clear_number=0, conf={},
        consumed_asset_events=[], partition_key=None,
    )  # fmt: skip
    return RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=task.task_id, dag_id=dag.dag_id, run_id=run_id, try_number=1, map_index=-1,
        dag_version_id=uuid.uuid4(), task=task, start_date=now, state="success",
        _ti_context_from_server=TIRunContext.model_construct(dag_run=dag_run, max_tries=0),
    )  # fmt: skip


def committed_batch(pipeline: Any, batch_id: int, shards: int, snapshot_id: int) -> Any:
    """The ledger's entry of a batch of ``shards`` shards just committed, as the commit task's summary reads it."""
    from kinesis_replay.core.ranges import SequenceRange
    from kinesis_replay.core.state import Batch, BatchStatus, ReplayResult, ShardResult

    now = datetime.now(UTC)
    base = batch_id * 10**6
    ranges = tuple(
        SequenceRange(f"shardId-{s:012d}", base + 1, base + table_commit.ROWS_PER_FILE, previous_checkpoint=base if batch_id > 1 else None,
                      start_arrival=now - timedelta(minutes=5))
        for s in range(shards)
    )  # fmt: skip
    result = ReplayResult(
        pipeline.name, batch_id,
        tuple(ShardResult(r.shard_id, table_commit.ROWS_PER_FILE, 6400, r.start, r.end, "0" * 64) for r in ranges),
        seconds=1.0, attempt="a",
    )  # fmt: skip
    return Batch(pipeline.name, batch_id, BatchStatus.COMMITTED, ranges, STREAM, f"bench-{batch_id}", now - timedelta(minutes=1),
                 committed_at=now, result=result, snapshot_id=snapshot_id)  # fmt: skip


class Run:
    """The bench's state: the pipeline, its DAG's commit task, the table, the events file."""

    def __init__(self, tmp: Path, events: Path, cold: bool) -> None:
        from airflow.providers.openlineage.plugins import listener as ol_listener

        import kinesis_replay_lineage as lineage
        import kinesis_replay_tasks as tasks
        from kinesis_replay.adapters import iceberg_table
        from stack.harness import load_dags

        self.lineage, self.tasks, self.events, self.cold = lineage, tasks, events, cold
        entry = {
            "name": "bench", "stream": STREAM, "output": str(tmp / "out"), "schedule": None, "initial_position": "TRIM_HORIZON",
            "state_table": "kr-bench", "spark": {"master": "local[1]"}, "table": {"name": "bench"},
        }  # fmt: skip
        dags = load_dags(tmp / "pipelines.yaml", entry)
        from kinesis_replay.core.config import parse_config

        (self.pipeline,) = parse_config({"pipelines": [entry]})
        dag = dags[self.pipeline.dag_id]
        self.task = dag.task_dict["commit"]
        self.ti = runtime_task_instance(dag, self.task)
        self.listener = ol_listener.get_openlineage_listener()
        self.catalog = iceberg_table.load_catalog(self.pipeline)
        self.batch_id = 0
        self.emitted = 0
        self.times: dict[tuple[str, int], list[float]] = {}
        self.event_bytes: dict[int, int] = {}
        self.arn = "arn:aws:kinesis:us-east-1:000000000000:stream/" + STREAM  # kinesalite's account; set when not cold

    def commit(self, shards: int) -> tuple[float, dict[str, Any]]:
        """A batch committed to the table (its files written first, untimed): the commit's seconds and the batch's figures."""
        from kinesis_replay.adapters import iceberg_table

        self.batch_id += 1
        b = self.batch_id
        paths = table_commit.write_files(self.pipeline, b, "a", shards)
        t0 = time.perf_counter()
        iceberg_table.commit_snapshot(self.pipeline, b, "a", paths, run_id=f"bench-{b}", catalog=self.catalog)
        seconds = time.perf_counter() - t0
        table = iceberg_table.load_table(self.pipeline, self.catalog)
        assert table is not None and table.metadata.current_snapshot_id is not None
        summary = self.tasks.batch_summary(
            self.pipeline, committed_batch(self.pipeline, b, shards, table.metadata.current_snapshot_id), "regular", send=False
        )
        return seconds, dict(summary)

    def emit(self, way: str, summary: dict[str, Any]) -> float:
        """What lineage adds to the task that committed ``summary``: attach, then the provider's COMPLETE event."""
        set_execution(way not in (FORK_COLD, FORK_KNOWN, FORK_BARE))
        if way == FORK_BARE:  # the COMPLETE event the provider emits for any task: the baseline our lineage adds to
            self.task.__dict__.pop(self.lineage.OL_METHOD, None)
            t0 = time.perf_counter()
            self.listener.on_task_instance_success(None, self.ti)
            seconds = time.perf_counter() - t0
            self.emitted = len(self.events.read_text().splitlines())
            return seconds
        if way == THREAD_WARM or not self.cold:
            self.lineage._ARNS[(self.pipeline.aws_conn_id, self.pipeline.stream)] = self.arn
        else:
            self.lineage._ARNS.clear()
        known = self.arn if way == FORK_KNOWN else None  # the regular commit's: the plan task's, through its XCom
        t0 = time.perf_counter()
        self.lineage.attach({"task": self.task}, self.pipeline, summary, known)
        self.listener.on_task_instance_success(None, self.ti)
        seconds = time.perf_counter() - t0
        self.check_event(summary)
        return seconds

    def mapping(self, summary: dict[str, Any]) -> float:
        self.lineage._ARNS[(self.pipeline.aws_conn_id, self.pipeline.stream)] = self.arn
        t0 = time.perf_counter()
        self.lineage.attach({"task": self.task}, self.pipeline, summary)
        found = self.task.get_openlineage_facets_on_complete(self.ti)
        seconds = time.perf_counter() - t0
        assert found is not None and found.inputs and found.outputs, found
        return seconds

    def check_event(self, summary: dict[str, Any]) -> None:
        """The event just emitted: one more line in the file, for this batch, with the stream, the table and the facet."""
        lines = self.events.read_text().splitlines()
        if len(lines) != self.emitted + 1:
            raise RuntimeError(f"{len(lines) - self.emitted} events emitted for batch {summary['batch_id']}, not one (see {self.events})")
        self.emitted += 1
        event = json.loads(lines[-1])
        facet = event["run"]["facets"].get("kinesisReplayBatch", {})
        stream = [(d["namespace"], d["name"]) for d in event["inputs"]]
        if event["eventType"] != "COMPLETE" or facet.get("batch_id") != summary["batch_id"] or stream != [tuple(self.arn.rsplit(":", 1))]:
            raise RuntimeError(f"the event of batch {summary['batch_id']} is not its lineage: {lines[-1][:2000]}")
        if facet.get("snapshot_id") != summary["snapshot_id"] or ("ranges" in summary) != ("ranges" in facet):
            raise RuntimeError(f"the event of batch {summary['batch_id']} does not carry its figures: {facet}")
        self.event_bytes[summary["shards"]] = len(lines[-1].encode())

    def lookup(self) -> tuple[float, float]:
        """The cold lookup's two parts, apart: a Kinesis client made from the connection, then DescribeStreamSummary."""
        t0 = time.perf_counter()
        client = self.tasks.kinesis_client(self.pipeline)
        t1 = time.perf_counter()
        client.describe_stream_summary(StreamName=self.pipeline.stream)
        return t1 - t0, time.perf_counter() - t1

    def timed(self, label: str, shards: int, seconds: float) -> None:
        self.times.setdefault((label, shards), []).append(seconds)


def run(shards: list[int], runs: int, progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kr-bench-lineage-") as name:
        tmp = Path(name)
        state = tmp / "stack"
        state.mkdir()
        events = tmp / "openlineage.jsonl"
        kinesis_url, why_not = start_kinesalite(state)
        try:
            set_environment(tmp, kinesis_url, events)
            set_execution(True)
            r = Run(tmp, events, cold=kinesis_url is not None)
            if kinesis_url:  # the ARN as the stream's endpoint gives it
                r.lineage._ARNS.clear()
                r.arn = r.lineage.stream_arn(r.pipeline)
            # The first event in this process, apart: the provider's client and transport made, our facet's class built.
            _, summary = r.commit(shards[0])
            first = r.emit(THREAD_COLD if r.cold else THREAD_WARM, summary)
            ways = (COMMIT, *(w for w in LINEAGE_WAYS if r.cold or w in (THREAD_WARM, FORK_KNOWN, FORK_BARE)), MAPPING)
            for rep in range(-1, runs):  # rep -1: a warm-up of every variant, not counted
                for i, width in enumerate(shards[rep % len(shards) :] + shards[: rep % len(shards)]):
                    seconds, summary = r.commit(width)
                    order = ways[1:][(rep + i) % (len(ways) - 1) :] + ways[1:][: (rep + i) % (len(ways) - 1)]
                    found = {COMMIT: seconds}
                    for way in order:
                        found[way] = r.mapping(summary) if way == MAPPING else r.emit(way, summary)
                    if rep >= 0:
                        for way, s in found.items():
                            r.timed(way, width, s)
                if r.cold and rep >= 0:
                    client, call = r.lookup()
                    r.timed(CLIENT, 0, client)
                    r.timed(CALL, 0, call)
                progress(
                    f"run {rep + 1}/{runs}: "
                    + ", ".join(
                        f"{k[0]} at {k[1]}: {v[-1] * 1000:.1f} ms" for k, v in r.times.items() if rep >= 0 and k[0] in (COMMIT, FORK_KNOWN)
                    )
                )
        finally:
            if kinesis_url:
                from stack import local_stack

                local_stack.stop(state)
        return {
            "shards": shards, "runs": runs, "times": r.times, "ways": ways, "first": first, "cold": r.cold, "why_not": why_not,
            "event_bytes": r.event_bytes, "events": r.emitted, "seconds": time.perf_counter() - started, "load": os.getloadavg(),
            "machine": (f"Python {platform.python_version()}, apache-airflow {importlib.metadata.version('apache-airflow')}, "
                        f"apache-airflow-providers-openlineage {importlib.metadata.version('apache-airflow-providers-openlineage')}, "
                        f"openlineage-python {importlib.metadata.version('openlineage-python')}, pyiceberg {importlib.metadata.version('pyiceberg')}, "
                        f"{os.cpu_count()} cores"),
        }  # fmt: skip


def ms(xs: list[float]) -> str:
    """Median (min to max), in ms."""
    v = [x * 1000 for x in xs]
    return f"{statistics.median(v):.1f} ({min(v):.1f} to {max(v):.1f})"


def med_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def render(r: dict[str, Any]) -> str:
    t, shards, ways = r["times"], r["shards"], r["ways"]
    lineage_ways = [w for w in ways if w in LINEAGE_WAYS]
    worst = max(med_ms(t[(w, n)]) for w in lineage_ways for n in shards)
    default = FORK_KNOWN
    realistic = max(med_ms(t[(default, n)]) for n in shards)
    ours = max(med_ms(t[(default, n)]) - med_ms(t[(FORK_BARE, n)]) for n in shards)  # over the provider's own event
    met = ours <= TARGET_MS
    lines = [
        "## Lineage (make bench-lineage)",
        "",
        f"What OpenLineage adds to a commit task, beside the commit itself: {r['runs']} repetitions, each running every "
        f"variant at every width ({', '.join(f'{n:,}' for n in shards)} shards) in an order that rotates, in one process; "
        f"median (min to max), ms. {r['events']} events emitted through the provider's file transport, each read back and "
        f"checked. {r['machine']}; load average {r['load'][0]:.1f} at the end; the run took {r['seconds']:.0f} s.",
        "",
        "- *commit, no lineage*: `iceberg_table.commit_snapshot` of a batch of one Parquet file per shard "
        f"({table_commit.ROWS_PER_FILE} rows each) to a table on the embedded SQL catalog, as bench/table_commit.py commits "
        "(the task's ledger writes, the same with lineage or without it, are not in it);",
        "- *lineage*: `kinesis_replay_lineage.attach` with the batch's figures (`batch_summary` of the batch just "
        "committed), then the provider's `OpenLineageListener.on_task_instance_success` on a task instance of the real "
        "commit task: the extractor calls `get_openlineage_facets_on_complete`, the adapter builds the COMPLETE event with "
        "Airflow's run facets, serialises it and emits it through the file transport. *thread*: `execute_in_thread`; "
        "*fork*: the provider's default, a process forked per event that the listener waits for; *ARN cold*: the cache "
        "empty, so a Kinesis client is made from the connection and one DescribeStreamSummary goes to a local kinesalite; "
        "*ARN known*: the stream's ARN given to `attach`, as the regular commit task has it from the plan task's XCom "
        "(and a backfill's task from its own stream check: `kinesis_client.seen_stream_arn`);",
        "- *our mapping alone*: `attach` and the `get_openlineage_facets_on_complete` call, no provider around them.",
        "",
    ]
    if not r["cold"]:
        lines += [f"The cold lookups were left out: {r['why_not']}; every lineage figure is warm (the ARN cached).", ""]
    lines += [
        "| shards | " + " | ".join(ways) + " |",
        "|---|" + "---|" * len(ways),
    ]
    for n in shards:
        lines.append(f"| {n:,} | " + " | ".join(ms(t[(w, n)]) for w in ways) + " |")
    lines += [
        "",
        "Added to the commit task, by the medians: ms, and as a share of the commit at the same width.",
        "",
        "| shards | event bytes | " + " | ".join(lineage_ways) + " |",
        "|---|---|" + "---|" * len(lineage_ways),
    ]
    for n in shards:
        commit = med_ms(t[(COMMIT, n)])
        cells = [f"{med_ms(t[(w, n)]):.1f} ms ({med_ms(t[(w, n)]) / commit:.0%})" for w in lineage_ways]
        lines.append(f"| {n:,} | {r['event_bytes'][n]:,} | " + " | ".join(cells) + " |")
    if r["cold"]:
        lines += [
            "",
            f"The cold lookup's parts, timed apart once a repetition: {CLIENT}, {ms(t[(CLIENT, 0)])} (botocore reads its "
            f"service model and endpoint rules anew for each new session), and {CALL} on it, {ms(t[(CALL, 0)])}.",
        ]
    lines += [
        "",
        f"Target: the commit task's time grows by at most {TARGET_MS:.0f} ms with lineage on. Over the COMPLETE event the "
        f"provider emits for every task anyway ({FORK_BARE}), our lineage adds at most {ours:.1f} ms (median, the "
        f"regular and backfill commit tasks' way, {default}): {'**met**' if met else '**missed**'}. Against no provider "
        f"at all, that way adds at most {realistic:.1f} ms, most of it the provider's own fork and emission, which every "
        f"task of a deployment with OpenLineage pays; the most any way adds at any width is {worst:.1f} ms (a task "
        "that looks the ARN up, cold). The first event in the process, before any "
        f"warm-up, took {r['first'] * 1000:.0f} ms ({THREAD_COLD if r['cold'] else THREAD_WARM}): the client and its "
        "transport made and our facet's class built, once per process.",
        "",
        "Which figure a deployment pays: Airflow 3 runs each task in a process of its own, and under the provider's "
        "default the event is built in a forked child. The regular commit task is given the stream's ARN by the plan "
        "task (its XCom), and a backfill's replay or check task has it from its own stream check, so neither looks it "
        "up: *fork, ARN known* is their figure. Only a task that saw no ARN (a re-decode's or rebuild's commit task) "
        "pays the cold lookup, mostly a new Kinesis client. The START event the provider emits as the task begins is not measured: it carries none of our "
        "lineage, and the provider emits it with or without this branch. Past 100 shards the figures carry `ranges_in` "
        "rather than the ranges (`SUMMARY_RANGES`), so the event stops growing with the width. Where the time goes "
        "(cProfile of one event at 100 shards, by hand, on the listener's work run inline): warm, about two thirds in "
        "the provider's redaction of the event (`_redact` and the secrets masker walk every field, the 100 ranges' "
        "included, one `re.sub` per key); cold, the new Kinesis client (botocore's JSON decoding of its models), the "
        "call itself about 10 ms. Our mapping is under a millisecond at every width.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[4, 100, 200], help="batch widths (one file per shard)")
    parser.add_argument("--runs", type=int, default=7, help="repetitions of every variant at every width")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.runs < 3 or min(args.shards) < 1:
        parser.error("--runs must be at least 3, and each width at least 1")
    # One line per commit, per connection made and per event emitted otherwise (a task's log has them; the console not).
    for name in ("kinesis_replay", "airflow.providers.amazon", "airflow.providers.openlineage", "openlineage.client"):
        logging.getLogger(name).setLevel(logging.WARNING)
    results = run(args.shards, args.runs, lambda line: print(line, flush=True))
    body = render(results)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.LINEAGE, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
