"""The one definition of each text form that is stored or crosses a boundary: a batch id in a path and in a state-table
key, an S3 URI, a span of time as people read it, the replay job's progress line.

Standard library only: the DAGs, the library's adapters and the Spark job all import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

# A batch id is zero-padded so that it sorts as a number: to 10 digits in the output's paths (batch_id=0000000042) and
# to 12 in the state table's sort keys (batch#000000000042). Both widths are on disk and in existing tables: never
# change either.
PATH_BATCH_DIGITS = 10
SORT_KEY_BATCH_DIGITS = 12
MAX_BATCH_ID = 10**PATH_BATCH_DIGITS - 1  # the largest id whose padded path still lists in order

# The names of an output root's own records, on disk in every existing output (adapters/layout.py builds their paths;
# the core names them in its messages).
RESULTS_DIR = "_manifests"  # a leading underscore: Spark and pyarrow readers skip it
# One JSON file per batch whose commit began: the output's own copy of the ledger, from which a lost state
# table is rebuilt. Written after the batch is COMMITTING and before any checkpoint moves.
COMMITS_DIR = "_commits"
OWNER_FILE = "_kinesis_replay_owner.json"  # who owns this output root: one pipeline, one stream, one state table


def path_batch_id(batch_id: int) -> str:
    """A batch id as the output's paths write it: ``0000000042`` (the partition value of ``batch_id=``)."""
    return f"{batch_id:0{PATH_BATCH_DIGITS}d}"


def sort_key_batch_id(batch_id: int) -> str:
    """A batch id as the state table's sort keys write it: ``000000000042``."""
    return f"{batch_id:0{SORT_KEY_BATCH_DIGITS}d}"


# Hadoop's names for S3 (Spark writes through s3a://); boto3, pyarrow and Iceberg's readers know it as s3://.
HADOOP_S3_SCHEMES = ("s3a://", "s3n://")


def s3_uri(path: str) -> str:
    """A path with Hadoop's S3 schemes written as ``s3://`` (``s3a://bucket/x`` is ``s3://bucket/x``); any other as it is."""
    if path.startswith(HADOOP_S3_SCHEMES):
        return "s3://" + path.split("://", 1)[1]
    return path


def is_s3(path: str) -> bool:
    """Whether a path is on S3, under any of its schemes."""
    return s3_uri(path).startswith("s3://")


def duration(seconds: float) -> str:
    """A span of time as people read it: 45s, 12m05s, 3h20m."""
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def arrival_age(arrival: datetime | None, now: datetime) -> str:
    """How long ago a record arrived, as ``duration`` writes it (``of unknown age`` when Kinesis gave no time)."""
    if arrival is None:
        return "of unknown age"
    return duration((now - arrival).total_seconds())


# The text of a progress line: see ProgressLine. An older job's lines have this form too, so it may only be added to.
_PROGRESS_LINE = re.compile(
    r"(?P<range>\S+ \[\d+ \.\. [^\]]*\]): (?:(?P<read>\d+) records read|done, (?P<done>\d+) records)(?:, (?P<detail>.*))?"
)


@dataclass(frozen=True)
class ProgressLine:
    """What the replay job's reader logs about one range (spark_jobs/kinesis_source.py), which the Airflow task follows
    in the job's output to show each shard's count on the status page (status.ReplayProgress).

    ``<range>: N records read, <where the reader is>`` every read.progress_seconds while it reads, and
    ``<range>: done, N records, <the read's statistics>`` at its end. Found anywhere in a line (the log's own prefix
    comes before it); the text is the contract, since the task may follow a job of an older release.
    """

    range: str  # as SequenceRange.describe() writes it: "<shard> [<start> .. <end>]"
    records: int  # read so far, or in all when done
    done: bool
    detail: str = ""  # for people: where the reader is, or what the read cost

    @property
    def shard_id(self) -> str:
        return self.range.split(" ", 1)[0]

    def to_line(self) -> str:
        head = f"{self.range}: done, {self.records} records" if self.done else f"{self.range}: {self.records} records read"
        return f"{head}, {self.detail}" if self.detail else head

    @classmethod
    def parse(cls, line: str) -> ProgressLine | None:
        """The progress line in a line of the job's output, or None for any other line."""
        found = _PROGRESS_LINE.search(line)
        if found is None:
            return None
        done = found["done"] is not None
        return cls(found["range"], int(found["done"] if done else found["read"]), done, found["detail"] or "")
