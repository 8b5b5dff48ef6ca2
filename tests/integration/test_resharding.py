"""Splits and merges between and during cycles, with traffic: every record once, parents' records before children's."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from stack.harness import SUCCESS, check_exactly_once, load_dags, read_output, run_dag
from stack.producer import merge_shards, produce, split_shard


def children_of(kinesis: Any, stream: str) -> dict[str, tuple[str, ...]]:
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    return {s["ShardId"]: tuple(p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId")) if p) for s in shards}


def test_splits_and_merges_lose_nothing_and_keep_parents_first(
    kinesis: Any, store: DynamoDBStateStore, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    stream = entry["stream"]
    dag = load_dags(tmp_path / "pipelines.yaml", entry)[f"kinesis_replay_{entry['name']}"]
    produced = produce(kinesis, stream, 200)
    assert run_dag(dag).tasks == SUCCESS  # batch 1: shards 0-3
    # A shard split with nothing on it since the last batch (drained while planning, its children joining at once) is
    # tests/unit/test_cycle_steps.py's (test_splits_and_merges_read_parents_to_their_end_before_their_children).
    produced += produce(kinesis, stream, 100, start_index=200)
    split_shard(kinesis, stream, "shardId-000000000001")  # records after batch 1 on shard 1, then it closes
    produced += produce(kinesis, stream, 100, start_index=300)
    assert run_dag(dag).tasks == SUCCESS  # batch 2: shard 1 to SHARD_END; its children 4 and 5 wait
    batch2 = {r.shard_id: r for r in store.get_batch(entry["name"], 2).ranges}
    assert batch2["shardId-000000000001"].to_shard_end and "shardId-000000000004" not in batch2
    assert store.get_shards(entry["name"])["shardId-000000000001"].finished
    produced += produce(kinesis, stream, 100, start_index=400)
    planned = run_dag(dag.partial_subset(task_ids=["plan"]))  # a batch in flight...
    assert planned.tasks == {"plan": "success"}
    assert {"shardId-000000000004", "shardId-000000000005"} <= {r.shard_id for r in store.get_batch(entry["name"], 3).ranges}
    merge_shards(kinesis, stream, "shardId-000000000004", "shardId-000000000005")  # ...while its shards close
    produced += produce(kinesis, stream, 100, start_index=500)
    assert run_dag(dag).tasks == SUCCESS  # the batch in flight, resumed with the ranges it was planned with
    for _ in range(4):  # then drain: closed children finished, the merged child read
        result = run_dag(dag)
        if result.skipped:
            break
        assert result.tasks == SUCCESS
    else:
        raise AssertionError("the stream was not drained in 4 more cycles")

    table = read_output(entry["output"])
    landed = check_exactly_once(produced, table)
    assert landed.ok and landed.rows == 600, landed
    batches: dict[str, set[int]] = defaultdict(set)
    for shard, batch in zip(table["shard_id"].to_pylist(), table["batch_id"].to_pylist(), strict=True):
        batches[shard].add(batch)
    parents = children_of(kinesis, stream)
    for child, its_parents in parents.items():
        for parent in its_parents:
            if batches[child] and batches[parent]:
                assert min(batches[child]) > max(batches[parent]), (child, parent, batches[child], batches[parent])
    assert {"shardId-000000000006"} <= set(batches)  # the merged child was read
    finished = {sid for sid, s in store.get_shards(entry["name"]).items() if s.finished}
    assert finished == {"shardId-000000000001", "shardId-000000000004", "shardId-000000000005"}
