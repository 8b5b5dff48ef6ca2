"""`make bench`: kinesis-replay against the read ceiling and a naive exporter, side by side on the local Kinesis endpoint.

    python bench/run.py [--sizes 4000,40000,400000] [--runs 3] [--record-bytes 1024]

Starts kinesalite and the moto server on free ports, and for each size produces a 4-shard stream of
that many records, then measures, run after run, on the same closed ranges: bare boto3 reads (shard
after shard in one process, and one process per shard up to the number of cores), the naive
exporter (boto3 and pyarrow in one process), the replay job (spark-submit to result manifest),
planning (a dry run of the planner) and the full DAG cycle (dag.test: plan, replay, verify, commit).
Every run's output is checked to hold each record exactly once; a run that does not fails the bench.
Writes the figures into BENCHMARKS.md (its bench block only) and the raw results to .stack/bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "dags"), str(ROOT / "tests"), str(HERE)]

from measure import Finished, children_cpu, cpu_seconds, run_tracked  # noqa: E402

from kinesis_replay.launchers import jvm_archive  # noqa: E402
from stack import local_stack  # noqa: E402

WORK = ROOT / ".stack" / "bench"
SHARDS = 4
TAIL_PER_SHARD = 10  # records produced just before each plan, as a live stream has at its tip
# The emulator enforces no read limits; the replay job is given no budget either, so that it is measured, not its pacing.
UNLIMITED = {"get_records_per_second": 1e6, "bytes_per_second": 1e12, "get_shard_iterator_per_second": 1e6}
SPARK_CONF = {"spark.sql.shuffle.partitions": "4"}
# The job's JVM options for local masters (C1 only, the class-data-sharing archive) against two alternatives, in the
# same runs: without the archive (a pipeline that sets spark.driver.defaultJavaOptions itself gets none), and the
# JVM's own defaults here (tiered C1 then C2, G1).
JVM_VARIANTS = {
    "replay_job_no_archive": {"spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    "replay_job_jvm_defaults": {"spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=4 -XX:+UseG1GC"},
}


def start_together(workers: list[subprocess.Popen[str]], at_start: Callable[[], None]) -> list[dict[str, Any]]:
    """Wait until every bare reader (bench/loops.py) is ready, call ``at_start``, start them all at once, and
    return what each printed last (its result, as JSON)."""
    for w in workers:
        assert w.stdout is not None
        if w.stdout.readline().strip() != "ready":
            raise RuntimeError("a bare reader did not start")
    at_start()
    for w in workers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    results = []
    for w in workers:
        out, _ = w.communicate()
        if w.returncode != 0:
            raise RuntimeError(f"a bare reader failed with {w.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def say(message: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Stream:
    """One benchmark stream: what Kinesis acknowledged, and the closed ranges that cover the backlog."""

    name: str
    produced: list[Any]
    ranges: list[dict[str, Any]]
    record_bytes: int

    @property
    def records(self) -> int:
        return sum(r["records"] for r in self.ranges)

    @property
    def bytes(self) -> int:
        return sum(r["bytes"] for r in self.ranges)

    def job(self, endpoint_url: str) -> dict[str, Any]:
        return {"stream": self.name, "endpoint_url": endpoint_url, "ranges": self.ranges}

    def keys(self) -> set[tuple[str, str]]:
        return {(p.shard_id, p.sequence_number) for p in self.produced}


class Bench:
    def __init__(self, stack: Any, emulator_pid: int, work: Path, runs: int, record_bytes: int) -> None:
        from stack.producer import kinesis_client

        self.stack, self.emulator_pid, self.work, self.runs, self.record_bytes = stack, emulator_pid, work, runs, record_bytes
        self.kinesis = kinesis_client()
        self.env = {**os.environ, **stack.env()}
        self.library = self._library()

    def _library(self) -> Path:
        from kinesis_replay.launchers import spark_submit

        return spark_submit.package_library(self.work / "kinesis_replay.zip")

    def emulator_cpu(self) -> float:
        return cpu_seconds(self.emulator_pid)

    # -- streams -------------------------------------------------------------------------------------

    def make_stream(self, records: int) -> tuple[Stream, float]:
        from stack.producer import ensure_stream, produce

        name = f"bench-{records}-{uuid.uuid4().hex[:6]}"
        ensure_stream(self.kinesis, name, SHARDS)
        started = time.monotonic()
        produced = produce(self.kinesis, name, records, payload_bytes=self.record_bytes if records > 1 else 0)
        seconds = time.monotonic() - started
        by_shard: dict[str, list[Any]] = defaultdict(list)
        for p in produced:
            by_shard[p.shard_id].append(p)
        ranges = []
        for shard_id, ps in sorted(by_shard.items()):
            seqs = sorted(int(p.sequence_number) for p in ps)
            ranges.append({"shard_id": shard_id, "start": str(seqs[0]), "end": str(seqs[-1]), "records": len(ps),
                           "bytes": sum(len(p.data) for p in ps)})  # fmt: skip
        return Stream(name, produced, ranges, self.record_bytes), seconds

    def delete_stream(self, stream: Stream) -> None:
        self.kinesis.delete_stream(StreamName=stream.name)  # kinesalite frees its records

    # -- the ceiling: bare boto3 reads ----------------------------------------------------------------

    def bare(self, stream: Stream, processes: int) -> dict[str, Any]:
        """Read the ranges with ``processes`` workers at once (shards dealt round-robin); no Spark, no writes."""
        job = self.work / "job.json"
        job.write_text(json.dumps(stream.job(self.stack.kinesis_url)))
        shard_ids = [r["shard_id"] for r in stream.ranges]
        groups = [shard_ids[i::processes] for i in range(processes)]
        workers = [
            subprocess.Popen(
                [sys.executable, str(HERE / "loops.py"), "bare", "--job", str(job), "--shards", ",".join(g)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=self.env,
            )
            for g in groups
        ]
        started: list[float] = []
        results = start_together(workers, lambda: started.append(self.emulator_cpu()))
        emulator = self.emulator_cpu() - started[0]
        shards = {k: v for r in results for k, v in r["shards"].items()}
        for r in stream.ranges:
            got = shards[r["shard_id"]]
            if (got["records"], got["bytes"], got["first"], got["last"]) != (r["records"], r["bytes"], r["start"], r["end"]):
                raise RuntimeError(f"bare read of {r['shard_id']} got {got}, expected {r}")
        seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
        return {"seconds": seconds, "cpu": sum(r["cpu"] for r in results), "emulator_cpu": emulator}

    # -- what a user would write instead --------------------------------------------------------------

    def naive(self, stream: Stream) -> dict[str, Any]:
        job = self.work / "job.json"
        job.write_text(json.dumps(stream.job(self.stack.kinesis_url)))
        out = self.work / "naive"
        shutil.rmtree(out, ignore_errors=True)
        emulator = self.emulator_cpu()
        done = run_tracked([sys.executable, str(HERE / "loops.py"), "naive", "--job", str(job), "--out", str(out)], self.env)
        emulator = self.emulator_cpu() - emulator
        if done.code != 0:
            raise RuntimeError(f"the naive exporter failed:\n{done.output[-3000:]}")
        check_rows(out, stream, "the naive exporter")
        loop = json.loads(done.output.strip().splitlines()[-1])
        return {"seconds": done.seconds, "loop_seconds": loop["ended"] - loop["started"], "cpu": done.cpu, "emulator_cpu": emulator}

    # -- kinesis-replay -------------------------------------------------------------------------------

    def pipeline_entry(self, stream: str, output: Path, table: str) -> dict[str, Any]:
        from stack.harness import pipeline_entry

        entry = pipeline_entry(f"b{uuid.uuid4().hex[:8]}", stream, output, table, read=dict(UNLIMITED))
        entry["spark"]["conf"] = dict(SPARK_CONF)
        return entry

    def replay_job(self, stream: Stream, conf: dict[str, str] | None = None) -> dict[str, Any]:
        """spark-submit the replay job on the stream's ranges, exactly as the replay task does; time it to its exit."""
        from kinesis_replay.adapters.files import read_result
        from kinesis_replay.adapters.layout import batch_path, data_path
        from kinesis_replay.core.config import ReadConfig, parse_config
        from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint
        from kinesis_replay.core.ranges import SequenceRange
        from kinesis_replay.launchers import spark_submit

        output = self.work / "replay"
        shutil.rmtree(output, ignore_errors=True)
        entry = self.pipeline_entry(stream.name, output, "unused")
        entry["spark"]["conf"].update(conf or {})
        pipeline = parse_config({"pipelines": [entry]})[0]
        spec = JobSpec(
            pipeline.name, stream.name, 1, str(output),
            tuple(SequenceRange(r["shard_id"], int(r["start"]), int(r["end"])) for r in stream.ranges),
            kinesis=KinesisEndpoint(local_stack.REGION, self.stack.kinesis_url), read=ReadConfig(**UNLIMITED),
        )  # fmt: skip
        spec_path = self.work / "batch.json"
        spec_path.write_text(spec.to_json())
        jobs = ROOT / "spark_jobs"
        command = spark_submit.build_command(pipeline, 1, spec_path, jobs / "replay_job.py", [self.library, jobs / "kinesis_source.py"])
        env = spark_submit.submit_env(pipeline.spark.master, self.stack.env())
        emulator = self.emulator_cpu()
        submitted = time.time()
        done = run_tracked(command, env)
        emulator = self.emulator_cpu() - emulator
        (self.work / f"replay-job-{stream.records}.log").write_text(done.output)  # the last run's, for its per-shard lines
        if done.code != 0:
            raise RuntimeError(f"the replay job failed:\n{done.output[-3000:]}")
        result = read_result(str(output), 1)
        expected = {r["shard_id"]: r["records"] for r in stream.ranges}
        if {s.shard_id: s.records for s in result.shards} != expected:
            raise RuntimeError(f"the replay job's manifest counts {result.to_dict()}, expected {expected}")
        folder = data_path(str(output), 1, result.attempt) if result.attempt else batch_path(str(output), 1)
        check_rows(Path(folder), stream, "the replay job")
        phases = job_phases(done)
        return {
            "seconds": done.seconds, "cpu": done.cpu, "emulator_cpu": emulator,
            "worker_peak": done.worker_peak, "workers_peak": done.workers_peak, "tree_peak": done.tree_peak,
            **{f"cpu_{kind}": seconds for kind, seconds in done.cpu_by_kind.items()}, "cpu_counted_by": done.cpu_counted_by,
            "launch": phases.pop("started_at") - submitted, **phases,
        }  # fmt: skip

    def record_archive(self) -> dict[str, Any]:
        """The warm-up job that records the class-data-sharing archive, as the first replay task on a machine runs it."""
        from kinesis_replay.core.config import parse_config
        from kinesis_replay.launchers import spark_submit

        pipeline = parse_config({"pipelines": [self.pipeline_entry("unused", self.work / "warm-up", "unused")]})[0]
        jobs = ROOT / "spark_jobs"
        cpu, started = children_cpu(), time.monotonic()
        spark_submit.warm_up(pipeline, jobs / "replay_job.py", [self.library, jobs / "kinesis_source.py"], self.env)
        seconds, cpu = time.monotonic() - started, children_cpu() - cpu
        archive = jvm_archive.for_spark(spark_submit.LOCAL_DRIVER_JAVA_OPTIONS)
        if archive is None or not archive.ready():
            raise RuntimeError(f"the warm-up job recorded no class-data-sharing archive: {archive and archive.disabled()}")
        return {"seconds": seconds, "cpu": cpu}

    def plan(self, stream: Stream) -> dict[str, Any]:
        """A dry run of the planner on the whole stream (no checkpoints yet), just after a small live tail arrives."""
        import boto3

        from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
        from kinesis_replay.core.config import parse_config
        from kinesis_replay.steps.plan import plan_batch
        from stack.producer import produce

        table = f"bench-{uuid.uuid4().hex[:8]}"
        store = DynamoDBStateStore(boto3.client("dynamodb"), table)
        store.ensure_table()
        pipeline = parse_config({"pipelines": [self.pipeline_entry(stream.name, self.work / "plan", table)]})[0]
        stream.produced += produce(self.kinesis, stream.name, TAIL_PER_SHARD * SHARDS, payload_bytes=self.record_bytes)
        calls: dict[str, int] = defaultdict(int)

        def count(event_name: str, parsed: dict[str, Any], **_: Any) -> None:
            calls[event_name.split(".")[-1]] += 1
            calls["records read"] += len(parsed.get("Records", ()))

        self.kinesis.meta.events.register("after-call.kinesis", count)
        emulator, cpu = self.emulator_cpu(), time.process_time()
        started = time.monotonic()
        try:
            result = plan_batch(pipeline, self.kinesis, store, "bench-plan", dry_run=True)
        finally:
            self.kinesis.meta.events.unregister("after-call.kinesis", count)
        seconds = time.monotonic() - started
        cpu, emulator = time.process_time() - cpu, self.emulator_cpu() - emulator
        if result.batch is None or len(result.batch.ranges) != SHARDS:
            raise RuntimeError(f"the planner found {result.batch}, expected {SHARDS} ranges")
        # The planner's own CPU (this process: the planner and its boto3 clients) and the Kinesis calls it made.
        return {"seconds": seconds, "emulator_cpu": emulator, "cpu": cpu, "calls": dict(calls)}

    def dag_cycle(self, stream: Stream) -> dict[str, Any]:
        """One regular DAG run with dag.test() on a new pipeline: plan, replay, verify and commit the whole stream."""
        from stack.harness import load_dags, read_output

        # A new pipeline each run, with an output root of its own: each root is the URI of the pipeline's Asset.
        name = f"b{uuid.uuid4().hex[:8]}"
        output = self.work / "dag" / name
        entry = {**self.pipeline_entry(stream.name, output, f"bench-{name}"), "name": name}
        dag = load_dags(self.work / "pipelines.yaml", entry)[f"kinesis_replay_{entry['name']}"]
        emulator = self.emulator_cpu()
        started = time.monotonic()
        run = dag.test()
        seconds = time.monotonic() - started
        emulator = self.emulator_cpu() - emulator
        tasks = {ti.task_id: ti for ti in run.get_task_instances()}
        states = {t: str(ti.state) for t, ti in tasks.items()}
        if str(run.state) != "success" or any(states[t] != "success" for t in ("plan", "replay", "verify", "commit")):
            raise RuntimeError(f"the DAG cycle did not commit its batch: {run.state}, {states}")
        check_rows(read_output(output), stream, "the DAG cycle", all_produced=True)  # through the table, as readers read it
        shutil.rmtree(output, ignore_errors=True)
        durations = {t: (ti.end_date - ti.start_date).total_seconds() for t, ti in tasks.items() if ti.start_date and ti.end_date}
        return {"seconds": seconds, "emulator_cpu": emulator, **{f"task_{t}": d for t, d in durations.items()}}


def job_phases(done: Finished) -> dict[str, float]:
    for line in done.output.splitlines():
        if line.startswith("kinesis-replay: phases: "):
            phases: dict[str, float] = json.loads(line.split(": ", 2)[2])
            return phases
    raise RuntimeError(f"the replay job printed no phases line:\n{done.output[-2000:]}")


def check_rows(source: Path | Any, stream: Stream, what: str, all_produced: bool = False) -> None:
    """The rows (the Parquet files under a path, or a pyarrow table) hold each record of the ranges exactly once
    (``all_produced``: of the whole stream)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if isinstance(source, Path):
        source = ds.dataset(str(source), format="parquet", partitioning="hive").to_table(columns=["shard_id", "sequence_number", "data"])
    table = source
    keys = list(zip(table.column("shard_id").to_pylist(), table.column("sequence_number").to_pylist(), strict=True))
    expected = stream.keys() if all_produced else {(p.shard_id, p.sequence_number) for p in stream.produced[: stream.records]}
    size = pc.sum(pc.binary_length(table.column("data"))).as_py() or 0
    want = sum(len(p.data) for p in stream.produced) if all_produced else stream.bytes
    if len(keys) != len(expected) or set(keys) != expected or size != want:
        raise RuntimeError(
            f"{what} is not exactly once: {len(keys)} rows, {len(set(keys))} distinct, {len(set(keys) - expected)} unexpected, "
            f"{len(expected - set(keys))} missing of {len(expected)}; {size} payload bytes, expected {want}"
        )


def airflow_env(work: Path) -> None:
    """Point Airflow at a scratch home before it is first imported, and migrate its database."""
    os.environ.update(
        {
            "AIRFLOW_HOME": str(work / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)


def machine() -> dict[str, str]:
    import boto3
    import pyarrow
    import pyspark

    def version(command: list[str]) -> str:
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=30)
            return (out.stdout + out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "unknown"

    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?"
    )
    mem = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")))
    kinesalite = json.loads((ROOT / "tests/stack/node_modules/kinesalite/package.json").read_text())["version"]
    from importlib.metadata import version as pkg_version

    return {
        "cpu": f"{os.cpu_count()} cores, {cpu}",
        "memory": f"{mem / 2**20:.0f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": version(["java", "-version"]),
        "node": version(["node", "--version"]),
        "versions": f"pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, boto3 {boto3.__version__}, "
        f"apache-airflow {pkg_version('apache-airflow')}, kinesalite {kinesalite}",
    }


def main(argv: list[str] | None = None) -> int:
    import report
    from report_figures import render_figures

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4000,40000,400000", help="records per stream, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--skip-dag", action="store_true", help="leave out the DAG cycles (for a quick look; not for BENCHMARKS.md)")
    parser.add_argument("--render-only", action="store_true", help="rewrite BENCHMARKS.md's block from the last run's results.json")
    args = parser.parse_args(argv)
    if args.render_only:
        report.write(args.output, render_figures(json.loads((WORK / "results.json").read_text())))
        say(f"rewrote {args.output} from {WORK / 'results.json'}")
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.runs < 1 or not sizes:
        parser.error("need at least one size and one run")

    started = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    airflow_env(WORK)
    os.environ[jvm_archive.CACHE_ENV] = str(WORK / "jvm")  # a new archive each bench run: its recording is measured
    state = WORK / "stack"
    stack = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    results: dict[str, Any] = {"sizes": {}, "runs": args.runs, "record_bytes": args.record_bytes, "shards": SHARDS}
    try:
        os.environ.update(stack.env())
        bench = Bench(stack, int((state / "kinesalite.pid").read_text()), WORK, args.runs, args.record_bytes)
        results["machine"] = machine()
        say("the first replay task on a machine records the JVM's class-data-sharing archive with a warm-up job: once, first")
        results["archive"] = bench.record_archive()
        for size in sizes:
            results["sizes"][str(size)] = measure_size(bench, size, args.skip_dag, jvm_variants=size == sizes[-1])
        say("fixed cost: a stream holding one record")
        results["single"] = measure_size(bench, 1, args.skip_dag, baselines=False, jvm_variants=True)
    finally:
        local_stack.stop(state)
    results["wall_seconds"] = time.monotonic() - started
    results["command"] = " ".join([Path(sys.executable).name, "bench/run.py", *(argv if argv is not None else sys.argv[1:])])
    results["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    (WORK / "results.json").write_text(json.dumps(results, indent=2))
    if args.skip_dag:
        say(f"--skip-dag: {args.output.name} left as it is; results in {WORK / 'results.json'}")
        return 0
    report.write(args.output, render_figures(results))
    say(f"wrote {args.output} in {results['wall_seconds'] / 60:.1f} minutes")
    return 0


def measure_size(bench: Bench, size: int, skip_dag: bool, baselines: bool = True, jvm_variants: bool = False) -> dict[str, Any]:
    load_before = Path("/proc/loadavg").read_text().split()[0]
    stream, produce_seconds = bench.make_stream(size)
    produced_at = time.monotonic()
    say(f"{size} records of {bench.record_bytes} B on {SHARDS} shards produced in {produce_seconds:.1f}s "
        f"({size / produce_seconds:.0f}/s); per shard {[r['records'] for r in stream.ranges]}")  # fmt: skip
    out: dict[str, Any] = {"records": stream.records, "bytes": stream.bytes, "produce_seconds": produce_seconds}
    cores = os.cpu_count() or 1
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for n in range(bench.runs):
        if baselines:
            runs["bare_sequential"].append(bench.bare(stream, 1))
            runs["bare_parallel"].append(bench.bare(stream, min(cores, len(stream.ranges))))
            runs["naive"].append(bench.naive(stream))
        runs["replay_job"].append(bench.replay_job(stream))
        for name, conf in JVM_VARIANTS.items() if jvm_variants else ():
            runs[name].append(bench.replay_job(stream, conf))
        say(f"{size}: run {n + 1}: " + ", ".join(f"{k} {v[-1]['seconds']:.1f}s" for k, v in runs.items()))
    time.sleep(max(0.0, 11 - (time.monotonic() - produced_at)))  # the backlog is older than the planner's first probe
    for _ in range(bench.runs):
        runs["plan"].append(bench.plan(stream))
    say(f"{size}: planning " + ", ".join(f"{r['seconds']:.2f}s" for r in runs["plan"]))
    if not skip_dag:
        for n in range(bench.runs):
            runs["dag_cycle"].append(bench.dag_cycle(stream))
            say(f"{size}: DAG cycle {n + 1}: {runs['dag_cycle'][-1]['seconds']:.1f}s")
    bench.delete_stream(stream)
    out["runs"] = dict(runs)
    # Other jobs share this machine: its 1-minute load average before and after this size's runs.
    out["load"] = [float(load_before), float(Path("/proc/loadavg").read_text().split()[0])]
    return out


if __name__ == "__main__":
    sys.exit(main())
