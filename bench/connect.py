"""`make bench-connect`: the replay job's fixed cost, a one-record batch, under spark-submit and over Spark Connect.

The job's driver makes no call through Spark's JVM and keeps no accumulator (its tasks report in their rows), so it
runs as a Spark Connect client as well as under spark-submit (replay_job.py --remote). This measures, side by side
and interleaved (so both see the same load on a shared machine), a batch of one record replayed:

- by spark-submit on a local master, exactly as the replay task starts it (its JVM options and class-data-sharing
  archive included): a JVM started and stopped per batch;
- by `python replay_job.py --remote sc://...` against a Spark Connect server started once, before the runs, on the
  same local master (its start-up is reported apart: it is paid once, not per batch).

Each run's wall time, and its CPU: the process tree's for spark-submit; for Connect the client's and the server's
(its JVM and its Python workers, read from /proc before and after). Every run's manifest is checked: one record.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "dags"), str(ROOT / "tests"), str(HERE)]

import report  # noqa: E402
from measure import run_tracked  # noqa: E402
from run import airflow_env, machine, say  # noqa: E402

from kinesis_replay.launchers import jvm_archive  # noqa: E402
from stack import local_stack  # noqa: E402
from stack.spark_connect import ConnectServer, tree_cpu  # noqa: E402

WORK = ROOT / ".stack" / "bench-connect"
MASTER = "local[2]"


def one_record_spec(work: Path, stack: Any, run: int) -> tuple[Any, Path, Any]:
    """A stream of one record, and a batch spec for it: (the pipeline, the spec's path, the output)."""
    from kinesis_replay.core.config import parse_config
    from kinesis_replay.core.job_spec import JobSpec, KinesisEndpoint
    from kinesis_replay.core.ranges import SequenceRange
    from stack.harness import pipeline_entry
    from stack.producer import ensure_stream, kinesis_client, produce

    client = kinesis_client(stack.kinesis_url)
    stream = f"connect-{uuid.uuid4().hex[:8]}"
    ensure_stream(client, stream, 1)
    (record,) = produce(client, stream, 1)
    output = work / f"out-{run}"
    entry = pipeline_entry(f"p{uuid.uuid4().hex[:8]}", stream, output, "unused")
    entry["spark"] = {"master": MASTER}
    pipeline = parse_config({"pipelines": [entry]})[0]
    seq = int(record.sequence_number)
    ranges = (SequenceRange(record.shard_id, seq, seq),)
    spec = JobSpec(pipeline.name, stream, 1, str(output), ranges, kinesis=KinesisEndpoint(local_stack.REGION, stack.kinesis_url))
    path = work / f"batch-{run}.json"
    path.write_text(spec.to_json())
    return pipeline, path, output


def checked(output: Path, what: str) -> None:
    from kinesis_replay.adapters.files import read_result

    result = read_result(str(output), 1)
    if result is None or result.records != 1:
        raise RuntimeError(f"{what}: the manifest does not hold the one record: {result}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    from kinesis_replay.launchers import spark_submit

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    airflow_env(WORK)
    state = WORK / "stack"
    stack = local_stack.start(state, local_stack.free_port(), local_stack.free_port())
    jobs = ROOT / "spark_jobs"
    library = spark_submit.package_library(WORK / "kinesis_replay.zip")
    code = [library, jobs / "kinesis_source.py"]
    os.environ.update(stack.env())  # the bench's own clients (the producer) reach the local stack
    env = dict(os.environ)
    server = ConnectServer(WORK, env, MASTER)
    runs: dict[str, list[dict[str, float]]] = {"spark-submit": [], "connect": []}
    try:
        pipeline, spec, _ = one_record_spec(WORK, stack, 0)
        say("the JVM's class-data-sharing archive for spark-submit, as the first replay task records it (once per machine)")
        spark_submit.warm_up(pipeline, jobs / "replay_job.py", code, env)
        say(f"starting a Spark Connect server on {MASTER}")
        started = server.start()
        say(f"server answered after {started['seconds']:.1f}s, {started['cpu']:.1f} CPU-s")
        client_env = {**env, "PYTHONPATH": os.pathsep.join([str(library), str(jobs)])}
        for run in range(1, args.runs + 1):
            pipeline, spec, output = one_record_spec(WORK, stack, run)
            command = spark_submit.build_command(pipeline, 1, spec, jobs / "replay_job.py", code)
            done = run_tracked(command, spark_submit.submit_env(pipeline.spark.master, stack.env()))
            if done.code != 0:
                raise RuntimeError(f"spark-submit failed:\n{done.output[-3000:]}")
            checked(output, "spark-submit")
            runs["spark-submit"].append({"seconds": done.seconds, "cpu": done.cpu})

            pipeline, spec, output = one_record_spec(WORK, stack, 100 + run)
            client = [sys.executable, str(jobs / "replay_job.py"), "--remote", server.url, "--artifacts", ",".join(map(str, code)),
                      "--spec", str(spec)]  # fmt: skip
            before = tree_cpu(server.pid)
            done = run_tracked(client, client_env)
            server_cpu = tree_cpu(server.pid) - before
            if done.code != 0:
                raise RuntimeError(f"the Connect client failed:\n{done.output[-3000:]}")
            checked(output, "Spark Connect")
            cpu = {"cpu": done.cpu + server_cpu, "client_cpu": done.cpu, "server_cpu": server_cpu}
            runs["connect"].append({"seconds": done.seconds, **cpu})
            say(f"run {run}: spark-submit {runs['spark-submit'][-1]['seconds']:.1f}s, Connect {done.seconds:.1f}s")
    finally:
        server.stop()
        local_stack.stop(state)
    body = render(runs, started, machine())
    report.write_section(args.output, report.CONNECT, lambda _old: body)
    say(f"wrote {args.output.name}'s Spark Connect section")
    return 0


def render(runs: dict[str, list[dict[str, float]]], started: dict[str, float], host: dict[str, str]) -> str:
    def median(way: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[way])

    submit, connect = median("spark-submit", "seconds"), median("connect", "seconds")
    lines = [
        "## The replay job over Spark Connect (make bench-connect)",
        "",
        f"A batch of one record, {len(runs['connect'])} runs each way, interleaved, on `{MASTER}`; medians (min to max). "
        f"{host.get('cpu', '')}.".rstrip(),
        "",
        "| way | seconds | CPU-seconds | of which the client's | of which the server's |",
        "|---|---|---|---|---|",
        f"| spark-submit (a JVM per batch, with its archive) | {submit:.1f} ({_span(runs['spark-submit'], 'seconds')}) | "
        f"{median('spark-submit', 'cpu'):.1f} | all | |",
        f"| Spark Connect client, warm server | {connect:.1f} ({_span(runs['connect'], 'seconds')}) | {median('connect', 'cpu'):.1f} | "
        f"{median('connect', 'client_cpu'):.1f} | {median('connect', 'server_cpu'):.1f} |",
        "",
        f"spark-submit takes {submit / connect:.1f} times Connect's wall time. The server's own start-up, paid once: "
        f"{started['seconds']:.1f} s and {started['cpu']:.1f} CPU-seconds to its first answer.",
    ]
    return "\n".join(lines)


def _span(rows: list[dict[str, float]], key: str) -> str:
    values = [r[key] for r in rows]
    return f"{min(values):.1f} to {max(values):.1f}"


if __name__ == "__main__":
    os.environ.setdefault(jvm_archive.CACHE_ENV, str(ROOT / ".stack" / "jvm"))
    sys.exit(main())
