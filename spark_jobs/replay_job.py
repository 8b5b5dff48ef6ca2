"""Replay one batch: read its closed ranges from Kinesis, write the batch's files for this attempt, write the result manifest.

A plain spark-submit program that knows nothing of Airflow or of the state table:

    spark-submit --py-files kinesis_replay.zip,kinesis_source.py replay_job.py --spec batch.json

or, as a client of a Spark Connect server whose Python workers have the job's packages (docs/deployment.md):

    python replay_job.py --remote sc://host:15002 --artifacts kinesis_replay.zip,kinesis_source.py --spec batch.json

The spec is a ``kinesis_replay.core.job_spec.JobSpec`` as JSON: the batch's ranges, its output, the Kinesis endpoint,
the read budget and the payload's format. Credentials come from the environment (or the executors' instance
role), never from the spec.

Each task writes its rows to Parquet with pyarrow as it reads them, in one pass (``write_as_read``), and reports what
its files hold; the driver builds the result manifest from those reports. Rows that could not be decoded, each with
why in decode_error, go to the quarantine: for a table output, a folder of this attempt's own,
<output>/quarantine/data/batch_id=<id>/attempt=<attempt>/, which the commit step puts in the quarantine table; for a
directory output, <output>/_quarantine/batch_id=<id>/, replacing what an earlier run of the batch left there. The
batch's rows go:

- for a table output (the default), to a folder of this attempt's own, <output>/data/batch_id=<id>/attempt=<attempt>/,
  with batch_id as a column and each row group one shard's records in arrival order. Nothing there is visible until
  the commit step (on the Airflow side) puts the files in the Iceberg table in one snapshot; a rerun never touches
  the files a snapshot references;
- for a directory output, to <output>/batch_id=<id>/, replacing what an earlier run left there; for a committed
  batch (a backfill's), to a staging folder that the Airflow side swaps in once the files are verified.

A JSON payload with a schema is decoded in the same pass, by the task, into the schema's columns
(``adapters.json_columns``, as Spark's ``from_json`` decoded it before); a payload that does not decode is
quarantined with the field and the type at fault. The driver makes no file-system call through Spark's JVM: what it
reads and writes (the owner record, folders replaced, the manifest) goes through pyarrow.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

# First, before pyspark: it drops Spark's zips of pyspark and py4j from the path where the same version is installed.
import kinesis_replay.launchers.installed_pyspark  # noqa: F401

# isort: split
from pyspark.sql import SparkSession

from kinesis_replay.adapters.attempt_writer import AttemptWriter, combine, with_unconfirmed
from kinesis_replay.adapters.files import (
    finish_swap,
    is_file,
    reaching_s3,
    remove_files_except,
    remove_folder,
    swap_in,
    write_json,
)
from kinesis_replay.adapters.json_columns import JsonColumns
from kinesis_replay.adapters.layout import (
    batch_path,
    commit_record_path,
    data_path,
    quarantine_data_path,
    quarantine_path,
    result_path,
    staged_data_path,
    staged_quarantine_path,
    staging_path,
    swap_record_path,
)
from kinesis_replay.adapters.output_root import load_job_root
from kinesis_replay.core import ownership
from kinesis_replay.core.config import PayloadConfig
from kinesis_replay.core.decoding import Decoding
from kinesis_replay.core.errors import JobSpecError, KinesisReplayError
from kinesis_replay.core.job_spec import JobSpec
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.refusals import refuse
from kinesis_replay.core.state import ReplayResult, ShardResult
from kinesis_source import (
    Pages,
    TasksDone,
    Unconfirmed,
    is_remote,
    job_s3,
    range_tasks,
    sample_tasks,
    write_tasks,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--spec", help="path or s3:// URI of the batch spec (JSON)")
    what.add_argument("--warm-up", metavar="DIR", help="replay made-up records into DIR, without Kinesis: the JVM's warm-up run")
    parser.add_argument(
        "--remote",
        metavar="URL",
        help="run as a client of a Spark Connect server (sc://host:15002) instead of under spark-submit; SPARK_REMOTE says the same",
    )
    parser.add_argument(
        "--artifacts",
        default="",
        metavar="PATHS",
        help="with --remote: the code the server's Python workers import, comma-separated (the library's zip, kinesis_source.py), "
        "as spark-submit's --py-files carries it",
    )
    return parser.parse_args(argv)


def warm_up_spec(output: str) -> JobSpec:
    """A batch of two shards of made-up JSON records, one of them bad: the code paths of a replay, none of Kinesis."""
    ranges = tuple(SequenceRange(f"shardId-{i:012d}", 10**55, 10**55 + 9) for i in range(2))
    return JobSpec("warm-up", "warm-up", 1, output, ranges, payload=PayloadConfig("json", "n INT"))


def read_spec_text(path: str) -> str:
    """A local file, or an ``s3://`` object (EMR Serverless stages the spec there): read with boto3, like the stream."""
    if not path.startswith("s3://"):
        with open(path) as f:
            return f.read()
    import boto3  # only here: a local run needs no S3 client

    bucket, _, key = path.removeprefix("s3://").partition("/")
    body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"]
    return str(body.read().decode("utf-8"))


def load_spec(path: str) -> JobSpec:
    """The batch's spec, checked whole here, on the driver, rather than in a task."""
    try:
        text = read_spec_text(path)
    except Exception as exc:  # OSError, or any botocore error (missing object, no credentials, no endpoint)
        raise JobSpecError(f"cannot read the batch spec {path}: {exc}") from exc
    return JobSpec.from_json(text, f"batch spec {path}")


def build_session(spec: JobSpec, remote: str | None = None, artifacts: Sequence[str] = ()) -> SparkSession:
    """A classic session under spark-submit, or with ``remote`` (or SPARK_REMOTE) a Spark Connect session, to which the
    job's code is added for the server's Python workers (``artifacts``).

    Spark places the tasks and retries them; it writes nothing, and the driver calls nothing through its JVM: the tasks
    write their own files (attempt_writer), and report what they did in their rows (write_tasks).
    """
    builder = SparkSession.builder.appName(f"kinesis-replay {spec.pipeline_name} batch {spec.batch_id}")
    spark = (builder.remote(remote) if remote else builder).getOrCreate()
    if is_remote(spark) and artifacts:
        spark.addArtifacts(*artifacts, pyfile=True)
    return spark


def new_attempt() -> str:
    """This run's attempt id: when it started, and a random part (two runs may start in one second)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def spans_by_shard(unconfirmed: Sequence[Unconfirmed]) -> dict[str, set[tuple[int, int | None]]]:
    """The tasks' unconfirmed spans, by shard (a range's span once, however many times its read noted it)."""
    spans: dict[str, set[tuple[int, int | None]]] = {}
    for shard_id, after, first in unconfirmed:
        spans.setdefault(shard_id, set()).add((after, first))
    return spans


def write_as_read(spark: SparkSession, spec: JobSpec, attempt: str, tasks: int, pages: Pages) -> tuple[list[ShardResult], TasksDone, bool]:
    """Each task writes its rows to Parquet as it reads them (attempt_writer), in one pass: no sort, no second read; a
    JSON payload with a schema is decoded on the way (json_columns).

    A table output's rows go straight to the attempt's own folder, which no snapshot references until the commit. A
    directory output's, and the quarantine, go to the attempt's staging folder. Files in those folders that no
    successful task attempt reported (a failed attempt's, which it could not delete itself) are removed before anything
    moves. Then, for a batch in flight, the staged folders replace the batch's once every task is done (files.swap_in);
    a committed batch's (one a backfill or a restore replays: its commit record says so) stay staged, for the Airflow
    side to swap in only once they are verified and decode as the output's did (backfill.check_replayed), so that
    a failed backfill changes nothing readers see. A swap cut short by an earlier run is finished first. Returns the
    manifest's entries, from the reports, the reports, and whether the folders stay staged.
    """
    output, batch_id = spec.output, spec.batch_id
    payload = spec.payload
    # Checked here, on the driver, before any read: a schema no payload decodes into fails the job, not every task.
    columns = JsonColumns(payload.schema, spec.pipeline_name) if payload.format == "json" and payload.schema else None
    # Written into a root whose owner record names another pipeline or stream, or the other layout: refused, nothing written.
    refuse(ownership.job_refusal(spec.pipeline_name, batch_id, spec.stream, spec.output_format, load_job_root(output)))
    finish_swap(swap_record_path(output, batch_id))  # a verified swap cut short is finished before anything is staged
    remove_folder(staging_path(output, batch_id), missing_ok=True)  # what a crashed run of this batch left
    table = spec.output_format == "iceberg"
    data_folder = data_path(output, batch_id, attempt) if table else staged_data_path(output, batch_id, attempt)
    # A table output's quarantined records are the quarantine table's, per attempt like its data files: committed to it
    # by the commit step, never swapped. A directory output's are staged, as its rows are.
    quarantine_folder = quarantine_data_path(output, batch_id, attempt) if table else staged_quarantine_path(output, batch_id, attempt)
    partition = batch_id if table else None

    def writer(task: int) -> AttemptWriter:  # in the task: its files are named for this attempt of it
        from pyspark import TaskContext

        context = TaskContext.get()
        name = f"part-{task:05d}-{context.taskAttemptId() if context else 0}"
        return AttemptWriter(data_folder, quarantine_folder, name, partition, columns)

    done = write_tasks(spark, tasks, pages, writer, spec.s3)
    written, shards = combine(done.reports)
    reported = [f.path for f in written]
    unreported = remove_files_except(data_folder, reported) + remove_files_except(quarantine_folder, reported)
    if unreported:
        print(f"kinesis-replay: removed {len(unreported)} files no successful task attempt reported: {unreported[:5]}", flush=True)
    staged = is_file(commit_record_path(output, batch_id))
    if not staged and not table:
        moves = [(data_folder, batch_path(output, batch_id)), (quarantine_folder, quarantine_path(output, batch_id))]
        swap_in(swap_record_path(output, batch_id), moves)
        remove_folder(staging_path(output, batch_id), missing_ok=True, prune_parent=True)
    return shards, done, staged


def run(spec: JobSpec, warm_up: bool = False, remote: str | None = None, artifacts: Sequence[str] = ()) -> ReplayResult:
    """Replay the spec's batch (``warm_up``: made-up records, no Kinesis) and write its result manifest; ``remote``: as
    a client of that Spark Connect server (``build_session``)."""
    started, started_at = time.monotonic(), time.time()
    phases: dict[str, float] = {}

    def lap(name: str) -> None:
        phases[name] = time.monotonic() - started - sum(phases.values())

    with reaching_s3(job_s3(spec.s3)):  # the driver's S3 calls: the owner record, folders replaced, the manifest
        spark = build_session(spec, remote, artifacts)
        lap("session")
        try:
            table = spec.output_format == "iceberg"
            attempt = new_attempt()
            tasks = sample_tasks if warm_up else range_tasks
            shards, done, staged = write_as_read(spark, spec, attempt, *tasks(spark, spec))
            lap("read_write")
            with_spans = with_unconfirmed(shards, spans_by_shard(done.unconfirmed))
            # The manifest names the attempt whose files a table commit takes, or whose staged folders a check swaps in.
            named = attempt if table or staged else None
            decoding = Decoding.of(spec.payload.format, spec.payload.schema)
            seconds = round(time.monotonic() - started, 3)
            result = ReplayResult(spec.pipeline_name, spec.batch_id, tuple(with_spans), seconds, named, decoding)
            # Of the read-and-write phase, the part from the first Kinesis call on: before it, the tasks start (Python
            # workers, imports).
            from_first_call = max(0.0, time.time() - done.first_call) if math.isfinite(done.first_call) else 0.0
            lap("summary")
            write_json(result_path(spec.output, spec.batch_id), result.to_dict())
            lap("manifest")
            # Where a run's time goes (the session's start-up is a fixed cost; reading and writing are one pass).
            timed = {"started_at": started_at, **phases, "from_first_call": from_first_call}
            print(f"kinesis-replay: phases: {json.dumps(timed)}", flush=True)
            return result
        finally:
            spark.stop()


def _text(exc: BaseException) -> str:
    """An error's text without failing: a py4j error asks the JVM for it, which may be gone."""
    # pyspark's captured exceptions keep the JVM's description and stack trace as text.
    kept = [t for t in (getattr(exc, "_desc", None), getattr(exc, "_stackTrace", None)) if isinstance(t, str) and t]
    if kept:
        return "\n".join(kept)
    try:
        return str(exc)
    except Exception:  # a py4j error's message without the JVM's part ("An error occurred while calling o31.parquet.")
        return " ".join(a.strip() for a in exc.args if isinstance(a, str)) or repr(exc)


def _domain_error(exc: BaseException) -> str | None:
    """The kinesis-replay error inside a Spark task failure, if there is one: the line that names the range."""
    for line in _text(exc).splitlines():
        if "kinesis_replay.core.errors." in line:
            return line.strip()
    return None


REASON_CHARS = 500  # the reason is stored in the ledger and quoted by the stuck alert: a line, never a page
# A qualified class name at the start of a line ("org.apache.hadoop.fs.ParentNotDirectoryException: ..."), as the JVM
# prints a Throwable; its simple name is the part after the last "." or "$".
_QUALIFIED = re.compile(r"^[A-Za-z_$][\w$]*(?:[.$][\w$]+)+(?=:|$)")


def _simple(line: str) -> str:
    qualified = _QUALIFIED.match(line)
    return line if qualified is None else re.split(r"[.$]", qualified.group())[-1] + line[qualified.end() :]


def _message_line(message: str) -> str:
    """One line of a possibly long message: a Python traceback's last line (what the worker raised), else the first."""
    lines = message.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last):" in line]
    if starts:
        raised = [line.strip() for line in lines[starts[0] + 1 :] if line.strip() and not line[0].isspace()]
        if raised:
            return raised[-1]
    return next((line.strip() for line in lines if line.strip()), "")


def _reason(name: str, message: str | None) -> str:
    line = _message_line(message or "")
    reason = f"{name}: {line}" if line else name
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


def _innermost_python(exc: BaseException) -> BaseException:
    """Down Python's chain: an explicit ``__cause__``, else the ``__context__`` it was raised in (unless suppressed).

    pyspark's captured exceptions hide the py4j error they replace (``from None``); one with no JVM object of its own
    (``_origin``) keeps its converted cause in ``_cause``.
    """
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if inner is None and getattr(exc, "_origin", None) is None:
            captured = getattr(exc, "_cause", None)
            inner = captured if isinstance(captured, BaseException) else None
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _java_root_cause(throwable: Any) -> str:
    """The innermost Throwable behind a JVM error, through py4j: ``getCause()`` until there is none."""
    for _ in range(100):  # a cause chain is short; a cycle would not be
        cause = throwable.getCause()
        if cause is None or cause.equals(throwable):
            break
        throwable = cause
    cls = throwable.getClass()
    name = str(cls.getSimpleName() or "") or str(cls.getName()).rsplit(".", 1)[-1]  # an anonymous class has no simple name
    message = throwable.getMessage()
    return _reason(name, None if message is None else str(message))


def root_cause(exc: BaseException) -> str:
    """What failed the job, as one line ``SimpleClassName: message``: the innermost cause, not the frames around it.

    Python's chain first; then, behind a py4j error (``java_exception``) or one of pyspark's captured exceptions
    (``_origin``), the JVM's chain; when the JVM can't be asked, the last "Caused by:" line of the error's text.
    """
    inner = _innermost_python(exc)
    throwable = getattr(inner, "java_exception", None) or getattr(inner, "_origin", None)
    if throwable is not None:
        with contextlib.suppress(Exception):  # py4j's own errors, when the JVM is gone
            return _java_root_cause(throwable)
    text = _text(inner)
    caused = [line.strip().removeprefix("Caused by: ") for line in text.splitlines() if line.strip().startswith("Caused by: ")]
    if caused:
        return _reason(*_split(_simple(caused[-1])))
    if getattr(inner, "_desc", None):  # a captured exception's description is the JVM's toString(): "class: message"
        return _reason(*_split(_simple(_message_line(text))))
    return _reason(type(inner).__name__, text)


def _split(line: str) -> tuple[str, str]:
    name, _, message = line.partition(": ")
    return name, message


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    artifacts = [a for a in args.artifacts.split(",") if a]
    try:
        spec = warm_up_spec(args.warm_up) if args.warm_up else load_spec(args.spec)
        result = run(spec, warm_up=bool(args.warm_up), remote=args.remote, artifacts=artifacts)
    except KinesisReplayError as exc:
        print(f"kinesis-replay: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        traceback.print_exc()  # the frames stay in the log for operators; the line below is the reason given
        # A domain error inside a task failure names the shard and range: it wins over its wrappers.
        print(f"kinesis-replay: replay failed: {_domain_error(exc) or root_cause(exc)}", file=sys.stderr, flush=True)
        return 2
    print(f"kinesis-replay: batch {result.batch_id} of {result.pipeline_name}: {result.records} records, "
          f"{result.bytes} bytes, {len(result.shards)} shards, {result.seconds}s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
