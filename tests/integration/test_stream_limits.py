"""Through a proxy that throttles like Kinesis and trims like retention: batches finish, and losses are never silent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.adapters import kinesis_client
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.adapters.layout import OWNER_FILE
from kinesis_replay.core.records import ROW_COLUMNS
from kinesis_replay.core.state import BatchStatus
from stack.harness import SUCCESS, age_batch, check_exactly_once, check_table_history, load_dags, output_table, read_output, run_dag
from stack.kinesis_proxy import KinesisProxy, ProxyLimits
from stack.producer import produce


@pytest.fixture
def proxy(stack: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[KinesisProxy]:
    """A throttling proxy before kinesalite, reached through the Airflow connection aws_proxy."""
    running = KinesisProxy(stack.kinesis_url, ProxyLimits(bytes_per_second=64 * 1024)).start()
    connection = stack.connection()
    connection["extra"]["service_config"]["kinesis"]["endpoint_url"] = running.url
    monkeypatch.setenv("AIRFLOW_CONN_AWS_PROXY", json.dumps(connection))
    yield running
    running.stop()
    print(running.report())


@pytest.fixture
def dag_for(tmp_path: Path, airflow_db: Path) -> Any:
    def build(entry: dict[str, Any]) -> Any:
        return load_dags(tmp_path / f"{entry['name']}.yaml", entry)[f"kinesis_replay_{entry['name']}"]

    return build


def shard_records(produced: list[Any]) -> tuple[str, list[Any]]:
    """The shard with the most records, and its records in order."""
    counts: dict[str, list[Any]] = {}
    for p in produced:
        counts.setdefault(p.shard_id, []).append(p)
    shard = max(counts, key=lambda s: len(counts[s]))
    return shard, sorted(counts[shard], key=lambda p: int(p.sequence_number))


def planned_through_proxy(kinesis: Any, entry: dict[str, Any], dag_for: Any) -> tuple[list[Any], Any]:
    """120 records produced, and batch 1 planned (not read) by the pipeline's DAG through the proxy; the DAG."""
    produced = produce(kinesis, entry["stream"], 120)
    dag = dag_for({**entry, "aws_conn_id": "aws_proxy"})
    assert run_dag(dag.partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
    return produced, dag


def test_a_throttled_batch_finishes_exactly_once_and_shows_its_progress(
    kinesis: Any, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # About 250 KB a shard: at the proxy's 64 KiB/s, beyond its one-second burst, each shard takes seconds to read,
    # many times the progress interval, however fast the machine.
    produced = produce(kinesis, entry["stream"], 1_000, payload_bytes=1000)
    # A budget far above what the proxy allows: every limit is hit, and each throttle is waited out.
    greedy = {"get_records_per_second": 50, "bytes_per_second": 10_000_000, "max_records_per_call": 40, "progress_seconds": 0.25}
    assert run_dag(dag_for({**entry, "aws_conn_id": "aws_proxy", "read": greedy})).tasks == SUCCESS
    assert proxy.throttled() > 0
    assert "records read, at " in caplog.text and "of the range's time span" in caplog.text  # progress, while reading
    assert "throttled (" in caplog.text and "KiB/s" in caplog.text  # and the rate each shard achieved
    result = check_exactly_once(produced, read_output(entry["output"]))
    assert result.ok, result


def test_a_range_start_gone_before_replay_fails_until_acknowledged(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any
) -> None:
    produced, dag = planned_through_proxy(kinesis, entry, dag_for)
    shard, records = shard_records(produced)
    proxy.trim_below[shard] = int(records[2].sequence_number)  # its first two records are trimmed away

    failed = run_dag(dag)
    assert failed.tasks["replay"] == "failed" and failed.tasks["commit"] == "upstream_failed"
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.FAILED
    assert f"the first record is {records[2].sequence_number}, not the range start {records[0].sequence_number}" in (batch.error or "")
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())

    assert run_dag(dag, run_conf={"acknowledge_data_loss": [shard]}).tasks == SUCCESS
    batch = store.get_batch(entry["name"], 1)
    assert [(g.shard_id, g.after, g.first_available, g.detected) for g in batch.gaps] == [
        (shard, None, int(records[2].sequence_number), "replay")
    ]
    lost = {records[0].sequence_number, records[1].sequence_number}
    result = check_exactly_once([p for p in produced if p.sequence_number not in lost], read_output(entry["output"]))
    assert result.ok, result


def test_a_range_every_record_of_which_is_gone_is_a_loss_to_acknowledge_and_the_pipeline_moves_on(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any
) -> None:
    # The batch waited in flight (the replay failing, or the pipeline paused) until retention took the whole of one
    # shard's range. Once, the acknowledged run failed the same way as every other: the pipeline could never move.
    produced, dag = planned_through_proxy(kinesis, entry, dag_for)
    shard, records = shard_records(produced)
    later = produce(kinesis, entry["stream"], 80, start_index=120)
    _, left = shard_records([p for p in later if p.shard_id == shard])
    proxy.trim_below[shard] = int(left[0].sequence_number)  # every record of the shard's range is gone
    planned = {r.shard_id: r for r in store.get_batch(entry["name"], 1).ranges}
    assert planned[shard].end == int(records[-1].sequence_number)

    failed = run_dag(dag)
    assert failed.tasks["replay"] == "failed" and failed.tasks["commit"] == "upstream_failed"
    assert f"the first record is {left[0].sequence_number}, not the range start {records[0].sequence_number}" in (
        store.get_batch(entry["name"], 1).error or ""
    )
    assert all(s.checkpoint is None for s in store.get_shards(entry["name"]).values())

    assert run_dag(dag, run_conf={"acknowledge_data_loss": [shard]}).tasks == SUCCESS
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED
    assert [(g.shard_id, g.after, g.first_available, g.detected) for g in batch.gaps] == [(shard, None, None, "replay")]
    assert shard not in (batch.result.by_shard() if batch.result else {})
    assert store.get_shards(entry["name"])[shard].checkpoint == planned[shard].end  # the loss is the gap's
    lost = {r.sequence_number for r in records}
    result = check_exactly_once([p for p in produced if p.sequence_number not in lost], read_output(entry["output"]))
    assert result.ok, result
    # The next plan then finds that checkpoint trimmed too, and records the gap from it once acknowledged: a trimmed
    # checkpoint's refusal as test_a_trimmed_checkpoint_fails_the_plan_until_acknowledged has it through Airflow, and
    # this very case's on the fakes (tests/unit/test_cycle_steps.py,
    # test_a_batch_whose_ranges_are_wholly_gone_commits_once_acknowledged_and_the_next_plan_says_its_checkpoints_are_gone).


def test_a_batch_every_range_of_which_is_gone_commits_no_row_once_acknowledged(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any
) -> None:
    # A first batch that waited past the retention as a whole: the replay job writes not a row (once, it failed
    # reading back a batch with no file), the table is created with the record's columns (once, the commit failed,
    # the columns unknown without a file, and the pipeline could never move), and takes a snapshot that adds nothing.
    _, dag = planned_through_proxy(kinesis, entry, dag_for)
    shards = sorted(r.shard_id for r in store.get_batch(entry["name"], 1).ranges)
    later = produce(kinesis, entry["stream"], 200, start_index=120)
    for shard in shards:
        _, left = shard_records([p for p in later if p.shard_id == shard])
        proxy.trim_below[shard] = int(left[0].sequence_number)

    assert run_dag(dag, run_conf={"acknowledge_data_loss": shards}).tasks == SUCCESS
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED and batch.result is not None and batch.result.shards == ()
    assert sorted((g.shard_id, g.first_available) for g in batch.gaps) == [(shard, None) for shard in shards]
    assert batch.snapshot_id is not None
    assert read_output(entry["output"]).num_rows == 0
    table = output_table(entry["output"])
    assert table is not None and [f.name for f in table.schema().fields] == [*(name for name, _ in ROW_COLUMNS), "batch_id"]

    # The next plan starts after those trimmed checkpoints (acknowledged once more); its rows land in that table.
    assert run_dag(dag, run_conf={"acknowledge_data_loss": shards}).tasks == SUCCESS
    assert store.get_batch(entry["name"], 2).status == BatchStatus.COMMITTED
    result = check_exactly_once(later, read_output(entry["output"]))  # every record of batch 1 gone, none after
    assert result.ok, result
    assert check_table_history(entry["output"]) == []


def test_records_trimmed_while_a_range_is_read_near_the_retention_are_a_gap_the_ledger_records(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any
) -> None:
    # The replay reads at the retention's edge: while it reads, retention trims the shard past the last record read,
    # and Kinesis begins the next page at the first record left, without an error. The range's first and last records
    # are the plan's: without the read-time check, verify passed the batch and three records were lost unrecorded.
    produced, _ = planned_through_proxy(kinesis, entry, dag_for)
    dag = dag_for({**entry, "aws_conn_id": "aws_proxy", "read": {"max_records_per_call": 5, "first_page_records": 5}})
    shard, records = shard_records(produced)
    seqs = [int(r.sequence_number) for r in records]
    shards = sorted(r.shard_id for r in store.get_batch(entry["name"], 1).ranges)
    proxy.retention_hours = 0  # every record is near the retention (and past it, so each range start needs the acknowledgement)
    proxy.trim_after[shard] = (seqs[9], seqs[13])

    assert run_dag(dag, run_conf={"acknowledge_data_loss": shards}).tasks == SUCCESS
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED
    assert [(g.shard_id, g.after, g.first_available, g.detected) for g in batch.gaps] == [(shard, seqs[9], seqs[13], "read")]
    assert store.get_shards(entry["name"])[shard].checkpoint == seqs[-1]
    lost = {r.sequence_number for r in records[10:13]}
    result = check_exactly_once([p for p in produced if p.sequence_number not in lost], read_output(entry["output"]))
    assert result.ok, result
    assert check_table_history(entry["output"]) == []


def test_a_trimmed_checkpoint_fails_the_plan_until_acknowledged(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], proxy: KinesisProxy, dag_for: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    produced = produce(kinesis, entry["stream"], 80)
    dag = dag_for({**entry, "aws_conn_id": "aws_proxy"})
    assert run_dag(dag).tasks == SUCCESS
    later = produce(kinesis, entry["stream"], 80, start_index=80)
    shard, records = shard_records(later)
    checkpoint = store.get_shards(entry["name"])[shard].checkpoint
    proxy.trim_below[shard] = int(records[1].sequence_number)  # the checkpoint and the first record after it are gone

    failed = run_dag(dag)
    assert failed.tasks["plan"] == "failed"
    assert [b.batch_id for b in store.list_batches(entry["name"])] == [1]  # nothing planned, nothing read

    # A shard id written short is no shard of the stream: once ignored, and the run failed on the loss again.
    typo = f"shardId-{int(shard.removeprefix('shardId-'))}"
    capsys.readouterr()
    mistyped = run_dag(dag, run_conf={"acknowledge_data_loss": [typo]})
    assert mistyped.tasks["plan"] == "failed"
    assert f"acknowledge_data_loss names {typo}, not among the shards of stream {entry['stream']}" in capsys.readouterr().out
    assert [b.batch_id for b in store.list_batches(entry["name"])] == [1]
    assert store.get_shards(entry["name"])[shard].checkpoint == checkpoint

    assert run_dag(dag, run_conf={"acknowledge_data_loss": [shard]}).tasks == SUCCESS
    (gap,) = store.get_batch(entry["name"], 2).gaps
    assert (gap.shard_id, gap.after, gap.first_available, gap.detected) == (shard, checkpoint, int(records[1].sequence_number), "plan")
    kept = [p for p in produced + later if p.sequence_number != records[0].sequence_number]
    result = check_exactly_once(kept, read_output(entry["output"]))
    assert result.ok, result


def test_a_range_older_than_retention_fails_before_any_read(
    kinesis: Any, dynamodb: Any, store: DynamoDBStateStore, entry: dict[str, Any], dag_for: Any
) -> None:
    assert kinesis_client.stream_retention(kinesis, entry["stream"]) == timedelta(hours=24)
    produce(kinesis, entry["stream"], 20)
    dag = dag_for(entry)
    assert run_dag(dag.partial_subset(task_ids=["plan"])).tasks == {"plan": "success"}
    # The batch waited in flight for 25 hours: age its stored ranges as that time would have.
    age_batch(dynamodb, store.table, entry["name"], 1, timedelta(hours=25))  # it waited in flight that long

    failed = run_dag(dag)
    assert failed.tasks["replay"] == "failed"
    error = store.get_batch(entry["name"], 1).error or ""
    assert f"stream {entry['stream']}, batch 1, range shardId-" in error
    assert "arrived 25h00m ago, more than the stream's retention of 24h" in error and "Nothing was read" in error
    assert [p.name for p in Path(entry["output"]).iterdir()] == [OWNER_FILE]  # claimed by the plan; no batch written


def test_the_proxy_limits_a_shard_of_a_stream_not_every_stream_s_shard_of_that_id(kinesis: Any, stream: str, stack: Any) -> None:
    """Kinesis's limits are per shard of a stream: shardId-000000000000 of two streams each has its own (bench-planning
    plans several streams through one proxy, one after the other)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    from stack.producer import ensure_stream

    other = f"{stream}-other"
    ensure_stream(kinesis, other, 1)
    running = KinesisProxy(stack.kinesis_url, ProxyLimits(get_shard_iterator_per_second=1)).start()
    try:
        client = boto3.client("kinesis", endpoint_url=running.url, config=Config(retries={"total_max_attempts": 1}))  # no retry

        def iterator(name: str) -> None:
            client.get_shard_iterator(StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")

        iterator(stream)
        iterator(other)  # the same shard id in another stream: a budget of its own
        assert running.throttled() == 0
        with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
            iterator(stream)  # the first stream's shard, twice within its second
        arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
        with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):  # named by its ARN, the same shard
            client.get_shard_iterator(StreamARN=arn, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")
        assert running.throttled() == 2
    finally:
        running.stop()
        kinesis.delete_stream(StreamName=other, EnforceConsumerDeletion=True)
