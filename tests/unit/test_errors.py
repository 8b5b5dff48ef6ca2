"""Every error says whether a retry can help: each class in errors.py is meant to go one way, for a stated reason."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from kinesis_replay.core import errors
from kinesis_replay.core.errors import KinesisReplayError

ROOT = Path(__file__).resolve().parents[2]

# Whether running the same step again, with nothing changed by anyone, can succeed; and why.
RETRYABLE: dict[str, tuple[bool, str]] = {
    "ConfigError": (False, "the config says the same until someone edits it"),
    "ParameterError": (False, "the run's trigger parameters are the same on every try"),
    "BackfillError": (False, "the backfill's parameters select the same nothing on every try"),
    "NoTableError": (False, "a directory pipeline never grows a table"),
    "JobSpecError": (False, "the same spec is misread the same way"),
    "StreamNotFoundError": (False, "a missing stream stays missing"),
    "EndpointUnreachableError": (True, "an outage or a network fault may end"),
    "AccessRefusedError": (False, "credentials and policies change only when someone changes them"),
    "CredentialsMissingError": (False, "a connection with no credentials has none until someone gives it some"),
    "RangeReadError": (True, "a throttle or a failed read may pass; the range is read again"),
    "DataLossError": (False, "trimmed records never come back; an operator must acknowledge the loss"),
    "BatchNotRestorableError": (False, "its files are gone from the output and its records from the stream: nothing can replay it"),
    "StateTableMissingError": (False, "only the regular DAG's plan creates the table, or someone fixes state_table"),
    "StateConflictError": (True, "a lost race: the next try reads what the winner wrote"),
    "BatchSupersededError": (False, "another run committed the batch: nothing is left to do"),
    "StateCorruptError": (False, "the table holds what the protocol never writes; a retry reads it again"),
    "ProgressNotStoredError": (True, "a later progress write may succeed (and it never fails a replay)"),
    "StateLostError": (False, "lost state comes back only by a recovery or a restore"),
    "RecoveryError": (False, "the output's records say the same on every try"),
    "VerificationError": (False, "the same files and manifest disagree the same way; the next run replays the batch"),
    "DecodedValuesChangedError": (False, "a replay decodes the same way every time; redecode accepts the new values"),
    "OutputOwnershipError": (False, "the owner record names another pipeline until someone moves it"),
    "OutputCorruptError": (False, "a malformed record in the output reads the same on every try"),
    "OutputRefusedError": (False, "S3 gives a missing bucket or a refused permission the same answer"),
    "OutputIOError": (True, "a server fault, a refused rename or a vanished file may not recur"),
    "TableMetadataLostError": (False, "deleted metadata does not come back by itself"),
    "TableLocationTakenError": (False, "another table's metadata at the location stays until someone moves it or fixes table.name"),
    "TableMismatchError": (False, "the table stays rolled back or rewritten until it is restored"),
    "TableCommitError": (True, "commits that lost the race for the table may win on the next try"),
    "TableCommitRefusedError": (False, "the table refuses the same files the same way"),
    "FilesReplacedMeanwhileError": (True, "a compaction tried again reads the batches' files as they are now"),
    "CatalogConfigError": (False, "the catalog's properties say the same until someone edits them"),
    "CatalogUnreachableError": (True, "the catalog's outage may end"),
    "CatalogLoadError": (False, "an unexplained failure to load the catalog is shown at once, not retried for half an hour"),
    "SubscriptionCutError": (True, "a cut subscription is renewed at the last record read; a range that failed so is read again"),
    "ConsumerError": (
        False,
        "a consumer of another stream, a missing or deleting one, or one over the stream's 20 stays so until someone acts",
    ),
    "SparkSubmitError": (True, "a job killed, an executor lost or a read that failed may go through the next time"),
}


def error_classes() -> list[type[KinesisReplayError]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, KinesisReplayError) and c is not KinesisReplayError]


@pytest.mark.parametrize("cls", error_classes(), ids=lambda c: c.__name__)
def test_each_error_says_itself_whether_a_retry_can_help(cls: type[KinesisReplayError]) -> None:
    assert "retryable" in cls.__dict__, f"{cls.__name__} inherits retryable instead of saying it"
    assert cls.__name__ in RETRYABLE, f"{cls.__name__}: add it to RETRYABLE with whether a retry can help, and why"
    intended, reason = RETRYABLE[cls.__name__]
    assert cls.retryable is intended, f"{cls.__name__}.retryable should be {intended}: {reason}"
    assert cls.__doc__ and "\n" not in cls.__doc__.strip(), f"{cls.__name__} needs a one-line docstring"


def test_the_table_names_only_classes_that_exist() -> None:
    assert set(RETRYABLE) == {c.__name__ for c in error_classes()}


def test_a_class_that_does_not_say_whether_a_retry_can_help_is_refused() -> None:
    with pytest.raises(TypeError, match="Unsaid must say whether a retry can help"):

        class Unsaid(errors.StateConflictError):
            """A subclass that forgot retryable."""


def test_every_error_class_of_the_library_is_defined_in_errors_py() -> None:
    """One flat file: a class defined elsewhere would escape the table above."""
    elsewhere = []
    for path in [*(ROOT / "plugins" / "kinesis_replay").rglob("*.py"), *(ROOT / "dags").glob("*.py"), *(ROOT / "spark_jobs").glob("*.py")]:
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id.endswith(("Error", "Exception")))
                or (isinstance(b, ast.Attribute) and b.attr.endswith(("Error", "Exception")))
                for b in node.bases
            ):
                elsewhere.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not elsewhere


def test_nothing_raises_the_bare_base_class() -> None:
    """Each raise names what went wrong, and so whether a retry can help; the base class says neither."""
    bare = []
    for path in [*(ROOT / "plugins" / "kinesis_replay").rglob("*.py"), *(ROOT / "dags").glob("*.py"), *(ROOT / "spark_jobs").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
                if name == "KinesisReplayError":
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare


def test_the_old_import_names_still_work() -> None:
    from kinesis_replay.adapters import iceberg_table
    from kinesis_replay.core import job_spec
    from kinesis_replay.launchers import spark_submit
    from kinesis_replay.steps import backfill, recovery

    assert backfill.BackfillError is errors.BackfillError and recovery.RecoveryError is errors.RecoveryError
    assert job_spec.JobSpecError is errors.JobSpecError and spark_submit.SparkSubmitError is errors.SparkSubmitError
    assert iceberg_table.TableCommitError is errors.TableCommitError
    assert iceberg_table.TableMetadataLostError is errors.TableMetadataLostError
