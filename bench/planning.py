"""`make bench-planning`: what planning a batch costs at 4, 100 and 1,000 shards, through a proxy at Kinesis's limits.

Planning fixes each shard's range before anything is read: the first record after the checkpoint, and the
newest record before the plan (or before the shard's max_batch cap), found by a few AT_TIMESTAMP probes of
a handful of records each. This times a whole plan (ListShards, every shard's probes, the shard items and the
batch written to the state table), with the shards planned concurrently, in two kinds of streams:

- busy: every shard holds 10 MiB of records (1 MiB at 1,000 shards: kinesalite holds the stream in memory),
  written minutes before the plan, and a 100-shard stream of 1 MiB shards as well, so that the 1,000-shard plan is
  compared with a plan of shards that hold as much (kinesalite's work on a shard grows with its data; Kinesis's not);
- idle: every shard holds one record, written minutes before the plan.

Every Kinesis call goes through the project's throttling proxy, which holds each shard to Kinesis's limits (5
GetRecords and 5 GetShardIterator calls, 2 MiB a second) and counts what each shard served. The planner's own CPU
is this process's CPU time during ``plan_batch`` (``time.process_time``, every thread of it): the proxy and the
emulators run in processes of their own, so their work is not in it. Writes BENCHMARKS.md's planning section,
with the targets checked against the 1,000-shard plans' figures: under ``PLAN_SECONDS`` of wall time, and under
``PLANNER_MS_A_SHARD`` of the planner's own CPU a shard.

    python bench/planning.py --shards 4 100 1000 --age 120
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "bench")]

import report  # noqa: E402

RECORD_BYTES = 1024  # 10,240 records make a shard's 10 MB
PUT_BATCH = 500  # PutRecords takes 500 records (and 5 MB) a call
# Records of one PutRecords call arrive in the same millisecond, and planning reads the newest millisecond's records
# to the last: each call carries at most this many records a shard, as producers writing all the time do.
PER_SHARD_PER_CALL = 5
WINDOW = 1.0  # seconds: Kinesis's per-shard limits (and the proxy's) are calls and bytes a second
TARGET_SHARDS = 1000  # the targets are the plans of this many shards
PLAN_SECONDS = 10.0  # target: a plan of TARGET_SHARDS shards, wall time, through the throttling proxy
PLANNER_MS_A_SHARD = 8.0  # target: the planner's own CPU (this process's, during plan_batch), a shard


@dataclass(frozen=True)
class Scenario:
    kind: str  # busy or idle
    shards: int
    bytes_per_shard: int


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    seconds: float  # the median first plan's
    runs: list[float]  # every first plan's: each by a pipeline of its own, from TRIM_HORIZON
    ranges: int
    get_shard_iterator: list[int]  # per shard
    get_records: list[int]
    bytes_read: list[int]
    records_read: list[int]
    throttled: int
    steady_seconds: float  # the next plan, every checkpoint at its shard's newest record: nothing new to plan
    cpu: dict[str, float]  # CPU seconds the median first plan took, by process (PROCESSES)
    planner_cpu: list[float]  # every first plan's: this process's CPU seconds during plan_batch, as runs
    load: tuple[float, float] = (0.0, 0.0)  # the machine's 1-minute load average before the first plan and after the next

    @property
    def planner_ms_a_shard(self) -> list[float]:
        return [seconds * 1000 / self.scenario.shards for seconds in self.planner_cpu]


# Where a plan's CPU goes on this machine: the planner (this process), the proxy, and the two emulators.
PROCESSES = ("planner", "proxy", "kinesalite", "moto")


class CpuMeter:
    """CPU seconds (user and system) of the processes that serve a plan (not the planner's), read before and after it."""

    def __init__(self, pids: dict[str, int]) -> None:
        import psutil

        self._processes = {name: psutil.Process(pid) for name, pid in pids.items()}

    def read(self) -> dict[str, float]:
        return {name: sum(p.cpu_times()[:2]) for name, p in self._processes.items()}


def produce(client: Any, stream: str, scenario: Scenario) -> int:
    """Fill every shard (each aimed at by an ExplicitHashKey), keeping nothing: a busy stream holds gigabytes."""
    shards = [s["HashKeyRange"]["StartingHashKey"] for s in client.list_shards(StreamName=stream, MaxResults=10_000)["Shards"]]
    per_shard = max(1, scenario.bytes_per_shard // RECORD_BYTES) if scenario.kind == "busy" else 1
    data = b"x" * (RECORD_BYTES if scenario.kind == "busy" else 100)
    wanted = [key for _ in range(per_shard) for key in shards]
    size = min(PUT_BATCH, PER_SHARD_PER_CALL * len(shards))
    for first in range(0, len(wanted), size):
        pending = wanted[first : first + size]
        while pending:
            response = client.put_records(
                StreamName=stream, Records=[{"PartitionKey": "k", "ExplicitHashKey": key, "Data": data} for key in pending]
            )
            pending = [key for key, r in zip(pending, response["Records"], strict=True) if "SequenceNumber" not in r]
    return len(wanted)


class ProxyProcess:
    """The throttling proxy in a process of its own, as Kinesis is: its work does not take the planner's interpreter."""

    def __init__(self, upstream: str, limits: Any = None) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(upstream, child, limits), daemon=True)
        self._process.start()
        self.url: str = self._conn.recv()
        self.pid: int = self._process.pid or 0

    def _ask(self, command: str) -> Any:
        self._conn.send(command)
        return self._conn.recv()

    def clear(self) -> None:
        self._ask("clear")

    def counters(self) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = self._ask("counters")
        return result

    def stop(self) -> None:
        self._ask("stop")
        self._process.join(timeout=10)


def _serve(upstream: str, conn: Any, limits: Any = None) -> None:
    from stack.kinesis_proxy import KinesisProxy

    proxy = KinesisProxy(upstream, limits).start()  # Kinesis's own limits, unless told others
    conn.send(proxy.url)
    while True:
        command = conn.recv()
        if command == "clear":
            proxy.counters.clear()
            conn.send(None)
        elif command == "counters":
            conn.send({shard: vars(c) for shard, c in proxy.counters.items()})
        else:
            proxy.stop()
            conn.send(None)
            return


def plan_once(
    meter: CpuMeter, proxy: ProxyProcess, dynamodb: Any, stream: str, scenario: Scenario, concurrency: int, repeats: int
) -> Result:
    """``repeats`` first plans of the stream, each by a new pipeline, and the next plan of the last one.

    The emulators share the machine's two cores with the planner and collect their garbage when they will (kinesalite
    holds gigabytes): one plan can take a pause that is not its own, so the figure is the median of a few. Each
    pipeline has a state table of its own: moto's TransactWriteItems copies the whole table for each item it writes,
    so in a table shared by every plan the emulator's cost would grow with the plans before it (DynamoDB's does not).
    """
    import boto3

    from kinesis_replay.adapters import kinesis_client
    from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
    from kinesis_replay.core.config import parse_config
    from stack import local_stack

    config = kinesis_client.pooled(kinesis_client.CLIENT_CONFIG, concurrency)
    raw = boto3.client("kinesis", endpoint_url=proxy.url, region_name=local_stack.REGION, config=config)
    client = kinesis_client.leave_throttling_to_call(raw)
    runs: list[tuple[float, float, dict[str, float], Any, Any]] = []
    load = os.getloadavg()[0]  # a shared machine: what else ran beside the plans
    for _ in range(repeats):
        time.sleep(WINDOW)  # a plan of its own: the shards' budgets left by the one before are refilled
        name = f"plan{uuid.uuid4().hex[:6]}"
        store = DynamoDBStateStore(dynamodb, f"kr-{name}")
        store.ensure_table()
        entry = {"name": name, "stream": stream, "output": f"/tmp/kinesis-replay-bench/{name}", "schedule": None,
                 "initial_position": "TRIM_HORIZON", "state_table": store.table, "spark": {},
                 "read": {"plan_concurrency": concurrency},
                 "output_format": "directory"}  # no table: the setup's commit (not measured) has no files to add  # fmt: skip
        pipeline = parse_config({"pipelines": [entry]})[0]
        before = meter.read()
        seconds, own, planned = _timed_plan(proxy, pipeline, client, store, scenario)
        after = meter.read()
        runs.append((seconds, own, {"planner": own} | {k: after[k] - before[k] for k in after}, pipeline, planned))
    per_shard = _per_shard(proxy, scenario)  # what the last first plan took from each shard
    seconds, _, cpu, _, _ = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    _, _, _, pipeline, planned = runs[-1]
    store = DynamoDBStateStore(dynamodb, pipeline.state_table)
    _commit_without_reading(pipeline, store, planned)
    time.sleep(WINDOW)
    steady, _, _ = _timed_plan(proxy, pipeline, client, store, scenario)  # every checkpoint at its shard's newest record
    return Result(
        scenario, seconds, [r[0] for r in runs], len(planned.ranges), *per_shard, steady, cpu, [r[1] for r in runs],
        (load, os.getloadavg()[0]),
    )  # fmt: skip


def _timed_plan(proxy: ProxyProcess, pipeline: Any, client: Any, store: Any, scenario: Scenario) -> tuple[float, float, Any]:
    """One plan: its wall time, and this process's CPU time during it (every thread's: the planner's own work)."""
    from kinesis_replay.steps.plan import plan_batch

    proxy.clear()
    started, cpu_started = time.perf_counter(), time.process_time()
    result = plan_batch(pipeline, client, store, "bench-run")
    return time.perf_counter() - started, time.process_time() - cpu_started, result.batch


def _per_shard(proxy: ProxyProcess, scenario: Scenario) -> tuple[list[int], list[int], list[int], list[int], int]:
    counters = proxy.counters()
    shards = [counters[f"shardId-{i:012d}"] for i in range(scenario.shards)]
    return (
        [c["get_shard_iterator"] for c in shards], [c["get_records"] for c in shards], [c["bytes"] for c in shards],
        [c["records"] for c in shards], sum(c["throttled"] for c in shards),
    )  # fmt: skip


def _commit_without_reading(pipeline: Any, store: Any, batch: Any) -> None:
    """Setup, not measured: commit the first batch as if it had been replayed (no Spark here), so that the next plan
    finds every checkpoint at its shard's newest record, as a pipeline that keeps up does."""
    from kinesis_replay.core.state import BatchStatus, ReplayResult, ShardResult
    from kinesis_replay.steps.commit import commit_batch

    results = tuple(ShardResult(r.shard_id, 1, 1, r.start, r.end, "-") for r in batch.ranges)
    store.update_batch(
        batch.with_status(BatchStatus.WRITTEN, result=ReplayResult(pipeline.name, batch.batch_id, results)), BatchStatus.PLANNED
    )
    commit_batch(pipeline, store, batch.batch_id)


def measure(
    shard_counts: list[int], mb_per_shard: float, wide_mb_per_shard: float, age: float, kinds: list[str], concurrency: int,
    repeats: int,
) -> list[Result]:  # fmt: skip
    import boto3

    from stack import local_stack
    from stack.producer import ensure_stream

    state = Path(tempfile.mkdtemp(prefix="kinesis-replay-planning-bench-"))
    stack = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    proxy = ProxyProcess(stack.kinesis_url)
    pids = {"proxy": proxy.pid} | {name: int((state / f"{name}.pid").read_text()) for name in ("kinesalite", "moto")}
    if os.getpid() in pids.values() or 0 in pids.values():
        raise RuntimeError(f"the proxy and the emulators must run in processes of their own: {pids}, planner {os.getpid()}")
    meter = CpuMeter(pids)
    try:
        os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": local_stack.REGION})
        producer = boto3.client("kinesis", endpoint_url=stack.kinesis_url, region_name=local_stack.REGION)
        dynamodb = boto3.client("dynamodb", endpoint_url=stack.moto_url, region_name=local_stack.REGION)
        scenarios = []
        wide = int(wide_mb_per_shard * 1024 * 1024)
        for n in shard_counts:
            per_shard = wide if n >= 1000 else int(mb_per_shard * 1024 * 1024)
            scenarios += [s for s in (Scenario("busy", n, per_shard), Scenario("idle", n, 0)) if s.kind in kinds]
            if n == 100 and 1000 in shard_counts and per_shard != wide and "busy" in kinds:
                # The 1,000-shard stream's data a shard, at 100 shards too: kinesalite's own work on a shard grows with
                # what the shard holds (Kinesis's does not), so the ratio compares streams whose shards hold the same.
                scenarios.append(Scenario("busy", n, wide))
        streams = {}
        for s in scenarios:
            stream = f"bench-{s.kind}-{s.shards}-{uuid.uuid4().hex[:4]}"
            ensure_stream(producer, stream, s.shards)
            started = time.perf_counter()
            count = produce(producer, stream, s)
            print(f"{s}: {count:,} records written in {time.perf_counter() - started:.0f}s", flush=True)
            streams[s] = stream
        written = time.monotonic()
        time.sleep(max(0.0, age - (time.monotonic() - written)))  # the newest record is ``age`` seconds old at the plans
        results = []
        for s in scenarios:
            results.append(plan_once(meter, proxy, dynamodb, streams[s], s, concurrency, repeats))
            r = results[-1]
            print(f"{s}: planned {r.ranges} ranges in {r.seconds:.1f}s, at most {max(r.bytes_read) / 1024:.1f} KiB a shard", flush=True)
        return results
    finally:
        proxy.stop()
        local_stack.stop(state)


def render(results: list[Result], age: float, concurrency: int, repeats: int) -> str:
    lines = [
        "## Planning a batch (make bench-planning)",
        "",
        f"The first plan of a fresh pipeline (from TRIM_HORIZON), {repeats} times by new pipelines, each with a state table of "
        "its own (the median shown, the range "
        "in brackets: the emulators share the cores and collect their garbage when they will), "
        f"over streams whose records were written about {age / 60:.0f} minutes "
        f"before it, through the project's throttling proxy at Kinesis's per-shard limits (a process of its own), shards planned "
        f"{concurrency} at a time; on {platform.node() or 'this machine'}, {os.cpu_count()} cores (shared: the table gives the "
        "load average around each stream's plans), kinesalite and the moto server. The time covers ListShards, each shard's "
        "calls, its shard item and the batch written to the state table. "
        f"Records are {RECORD_BYTES:,} bytes, put {PER_SHARD_PER_CALL} a shard per PutRecords call. Calls, records and bytes "
        "are each shard's, as the proxy counted them: what planning takes from the shard's read limits. A shard's reads are "
        "its first record after the checkpoint, a probe or two of 5 records, and the rest of its newest record's "
        "millisecond (records put in one call share one, and the plan reads them to the last).",
        "",
        "| stream | shards | data a shard | first plan, seconds (range) | GetShardIterator a shard (max) | GetRecords a shard (max) "
        "| records read a shard (max) | KiB read a shard (mean / max) | throttled | next plan (nothing new), seconds "
        "| 1-minute load average, before → after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        data = f"{r.scenario.bytes_per_shard / 1024 / 1024:.0f} MiB" if r.scenario.kind == "busy" else "1 record"
        lines.append(
            f"| {r.scenario.kind} | {r.scenario.shards:,} | {data} | {r.seconds:.1f} ({min(r.runs):.1f} to {max(r.runs):.1f}) | "
            f"{max(r.get_shard_iterator)} | "
            f"{max(r.get_records)} | {max(r.records_read)} | {statistics.mean(r.bytes_read) / 1024:.1f} / {max(r.bytes_read) / 1024:.1f} "
            f"| {r.throttled} | {r.steady_seconds:.1f} | {r.load[0]:.1f} → {r.load[1]:.1f} |"
        )
    lines += [
        "",
        "Where the median first plan's CPU went, in milliseconds a shard, by process (user and system time): the planner's is "
        "this benchmark's own process's during `plan_batch`; the proxy's and the emulators', which stand in for Kinesis and "
        "DynamoDB, are read before and after the plan from their processes.",
        "",
        "| stream | shards | " + " | ".join(PROCESSES) + " | all | all, seconds |",
        "|---|---|" + "---|" * (len(PROCESSES) + 2),
    ]
    for r in results:
        per_shard = [r.cpu[name] * 1000 / r.scenario.shards for name in PROCESSES]
        lines.append(
            f"| {r.scenario.kind} | {r.scenario.shards:,} | " + " | ".join(f"{ms:.1f}" for ms in per_shard)
            + f" | {sum(per_shard):.1f} | {sum(r.cpu.values()):.1f} |"
        )  # fmt: skip
    lines += ["", *targets(results)]
    by = {(r.scenario.kind, r.scenario.shards, r.scenario.bytes_per_shard): r for r in results}
    cores = os.cpu_count() or 1
    for (kind, shards, size), r in by.items():
        if shards == TARGET_SHARDS and (kind, 100, size) in by:
            hundred = by[(kind, 100, size)].seconds
            floor = sum(r.cpu.values()) / cores  # the plan's CPU, every process's, on every core at once
            data = f"{size / 1024 / 1024:.0f} MiB a shard" if kind == "busy" else "one record a shard"
            lines.append(
                f"\n{kind} ({data}), beside 100 shards holding as much (not a target): 1,000 shards took {r.seconds:.1f} s, "
                f"{r.seconds / hundred:.1f} times the 100-shard plan's {hundred:.1f} s. Its {sum(r.cpu.values()):.1f} CPU-seconds, "
                f"every process's, on {cores} cores bound it at {floor:.1f} s or more however they are spread, "
                f"{floor / hundred:.1f} times the 100-shard plan."
            )  # fmt: skip
    lines.append(
        "\nWhat bounds these figures here is the machine, not Kinesis: at its limits a shard's plan needs about 0.2 s (its "
        "two GetRecords calls 0.2 s apart), and Kinesis serves every shard at once. " + _cpu_bound(results)
    )
    lines.append(
        "\nBefore, planning read each shard's last window of records to find its newest, one shard after another: "
        "8 shards of 10 MB written four minutes before took 3 min 5 s to plan through a proxy at 0.5 MiB/s a shard "
        "(issue 14's measurement)."
    )
    return "\n".join(lines)


def spread(xs: list[float]) -> str:
    """A figure over runs: its median, and its range in brackets."""
    return f"{statistics.median(xs):.1f} ({min(xs):.1f} to {max(xs):.1f})"


def targets(results: list[Result]) -> list[str]:
    """The two targets, checked against the median of the 1,000-shard plans of each stream: met or missed from the figures."""
    wide = [r for r in results if r.scenario.shards == TARGET_SHARDS]
    if not wide:
        return [f"Targets: not checked, no stream of {TARGET_SHARDS:,} shards was planned in this run."]
    lines = [
        f"Targets, for the first plan of {TARGET_SHARDS:,} shards of each stream (the median of its plans checked, the range "
        "in brackets): the plan's wall time through the throttling proxy, and the planner's own CPU a shard (this "
        "process's CPU time during `plan_batch`, every thread's; the proxy and the emulators run in processes of their own).",
        "",
        "| target | stream | measured | |",
        "|---|---|---|---|",
    ]
    for r in wide:
        mib = r.scenario.bytes_per_shard / 1024 / 1024
        data = f"busy, {mib:.0f} MiB a shard" if r.scenario.kind == "busy" else "idle, 1 record a shard"
        lines.append(
            f"| {TARGET_SHARDS:,} shards planned in under {PLAN_SECONDS:.0f} s | {data} | {spread(r.runs)} s "
            f"| {verdict(statistics.median(r.runs) < PLAN_SECONDS)} |"
        )
        lines.append(
            f"| the planner's own CPU under {PLANNER_MS_A_SHARD:.0f} ms a shard | {data} | {spread(r.planner_ms_a_shard)} ms "
            f"| {verdict(statistics.median(r.planner_ms_a_shard) < PLANNER_MS_A_SHARD)} |"
        )
    return lines


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _cpu_bound(results: list[Result]) -> str:
    """How busy the machine's cores were during the widest plans, and whose CPU it was."""
    cores = os.cpu_count() or 1
    parts = []
    for r in results:
        if r.scenario.shards != max(x.scenario.shards for x in results):
            continue
        used = sum(r.cpu.values())
        parts.append(
            f"the {r.scenario.kind} plan of {r.scenario.shards:,} shards used {used:.0f} CPU-seconds in {r.seconds:.0f} s "
            f"({used / (r.seconds * cores):.0%} of {cores} cores), {r.cpu['planner'] / used:.0%} of it the planner's own"
        )
    return (
        "Here " + "; ".join(parts) + ". The rest is the proxy's and the emulators', which stand in for Kinesis and "
        "DynamoDB and share the same cores; a first plan also writes an item for each new shard, 100 to a transaction."
    )


def _concurrency() -> int:
    from kinesis_replay.core.config import ReadConfig

    return ReadConfig().plan_concurrency


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[4, 100, 1000])
    parser.add_argument("--mb-per-shard", type=float, default=10.0, help="busy streams below 1,000 shards")
    parser.add_argument("--wide-mb-per-shard", type=float, default=1.0, help="busy streams of 1,000 shards (kinesalite holds all of it)")
    parser.add_argument("--age", type=float, default=120.0, help="seconds between the last write and the plans")
    parser.add_argument("--kinds", nargs="+", default=["busy", "idle"], choices=["busy", "idle"])
    parser.add_argument("--plan-concurrency", type=int, default=_concurrency(), help="read.plan_concurrency (the default's)")
    parser.add_argument("--repeats", type=int, default=3, help="first plans of each stream, by new pipelines: the median is shown")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    results = measure(args.shards, args.mb_per_shard, args.wide_mb_per_shard, args.age, args.kinds, args.plan_concurrency, args.repeats)
    body = render(results, args.age, args.plan_concurrency, args.repeats)
    print(body)
    if not args.no_write:
        report.write_section(ROOT / "BENCHMARKS.md", report.PLANNING, lambda _old: body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
