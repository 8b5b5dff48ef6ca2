"""The Docker stack's tests: `make test-compose` runs them, `make test` leaves them out (tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from stack.compose_stack import ROOT, Compose, StackClient, up


@pytest.fixture(scope="session")
def compose() -> Iterator[Compose]:
    """docker-compose.yml's stack, started once for the session as README tells a user to (a .env from .env.example,
    `docker compose up --build`), every service healthy; `docker compose down -v` afterwards, and nothing left running."""
    compose = Compose()
    compose("down", "-v", "--remove-orphans", check=False)  # what an interrupted run left behind
    try:
        yield up(compose)
    finally:
        compose("down", "-v", "--remove-orphans", check=False, capture=False)
    assert compose.running() == [], f"docker compose down left containers running: {compose.running()}"


@pytest.fixture(scope="session")
def client(compose: Compose) -> StackClient:
    return StackClient(compose)


# The container-kill schedules (test_stack_faults.py) record their outcomes as user properties; when the session
# ran any, BENCHMARKS.md's reliability table gets a row for them, beside make chaos's.
_OUTCOMES: list[dict[str, object]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _OUTCOMES.extend(json.loads(value) for name, value in report.user_properties if name == "compose_faults")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _OUTCOMES:
        return
    from stack.chaos import Totals, write_reliability

    totals = Totals()
    for o in _OUTCOMES:
        totals.schedules += 1
        totals.records += int(str(o["records"]))
        totals.lost += int(str(o["lost"]))
        totals.duplicated += int(str(o["duplicated"]))
        totals.seconds += float(str(o["seconds"]))
        if o["lost"] or o["duplicated"] or o["unexpected"] or o["history"] or not o["landed"]:
            totals.failed.append(int(str(o["seed"])))
    rounds = _OUTCOMES[0]["rounds"]
    seeds = [int(str(o["seed"])) for o in _OUTCOMES]
    write_reliability(ROOT / "BENCHMARKS.md", totals, seeds, f"{rounds} container kills", "make test-compose")
