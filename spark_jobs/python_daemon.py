"""Spark's Python worker daemon for local masters: pyspark's own, with pyspark imported from its installed package.

Started by Spark as ``python -m python_daemon pyspark.worker`` (``spark.python.daemon.module``, which the launcher sets
with the library and this folder on the workers' path: ``spark_submit.python_conf``). The workers it forks inherit its
path, so none of them compiles pyspark's sources from Spark's zip again (``kinesis_replay.launchers.installed_pyspark``).
The workers share its boto3 as well; pyarrow, which starts threads as it is imported, each worker imports after the
fork, as pyspark's daemon requires.
"""

from __future__ import annotations

import kinesis_replay.launchers.installed_pyspark  # noqa: F401  (first: it drops Spark's zips from the path)

# isort: split
import boto3  # noqa: F401  (imported once here, before the workers fork, rather than in each: it starts no thread)
from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
