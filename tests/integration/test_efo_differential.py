"""The enhanced fan-out reader against the GetRecords reader: over 200 random ranges of one stream, identical rows and
identical per-shard results, and the comparison demonstrably fails for a reader one record off at either end.

The stream: 4 shards of plain records and KPL aggregates, then a split and a merge, then more of both into the
children, so that it holds open and closed shards. The ranges, seeded: starting at an aggregate (whose sub-records
share its sequence number: the range holds it whole), ending at an aggregate, ending on the last record of a
subscription's event, running to a closed shard's end, and any. The EFO reader reads through the project's HTTP/2
endpoint (tests/stack/efo_server.py) with subscriptions of three events, so that long ranges renew. Both readers'
pages become rows exactly as a replay task's do (attempt_writer.page_rows: KPL aggregates deaggregated), and each
range's rows are tallied as the manifest states a shard (attempt_writer.ShardTally: rows, bytes, bounds, checksum,
digest).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from kinesis_replay.adapters.attempt_writer import ShardTally, page_rows
from kinesis_replay.adapters.efo_reader import iterate_range_efo, resolve_consumer
from kinesis_replay.adapters.range_reader import iterate_range
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.ranges import SequenceRange
from kinesis_replay.core.records import KPL_MAGIC
from stack.efo_server import Rules
from stack.producer import ensure_stream, kinesis_client, merge_shards, produce, produce_aggregated, split_shard

RANGES = 200
EVENT_RECORDS = 16  # records behind each event of the endpoint's subscriptions
LIMITS = ReadConfig(subscribe_interval_seconds=0.0, in_use_wait_seconds=0.1)
SEED = 47


@dataclass(frozen=True)
class Shard:
    shard_id: str
    records: list[int]  # its records' sequence numbers, in order
    aggregates: frozenset[int]  # those that are KPL aggregates
    ending: int | None  # a closed shard's EndingSequenceNumber


@dataclass(frozen=True)
class Case:
    kind: str
    range: SequenceRange
    after: int | None  # the record after the range's end, if any (for the reader that keeps one past it)
    second: int | None  # the range's second record, if any (for the reader that starts one late)


def _shards(client: Any, stream: str) -> list[Shard]:
    """Every shard of the stream as GetRecords reads it whole, from TRIM_HORIZON to its end or tip."""
    found = []
    for s in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(StreamName=stream, ShardId=s["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        records: list[int] = []
        aggregates: set[int] = set()
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=10_000)
            records += [int(r["SequenceNumber"]) for r in page["Records"]]
            aggregates |= {int(r["SequenceNumber"]) for r in page["Records"] if r["Data"].startswith(KPL_MAGIC)}
            iterator = page.get("NextShardIterator")
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0 and "EndingSequenceNumber" not in s["SequenceNumberRange"]:
                break
        ending = s["SequenceNumberRange"].get("EndingSequenceNumber")
        found.append(Shard(s["ShardId"], records, frozenset(aggregates), None if ending is None else int(ending)))
    return [s for s in found if s.records]


def _cases(shards: list[Shard], count: int, seed: int) -> list[Case]:
    """``count`` ranges, in turn of each kind, at seeded random places."""
    rng = random.Random(seed)
    kinds = ["start_at_aggregate", "end_at_aggregate", "end_of_event", "closed_shard_end", "any"]
    cases = []
    while len(cases) < count:
        kind = kinds[len(cases) % len(kinds)]
        shard = rng.choice([s for s in shards if s.ending is not None] if kind == "closed_shard_end" else shards)
        n = len(shard.records)
        aggregates = [i for i, seq in enumerate(shard.records) if seq in shard.aggregates]
        if kind == "start_at_aggregate" and aggregates:
            i = rng.choice(aggregates)
            j = rng.randrange(i, n)
        elif kind == "end_at_aggregate" and aggregates:
            j = rng.choice(aggregates)
            i = rng.randrange(0, j + 1)
        elif kind == "end_of_event":  # the last record of one of the first subscription's events
            i = rng.randrange(0, n)
            j = min(n - 1, i + EVENT_RECORDS * rng.randint(1, 3) - 1)
        else:
            i, j = sorted((rng.randrange(0, n), rng.randrange(0, n)))
        if kind == "closed_shard_end":
            assert shard.ending is not None
            span = SequenceRange(shard.shard_id, shard.records[i], shard.ending, to_shard_end=True)
            j = n - 1
        else:
            span = SequenceRange(shard.shard_id, shard.records[i], shard.records[j])
        after = shard.records[j + 1] if j + 1 < n else None
        second = shard.records[i + 1] if i + 1 < n else None
        cases.append(Case(kind, span, after, second))
    return cases


@pytest.fixture(scope="module")
def world(efo_endpoint: Any) -> Iterator[tuple[Any, Any, str, str, list[Case]]]:
    """One stream of plain records and aggregates across a split and a merge, its consumer, and the ranges."""
    client = kinesis_client()
    stream = f"diff-{uuid.uuid4().hex[:8]}"
    ensure_stream(client, stream, 4)
    produce(client, stream, 240)
    produce_aggregated(client, stream, 24, 5, start_index=1000)
    split_shard(client, stream, "shardId-000000000000")
    merge_shards(client, stream, "shardId-000000000002", "shardId-000000000003")
    produce(client, stream, 160, start_index=2000)
    produce_aggregated(client, stream, 16, 4, start_index=3000)
    shards = _shards(client, stream)
    assert sum(s.ending is not None for s in shards) == 3 and sum(s.ending is None for s in shards) == 4
    efo_endpoint.reset(Rules(lifetime_events=2, event_records=EVENT_RECORDS, in_use_seconds=0, subscribe_interval=0, idle_seconds=0.01))
    from kinesis_replay.adapters.efo_transport import subscribe_over_http2
    from kinesis_replay.core.job_spec import KinesisEndpoint
    from spark_jobs.kinesis_source import kinesis_client as task_client

    efo = subscribe_over_http2(task_client(KinesisEndpoint(endpoint_url=efo_endpoint.url, region_name="us-east-1")))
    consumer = resolve_consumer(efo, stream, "differential", LIMITS)
    yield client, efo, stream, consumer, _cases(shards, RANGES, SEED)
    efo_endpoint.reset()
    client.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


def _read(pages: Iterator[list[dict[str, Any]]], stream: str, shard_id: str) -> tuple[list[dict[str, Any]], ShardTally]:
    """A range's rows, as a replay task writes them, and their tally, as the manifest states the shard."""
    rows: list[dict[str, Any]] = []
    tally = ShardTally(shard_id)
    for page in pages:
        batch = page_rows(stream, shard_id, page)
        rows += batch.to_pylist()
        tally.add(batch, bad=False)
    return rows, tally


Mutant = Callable[[Case], SequenceRange | None]  # the range an EFO reader with a bug reads in place of a case's (None: n/a)


def _differences(world: tuple[Any, Any, str, str, list[Case]], cases: list[Case], mutant: Mutant | None = None) -> list[str]:
    """For each case, what the EFO reader read differently from the GetRecords reader (rows or tally)."""
    client, efo, stream, consumer, _ = world
    found = []
    for case in cases:
        efo_range = case.range if mutant is None else mutant(case)
        assert efo_range is not None
        by_get_records = _read(iterate_range(client, stream, case.range, LIMITS, sleep=lambda s: None), stream, case.range.shard_id)
        over_efo = _read(iterate_range_efo(efo, stream, consumer, efo_range, LIMITS), stream, case.range.shard_id)
        if over_efo[0] != by_get_records[0]:
            found.append(f"{case.kind} {case.range.describe()}: rows {len(over_efo[0])} over EFO, {len(by_get_records[0])} by GetRecords")
        elif over_efo[1] != by_get_records[1]:
            found.append(f"{case.kind} {case.range.describe()}: tallies {over_efo[1]} and {by_get_records[1]}")
    return found


def test_the_efo_reader_reads_exactly_what_the_getrecords_reader_reads_over_200_random_ranges(world: Any, efo_endpoint: Any) -> None:
    cases: list[Case] = world[4]
    subscribes_before = efo_endpoint.counts.subscribes
    assert _differences(world, cases) == []
    kinds = {kind: sum(c.kind == kind for c in cases) for kind in {c.kind for c in cases}}
    assert len(cases) >= 200 and min(kinds.values()) >= 40, kinds
    # The ranges cover what they claim: aggregates at both ends, a closed shard's end, ranges long enough to renew.
    aggregates = _aggregates(world)
    assert sum(c.range.start in aggregates for c in cases) >= 40
    assert sum(c.range.end in aggregates for c in cases if not c.range.to_shard_end) >= 40
    assert efo_endpoint.counts.subscribes - subscribes_before > len(cases)  # renewals


def _aggregates(world: Any) -> set[int]:
    client, _, stream, _, _ = world
    return {seq for s in _shards(client, stream) for seq in s.aggregates}


def _starts_late(case: Case) -> SequenceRange | None:
    if case.second is None or case.second > case.range.end:
        return None
    return replace(case.range, start=case.second)


def _keeps_one_past_the_end(case: Case) -> SequenceRange | None:
    if case.range.to_shard_end or case.after is None:
        return None
    return replace(case.range, end=case.after)


@pytest.mark.parametrize("mutant", [_starts_late, _keeps_one_past_the_end], ids=["starts one record late", "keeps one record past the end"])
def test_the_comparison_fails_for_an_efo_reader_one_record_off(world: Any, mutant: Mutant) -> None:
    """The differential test's power: a reader one record off at either end differs on every range it is tried on."""
    cases = [c for c in world[4] if mutant(c) is not None][:10]
    assert len(cases) == 10
    differences = _differences(world, cases, mutant)
    assert len(differences) == len(cases), differences
