"""Launch the replay job with spark-submit: package the library, build the command, stream its log, stop it on kill."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import marshal
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from kinesis_replay.core.config import DEFAULT_SPARK_CONF, PipelineConfig
from kinesis_replay.core.errors import (
    ConfigError,
    SparkSubmitError,  # re-exported for spark_submit.SparkSubmitError
)
from kinesis_replay.launchers import jvm_archive

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # kinesis_replay/, all its layers
# Where the replay job (replay_job.py, kinesis_source.py, python_daemon.py) lives: in the installed package (make dist's
# wheel puts spark_jobs/ inside kinesis_replay/), or beside plugins/ in this repository.
INSTALLED_JOBS = PACKAGE_DIR / "spark_jobs"
REPOSITORY_JOBS = PACKAGE_DIR.parents[1] / "spark_jobs"
JOB_FILE = "replay_job.py"


def spark_jobs_dir() -> Path:
    """The replay job's folder, installed or in this repository; a library with neither is refused, naming both."""
    for folder in (INSTALLED_JOBS, REPOSITORY_JOBS):
        if (folder / JOB_FILE).is_file():
            return folder
    raise ConfigError(
        f"the replay job's {JOB_FILE} is neither in {INSTALLED_JOBS} (an installed kinesis-replay) nor in {REPOSITORY_JOBS} "
        "(its repository): reinstall the package, or run from a full checkout"
    )


# The job's lines that report progress or success rather than an error.
_PROGRESS = re.compile(r"^kinesis-replay: (phases: |batch \d+ of )")


def package_library(dest: Path) -> Path:
    """Zip the kinesis_replay package this process runs, for --py-files: Airflow and Spark run the same code.

    Each module's bytecode goes in beside it (``bytecode``): zipimport keeps no bytecode of its own, so each of Spark's
    Python processes would compile the whole library again, every job (0.1 CPU-seconds here, more than the zip takes
    to write). A Python of another version finds the bytecode's magic number wrong and compiles the source instead.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(p for p in PACKAGE_DIR.rglob("*.py") if INSTALLED_JOBS not in p.parents):  # the job goes beside it
            name = (Path("kinesis_replay") / path.relative_to(PACKAGE_DIR)).as_posix()
            source = path.read_bytes()
            info = zipfile.ZipInfo.from_file(path, name)
            zf.writestr(info, source, compress_type=zipfile.ZIP_DEFLATED)
            compiled = zipfile.ZipInfo(name.removesuffix(".py") + ".pyc", info.date_time)  # the same zip for the same sources
            zf.writestr(compiled, bytecode(source, name), compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(dest)
    return dest


def bytecode(source: bytes, name: str) -> bytes:
    """A ``.pyc`` of ``source`` that is checked against the source's hash, not its time (PEP 552): zipimport uses it
    while the source beside it in the zip is the same, whatever times the zip's entries carry."""
    code = compile(source, name, "exec", dont_inherit=True)
    flags = 0b11  # hash-based, checked against the source
    return importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little") + importlib.util.source_hash(source) + marshal.dumps(code)


def spark_submit_binary() -> str:
    """spark-submit beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    found = str(beside) if beside.exists() else shutil.which("spark-submit")
    if not found:
        raise ConfigError("spark-submit is neither beside this Python nor on PATH: install pyspark in this environment")
    return found


# In local mode the driver's JVM runs the tasks too. A replay job is short and moves bytes (Arrow in,
# Parquet out); C2, the JVM's optimizing compiler, spent more CPU compiling than its code saved: on 400,000
# records of 1 KB the JVM used 30 CPU-seconds with the JVM's defaults and 20 with C1 alone (BENCHMARKS.md).
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A local job runs without Spark's web UI. Each running local job on a worker binds the next free port from 4040,
# and Spark gives up after spark.port.maxRetries (16) taken ones: the 17th replay running at once on one Airflow
# worker (a backfill pool with more slots, many pipelines) would fail at start-up. The UI dies with the job; its
# progress is on the Kinesis replay page. A pipeline may still turn it on.
LOCAL_NO_UI = {"spark.ui.enabled": "false"}
# Set as the driver's default options: Spark puts spark.driver.extraJavaOptions (the pipeline's, or a site's
# spark-defaults.conf) after them, so those still apply, and a later -XX flag wins over an earlier one.
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


def default_conf(master: str) -> dict[str, str]:
    """What every job gets unless the pipeline's spark.conf says otherwise.

    A local job runs without the web UI (LOCAL_NO_UI). Its JVM gets the C1-only options, and maps the
    class-data-sharing archive that ``warm_up`` recorded, if there is one.
    """
    conf = dict(DEFAULT_SPARK_CONF)
    if master.startswith("local"):
        conf.update(LOCAL_NO_UI)
        archive = jvm_archive.for_spark(LOCAL_DRIVER_JAVA_OPTIONS)
        mapped = [archive.use_option()] if archive is not None and archive.ready() and not archive.disabled() else []
        conf[DEFAULT_JAVA_OPTIONS] = " ".join([LOCAL_DRIVER_JAVA_OPTIONS, *mapped])
    return conf


def warm_up(pipeline: PipelineConfig, job: Path, py_files: list[Path], env: Mapping[str, str]) -> None:
    """Record the JVM's class-data-sharing archive with a warm-up job, once per machine; never fails the caller.

    Only for local masters whose pipeline leaves the driver's default options to us. The warm-up runs the
    replay job on made-up records (no Kinesis), so its JVM loads the classes a replay loads. If it fails,
    the archive is disabled with the reason, and every job runs as it would without one.
    """
    if not pipeline.spark.master.startswith("local") or DEFAULT_JAVA_OPTIONS in pipeline.spark.conf:
        return
    archive = jvm_archive.for_spark(LOCAL_DRIVER_JAVA_OPTIONS)
    if archive is None or archive.ready() or archive.disabled():
        return
    options, tmp = archive.recording()
    output = Path(tempfile.mkdtemp(prefix="kinesis-replay-warm-up-"))
    conf = {**pipeline.spark.conf, **DEFAULT_SPARK_CONF, **LOCAL_NO_UI, DEFAULT_JAVA_OPTIONS: f"{LOCAL_DRIVER_JAVA_OPTIONS} {options}"}
    command = [spark_submit_binary(), "--master", pipeline.spark.master, "--name", "kinesis-replay-jvm-warm-up"]
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    command += ["--py-files", ",".join(str(p) for p in py_files), str(job), "--warm-up", str(output)]
    log.info("recording the JVM's class-data-sharing archive %s with a warm-up job (once; later jobs start faster)", archive.path)
    try:
        run(command, env, f"pipeline {pipeline.name}: the JVM's warm-up job")
        if not archive.keep(tmp):
            raise SparkSubmitError(f"the warm-up job wrote no archive to {tmp}")
    except (SparkSubmitError, OSError) as exc:
        archive.disable(f"the warm-up job failed, so replay jobs run without an archive (delete this file to try again): {exc}")
        log.warning("no class-data-sharing archive for the replay job's JVM: %s", exc)
    finally:
        shutil.rmtree(output, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


# Spark's Python workers start from the job's daemon (spark_jobs/python_daemon.py), which imports pyspark from its
# installed package rather than from Spark's zip (installed_pyspark); the daemon finds it, and the library, on the
# workers' PYTHONPATH.
PYTHON_DAEMON = "python_daemon"
PYTHON_DAEMON_MODULE = "spark.python.daemon.module"
WORKERS_PYTHONPATH = "spark.executorEnv.PYTHONPATH"


def python_conf(master: str, job: Path, py_files: list[Path], conf: Mapping[str, str]) -> dict[str, str]:
    """For a local master, the job's daemon for the Python workers (``installed_pyspark``), unless the pipeline sets
    either setting itself. Local only: there the library's zip and the job's folder are on this machine, where the
    workers run."""
    library = next((p for p in py_files if p.suffix == ".zip" and p.is_file()), None)
    daemon = job.parent / f"{PYTHON_DAEMON}.py"
    if not master.startswith("local") or library is None or not daemon.is_file() or {PYTHON_DAEMON_MODULE, WORKERS_PYTHONPATH} & set(conf):
        return {}
    path = os.pathsep.join([str(library.resolve()), str(daemon.parent.resolve())])
    return {PYTHON_DAEMON_MODULE: PYTHON_DAEMON, WORKERS_PYTHONPATH: path}


def build_command(pipeline: PipelineConfig, batch_id: int, spec_path: Path, job: Path, py_files: list[Path]) -> list[str]:
    command = [spark_submit_binary(), "--master", pipeline.spark.master, "--name", f"kinesis-replay-{pipeline.name}-batch-{batch_id}"]
    conf = {**default_conf(pipeline.spark.master), **pipeline.spark.conf}
    conf.update(python_conf(pipeline.spark.master, job, py_files, conf))
    for key, value in sorted(conf.items()):
        command += ["--conf", f"{key}={value}"]
    command += ["--py-files", ",".join(str(p) for p in py_files), str(job), "--spec", str(spec_path)]
    return command


def submit_env(master: str, extra: Mapping[str, str | None]) -> dict[str, str]:
    """The job's environment: this venv's Python for the workers, a routable local IP, and what the caller adds.

    A variable the caller gives as None is removed: the worker's own credential variables would otherwise reach the job.
    """
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # spark-submit finds SPARK_HOME through PATH
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # else workers take python3 from PATH, outside the venv
    if master.startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else Spark may bind to an unroutable address
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run(command: list[str], env: Mapping[str, str], what: str, on_line: Callable[[str], None] | None = None) -> None:
    """Run spark-submit, logging its output as it comes (and giving each line to ``on_line``); kill it (and its JVM) if
    this task is stopped or times out."""
    log.info("%s: %s", what, " ".join(command))
    job_log = JobLog()
    proc = subprocess.Popen(command, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        if proc.stdout is None:  # never, with stdout=PIPE; typed so
            raise SparkSubmitError(f"{what}: spark-submit started with no output pipe")
        for line in proc.stdout:
            line = line.rstrip()
            job_log.add(line)
            log.info("%s", line)
            if on_line is not None:
                on_line(line)
        code = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    if code != 0:
        jvm_archive.forget_after_crash(command, job_log.jvm_crash)
        raise SparkSubmitError(f"{what}: spark-submit exited with {code}: {job_log.reason()}")


class JobLog:
    """What a job's log says about why it failed, kept as its lines stream by (``failure_reason`` reads it)."""

    def __init__(self) -> None:
        self.tail: deque[str] = deque(maxlen=200)  # a JVM stack trace's last "Caused by:" may come a hundred frames before the end
        self.own: deque[str] = deque(maxlen=10)  # the job's own lines: its error may come before many of Spark's or the JVM's
        self.jvm_crash: list[str] = []
        self.workers = WorkerLines()

    def add(self, line: str) -> None:
        self.tail.append(line)
        if line.startswith("kinesis-replay:"):
            self.own.append(line)
        if jvm_archive.JVM_CRASH in line:
            self.jvm_crash.append(line)
        self.workers.add(line)

    def reason(self) -> str:
        return failure_reason(list(self.own), list(self.tail), self.workers)


# A Spark task's Python worker that died (a signal, os._exit, the kernel's out-of-memory killer) is reported by the JVM as
# "Python worker exited unexpectedly (crashed)", caused by java.io.EOFException: the job's own root cause is then
# "EOFException", which names nothing. The worker's own last words are in the log of a local job: after the JVM's message
# the fault handler's line ("Fatal Python error: Segmentation fault"; DEFAULT_SPARK_CONF turns the handler on), or else
# the last line the worker wrote to its stderr, which Spark copies into this log (a Python traceback's last line).
_CRASHED = re.compile(r"Python worker exited unexpectedly \(crashed\)(?::\s*(?P<said>\S.*))?")
# The driver gives up on the job: what comes after is the driver's, not a worker's.
_ABORTING = re.compile(r" ERROR TaskSetManager: Task .* failed \d+ times?; aborting job")
_LOG4J = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} [A-Z]+ ")  # Spark's own log lines
# A JVM throwable's line ("org.apache.spark.SparkException: ..."), a frame, or a fault handler's lines inside the JVM's
# message: none is a worker's own line.
_JVM_LINE = re.compile(r"^(?:Caused by: |: )?(?:[a-z][\w$]*\.)+[A-Z][\w$]*(?::|$)|^\s|^\.\.\. \d+ more$")
_NOT_WORKERS = ("kinesis-replay:", "WARNING: ", "Using Spark's default log4j profile", "Setting Spark log level",
                "Setting default log level", "To adjust logging level", "[warning]", "OpenJDK ", "Current thread 0x",
                "Thread 0x", "Extension modules:", "Driver stacktrace:")  # fmt: skip
_TRACEBACK = "Traceback (most recent call last):"


class WorkerLines:
    """The Python workers' own lines in a local job's log, up to the job's abort, and whether a worker crashed."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=5)
        self.crashed = False
        self.said: str | None = None  # what the JVM's crash message carries (the fault handler's line), if anything
        self.in_traceback = False
        self.done = False

    def add(self, line: str) -> None:
        crashed = _CRASHED.search(line)
        if crashed:
            self.crashed = True
            self.said = self.said or crashed["said"]
        if self.done or crashed:
            return
        if _ABORTING.search(line):
            self.done = True
        elif line.startswith(_TRACEBACK):
            self.in_traceback = True
        elif self.in_traceback and line[:1].isspace():
            pass  # a frame of a worker's traceback
        elif self.in_traceback and line.strip():
            self.in_traceback = False
            self.lines.append(line.strip())  # the traceback's last line: what the worker raised
        elif line.strip() and not _LOG4J.match(line) and not _JVM_LINE.match(line) and not line.startswith(_NOT_WORKERS):
            self.lines.append(line.strip())

    def root_cause(self) -> str:
        """The crash, named by the worker's last words; or, when it left none, what that means."""
        if self.said:
            return f"a Python worker of the job crashed: {self.said.strip()}"
        if self.lines:
            return f"a Python worker of the job crashed; its last line: {self.lines[-1]}"
        return (
            "a Python worker of the job crashed and wrote nothing: it was killed from outside (the kernel's out-of-memory "
            "killer sends SIGKILL: see the machine's kernel log, and give the executors more memory or fewer ranges at once, "
            "read.task_concurrency) or ended by os._exit; on a cluster, its executor's stderr may say more"
        )


# The line the job prints when it fails: its root cause (or the domain error that names the shard and range).
_FAILED = "kinesis-replay: replay failed: "
# A JVM's or Python's error line: "Caused by: x.YException: ...", "Exception in thread ...", "java.lang.OutOfMemoryError: ...".
_CAUSE = re.compile(r"^(?:Caused by: |Exception in thread \"[^\"]*\" )?(?:[\w$]+\.)*[\w$]*(?:Exception|Error)(?::|$)")
# The JVM's own fatal error, printed on its own line with the reason on the next (a bad option, a class-data-sharing
# archive it cannot write at exit): it comes after any stack trace Spark logged as a warning, and is why it exited.
_VM_FAILED = "Error occurred during initialization of VM"
REASON_CHARS = 1000  # the reason is stored in the ledger (2,000 characters) and quoted in the stuck alert


def failure_reason(own: list[str], tail: list[str], workers: WorkerLines | None = None) -> str:
    """Why a job failed, in one line: the job's own "replay failed" line, else its other error lines; when it printed
    none (the JVM died first), the last "Caused by:" or exception line of the log, else the log's last lines. When the
    JVM's own fatal error is there, it is the reason, with the lines since the last stack trace: a trace before it was a
    warning's (Spark logs a late heartbeat so), not why the JVM exited. When a Python worker crashed and the job could
    name no cause but the JVM's EOFException, the worker's own last line is the root cause (``WorkerLines``)."""
    errors = [line for line in own if not _PROGRESS.match(line)]
    failed = [line for line in errors if line.startswith(_FAILED)]
    causes = [line.removeprefix("Caused by: ") for line in tail if _CAUSE.match(line)]
    said = failed[-1].removeprefix(_FAILED) if failed else causes[-1] if causes else ""
    if workers is not None and workers.crashed and (not said or said.endswith("EOFException") or _CRASHED.search(said)):
        return _bounded(f"{_FAILED}{workers.root_cause()} (Spark reports it as {said or 'a failed task'})")
    if _VM_FAILED in tail:  # from the last stack trace before the JVM's error: that error, what came just before it, and after
        at = len(tail) - 1 - tail[::-1].index(_VM_FAILED)
        frames = [i for i, line in enumerate(tail[:at]) if line.startswith("\t")]
        causes = []
        tail = tail[frames[-1] + 1 if frames else 0 :]
    return _bounded(" | ".join(failed[-1:] or errors or causes[-1:] or tail[-8:]))


def _bounded(reason: str) -> str:
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
