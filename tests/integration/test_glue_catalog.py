"""The table through the AWS Glue Data Catalog: pyiceberg's GlueCatalog against the moto server's Glue, over HTTP.

A pipeline configured with the Glue catalog runs end to end through its DAGs, its table's files at a local output
(on S3: test_s3_end_to_end.py); pyiceberg's own operations run on a table whose metadata and files are on the moto
server's S3.

Glue keeps only a pointer per table (its ``metadata_location`` parameter) and refuses an update from a stale
version: that is what makes a commit atomic, and what these tests look at from Glue's side with boto3.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.client import BaseClient
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_replay.adapters import table_maintenance
from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.formats import path_batch_id
from kinesis_replay.core.state import BatchStatus
from stack import local_stack
from stack.harness import check_exactly_once, load_dags, run_dag
from stack.local_stack import LOCAL_KEY, REGION
from stack.producer import produce

IAM_POLICY = Path(__file__).resolve().parents[2] / "plugins" / "kinesis_replay" / "iam_policy.json"
SCHEMA = Schema(
    NestedField(1, "sequence_number", StringType(), required=False),
    NestedField(2, "batch_id", LongType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="batch_id"))


def glue_properties(moto_url: str, warehouse: str) -> dict[str, str]:
    """The catalog's properties as pyiceberg names them: Glue's endpoint and credentials, then S3's for the FileIO."""
    return {
        "type": "glue",
        "glue.endpoint": moto_url,
        "glue.region": REGION,
        "glue.access-key-id": LOCAL_KEY,
        "glue.secret-access-key": LOCAL_KEY,
        "s3.endpoint": moto_url,
        "s3.region": REGION,
        "s3.access-key-id": LOCAL_KEY,
        "s3.secret-access-key": LOCAL_KEY,
        "warehouse": warehouse,
    }


@pytest.fixture
def glue(stack: Any) -> Any:
    """Glue as AWS users see it (the stack points only Kinesis, DynamoDB, S3 and EMR Serverless clients at moto)."""
    return boto3.client("glue", endpoint_url=stack.moto_url)


@pytest.fixture
def catalog(stack: Any, bucket: str) -> GlueCatalog:
    return GlueCatalog("glue", **glue_properties(stack.moto_url, f"s3://{bucket}/warehouse"))


@pytest.fixture
def table(catalog: GlueCatalog) -> Table:
    database = f"lake_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(database)
    return catalog.create_table(f"{database}.orders", SCHEMA, partition_spec=SPEC)


def write_batch(table: Table, batch_id: int, attempt: str) -> str:
    """A batch's Parquet file on S3 in its attempt's folder under the table's data, through the table's own FileIO."""
    location = f"{table.location()}/data/batch_id={path_batch_id(batch_id)}/attempt={attempt}/part-00000.parquet"
    buffer = io.BytesIO()
    pq.write_table(pa.table({"sequence_number": [f"{batch_id}-{i}" for i in range(3)], "batch_id": [batch_id] * 3}), buffer)
    with table.io.new_output(location).create(overwrite=True) as f:
        f.write(buffer.getvalue())
    return location


def commit(table: Table, batch_id: int, attempt: str, replace: bool = False) -> None:
    location = write_batch(table, batch_id, attempt)
    with table.transaction() as tx:
        if replace:
            tx.delete(EqualTo("batch_id", batch_id))
        tx.add_files([location], snapshot_properties={"kinesis-replay.batch-id": str(batch_id)})


def rows_by_batch(table: Table) -> dict[int, int]:
    batches = table.scan().to_arrow()["batch_id"].to_pylist()
    return {b: batches.count(b) for b in sorted(set(batches))}


def s3_keys(bucket: str) -> set[str]:
    pages = local_stack.s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def glue_pointer(glue: Any, table: Table) -> str:
    database, name = table.name()
    return str(glue.get_table(DatabaseName=database, Name=name)["Table"]["Parameters"]["metadata_location"])


def test_commits_replays_and_maintenance_through_glue_on_s3(catalog: GlueCatalog, table: Table, bucket: str, glue: Any) -> None:
    commit(table, 1, "a")
    commit(table, 2, "a")
    commit(table, 1, "b", replace=True)

    reader = catalog.load_table(table.name())  # a reader that knows only the table's name
    assert rows_by_batch(reader) == {1: 3, 2: 3}
    assert glue_pointer(glue, table) == table.metadata_location
    old = f"{table.location().removeprefix(f's3://{bucket}/')}/data/batch_id=0000000001/attempt=a/part-00000.parquet"
    assert old in s3_keys(bucket), "a replay leaves the replaced files to maintenance"

    # What is not the table's: another pipeline's root in its data/ (one known by its owner record, one by its commit
    # records, each shaped as the table's files are), and a note. Maintenance leaves them and names them.
    data = f"{table.location().removeprefix(f's3://{bucket}/')}/data"
    foreign = [
        f"{data}/other/_kinesis_replay_owner.json", f"{data}/other/data/batch_id=0000000001/attempt=x/part-00000.parquet",
        f"{data}/older/_commits/batch_id=0000000001.json", f"{data}/older/data/batch_id=0000000001/attempt=y/part-00000.parquet",
        f"{data}/notes.txt",
    ]  # fmt: skip
    for key in foreign:
        local_stack.s3_client().put_object(Bucket=bucket, Key=key, Body=b"{}")
    history = len(table.metadata.snapshots)
    # A month later (every snapshot and file older than the defaults): only the current snapshot stays.
    report = table_maintenance.expire_and_remove(table, now=datetime.now(UTC) + timedelta(days=30))

    assert len(report.expired_snapshots) == history - 1 and len(table.metadata.snapshots) == 1
    assert f"{bucket}/{old}" in report.orphans_removed and old not in s3_keys(bucket)
    assert set(foreign) <= s3_keys(bucket) and report.foreign_files == len(foreign)
    assert report.foreign == (f"{bucket}/{data}/notes.txt", f"{bucket}/{data}/older/", f"{bucket}/{data}/other/")
    assert glue_pointer(glue, table) == table.metadata_location
    assert rows_by_batch(catalog.load_table(table.name())) == {1: 3, 2: 3}
    referenced = table_maintenance.referenced_files(table)
    assert all(f"{bucket}/{key}" in referenced or not key.endswith(".parquet") for key in s3_keys(bucket) - set(foreign))


def test_a_commit_from_a_stale_table_is_retried_on_glues_new_version_and_loses_no_batch(
    catalog: GlueCatalog, table: Table, glue: Any
) -> None:
    stale = catalog.load_table(table.name())
    commit(table, 1, "a")  # another writer wins the race: Glue's version moves on

    commit(stale, 2, "a")  # Glue refuses the stale version; pyiceberg re-applies the append on the new metadata

    current = catalog.load_table(table.name())
    assert rows_by_batch(current) == {1: 3, 2: 3}
    assert glue_pointer(glue, table) == current.metadata_location == stale.metadata_location
    summaries = [s.summary["kinesis-replay.batch-id"] for s in current.metadata.snapshots if s.summary]
    assert summaries == ["1", "2"], "each batch in one snapshot of its own, in the order Glue accepted them"


def test_glue_refuses_an_update_from_a_stale_version_and_keeps_the_newer_pointer(table: Table, glue: Any) -> None:
    """What the catalog's optimistic locking rests on, from Glue's side: an UpdateTable naming a version that is no longer
    the table's current one is refused (moto's own Glue ignores VersionId; the stack's moto server refuses as AWS does)."""
    from botocore.exceptions import ClientError

    database, name = table.name()
    before = glue.get_table(DatabaseName=database, Name=name)["Table"]
    commit(table, 1, "a")  # another writer's commit: Glue's version moves on
    newer = glue_pointer(glue, table)
    stale_input = {"Name": name, "TableType": before["TableType"], "Parameters": before["Parameters"]}

    with pytest.raises(ClientError) as refused:
        glue.update_table(DatabaseName=database, TableInput=stale_input, VersionId=before["VersionId"])

    assert refused.value.response["Error"]["Code"] == "ConcurrentModificationException"
    assert glue_pointer(glue, table) == newer != before["Parameters"]["metadata_location"], "the newer commit stands"
    assert rows_by_batch(table.catalog.load_table(table.name())) == {1: 3}


@pytest.fixture
def glue_calls(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The Glue actions that any boto3 client in this process calls, as IAM names them (glue:GetTable)."""
    calls: set[str] = set()
    make_api_call = BaseClient._make_api_call

    def recording(client: Any, operation: str, params: Any) -> Any:
        if client.meta.service_model.service_name == "glue":
            calls.add(f"glue:{operation}")
        return make_api_call(client, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", recording)
    return calls


def policy_glue_actions() -> set[str]:
    policy = json.loads(IAM_POLICY.read_text())
    return {a for s in policy["Statement"] for a in s["Action"] if a.startswith("glue:")}


def test_a_pipeline_on_the_glue_catalog_commits_through_its_dag_and_readers_find_it_in_glue(
    kinesis: Any,
    store: DynamoDBStateStore,
    entry: dict[str, Any],
    tmp_path: Path,
    airflow_db: Path,
    stack: Any,
    glue: Any,
    glue_calls: set[str],
) -> None:
    database = f"raw_{uuid.uuid4().hex[:8]}"
    # The catalog's properties as a user writes them in the pipelines config (credentials come from the environment).
    entry["table"] = {
        "catalog": "glue",
        "namespace": database,
        "catalog_properties": {"type": "glue", "glue.endpoint": stack.moto_url, "glue.region": REGION},
    }
    produced = produce(kinesis, entry["stream"], 80)
    dags = load_dags(tmp_path / "pipelines.yaml", entry)

    run = run_dag(dags[f"kinesis_replay_{entry['name']}"])

    assert run.state == "success" and run.tasks["commit"] == "success", run
    batch = store.get_batch(entry["name"], 1)
    assert batch.status == BatchStatus.COMMITTED and batch.snapshot_id is not None
    found = glue.get_table(DatabaseName=database, Name=entry["name"])["Table"]
    assert found["Parameters"]["table_type"].upper() == "ICEBERG"  # what Athena and Spark's Glue catalog look for
    # A reader that knows only Glue and the table's name.
    reader = GlueCatalog("reader", **{"glue.endpoint": stack.moto_url, "glue.region": REGION}).load_table(f"{database}.{entry['name']}")
    assert found["Parameters"]["metadata_location"] == reader.metadata_location
    assert reader.current_snapshot() is not None and reader.current_snapshot().snapshot_id == batch.snapshot_id
    assert reader.current_snapshot().summary["kinesis-replay.batch-id"] == "1"
    assert check_exactly_once(produced, reader.scan().to_arrow()).ok

    maintained = run_dag(dags[f"kinesis_replay_maintenance_{entry['name']}"])  # daily; nothing old enough yet

    assert maintained.state == "success", maintained
    after = GlueCatalog("reader", **{"glue.endpoint": stack.moto_url, "glue.region": REGION}).load_table(f"{database}.{entry['name']}")
    # The batch's files (one a Spark task) compacted into one, in a snapshot of its own through Glue; none expired.
    compacted = store.get_batch(entry["name"], 1)
    assert [s.snapshot_id for s in after.metadata.snapshots] == [batch.snapshot_id, compacted.snapshot_id]
    assert compacted.verified_result().attempt != batch.verified_result().attempt
    assert len(list(after.scan().plan_files())) == 1
    assert check_exactly_once(produced, after.scan().to_arrow()).ok
    # The IAM policy grants exactly what the pipeline's DAGs called on Glue.
    assert glue_calls == policy_glue_actions(), sorted(glue_calls)
