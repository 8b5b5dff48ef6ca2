"""The replay job's input: the one typed contract that crosses from Airflow's process to Spark's.

Airflow writes it as JSON beside the job (``batch.json``, or on S3 for EMR Serverless); the job reads it
back with ``JobSpec.from_json``. Everything the job needs is here, nothing of Airflow or of the state
table, and no credential: those come from the job's environment (for a role connection, a profile that
assumes the role: ``kinesis_replay.launchers.credentials``), or the executors' instance role.

The JSON carries ``version``. A job reads only the version it was built for, so a spec written by an
older or newer kinesis-replay fails on the driver, before any read, with both versions named: the two
sides are then out of step (a library zip or job file left from another release).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from kinesis_replay.core.config import OUTPUT_FORMATS, PayloadConfig, PipelineConfig, ReadConfig
from kinesis_replay.core.errors import JobSpecError  # re-exported for job_spec.JobSpecError
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.state import Batch
from kinesis_replay.core.streams import check_region, check_stream

# Raise it with any change of the JSON a job could misread; from_json refuses every other version.
# 2: output_format (a table output is written per attempt, with batch_id in the files), estimated_bytes;
# 3: retention_seconds (a job of version 2 would read a range near the retention without checking its pages);
# 4: s3 (the connection's S3 endpoint and region, which the job's own writes go through since its tasks write the files);
# 5: stream may be an ARN (addressed by StreamARN), kinesis.profile and kinesis.config_file (the stream's own credentials)
VERSION = 5


@dataclass(frozen=True)
class KinesisEndpoint:
    """Where the job's Kinesis client connects: the region, and an endpoint URL only for a local or proxied stack.

    ``profile``: the AWS profile the job's Kinesis clients take their credentials from, when the stream has a connection
    of its own (the pipeline's ``stream_conn_id``, such as a role of the stream's account), read from ``config_file``
    (a file the launcher wrote beside the spec: kinesis_replay.launchers.credentials.for_stream). None: the job's
    default chain, as its S3 calls. A name and a path, never a credential.
    """

    region_name: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None
    config_file: str | None = None


@dataclass(frozen=True)
class S3Endpoint:
    """Where the job's S3 calls (its writes, the owner record, the manifest) go: the pipeline connection's region and
    S3 endpoint (``service_config.s3.endpoint_url``), which the Airflow side's S3 calls use too. None: S3's own."""

    region_name: str | None = None
    endpoint_url: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """One batch's replay: its closed ranges, where its output goes, how to read and decode."""

    pipeline_name: str
    stream: str
    batch_id: int
    output: str
    ranges: tuple[SequenceRange, ...]
    accept_gaps: frozenset[str] = frozenset()  # shards whose missing range start an operator acknowledged
    planned_at: datetime | None = None  # no record of an open range arrived after this
    kinesis: KinesisEndpoint = field(default_factory=KinesisEndpoint)
    s3: S3Endpoint = field(default_factory=S3Endpoint)
    read: ReadConfig = field(default_factory=ReadConfig)
    payload: PayloadConfig = field(default_factory=PayloadConfig)
    output_format: str = "iceberg"  # or "directory": config.OUTPUT_FORMATS
    # Planning's estimate of each range's bytes (shard id -> bytes), where it could tell: the job balances its
    # ranges across tasks by it. Only a hint: a missing or wrong estimate changes how fast, never what, is read.
    estimated_bytes: Mapping[str, int] = field(default_factory=dict)
    # How long the stream keeps records, when the job was submitted: a range read near it has each page checked for
    # records trimmed while it was read (range_reader.iterate_range). None: no page is checked.
    retention: timedelta | None = None
    version: int = VERSION

    def __post_init__(self) -> None:
        if not self.ranges:
            raise JobSpecError(f"pipeline {self.pipeline_name!r}, batch {self.batch_id}: the job spec has no ranges")
        try:  # a stream ARN's region is the Kinesis client's: another would send every call to another region
            check_stream(self.stream)
            check_region(self.stream, self.kinesis.region_name, "the job spec's kinesis.region_name")
        except ValueError as exc:
            raise JobSpecError(f"pipeline {self.pipeline_name!r}, batch {self.batch_id}: {exc}") from None

    @classmethod
    def for_batch(
        cls,
        pipeline: PipelineConfig,
        batch: Batch,
        kinesis: KinesisEndpoint,
        accept_gaps: frozenset[str] = frozenset(),
        retention: timedelta | None = None,
        s3: S3Endpoint | None = None,
    ) -> JobSpec:
        """The spec of one of ``pipeline``'s stored batches."""
        return cls(
            pipeline_name=batch.pipeline_name,
            stream=batch.stream,
            batch_id=batch.batch_id,
            output=pipeline.output,
            ranges=tuple(batch.ranges),
            accept_gaps=frozenset(accept_gaps),
            planned_at=batch.created_at,
            kinesis=kinesis,
            s3=s3 or S3Endpoint(),
            read=pipeline.read,
            payload=pipeline.payload,
            output_format=pipeline.output_format,
            estimated_bytes=dict(batch.notes.estimated_bytes or {}),
            retention=retention,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "pipeline": self.pipeline_name,
            "stream": self.stream,
            "batch_id": self.batch_id,
            "output": self.output,
            "ranges": [r.to_dict() for r in self.ranges],
            "accept_gaps": sorted(self.accept_gaps),
            "planned_at": None if self.planned_at is None else self.planned_at.isoformat(),
            "kinesis": asdict(self.kinesis),
            "s3": asdict(self.s3),
            "read": asdict(self.read),
            "payload": asdict(self.payload),
            "output_format": self.output_format,
            "estimated_bytes": dict(sorted(self.estimated_bytes.items())),
            "retention_seconds": None if self.retention is None else int(self.retention.total_seconds()),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "the job spec") -> JobSpec:
        """Parse and check a spec; every problem is a JobSpecError naming ``source`` and what is wrong."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise JobSpecError(f"{source} is not JSON: {exc}") from exc
        if not isinstance(data, Mapping):
            raise JobSpecError(f"{source} must be a JSON object, got {type(data).__name__}")
        return cls.from_dict(data, source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "the job spec") -> JobSpec:
        _check_version(data, source)
        missing = [k for k in ("pipeline", "stream", "batch_id", "output", "ranges") if k not in data]
        if missing:
            raise JobSpecError(f"{source} lacks {', '.join(missing)}")
        try:
            planned_at, retention = data.get("planned_at"), data.get("retention_seconds")
            return cls(
                pipeline_name=str(data["pipeline"]),
                stream=str(data["stream"]),
                batch_id=int(data["batch_id"]),
                output=str(data["output"]),
                ranges=tuple(SequenceRange.from_dict(r) for r in data["ranges"]),
                accept_gaps=frozenset(str(s) for s in data.get("accept_gaps", ())),
                planned_at=None if planned_at is None else datetime.fromisoformat(planned_at),
                kinesis=_known(KinesisEndpoint, data.get("kinesis", {}), source, "kinesis"),
                s3=_known(S3Endpoint, data.get("s3", {}), source, "s3"),
                read=_known(ReadConfig, data.get("read", {}), source, "read"),
                payload=_known(PayloadConfig, data.get("payload", {}), source, "payload"),
                output_format=_output_format(data.get("output_format", "iceberg"), source),
                estimated_bytes={str(k): int(v) for k, v in (data.get("estimated_bytes") or {}).items()},
                retention=None if retention is None else timedelta(seconds=int(retention)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise JobSpecError(f"{source} is malformed: {exc}") from exc


def _output_format(value: object, source: str) -> str:
    if value not in OUTPUT_FORMATS:
        raise JobSpecError(f"{source}: output_format must be one of {', '.join(OUTPUT_FORMATS)}, got {value!r}")
    return str(value)


def _check_version(data: Mapping[str, Any], source: str) -> None:
    version = data.get("version")
    if version == VERSION:
        return
    written = "no version (kinesis-replay before job spec versions)" if version is None else f"version {version!r}"
    raise JobSpecError(
        f"{source} has {written}, and this replay job reads version {VERSION} only: the job and the Airflow side "
        "come from different kinesis-replay releases; deploy one release to both, then run the batch again"
    )


def _known(kind: Any, values: object, source: str, key: str) -> Any:
    """A dataclass from a JSON object whose keys must all be its fields (a typo never silently falls back)."""
    if not isinstance(values, Mapping):
        raise JobSpecError(f"{source}: {key} must be a JSON object, got {type(values).__name__}")
    unknown = sorted(set(values) - {f.name for f in fields(kind)})
    if unknown:
        raise JobSpecError(f"{source}: {key} has unknown field(s) {', '.join(unknown)}")
    return kind(**values)
