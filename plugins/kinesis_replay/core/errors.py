"""Every error kinesis-replay raises on purpose, in one flat file; every message names the pipeline, stream, shard, range,
path or key at fault and says what to do.

Each class says whether a retry can help (``retryable``): whether running the same step again, with nothing changed by
anyone, can succeed (a lost race, a throttle, an outage, a job killed mid-read). Airflow tasks fail at once, without
waiting out their retries, on an error that is not (``fail_fast`` in dags/kinesis_replay_tasks.py): a bad config, a
missing stream or state table, an output owned by another pipeline, state that was lost or is corrupt, or a loss of data
that needs an operator's acknowledgement. A subclass that does not set ``retryable`` itself is refused when defined.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KinesisReplayError(Exception):
    """Base of every error kinesis-replay raises on purpose; never raised itself (each class says whether a retry can help)."""

    retryable: ClassVar[bool]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "retryable" not in cls.__dict__:
            raise TypeError(f"{cls.__qualname__} must say whether a retry can help: set retryable = True or False on it")


# -- configuration and parameters ------------------------------------------------------------------------------------


class ConfigError(KinesisReplayError):
    """The pipelines config is malformed or names what cannot work; the message names the file and the key."""

    retryable = False


class ParameterError(KinesisReplayError):
    """A run's trigger parameter names what does not exist (a shard of another stream, a mistyped id)."""

    retryable = False


class BackfillError(KinesisReplayError):
    """The backfill's parameters select nothing that can be replayed; the message says which and why."""

    retryable = False


class NoTableError(KinesisReplayError):
    """The step needs the pipeline's Iceberg table, and the pipeline writes a directory output (output_format directory)."""

    retryable = False


class JobSpecError(KinesisReplayError):
    """The replay job's spec cannot be read by this job: malformed, incomplete, or of another version."""

    retryable = False


# -- AWS: streams, endpoints, access ---------------------------------------------------------------------------------


class StreamNotFoundError(KinesisReplayError):
    """The configured stream (or one of its shards) does not exist."""

    retryable = False


class EndpointUnreachableError(KinesisReplayError):
    """An AWS endpoint could not be reached at all, or did not answer in time (not a throttle, not a service error)."""

    retryable = True


class AccessRefusedError(KinesisReplayError):
    """AWS refused the caller: unknown credentials, a permission the policy lacks, or a KMS key that refuses it."""

    retryable = False


class CredentialsMissingError(AccessRefusedError):
    """The pipeline's Airflow connection (and the worker's default chain) gave no AWS credentials: no call was even signed."""

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


# -- reading the stream ----------------------------------------------------------------------------------------------


class RangeReadError(KinesisReplayError):
    """A closed range could not be read exactly (still throttled, a failed read, an end not reached): a retry reads it again."""

    retryable = True


class DataLossError(RangeReadError):
    """Records the stream held are gone (trimmed by retention) and no operator has acknowledged the loss."""

    retryable = False


class SubscriptionCutError(RangeReadError):
    """An enhanced fan-out subscription's connection ended before its event stream did; the reader renews it."""

    retryable = True


class ConsumerError(KinesisReplayError):
    """The enhanced fan-out consumer (read.consumer) cannot be used: another stream's, missing, deleting, or over Kinesis's limits."""

    retryable = False


# -- the state table -------------------------------------------------------------------------------------------------


class StateTableMissingError(KinesisReplayError):
    """The state table does not exist: the plan step creates it, so it was never created, was deleted, or is misnamed."""

    retryable = False


class StateConflictError(KinesisReplayError):
    """A conditional write to the state table lost: another run changed the item first."""

    retryable = True


class BatchSupersededError(StateConflictError):
    """Another run committed the batch this run was replaying, verifying or committing: nothing is left for this run to do."""

    retryable = False


class StateCorruptError(KinesisReplayError):
    """The state table holds something the protocol never writes (a malformed item, a missing batch or part item)."""

    retryable = False


class ProgressNotStoredError(KinesisReplayError):
    """Some of a replay's progress items were not written; progress is for the page only, so this never fails a replay."""

    retryable = True


class StateLostError(KinesisReplayError):
    """The state table and the output disagree about which batches are committed: one of them was lost or replaced."""

    retryable = False


class RecoveryError(KinesisReplayError):
    """The state cannot be rebuilt exactly from the output; the message says what is missing or inconsistent."""

    retryable = False


# -- the output and its table ----------------------------------------------------------------------------------------


class VerificationError(KinesisReplayError):
    """A batch's output or result manifest does not agree with its plan; nothing is committed, the batch stays in flight."""

    retryable = False


class DecodedValuesChangedError(VerificationError):
    """A backfill decoded a batch's records into other values than the output holds (accepted with ``redecode``)."""

    retryable = False


class OutputOwnershipError(KinesisReplayError):
    """The output root belongs to another pipeline (or stream, or state table, or output format) than the one about to write it."""

    retryable = False


class OutputCorruptError(KinesisReplayError):
    """A record kinesis-replay keeps in the output (an owner or commit record) is missing, not JSON, or lacks a field."""

    retryable = False


class OutputRefusedError(KinesisReplayError):
    """S3 refused a call on the output (a missing bucket, a permission the role lacks): the same call gets the same answer."""

    retryable = False


class OutputIOError(KinesisReplayError):
    """A call on the output failed in a way a later try may not meet (a server fault, a refused rename, a file gone at once)."""

    retryable = True


class TableMetadataLostError(OutputOwnershipError):
    """The catalog names a metadata file that is gone: the table's metadata was deleted, or the output moved."""

    retryable = False


class TableLocationTakenError(OutputOwnershipError):
    """The table's location holds another table's metadata: a second table there would share its folders (one location, one table)."""

    retryable = False


class TableMismatchError(StateLostError):
    """The table's current snapshot does not hold the batches the ledger says are committed: nothing moves until it is restored."""

    retryable = False


class TableCommitError(KinesisReplayError):
    """The batch could not be committed to the table (its commits kept losing the race); nothing of it is in the table."""

    retryable = True


class TableCommitRefusedError(TableCommitError):
    """The table refuses the batch's files (another batch's rows, a column type changed, no table): nothing is committed."""

    retryable = False


class FilesReplacedMeanwhileError(TableCommitRefusedError):
    """A compaction's batches whose table files another commit replaced since it read them (``batch_ids``): none committed."""

    # The compaction tries the rest again on the new state; the next run compacts what those commits wrote.
    retryable = True

    def __init__(self, message: str, batch_ids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.batch_ids = batch_ids


# -- the Iceberg catalog ---------------------------------------------------------------------------------------------


class CatalogConfigError(ConfigError):
    """The pipeline's Iceberg catalog cannot be loaded as configured: an unknown type, a module not installed, a bad property."""

    retryable = False


class CatalogUnreachableError(EndpointUnreachableError):
    """The pipeline's Iceberg catalog did not answer, or answered with a fault of its own (a 5xx, a throttle): an outage may end."""

    retryable = True


class CatalogLoadError(KinesisReplayError):
    """The pipeline's Iceberg catalog failed to load for a reason none of the known ones (config, outage) explains."""

    retryable = False


# -- Spark -----------------------------------------------------------------------------------------------------------


class SparkSubmitError(KinesisReplayError):
    """spark-submit exited non-zero (a job killed, an executor lost, a read that failed); the message carries the job's last error lines."""

    retryable = True


class BatchNotRestorableError(DataLossError):
    """A committed batch the table lacks cannot be restored: its files are gone from the output and its records from the stream."""

    retryable = False
