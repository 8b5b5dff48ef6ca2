"""`make demo`: the pipeline end to end on a local stack, checked record by record.

Starts kinesalite and the moto server, creates a 4-shard stream, produces a backlog, then runs the
DAG with `airflow dags test` for several cycles while a producer keeps writing. Prints a per-batch
table, reads the output back with pyarrow and checks that it holds every produced record exactly
once; exits non-zero if not. Stops what it started.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests")]

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore  # noqa: E402
from kinesis_replay.core.airflow_names import dag_ids  # noqa: E402
from stack import local_stack  # noqa: E402
from stack.harness import check_exactly_once, check_table_history, read_output  # noqa: E402
from stack.producer import Produced, ensure_stream, kinesis_client, produce  # noqa: E402

WORK = ROOT / ".stack" / "demo"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


class Producer(threading.Thread):
    """Keeps writing records at a steady rate while the DAG runs, until stopped."""

    def __init__(self, client: Any, stream: str, rate: float, start_index: int) -> None:
        super().__init__(daemon=True)
        self.client, self.stream, self.rate, self.index = client, stream, rate, start_index
        self.produced: list[Produced] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            chunk = max(1, int(self.rate / 4))
            self.produced += produce(self.client, self.stream, chunk, rate=self.rate, start_index=self.index)
            self.index += chunk


def airflow_env(config: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(WORK / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "KINESIS_REPLAY_CONFIG": str(config),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def run_cycle(n: int, dag_id: str, env: dict[str, str]) -> bool:
    log = WORK / f"cycle-{n}.log"
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.call(["airflow", "dags", "test", dag_id], env=env, stdout=out, stderr=subprocess.STDOUT)
    outcome = "ok" if code == 0 else f"FAILED (exit {code})"
    say(f"cycle {n}: airflow dags test {dag_id}: {outcome} in {time.monotonic() - started:.0f}s (log: {log.relative_to(ROOT)})")
    if code != 0:
        print("\n".join(log.read_text().splitlines()[-40:]))
    return code == 0


def batch_table(store: DynamoDBStateStore, pipeline_name: str) -> str:
    lines = [f"{'batch':>5}  {'status':<10} {'shards':>6} {'records':>8} {'bytes':>10} {'seconds':>8}  snapshot"]
    for b in store.list_batches(pipeline_name):
        records = b.result.records if b.result else 0
        size = b.result.bytes if b.result else 0
        seconds = (b.committed_at - b.created_at) if b.committed_at else timedelta(0)
        lines.append(
            f"{b.batch_id:>5}  {b.status.value:<10} {len(b.ranges):>6} {records:>8} {size:>10} {seconds.total_seconds():>8.1f}"
            f"  {b.snapshot_id if b.snapshot_id is not None else '-'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="backlog produced before the first cycle")
    parser.add_argument("--rate", type=float, default=40, help="records per second produced while the cycles run")
    parser.add_argument("--cycles", type=int, default=3, help="cycles while producing (one more drains the stream)")
    parser.add_argument("--kinesis-port", type=int, default=int(os.environ.get("KINESIS_PORT", 4567)))
    parser.add_argument("--moto-port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    args = parser.parse_args(argv)

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    state = WORK / "stack"
    say(f"starting kinesalite on :{args.kinesis_port} and the moto server on :{args.moto_port}")
    stack = local_stack.start(state, args.kinesis_port, args.moto_port)
    try:
        os.environ.update(stack.env())
        shipped = yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0]
        pipeline = {**shipped, "output": str(WORK / "output"), "schedule": None, "retries": 0}
        config = WORK / "pipelines.yaml"
        config.write_text(yaml.safe_dump({"pipelines": [pipeline]}))
        env = airflow_env(config)
        subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)

        client = kinesis_client()
        ensure_stream(client, pipeline["stream"], 4)
        produced = produce(client, pipeline["stream"], args.records)
        say(f"stream {pipeline['stream']}: 4 shards, {len(produced)} records produced; now producing {args.rate:.0f}/s")
        producer = Producer(client, pipeline["stream"], args.rate, len(produced))
        producer.start()
        dag_id = dag_ids(pipeline["name"])[0]
        ok = all(run_cycle(n, dag_id, env) for n in range(1, args.cycles + 1))
        producer.stopping.set()
        producer.join()
        produced += producer.produced
        say(f"producer stopped after {len(producer.produced)} more records; one last cycle drains the stream")
        ok = ok and run_cycle(args.cycles + 1, dag_id, env)

        store = DynamoDBStateStore(boto3.client("dynamodb"), pipeline["state_table"])
        print(batch_table(store, pipeline["name"]))
        result = check_exactly_once(produced, read_output(pipeline["output"]))
        say(f"output {pipeline['output']}: {result}")
        history = check_table_history(pipeline["output"])  # every snapshot: each batch wholly or not at all, never twice
        say(f"table history: {history or 'every snapshot holds whole batches, none twice'}")
        if not (ok and result.ok and not history):
            say("FAILED: the output does not hold every produced record exactly once")
            return 1
        say(f"OK: all {result.expected} produced records are in the output exactly once")
        return 0
    finally:
        local_stack.stop(state)
        say("local stack stopped")


if __name__ == "__main__":
    sys.exit(main())
