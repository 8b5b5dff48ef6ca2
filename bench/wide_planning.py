"""The planner alone at 1,000 and 10,000 busy shards: `make bench-planning`'s wide rows (BENCHMARKS.md's planning-wide section).

bench/planning.py measures a plan through the throttling proxy, kinesalite and moto, which share the machine's cores
with the planner and add sockets and HTTP to every call. This measures what is the planner's: the first plan of a
fresh pipeline over a stream of busy shards (10,240 records of 1 KiB a shard, the newest two minutes old, a split and
a merge among them) answered by tests/fakes/socketless_kinesis.py behind a real boto3 client with no socket, at
Kinesis's per-shard limits on a virtual clock, into the in-memory state store, through ``plan_batch`` with the
default ``plan_concurrency`` as the DAG's plan task calls it.

Each plan runs in a fresh process (spawned), so that its peak memory is its own: the figures are

- the planner's CPU: the process's CPU time during ``plan_batch`` (every thread's), less the socketless endpoint's
  own (its handler's thread time); botocore's serialising, signing and parsing are the planner's, as they would be
  against Kinesis;
- peak memory: the process's peak resident set (``ru_maxrss``) after the plan, and before it (the interpreter,
  boto3, the library and the stream's arithmetic);
- wall time: ``plan_batch``'s, on the machine's cores. Kinesis's limits cost no waiting here: the budgets keep to
  them on the virtual clock, whose seconds the table gives.

Each plan is checked before it is counted: no call throttled, every range the stream's arithmetic.

    python bench/wide_planning.py --shards 1000 10000 --repeats 3 --no-write
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402

WIDE = 10_000  # the targets are this many shards' plans
NARROW = 1_000  # ... against this many
MS_A_SHARD = 6.0  # target: the planner's CPU a shard at WIDE
GROWTH = 1.2  # target: its CPU a shard at WIDE within this many times its CPU a shard at NARROW
PEAK_BYTES = 1024**3  # target: peak memory
WALL_SECONDS = 60.0  # target: a plan of WIDE shards on 2 cores


@dataclass(frozen=True)
class Plan:
    """One first plan, in a process of its own."""

    shards: int
    wall: float
    cpu: float  # the process's, during plan_batch
    endpoint_cpu: float  # the socketless endpoint's handler's, inside cpu
    rss_before: int  # bytes: the process's peak resident set before the plan, and after it
    rss_after: int
    calls: dict[str, int]
    max_calls_a_shard: int
    ranges: int
    virtual_seconds: float  # how long the plan took on the virtual clock Kinesis's limits are kept on
    load: float  # the machine's 1-minute load average after the plan

    @property
    def planner_ms_a_shard(self) -> float:
        return (self.cpu - self.endpoint_cpu) * 1000 / self.shards


def plan_once(shards: int) -> Plan:
    """A first plan of ``shards`` busy shards (run in a fresh process by ``measure``)."""
    from fakes.memory_store import MemoryStateStore
    from fakes.replay import directory_pipeline
    from fakes.socketless_kinesis import SocketlessKinesis
    from kinesis_replay.steps.plan import plan_batch

    stream = SocketlessKinesis("wide", shards=shards)
    client, store = stream.client(), MemoryStateStore()
    pipeline = directory_pipeline(Path(tempfile.mkdtemp(prefix="kr-wide-")) / "out", name="wide", stream="wide", read={})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started, cpu_started = time.perf_counter(), time.process_time()
    result = plan_batch(pipeline, client, store, "bench-run", now=stream.now, pacing=stream.pacing)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = {s.shard_id for s in stream.shards if s.parents}
    expected = {s.shard_id: stream.expected_range(s) for s in stream.shards if s.shard_id not in children}
    found = {r.shard_id: (r.start, r.end, r.to_shard_end) for r in result.batch.ranges} if result.batch else {}
    if stream.throttled or found != expected:
        raise RuntimeError(f"{shards} shards: {stream.throttled} calls throttled, {len(found)} ranges of {len(expected)} expected")
    per_shard = [a + b for a, b in zip(stream.shard_calls["GetShardIterator"], stream.shard_calls["GetRecords"], strict=True)]
    return Plan(
        shards, wall, cpu, stream.cpu_seconds, rss_before, rss_after, dict(stream.calls), max(per_shard), len(found),
        stream.clock(), os.getloadavg()[0],
    )  # fmt: skip


def measure(shard_counts: list[int], repeats: int) -> list[Plan]:
    """``repeats`` plans of each width, interleaved (the machine is shared: a busy minute touches every width alike)."""
    context = multiprocessing.get_context("spawn")
    plans = []
    with context.Pool(1, maxtasksperchild=1) as pool:
        for _ in range(repeats):
            for shards in shard_counts:
                plans.append(pool.apply(plan_once, (shards,)))
                p = plans[-1]
                print(
                    f"{shards:,} shards: {p.wall:.1f} s, planner {p.planner_ms_a_shard:.2f} ms a shard, "
                    f"peak {p.rss_after / 2**20:.0f} MiB, load {p.load:.1f}",
                    flush=True,
                )
    return plans


def _median(plans: list[Plan], key: Any) -> float:
    return float(statistics.median(key(p) for p in plans))


def _spread(plans: list[Plan], key: Any, fmt: str = "{:.1f}") -> str:
    values = [key(p) for p in plans]
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))} to {fmt.format(max(values))})"


def render(plans: list[Plan], repeats: int) -> str:
    by: dict[int, list[Plan]] = {}
    for p in plans:
        by.setdefault(p.shards, []).append(p)
    lines = [
        "## Planning 10,000 shards, the planner alone (make bench-planning)",
        "",
        f"The first plan of a fresh pipeline over a stream of busy shards (10,240 records of 1 KiB a shard, the newest two "
        "minutes old; a split and a merge among the shards, so three closed parents are planned to their ends and three "
        "children wait), answered by `tests/fakes/socketless_kinesis.py` behind a real boto3 client with no socket "
        "(botocore serialises, signs and parses every call), at Kinesis's limits kept on a virtual clock, into the "
        "in-memory state store, through `plan_batch` with the default `plan_concurrency` (128), as the DAG's plan task "
        f"calls it; {repeats} plans of each width, each in a fresh process, interleaved (the median shown, the range in "
        f"brackets); on {platform.node() or 'this machine'}, {os.cpu_count()} cores shared with other work (the load "
        "average is the machine's after each plan). Each plan was checked: no call throttled, every range the one the "
        "stream's arithmetic gives. The planner's CPU is the process's during `plan_batch` less the endpoint's own "
        "handler's; peak memory is the process's peak resident set (`ru_maxrss`), with what it held before the plan. The "
        "virtual clock's reading at the end is not a wall time: the threads' waits follow one another as the interpreter "
        "runs them, and overlap only in part; the clock only orders each shard's calls against Kinesis's limits.",
        "",
        "| shards | wall, seconds | the planner's CPU a shard, ms | the endpoint's CPU a shard, ms | peak memory, MiB (before the plan) "
        "| ListShards calls | calls a shard, at most | ranges | on the virtual clock, seconds | load average |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shards, runs in sorted(by.items()):
        lines.append(
            f"| {shards:,} | {_spread(runs, lambda p: p.wall)} | {_spread(runs, lambda p: p.planner_ms_a_shard, '{:.2f}')} "
            f"| {_median(runs, lambda p: p.endpoint_cpu * 1000 / p.shards):.2f} "
            f"| {_median(runs, lambda p: p.rss_after / 2**20):.0f} ({_median(runs, lambda p: p.rss_before / 2**20):.0f}) "
            f"| {runs[0].calls.get('ListShards', 0)} | {max(p.max_calls_a_shard for p in runs)} | {runs[0].ranges:,} "
            f"| {_median(runs, lambda p: p.virtual_seconds):.0f} | {_spread(runs, lambda p: p.load)} |"
        )
    lines += ["", *targets(by)]
    return "\n".join(lines)


def targets(by: dict[int, list[Plan]]) -> list[str]:
    if WIDE not in by or NARROW not in by:
        return [f"Targets: not checked, the run planned no stream of {WIDE:,} and {NARROW:,} shards."]
    wide, narrow = by[WIDE], by[NARROW]
    ms_wide, ms_narrow = _median(wide, lambda p: p.planner_ms_a_shard), _median(narrow, lambda p: p.planner_ms_a_shard)
    peak, wall = max(p.rss_after for p in wide), _median(wide, lambda p: p.wall)
    return [
        "Targets (issue 49), from the medians above; peak memory the highest of the plans:",
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| the planner's CPU a shard at {WIDE:,} under {MS_A_SHARD:.0f} ms | {ms_wide:.2f} ms | {verdict(ms_wide < MS_A_SHARD)} |",
        f"| ... within {GROWTH} x its CPU a shard at {NARROW:,} | {ms_wide / ms_narrow:.2f} x ({ms_narrow:.2f} ms) "
        f"| {verdict(ms_wide <= GROWTH * ms_narrow)} |",
        f"| peak memory at {WIDE:,} under 1 GiB | {peak / 2**20:.0f} MiB | {verdict(peak < PEAK_BYTES)} |",
        f"| wall time at {WIDE:,} under {WALL_SECONDS:.0f} s on {os.cpu_count()} cores | {wall:.1f} s | {verdict(wall < WALL_SECONDS)} |",
    ]


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[NARROW, WIDE])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    write(measure(args.shards, args.repeats), args.repeats, not args.no_write)
    return 0


def write(plans: list[Plan], repeats: int, to_file: bool = True) -> None:
    body = render(plans, repeats)
    print(body)
    if to_file:
        report.write_section(ROOT / "BENCHMARKS.md", report.PLANNING_WIDE, lambda _old: body)


if __name__ == "__main__":
    sys.exit(main())
