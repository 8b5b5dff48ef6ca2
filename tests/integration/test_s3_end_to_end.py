"""A pipeline whose output is on S3, with the Glue catalog, end to end against moto's S3 and Glue over HTTP.

The replay job's tasks write their Parquet files to S3 themselves (pyarrow, through the S3 endpoint the job spec
carries from the connection); the Airflow side reaches S3 through the connection alone: the environment names no S3
endpoint. Plan, replay, verify and commit; a backfill while a reader scans the table in a loop; orphan removal on S3;
a recovery from the output's commit records after the state table is lost: every record exactly once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.glue import GlueCatalog

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters import files
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.config import parse_config
from kinesis_replay.core.state import BatchStatus
from kinesis_replay.steps import maintenance
from stack import local_stack
from stack.harness import SUCCESS, TableReader, check_exactly_once, load_dags, run_dag
from stack.local_stack import LOCAL_KEY, REGION
from stack.producer import produce

pytestmark = pytest.mark.integration


def s3_keys(bucket: str, prefix: str) -> list[str]:
    pages = local_stack.s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_a_pipeline_on_s3_lands_every_record_once_through_backfill_orphan_removal_and_recovery(
    kinesis: Any, store: DynamoDBStateStore, dynamodb: Any, entry: dict[str, Any], tmp_path: Path, airflow_db: Path, stack: Any,
    bucket: str,
) -> None:  # fmt: skip
    name, database = entry["name"], f"raw_{uuid.uuid4().hex[:8]}"
    glue = {"glue.endpoint": stack.moto_url, "glue.region": REGION}
    entry.update(
        output=f"s3://{bucket}/raw/{name}", table={"catalog": "glue", "namespace": database, "catalog_properties": {"type": "glue", **glue}}
    )
    config = tmp_path / "pipelines.yaml"
    # A reader of its own: Glue for the table, S3's endpoint and keys for its files, as a user's query engine is set up.
    s3 = {"s3.endpoint": stack.moto_url, "s3.region": REGION, "s3.access-key-id": LOCAL_KEY, "s3.secret-access-key": LOCAL_KEY}

    def table() -> Any:
        return GlueCatalog("reader", **glue, **s3).load_table(f"{database}.{name}")

    produced = produce(kinesis, entry["stream"], 200)
    dags = load_dags(config, entry)
    assert run_dag(dags[f"kinesis_replay_{name}"]).tasks == SUCCESS
    produced += produce(kinesis, entry["stream"], 100, start_index=200)
    assert run_dag(dags[f"kinesis_replay_{name}"]).tasks == SUCCESS

    assert check_exactly_once(produced, table().scan().to_arrow()).ok
    written = [k for k in s3_keys(bucket, f"raw/{name}/data/") if k.endswith(".parquet")]
    assert written and all(k.split("/")[3].startswith("batch_id=") and k.split("/")[4].startswith("attempt=") for k in written), written
    assert s3_keys(bucket, f"raw/{name}/_staging/") == []  # nothing left behind by the job

    # A backfill of both batches while a reader scans the table: every scan whole, the same rows after.
    reader = TableReader(table, {1: 200, 2: 100})
    reader.start()
    try:
        backfilled = run_dag(dags[f"kinesis_replay_backfill_{name}"], run_conf={"batches": {"from_batch": 1, "to_batch": 2}})
    finally:
        reader.stop()
    assert backfilled.state == "success", backfilled
    assert reader.problems == [] and reader.scans > 3, (reader.problems, reader.scans)
    assert check_exactly_once(produced, table().scan().to_arrow()).ok

    # A file no snapshot references, in a batch's folder (a failed attempt's): orphan removal on S3 deletes it.
    stray = f"raw/{name}/data/batch_id=0000000001/attempt=gone/part-00000-t9-00000.parquet"
    local_stack.s3_client().put_object(Bucket=bucket, Key=stray, Body=b"PAR1")
    maintained = run_dag(dags[f"kinesis_replay_maintenance_{name}"], run_conf={"orphan_age_hours": 1})
    assert maintained.state == "success", maintained
    assert stray in s3_keys(bucket, f"raw/{name}/data/")  # younger than an hour: it may be a write in progress
    # Two days on (the DAG's own step, through the connection as its task is), the stray is removed; every snapshot
    # stays (fewer than the table keeps), and so do their files. Expiry on S3: test_glue_catalog.py.
    (pipeline,) = parse_config({"pipelines": [entry]})
    with files.reaching_s3(tasks.s3_access(pipeline)):
        tidied = maintenance.tidy_table(pipeline, store, orphan_age=timedelta(hours=1), now=datetime.now(UTC) + timedelta(days=2))
    assert tidied is not None and tidied.orphans_removed == (f"{bucket}/{stray}",), tidied
    assert stray not in s3_keys(bucket, f"raw/{name}/data/")
    assert check_exactly_once(produced, table().scan().to_arrow()).ok

    # The state table lost: refused, then rebuilt from the commit records on S3, and the next batch lands.
    dynamodb.delete_table(TableName=store.table)
    dynamodb.get_waiter("table_not_exists").wait(TableName=store.table)
    produced += produce(kinesis, entry["stream"], 50, start_index=300)
    refused = run_dag(load_dags(config, entry)[f"kinesis_replay_{name}"])
    assert refused.tasks["plan"] == "failed" and store.list_batches(name) == [], refused
    recovered = run_dag(load_dags(config, entry)[f"kinesis_replay_{name}"], run_conf={"recover_from_output": True})
    assert recovered.tasks == SUCCESS, recovered
    assert [b.batch_id for b in store.list_batches(name) if b.status == BatchStatus.COMMITTED] == [1, 2, 3]
    assert check_exactly_once(produced, table().scan().to_arrow()).ok
