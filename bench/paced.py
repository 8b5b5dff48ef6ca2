"""`make bench-paced`: the replay against the physical limit of a stream that holds every shard to Kinesis's read limits.

On a real stream each shard serves at most 2 MB/s (and 5 GetRecords calls a second) to every reader, so reading a
backlog cannot take less than its largest shard's bytes / 2 MB/s, however many cores read it: the physical limit.
This bench puts the project's throttling proxy (a process of its own, as in bench/planning.py) in front of
kinesalite, fills every shard with many calls' worth of records, and measures side by side, in one run, what each
way takes of that limit:

- bare parallel reads: boto3 GetRecords loops, a thread per shard, in one process per core; no writes;
- the naive exporter: one process reading shard after shard into Parquet (stopped after ``--naive-limits`` times
  the limit: its rate is what it read by then);
- the replay job: spark-submit on the batch's ranges with the pipeline's read budget at the proxy's limit, timed
  end to end and from its first Kinesis call to its write's end (its read and write, as `make bench` times it);
- a full DAG cycle: dag.test() plans, replays, verifies and commits the whole stream through the proxy.

kinesalite is one node process on one core, and it serves every way's reads: when it could not serve every shard at
Kinesis's 2 MiB/s, the per-shard limit is scaled down by a factor (the same for every way, and stated with the
figures), and so is the most records one GetRecords call returns (Kinesis: 10,000), so that one call's burst is as
many seconds of a shard's budget as on Kinesis. Each way's output is checked record for record against what
Kinesis acknowledged. Writes BENCHMARKS.md's paced section; raw results go to .stack/bench-paced/results.json.

    python bench/paced.py --scenarios 8:60:4 32:20:16 [--cores 2] [--shared 4:24:4]
    python bench/paced.py --scenarios --shared 4:24:4     # the shared-stream scenario alone

A scenario is SHARDS:MIB_PER_SHARD:SCALE (the per-shard limit is 2 MiB/s / SCALE). ``--shared`` adds, in the same run,
the shared-stream scenario (bench/shared.py): the replay's reads by GetRecords and over enhanced fan-out, each beside
another consumer that polls the same shards, with its own section of BENCHMARKS.md and .stack/bench-paced/shared.json.
"""

# Markdown table rows are long lines, and the prose uses typographic signs on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "dags"), str(ROOT / "tests"), str(HERE)]

import report  # noqa: E402
from measure import run_tracked  # noqa: E402
from planning import ProxyProcess  # noqa: E402
from run import SPARK_CONF, airflow_env, job_phases, machine, say, start_together  # noqa: E402

from kinesis_replay.launchers import jvm_archive  # noqa: E402
from stack import local_stack  # noqa: E402

WORK = ROOT / ".stack" / "bench-paced"
MIB = 2**20
KINESIS_BYTES_PER_SECOND = 2 * MIB  # per shard
KINESIS_RECORDS_PER_CALL = 10_000
RECORD_BYTES = 1024
PUT_BATCH = 500  # PutRecords takes 500 records a call
PARTITION_KEY = "k"  # the proxy counts a record's bytes as its data and its partition key, as Kinesis does


@dataclass(frozen=True)
class Scenario:
    shards: int
    mib_per_shard: float
    scale: float  # the per-shard limits are Kinesis's / scale

    @property
    def bytes_per_second(self) -> float:
        return KINESIS_BYTES_PER_SECOND / self.scale

    @property
    def records_per_call(self) -> int:
        return max(1, int(KINESIS_RECORDS_PER_CALL / self.scale))

    @classmethod
    def parse(cls, text: str) -> Scenario:
        shards, mib, scale = text.split(":")
        return cls(int(shards), float(mib), float(scale))


@dataclass
class Shard:
    """What Kinesis acknowledged for one shard: its records, their bytes (data and key), the first and last sequence numbers."""

    shard_id: str
    records: int = 0
    data_bytes: int = 0
    first: int | None = None
    last: int | None = None

    @property
    def bytes(self) -> int:
        return self.data_bytes + self.records * len(PARTITION_KEY)


def produce(client: Any, stream: str, scenario: Scenario) -> dict[str, Shard]:
    """Fill every shard with ``mib_per_shard`` of 1 KiB records of random bytes, PUT_BATCH a call across the shards."""
    listed = client.list_shards(StreamName=stream)["Shards"]
    keys = {s["ShardId"]: s["HashKeyRange"]["StartingHashKey"] for s in listed}
    shards = {shard_id: Shard(shard_id) for shard_id in keys}
    per_shard = int(scenario.mib_per_shard * MIB / (RECORD_BYTES + len(PARTITION_KEY)))
    wanted = [shard_id for _ in range(per_shard) for shard_id in keys]
    for first in range(0, len(wanted), PUT_BATCH):
        pending = wanted[first : first + PUT_BATCH]
        while pending:
            blob = os.urandom(RECORD_BYTES * len(pending))
            datas = [blob[i * RECORD_BYTES : (i + 1) * RECORD_BYTES] for i in range(len(pending))]
            response = client.put_records(
                StreamName=stream,
                Records=[
                    {"PartitionKey": PARTITION_KEY, "ExplicitHashKey": keys[s], "Data": d} for s, d in zip(pending, datas, strict=True)
                ],
            )
            again = []
            for shard_id, data, result in zip(pending, datas, response["Records"], strict=True):
                if "SequenceNumber" not in result:
                    again.append(shard_id)
                    continue
                shard, seq = shards[result["ShardId"]], int(result["SequenceNumber"])
                shard.records += 1
                shard.data_bytes += len(data)
                shard.first = seq if shard.first is None else min(shard.first, seq)
                shard.last = seq if shard.last is None else max(shard.last, seq)
            pending = again
    return shards


class Paced:
    def __init__(self, stack: Any, proxy: ProxyProcess, scenario: Scenario, stream: str, shards: dict[str, Shard], cores: int) -> None:
        from kinesis_replay.launchers import spark_submit

        self.stack, self.proxy, self.scenario, self.stream, self.shards, self.cores = stack, proxy, scenario, stream, shards, cores
        # Every client of every way connects to the proxy: the job's spec and the DAG's connection both name it.
        self.proxied = local_stack.Stack(proxy.url, stack.moto_url)
        self.env = {**os.environ, **self.proxied.env()}
        self.library = spark_submit.package_library(WORK / "kinesis_replay.zip")

    @property
    def limit_seconds(self) -> float:
        """The physical limit: the largest shard's bytes at its read limit (every shard is read at once)."""
        return max(s.bytes for s in self.shards.values()) / self.scenario.bytes_per_second

    @property
    def records(self) -> int:
        return sum(s.records for s in self.shards.values())

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards.values())

    def ranges(self) -> list[dict[str, Any]]:
        return [
            {"shard_id": s.shard_id, "start": str(s.first), "end": str(s.last)}
            for s in sorted(self.shards.values(), key=lambda s: s.shard_id)
        ]

    def read_config(self) -> dict[str, Any]:
        """The pipeline's read budget: the proxy's limits."""
        return {"bytes_per_second": self.scenario.bytes_per_second, "get_records_per_second": 5, "get_shard_iterator_per_second": 5}

    def _throttled(self) -> int:
        return sum(c["throttled"] for c in self.proxy.counters().values())

    # -- the ways ----------------------------------------------------------------------------------------------------

    def bare(self) -> dict[str, Any]:
        """Every shard at once: a thread per shard, the shards dealt to one process per core."""
        job = WORK / "job.json"
        job.write_text(json.dumps({"stream": self.stream, "endpoint_url": self.proxy.url, "ranges": self.ranges()}))
        shard_ids = sorted(self.shards)
        groups = [g for g in (shard_ids[i :: self.cores] for i in range(self.cores)) if g]
        command = [sys.executable, str(HERE / "loops.py"), "bare", "--job", str(job), "--threads", "--shards"]
        workers = [
            subprocess.Popen([*command, ",".join(g)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env)
            for g in groups
        ]
        results = start_together(workers, self.proxy.clear)
        got = {k: v for r in results for k, v in r["shards"].items()}
        for s in self.shards.values():
            g = got[s.shard_id]
            if (g["records"], g["bytes"], int(g["first"]), int(g["last"])) != (s.records, s.data_bytes, s.first, s.last):
                raise RuntimeError(f"bare read of {s.shard_id} got {g}, expected {s}")
        seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
        return {"seconds": seconds, "cpu": sum(r["cpu"] for r in results), "throttled": self._throttled(), "records": self.records}

    def naive(self, limits: float) -> dict[str, Any]:
        """Shard after shard in one process, stopped after ``limits`` times the physical limit if not done by then."""
        job = WORK / "job.json"
        job.write_text(json.dumps({"stream": self.stream, "endpoint_url": self.proxy.url, "ranges": self.ranges()}))
        out = WORK / "naive"
        shutil.rmtree(out, ignore_errors=True)
        self.proxy.clear()
        deadline = str(limits * self.limit_seconds)
        done = run_tracked(
            [sys.executable, str(HERE / "loops.py"), "naive", "--job", str(job), "--out", str(out), "--deadline", deadline], self.env
        )
        if done.code != 0:
            raise RuntimeError(f"the naive exporter failed:\n{done.output[-3000:]}")
        loop = json.loads(done.output.strip().splitlines()[-1])
        rows = sum(r["records"] for r in loop["shards"].values())
        if loop["complete"] and rows != self.records:
            raise RuntimeError(f"the naive exporter wrote {rows} rows, expected {self.records}")
        shutil.rmtree(out, ignore_errors=True)
        return {"seconds": loop["ended"] - loop["started"], "bytes": loop["bytes"], "complete": loop["complete"], "cpu": done.cpu,
                "throttled": self._throttled(), "records": rows}  # fmt: skip

    def pipeline_entry(self, name: str, output: Path, table: str) -> dict[str, Any]:
        from stack.harness import pipeline_entry

        # No cap: the batch takes the whole backlog, however slow the scaled-down budget makes it.
        entry = pipeline_entry(name, self.stream, output, table, read=self.read_config(), max_batch={"read_minutes": 24 * 60})
        entry["spark"] = {"master": f"local[{self.cores}]", "conf": dict(SPARK_CONF)}
        return entry

    def replay_job(self) -> dict[str, Any]:
        """spark-submit the replay job on the backlog's ranges, exactly as the replay task does; checked against the acknowledged records."""
        from kinesis_replay.adapters.files import read_result
        from kinesis_replay.adapters.layout import batch_path, data_path
        from kinesis_replay.core.config import parse_config
        from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint
        from kinesis_replay.core.ranges import SequenceRange
        from kinesis_replay.launchers import spark_submit

        output = WORK / "replay"
        shutil.rmtree(output, ignore_errors=True)
        pipeline = parse_config({"pipelines": [self.pipeline_entry(f"p{uuid.uuid4().hex[:8]}", output, "unused")]})[0]
        spec = JobSpec(
            pipeline.name, self.stream, 1, str(output),
            tuple(SequenceRange(r["shard_id"], int(r["start"]), int(r["end"])) for r in self.ranges()),
            kinesis=KinesisEndpoint(local_stack.REGION, self.proxy.url), read=pipeline.read,
        )  # fmt: skip
        spec_path = WORK / "batch.json"
        spec_path.write_text(spec.to_json())
        jobs = ROOT / "spark_jobs"
        command = spark_submit.build_command(pipeline, 1, spec_path, jobs / "replay_job.py", [self.library, jobs / "kinesis_source.py"])
        env = spark_submit.submit_env(pipeline.spark.master, self.proxied.env())
        self.proxy.clear()
        submitted = time.time()
        done = run_tracked(command, env)
        (WORK / f"replay-job-{self.scenario.shards}.log").write_text(done.output)
        if done.code != 0:
            raise RuntimeError(f"the replay job failed:\n{done.output[-3000:]}")
        self._check_result(read_result(str(output), 1), "the replay job")
        result = read_result(str(output), 1)
        folder = data_path(str(output), 1, result.attempt) if result.attempt else batch_path(str(output), 1)
        files = sorted(p.name for p in Path(folder).glob("*.parquet"))
        phases = job_phases(done)
        shutil.rmtree(output, ignore_errors=True)
        return {
            "seconds": done.seconds, "cpu": done.cpu, "throttled": self._throttled(), "records": self.records, "files": len(files),
            "ranges": range_lines(done.output),
            "worker_peak": done.worker_peak, **{f"cpu_{kind}": s for kind, s in done.cpu_by_kind.items()},
            "launch": phases.pop("started_at") - submitted, **phases,
        }  # fmt: skip

    def _check_result(self, result: Any, what: str) -> None:
        got = {s.shard_id: (s.records, s.bytes, s.first_sequence_number, s.last_sequence_number) for s in result.shards}
        want = {s.shard_id: (s.records, s.data_bytes, s.first, s.last) for s in self.shards.values()}
        if got != want:
            raise RuntimeError(f"{what}'s manifest is not the acknowledged records: {got} != {want}")

    def dag_cycle(self) -> dict[str, Any]:
        """One regular DAG run with dag.test() on a new pipeline: plan, replay, verify and commit the whole backlog."""
        from kinesis_replay.adapters.files import read_result
        from stack.harness import load_dags

        name = f"p{uuid.uuid4().hex[:8]}"
        output = WORK / "dag" / name
        entry = self.pipeline_entry(name, output, f"bench-{name}")
        dag = load_dags(WORK / "pipelines.yaml", entry)[f"kinesis_replay_{name}"]
        saved = dict(os.environ)
        os.environ.update(self.proxied.env())  # the DAG's aws_default connection names the proxy as Kinesis's endpoint
        try:
            self.proxy.clear()
            started = time.monotonic()
            run = dag.test()
            seconds = time.monotonic() - started
        finally:
            os.environ.clear()
            os.environ.update(saved)
        tasks = {ti.task_id: ti for ti in run.get_task_instances()}
        states = {t: str(ti.state) for t, ti in tasks.items()}
        if str(run.state) != "success" or any(states.get(t) != "success" for t in ("plan", "replay", "verify", "commit")):
            raise RuntimeError(f"the DAG cycle did not commit its batch: {run.state}, {states}")
        self._check_result(read_result(str(output), 1), "the DAG cycle")
        shutil.rmtree(output, ignore_errors=True)
        durations = {t: (ti.end_date - ti.start_date).total_seconds() for t, ti in tasks.items() if ti.start_date and ti.end_date}
        return {"seconds": seconds, "throttled": self._throttled(), **{f"task_{t}": d for t, d in durations.items()}}


def measure_scenario(stack: Any, scenario: Scenario, cores: int, naive_limits: float) -> dict[str, Any]:
    from stack.kinesis_proxy import ProxyLimits
    from stack.producer import ensure_stream, kinesis_client

    load = [float(Path("/proc/loadavg").read_text().split()[0])]
    limits = ProxyLimits(bytes_per_second=scenario.bytes_per_second, max_records_per_call=scenario.records_per_call)
    proxy = ProxyProcess(stack.kinesis_url, limits)
    try:
        producer = kinesis_client(stack.kinesis_url)
        stream = f"paced-{scenario.shards}-{uuid.uuid4().hex[:6]}"
        ensure_stream(producer, stream, scenario.shards)
        started = time.monotonic()
        shards = produce(producer, stream, scenario)
        produced = time.monotonic() - started
        paced = Paced(stack, proxy, scenario, stream, shards, cores)
        say(f"{scenario}: {paced.records:,} records, {paced.total_bytes / MIB:.0f} MiB in {produced:.0f}s; "
            f"the physical limit is {paced.limit_seconds:.1f}s")  # fmt: skip
        out: dict[str, Any] = {"shards": scenario.shards, "mib_per_shard": scenario.mib_per_shard, "scale": scenario.scale,
                               "bytes_per_second": scenario.bytes_per_second, "records_per_call": scenario.records_per_call,
                               "records": paced.records, "bytes": paced.total_bytes, "limit_seconds": paced.limit_seconds,
                               "produce_seconds": produced}  # fmt: skip
        for way, measure in (("bare", paced.bare), ("naive", lambda: paced.naive(naive_limits)),
                             ("replay_job", paced.replay_job), ("dag_cycle", paced.dag_cycle)):  # fmt: skip
            out[way] = measure()
            load.append(float(Path("/proc/loadavg").read_text().split()[0]))
            say(f"{scenario.shards} shards: {way} {out[way]['seconds']:.1f}s ({ratio(out, way):.2f} × the limit)")
        producer.delete_stream(StreamName=stream)  # kinesalite frees its records
        out["load"] = load
        return out
    finally:
        proxy.stop()


# A range reader's last line (spark_jobs/kinesis_source.py): its time, and how much of it went to waiting for the budget.
_DONE_LINE = re.compile(r": done, (\d+) records, [\d.]+ KiB in ([\d.]+)s .*?, ([\d.]+)s pacing to the budget")


def range_lines(log: str) -> list[dict[str, float]]:
    """Each range's read time and pacing, from the job's log."""
    return [{"records": int(m[1]), "seconds": float(m[2]), "paced": float(m[3])} for m in _DONE_LINE.finditer(log)]


def ranges_of(result: dict[str, Any]) -> list[dict[str, float]]:
    job = result["replay_job"]
    if "ranges" in job:
        return list(job["ranges"])
    log = WORK / f"replay-job-{result['shards']}.log"
    return range_lines(log.read_text()) if log.exists() else []


def ratio(result: dict[str, Any], way: str, seconds: float | None = None) -> float:
    """A way's share of the physical limit: the limit's seconds over its own (for a stopped naive run, its rate over the limit's)."""
    r = result[way]
    if way == "naive" and not r["complete"]:
        return (r["bytes"] / r["seconds"]) / (result["bytes"] / result["limit_seconds"])
    return float(result["limit_seconds"] / (seconds if seconds is not None else r["seconds"]))


def read_write_seconds(job: dict[str, Any]) -> float:
    """The replay job's read and write, from its first Kinesis call to its write's end (as `make bench` times it)."""
    return float(job.get("from_first_call") or job["read_write"])


TARGETS = {(8, "replay_job"): 0.8, (8, "dag_cycle"): 0.7, (32, "replay_job"): 0.6}


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "## Reading at the stream's limit (make bench-paced)",
        "",
        f"The project's throttling proxy (a process of its own) holds every shard to Kinesis's read limits, scaled down by the "
        f"factor in each table (the same for every way): 2 MiB/s and 10,000 records a GetRecords call, each divided by it; "
        f"5 GetRecords and 5 GetShardIterator calls a second. Scaled because kinesalite, one node process, serves every way's "
        f"reads: at Kinesis's own limits it could not serve 8 shards at once. Records are {RECORD_BYTES:,} bytes of random data; "
        "each shard holds many times what one call may return, so that no way reads a shard in one burst. "
        f"**The physical limit** is the largest shard's bytes at its read limit: no reader can be faster for long "
        "(one call's burst aside: a reader may be ahead of the rate by one call, as on Kinesis). A way's figure is the limit's "
        "time over its own. The replay job and the DAG cycle read with the pipeline's budget set to the proxy's limit, "
        f"`spark.master: local[{results['cores']}]`. Each way's output is checked against the records Kinesis acknowledged. "
        f"{m['cpu']}, shared with other work: 1-minute load average {results['load_text']} during the run.",
    ]
    for result in results["scenarios"]:
        job = result["replay_job"]
        rw = read_write_seconds(job)
        dag = result["dag_cycle"]
        naive = result["naive"]
        cpu_per_k = 1000 / result["records"]
        naive_note = (
            ""
            if naive["complete"]
            else f" (stopped after {naive['seconds']:.0f}s, {naive['bytes'] / MIB:.0f} of {result['bytes'] / MIB:.0f} MiB read: its rate)"
        )
        dag_tasks = ", ".join(f"{t} {dag[f'task_{t}']:.0f}" for t in ("plan", "replay", "verify", "commit") if f"task_{t}" in dag)
        lines += [
            "",
            f"### {result['shards']} shards of {result['mib_per_shard']:.0f} MiB, {results['cores']} cores",
            "",
            f"Per-shard limit {result['bytes_per_second'] / MIB:.3g} MiB/s (Kinesis's ÷ {result['scale']:g}) and "
            f"{result['records_per_call']:,} records a call; {result['records']:,} records, {result['bytes'] / MIB:.0f} MiB in all.",
            "",
            "| way | seconds | of the limit | CPU s / 1,000 records | throttled calls |",
            "|---|---|---|---|---|",
            f"| the physical limit | {result['limit_seconds']:.1f} | 1.00 × | | |",
            f"| bare parallel reads (a thread per shard, a process per core; no writes) | {result['bare']['seconds']:.1f} | "
            f"{ratio(result, 'bare'):.2f} × | {result['bare']['cpu'] * cpu_per_k:.3f} | {result['bare']['throttled']} |",
            f"| naive exporter (one process, shard after shard){naive_note} | {naive['seconds']:.1f} | {ratio(result, 'naive'):.2f} × | "
            f"{naive['cpu'] / max(1, naive['records']) * 1000:.3f} | {naive['throttled']} |",
            f"| **replay job: read and write** (first Kinesis call to the write's end) | {rw:.1f} | **{ratio(result, 'replay_job', rw):.2f} ×** | | |",
            f"| replay job end to end (spark-submit to exit; {job['files']} data files) | {job['seconds']:.1f} | {ratio(result, 'replay_job'):.2f} × | "
            f"{job['cpu'] * cpu_per_k:.3f} | {job['throttled']} |",
            f"| **full DAG cycle** ({dag_tasks}) | {dag['seconds']:.1f} | **{ratio(result, 'dag_cycle'):.2f} ×** | | {dag['throttled']} |",
        ]
        ranges = ranges_of(result)
        if ranges:
            took = sorted(r["seconds"] for r in ranges)
            paced = sorted(r["paced"] for r in ranges)
            lines.append(
                f"\nIn the replay job, each range took {took[0]:.0f} to {took[-1]:.0f} s to read (its limit: {result['limit_seconds']:.0f} s), "
                f"{paced[0]:.0f} to {paced[-1]:.0f} s of it waiting for its shard's budget; the rest is the calls themselves "
                "(kinesalite, the proxy, and parsing pages in the task's Python worker)."
            )
        for (shards, way), target in TARGETS.items():
            if shards == result["shards"]:
                got = ratio(result, way, rw if way == "replay_job" else None)
                what = "the replay job's read and write" if way == "replay_job" else "a full DAG cycle"
                lines.append(
                    f"\nTarget: {what} at least {target} × the limit: {got:.2f} × ({'**met**' if got >= target else '**missed**'})."
                )
    lines.append(
        "\nA batch has one Parquet data file per Spark task: as many as the batch has ranges, up to one per core "
        "(`spark.default.parallelism`), each task reading its ranges at once, up to `read.task_concurrency` (16) of them."
    )
    lines.append(f"\n`{results['command']}`, {results['finished']}, {results['wall_seconds'] / 60:.0f} minutes.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", default=["8:60:4", "32:20:16"], help="SHARDS:MIB_PER_SHARD:SCALE (none: only --shared)")
    parser.add_argument("--shared", metavar="SHARDS:MIB_PER_SHARD:SCALE", help="also the shared-stream scenario (bench/shared.py)")
    parser.add_argument(
        "--cores", type=int, default=2, help="local[N] for the replay job and the DAG cycle; bare reads use as many processes"
    )
    parser.add_argument("--naive-limits", type=float, default=1.0, help="stop the naive exporter after this many times the limit")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--render-only", action="store_true", help="rewrite BENCHMARKS.md's section from the last run's results.json")
    args = parser.parse_args(argv)
    command = " ".join(["python", "bench/paced.py", *(argv if argv is not None else sys.argv[1:])])
    if args.render_only:
        results = json.loads((WORK / "results.json").read_text()) if (WORK / "results.json").exists() else None
        shared_run = json.loads((WORK / "shared.json").read_text()) if (WORK / "shared.json").exists() else None
    else:
        scenarios = [Scenario.parse(s) for s in args.scenarios]
        results, shared_run = run_all(scenarios, args.cores, args.naive_limits, Scenario.parse(args.shared) if args.shared else None)
        # Each part keeps its own results: a run of one leaves the other's file and section as they were.
        if results is not None:
            results["command"] = command
            (WORK / "results.json").write_text(json.dumps(results, indent=2))
        if shared_run is not None:
            shared_run["command"] = command
            (WORK / "shared.json").write_text(json.dumps(shared_run, indent=2))
    if results is not None:
        body = render(results)
        print(body)
        report.write_section(args.output, report.PACED, lambda _old: body)
    if shared_run is not None:
        import shared

        shared_body = shared.render(shared_run["scenario"], shared_run["machine"], shared_run["command"], shared_run["finished"],
                                    shared_run["wall_seconds"])  # fmt: skip
        print(shared_body)
        report.write_section(args.output, report.PACED_SHARED, lambda _old: shared_body)
    return 0


def run_all(
    scenarios: list[Scenario], cores: int, naive_limits: float, shared_scenario: Scenario | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The scenarios' results (None if there were none) and the shared-stream scenario's (None if not asked for)."""
    started = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    for old in WORK.iterdir():  # the last run's results stay until this run replaces them
        if old.name not in ("results.json", "shared.json"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    airflow_env(WORK)
    os.environ[jvm_archive.CACHE_ENV] = str(WORK / "jvm")
    state = WORK / "stack"
    stack = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    results: dict[str, Any] = {"cores": cores, "machine": machine(), "scenarios": []}
    shared_run: dict[str, Any] | None = None
    try:
        os.environ.update(stack.env())
        if scenarios:
            warm_up(stack, cores)
        for scenario in scenarios:
            results["scenarios"].append(measure_scenario(stack, scenario, cores, naive_limits))
        results["wall_seconds"] = time.monotonic() - started
        if shared_scenario is not None:
            import shared

            began = time.monotonic()
            measured = shared.measure_shared(stack, shared_scenario, WORK, say)
            shared_run = {"scenario": measured, "machine": results["machine"], "wall_seconds": time.monotonic() - began,
                          "finished": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
    finally:
        local_stack.stop(state)
    if not scenarios:
        return None, shared_run
    loads = [x for r in results["scenarios"] for x in r["load"]]
    results["load_text"] = f"{min(loads):.1f} to {max(loads):.1f}"
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    return results, shared_run


def warm_up(stack: Any, cores: int) -> None:
    """The class-data-sharing archive, recorded before anything is timed (the first replay task on a machine does it once)."""
    from kinesis_replay.core.config import parse_config
    from kinesis_replay.launchers import spark_submit
    from stack.harness import pipeline_entry

    entry = pipeline_entry("warm", "unused", WORK / "warm-up", "unused")
    entry["spark"] = {"master": f"local[{cores}]", "conf": dict(SPARK_CONF)}
    pipeline = parse_config({"pipelines": [entry]})[0]
    jobs = ROOT / "spark_jobs"
    library = spark_submit.package_library(WORK / "kinesis_replay.zip")
    spark_submit.warm_up(pipeline, jobs / "replay_job.py", [library, jobs / "kinesis_source.py"], {**os.environ, **stack.env()})


if __name__ == "__main__":
    sys.exit(main())
