"""Spark's Python processes import pyspark from its installed package, whose bytecode is compiled once, not from Spark's zip.

spark-submit and Spark's Python worker factory put ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the
path of every Python process they start. zipimport keeps no bytecode, so each process compiles the pyspark modules it
imports, every time: here 1.4 CPU-seconds for a worker's imports against 0.3 from the installed package (BENCHMARKS.md,
"What bounds each figure"), paid by the driver, the daemon and each worker of each job. Where pyspark is pip-installed,
as the project installs it, SPARK_HOME is that package's folder, and its zips hold the same files.

Importing this module drops a zip from ``sys.path`` only where the same module is installed further along the path, and
of the same version (its ``version.py`` byte for byte); anything else, a Spark distribution's zip above all, stays.

- The replay job's driver imports it before pyspark (``spark_jobs/replay_job.py``).
- The workers' daemon, ``spark_jobs/python_daemon.py`` as ``spark.python.daemon.module``, imports it, then runs
  pyspark's own daemon, whose forked workers inherit the path. The launcher sets that for local masters only, where it
  also puts the library and the job's folder on the workers' path (``spark_submit.python_conf``); an executor elsewhere
  keeps pyspark's daemon.
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Sequence
from importlib.machinery import PathFinder
from pathlib import Path

# Spark's zips, as SparkContext and the worker factory name them: <SPARK_HOME>/python/lib/<zip>.
_ZIPS = {"pyspark": "pyspark.zip", "py4j": "py4j-*-src.zip"}


def shadowing(path: Sequence[str]) -> list[str]:
    """The entries of ``path`` that are Spark's zip of a package installed, in the same version, further along it."""
    dropped = []
    for index, entry in enumerate(path):
        zipped = Path(entry)
        package = next((name for name, pattern in _ZIPS.items() if zipped.match(f"python/lib/{pattern}")), None)
        if package is None:
            continue
        spec = PathFinder.find_spec(package, [p for p in path[index + 1 :] if p not in dropped])
        if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
            continue
        installed = Path(spec.origin).parent / "version.py"
        try:
            with zipfile.ZipFile(zipped) as archive:
                same = archive.read(f"{package}/version.py") == installed.read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile):
            continue
        if same:
            dropped.append(entry)
    return dropped


def prefer_installed(path: list[str]) -> None:
    """Drop from ``path`` (sys.path) the zips that ``shadowing`` names; a no-op once pyspark is imported."""
    if "pyspark" in sys.modules:
        return
    for entry in shadowing(path):
        path.remove(entry)


prefer_installed(sys.path)
