"""The generated block of BENCHMARKS.md: tables of min/median/max over the runs, the targets as measured ratios, real-Kinesis arithmetic."""

# Markdown table rows are long lines, and the prose uses typographic signs (times, divide) on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from measure import Spread

MIB = 2**20
KINESIS_READ_MIB_S = 2.0  # per shard, as GetRecords allows
TASKS = ("plan", "replay", "verify", "commit", "check")


def spread(runs: list[dict[str, Any]], f: Any) -> Spread:
    return Spread(tuple(f(r) for r in runs))


def per_s(n: float) -> Any:
    return lambda r: n / r["seconds"]


def calls(plan: dict[str, Any]) -> str:
    """One planning run's Kinesis calls by name, and the records its GetRecords calls returned."""
    counts = dict(plan.get("calls", {}))
    read = counts.pop("records read", 0)
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) + f" ({read} records)" if counts else "n/a"


def steady(run: dict[str, Any]) -> float:
    """The replay job's read and write, timed as the bare reads are: from the first Kinesis call (after start-up) to the write's end."""
    return float(run.get("from_first_call") or run["read_write"])


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


Write = Callable[[str], None]  # appends one line (or several, joined by newlines) to the block


def median(runs: list[dict[str, Any]], f: Any) -> float:
    return spread(runs, f).median


@dataclass(frozen=True)
class Crossover:
    """Each way's fixed cost plus its cost per record, from figures measured side by side at the largest size.

    The replay job's fixed cost is its end-to-end time on one record; its cost per record is what the largest
    size adds to that. The naive exporter's fixed cost is its start-up (end to end minus its loop).
    """

    fixed_r: float
    per_r: float
    fixed_n: float
    per_n: float

    @property
    def records(self) -> float:
        """From how many records the replay job is the faster one; infinite if it also costs more per record."""
        return (self.fixed_r - self.fixed_n) / (self.per_n - self.per_r) if self.per_n > self.per_r else math.inf


class Figures:
    """The results, and the figures that more than one part of the block quotes (each spread computed once)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results
        self.by_size: dict[str, Any] = results["sizes"]

    @cached_property
    def sizes(self) -> list[str]:
        return sorted(self.by_size, key=int)

    @property
    def smallest(self) -> str:
        return self.sizes[0]

    @property
    def largest(self) -> str:
        return self.sizes[-1]

    @property
    def large_runs(self) -> dict[str, Any]:
        return self.by_size[self.largest]["runs"]

    @property
    def n_large(self) -> int:
        return self.by_size[self.largest]["records"]

    @property
    def one(self) -> list[dict[str, Any]]:
        """The replay job's runs on one record, for the fixed costs (the largest size's if the run measured none)."""
        return self.results.get("single", {}).get("runs", {}).get("replay_job") or self.large_runs["replay_job"]

    @property
    def blocks(self) -> list[dict[str, Any]]:
        """Each size's results, then the single record's if it was measured: the rows of the per-size tables."""
        return [self.by_size[s] for s in self.sizes] + ([self.results["single"]] if "single" in self.results else [])

    @property
    def cpu_by_cgroup(self) -> bool:
        """Whether every replay job's CPU was counted by a cgroup (bench/measure.py), not by wait4 and samples."""
        return all(r.get("cpu_counted_by") == "cgroup" for b in self.blocks for r in b["runs"]["replay_job"])

    @cached_property
    def read_write(self) -> Spread:
        return spread(self.large_runs["replay_job"], lambda r: self.n_large / steady(r))

    @cached_property
    def replay_e2e(self) -> Spread:
        return spread(self.large_runs["replay_job"], lambda r: r["seconds"])

    @cached_property
    def cpu_naive(self) -> Spread:
        return spread(self.large_runs["naive"], lambda r: r["cpu"] / self.n_large * 1e6)

    @cached_property
    def crossover(self) -> Crossover:
        fixed_r = median(self.one, lambda r: r["seconds"])
        per_r = max(self.replay_e2e.median - fixed_r, 0.0) / self.n_large
        fixed_n = median(self.large_runs["naive"], lambda r: r["seconds"] - r["loop_seconds"])
        per_n = median(self.large_runs["naive"], lambda r: r["loop_seconds"]) / self.n_large
        return Crossover(fixed_r, per_r, fixed_n, per_n)


def render_figures(results: dict[str, Any]) -> str:
    """The bench section of BENCHMARKS.md from bench/run.py's results: its parts in order, each written by a function of its own."""
    figures = Figures(results)
    out: list[str] = []
    for part in PARTS:
        part(out.append, figures)
    return "\n".join(out) + "\n"


def header(w: Write, f: Figures) -> None:
    """What was run, on what, under which load, and how the replay job was set up."""
    results, sizes, S = f.results, f.sizes, f.by_size
    m = results["machine"]
    w("## Figures (written by `make bench`; do not edit this block by hand)\n")
    w(f"Finished {results['finished']}; `make bench` took {results['wall_seconds'] / 60:.1f} minutes: `{results['command']}`.  ")
    w(f"Each figure is the median over {results['runs']} runs, with (min to max). All ways read the same closed ranges of the same "
      f"stream, one after another in each run, so their ratios are measured side by side.\n")  # fmt: skip
    w(f"- Machine: {m['cpu']}, {m['memory']}, {m['os']}; a shared machine, so the load before and after each size is listed below.")
    w(f"- Versions: Python {m['python']}, {m['java']}, node {m['node']}, {m['versions']}.")
    w(f"- Streams: {results['shards']} shards on kinesalite (in memory), records of {results['record_bytes']} bytes "
      "(a JSON event padded to that size), sizes " + ", ".join(f"{int(s):,}" for s in sizes) + " records.")  # fmt: skip
    if all("load" in S[s] for s in sizes):
        w(f"- Load: the 1-minute load average on these {os.cpu_count()} cores (the bench's own processes count), before and after each size's runs: "
          + ", ".join(f"{int(s):,} records {S[s]['load'][0]:.1f} → {S[s]['load'][1]:.1f}" for s in sizes) + ".")  # fmt: skip
    w("- The replay job runs `local[2]` (a task per core, each reading its share of the 4 ranges at once) into a table "
      "output's layout, with no per-shard read budget: the emulator enforces none, so the job is measured, not its pacing.\n")  # fmt: skip


def faster_from(f: Figures) -> str | None:
    """The smallest size at which the replay job's end-to-end median beat the naive exporter's, if any."""
    S = f.by_size
    return next(
        (s for s in f.sizes if spread(S[s]["runs"]["replay_job"], lambda r: r["seconds"]).median
         < spread(S[s]["runs"]["naive"], lambda r: r["seconds"]).median), None,
    )  # fmt: skip


def targets_speed(w: Write, f: Figures) -> None:
    """The targets on speed and CPU at the largest size, and the crossover, as ratios of medians."""
    L, n_large, largest, rw = f.large_runs, f.n_large, f.largest, f.read_write
    ceiling = spread(L["bare_parallel"], per_s(n_large))
    naive_e2e, replay_e2e = spread(L["naive"], lambda r: r["seconds"]), f.replay_e2e
    cpu_replay = spread(L["replay_job"], lambda r: r["cpu"] / n_large * 1e6)
    crossover = f.crossover.records
    w("### Targets\n")
    w("| target | measured (medians) | ratio | |")
    w("|---|---|---|---|")
    r1 = rw.median / ceiling.median
    w(
        f"| replay job read-and-write ≥ 0.9 × parallel bare read, {int(largest):,} records (both from the first call on) | {rw.median:,.0f} vs {ceiling.median:,.0f} records/s | {r1:.2f} | {verdict(r1 >= 0.9)} |"
    )
    r2 = naive_e2e.median / replay_e2e.median
    w(
        f"| replay job end to end ≥ 1.0 × naive exporter, {int(largest):,} records | {replay_e2e.median:.1f}s vs {naive_e2e.median:.1f}s | {r2:.2f} | {verdict(r2 >= 1.0)} |"
    )
    r3 = cpu_replay.median / f.cpu_naive.median
    w(
        f"| CPU-seconds per million records ≤ naive's, {int(largest):,} records, start-up included (emulator's apart) | {cpu_replay.median:.1f} vs {f.cpu_naive.median:.1f} | {r3:.2f} | {verdict(r3 <= 1.0)} |"
    )
    if "single" in f.results:
        fixed = median(f.one, lambda r: r["cpu"])
        marginal = spread(L["replay_job"], lambda r: (r["cpu"] - fixed) / n_large * 1e6).median
        # The naive exporter's start-up (interpreter, imports, client) is CPU-bound: its wall time before the loop.
        naive_marginal = spread(L["naive"], lambda r: (r["cpu"] - (r["seconds"] - r["loop_seconds"])) / n_large * 1e6).median
        w(
            f"| (not the target, beside it) the same beyond each one's start-up (the job's: {fixed:.1f} CPU-seconds on one record) "
            f"| {marginal:.1f} vs {naive_marginal:.1f} | {marginal / naive_marginal:.2f} | |"
        )
    cross = (
        "never (the replay job is slower per record)" if math.isinf(crossover) else f"about {max(crossover, 0):,.0f} records (model below)"
    )
    first = faster_from(f)
    measured = f"faster from {int(first):,} records measured" if first else "slower at every size measured"
    w(f"| (no target: whatever it comes to) crossover | {cross}; {measured} | | |")


def targets_scale(w: Write, f: Figures) -> None:
    """The targets on growth from the smallest size to the largest: planning time and a Python worker's memory."""
    L, Ls = f.large_runs, f.by_size[f.smallest]["runs"]
    largest, smallest = f.largest, f.smallest
    plan_small, plan_large = spread(Ls["plan"], lambda r: r["seconds"]), spread(L["plan"], lambda r: r["seconds"])
    mem_small = spread(Ls["replay_job"], lambda r: r["worker_peak"] / MIB)
    mem_large = spread(L["replay_job"], lambda r: r["worker_peak"] / MIB)
    r4 = plan_large.median / plan_small.median
    emulator_share = spread(L["plan"], lambda r: r["emulator_cpu"] / r["seconds"]).median
    w(
        f"| planning at {int(largest):,} ≤ 1.2 × at {int(smallest):,} records | {plan_large.median:.3f}s vs {plan_small.median:.3f}s "
        f"({emulator_share:.0%} of it the emulator's CPU) | {r4:.2f} | {verdict(r4 <= 1.2)} |"
    )
    if all("cpu" in r for r in L["plan"] + Ls["plan"]):
        own_large, own_small = spread(L["plan"], lambda r: r["cpu"]), spread(Ls["plan"], lambda r: r["cpu"])
        r4b = own_large.median / own_small.median
        w(
            f"| (not the target, beside it) the planner's own CPU, same runs | {own_large.median:.3f}s vs {own_small.median:.3f}s | {r4b:.2f} | |"
        )
    r5 = mem_large.median / mem_small.median
    w(
        f"| peak Python worker memory at {int(largest):,} ≤ 1.2 × at {int(smallest):,} records | {mem_large.median:.0f} vs {mem_small.median:.0f} MiB | {r5:.2f} | {verdict(r5 <= 1.2)} |"
    )
    if len(f.sizes) > 2:  # how it grows from the next size up, beside the target
        middle = f.sizes[1]
        mem_middle = spread(f.by_size[middle]["runs"]["replay_job"], lambda r: r["worker_peak"] / MIB)
        w(
            f"| (not the target, beside it) the same at {int(largest):,} against {int(middle):,} records "
            f"| {mem_large.median:.0f} vs {mem_middle.median:.0f} MiB | {mem_large.median / mem_middle.median:.2f} | |"
        )
    w("")


def bare_reads(w: Write, f: Figures) -> None:
    """The ceiling: what bare boto3 loops read from this endpoint, shard after shard and in parallel."""
    S = f.by_size
    w("### 1. The limit here: bare boto3 reads (GetShardIterator + GetRecords, 10,000 a call), no Spark, no writes\n")
    w(
        "Timed from the first call to the last, after imports and connecting. CPU: the readers' own; the emulator's (kinesalite, one node process) beside it.\n"
    )
    w("| records | way | seconds | records/s | MB/s | readers' CPU s | emulator CPU s |")
    w("|---|---|---|---|---|---|---|")
    for s in f.sizes:
        n, b = S[s]["records"], S[s]["bytes"]
        for key, name in (("bare_sequential", "shard after shard, 1 process"), ("bare_parallel", "1 process per shard, up to the cores")):
            runs = S[s]["runs"][key]
            w(f"| {n:,} | {name} | {spread(runs, lambda r: r['seconds']).fmt('.2f')} | {spread(runs, per_s(n)).fmt(',.0f')} | "
              f"{spread(runs, lambda r, b=b: b / 1e6 / r['seconds']).fmt('.1f')} | {spread(runs, lambda r: r['cpu']).fmt('.2f')} | "
              f"{spread(runs, lambda r: r['emulator_cpu']).fmt('.2f')} |")  # fmt: skip
    w("")


def end_to_end(w: Write, f: Figures) -> None:
    """The naive exporter against the replay job, process start to exit, at every size."""
    S = f.by_size
    w("### 2 and 3. End to end: the naive exporter (boto3 + pyarrow, one process) and the replay job (spark-submit to result manifest)\n")
    counted = (
        "every process each one started, counted by a cgroup of its own (cpuacct), the Python workers that the JVM kills unreaped included"
        if f.cpu_by_cgroup
        else "the process and every descendant it reaped (wait4), or the sampled processes' sum where that is more"
    )
    w(f"Both timed from process start to exit, start-up included. CPU: {counted}; the emulator's apart.\n")
    w(
        "| records | naive s | naive records/s | replay job s | replay job records/s | naive ÷ replay | CPU s per M records: naive | replay job | emulator (naive / replay) |"
    )
    w("|---|---|---|---|---|---|---|---|---|")
    for s in f.sizes:
        n, R = S[s]["records"], S[s]["runs"]
        nv, rp = spread(R["naive"], lambda r: r["seconds"]), spread(R["replay_job"], lambda r: r["seconds"])
        w(f"| {n:,} | {nv.fmt()} | {spread(R['naive'], per_s(n)).fmt(',.0f')} | {rp.fmt()} | {spread(R['replay_job'], per_s(n)).fmt(',.0f')} | "
          f"{nv.median / rp.median:.2f} | {spread(R['naive'], lambda r, n=n: r['cpu'] / n * 1e6).fmt(',.0f')} | "
          f"{spread(R['replay_job'], lambda r, n=n: r['cpu'] / n * 1e6).fmt(',.0f')} | "
          f"{spread(R['naive'], lambda r: r['emulator_cpu']).median:.1f} / {spread(R['replay_job'], lambda r: r['emulator_cpu']).median:.1f} |")  # fmt: skip


def crossover_model(w: Write, f: Figures) -> None:
    """The crossover's model spelled out, and the replay job's CPU beyond its fixed cost."""
    c, n_large = f.crossover, f.n_large
    crossover = c.records
    fixed_r, per_r, fixed_n, per_n = c.fixed_r, c.per_r, c.fixed_n, c.per_n
    cpu_one = spread(f.one, lambda r: r["cpu"]).median
    marginal_cpu = (spread(f.large_runs["replay_job"], lambda r: r["cpu"]).median - cpu_one) / n_large * 1e6
    w(f"\nThe crossover model, from the run above: the replay job costs {fixed_r:.1f}s fixed (its end-to-end time on one record) "
      f"plus {per_r * 1e6:.1f}s per million records (what {n_large:,} records add to that); the naive exporter {fixed_n:.1f}s "
      f"(start-up) plus {per_n * 1e6:.1f}s per million (its loop). "
      + ("On these figures the replay job is never the faster one: it also costs more per record. "
         if math.isinf(crossover) else f"The replay job is the faster one from about {max(crossover, 0):,.0f} records. ")
      + "Sizes ran minutes apart under different loads "
      "(listed above), so this uses one size's side-by-side figures, not a fit across sizes.\n")  # fmt: skip
    w(f"CPU beyond the fixed cost: the replay job used {cpu_one:.1f} CPU-seconds on one record (JVM start, Spark, Python workers) and "
      f"{marginal_cpu:.1f} CPU-seconds per million records beyond it at {n_large:,} records; the naive exporter "
      f"{f.cpu_naive.median:.1f} per million, start-up included.\n")  # fmt: skip


def phases(w: Write, f: Figures) -> None:
    """Where the replay job's time goes, by the phases it reports, at every size and on one record."""
    one = f.one
    rw_one = spread(one, lambda r: r["read_write"]).median
    w("Where the replay job's time goes (from the job's own `phases` line; launch is spark-submit to the driver's first line):\n")
    w(
        "| records | launch | session | read and write | of which tasks' start | of which from the first call | summary (read-back) | manifest | records/s from the first call | ÷ parallel bare read |"
    )
    w("|---|---|---|---|---|---|---|---|---|---|")
    for block in f.blocks:
        n, R = block["records"], block["runs"]["replay_job"]
        bare = block["runs"].get("bare_parallel")
        ratio = f"{spread(R, lambda r, n=n: n / steady(r)).median / spread(bare, per_s(n)).median:.2f}" if bare else ""
        w(f"| {n:,} | {spread(R, lambda r: r['launch']).fmt()} | {spread(R, lambda r: r['session']).fmt()} | {spread(R, lambda r: r['read_write']).fmt()} | "
          f"{spread(R, lambda r: r['read_write'] - steady(r)).fmt()} | {spread(R, steady).fmt()} | "
          f"{spread(R, lambda r: r['summary']).fmt()} | {spread(R, lambda r: r['manifest']).fmt('.2f')} | "
          f"{spread(R, lambda r, n=n: n / steady(r)).fmt(',.0f')} | {ratio} |")  # fmt: skip
    w(f"\nOn one record the read-and-write phase takes {rw_one:.1f}s, {spread(one, lambda r: r['read_write'] - steady(r)).median:.1f}s of it "
      "before the first GetRecords: Spark's job start and the Python workers' start-up (interpreter, imports of pyspark, pyarrow, "
      "boto3 and the library). The target compares the part from the first call on, which is how the bare reads are timed "
      "(after their imports and connecting); the start-up is in the end-to-end figures.\n")  # fmt: skip


def cpu_by_process(w: Write, f: Figures) -> None:
    """The replay job's CPU split between the JVM and the Python processes, at every size and on one record."""
    workers = (
        "the Python workers' the rest of the cgroup's total, as the samples miss a worker's last moments"
        if f.cpu_by_cgroup
        else "a process's last moments are missed; the total is wait4's, or the samples' where that is more"
    )
    w(f"The replay job's CPU by process (as sampled every 50 ms; {workers}):\n")
    w("| records | JVM (driver and tasks) | Python workers | Python driver | total |")
    w("|---|---|---|---|---|")
    for block in f.blocks:
        R = block["runs"]["replay_job"]
        w(f"| {block['records']:,} | " + " | ".join(spread(R, lambda r, k=k: r.get(f"cpu_{k}", 0.0)).fmt() for k in ("jvm", "python_workers", "python_driver"))
          + f" | {spread(R, lambda r: r['cpu']).fmt()} |")  # fmt: skip
    w("")


def jvm_options(w: Write, f: Figures) -> None:
    """The JVM's options side by side, at the largest size and on one record, and what recording the archive cost."""
    results = f.results
    w("The JVM's options, side by side in the same runs. The job's default for local masters is the C1 compiler only and the serial "
      "collector (`-XX:TieredStopAtLevel=1 -XX:+UseSerialGC`) with the class-data-sharing archive; a pipeline that sets "
      "`spark.driver.defaultJavaOptions` replaces both. The JVM's own defaults here are C1 then C2, and G1:\n")  # fmt: skip
    w("| records | options | end to end s | CPU s | JVM CPU s | from the first call s |")
    w("|---|---|---|---|---|---|")
    variants = (("replay_job", "C1 only, serial GC, archive (default)"), ("replay_job_no_archive", "C1 only, serial GC, no archive"),
                ("replay_job_jvm_defaults", "the JVM's defaults, no archive"))  # fmt: skip
    for block in (f.by_size[f.largest], results.get("single")):
        for key, name in variants if block and block["runs"].get("replay_job_no_archive") else ():
            R = block["runs"][key]
            w(f"| {block['records']:,} | {name} | {spread(R, lambda r: r['seconds']).fmt()} | {spread(R, lambda r: r['cpu']).fmt()} | "
              f"{spread(R, lambda r: r.get('cpu_jvm', 0.0)).fmt()} | {spread(R, steady).fmt('.2f')} |")  # fmt: skip
    if "archive" in results:
        a = results["archive"]
        w(f"\nRecording the archive, once per machine (and again after an upgrade of Java or Spark): the warm-up job that the first "
          f"replay task runs before its replay took {a['seconds']:.1f}s and {a['cpu']:.1f} CPU-seconds.")  # fmt: skip
    w("")


def planning_and_memory(w: Write, f: Figures) -> None:
    """The planner's time, CPU and Kinesis calls, and the replay job's memory, at every size."""
    S = f.by_size
    w("### Planning and memory\n")
    w("Planning: a dry run of the planner on the whole stream (4 shards, no checkpoints), just after a tail of 10 records per shard "
      "arrived, as on a live stream: it reads each shard's first record and finds its newest with a few `AT_TIMESTAMP` probes of 5 records.  ")  # fmt: skip
    w("Memory: the spark-submit process tree sampled every 50 ms; a Python worker is Spark's Python daemon (`pyspark.daemon`, or the job's `python_daemon`) or a worker it forked. "
      "The target figure is the largest single worker (one task reads one shard range); RSS, so forked workers' shared pages count in each.\n")  # fmt: skip
    w(
        "| records | planning s | emulator CPU s while planning | planner's own CPU s | Kinesis calls (records read) | largest Python worker MiB | all Python workers MiB | whole job tree MiB |"
    )
    w("|---|---|---|---|---|---|---|---|")
    for s in f.sizes:
        n, R = S[s]["records"], S[s]["runs"]
        w(f"| {n:,} | {spread(R['plan'], lambda r: r['seconds']).fmt('.3f')} | "
          f"{spread(R['plan'], lambda r: r['emulator_cpu']).fmt('.2f')} | {spread(R['plan'], lambda r: r.get('cpu', 0.0)).fmt('.3f')} | "
          f"{calls(R['plan'][-1])} | {spread(R['replay_job'], lambda r: r['worker_peak'] / MIB).fmt('.0f')} | "
          f"{spread(R['replay_job'], lambda r: r['workers_peak'] / MIB).fmt('.0f')} | {spread(R['replay_job'], lambda r: r['tree_peak'] / MIB).fmt('.0f')} |")  # fmt: skip
    w("")


def dag_cycle(w: Write, f: Figures) -> None:
    """The full DAG cycle by task, at every size and on one record, where it was measured."""
    w("### The full DAG cycle (dag.test in one warm process: plan → replay → verify → commit, then check)\n")
    w(
        "Each run is a new pipeline that plans the whole stream (backlog and planning tails) as one batch; its output is checked to hold every record once.\n"
    )
    w("| records | cycle s | plan | replay | verify | commit | check | Airflow between tasks |")
    w("|---|---|---|---|---|---|---|---|")
    for block in f.blocks:
        R = block["runs"].get("dag_cycle")
        if not R:
            continue
        gap = spread(R, lambda r: r["seconds"] - sum(r.get(f"task_{t}", 0.0) for t in TASKS))
        w(f"| {block['records']:,} | {spread(R, lambda r: r['seconds']).fmt()} | "
          + " | ".join(spread(R, lambda r, t=t: r.get(f"task_{t}", 0.0)).fmt() for t in TASKS) + f" | {gap.fmt()} |")  # fmt: skip
    w("")


def fixed_cost_parts(job: list[dict[str, Any]], cyc: list[dict[str, Any]], job_total: float, replay_task: float) -> list[tuple[str, float]]:
    """One record's DAG cycle cut into its parts (median seconds each), the job's from its phases, the tasks' from the cycle."""
    parts = [
        (
            "plan task (list shards, first record and tip of each shard, one DynamoDB transaction)",
            median(cyc, lambda r: r.get("task_plan", 0.0)),
        ),
        ("Spark start: spark-submit, JVM, Python driver (launch)", median(job, lambda r: r["launch"])),
        ("Spark start: SparkSession (session)", median(job, lambda r: r["session"])),
        (
            "tasks' start: Spark's job start, the Python workers' start-up and imports, to the first Kinesis call",
            median(job, lambda r: r["read_write"] - steady(r)),
        ),
        ("read and write from the first call: GetShardIterator, GetRecords, Parquet, the swap into place", median(job, steady)),
        ("summary read-back and manifest", median(job, lambda r: r["summary"] + r["manifest"])),
        ("verify task", median(cyc, lambda r: r.get("task_verify", 0.0))),
        ("commit task", median(cyc, lambda r: r.get("task_commit", 0.0))),
        ("check task", median(cyc, lambda r: r.get("task_check", 0.0))),
    ]
    in_job = sum(p[1] for p in parts[1:6])
    parts.insert(6, ("Spark stop, and the job's time outside its phases", max(0.0, job_total - in_job)))
    parts.insert(7, ("the replay task beyond the job run alone: another moment's load, the retention check, packaging",
                     max(0.0, replay_task - job_total)))  # fmt: skip
    return parts


def fixed_cost(w: Write, f: Figures) -> None:
    """Where the time of a DAG cycle carrying a single record goes, largest part first (if that cycle was measured)."""
    if "single" not in f.results or not f.results["single"]["runs"].get("dag_cycle"):
        return
    one = f.results["single"]["runs"]
    job = one["replay_job"]
    cyc = one["dag_cycle"]
    w("### The fixed cost of one DAG cycle carrying a single record\n")
    total = median(cyc, lambda r: r["seconds"])
    replay_task = median(cyc, lambda r: r.get("task_replay", 0.0))
    job_total = median(job, lambda r: r["seconds"])
    parts = fixed_cost_parts(job, cyc, job_total, replay_task)
    w(
        f"Median DAG cycle: {total:.1f}s; its replay task {replay_task:.1f}s; the replay job alone, run by itself on the same record, {job_total:.1f}s.\n"
    )
    w("| part | seconds | share of the cycle |")
    w("|---|---|---|")
    for name, sec in sorted(parts, key=lambda p: -p[1]):
        w(f"| {name} | {sec:.1f} | {sec / total:.0%} |")
    w(f"| Airflow between tasks (dag.test) | {max(0.0, total - sum(p[1] for p in parts)):.1f} | |")
    w("")


def real_kinesis(w: Write, f: Figures) -> None:
    """What the measured rate means against real Kinesis's per-shard limit, with the shard and core counts worked out."""
    per_task = f.read_write.median * f.results["record_bytes"] / MIB / 2  # two tasks at once here
    w("### What the figures mean on real Kinesis\n")
    w(f"Here one replay task processed about {per_task:.1f} MiB/s (the largest size's read-and-write rate over its two concurrent tasks, "
      "on cores it shared with the emulator). Real Kinesis serves each shard at most 2 MiB/s, so a task is bound by "
      f"{'the shard limit' if per_task >= KINESIS_READ_MIB_S else 'its own processing'} at {min(per_task, KINESIS_READ_MIB_S):.1f} MiB/s.\n")  # fmt: skip
    per_shard_day = 86_400 * 1.0  # MiB: a shard written at 1 MiB/s for a day
    rate = min(per_task, KINESIS_READ_MIB_S)
    day = per_shard_day / rate
    w(f"- One day of a shard written at 1 MiB/s is {per_shard_day / 1024:.1f} GiB. At 2 MiB/s it reads in 12.0 hours at best; "
      f"at the rate measured here, {day / 3600:.1f} hours on one core.")  # fmt: skip
    w("- One task reads one shard range, so shards run in parallel up to the executor cores, then in waves: "
      "time ≈ ⌈shards ÷ cores⌉ × (one shard's time) + the fixed cost of a cycle. More cores than shards gain nothing.\n")  # fmt: skip
    w("| shards | executor cores | waves | a day of 1 MiB/s per shard takes |")
    w("|---|---|---|---|")
    for shards, cores in ((1, 1), (4, 4), (16, 4), (16, 16), (64, 16), (64, 64)):
        waves = math.ceil(shards / cores)
        w(f"| {shards} | {cores} | {waves} | {waves * day / 3600:.1f} h |")
    w("\nRegular cycles keep up when each one finishes within its interval: a cycle of T seconds on shards written at 1 MiB/s reads "
      f"T MiB per shard, about T ÷ {rate:.1f} seconds, plus the fixed cost, so the interval must exceed the fixed cost ÷ "
      f"(1 − 1 ÷ {rate:.1f}).")  # fmt: skip


PARTS: tuple[Callable[[Write, Figures], None], ...] = (
    header, targets_speed, targets_scale, bare_reads, end_to_end, crossover_model, phases, cpu_by_process, jvm_options,
    planning_and_memory, dag_cycle, fixed_cost, real_kinesis,
)  # fmt: skip
