"""Exactly once under randomized fault schedules: fixed seeds, the real DAGs and Spark job, the output read with pyarrow.

`make chaos SCHEDULES=N` runs the same schedules with random seeds (tests/stack/chaos.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError

from stack import chaos
from stack.faults import StateFault, StateTableProxy

# Twelve seeds whose schedules, together, take every fault and every step (test_the_seeds_cover_every_fault).
SEEDS = (1, 2, 3, 17, 26, 27, 41, 50, 52, 58, 229, 395)
STEPS = 3
SPARK_STEPS = 2
WORKERS = 2  # schedules at once: one per core


def test_the_seeds_cover_every_fault() -> None:
    steps = [step for seed in SEEDS for step in chaos.generate(seed, STEPS, SPARK_STEPS)]
    assert {s.fault for s in steps if s.kind == "cycle"} == set(chaos.CYCLE_FAULTS)
    assert {s.kind for s in steps} == {"produce", "produce_aggregated", "cycle", "backfill", "split", "merge"}


@pytest.mark.timeout(1800)  # about 8 minutes on a quiet 2-core machine; much longer when it is shared
def test_every_record_lands_exactly_once_whatever_the_schedule(
    airflow_db: Path, stack: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each schedule runs in a process of its own (with a copy of the session's Airflow database), two at once."""
    lines: list[str] = []
    totals, outcomes = chaos.run_schedules(list(SEEDS), STEPS, SPARK_STEPS, stack, tmp_path, workers=WORKERS, echo=lines.append)
    with capsys.disabled():
        print(f"\n{totals.summary()}")
    failed = [o.report() for o in outcomes if not o.ok]
    assert not failed, "\n\n".join(failed)
    assert totals.schedules == len(SEEDS) and totals.records > 0 and totals.lost == totals.duplicated == 0


def test_the_state_table_proxy_loses_an_answer_or_goes_dark_as_armed(stack: Any, dynamodb: Any, state_table: str) -> None:
    """The harness's own faults, checked against moto: a lost answer leaves the write applied; dark means no answer at all."""
    proxy = StateTableProxy(stack.moto_url).start()
    try:
        client = boto3.client("dynamodb", endpoint_url=proxy.url, config=Config(retries={"total_max_attempts": 1}))

        def put(n: int) -> None:
            client.put_item(TableName=state_table, Item={"pk": {"S": "chaos"}, "sk": {"S": str(n)}})

        proxy.arm(StateFault("lost_ack", write=2))
        put(1)
        with pytest.raises(ConnectionClosedError):
            put(2)
        put(3)
        assert proxy.fired == "lost_ack at write 2 (PutItem)"
        stored = dynamodb.query(TableName=state_table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "chaos"}})
        assert sorted(item["sk"]["S"] for item in stored["Items"]) == ["1", "2", "3"]  # the lost answer's write was applied

        proxy.arm(StateFault("unreachable", write=1))
        with pytest.raises(ConnectionClosedError):
            put(4)
        with pytest.raises(ConnectionClosedError):
            client.get_item(TableName=state_table, Key={"pk": {"S": "chaos"}, "sk": {"S": "1"}})  # reads too, once dark
        assert "4" not in [i["sk"]["S"] for i in dynamodb.scan(TableName=state_table)["Items"]]
    finally:
        proxy.stop()
