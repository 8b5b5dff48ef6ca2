"""The shared-stream bench's figures (bench/shared.py): each reader's rate a shard in a window, and the targets' verdicts."""

from __future__ import annotations

from typing import Any

from shared import other_rates, replay_rates, verdicts

LIMIT = 1000.0  # bytes a second a shard


def replay(rate: dict[str, float], started: float, seconds: float = 10.0) -> dict[str, Any]:
    return {"shards": {s: {"bytes": r * seconds, "started": started, "ended": started + seconds, "throttled": 0} for s, r in rate.items()}}


def run(other: dict[str, dict[str, float]], getrecords: dict[str, float], efo: dict[str, float]) -> dict[str, Any]:
    """The other consumer at ``other[window][shard]`` bytes a second, one call a second, in windows of 10 s."""
    windows = {"alone": (0.0, 10.0), "getrecords": (20.0, 30.0), "efo": (40.0, 50.0), "alone_after": (60.0, 70.0)}
    samples = [(a + t + 0.5, shard, rate) for name, (a, _) in windows.items() for shard, rate in other[name].items() for t in range(10)]
    samples.append((15.0, "s0", 10**9))  # between two windows: counted in none
    return {
        "bytes_per_second": LIMIT, "windows": windows, "consumer": {"samples": samples, "throttled": [], "missed": {}},
        "replays": {"getrecords": replay(getrecords, 20.0), "efo": replay(efo, 40.0)},
    }  # fmt: skip


def test_the_other_consumer_s_rate_counts_only_the_calls_that_returned_in_the_window() -> None:
    other = {w: {"s0": 500.0, "s1": 400.0} for w in ("alone", "getrecords", "efo", "alone_after")}
    result = run(other, {"s0": 1, "s1": 1}, {"s0": 1, "s1": 1})
    assert other_rates(result, "alone") == {"s0": 500.0, "s1": 400.0}


def test_a_replay_s_rate_is_each_range_s_bytes_over_its_read_s_time() -> None:
    result = run({w: {"s0": 1.0} for w in ("alone", "getrecords", "efo", "alone_after")}, {"s0": 450.0}, {"s0": 990.0})
    assert replay_rates(result, "efo") == {"s0": 990.0}


def test_the_efo_targets_are_met_or_missed_on_the_slowest_shard() -> None:
    other = {"alone": {"s0": 500.0, "s1": 500.0}, "getrecords": {"s0": 200.0, "s1": 100.0},
             "efo": {"s0": 500.0, "s1": 440.0}, "alone_after": {"s0": 500.0, "s1": 500.0}}  # fmt: skip
    v = verdicts(run(other, {"s0": 800.0, "s1": 900.0}, {"s0": 1000.0, "s1": 890.0}))
    assert not v["efo_replay_met"]  # 0.89 of the limit on s1, though the mean is 0.945
    assert not v["efo_other_met"]  # s1 kept 0.88 of its baseline
    assert v["getrecords"]["other_mean"] == 0.3 and v["getrecords"]["other_min"] == 0.2
    v = verdicts(run(other | {"efo": {"s0": 500.0, "s1": 450.0}}, {"s0": 800.0, "s1": 900.0}, {"s0": 1000.0, "s1": 900.0}))
    assert v["efo_replay_met"] and v["efo_other_met"]
