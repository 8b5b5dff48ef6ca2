"""One small hierarchy of domain errors; every message names the pipeline, stream, shard, range or key at fault."""

from __future__ import annotations


class KinesisReplayError(Exception):
    """Base of every error kinesis-replay raises on purpose."""


class ConfigError(KinesisReplayError):
    """The pipelines config is malformed; the message names the file and the key."""


class StreamNotFoundError(KinesisReplayError):
    """The configured stream (or one of its shards) does not exist."""


class EndpointUnreachableError(KinesisReplayError):
    """An AWS endpoint could not be reached at all (not a throttle, not a service error)."""


class RangeReadError(KinesisReplayError):
    """A closed range could not be read exactly: its start is gone, or its end can't be reached."""


class DataLossError(RangeReadError):
    """Records the stream held are gone (trimmed by retention) and no operator has acknowledged the loss."""


class StateConflictError(KinesisReplayError):
    """A conditional write to the state table lost: another run changed the item first."""


class StateCorruptError(KinesisReplayError):
    """The state table holds something the protocol never writes."""


class VerificationError(KinesisReplayError):
    """A batch's output or result manifest does not agree with its plan; nothing is committed."""
