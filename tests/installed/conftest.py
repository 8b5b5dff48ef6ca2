"""make test-dist's tests (tests/conftest.py leaves the folder out unless pytest gets --installed); the session ends
with the figures the issue asks for: the wheel's and sdist's sizes, the install's time, each Airflow command's."""

from __future__ import annotations

import json
from typing import Any

import pytest

_FIGURES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "dist_figures":
                _FIGURES.update(json.loads(value))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FIGURES:
        terminalreporter.write_line("make test-dist figures:")
        for what, figure in _FIGURES.items():
            terminalreporter.write_line(f"  {what}: {figure}")
