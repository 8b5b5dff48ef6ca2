"""Randomized fault schedules over one pipeline, and a checker of exactly once that reads the output with pyarrow.

A schedule is a seeded list of steps: produce records (plain or KPL-aggregated, on random partition
keys), run a regular cycle (with or without a fault), backfill stored batches, re-decode them after a
payload.schema change, split or merge a shard, and two mistakes an operator makes: losing the state table
(deleted, or renamed in the config), then recovering it from the output; and pointing a second pipeline at
the output.
The faults: SIGKILL to the Spark job while it reads, while it writes or after it wrote; the state table
unreachable from some write on, or one write applied with its answer lost; two cycles at once; the
run stopped after one of its tasks (as when the Airflow task process dies between steps); reads
throttled. A re-decode is cut short in its replay or its commit, then finished as an operator would.
Every step drives the real DAGs with dag.test() and the real spark-submit job.

The pipeline decodes JSON payloads with a payload.schema, and some records do not decode: they land in the
quarantine table. After the steps, clean cycles drain the stream, and the checker compares the output (both
tables) with what Kinesis acknowledged. The same seed gives the same schedule.

The output is a local folder with the embedded catalog, or (``--output s3``) ``s3://<bucket>/<prefix>`` on the
moto server with the table in moto's Glue: the replay job's tasks then write their files to S3, and the Airflow side
reaches S3 through the connection alone, as in test_s3_end_to_end.py.

    python tests/stack/chaos.py --schedules 100          # random seeds; make chaos SCHEDULES=100
    python tests/stack/chaos.py --seed 1234              # one schedule again
    python tests/stack/chaos.py --seed 1234 --output s3  # ... writing to S3; make chaos CHAOS_OUTPUT=s3
    python tests/stack/chaos.py --seed 1234 --read efo   # ... reading over enhanced fan-out; make chaos CHAOS_READ=efo

With ``--read efo`` the pipeline names a consumer (``read.consumer``), and its replays read over enhanced fan-out
through the project's HTTP/2 endpoint (tests/stack/efo_server.py, in front of the schedule's Kinesis proxy) with
subscriptions of a few events, so that every range renews and a killed job's next attempt meets its subscription.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT / "plugins", ROOT / "dags", ROOT / "spark_jobs", ROOT / "tests", ROOT / "bench"):  # as pyproject.toml gives pytest
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from kinesis_replay.core.airflow_names import dag_ids  # noqa: E402
from kinesis_replay.core.formats import path_batch_id  # noqa: E402
from kinesis_replay.core.state import range_checkpoint  # noqa: E402

CYCLE_FAULTS = (
    "none", "kill_spark_read", "kill_spark_write", "kill_spark_after_write", "state_unreachable", "state_lost_ack",
    "concurrent", "stop_after_plan", "stop_after_replay", "stop_after_verify", "throttle",
    "state_unreachable_after_table_commit", "concurrent_table_commits",
)  # fmt: skip
SHARDS = 2
STEP_KINDS = (
    "produce", "produce_aggregated", "cycle", "backfill", "split", "merge", "lose_state", "share_output", "cap", "table",
    "redecode",
)  # fmt: skip
STEP_WEIGHTS = (3, 2, 6, 1, 1, 1, 3, 1, 2, 2, 2)
LOSSES = ("deleted", "renamed")  # how a lose_state step loses the table
TABLE_FAULTS = ("rollback", "drop", "lose_metadata")  # what a table step does to the Iceberg table, with Iceberg's own tools
# Where a re-decode is cut short: a replay's Spark job killed; the run stopped once its replays staged the batches (the
# worker died before the commit task); the commit task dying between the table's snapshot and the quarantine table's;
# the state table dark from the ledger's update after both snapshots, or that update applied with its answer lost; the
# commit task dying before a batch's commit record, which the commit writes before the batch's ledger update.
# died_before_commit_record with the recovery clear failed the checker until the re-decode's commit wrote each record
# before its ledger entry (a resumed commit found the entry re-decoded and never wrote the record again: it kept the
# old attempt and decoding); seed 1643 (steps 3) takes it and passes. A table step that rolls the table back past a
# re-decode's snapshot (seed 4241) failed the checker while the holdings were only batches and counts, which such a
# rollback keeps: the snapshots' summaries and the ledger's head now count the re-decodes made visible, so the next
# plan refuses it and the restore puts the re-decoded files back (a seed of the cover since).
REDECODE_FAULTS = (
    "none", "kill_replay", "stop_after_replay", "died_before_quarantine", "ledger_unreachable", "ledger_lost_ack",
    "died_before_commit_record",
)  # fmt: skip
# How the operator finishes a re-decode cut short: clears the run's failed tasks (the same run, so the same run id), or
# triggers the re-decode again (a new run, which replays and stages the selection again).
RECOVERIES = ("clear", "again")
# The pipeline's payloads: JSON, decoded with payload.schema. Every BAD_EVERY-th record's "i" is not a number, so it
# cannot be decoded (the batch's share of them may be any: max_bad_share is 1) and lands in the quarantine table. Each
# re-decode step adds the next of ADDED_FIELDS to the schema (a change the table accepts: a column is added); once all
# are in, a re-decode decodes with the settings as they are.
PAYLOAD = {"format": "json", "schema": "i BIGINT", "max_bad_share": 1.0}
ADDED_FIELDS = ("seed BIGINT", "agg BOOLEAN")
BAD_EVERY = 13
DECODED_FIELDS = ("i", "seed", "agg")  # the payloads' fields, which a payload.schema may name
DRAIN_CYCLES = 4  # clean cycles after the steps; a drained stream makes the last one idle
OUTPUTS = ("local", "s3")  # where a schedule's pipeline writes: a local folder, or S3 (moto) with the Glue catalog
READS = ("getrecords", "efo")  # how its replays read: GetRecords, or SubscribeToShard (enhanced fan-out)


@dataclass(frozen=True)
class Step:
    kind: str  # one of STEP_KINDS
    fault: str = "none"  # a cycle's fault, one of CYCLE_FAULTS; how lose_state loses the table, one of LOSSES; REDECODE_FAULTS
    n: int = 0  # records or aggregates to produce; the write a state fault hits
    recovery: str = ""  # how the operator finishes a re-decode cut short, one of RECOVERIES

    def __str__(self) -> str:
        if self.kind.startswith("produce"):
            return f"{self.kind} {self.n}"
        if self.kind == "cycle":
            return f"cycle fault={self.fault}" + (f" write={self.n}" if self.fault.startswith("state_") else "")
        if self.kind == "redecode":
            return f"redecode fault={self.fault}" + (f" recovery={self.recovery}" if self.recovery else "")
        if self.kind in ("lose_state", "table"):
            return f"{self.kind} {self.fault}"
        if self.kind == "cap":
            return f"cap span={self.n}ms"
        return self.kind


def generate(seed: int, steps: int, spark_steps_max: int = 2) -> list[Step]:
    """A schedule: records first, then ``steps`` random steps, of which at most ``spark_steps_max`` run a Spark job.

    A Spark job is most of a step's cost (its start-up alone is seconds), so a schedule is cheap by
    having few of them, not by having few faults: a cycle killed early or failing at commit is cheap.
    """
    rng = random.Random(seed)
    schedule = [Step("produce", n=rng.randint(50, 400))]
    spark_steps = 0
    while len(schedule) < steps + 1:
        kind = rng.choices(STEP_KINDS, STEP_WEIGHTS)[0]
        if kind in ("backfill", "lose_state", "share_output", "table", "redecode") and not any(s.kind == "cycle" for s in schedule):
            continue  # nothing committed to backfill or to lose yet, and no owner of the output to intrude on
        if kind in ("cycle", "backfill", "lose_state", "redecode"):  # a recovery runs a cycle
            if spark_steps >= spark_steps_max:
                continue
            spark_steps += 1
        if kind == "cycle":
            fault = rng.choice(CYCLE_FAULTS)
            schedule.append(Step("cycle", fault, rng.randint(1, 8) if fault.startswith("state_") else 0))
        elif kind == "produce":
            schedule.append(Step("produce", n=rng.randint(10, 300)))
        elif kind == "produce_aggregated":
            schedule.append(Step("produce_aggregated", n=rng.randint(1, 8)))
        elif kind == "lose_state":
            schedule.append(Step("lose_state", rng.choice(LOSSES)))
        elif kind == "table":
            schedule.append(Step("table", rng.choice(TABLE_FAULTS)))
        elif kind == "cap":
            schedule.append(Step("cap", n=rng.randint(1, 400)))
        elif kind == "redecode":
            fault = rng.choice(REDECODE_FAULTS)
            schedule.append(Step("redecode", fault, recovery="" if fault == "none" else rng.choice(RECOVERIES)))
        else:
            schedule.append(Step(kind))
    return schedule


@dataclass
class Outcome:
    seed: int
    steps: list[Step]
    history: list[str] = field(default_factory=list)
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    output: str = "local"  # one of OUTPUTS
    read: str = "getrecords"  # one of READS

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "steps": [vars(step) for step in self.steps]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        return cls(**{**data, "steps": [Step(**step) for step in data["steps"]]})

    def report(self) -> str:
        on = ("" if self.output == "local" else f" (output on {self.output})") + (
            "" if self.read == "getrecords" else f" (read over {self.read})"
        )
        lines = [f"seed {self.seed}{on}: {'ok' if self.ok else 'FAILED'} in {self.seconds:.0f}s, {self.records} records"]
        lines += [f"  {line}" for line in self.history]
        lines += [f"  VIOLATION: {v}" for v in self.violations]
        if not self.ok:
            again = f"python tests/stack/chaos.py --seed {self.seed} --steps {len(self.steps) - 1}"
            again += "" if self.output == "local" else f" --output {self.output}"
            again += "" if self.read == "getrecords" else f" --read {self.read}"
            lines.append(f"  reproduce: {again} (same --spark-steps)")
        return "\n".join(lines)


@dataclass(frozen=True)
class OutputView:
    """A schedule's output as the checker and the operator's steps see it: with pyarrow, pyiceberg and boto3, not project code.

    ``root`` is the output root within ``filesystem``: an absolute path on local disk, ``bucket/prefix`` on S3.
    ``load_table`` loads the pipeline's Iceberg table as a reader of its own would (None: no table yet), and
    ``load_quarantine`` its quarantine table (None: no record quarantined yet). ``s3`` is the checker's own S3 client,
    for what pyarrow's file system does not show: object ETags and uploads in progress.
    """

    uri: str  # the output as the pipeline's config names it
    filesystem: Any
    root: str
    load_table: Callable[[], Any | None]
    load_quarantine: Callable[[], Any | None]
    s3: Any = None

    @classmethod
    def local(cls, output: Path) -> OutputView:
        from pyarrow import fs

        from stack.harness import output_table

        tables = (lambda: output_table(output), lambda: output_table(output, quarantine=True))
        return cls(str(output), fs.LocalFileSystem(), str(output), *tables)

    @classmethod
    def on_s3(cls, moto_url: str, bucket: str, prefix: str, namespace: str, table: str) -> OutputView:
        import boto3
        from pyarrow import fs

        from stack.harness import glue_table
        from stack.local_stack import LOCAL_KEY, REGION

        endpoint = moto_url.split("://", 1)[1]
        filesystem = fs.S3FileSystem(access_key=LOCAL_KEY, secret_key=LOCAL_KEY, scheme="http", endpoint_override=endpoint, region=REGION)
        client = boto3.client("s3", endpoint_url=moto_url, region_name=REGION, aws_access_key_id=LOCAL_KEY, aws_secret_access_key=LOCAL_KEY)
        return cls(
            f"s3://{bucket}/{prefix}", filesystem, f"{bucket}/{prefix}", lambda: glue_table(moto_url, namespace, table),
            lambda: glue_table(moto_url, namespace, f"{table}_quarantine"), client,
        )  # fmt: skip

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def is_dir(self, path: str) -> bool:
        from pyarrow import fs

        return bool(self.filesystem.get_file_info(path).type == fs.FileType.Directory)

    def is_file(self, path: str) -> bool:
        from pyarrow import fs

        return bool(self.filesystem.get_file_info(path).type == fs.FileType.File)

    def read_text(self, path: str) -> str:
        with self.filesystem.open_input_stream(path) as stream:
            return bytes(stream.read()).decode()

    def files(self) -> list[tuple[str, ...]]:
        """Every file under the root, as path parts below it (on S3 the objects, folder markers left out)."""
        from pyarrow import fs

        if not self.is_dir(self.root):
            return []
        infos = self.filesystem.get_file_info(fs.FileSelector(self.root, recursive=True))
        return [tuple(i.path[len(self.root) + 1 :].split("/")) for i in infos if i.type == fs.FileType.File]

    def relative(self, uri: str) -> tuple[str, ...]:
        """A file the table references (``file:///...`` or ``s3://bucket/...``), as path parts below the root."""
        path = uri.split("://", 1)[1] if "://" in uri else uri
        if self.s3 is None:
            path = "/" + path.lstrip("/")  # file:///x and file:/x alike
        if not path.startswith(self.root + "/"):
            return ("..", path)
        return tuple(path[len(self.root) + 1 :].split("/"))

    def written(self, folders: tuple[str, ...], suffix: str) -> set[tuple[str, ...]]:
        """The files under ``folders`` named ``*<suffix>``, each with what changes when it is written again: a local file's
        modification time; an S3 object's ETag, and a multipart upload in progress (a file pyarrow has opened and not
        yet closed: S3 shows the object only once it is whole)."""
        if self.s3 is None:
            found: set[tuple[str, ...]] = set()
            for folder in folders:
                root = Path(self.path(folder))
                if root.exists():
                    found |= {(str(f), str(f.stat().st_mtime_ns)) for f in root.rglob(f"*{suffix}*")}
            return found
        bucket, prefix = self.root.split("/", 1)
        found = set()
        for folder in folders:
            under = f"{prefix}/{folder}/"
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=under):
                found |= {(o["Key"], o["ETag"]) for o in page.get("Contents", []) if suffix in o["Key"].rsplit("/", 1)[1]}
            uploads = self.s3.list_multipart_uploads(Bucket=bucket, Prefix=under).get("Uploads", [])
            found |= {(u["Key"], u["UploadId"]) for u in uploads if suffix in u["Key"].rsplit("/", 1)[1]}
        return found


class Schedule:
    """One schedule's pipeline on the running local stack: its stream, state table, output and proxies.

    ``output``: ``local``, a folder under ``work`` with the embedded catalog; or ``s3``, a bucket of its own on the moto
    server, the table in a Glue database of its own (an S3 output needs a catalog outside it).
    """

    def __init__(self, seed: int, steps: list[Step], stack: Any, work: Path, output: str = "local", read: str = "getrecords") -> None:
        import boto3

        from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
        from stack.faults import StateTableProxy
        from stack.harness import TEST_SPARK_CONF, glue_table_config, pipeline_entry
        from stack.kinesis_proxy import KinesisProxy, ProxyLimits
        from stack.producer import ensure_stream, kinesis_client

        self.seed, self.steps, self.stack, self.work = seed, steps, stack, work
        self.rng = random.Random(seed ^ 0x5EED)
        self.outcome = Outcome(seed, steps, output=output, read=read)
        self.name = f"chaos{seed % 10**8:08d}{uuid.uuid4().hex[:4]}"
        self.kinesis = kinesis_client(stack.kinesis_url)
        ensure_stream(self.kinesis, self.name, SHARDS)
        self.dynamodb = boto3.client("dynamodb", endpoint_url=stack.moto_url)
        self.store = DynamoDBStateStore(self.dynamodb, f"kr-{self.name}")
        self.store.ensure_table()
        self.unlimited = ProxyLimits(get_records_per_second=1000, bytes_per_second=1e12, get_shard_iterator_per_second=1000)
        self.kinesis_proxy = KinesisProxy(stack.kinesis_url, self.unlimited).start()
        self.state_proxy = StateTableProxy(stack.moto_url).start()
        if output == "s3":
            bucket, namespace = f"chaos-{uuid.uuid4().hex[:10]}", f"chaos_{uuid.uuid4().hex[:8]}"
            self.view = OutputView.on_s3(stack.moto_url, bucket, f"raw/{self.name}", namespace, self.name)
            self.view.s3.create_bucket(Bucket=bucket)
        else:
            self.view = OutputView.local(work / "out")
        self.entry = pipeline_entry(self.name, self.name, self.view.uri, f"kr-{self.name}")
        if output == "s3":
            self.entry["table"] = glue_table_config(stack.moto_url, namespace)
        # Spark's start-up is most of a cycle: one local core, no UI and a JVM for short jobs keep it cheap.
        self.entry["spark"] = {"master": "local[1]", "conf": {**TEST_SPARK_CONF, "spark.sql.shuffle.partitions": "1"}}
        self.entry["payload"] = dict(PAYLOAD)
        self.efo: Any = None
        if read == "efo":  # the replays subscribe through the EFO endpoint, whose reads go through the Kinesis proxy
            from stack.efo_server import EfoServer, Rules

            rules = Rules(lifetime_events=2, event_records=5, in_use_seconds=1.0, subscribe_interval=0.5)
            self.efo = EfoServer(self.kinesis_proxy.url, rules).start()
            self.entry["read"] = {**self.entry.get("read", {}), "consumer": "chaos", "in_use_wait_seconds": 1.0}
        self.produced: list[Any] = []
        self.index = 0

    # -- environment ------------------------------------------------------------------------------

    def connection(self) -> dict[str, Any]:
        """aws_default for the tasks: Kinesis and DynamoDB through this schedule's proxies."""
        conn = self.stack.connection()
        conn["extra"]["service_config"]["kinesis"]["endpoint_url"] = self.kinesis_proxy.url if self.efo is None else self.efo.url
        conn["extra"]["service_config"]["dynamodb"]["endpoint_url"] = self.state_proxy.url
        return conn

    def dags(self, entry: dict[str, Any] | None = None) -> dict[str, Any]:
        """Fresh DAG objects each run (Airflow 3.3.2 keeps a run's conf on its DAG's Params in-process).

        ``entry``: another pipeline's, in a config of its own (as in another deployment), instead of this one's.
        """
        from stack.harness import load_dags

        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(self.connection())
        config = self.work / ("pipelines.yaml" if entry is None else f"{entry['name']}.yaml")
        return load_dags(config, entry or self.entry)

    @contextmanager
    def reaching_s3(self) -> Iterator[None]:
        """Project code the harness calls itself (the commit records, the plan's view of the table) reaches S3 as a DAG
        task does: through the pipeline's connection (the environment names no S3 endpoint)."""
        import kinesis_replay_tasks as tasks
        from kinesis_replay.adapters import files
        from kinesis_replay.core.config import parse_config

        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(self.connection())
        (pipeline,) = parse_config({"pipelines": [self.entry]})
        with files.reaching_s3(tasks.s3_access(pipeline)):
            yield

    def log(self, line: str) -> None:
        self.outcome.history.append(line)

    def close(self) -> None:
        if self.efo is not None:
            self.efo.stop()
        self.kinesis_proxy.stop()
        self.state_proxy.stop()

    # -- steps ------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        started = time.monotonic()
        try:
            for step in self.steps:
                getattr(self, f"step_{step.kind}")(step)
            self.drain()
            self.check()
        except Exception:
            self.outcome.violations.append("the harness failed:\n" + traceback.format_exc())
        finally:
            self.close()
            self.outcome.seconds = time.monotonic() - started
        return self.outcome

    def _key(self) -> str:
        return f"key-{self.rng.randrange(10**6)}"

    def _payload(self, **extra: Any) -> bytes:
        """The next record's payload; every BAD_EVERY-th one cannot be decoded (its "i" is no number)."""
        self.index += 1
        return json.dumps({"i": self.index if self.index % BAD_EVERY else f"#{self.index}", "seed": self.seed, **extra}).encode()

    def step_produce(self, step: Step) -> None:
        from stack.producer import Produced

        records = []
        for _ in range(step.n):
            records.append((self._key(), self._payload()))
        for start in range(0, len(records), 500):
            chunk = records[start : start + 500]
            pending = list(chunk)
            while pending:
                response = self.kinesis.put_records(StreamName=self.name, Records=[{"PartitionKey": k, "Data": d} for k, d in pending])
                retry = []
                for (key, data), result in zip(pending, response["Records"], strict=True):
                    if "SequenceNumber" in result:
                        self.produced.append(Produced(result["ShardId"], result["SequenceNumber"], key, data))
                    else:
                        retry.append((key, data))
                pending = retry
        self.log(f"{step}: {step.n} records")

    def step_produce_aggregated(self, step: Step) -> None:
        from aws_kinesis_agg.aggregator import RecordAggregator

        from stack.producer import Produced

        users = 0
        for _ in range(step.n):
            aggregator = RecordAggregator()
            batch = []
            for _ in range(self.rng.randint(2, 20)):
                key, data = self._key(), self._payload(agg=True)
                aggregator.add_user_record(key, data)
                batch.append((key, data))
            key, explicit_hash_key, blob = aggregator.clear_and_get().get_contents()
            extra = {"ExplicitHashKey": explicit_hash_key} if explicit_hash_key else {}
            result = self.kinesis.put_record(StreamName=self.name, PartitionKey=key, Data=blob, **extra)
            self.produced += [Produced(result["ShardId"], result["SequenceNumber"], k, d, sub) for sub, (k, d) in enumerate(batch)]
            users += len(batch)
        self.log(f"{step}: {users} user records")

    def open_shards(self) -> list[dict[str, Any]]:
        shards = self.kinesis.list_shards(StreamName=self.name)["Shards"]
        return [s for s in shards if "EndingSequenceNumber" not in s.get("SequenceNumberRange", {})]

    def step_cap(self, step: Step) -> None:
        """The operator caps the pipeline's batches (max_batch.span), and records arrive spread over more than the cap:
        the next cycles land them in several capped batches, each queuing the next."""
        self.entry["max_batch"] = {"span": f"{step.n}ms"}
        for _ in range(4):
            self.step_produce(Step("produce", n=self.rng.randint(5, 30)))
            time.sleep(0.15)
        self.log(f"{step}: batches are capped from here on")

    def step_split(self, step: Step) -> None:
        from stack.producer import split_shard

        shard = self.rng.choice(self.open_shards())["ShardId"]
        split_shard(self.kinesis, self.name, shard)
        self.log(f"split {shard}")

    def step_merge(self, step: Step) -> None:
        from stack.producer import merge_shards

        shards = sorted(self.open_shards(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
        pairs = [
            (a, b)
            for a, b in itertools.pairwise(shards)
            if int(a["HashKeyRange"]["EndingHashKey"]) + 1 == int(b["HashKeyRange"]["StartingHashKey"])
        ]
        if not pairs:
            self.log("merge: no adjacent open shards")
            return
        a, b = self.rng.choice(pairs)
        merge_shards(self.kinesis, self.name, a["ShardId"], b["ShardId"])
        self.log(f"merge {a['ShardId']} + {b['ShardId']}")

    def step_backfill(self, step: Step) -> None:
        """The operator backfills committed batches. A batch decoded before a re-decode step changed payload.schema would
        be refused (a backfill gives a batch its rows again as they were): the operator picks among those decoded as now."""
        from kinesis_replay.core.decoding import Decoding
        from kinesis_replay.core.state import BatchStatus
        from stack.harness import run_dag

        now = Decoding.of(self.entry["payload"]["format"], self.entry["payload"]["schema"])
        batches = [b for b in self.store.list_batches(self.name) if b.status == BatchStatus.COMMITTED]
        committed = [b.batch_id for b in batches if b.verified_result().decoding == now]
        if not committed:
            self.log(f"backfill: no committed batch {'decoded as the pipeline decodes now' if batches else 'yet'}")
            return
        chosen = sorted(self.rng.sample(committed, k=self.rng.randint(1, min(2, len(committed)))))
        dag = self.dags()[dag_ids(self.name)[1]]
        result = run_dag(dag, run_conf={"batches": {"batch_ids": chosen}})
        self.log(f"backfill {chosen}: {result.state} {compact(result.tasks)}")

    def step_redecode(self, step: Step) -> None:
        """The operator adds the next of ADDED_FIELDS to payload.schema (once all are in, the settings stay), and re-decodes
        committed batches: the backfill DAG with ``{"batches": {...}, "redecode": true}``. The step's fault cuts the
        re-decode short (REDECODE_FAULTS); the operator then clears the run's failed tasks or triggers it again.

        Once it is done, each chosen batch's ledger entry names the run that re-decoded it and the pipeline's decoding
        now, and no batch is left staged; in every snapshot either table made meanwhile, the selection is in one
        decoding, the old or the new, never a mix (``one_decoding``). Refused, naming it, while a regular batch is in
        flight: that is checked instead.
        """
        from datetime import UTC, datetime

        from kinesis_replay.adapters import commit_records, quarantine_table
        from stack.faults import REDECODED, SparkKiller, StateFault, dies_before
        from stack.harness import run_dag

        committed = self.committed()
        if not committed:
            self.log(f"{step}: no committed batch yet")
            return
        chosen = sorted(self.rng.sample(committed, k=self.rng.randint(1, min(2, len(committed)))))
        payload = self.entry["payload"]
        added = next((f for f in ADDED_FIELDS if f not in payload["schema"].split(", ")), None)
        if added is not None:
            self.entry["payload"] = {**payload, "schema": f"{payload['schema']}, {added}"}
        conf = {"batches": {"batch_ids": chosen}, "redecode": True}
        in_flight = self.store.get_head(self.name).in_flight
        held = {which: (self.snapshot_ids(which), self.batch_files(which, chosen)) for which in ("table", "quarantine")}  # before it
        # The run's dates: dag.test() at the same ones runs the same run again (its run id is made of them), its tasks cleared.
        when = {"logical_date": (now := datetime.now(UTC)), "run_after": now}
        dag = self.dags()[dag_ids(self.name)[1]]
        # The run stops once its replays staged the batches: its commit task never runs. dag.test() marks it done instead
        # (a partial DAG, as a cycle's stop_after_* runs, loses the replays' mapping: Airflow 3.3 fails them).
        stopped = "^commit$" if step.fault == "stop_after_replay" else None
        killer, died = None, None
        if step.fault == "kill_replay":
            killer = SparkKiller(self.name, self.kill_moment("write"), interval=0.1 if self.view.s3 is not None else 0.02)
            killer.start()
        elif step.fault.startswith("ledger_"):
            self.state_proxy.arm(StateFault("unreachable" if step.fault == "ledger_unreachable" else "lost_ack", 1, marker=REDECODED))
        try:
            if step.fault.startswith("died_before_"):
                cut = (quarantine_table, "commit", "the quarantine table's commit")
                if step.fault == "died_before_commit_record":
                    cut = (commit_records, "write_commit_record", "a re-decoded batch's commit record")
                with dies_before(*cut) as died:
                    first = run_dag(dag, run_conf=conf, **when)
            else:
                first = run_dag(dag, run_conf=conf, mark_success_pattern=stopped, **when)
        finally:
            if killer is not None:
                killer.cancel()
                killer.join()
            if killer is not None:
                fired = killer.fired
            elif died is not None:
                fired = died[0] if died else None
            else:
                fired = self.state_proxy.fired
            self.state_proxy.arm(None)
        what = f"; fault: {fired or 'did not fire'}" if step.fault not in ("none", "stop_after_replay") else ""
        change = f"payload.schema + {added!r}" if added is not None else "payload.schema as it was"
        tasks = {**first.tasks, "commit": "never ran"} if stopped else first.tasks
        self.log(f"{step}: batches {chosen}, {change}: {first.state} {compact(tasks)}{what}")
        if first.tasks.get("select") != "success":
            if in_flight is None:
                self.outcome.violations.append(f"{step}: the re-decode of batches {chosen} was refused with no batch in flight")
            return
        finished = first
        if tasks.get("commit") != "success":
            if step.fault in ("kill_replay", "stop_after_replay"):  # cut before its commit: readers see nothing of it yet
                seen = [which for which, (_, files) in held.items() if self.batch_files(which, chosen) != files]
                if seen:
                    self.outcome.violations.append(f"{step}: the {' and the '.join(seen)} changed before the re-decode's commit")
            again = self.dags()[dag_ids(self.name)[1]]
            if step.recovery == "again":
                finished = run_dag(again, run_conf=conf)
            else:  # a failed replay is replayed again (dag.test() runs all the run's replays anew); else only the commit runs
                replayed = None if step.fault == "kill_replay" else "^replay$"
                finished = run_dag(again, run_conf=conf, mark_success_pattern=replayed, **when)
            self.log(f"recovery ({step.recovery or 'none'}): {finished.state} {compact(finished.tasks)}")
        self.outcome.violations += self.check_redecoded(step, chosen, finished, held)

    def load(self, which: str) -> Any | None:
        """The pipeline's table (``which`` "table") or its quarantine table ("quarantine"), as a reader loads it."""
        return self.view.load_table() if which == "table" else self.view.load_quarantine()

    def snapshot_ids(self, which: str) -> set[int]:
        table = self.load(which)
        return set() if table is None else {s.snapshot_id for s in table.metadata.snapshots}

    def batch_files(self, which: str, batch_ids: list[int], snapshot_id: int | None = None) -> dict[int, frozenset[str]]:
        """The files each batch has in the pipeline's table or the quarantine table (``which``), at its current snapshot
        (or ``snapshot_id``), read with pyiceberg."""
        table = self.load(which)
        if table is None or table.current_snapshot() is None:
            return {b: frozenset() for b in batch_ids}
        found: dict[int, set[str]] = {b: set() for b in batch_ids}
        for task in table.scan(snapshot_id=snapshot_id, selected_fields=("batch_id",)).plan_files():
            batch_id = task.file.partition[0]
            if batch_id in found:
                found[batch_id].add(task.file.file_path)
        return {b: frozenset(files) for b, files in found.items()}

    def check_redecoded(
        self, step: Step, chosen: list[int], finished: Any, held: dict[str, tuple[set[int], dict[int, frozenset[str]]]]
    ) -> list[str]:
        """After a re-decode's recovery: it committed; each chosen batch names the run and the pipeline's decoding now, none
        is staged; every snapshot made meanwhile holds the whole selection in one decoding (``one_decoding``)."""
        from kinesis_replay.core.decoding import Decoding

        problems = []
        if finished.tasks.get("commit") != "success":
            problems.append(f"{step}: the re-decode of batches {chosen} was not committed once recovered: {compact(finished.tasks)}")
        now = Decoding.of(self.entry["payload"]["format"], self.entry["payload"]["schema"])
        for batch_id, batch in sorted(self.store.get_batches(self.name, chosen).items()):
            if batch.redecoded_by != finished.run_id:
                problems.append(f"{step}: batch {batch_id} names {batch.redecoded_by} as its re-decode, not run {finished.run_id}")
            elif batch.verified_result().decoding != now:
                problems.append(f"{step}: batch {batch_id} was re-decoded, and its ledger entry names {batch.verified_result().decoding}")
        staged = [(b.batch_id, b.staged_by) for b in self.store.list_batches(self.name) if b.staged is not None]
        if staged:
            problems.append(f"{step}: batches are left staged once the re-decode is done (batch, run): {staged}")
        for which, (snapshots, files) in held.items():
            problems += [f"{step}: {problem}" for problem in self.one_decoding(which, snapshots, files)]
        return problems

    def one_decoding(self, which: str, snapshots: set[int], before: dict[int, frozenset[str]]) -> list[str]:
        """Every snapshot of the pipeline's table or the quarantine table (``which``) made since it had ``snapshots``
        holds every chosen batch in its files of then (``before``), or none of them in those: a reader saw the selection
        in the old decoding or the new one, never a mix. A batch with no files there, then nor in the snapshot, says nothing."""
        table = self.load(which)
        if table is None:
            return []
        problems = []
        for snapshot in [s for s in table.metadata.snapshots if s.snapshot_id not in snapshots]:
            files = self.batch_files(which, list(before), snapshot.snapshot_id)
            old = sorted(b for b in before if (files[b] or before[b]) and files[b] == before[b])
            new = sorted(b for b in before if files[b] != before[b])
            if old and new:
                problems.append(f"{which} snapshot {snapshot.snapshot_id} holds batches {new} re-decoded, and {old} as they were")
        return problems

    def step_lose_state(self, step: Step) -> None:
        """The operator loses the state table: deletes it, or renames it in the config. A cycle must refuse (once
        anything is committed) and write nothing; a run with recover_from_output rebuilds the state and goes on."""
        from kinesis_replay.adapters.commit_records import committed_batch_ids
        from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
        from stack.harness import run_dag

        if step.fault == "renamed":
            self.entry["state_table"] = f"{self.store.table}-r{self.rng.randrange(10**6)}"
            self.store = DynamoDBStateStore(self.dynamodb, self.entry["state_table"])
        else:
            self.dynamodb.delete_table(TableName=self.store.table)
            self.dynamodb.get_waiter("table_not_exists").wait(TableName=self.store.table)
        with self.reaching_s3():
            committed = committed_batch_ids(self.view.uri)
        result = run_dag(self.dags()[dag_ids(self.name)[0]])
        self.log(f"{step}: {result.state} {compact(result.tasks)}")
        if not committed:
            return  # nothing was committed yet: the new table is a fresh start, and the cycle ran as any other
        if result.tasks.get("plan") != "failed" or self.store.get_head(self.name).version != 0:
            self.outcome.violations.append(f"{step}: the cycle after the loss was not refused before planning: {compact(result.tasks)}")
        recovered = run_dag(self.dags()[dag_ids(self.name)[0]], run_conf={"recover_from_output": True})
        self.log(f"recover: {recovered.state} {compact(recovered.tasks)}")

    def step_table(self, step: Step) -> None:
        """The operator changes the table with Iceberg's own tools: rolls it back to an older snapshot, drops it from its
        catalog, or deletes its metadata/ folder. A cycle must then refuse before planning when the table lacks committed
        batches, and write nothing; the documented way out (the backfill DAG's restore, a dry run first) puts them back."""
        from pyiceberg.table.snapshots import ancestors_of

        from kinesis_replay.adapters import iceberg_table
        from kinesis_replay.core.config import parse_config
        from kinesis_replay.core.holdings import compare
        from kinesis_replay.core.ledger import ledger_of
        from stack.harness import run_dag

        try:
            table = self.view.load_table()
        except FileNotFoundError:  # its metadata is gone already (a restore that did not run)
            table = None
        if table is None or table.current_snapshot() is None:
            self.log(f"{step}: no table yet")
            return
        if step.fault == "rollback":
            older = list(ancestors_of(table.current_snapshot(), table.metadata))[1:]
            if not older:
                self.log(f"{step}: the table has one snapshot")
                return
            target = self.rng.choice(older)
            table.manage_snapshots().rollback_to_snapshot(target.snapshot_id).commit()
            what = f"to snapshot {target.snapshot_id} (batch {target.summary.additional_properties.get('kinesis-replay.batch-id')})"
        elif step.fault == "drop":
            table.catalog.drop_table(table.name())
            what = "from its catalog"
        else:
            self.view.filesystem.delete_dir(self.view.path("metadata"))
            what = "metadata/ deleted"
        (p,) = parse_config({"pipelines": [self.entry]})
        try:
            with self.reaching_s3():
                state = iceberg_table.table_state(iceberg_table.load_table(p))
        except iceberg_table.TableMetadataLostError:
            state = iceberg_table.table_state(None)
        lacking = compare(state, ledger_of(self.store.get_head(self.name)))
        dags = self.dags()
        result = run_dag(dags[dag_ids(self.name)[0]])
        self.log(f"{step} {what}: the cycle after it {result.state} {compact(result.tasks)}")
        if lacking is not None and lacking.missing and result.tasks.get("plan") != "failed":
            self.outcome.violations.append(f"{step}: the table lacked batches {lacking.missing[:5]}, and the cycle was not refused")
        for conf in ({"restore_table": True, "dry_run": True}, {"restore_table": True}):
            restored = run_dag(self.dags()[dag_ids(self.name)[1]], run_conf=conf)
            self.log(f"restore{' (dry run)' if 'dry_run' in conf else ''}: {restored.state} {compact(restored.tasks)}")

    def step_share_output(self, step: Step) -> None:
        """The operator points a second pipeline, on another stream with records of its own, at this output (spelled
        another way). Its cycle must fail before writing anything; the checker then finds only this pipeline's records."""
        from stack.harness import run_dag
        from stack.producer import ensure_stream, produce

        stream = f"{self.name}-x"
        ensure_stream(self.kinesis, stream, 1)
        produce(self.kinesis, stream, 20)
        spelled = f"file://{self.view.uri}/./" if self.view.s3 is None else f"s3a://{self.view.root}/./"
        intruder = {**self.entry, "name": f"{self.name}x", "stream": stream, "output": spelled}
        try:
            result = run_dag(self.dags(intruder)[dag_ids(intruder["name"])[0]])
        finally:
            self.kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
        self.log(f"{step}: the second pipeline's cycle {result.state} {compact(result.tasks)}")
        if "success" in (result.tasks.get("plan"), result.tasks.get("replay"), result.tasks.get("commit")):
            self.outcome.violations.append(f"{step}: a second pipeline wrote to the output: {compact(result.tasks)}")

    def step_cycle(self, step: Step) -> None:
        from stack.faults import SparkKiller, StateFault
        from stack.harness import run_dag

        fault, killer = step.fault, None
        dag = self.dags()[dag_ids(self.name)[0]]
        if fault == "concurrent":
            self.concurrent_cycles()
            return
        if fault.startswith("stop_after_"):
            dag = dag.partial_subset(task_ids=[fault.removeprefix("stop_after_")], include_upstream=True, include_downstream=False)
        if fault == "state_unreachable_after_table_commit":  # the batch is in the table; its checkpoints have not moved
            from stack.faults import TABLE_COMMITTED

            self.state_proxy.arm(StateFault("unreachable", 1, marker=TABLE_COMMITTED))
        elif fault.startswith("state_"):
            self.state_proxy.arm(StateFault(fault.removeprefix("state_"), step.n))
        committer = TableCommitter(self.view.load_table) if fault == "concurrent_table_commits" else None
        if committer is not None:
            committer.start()
        if fault == "throttle":
            from stack.kinesis_proxy import ProxyLimits

            self.kinesis_proxy.limits = ProxyLimits(get_records_per_second=2, bytes_per_second=20_000, get_shard_iterator_per_second=2)
        if fault.startswith("kill_spark_"):
            moment = fault.removeprefix("kill_spark_")
            # A look at S3 is a few requests to the moto server, which serves the job too: ten looks a second, not fifty.
            interval = 0.1 if self.view.s3 is not None and moment != "read" else 0.02
            killer = SparkKiller(self.name, self.kill_moment(moment), interval=interval)
            killer.start()
        try:
            result = run_dag(dag)
        finally:
            if killer is not None:
                killer.cancel()
                killer.join()
            if committer is not None:
                committer.stop()
            fired = killer.fired if killer is not None else committer.fired() if committer is not None else self.state_proxy.fired
            self.state_proxy.arm(None)
            self.kinesis_proxy.limits = self.unlimited
        what = f"; fault: {fired or 'did not fire'}" if fault not in ("none", "throttle") and not fault.startswith("stop_") else ""
        if fault == "throttle":
            what = f"; throttled {self.kinesis_proxy.throttled()} calls so far"
        self.log(f"{step}: {result.state} {compact(result.tasks)}{what}")

    def kill_moment(self, moment: str) -> Any:
        """When to kill: once the job has read (GetRecords served after it started), is writing, or has written.

        Each moment compares with what it first saw once the job was running (the plan's tip search reads too, and an
        earlier attempt's files and manifest are still there). Writing: a Parquet file the job opened, in its staging
        path or in its attempt's folder of a table (on S3, an upload begun or an object written). Written: its result
        manifest, new or written again.
        """
        from kinesis_replay.adapters.layout import DATA_DIR, RESULTS_DIR, STAGING_DIR

        baseline: list[Any] = []

        def ready(started_at: float | None) -> bool:
            if moment == "read":
                seen: Any = sum(c.get_records for c in self.kinesis_proxy.counters.values())
            elif moment == "write":
                seen = self.view.written((STAGING_DIR, DATA_DIR), ".parquet")
            else:
                seen = self.view.written((RESULTS_DIR,), ".json")
            if not baseline:
                baseline.append(seen)
            return bool(seen > baseline[0]) if moment == "read" else bool(seen - baseline[0])

        return ready

    def concurrent_cycles(self) -> None:
        """Two `airflow dags test` processes of the same pipeline at once, each with an Airflow database of its own."""
        airflow = Path(sys.executable).parent / "airflow"
        template = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
        self.dags()  # writes the config the two processes read
        procs = []
        for i in range(2):
            home = self.work / f"airflow-{i}-{uuid.uuid4().hex[:6]}"
            home.mkdir()
            shutil.copy(template, home / "airflow.db")
            env = {**os.environ, "AIRFLOW_HOME": str(home), "KINESIS_REPLAY_CONFIG": str(self.work / "pipelines.yaml")}
            env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
            log = (home / "dags-test.log").open("wb")
            cmd = [str(airflow), "dags", "test", dag_ids(self.name)[0]]
            procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), home))
        states = []
        for proc, home in procs:
            proc.wait(timeout=600)
            text = (home / "dags-test.log").read_text(errors="replace")
            finished = re.findall(r"DagRun Finished: .*? state=(\w+)", text)
            tasks = dict(re.findall(r"starting task_id=(\w+)[\s\S]*?new_state=(\w+)", text))
            states.append(f"{finished[-1] if finished else 'no run'} {compact(tasks)}")
        self.log(f"cycle fault=concurrent: two runs at once: {', '.join(states)}")

    def drain(self) -> None:
        from stack.harness import run_dag

        if self.entry.pop("max_batch", None) is not None:
            self.log("drain: the operator lifts the cap")

        for n in range(DRAIN_CYCLES):
            result = run_dag(self.dags()[dag_ids(self.name)[0]])
            self.log(f"drain {n + 1}: {result.state} {compact(result.tasks)}")
            if result.skipped:
                return
        self.outcome.violations.append(f"the stream was not drained after {DRAIN_CYCLES} clean cycles")

    # -- the checker ------------------------------------------------------------------------------

    def check(self) -> None:
        """The output (read with pyiceberg and pyarrow by the shared harness) against what Kinesis acknowledged: each record
        once in the pipeline's table or the quarantine table, decoded as its batch's ledger entry says; then state and files."""
        from stack.harness import check_exactly_once, table_history, table_rows

        table, quarantine = self.view.load_table(), self.view.load_quarantine()
        rows, quarantined = table_rows(table), table_rows(quarantine)  # the schedule's output is always a table
        result = check_exactly_once(self.produced, stacked(rows, quarantined))
        self.outcome.records, self.outcome.lost, self.outcome.duplicated = result.expected, result.lost, result.duplicated
        if not result.ok:
            self.outcome.violations.append(f"not exactly once (the table and the quarantine table): {result}")
        self.outcome.violations += table_history(table) + [f"quarantine table: {p}" for p in table_history(quarantine)]
        self.outcome.violations += check_decoded(self.produced, rows, quarantined, self.decodings())
        committed = self.committed()
        self.outcome.violations += (
            self.check_state() + self.check_commit_records() + check_results(self.view, committed) + check_files(self.view, committed)
        )

    def decodings(self) -> dict[int, str]:
        """Each committed batch's payload.schema, as its ledger entry says the batch was decoded."""
        from kinesis_replay.core.state import BatchStatus

        batches = [b for b in self.store.list_batches(self.name) if b.status == BatchStatus.COMMITTED]
        return {b.batch_id: b.verified_result().decoding.schema or "" for b in batches}

    def committed(self) -> list[int]:
        from kinesis_replay.core.state import BatchStatus

        return [b.batch_id for b in self.store.list_batches(self.name) if b.status == BatchStatus.COMMITTED]

    def check_commit_records(self) -> list[str]:
        """The output's copy of the ledger: a commit record for each committed batch, with the ledger's ranges and manifest."""
        from kinesis_replay.adapters.commit_records import committed_batch_ids, read_commit_record
        from kinesis_replay.core.state import BatchStatus

        ledger = {b.batch_id: b for b in self.store.list_batches(self.name) if b.status == BatchStatus.COMMITTED}
        with self.reaching_s3():
            recorded = committed_batch_ids(self.view.uri)
        problems = [f"batch {i} is committed in the ledger but has no commit record" for i in sorted(set(ledger) - set(recorded))]
        problems += [f"batch {i} has a commit record but is not committed in the ledger" for i in sorted(set(recorded) - set(ledger))]
        for batch_id in sorted(set(ledger) & set(recorded)):
            with self.reaching_s3():
                record = read_commit_record(self.view.uri, batch_id)
            if (record.ranges, record.result) != (ledger[batch_id].ranges, ledger[batch_id].result):
                problems.append(f"batch {batch_id}: its commit record's ranges or manifest differ from the ledger's")
        return problems

    def check_state(self) -> list[str]:
        """Nothing in flight or staged after the drain, and each shard's checkpoint is the end of its last committed range."""
        from kinesis_replay.core.state import BatchStatus

        problems = []
        head = self.store.get_head(self.name)
        if head.in_flight is not None:
            problems.append(f"batch {head.in_flight} is still in flight after the drain")
        ends: dict[str, int] = {}
        for batch in self.store.list_batches(self.name):
            if batch.staged is not None:
                problems.append(f"batch {batch.batch_id} is still staged for a re-decode (run {batch.staged_by}) after the drain")
            if batch.status != BatchStatus.COMMITTED:
                problems.append(f"batch {batch.batch_id} is {batch.status.value} after the drain")
                continue
            assert batch.result is not None
            results = batch.result.by_shard()
            for r in batch.ranges:
                ends[r.shard_id] = range_checkpoint(r, results)
        for shard_id, state in self.store.get_shards(self.name).items():
            if shard_id in ends and state.checkpoint != ends[shard_id]:
                problems.append(f"shard {shard_id}: checkpoint {state.checkpoint}, but its last committed range ends at {ends[shard_id]}")
        return problems


class TableCommitter(threading.Thread):
    """Another writer of the pipeline's table: commits a table property change in a loop, as fast as the catalog takes them.

    A batch's commit that starts from metadata one of these replaced loses the race (the catalog refuses it) and must
    retry against the new metadata, adding its files once.
    """

    def __init__(self, load_table: Callable[[], Any | None]) -> None:
        super().__init__(daemon=True)
        self.load_table, self.commits, self._halt = load_table, 0, threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                # Loading races too: two first opens of an embedded catalog both create its tables ("table iceberg_tables
                # already exists"). Uncaught, that ended this thread, and the cycle ran on without its concurrent writer.
                table = self.load_table()
                if table is not None:
                    with table.transaction() as tx:
                        tx.set_properties({"chaos.concurrent-commit": str(self.commits)})
                    self.commits += 1
            except Exception:  # it lost a race itself (or the catalog was busy): try again
                pass
            self._halt.wait(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def fired(self) -> str | None:
        return f"{self.commits} concurrent table commits" if self.commits else None


def compact(tasks: dict[str, str]) -> str:
    return "[" + " ".join(f"{task}={state}" for task, state in tasks.items()) + "]"


KEY_COLUMNS = ("shard_id", "sequence_number", "sub_sequence_number", "data", "batch_id")


def stacked(*tables: Any) -> Any:
    """The record columns of several tables' rows (the pipeline's table, the quarantine table) as one pyarrow table."""
    import pyarrow as pa

    return pa.table({c: [v for t in tables for v in t.column(c).to_pylist()] for c in KEY_COLUMNS})


def schema_fields(schema: str) -> set[str]:
    """The field names of a payload.schema such as ``"i BIGINT, seed BIGINT"``."""
    return {part.split()[0] for part in schema.split(",") if part.strip()}


def check_decoded(produced: list[Any], rows: Any, quarantined: Any, decodings: dict[int, str]) -> list[str]:
    """The quarantine table holds exactly the records that cannot be decoded, and each row of the pipeline's table holds
    the payload's values of the fields its batch was decoded with (``decodings``: the ledger's payload.schema of each
    batch), and nulls for the rest of DECODED_FIELDS: the ledger, the table and the payloads agree on how each batch was
    decoded (a re-decode changes all three at once)."""
    key = ("shard_id", "sequence_number", "sub_sequence_number")
    undecodable = {(p.shard_id, p.sequence_number, p.sub_sequence_number) for p in produced if not isinstance(json.loads(p.data)["i"], int)}
    held = set(zip(*(quarantined.column(c).to_pylist() for c in key), strict=True))
    problems = []
    if held != undecodable:
        problems.append(
            f"the quarantine table holds {len(held - undecodable)} records that decode, and lacks {len(undecodable - held)} "
            f"that do not (of {len(undecodable)})"
        )
    fields = list(DECODED_FIELDS)
    columns = {f: rows.column(f).to_pylist() if f in rows.column_names else [None] * rows.num_rows for f in fields}
    wrong: dict[int, int] = {}
    for n, (batch_id, data) in enumerate(zip(rows.column("batch_id").to_pylist(), rows.column("data").to_pylist(), strict=True)):
        payload, decoded = json.loads(data), schema_fields(decodings.get(batch_id, ""))
        if any(columns[f][n] != (payload.get(f) if f in decoded else None) for f in fields):
            wrong[batch_id] = wrong.get(batch_id, 0) + 1
    problems += [
        f"batch {b}: {count} rows hold other values than its payloads decoded with {decodings.get(b)!r}, its ledger's schema"
        for b, count in sorted(wrong.items())
    ]
    return problems


def check_results(output: Path | OutputView, committed: list[int]) -> list[str]:
    """Each committed batch's manifest, as its commit record in the output keeps it (check_commit_records ties that to
    the ledger's), agrees with the files of the attempt it names (read with pyarrow), shard by shard: its rows, its
    quarantined records, and the bounds of the two together; and the batch has a result manifest, which the replay
    job wrote and verify read.

    The result manifest itself is the last replay's: when two runs replayed the batch at once, it may be the one
    whose attempt the other run's commit removed, so the commit record is what names the committed files.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    view = output if isinstance(output, OutputView) else OutputView.local(output)

    def read(folder: str) -> Any | None:
        return pq.read_table(folder, filesystem=view.filesystem, columns=["shard_id", "sequence_number"]) if view.is_dir(folder) else None

    def sequence_numbers(rows: Any | None, shard_id: str) -> list[int]:
        if rows is None:
            return []
        return [int(s) for s in rows.filter(pc.equal(rows.column("shard_id"), shard_id))["sequence_number"].to_pylist()]

    problems = []
    for batch_id in committed:
        manifest_file = view.path("_manifests", f"batch_id={path_batch_id(batch_id)}.json")
        record_file = view.path("_commits", f"batch_id={path_batch_id(batch_id)}.json")
        if not view.is_file(manifest_file):
            problems.append(f"batch {batch_id}: no manifest at {manifest_file}")
            continue
        if not view.is_file(record_file):
            problems.append(f"batch {batch_id}: no commit record at {record_file}")
            continue
        result = json.loads(view.read_text(record_file))["batch"]["manifest"]
        folder = f"batch_id={path_batch_id(batch_id)}"
        data_dir, quarantine_dir = view.path(folder), view.path("_quarantine", folder)
        if result.get("attempt"):  # a table output: the files of the attempt the commit record names, for both tables
            data_dir = view.path("data", folder, f"attempt={result['attempt']}")
            quarantine_dir = view.path("quarantine", "data", folder, f"attempt={result['attempt']}")
        table, quarantined = read(data_dir), read(quarantine_dir)
        for shard in result["shards"]:
            if table is None and shard["records"]:
                problems.append(f"batch {batch_id}: its commit record lists shard {shard['shard_id']}, but {data_dir} is missing")
                continue
            seqs, bad = (sequence_numbers(rows, shard["shard_id"]) for rows in (table, quarantined))
            both = seqs + bad
            if (len(seqs), len(bad)) != (shard["records"], shard.get("bad_records", 0)) or (
                both and (min(both), max(both)) != (int(shard["first_sequence_number"]), int(shard["last_sequence_number"]))
            ):
                problems.append(
                    f"batch {batch_id}, shard {shard['shard_id']}: manifest says {shard['records']} records and "
                    f"{shard.get('bad_records', 0)} quarantined, {shard['first_sequence_number']}..{shard['last_sequence_number']}; "
                    f"files hold {len(seqs)} and {len(bad)}"
                )
    return problems


def check_files(output: Path | OutputView, committed: list[int]) -> list[str]:
    """No file outside a committed batch's paths (after the drain nothing is in flight) but the owner record.

    A table output's metadata and catalog are its own; its data files lie under committed batches' folders
    (a backfill's superseded attempts too, until snapshot expiry), and the table references no other. So do the
    quarantine table's, under ``quarantine/``.
    """
    from kinesis_replay.adapters.layout import COMMITS_DIR, OWNER_FILE, QUARANTINE_TABLE_DIR

    view = output if isinstance(output, OutputView) else OutputView.local(output)
    allowed = {f"batch_id={path_batch_id(b)}" for b in committed}
    problems = []
    if not view.is_dir(view.root):
        return problems
    for name, table, under in (("table", view.load_table(), ()), ("quarantine table", view.load_quarantine(), (QUARANTINE_TABLE_DIR,))):
        if table is not None and table.current_snapshot() is not None:
            for task in table.scan().plan_files():
                parts = view.relative(task.file.file_path)
                if parts[: len(under) + 1] != (*under, "data") or parts[len(under) + 1] not in allowed:
                    problems.append(f"the {name} references {task.file.file_path}, outside every committed batch's files")
    for parts in view.files():
        if parts[0] == QUARANTINE_TABLE_DIR and (parts[1] == "metadata" or (parts[1] == "data" and parts[2] in allowed)):
            continue  # the quarantine table's folders, as the table's below
        if parts[0] in allowed or (parts[0] in ("_quarantine", "data") and parts[1] in allowed):
            continue
        if parts[0] in ("metadata", "_catalog"):
            continue
        if parts[0] in ("_manifests", COMMITS_DIR) and parts[-1].lstrip(".").removesuffix(".crc").removesuffix(".json") in allowed:
            continue
        if parts == (OWNER_FILE,):
            continue
        problems.append(f"{'/'.join(parts)} lies outside every committed batch's paths")
    return problems


# -- running many ----------------------------------------------------------------------------------


@dataclass
class Totals:
    schedules: int = 0
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    failed: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.schedules += 1
        self.records += outcome.records
        self.lost += outcome.lost
        self.duplicated += outcome.duplicated
        if not outcome.ok:
            self.failed.append(outcome.seed)

    def summary(self) -> str:
        return f"schedules: {self.schedules}, records: {self.records}, lost: {self.lost}, duplicated: {self.duplicated}"


def run_one(seed: int, steps: int, spark_steps: int, stack: Any, work: Path, output: str = "local", read: str = "getrecords") -> Outcome:
    """One schedule in this process; AIRFLOW_HOME must hold a migrated Airflow database."""
    directory = work / f"seed-{seed}"
    directory.mkdir(parents=True, exist_ok=True)
    return Schedule(seed, generate(seed, steps, spark_steps), stack, directory, output, read).run()


def run_schedules(
    seeds: list[int],
    steps: int,
    spark_steps: int,
    stack: Any,
    work: Path,
    workers: int,
    echo: Any = print,
    output: str = "local",
    read: str = "getrecords",
) -> tuple[Totals, list[Outcome]]:
    """Run the schedules in ``workers`` processes at once, each with an Airflow database of its own, on one local stack.

    Each schedule has a stream, state table and output of its own (``output``: one of OUTPUTS), so they share nothing
    but the endpoints.
    """
    template = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    env = {**os.environ, **stack.env()}
    pending = list(seeds)
    running: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
    totals, outcomes = Totals(), []
    started = time.monotonic()
    try:
        while pending or running:
            while pending and len(running) < workers:
                seed = pending.pop(0)
                home = work / f"seed-{seed}" / "airflow"
                home.mkdir(parents=True, exist_ok=True)
                shutil.copy(template, home / "airflow.db")
                command = [sys.executable, str(Path(__file__)), "--worker", "--seed", str(seed), "--work", str(work)]
                command += ["--steps", str(steps), "--spark-steps", str(spark_steps), "--output", output, "--read", read]
                with (work / f"seed-{seed}" / "worker.log").open("wb") as log:
                    proc = subprocess.Popen(command, env={**env, "AIRFLOW_HOME": str(home)}, stdout=log, stderr=subprocess.STDOUT)
                running[seed] = (proc, work / f"seed-{seed}" / "outcome.json")
            time.sleep(0.5)
            for seed, (proc, result) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[seed]
                if result.exists():
                    outcome = Outcome.from_dict(json.loads(result.read_text()))
                else:
                    tail = (work / f"seed-{seed}" / "worker.log").read_text(errors="replace")[-4000:]
                    crashed = f"the worker exited with {proc.returncode}:\n{tail}"
                    outcome = Outcome(seed, generate(seed, steps, spark_steps), violations=[crashed], output=output, read=read)
                totals.add(outcome)
                outcomes.append(outcome)
                echo(outcome.report())
    finally:
        for proc, _ in running.values():  # interrupted (a timeout, ^C): leave no schedule running
            proc.kill()
            proc.wait()
    totals.seconds = time.monotonic() - started
    return totals, sorted(outcomes, key=lambda o: seeds.index(o.seed))


# One row per `make chaos` run, kept from run to run, so that the total counts every sitting.
_RUN_ROW = re.compile(
    r"^\| (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d) \| (?P<command>[^|]+) \| (?P<schedules>\d+) \| (?P<steps>[^|]+) \| "
    r"(?P<records>\d+) \| (?P<lost>\d+) \| (?P<duplicated>\d+) \| (?P<failed>[^|]+) \| (?P<minutes>[\d.]+) min \|$"
)


def write_reliability(path: Path, totals: Totals, seeds: list[int], steps: int, command: str) -> None:
    """Add this run to BENCHMARKS.md's reliability section; bench/report.py, which writes the bench section too, owns the file."""
    import report

    report.write_section(path, report.RELIABILITY, lambda old: reliability_table(old, totals, seeds, steps, command))


def reliability_table(old: str, totals: Totals, seeds: list[int], steps: int, command: str) -> str:
    """The reliability section: the runs in its ``old`` body, this run, and the total over every run; the notes on
    failed seeds (lines starting "- failed seed ") that were written by hand are kept."""
    rows = [line for line in old.splitlines() if _RUN_ROW.match(line)]
    seed_lines = [line for line in old.splitlines() if line.startswith("- seeds of ")]
    failures = [line for line in old.splitlines() if line.startswith("- failed seed ")]  # what each failure was, by hand
    at = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    rows.append(
        f"| {at} | `{command}` | {totals.schedules} | {steps} + drain | {totals.records} | {totals.lost} | {totals.duplicated} | "
        f"{', '.join(map(str, totals.failed)) or 'none'} | {totals.seconds / 60:.1f} min |"
    )
    seed_lines.append(f"- seeds of {at}: {', '.join(map(str, seeds))}")
    runs = [m for m in map(_RUN_ROW.match, rows) if m]
    total = {key: sum(int(m[key]) for m in runs) for key in ("schedules", "records", "lost", "duplicated")}
    failed = [m["failed"].strip() for m in runs if m["failed"].strip() != "none"]
    return "\n".join(
        [
            "## Reliability (make chaos)",
            "",
            "Randomized fault schedules (`tests/stack/chaos.py`): every run of `make chaos` adds a row, on "
            f"{platform.node() or 'this machine'}, {os.cpu_count()} cores. The run of 2026-11-22 16:51 predates the operator "
            "steps (lose_state, share_output), and every run before 2026-11-23 07:10 the cap step (max_batch). The rows of "
            "`make test-compose` are its container-kill schedules on docker-compose.yml's stack (tests/compose/test_stack_faults.py): "
            "rounds of a cycle with one or two containers killed, then clean cycles; the schedules of a run share the stack's "
            "one stream, and each checks all of it, so their records count earlier schedules' again.",
            "",
            "| run (UTC) | command | schedules | steps each | records | lost | duplicated | failed schedules | time |",
            "|---|---|---:|---|---:|---:|---:|---|---:|",
            *rows,
            f"| **total** | {len(runs)} runs | **{total['schedules']}** | | {total['records']} | **{total['lost']}** | "
            f"**{total['duplicated']}** | {', '.join(failed) or 'none'} | {sum(float(m['minutes']) for m in runs):.1f} min |",
            "",
            *seed_lines,
            *(["", *failures] if failures else []),
            "",
            f"`schedules: {total['schedules']}, records: {total['records']}, lost: {total['lost']}, duplicated: {total['duplicated']}`",
        ]
    )


def setup_airflow_home(home: Path) -> None:
    """A scratch Airflow home with a migrated database, for a run outside pytest."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        }
    )
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100, help="how many schedules, with random seeds")
    parser.add_argument("--seed", type=int, action="append", help="run this seed (repeatable) instead of random ones")
    parser.add_argument("--steps", type=int, default=4, help="random steps per schedule, before the drain")
    parser.add_argument("--spark-steps", type=int, default=2, help="at most this many steps run a Spark job, besides the drain")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="schedules run at once")
    parser.add_argument(
        "--output", choices=OUTPUTS, default="local", help="where the pipeline writes: a local folder, or S3 (moto) with the Glue catalog"
    )
    parser.add_argument("--read", choices=READS, default="getrecords", help="how replays read: GetRecords, or over enhanced fan-out")
    parser.add_argument("--benchmarks", type=Path, default=ROOT / "BENCHMARKS.md", help="where to write the reliability table")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # one schedule, on the stack in the environment
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from stack import local_stack

    if args.worker:
        stack = local_stack.Stack(os.environ["AWS_ENDPOINT_URL_KINESIS"], os.environ["AWS_ENDPOINT_URL_DYNAMODB"])
        (seed,) = args.seed
        outcome = run_one(seed, args.steps, args.spark_steps, stack, args.work, args.output, args.read)
        (args.work / f"seed-{seed}" / "outcome.json").write_text(json.dumps(outcome.to_dict()))
        return 0

    seeds = args.seed or [random.SystemRandom().randrange(10**9) for _ in range(args.schedules)]
    work = Path(tempfile.mkdtemp(prefix="kinesis-replay-chaos-"))
    setup_airflow_home(work / "airflow")
    stack = local_stack.start(work / "stack", local_stack.free_port(), local_stack.free_port())
    print(f"{len(seeds)} schedules of {args.steps} steps, output {args.output}, {args.workers} at once; logs in {work}", flush=True)
    try:
        totals, _ = run_schedules(
            seeds,
            args.steps,
            args.spark_steps,
            stack,
            work,
            args.workers,
            echo=lambda line: print(line, flush=True),
            output=args.output,
            read=args.read,
        )
    finally:
        local_stack.stop(work / "stack")
    print(totals.summary())
    if not args.seed:
        command = f"make chaos SCHEDULES={args.schedules} CHAOS_STEPS={args.steps}"
        if args.output != "local":
            command += f" CHAOS_OUTPUT={args.output}"
        if args.read != "getrecords":
            command += f" CHAOS_READ={args.read}"
        write_reliability(args.benchmarks, totals, seeds, args.steps, command)
        print(f"wrote the reliability table to {args.benchmarks}")
    if totals.failed:
        print(
            f"failed seeds: {', '.join(map(str, totals.failed))}; rerun one with: python tests/stack/chaos.py --seed N --steps {args.steps}"
            + (f" --output {args.output}" if args.output != "local" else "")
            + (f" --read {args.read}" if args.read != "getrecords" else "")
        )
    return 1 if totals.failed else 0


if __name__ == "__main__":
    sys.exit(main())
