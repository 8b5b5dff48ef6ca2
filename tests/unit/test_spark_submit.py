"""The launcher: the command it builds, the library it ships, the environment it gives the job, the reason it gives for a failure.

And the reason the job itself prints when it fails (replay_job.root_cause): fake exception chains, no Spark start-up.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors.exceptions.captured import AnalysisException, UnknownException

import replay_job
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.errors import RangeReadError
from kinesis_replay.launchers import spark_submit

ENTRY = {
    "name": "orders", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST",
    "state_table": "t", "spark": {"master": "spark://host:7077", "conf": {"spark.executor.cores": 2}},
}  # fmt: skip
PIPELINE = parse_config({"pipelines": [ENTRY]})[0]


def test_the_library_zip_holds_the_package_this_process_runs(tmp_path: Path) -> None:
    zipped = spark_submit.package_library(tmp_path / "lib.zip")
    names = zipfile.ZipFile(zipped).namelist()
    package = Path(spark_submit.__file__).resolve().parents[1]
    sources = [n for n in names if n.endswith(".py")]
    assert sorted(sources) == sorted(f"kinesis_replay/{p.relative_to(package)}" for p in package.rglob("*.py"))  # every layer
    assert {"kinesis_replay/__init__.py", "kinesis_replay/adapters/range_reader.py", "kinesis_replay/core/job_spec.py"} <= set(names)
    assert {n.removesuffix("c") for n in names if n.endswith(".pyc")} <= set(sources)


def test_the_library_zip_carries_bytecode_that_zipimport_uses_while_its_source_is_the_same(tmp_path: Path) -> None:
    """Every module's bytecode is in the zip, and a Python importing from the zip runs it without compiling; bytecode
    whose source beside it differs is not run: the source is."""
    import subprocess

    zipped = spark_submit.package_library(tmp_path / "lib.zip")
    names = set(zipfile.ZipFile(zipped).namelist())
    assert {n + "c" for n in names if n.endswith(".py")} <= names
    # Code compiled from the zip's source would name the zip in its file name; the zip's bytecode names the module's path.
    probe = "import kinesis_replay.launchers.spark_submit as m; print(m.package_library.__code__.co_filename)"
    env = {"PYTHONPATH": str(zipped)}
    loaded = subprocess.run([sys.executable, "-B", "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "kinesis_replay/launchers/spark_submit.py"

    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(stale, "w") as zf:
        zf.writestr("mod.py", "X = 2\n")
        zf.writestr("mod.pyc", spark_submit.bytecode(b"X = 1\n", "mod.py"))  # compiled from another source
    probe = subprocess.run([sys.executable, "-B", "-c", "import mod; print(mod.X)"], env={"PYTHONPATH": str(stale)},
                           capture_output=True, text=True)  # fmt: skip
    assert probe.stdout.strip() == "2"


def test_the_command_carries_master_conf_py_files_and_spec(tmp_path: Path) -> None:
    command = spark_submit.build_command(PIPELINE, 42, tmp_path / "b.json", Path("job.py"), [Path("a.zip"), Path("src.py")])
    assert command[0].endswith("spark-submit")
    assert command[1:5] == ["--master", "spark://host:7077", "--name", "kinesis-replay-orders-batch-42"]
    assert command[5:7] == ["--conf", "spark.executor.cores=2"]
    assert command[-5:] == ["--py-files", "a.zip,src.py", "job.py", "--spec", str(tmp_path / "b.json")]


def test_the_job_runs_with_this_python_and_a_local_ip_for_local_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    env = spark_submit.submit_env("local[2]", {"AWS_ACCESS_KEY_ID": "k"})
    assert env["PYSPARK_PYTHON"] == sys.executable and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["AWS_ACCESS_KEY_ID"] == "k" and env["PATH"].startswith(str(Path(sys.executable).parent))
    assert "SPARK_LOCAL_IP" not in spark_submit.submit_env("yarn", {})


def test_a_failing_job_raises_with_its_own_error_line() -> None:
    command = [sys.executable, "-c", "import sys; print('noise'); print('kinesis-replay: range s0 is gone'); sys.exit(2)"]
    with pytest.raises(spark_submit.SparkSubmitError, match="batch 9: spark-submit exited with 2: kinesis-replay: range s0 is gone"):
        spark_submit.run(command, {}, "pipeline p, batch 9")


def test_the_pipeline_may_raise_spark_log_level(tmp_path: Path) -> None:
    chatty = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "local[1]", "conf": {"spark.log.level": "INFO"}}}]})[0]
    command = spark_submit.build_command(chatty, 1, tmp_path / "b.json", Path("job.py"), [])
    assert "spark.log.level=INFO" in command and "spark.log.level=WARN" not in command


def confs(spark: dict[str, object], about: str) -> list[str]:
    """The --conf values of the command a pipeline with this ``spark`` section gets, those whose key holds ``about``."""
    pipeline = parse_config({"pipelines": [{**ENTRY, "spark": spark}]})[0]
    return [c for c in spark_submit.build_command(pipeline, 1, Path("b.json"), Path("job.py"), []) if about in c.split("=", 1)[0]]


def test_every_jobs_python_workers_allocate_arrows_memory_through_malloc_unless_the_pipeline_says_otherwise() -> None:
    for master in ("local[2]", "spark://host:7077", "yarn", "k8s://https://api:443"):
        assert confs({"master": master}, "ARROW_") == ["spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL=system"], master
    own = {"master": "yarn", "conf": {"spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}}
    assert confs(own, "ARROW_") == ["spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL=jemalloc"]


def test_local_jobs_run_without_the_web_ui_unless_the_pipeline_turns_it_on() -> None:
    assert confs({"master": "local[2]"}, "spark.ui.") == ["spark.ui.enabled=false"]
    assert confs({"master": "local[2]", "conf": {"spark.ui.enabled": True}}, "spark.ui.") == ["spark.ui.enabled=true"]
    assert confs({"master": "spark://host:7077"}, "spark.ui.") == []  # a cluster's driver UI is the cluster's business


def test_local_jobs_run_their_jvm_with_c1_only_and_the_pipelines_own_options_still_apply() -> None:
    def java_options(spark: dict[str, object]) -> list[str]:
        return confs(spark, "JavaOptions")

    (default,) = java_options({"master": "local[2]"})
    assert default.startswith(f"spark.driver.defaultJavaOptions={spark_submit.LOCAL_DRIVER_JAVA_OPTIONS}")
    assert "-XX:TieredStopAtLevel=1" in spark_submit.LOCAL_DRIVER_JAVA_OPTIONS
    # Spark puts extraJavaOptions after the default ones: a pipeline's (or spark-defaults.conf's) still apply.
    assert java_options({"master": "local[2]", "conf": {"spark.driver.extraJavaOptions": "-Xss4m"}}) == [
        default,
        "spark.driver.extraJavaOptions=-Xss4m",
    ]
    assert java_options({"master": "local[2]", "conf": {"spark.driver.defaultJavaOptions": "-Xss4m"}}) == [
        "spark.driver.defaultJavaOptions=-Xss4m"
    ]
    # On a cluster the tasks run in executors' JVMs, which the job does not tune.
    assert java_options({"master": "spark://host:7077"}) == []


def test_a_jvm_failure_after_the_jobs_success_line_reports_the_jvms_lines() -> None:
    script = (
        "import sys; print('kinesis-replay: batch 3 of p: 9 records'); print('Error occurred during initialization of VM'); sys.exit(1)"
    )
    with pytest.raises(
        spark_submit.SparkSubmitError, match=re.escape("batch 3 of p: 9 records | Error occurred during initialization of VM")
    ):
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")


def test_the_jobs_error_line_is_reported_even_when_the_jvm_prints_pages_after_it() -> None:
    script = "import sys; print('kinesis-replay: range s0 is gone'); [print(f'[warning][cds] noise {i}') for i in range(200)]; sys.exit(2)"
    with pytest.raises(spark_submit.SparkSubmitError, match=r"exited with 2: kinesis-replay: range s0 is gone$"):
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")


JVM_TRACE = """org.apache.spark.SparkException: Job aborted.
\tat org.apache.spark.sql.execution.datasources.FileFormatWriter$.write(FileFormatWriter.scala:250)
\tat py4j.commands.CallCommand.execute(CallCommand.java:79)
Caused by: org.apache.hadoop.fs.FileAlreadyExistsException: wrapped
\t... 12 more
Caused by: org.apache.hadoop.fs.ParentNotDirectoryException: Parent path is not a directory: file:/etc/hostname
\tat org.apache.hadoop.fs.RawLocalFileSystem.mkdirs(RawLocalFileSystem.java:793)
\t... 40 more"""
ROOT_CAUSE = "ParentNotDirectoryException: Parent path is not a directory: file:/etc/hostname"


def test_a_job_that_printed_no_reason_is_reported_by_the_logs_last_caused_by_line() -> None:
    script = f"import sys; print({JVM_TRACE!r}); print('26/11/22 WARN ShutdownHookManager: deleting'); sys.exit(1)"
    with pytest.raises(spark_submit.SparkSubmitError) as failure:
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")
    assert str(failure.value) == f"pipeline p, batch 9: spark-submit exited with 1: org.apache.hadoop.fs.{ROOT_CAUSE}"


def test_the_jobs_replay_failed_line_wins_over_its_other_lines_and_the_jvms() -> None:
    own = ["kinesis-replay: phases: {}", "kinesis-replay: a note", f"kinesis-replay: replay failed: {ROOT_CAUSE}"]
    assert spark_submit.failure_reason(own, [*JVM_TRACE.splitlines(), *own]) == f"kinesis-replay: replay failed: {ROOT_CAUSE}"


def test_an_uncaught_exception_line_counts_as_the_cause_when_nothing_says_caused_by() -> None:
    tail = ['Exception in thread "main" java.lang.OutOfMemoryError: Java heap space', "\tat java.base/x.y(Y.java:1)", "bye"]
    assert spark_submit.failure_reason([], tail) == tail[0]


def test_the_jvms_own_fatal_error_wins_over_a_warnings_stack_trace() -> None:
    # Seen in CI: a late heartbeat (a warning, the job went on) logged a trace, then the JVM could not write its
    # class-data-sharing archive at exit. The reason is the JVM's, not the warning's.
    heartbeat = [
        "26/11/25 WARN Executor: Issue communicating with driver in heartbeater",
        "org.apache.spark.rpc.RpcTimeoutException: Future timed out after [10000 milliseconds].",
        "Caused by: java.util.concurrent.TimeoutException: Future timed out after [10000 milliseconds]",
        "\t... 12 more",
    ]
    tail = [*heartbeat, "kinesis-replay: batch 1 of warm-up: 18 records", "Error occurred during initialization of VM",
            "Cannot have non-empty directory in paths"]  # fmt: skip
    assert spark_submit.failure_reason([], tail) == " | ".join(tail[-3:])
    assert spark_submit.failure_reason([], heartbeat) == heartbeat[2].removeprefix("Caused by: ")
    # A trace the JVM prints after its own error is part of it, not a reason to drop it.
    after = [*tail, "java.lang.Error: could not map the archive", "\tat java.base/x.y(Y.java:1)"]
    assert spark_submit.failure_reason([], after).startswith("kinesis-replay: batch 1 of warm-up: 18 records | Error occurred")


def test_the_failure_reason_is_one_line_of_bounded_length() -> None:
    reason = spark_submit.failure_reason(["kinesis-replay: replay failed: " + "x" * 5000], [])
    assert len(reason) == spark_submit.REASON_CHARS and "\n" not in reason and reason.endswith("...")


class JavaClass:
    def __init__(self, name: str) -> None:
        self.name = name

    def getName(self) -> str:
        return self.name

    def getSimpleName(self) -> str:
        simple = re.split(r"[.$]", self.name)[-1]
        return "" if simple.isdigit() else simple  # an anonymous class (Outer$1) has no simple name


class Throwable:
    """What py4j hands Python for a java.lang.Throwable: methods answered by the JVM."""

    _target_id = "o31"

    def __init__(self, name: str, message: str | None, cause: Throwable | None = None, jvm_gone: bool = False) -> None:
        self.name, self.message, self.cause, self.jvm_gone = name, message, cause, jvm_gone

    def getClass(self) -> JavaClass:
        return JavaClass(self.name)

    def getMessage(self) -> str | None:
        return self.message

    def getCause(self) -> Throwable | None:
        if self.jvm_gone:
            raise Py4JError("Answer from Java side is empty")
        return self.cause

    def equals(self, other: object) -> bool:
        return other is self


def hadoop_failure(**kwargs: Any) -> Throwable:
    innermost = Throwable("org.apache.hadoop.fs.ParentNotDirectoryException", "Parent path is not a directory: file:/etc/hostname")
    aborted = Throwable("org.apache.spark.SparkException", "Job aborted.", Throwable("java.io.IOException", "mkdirs failed", innermost))
    return Throwable("org.apache.spark.SparkException", "[TASK_WRITE_FAILED] Task failed while writing rows", aborted, **kwargs)


def test_a_py4j_errors_root_cause_is_the_innermost_java_throwable_by_its_simple_name() -> None:
    error = Py4JJavaError("An error occurred while calling o31.parquet.\n", hadoop_failure())
    assert replay_job.root_cause(error) == ROOT_CAUSE


def test_the_root_cause_follows_pythons_chain_into_the_jvms() -> None:
    try:
        try:
            raise Py4JJavaError("An error occurred while calling o31.parquet.\n", hadoop_failure())
        except Py4JJavaError as exc:
            raise RuntimeError("writing batch 1 failed") from exc
    except RuntimeError as exc:
        assert replay_job.root_cause(exc) == ROOT_CAUSE


def test_a_python_errors_root_cause_is_the_first_of_its_chain() -> None:
    try:
        try:
            {}["stream"]
        except KeyError:
            raise ValueError("bad spec") from None  # an explicitly hidden context is not followed
    except ValueError as hidden:
        assert replay_job.root_cause(hidden) == "ValueError: bad spec"
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as exc:
            raise OSError("cannot reach the JVM") from exc
    except OSError as exc:
        assert replay_job.root_cause(exc) == "ConnectionResetError: [Errno 104] Connection reset by peer"


def test_a_captured_exception_gives_the_root_cause_of_the_java_error_it_replaced() -> None:
    captured = AnalysisException.__new__(AnalysisException)
    captured._origin = Throwable("org.apache.spark.sql.AnalysisException", "[PATH_NOT_FOUND] Path does not exist: file:/x. SQLSTATE: 42K03")
    captured._cause = None
    try:
        try:
            raise Py4JJavaError("An error occurred while calling o28.parquet.\n", captured._origin)
        except Py4JJavaError:
            raise captured from None  # as pyspark's capture_sql_exception does
    except AnalysisException as exc:
        assert replay_job.root_cause(exc) == "AnalysisException: [PATH_NOT_FOUND] Path does not exist: file:/x. SQLSTATE: 42K03"


def test_a_captured_exception_without_a_java_object_is_read_from_its_stack_trace() -> None:
    captured = UnknownException.__new__(UnknownException)
    captured._origin, captured._cause = None, None
    captured._desc, captured._stackTrace = "org.apache.spark.SparkException: Job aborted.", JVM_TRACE
    assert replay_job.root_cause(captured) == ROOT_CAUSE
    captured._stackTrace = "\tat org.apache.spark.SparkContext.runJob(SparkContext.scala:2500)"
    assert replay_job.root_cause(captured) == "SparkException: Job aborted."


def test_when_the_jvm_cannot_be_asked_the_last_caused_by_line_of_the_text_is_the_root_cause() -> None:
    assert replay_job.root_cause(RuntimeError(f"An error occurred while calling o31.parquet.\n: {JVM_TRACE}")) == ROOT_CAUSE
    gone = Py4JJavaError("An error occurred while calling o31.parquet.\n", hadoop_failure(jvm_gone=True))
    assert replay_job.root_cause(gone) == "Py4JJavaError: An error occurred while calling o31.parquet."


def test_a_python_workers_error_is_named_by_its_tracebacks_last_line() -> None:
    worker = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "/tmp/kinesis_source.py", line 90, in read\n    raise ValueError("bad record")\n'
        "ValueError: bad record\n SQLSTATE: 38000"
    )
    error = Py4JJavaError(
        "x", Throwable("org.apache.spark.SparkException", "Job aborted", Throwable("org.apache.spark.api.python.PythonException", worker))
    )
    assert replay_job.root_cause(error) == "PythonException: ValueError: bad record"


def test_a_throwable_of_an_anonymous_class_or_without_message_is_still_named() -> None:
    assert replay_job.root_cause(Py4JJavaError("x", Throwable("org.example.Outer$1", None))) == "Outer$1"
    assert replay_job.root_cause(Py4JJavaError("x", Throwable("java.lang.NullPointerException", None))) == "NullPointerException"


def test_the_root_cause_is_one_bounded_line() -> None:
    reason = replay_job.root_cause(Py4JJavaError("x", Throwable("java.io.IOException", "first line " + "y" * 900 + "\nsecond line")))
    assert "\n" not in reason and len(reason) == replay_job.REASON_CHARS and reason.startswith("IOException: first line yyy")


def test_a_failed_job_logs_its_traceback_and_prints_its_root_cause_as_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(spec: object, **how: object) -> None:
        raise Py4JJavaError("An error occurred while calling o31.parquet.\n", hadoop_failure())

    monkeypatch.setattr(replay_job, "load_spec", lambda path: {})
    monkeypatch.setattr(replay_job, "run", fail)
    monkeypatch.setattr(Py4JJavaError, "__str__", lambda self: f"{self.errmsg}: {JVM_TRACE}")  # what the JVM would answer
    assert replay_job.main(["--spec", "batch.json"]) == 2
    logged = capsys.readouterr().err
    assert "Traceback (most recent call last):" in logged and "\tat org.apache.hadoop.fs.RawLocalFileSystem.mkdirs" in logged
    assert logged.splitlines()[-1] == f"kinesis-replay: replay failed: {ROOT_CAUSE}"


def test_a_domain_error_inside_a_task_failure_wins_over_the_root_cause(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    domain = f"{RangeReadError.__module__}.RangeReadError: stream s, range shardId-000000000000 [1 .. 9]: could not read until the end"
    worker = f'Traceback (most recent call last):\n  File "kinesis_source.py", line 9, in read\n{domain}'

    def fail(spec: object, **how: object) -> None:
        raise Py4JJavaError(
            "x",
            Throwable("org.apache.spark.SparkException", "Job aborted", Throwable("org.apache.spark.api.python.PythonException", worker)),
        )

    monkeypatch.setattr(replay_job, "load_spec", lambda path: {})
    monkeypatch.setattr(replay_job, "run", fail)
    monkeypatch.setattr(Py4JJavaError, "__str__", lambda self: f"{self.errmsg}: org.apache.spark.SparkException: Job aborted\n{worker}")
    assert replay_job.main(["--spec", "batch.json"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"kinesis-replay: replay failed: {domain}"


# Logs of local jobs whose Python worker crashed, captured from spark-submit (Spark 4.3, the job's Python daemon, a worker
# made to crash in a mapPartitions): its last words are the root cause, never the JVM's "EOFException" alone.
SPARK_LOGS = Path(__file__).with_name("spark_logs")


CRASHED = "a Python worker of the job crashed"


@pytest.mark.parametrize(
    ("log_file", "root_cause"),
    [
        ("python_worker_segfault.log", f"{CRASHED}: Fatal Python error: Segmentation fault"),
        ("python_worker_exited_after_a_traceback.log", f"{CRASHED}; its last line: MemoryError: cannot allocate the page's buffer"),
        ("python_worker_segfault_without_faulthandler.log", f"{CRASHED}; its last line: worker: about to crash"),
        ("python_worker_killed.log", f"{CRASHED} and wrote nothing: it was killed from outside (the kernel's out-of-memory killer"),
    ],
)
def test_a_crashed_python_worker_is_reported_by_its_own_last_line_not_by_eofexception(log_file: str, root_cause: str) -> None:
    lines = (SPARK_LOGS / log_file).read_text().splitlines()
    assert lines[-1] == "kinesis-replay: replay failed: EOFException"  # what the job itself could say
    job_log = spark_submit.JobLog()
    for line in lines:
        job_log.add(line)
    reason = job_log.reason()
    assert reason.startswith(f"kinesis-replay: replay failed: {root_cause}"), reason
    assert reason.endswith("(Spark reports it as EOFException)") and "\n" not in reason and len(reason) <= spark_submit.REASON_CHARS


def test_a_crashed_workers_line_reaches_the_tasks_error(tmp_path: Path) -> None:
    """run() gives the reason to the task's error: the job's log streamed through spark-submit's pipe."""
    log = SPARK_LOGS / "python_worker_exited_after_a_traceback.log"
    script = f"import sys; sys.stdout.write(open({str(log)!r}).read()); sys.exit(1)"
    with pytest.raises(spark_submit.SparkSubmitError, match=r"exited with 1: .*its last line: MemoryError: cannot allocate"):
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")


def test_a_domain_error_wins_over_a_crashed_workers_line() -> None:
    lines = (SPARK_LOGS / "python_worker_segfault.log").read_text().splitlines()
    job_log = spark_submit.JobLog()
    for line in [*lines[:-1], "kinesis-replay: replay failed: RangeReadError: stream s, range shardId-000000000000 [1 .. 9]"]:
        job_log.add(line)
    assert job_log.reason() == "kinesis-replay: replay failed: RangeReadError: stream s, range shardId-000000000000 [1 .. 9]"


def test_python_workers_run_with_the_fault_handler_unless_the_pipeline_says_otherwise() -> None:
    assert confs({"master": "local[2]"}, "spark.python.worker.faulthandler") == ["spark.python.worker.faulthandler.enabled=true"]
    own = {"master": "yarn", "conf": {"spark.python.worker.faulthandler.enabled": "false"}}
    assert confs(own, "spark.python.worker.faulthandler") == ["spark.python.worker.faulthandler.enabled=false"]
