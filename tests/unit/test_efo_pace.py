"""The test endpoint's per consumer and shard read rate (tests/stack/efo_server.py ``Pace``), on a clock of the test's own."""

from __future__ import annotations

import pytest

from stack.efo_server import EfoServer, Pace, Rules


@pytest.fixture(autouse=True)
def region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the server's own client is made, never called


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_new_pace_sends_its_first_second_of_bytes_without_waiting() -> None:
    pace = Pace(1000, Clock())
    assert pace.wait_seconds() == 0.0
    pace.spend(1000)
    assert pace.wait_seconds() == 0.0  # the bucket is empty, not in debt


def test_an_event_larger_than_the_bucket_makes_the_next_wait_until_the_debt_is_repaid() -> None:
    clock = Clock()
    pace = Pace(1000, clock)
    pace.spend(3500)  # an event is sent whole: 2.5 seconds of debt
    assert pace.wait_seconds() == 2.5
    clock.now += 2.0
    assert pace.wait_seconds() == 0.5
    clock.now += 0.5
    assert pace.wait_seconds() == 0.0


def test_an_idle_consumer_saves_at_most_a_second_of_bytes() -> None:
    clock = Clock()
    pace = Pace(1000, clock)
    clock.now += 60.0
    pace.spend(2000)
    assert pace.wait_seconds() == 1.0


def test_each_consumer_and_shard_has_its_own_pace_kept_across_renewals() -> None:
    server = EfoServer("http://127.0.0.1:1", Rules(bytes_per_second=1000))
    first = server.pace(("consumer-a", "shardId-000000000000"))
    assert first is not None
    assert server.pace(("consumer-a", "shardId-000000000000")) is first  # a renewal does not get a new second's burst
    assert server.pace(("consumer-b", "shardId-000000000000")) is not first
    assert server.pace(("consumer-a", "shardId-000000000001")) is not first


def test_without_a_rate_subscriptions_are_not_paced() -> None:
    assert EfoServer("http://127.0.0.1:1").pace(("consumer-a", "shardId-000000000000")) is None
