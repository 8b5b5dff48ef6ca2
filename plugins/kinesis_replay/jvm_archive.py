"""A class-data-sharing archive for the replay job's JVM: Spark's classes mapped from one file, not loaded from its jars.

A local replay job's JVM loads tens of thousands of classes from about 250 jars, and on a one-record
batch that was most of its CPU (a JFR profile put the top samples in ``ZipFile`` lookups). Java's
dynamic AppCDS records the classes a run loaded (``-XX:ArchiveClassesAtExit``), and later runs map
them (``-XX:SharedArchiveFile``): a one-record job went from 11.6 to 7.6 seconds and from 12 to 7
CPU-seconds here (BENCHMARKS.md).

The first job on a machine records the archive, which costs it about 15 seconds once. The archive is
written to a temporary name and moved into place only after that job succeeded, with its size beside
it: the JVM crashes on a truncated archive. Its name is a hash of the java binary, Spark's jars and
the JVM options, so an upgrade of any of them makes a new one. A job whose JVM still crashes with an
archive removes it, and its retry runs without one.
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
STALE_SECONDS = 24 * 3600  # a recording takes seconds: a temporary archive this old belongs to a killed run
JVM_CRASH = "A fatal error has been detected by the Java Runtime Environment"
_OPTION = re.compile(f"(?:{re.escape(USE)}|{re.escape(RECORD)})\\S+")


@dataclass(frozen=True)
class ClassArchive:
    path: Path

    @property
    def size_file(self) -> Path:
        return self.path.with_suffix(".size")

    def ready(self) -> bool:
        """A whole archive is in place: it exists, and has the size its recording run left beside it."""
        try:
            return self.path.stat().st_size == int(self.size_file.read_text())
        except (OSError, ValueError):
            return False

    def java_option(self) -> str:
        """Map the archive if it is ready; else record one, to a name of this run's own."""
        if self.ready():
            return f"{USE}{self.path}"
        # Recording warns of every class it skips (hundreds of lines, all expected): not into the job's log.
        return f"{RECORD}{self.path}.{uuid.uuid4().hex}.tmp -Xlog:cds*=off"


def cache_dir(env: Mapping[str, str]) -> Path:
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kinesis-replay" / "jvm"


def for_spark(java_options: str, env: Mapping[str, str] | None = None) -> ClassArchive | None:
    """The archive for this java, these Spark jars and these options; None when one can't be kept (no cache, no java)."""
    env = os.environ if env is None else env
    java = Path(env["JAVA_HOME"]) / "bin" / "java" if env.get("JAVA_HOME") else shutil.which("java", path=env.get("PATH"))
    spark_home = env.get("SPARK_HOME") or _pyspark_dir()
    if java is None or spark_home is None:
        return None
    digest = hashlib.sha256(java_options.encode())
    try:
        for path in [Path(java).resolve(), *sorted((Path(spark_home) / "jars").glob("*.jar"))]:
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        directory = cache_dir(env)
        directory.mkdir(parents=True, exist_ok=True)
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


def settle(command: Sequence[str], succeeded: bool, output: Sequence[str]) -> None:
    """After a job: keep an archive it recorded if it succeeded, else drop it; drop an archive its JVM crashed on."""
    for option in (option for arg in command for option in _OPTION.findall(arg)):
        if option.startswith(RECORD):
            recorded = Path(option.removeprefix(RECORD))
            final = ClassArchive(recorded.with_suffix("").with_suffix(""))  # name.jsa.<run>.tmp -> name.jsa
            if succeeded and recorded.exists():
                final.size_file.write_text(str(recorded.stat().st_size))
                recorded.replace(final.path)
                log.info("recorded the JVM's class-data-sharing archive %s; later jobs start faster", final.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    recorded.unlink()
        elif not succeeded and any(JVM_CRASH in line for line in output):
            archive = ClassArchive(Path(option.removeprefix(USE)))
            log.warning("the JVM crashed with the class-data-sharing archive %s: removed, the retry runs without it", archive.path)
            for path in (archive.size_file, archive.path):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
