"""One small hierarchy of domain errors; every message names the pipeline, stream, shard, range or key at fault."""

from __future__ import annotations


class KinesisReplayError(Exception):
    """Base of every error kinesis-replay raises on purpose.

    ``retryable`` says whether running the same step again can succeed without anyone changing anything
    (a lost race, a throttle, a job killed mid-read). Airflow tasks fail at once, without waiting out their
    retries, on an error that is not retryable: a bad config, a missing stream, an output owned by another
    pipeline, a state table that lost its state, or a loss of data that needs an operator's acknowledgement.
    """

    retryable = True


class ConfigError(KinesisReplayError):
    """The pipelines config is malformed; the message names the file and the key."""

    retryable = False


class StreamNotFoundError(KinesisReplayError):
    """The configured stream (or one of its shards) does not exist."""

    retryable = False


class EndpointUnreachableError(KinesisReplayError):
    """An AWS endpoint could not be reached at all (not a throttle, not a service error)."""


class RangeReadError(KinesisReplayError):
    """A closed range could not be read exactly: its start is gone, or its end can't be reached."""


class DataLossError(RangeReadError):
    """Records the stream held are gone (trimmed by retention) and no operator has acknowledged the loss."""

    retryable = False


class StateConflictError(KinesisReplayError):
    """A conditional write to the state table lost: another run changed the item first."""


class StateCorruptError(KinesisReplayError):
    """The state table holds something the protocol never writes."""


class ProgressNotStoredError(KinesisReplayError):
    """Some of a replay's progress items were not written; progress is for the page only, so this never fails a replay."""


class VerificationError(KinesisReplayError):
    """A batch's output or result manifest does not agree with its plan; nothing is committed."""


class OutputOwnershipError(KinesisReplayError):
    """The output root belongs to another pipeline (or stream, or state table, or output format) than the one about to write it."""

    retryable = False


class StateLostError(KinesisReplayError):
    """The state table and the output disagree about which batches are committed: one of them was lost or replaced.

    The message names the pipeline, the table and the output, and how to recover.
    """

    retryable = False
