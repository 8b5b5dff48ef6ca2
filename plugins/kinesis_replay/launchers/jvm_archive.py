"""A class-data-sharing archive for the replay job's JVM: Spark's classes mapped from one file, not loaded from its jars.

A local replay job's JVM loads tens of thousands of classes from about 250 jars, and on a one-record
batch that was most of its CPU (a JFR profile put the top samples in ``ZipFile`` lookups). Java's
dynamic AppCDS records the classes a run loaded (``-XX:ArchiveClassesAtExit``), and later runs map
them (``-XX:SharedArchiveFile``): a one-record job went from 12.8 to 8.1 seconds and from 13.6 to 8.1
CPU-seconds here (BENCHMARKS.md).

The archive is recorded by a warm-up job of its own (``spark_submit.warm_up``), never by a replay: a
JVM that cannot write its archive exits 1 after the work is done, for example when a non-empty folder
(such as Spark's conf folder) is on its class path. A warm-up that fails leaves a ``.disabled`` file
with the reason, and jobs run without an archive until it is deleted. The archive is written to a
temporary name and moved into place with its size beside it only after the warm-up succeeded: the JVM
crashes on a truncated archive. Its name is a hash of the java binary, Spark's jars and the JVM
options, so an upgrade of any of them makes a new one. A job whose JVM crashes while it maps one of
these archives removes it, so the retry runs without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "KINESIS_REPLAY_JVM_CACHE"
USE, RECORD = "-XX:SharedArchiveFile=", "-XX:ArchiveClassesAtExit="
# Recording warns of every class it skips (hundreds of lines, all expected): not into the task log.
QUIET = "-Xlog:cds*=off"
STALE_SECONDS = 24 * 3600  # a recording takes seconds: a temporary archive this old belongs to a killed run
JVM_CRASH = "A fatal error has been detected by the Java Runtime Environment"
_MAPPED = re.compile(f"{re.escape(USE)}(\\S+)")


@dataclass(frozen=True)
class ClassArchive:
    path: Path

    @property
    def size_file(self) -> Path:
        return self.path.with_suffix(".size")

    @property
    def disabled_file(self) -> Path:
        return self.path.with_suffix(".disabled")

    def ready(self) -> bool:
        """A whole archive is in place: it exists, and has the size its recording run left beside it."""
        try:
            return self.path.stat().st_size == int(self.size_file.read_text())
        except (OSError, ValueError):
            return False

    def disabled(self) -> str | None:
        """Why recording failed here, if it did: then no job records or maps an archive until the file is deleted."""
        try:
            return self.disabled_file.read_text()
        except OSError:
            return None

    def use_option(self) -> str:
        return f"{USE}{self.path}"

    def recording(self) -> tuple[str, Path]:
        """The JVM options that record an archive, and the temporary file they write it to."""
        tmp = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.tmp")
        return f"{RECORD}{tmp} {QUIET}", tmp

    def keep(self, tmp: Path) -> bool:
        """Put a recorded archive in place, its size beside it; False if the recording wrote nothing."""
        if not tmp.exists():
            return False
        self.size_file.write_text(str(tmp.stat().st_size))
        tmp.replace(self.path)
        return True

    def disable(self, reason: str) -> None:
        with contextlib.suppress(OSError):
            self.disabled_file.write_text(reason + "\n")


def cache_dir(env: Mapping[str, str]) -> Path:
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kinesis-replay" / "jvm"


def for_spark(java_options: str, env: Mapping[str, str] | None = None) -> ClassArchive | None:
    """The archive for this java, these Spark jars and these options; None when one can't be kept (no cache, no java)."""
    env = os.environ if env is None else env
    java = Path(env["JAVA_HOME"]) / "bin" / "java" if env.get("JAVA_HOME") else shutil.which("java", path=env.get("PATH"))
    spark_home = env.get("SPARK_HOME") or _pyspark_dir()
    directory = cache_dir(env)
    if java is None or spark_home is None or re.search(r"\s", str(directory)):
        return None  # spark-submit splits JVM options at whitespace: a cache path with a space can't be passed
    digest = hashlib.sha256(java_options.encode())
    try:
        for path in [Path(java).resolve(), *sorted((Path(spark_home) / "jars").glob("*.jar"))]:
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(f"{directory} is not writable")
        _prune(directory)
    except OSError as exc:
        log.warning("no class-data-sharing archive for the replay job's JVM: %s", exc)
        return None
    return ClassArchive(directory / f"spark-{digest.hexdigest()[:16]}.jsa")


def _prune(directory: Path, older_than: float = STALE_SECONDS) -> None:
    """Remove what recording runs left when they were killed before they could clean up (a task process killed outright)."""
    for leftover in directory.glob("*.jsa.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if time.time() - leftover.stat().st_mtime > older_than:
                leftover.unlink()


def _pyspark_dir() -> str | None:
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def forget_after_crash(command: Sequence[str], output: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    """After a JVM crash, remove the archives of ours that the command mapped (never one a pipeline passed itself)."""
    if not any(JVM_CRASH in line for line in output):
        return
    ours = cache_dir(os.environ if env is None else env).resolve()
    for mapped in (Path(m) for arg in command for m in _MAPPED.findall(arg)):
        if mapped.parent.resolve() == ours and mapped.name.startswith("spark-") and mapped.suffix == ".jsa":
            archive = ClassArchive(mapped)
            log.warning("the JVM crashed mapping the class-data-sharing archive %s: removed, the retry runs without it", mapped)
            for path in (archive.size_file, archive.path):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
