"""A downstream DAG scheduled on a pipeline's output Asset is queued by each committed batch, with its ranges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stack.harness import SUCCESS, load_dags, output_table, run_dag
from stack.producer import produce

CONSUMER = """
from datetime import datetime, timezone
from airflow.sdk import DAG, Asset, task

with DAG("{dag_id}", schedule=[Asset(name="{asset}", uri="{uri}")], start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    @task
    def read_new_batch():
        pass
    read_new_batch()
"""


def test_a_committed_batch_queues_a_downstream_dag_scheduled_on_the_output(
    kinesis: Any, entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.asset import AssetDagRunQueue, AssetEvent
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select, update

    dag = load_dags(tmp_path / "pipelines.yaml", entry)[f"kinesis_replay_{entry['name']}"]
    consumer_id = f"downstream_of_{entry['name']}"
    folder = tmp_path / "downstream"
    folder.mkdir()
    (folder / "downstream.py").write_text(
        CONSUMER.format(dag_id=consumer_id, asset=f"kinesis_replay_{entry['name']}", uri=f"file://{entry['output']}")
    )
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder"), "dags-folder", None)
    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == consumer_id).values(is_paused=False))

    produce(kinesis, entry["stream"], 40)
    assert run_dag(dag).tasks == SUCCESS

    with create_session() as session:
        queued = session.scalars(select(AssetDagRunQueue.target_dag_id).where(AssetDagRunQueue.target_dag_id == consumer_id)).all()
        event = session.scalars(select(AssetEvent).where(AssetEvent.source_dag_id == dag.dag_id)).one()
        assert queued == [consumer_id]  # the scheduler starts it on its next loop
        assert event.extra["batch_id"] == 1 and event.extra["kind"] == "regular" and len(event.extra["ranges"]) == 4
    table = output_table(entry["output"])  # the event names the snapshot that made the batch visible: read as of it
    assert table is not None and event.extra["table"] == f"kinesis_replay.{entry['name']}"
    assert event.extra["snapshot_id"] == table.current_snapshot().snapshot_id
    assert len(table.scan(snapshot_id=event.extra["snapshot_id"]).to_arrow()) == 40
