"""The Airflow side of the tasks: which errors fail a task at once, and which are left to its retries."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

import kinesis_replay_tasks as tasks
from kinesis_replay.backfill import BackfillError
from kinesis_replay.errors import (
    ConfigError,
    DataLossError,
    KinesisReplayError,
    OutputOwnershipError,
    StateConflictError,
    StateLostError,
    StreamNotFoundError,
    VerificationError,
)
from kinesis_replay.recovery import RecoveryError


@pytest.mark.parametrize(
    "error", [ConfigError, StreamNotFoundError, DataLossError, OutputOwnershipError, StateLostError, BackfillError, RecoveryError]
)
def test_an_error_a_retry_cannot_fix_fails_the_task_at_once(error: type[KinesisReplayError]) -> None:
    @tasks.fail_fast
    def step() -> None:
        raise error("pipeline 'orders': what is wrong")

    with pytest.raises(AirflowFailException, match=r"pipeline 'orders': what is wrong .*not retried") as raised:
        step()
    assert isinstance(raised.value.__cause__, error)


@pytest.mark.parametrize("error", [VerificationError, StateConflictError, KinesisReplayError])
def test_an_error_a_retry_may_fix_is_left_to_the_task_retries(error: type[KinesisReplayError]) -> None:
    @tasks.fail_fast
    def step() -> None:
        raise error("batch 3: the manifest disagrees")

    with pytest.raises(error):
        step()
