"""`make bench-paced`'s shared-stream scenario: the replay and another consumer of the same shards, GetRecords against EFO.

On Kinesis a shard's 2 MB/s and 5 GetRecords calls a second are shared by every reader that polls it, while each
enhanced fan-out consumer gets 2 MB/s of its own on each shard. This measures, in one run, what that means for a
replay that reads a backlog while another application tails the same shards:

- the other consumer: a process of its own, a thread per shard, each a plain GetRecords loop through the throttling
  proxy, as a KCL application's polling reader: once a second on a fixed clock (a tick missed while a throttled call
  is retried is skipped), asking for one second of a shard written at Kinesis's write limit (1 MB/s, half the read
  limit, scaled as the proxy's limits are): what an application tailing a busy stream needs. It reads the shards
  from their start and starts over at their end, for the whole run; a throttled call is retried after waits doubling
  from 0.2 s to 1 s;
- the replay's reading part, timed on its own: the library's readers over the batch's ranges (range_reader by
  GetRecords through the proxy, with the pipeline's budget at the proxy's limit; efo_reader over SubscribeToShard
  through tests/stack/efo_server.py, which paces each consumer on each shard at the same scaled limit and reads the
  backing stream directly, so that its reads are not counted against the proxy's shared budget), with the client a
  Spark task makes (spark_jobs/kinesis_source.kinesis_client), a thread per range, in a process of its own: what
  the replay job's tasks call, without spark-submit and the write. Each shard's records are checked against what
  Kinesis acknowledged (count, bytes, first and last sequence number; the readers' own checks refuse a gap or a
  repeat in between).

The run: the other consumer alone (its baseline), the GetRecords replay, the EFO replay, the other consumer alone
again; its rate in each window is the bytes its calls returned then over the window's length.

    python bench/paced.py --scenarios --shared 4:24:4      # this scenario alone (make bench-paced PACED=)
    python bench/shared.py consumer --job JOB              # the other consumer (started by the bench)
    python bench/shared.py replay --job JOB --mode efo     # the replay's reading part (started by the bench)
"""

# Markdown table rows are long lines, and the prose uses typographic signs on purpose.
# ruff: noqa: E501, RUF001

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "spark_jobs"), str(ROOT / "tests"), str(HERE)]

MIB = 2**20
KINESIS_WRITE_BYTES_PER_SECOND = 1 * MIB  # per shard: what the other consumer tails at, scaled
WARM_SECONDS = 3.0  # the other consumer's first calls, before its baseline
ALONE_SECONDS = 20.0  # each window of the other consumer alone
GAP_SECONDS = 3.0  # between two windows: the proxy's buckets refill, the other consumer's clock settles
EVENT_SECONDS = 0.5  # an EFO event holds at most this much of a shard's rate
THROTTLED = frozenset({"ProvisionedThroughputExceededException", "LimitExceededException"})
TARGET_EFO_REPLAY = 0.9  # of the limit, every shard
TARGET_OTHER_KEEPS = 0.9  # of its baseline, every shard, during the EFO replay


class EfoProcess:
    """tests/stack/efo_server.py in a process of its own, as Kinesis is: its work does not take the readers' interpreters."""

    def __init__(self, upstream: str, rules: Any) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve_efo, args=(upstream, child, rules), daemon=True)
        self._process.start()
        self.url: str = self._conn.recv()

    def counts(self) -> dict[str, Any]:
        self._conn.send("counts")
        result: dict[str, Any] = self._conn.recv()
        return result

    def stop(self) -> None:
        self._conn.send("stop")
        self._conn.recv()
        self._process.join(timeout=10)


def _serve_efo(upstream: str, conn: Any, rules: Any) -> None:
    from stack.efo_server import EfoServer

    server = EfoServer(upstream, rules).start()
    conn.send(server.url)
    while True:
        if conn.recv() == "counts":
            conn.send(dict(vars(server.counts)))
            continue
        server.stop()
        conn.send(None)
        return


# -- the workers -------------------------------------------------------------------------------------------------------


def _client(url: str, connections: int) -> Any:
    """A plain boto3 client, but for botocore's own retries: a throttled call comes back to the loop, which counts it."""
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=max(10, connections), retries={"total_max_attempts": 1})
    return boto3.client("kinesis", endpoint_url=url, config=config)


class OtherConsumer:
    """The other consumer: a GetRecords loop a shard, once a second on a fixed clock, for one second of records."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.kinesis = _client(job["proxy_url"], len(job["ranges"]))
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.samples: list[tuple[float, str, int]] = []  # (when a call returned, shard, bytes)
        self.throttled: list[tuple[float, str]] = []  # (when a call was refused, shard)
        self.missed: dict[str, int] = {}  # ticks skipped while a throttled call was retried

    def patiently(self, shard: str, call: Any, **kwargs: Any) -> Any:
        """A call retried while throttled, after waits doubling from 0.2 s to 1 s; None once stopped."""
        from botocore.exceptions import ClientError

        wait = 0.2
        while True:
            try:
                return call(**kwargs)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in THROTTLED:
                    raise
                with self.lock:
                    self.throttled.append((time.time(), shard))
                if self.stop.wait(wait):
                    return None
                wait = min(1.0, wait * 2)

    def second(self, shard: str, last: int, iterator: str | None) -> tuple[bool, str | None]:
        """One tick's records (at the shard's end, the rest from its start again): whether to go on, and the iterator."""
        wanted = self.job["consumer_records"]
        while wanted > 0:
            if iterator is None:
                opened = self.patiently(
                    shard, self.kinesis.get_shard_iterator, StreamName=self.job["stream"], ShardId=shard, ShardIteratorType="TRIM_HORIZON"
                )
                if opened is None:
                    return False, None
                iterator = opened["ShardIterator"]
            page = self.patiently(shard, self.kinesis.get_records, ShardIterator=iterator, Limit=wanted)
            if page is None:
                return False, None
            records = page["Records"]
            with self.lock:
                self.samples.append((time.time(), shard, sum(len(x["Data"]) + len(x["PartitionKey"]) for x in records)))
            wanted -= len(records)
            iterator = page.get("NextShardIterator")
            if not records or int(records[-1]["SequenceNumber"]) >= last:
                iterator = None  # the shard's end: start over at its start
            if not records:
                break
        return True, iterator

    def tail(self, shard: str, last: int) -> None:
        iterator: str | None = None
        tick = time.time()
        while not self.stop.is_set():
            going, iterator = self.second(shard, last, iterator)
            if not going:
                return
            tick += 1.0
            while tick < time.time():
                tick += 1.0
                self.missed[shard] = self.missed.get(shard, 0) + 1
            self.stop.wait(tick - time.time())

    def run(self) -> dict[str, Any]:
        """Read until a line arrives on stdin after the start."""
        self.kinesis.list_shards(StreamName=self.job["stream"])  # connect before the clock starts
        print("ready", flush=True)
        sys.stdin.readline()
        threads = [threading.Thread(target=self.tail, args=(r["shard_id"], int(r["end"])), daemon=True) for r in self.job["ranges"]]
        started = time.time()
        for t in threads:
            t.start()
        sys.stdin.readline()
        self.stop.set()
        for t in threads:
            t.join(timeout=15)
        return {"started": started, "samples": self.samples, "throttled": self.throttled, "missed": self.missed}


def replay(job: dict[str, Any], mode: str) -> dict[str, Any]:
    """The replay's reading part: every range at once, a thread each, with the library's reader of ``mode``."""
    from concurrent.futures import ThreadPoolExecutor

    from kinesis_replay.adapters.kinesis_client import ReadStats
    from kinesis_replay.adapters.range_reader import iterate_range
    from kinesis_replay.core.config import ReadConfig
    from kinesis_replay.core.job_spec import KinesisEndpoint
    from kinesis_replay.core.ranges import SequenceRange
    from kinesis_source import kinesis_client

    ranges = [SequenceRange(r["shard_id"], int(r["start"]), int(r["end"])) for r in job["ranges"]]
    efo = mode == "efo"
    limits = ReadConfig(
        bytes_per_second=job["bytes_per_second"], get_records_per_second=5, get_shard_iterator_per_second=5,
        consumer=job["consumer_name"] if efo else None,
    )  # fmt: skip
    client = kinesis_client(
        KinesisEndpoint(region_name=job["region"], endpoint_url=job["efo_url"] if efo else job["proxy_url"]), len(ranges)
    )
    consumer_arn = ""
    if efo:
        from kinesis_replay.adapters.efo_reader import iterate_range_efo, resolve_consumer
        from kinesis_replay.adapters.efo_transport import subscribe_over_http2

        client = subscribe_over_http2(client)
        consumer_arn = resolve_consumer(client, job["stream"], job["consumer_name"], limits)
    else:
        client.list_shards(StreamName=job["stream"])  # connect before the clock starts
    print("ready", flush=True)
    sys.stdin.readline()

    def read(rng: SequenceRange) -> dict[str, Any]:
        stats = ReadStats()
        started = time.time()
        pages = (
            iterate_range_efo(client, job["stream"], consumer_arn, rng, limits, stats)
            if efo
            else iterate_range(client, job["stream"], rng, limits, stats)
        )
        n = data = keys = 0
        first = last = None
        for page in pages:
            n += len(page)
            data += sum(len(x["Data"]) for x in page)
            keys += sum(len(x["PartitionKey"]) for x in page)
            first = first or page[0]["SequenceNumber"]
            last = page[-1]["SequenceNumber"]
        return {"records": n, "data_bytes": data, "bytes": data + keys, "first": first, "last": last, "started": started,
                "ended": time.time(), "throttled": stats.throttled, "get_records": stats.get_records_calls,
                "subscriptions": stats.subscriptions}  # fmt: skip

    with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
        got = dict(zip((r.shard_id for r in ranges), pool.map(read, ranges), strict=True))
    return {"shards": got}


# -- the run -----------------------------------------------------------------------------------------------------------


def _worker(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    worker = subprocess.Popen([sys.executable, str(HERE / "shared.py"), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert worker.stdout is not None
    line = worker.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"the worker {args[0]} did not start: {line!r}")
    return worker


def _tell(worker: subprocess.Popen[str], line: str) -> None:
    assert worker.stdin is not None
    worker.stdin.write(line + "\n")
    worker.stdin.flush()


def _finish(worker: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, _ = worker.communicate()
    if worker.returncode != 0:
        raise RuntimeError(f"{what} failed with {worker.returncode}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def measure_shared(stack: Any, scenario: Any, work: Path, say: Any) -> dict[str, Any]:
    """The shared-stream scenario, SHARDS:MIB_PER_SHARD:SCALE as bench/paced.py's: see the module's docstring."""
    import os

    from paced import PARTITION_KEY, RECORD_BYTES, produce
    from planning import ProxyProcess

    from stack import local_stack
    from stack.efo_server import Rules
    from stack.kinesis_proxy import ProxyLimits
    from stack.producer import ensure_stream, kinesis_client

    rate = scenario.bytes_per_second
    record = RECORD_BYTES + len(PARTITION_KEY)
    consumer_records = max(1, int(KINESIS_WRITE_BYTES_PER_SECOND / scenario.scale / record))
    event_records = max(1, int(rate * EVENT_SECONDS / record))
    proxy = ProxyProcess(stack.kinesis_url, ProxyLimits(bytes_per_second=rate, max_records_per_call=scenario.records_per_call))
    # The EFO endpoint reads kinesalite itself: its reads are the consumer's own 2 MB/s, not the shards' shared budget.
    efo = EfoProcess(stack.kinesis_url, Rules(bytes_per_second=rate, event_records=event_records))
    load = [os.getloadavg()[0]]
    try:
        producer = kinesis_client(stack.kinesis_url)
        stream = f"shared-{scenario.shards}-{uuid.uuid4().hex[:6]}"
        ensure_stream(producer, stream, scenario.shards)
        started = time.monotonic()
        shards = produce(producer, stream, scenario)
        produced = time.monotonic() - started
        records, size = sum(s.records for s in shards.values()), sum(s.bytes for s in shards.values())
        say(f"shared {scenario}: {records:,} records, {size / MIB:.0f} MiB in {produced:.0f}s")
        job = {"stream": stream, "region": local_stack.REGION, "proxy_url": proxy.url, "efo_url": efo.url,
               "bytes_per_second": rate, "consumer_records": consumer_records, "consumer_name": f"bench-{uuid.uuid4().hex[:6]}",
               "ranges": [{"shard_id": s.shard_id, "start": str(s.first), "end": str(s.last)} for s in sorted(shards.values(), key=lambda s: s.shard_id)]}  # fmt: skip
        path = work / "shared-job.json"
        path.write_text(json.dumps(job))
        env = dict(os.environ)
        windows: dict[str, tuple[float, float]] = {}
        replays: dict[str, Any] = {}
        other = _worker(["consumer", "--job", str(path)], env)
        proxy.clear()
        _tell(other, "go")
        time.sleep(WARM_SECONDS)
        at = time.time()
        time.sleep(ALONE_SECONDS)
        windows["alone"] = (at, time.time())
        for mode in ("getrecords", "efo"):
            time.sleep(GAP_SECONDS)
            reader = _worker(["replay", "--job", str(path), "--mode", mode], env)
            _tell(reader, "go")
            result = _finish(reader, f"the {mode} replay")
            _check(result, shards, mode)
            replays[mode] = result
            got = result["shards"].values()
            windows[mode] = (min(g["started"] for g in got), max(g["ended"] for g in got))
            load.append(os.getloadavg()[0])
            say(f"shared: the {mode} replay took {windows[mode][1] - windows[mode][0]:.1f}s")
        time.sleep(GAP_SECONDS)
        at = time.time()
        time.sleep(ALONE_SECONDS)
        windows["alone_after"] = (at, time.time())
        _tell(other, "stop")
        tailed = _finish(other, "the other consumer")
        efo_counts = efo.counts()
        throttled = sum(c["throttled"] for c in proxy.counters().values())
        producer.delete_stream(StreamName=stream)
    finally:
        efo.stop()
        proxy.stop()
    load.append(os.getloadavg()[0])
    return {"shards": scenario.shards, "mib_per_shard": scenario.mib_per_shard, "scale": scenario.scale, "bytes_per_second": rate,
            "records_per_call": scenario.records_per_call, "consumer_records": consumer_records, "event_records": event_records,
            "records": records, "bytes": size, "produce_seconds": produced, "windows": windows, "replays": replays,
            "consumer": tailed, "efo_counts": efo_counts, "proxy_throttled": throttled, "load": load}  # fmt: skip


def _check(result: dict[str, Any], shards: dict[str, Any], mode: str) -> None:
    for s in shards.values():
        g = result["shards"][s.shard_id]
        if (g["records"], g["data_bytes"], int(g["first"]), int(g["last"])) != (s.records, s.data_bytes, s.first, s.last):
            raise RuntimeError(f"the {mode} replay read {g} of {s.shard_id}, but Kinesis acknowledged {s}")


# -- the figures -------------------------------------------------------------------------------------------------------


def other_rates(result: dict[str, Any], window: str) -> dict[str, float]:
    """The other consumer's bytes a second on each shard in a window: what its calls returned in it, over its length."""
    a, b = result["windows"][window]
    rates = dict.fromkeys((r["shard_id"] for r in _ranges(result)), 0.0)
    for when, shard, size in result["consumer"]["samples"]:
        if a <= when < b:
            rates[shard] += size / (b - a)
    return rates


def _ranges(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"shard_id": s} for s in sorted(result["replays"]["efo"]["shards"])]


def replay_rates(result: dict[str, Any], mode: str) -> dict[str, float]:
    """The replay's bytes a second on each shard: the range's bytes over its read's time."""
    return {s: g["bytes"] / (g["ended"] - g["started"]) for s, g in result["replays"][mode]["shards"].items()}


def verdicts(result: dict[str, Any]) -> dict[str, Any]:
    """The targets' figures: the slowest shard's, each against the limit or the other consumer's baseline."""
    limit = result["bytes_per_second"]
    alone = other_rates(result, "alone")
    out: dict[str, Any] = {}
    for mode in ("getrecords", "efo"):
        replay = replay_rates(result, mode)
        other = other_rates(result, mode)
        out[mode] = {
            "replay_min": min(replay.values()) / limit, "replay_mean": sum(replay.values()) / len(replay) / limit,
            "other_min": min(other[s] / alone[s] for s in alone), "other_mean": sum(other.values()) / sum(alone.values()),
        }  # fmt: skip
    out["efo_replay_met"] = out["efo"]["replay_min"] >= TARGET_EFO_REPLAY
    out["efo_other_met"] = out["efo"]["other_min"] >= TARGET_OTHER_KEEPS
    return out


def render(result: dict[str, Any], machine: dict[str, str], command: str, finished: str, wall_seconds: float) -> str:
    limit = result["bytes_per_second"]
    alone, after = other_rates(result, "alone"), other_rates(result, "alone_after")
    v = verdicts(result)
    consumer = result["consumer"]

    def mib(rates: dict[str, float]) -> str:
        return f"{sum(rates.values()) / len(rates) / MIB:.3f} ({min(rates.values()) / MIB:.3f})"

    def throttled(mode: str) -> int:
        return sum(g["throttled"] for g in result["replays"][mode]["shards"].values())

    def refused(name: str) -> int:
        a, b = result["windows"][name]
        return sum(1 for when, _ in consumer["throttled"] if a <= when < b)

    def window(name: str) -> str:
        a, b = result["windows"][name]
        return f"{b - a:.1f}"

    lines = [
        "## A stream shared with another consumer: GetRecords against enhanced fan-out (make bench-paced)",
        "",
        f"{result['shards']} shards of {result['mib_per_shard']:.0f} MiB ({result['records']:,} records of {RECORD_BYTES_TEXT}), "
        f"each held to Kinesis's read limits scaled down by {result['scale']:g}: **the limit** is "
        f"{limit / MIB:.3g} MiB/s a shard. Another consumer tails the same shards the whole time: a process of its own, a "
        "GetRecords loop a shard through the throttling proxy, once a second on a fixed clock, asking for one second of a "
        f"shard written at Kinesis's write limit (1 MiB/s ÷ {result['scale']:g}: {result['consumer_records']:,} records, "
        "half the read limit), and starting over at the shard's end. The replay reads every shard's whole range at once, "
        "timed on its reading part: the library's readers over the batch's ranges with the Spark task's client, a thread "
        "a range, in a process of its own (no spark-submit, no write): by GetRecords through the proxy, with the "
        "pipeline's budget at the limit, sharing each shard's 5 calls and bytes a second with the other consumer; and "
        "over enhanced fan-out through the project's HTTP/2 endpoint (tests/stack/efo_server.py), which pushes at most "
        f"the limit to each consumer on each shard (events of at most {result['event_records']:,} records) and reads "
        "kinesalite itself, so that the replay's reads leave the shards' shared budget alone, as on Kinesis. Each "
        "replay's records are checked against what Kinesis acknowledged, shard by shard (count, bytes, first and last "
        "sequence number). A replay's rate on a shard is its range's bytes over its read's time; the other consumer's, "
        "the bytes its calls returned in the window over the window's length. Figures are MiB/s a shard: the mean over "
        f"the shards, and the slowest shard in brackets. {machine['cpu']}, shared with other work: 1-minute load average "
        f"{min(result['load']):.1f} to {max(result['load']):.1f} during the run.",
        "",
        "| window | seconds | replay MiB/s a shard | replay: of the limit (slowest) | other consumer MiB/s a shard | other consumer: of its baseline (slowest) | throttled calls: replay, other consumer |",
        "|---|---|---|---|---|---|---|",
        f"| the other consumer alone: its baseline | {window('alone')} | | | {mib(alone)} | 1.00 × | –, {refused('alone')} |",
        f"| **replay by GetRecords**, through the proxy | {window('getrecords')} | {mib(replay_rates(result, 'getrecords'))} | "
        f"{v['getrecords']['replay_mean']:.2f} × ({v['getrecords']['replay_min']:.2f} ×) | {mib(other_rates(result, 'getrecords'))} | "
        f"{v['getrecords']['other_mean']:.2f} × ({v['getrecords']['other_min']:.2f} ×) | {throttled('getrecords')}, {refused('getrecords')} |",
        f"| **replay over enhanced fan-out** | {window('efo')} | {mib(replay_rates(result, 'efo'))} | "
        f"**{v['efo']['replay_mean']:.2f} × ({v['efo']['replay_min']:.2f} ×)** | {mib(other_rates(result, 'efo'))} | "
        f"**{v['efo']['other_mean']:.2f} × ({v['efo']['other_min']:.2f} ×)** | {throttled('efo')}, {refused('efo')} |",
        f"| the other consumer alone again | {window('alone_after')} | | | {mib(after)} | "
        f"{sum(after.values()) / sum(alone.values()):.2f} × ({min(after[s] / alone[s] for s in alone):.2f} ×) | –, {refused('alone_after')} |",
        "",
        f"The other consumer's calls throttled over the whole run: {len(consumer['throttled'])} "
        f"(ticks it skipped while retrying them: {sum(consumer['missed'].values())}); the proxy refused "
        f"{result['proxy_throttled']} calls in all. The EFO endpoint: {result['efo_counts']['subscribes']} subscriptions, "
        f"{result['efo_counts']['events']} events, {result['efo_counts']['paced']} of them waiting for the consumer's rate.",
        "",
        f"Target: over enhanced fan-out, the replay reads every shard at least {TARGET_EFO_REPLAY} × the limit: "
        f"{v['efo']['replay_min']:.2f} × on the slowest shard ({'**met**' if v['efo_replay_met'] else '**missed**'}).",
        "",
        f"Target: meanwhile the other consumer keeps at least {TARGET_OTHER_KEEPS} × its baseline on every shard: "
        f"{v['efo']['other_min']:.2f} × on the slowest ({'**met**' if v['efo_other_met'] else '**missed**'}).",
        "",
        f"By GetRecords, what each loses: the replay reads at {v['getrecords']['replay_mean']:.2f} × the limit "
        f"(**loses {max(0.0, 1 - v['getrecords']['replay_mean']):.0%}** of it; {v['getrecords']['replay_min']:.2f} × on its slowest shard; "
        f"over enhanced fan-out it read at {v['efo']['replay_mean']:.2f} ×), and the other "
        f"consumer keeps {v['getrecords']['other_mean']:.2f} × its baseline (**loses {max(0.0, 1 - v['getrecords']['other_mean']):.0%}**; "
        f"{max(0.0, 1 - v['getrecords']['other_min']):.0%} on the worst shard).",
        "",
        f"`{command}`, {finished}, the scenario {wall_seconds / 60:.1f} minutes (filling the stream {result['produce_seconds']:.0f} s of it).",
    ]
    return "\n".join(lines)


RECORD_BYTES_TEXT = "1,024 bytes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("worker", choices=("consumer", "replay"))
    parser.add_argument("--job", type=Path, required=True)
    parser.add_argument("--mode", choices=("getrecords", "efo"), default="getrecords")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    result = OtherConsumer(job).run() if args.worker == "consumer" else replay(job, args.mode)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
