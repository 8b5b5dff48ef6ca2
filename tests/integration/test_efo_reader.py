"""Reading ranges over enhanced fan-out, through the project's HTTP/2 endpoint in front of kinesalite: renewals, Kinesis's
rules and the faults a subscription meets, each read compared with the GetRecords reader's read of the same range."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from kinesis_replay.adapters.efo_reader import iterate_range_efo, resolve_consumer
from kinesis_replay.adapters.kinesis_client import ReadStats
from kinesis_replay.adapters.range_reader import iterate_range
from kinesis_replay.core.config import ReadConfig
from kinesis_replay.core.errors import ConsumerError, RangeReadError
from kinesis_replay.core.job_spec import KinesisEndpoint
from kinesis_replay.core.ranges import SequenceRange
from stack.efo_server import Rules
from stack.producer import produce

# The test endpoint's rules are short (a subscription of a few events, in-use windows of a fraction of a second); the
# reader's waits follow them. Kinesis's own (1 s between subscribes, 5 s in use) are the defaults of ReadConfig.
FAST = ReadConfig(subscribe_interval_seconds=0.05, in_use_wait_seconds=0.3, throttle_base_seconds=0.05)


def efo_client(url: str) -> Any:
    """The replay task's own Kinesis client (kinesis_source.kinesis_client), at the EFO endpoint, as a task reading over
    enhanced fan-out has it (kinesis_source.read_partition)."""
    from kinesis_replay.adapters.efo_transport import subscribe_over_http2
    from spark_jobs.kinesis_source import kinesis_client

    return subscribe_over_http2(kinesis_client(KinesisEndpoint(endpoint_url=url, region_name="us-east-1")))


def sequence_numbers(pages: Any) -> list[int]:
    return [int(r["SequenceNumber"]) for page in pages for r in page]


@pytest.fixture
def shard_range(kinesis: Any, stream: str) -> SequenceRange:
    """The busiest shard's range over 120 records put on 4 shards: its first record to its last."""
    produced = produce(kinesis, stream, 120)
    shard, _ = Counter(p.shard_id for p in produced).most_common(1)[0]
    numbers = sorted(int(p.sequence_number) for p in produced if p.shard_id == shard)
    assert len(numbers) >= 25
    return SequenceRange(shard, numbers[0], numbers[-1])


@pytest.fixture
def consumer(efo: Any, kinesis: Any, stream: str) -> str:
    return resolve_consumer(efo_client(efo.url), stream, f"c-{uuid.uuid4().hex[:6]}", FAST)


def read_both(
    kinesis: Any, efo: Any, stream: str, consumer: str, rng: SequenceRange, limits: ReadConfig = FAST
) -> tuple[list[int], list[int], ReadStats]:
    stats = ReadStats()
    over_efo = sequence_numbers(iterate_range_efo(efo_client(efo.url), stream, consumer, rng, limits, stats))
    by_get_records = sequence_numbers(iterate_range(kinesis, stream, rng, limits, sleep=lambda s: None))
    return over_efo, by_get_records, stats


def test_a_range_read_over_short_subscriptions_takes_three_renewals_and_reads_what_getrecords_reads(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    efo.reset(Rules(lifetime_events=2, event_records=5, in_use_seconds=0, subscribe_interval=0))
    over_efo, by_get_records, stats = read_both(kinesis, efo, stream, consumer, shard_range)
    assert over_efo == by_get_records
    assert over_efo[0] == shard_range.start and over_efo[-1] == shard_range.end
    assert stats.renewals >= 3 and efo.counts.subscribes == stats.subscriptions == stats.renewals + 1
    assert stats.records >= len(over_efo)  # each renewal reads the last record again, and drops it


def test_botocore_alone_cannot_subscribe_the_endpoint_wants_http2(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """Without the HTTP/2 transport, SubscribeToShard goes over HTTP/1.1 and the endpoint refuses it, as Kinesis documents."""
    import boto3
    from botocore.exceptions import ClientError

    plain = boto3.client("kinesis", endpoint_url=efo.url)
    with pytest.raises(ClientError, match="HTTP/2 only"):
        plain.subscribe_to_shard(ConsumerARN=consumer, ShardId=shard_range.shard_id, StartingPosition={"Type": "TRIM_HORIZON"})


def test_a_second_subscription_within_the_in_use_window_is_waited_out(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """Kinesis refuses a subscribe within 5 s of the last with ResourceInUseException: the reader waits and subscribes again."""
    efo.reset(Rules(in_use_seconds=1.0, subscribe_interval=0))
    client = efo_client(efo.url)
    taken = client.subscribe_to_shard(ConsumerARN=consumer, ShardId=shard_range.shard_id, StartingPosition={"Type": "LATEST"})
    taken["EventStream"].close()
    stats = ReadStats()
    over_efo = sequence_numbers(iterate_range_efo(client, stream, consumer, shard_range, FAST, stats))
    by_get_records = sequence_numbers(iterate_range(kinesis, stream, shard_range, FAST, sleep=lambda s: None))
    assert over_efo == by_get_records
    assert stats.in_use >= 1 and efo.counts.refused.get("ResourceInUseException", 0) == stats.in_use


def test_a_throttled_subscribe_is_waited_out(efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange) -> None:
    efo.reset(Rules(throttle=3, in_use_seconds=0, subscribe_interval=0))
    over_efo, by_get_records, stats = read_both(kinesis, efo, stream, consumer, shard_range)
    assert over_efo == by_get_records
    assert stats.throttled == 3 and efo.counts.refused == {"LimitExceededException": 3}


def test_subscribing_faster_than_kinesis_allows_is_refused_and_the_reader_keeps_to_it(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """The endpoint refuses subscribes of a consumer and shard closer than its interval; a reader that keeps a little
    more than that between its subscribes (read.subscribe_interval_seconds: the calls' arrivals vary by the network's
    delays) renews at every event and is never refused."""
    efo.reset(Rules(lifetime_events=1, event_records=10, in_use_seconds=0, subscribe_interval=0.2))
    over_efo, by_get_records, stats = read_both(kinesis, efo, stream, consumer, shard_range, replace(FAST, subscribe_interval_seconds=0.3))
    assert over_efo == by_get_records
    assert stats.renewals >= 3 and efo.counts.refused == {}


def test_a_consumer_still_creating_is_waited_for(efo: Any, kinesis: Any, stream: str, shard_range: SequenceRange) -> None:
    """A consumer registered on first use is CREATING for a while (here a second): resolving it waits until it is ACTIVE,
    and a reader given a CREATING consumer's ARN is refused (ResourceInUseException) until it is."""
    efo.reset(Rules(creating_seconds=1.0, in_use_seconds=0, subscribe_interval=0))
    client = efo_client(efo.url)
    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    creating = client.register_stream_consumer(StreamARN=arn, ConsumerName="creating")["Consumer"]
    assert creating["ConsumerStatus"] == "CREATING"
    stats = ReadStats()
    over_efo = sequence_numbers(iterate_range_efo(client, stream, creating["ConsumerARN"], shard_range, FAST, stats))
    assert over_efo == sequence_numbers(iterate_range(kinesis, stream, shard_range, FAST, sleep=lambda s: None))
    assert stats.in_use >= 1
    registered = resolve_consumer(client, stream, "registered-now", FAST, pipeline="orders")
    described = client.describe_stream_consumer(ConsumerARN=registered)["ConsumerDescription"]
    assert described["ConsumerStatus"] == "ACTIVE" and described["ConsumerName"] == "registered-now"
    assert client.list_tags_for_resource(ResourceARN=registered)["Tags"] == [{"Key": "kinesis-replay:pipeline", "Value": "orders"}]
    assert resolve_consumer(client, stream, "registered-now", FAST) == registered  # an existing consumer is reused
    with pytest.raises(ConsumerError, match=r"read\.consumer is a consumer of stream 'other'"):
        resolve_consumer(client, stream, registered.replace(f"stream/{stream}/", "stream/other/"), FAST)


def test_a_subscription_cut_mid_event_is_renewed_at_the_last_record_read(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """The endpoint sends half of an event and resets the stream: the reader renews at its last record, and reads every
    record once."""
    efo.reset(Rules(event_records=4, cut_events={2, 5}, in_use_seconds=0, subscribe_interval=0))
    over_efo, by_get_records, stats = read_both(kinesis, efo, stream, consumer, shard_range)
    assert over_efo == by_get_records
    assert stats.renewals == 2 and efo.counts.subscribes == 3


def test_a_subscription_taken_over_by_another_reader_loses_no_record_for_either(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """Two readers of one consumer and shard (a task attempt and its retry) take the subscription from each other; each
    renews at its own last record, and each reads the range exactly."""
    efo.reset(Rules(event_records=3, event_seconds=0.05, in_use_seconds=0.2, subscribe_interval=0))
    client = efo_client(efo.url)
    results: dict[int, list[int]] = {}
    stats = [ReadStats(), ReadStats()]

    def read(n: int) -> None:
        results[n] = sequence_numbers(
            iterate_range_efo(client, stream, consumer, shard_range, replace(FAST, in_use_wait_seconds=0.2), stats[n])
        )

    readers = [threading.Thread(target=read, args=(n,)) for n in (0, 1)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(60)
    expected = sequence_numbers(iterate_range(kinesis, stream, shard_range, FAST, sleep=lambda s: None))
    assert results == {0: expected, 1: expected}
    assert efo.counts.taken_over >= 1 and stats[0].in_use + stats[1].in_use >= 1


def test_a_range_whose_end_never_comes_fails_at_the_tip(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """An open shard read to its tip without meeting the range's end fails, as by GetRecords (empty events at the tip)."""
    efo.reset(Rules(in_use_seconds=0, subscribe_interval=0))
    beyond = SequenceRange(shard_range.shard_id, shard_range.start, shard_range.end + 1)
    with pytest.raises(RangeReadError, match="could not read until the end sequence number"):
        sequence_numbers(iterate_range_efo(efo_client(efo.url), stream, consumer, beyond, FAST))


def test_a_replay_task_reads_its_range_over_efo_when_its_partition_names_a_consumer(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """kinesis_source.read_partition, as a Spark task calls it: the consumer's range by SubscribeToShard alone (no call of
    the task's reaches the endpoint over HTTP/1.1: no GetRecords), its rows the GetRecords reader's."""
    from spark_jobs.kinesis_source import RangePartition, read_partition

    efo.reset(Rules(lifetime_events=2, event_records=5, in_use_seconds=0, subscribe_interval=0))
    endpoint = KinesisEndpoint(endpoint_url=efo.url, region_name="us-east-1")
    partition = RangePartition(0, stream, shard_range, endpoint, FAST, consumer_arn=consumer)
    rows = [int(n) for batch in read_partition(partition) for n in batch.column("sequence_number").to_pylist()]
    assert rows == sequence_numbers(iterate_range(kinesis, stream, shard_range, FAST, sleep=lambda s: None))
    assert efo.counts.subscribes >= 3 and efo.counts.http1_calls == 0


def test_registering_past_kinesis_consumer_limits_fails_at_once_naming_them(efo: Any, kinesis: Any, stream: str) -> None:
    """Kinesis refuses a sixth consumer while five are CREATING (and a 21st): resolving a new name then fails with the
    limits named, after one refused registration, not retried."""
    efo.reset(Rules(creating_seconds=60, in_use_seconds=0, subscribe_interval=0))
    client = efo_client(efo.url)
    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    for n in range(5):
        client.register_stream_consumer(StreamARN=arn, ConsumerName=f"creating-{n}")
    with pytest.raises(ConsumerError, match="at most 20 consumers, and at most 5 being created at once"):
        resolve_consumer(client, stream, "sixth", FAST)
    assert efo.counts.refused == {"LimitExceededException": 1}


def test_a_paced_subscription_waits_for_its_rate_and_reads_what_getrecords_reads(
    efo: Any, kinesis: Any, stream: str, consumer: str, shard_range: SequenceRange
) -> None:
    """At a rate of a few records a second, events wait for the consumer's rate on the shard (counted, not timed)."""
    efo.reset(Rules(event_records=5, in_use_seconds=0, subscribe_interval=0, bytes_per_second=2_000))
    over_efo, by_get_records, _ = read_both(kinesis, efo, stream, consumer, shard_range)
    assert over_efo == by_get_records
    assert efo.counts.paced > 0
