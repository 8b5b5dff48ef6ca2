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


class ParameterError(KinesisReplayError):
    """A run's trigger parameter names what does not exist (a shard of another stream, a mistyped id)."""

    retryable = False


class StreamNotFoundError(KinesisReplayError):
    """The configured stream (or one of its shards) does not exist."""

    retryable = False


class EndpointUnreachableError(KinesisReplayError):
    """An AWS endpoint could not be reached at all, or did not answer in time (not a throttle, not a service error)."""


class CatalogConfigError(ConfigError):
    """The pipeline's Iceberg catalog cannot be loaded as configured: an unknown type, a catalog module that is not
    installed, a missing or malformed property, or credentials the catalog refuses. No retry changes that."""


class CatalogUnreachableError(EndpointUnreachableError):
    """The pipeline's Iceberg catalog did not answer (connection refused, a timeout): retryable, as an outage may end.

    The plan loads the catalog before it claims the output or reads the stream, so this fails the plan, not a verify
    after the stream was read.
    """


class AccessRefusedError(KinesisReplayError):
    """AWS refused the caller: unknown credentials, a permission the policy lacks, or a KMS key that refuses it."""

    retryable = False


# AWS error codes that say who is calling may not (or cannot prove who it is): no retry changes the answer.
ACCESS_REFUSED_CODES = frozenset(
    {
        "AccessDenied", "AccessDeniedException", "UnrecognizedClientException", "InvalidClientTokenId",
        "InvalidSignatureException", "IncompleteSignature", "MissingAuthenticationToken", "KMSAccessDeniedException",
        "KMSDisabledException", "KMSInvalidStateException", "KMSNotFoundException", "KMSOptInRequired",
    }
)  # fmt: skip


def access_refused(what: str, code: str, message: str) -> AccessRefusedError:
    """The error for an AWS answer whose code is in ACCESS_REFUSED_CODES, naming what was being done."""
    return AccessRefusedError(
        f"{what}: AWS refused the call ({code}: {message}). Check the credentials of the connection (or of the Spark "
        'job) and that its policy grants this action (docs/deployment.md, "The IAM policy"); a stream encrypted with a KMS key '
        "also needs kms:Decrypt on it"
    )


class RangeReadError(KinesisReplayError):
    """A closed range could not be read exactly: its start is gone, or its end can't be reached."""


class DataLossError(RangeReadError):
    """Records the stream held are gone (trimmed by retention) and no operator has acknowledged the loss."""

    retryable = False


class StateConflictError(KinesisReplayError):
    """A conditional write to the state table lost: another run changed the item first."""


class BatchSupersededError(StateConflictError):
    """Another run of the pipeline committed the batch this run was replaying, verifying or committing.

    Not retryable: the batch is committed, so nothing is left for this run to do; a retry would only fail the same way.
    """

    retryable = False


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


class TableMismatchError(StateLostError):
    """The table's current snapshot does not hold the batches the ledger says are committed (rolled back, dropped, its
    metadata restored from an older file, or its rows changed by another writer): nothing moves until it is restored."""

    retryable = False


class BatchNotRestorableError(DataLossError):
    """A committed batch the table lacks cannot be restored: its files are gone from the output, and its records from
    the stream. The message names the batch, where its files were, and what would bring it back."""

    retryable = False
