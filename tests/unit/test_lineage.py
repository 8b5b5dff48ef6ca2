"""The pure mapping of a committed batch to OpenLineage names and facets (kinesis_replay.core.lineage): no provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.core import lineage
from kinesis_replay.core.config import PipelineConfig, parse_config
from kinesis_replay.core.errors import ConfigError

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"


def pipeline(output: str, **changes: Any) -> PipelineConfig:
    entry = {"name": "orders", "stream": "orders", "output": output, "schedule": None, "initial_position": "TRIM_HORIZON",
             "state_table": "t", "spark": {}, **changes}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


def figures(batch_id: int = 3, **changes: Any) -> dict[str, Any]:
    return {"pipeline": "orders", "kind": "regular", "batch_id": batch_id, "shards": 1, "records": 10, "bad_records": 1,
            "bytes": 100, "seconds": 2.5, "path": "/lake/orders", "snapshot_id": 77, "table": "kinesis_replay.orders",
            "ranges": [{"shard_id": "shardId-0"}], **changes}  # fmt: skip


def test_the_stream_is_named_by_its_arn_cut_as_glue_cuts_a_table() -> None:
    assert lineage.stream_dataset(ARN) == lineage.DatasetName("arn:aws:kinesis:eu-west-1:123456789012", "stream/orders")
    with pytest.raises(ConfigError, match="not a Kinesis stream ARN"):
        lineage.stream_dataset("arn:aws:sqs:eu-west-1:1:orders")


def test_a_glue_table_is_named_by_glues_arn_with_its_location_as_a_symlink() -> None:
    glue = pipeline("s3a://lake/orders/", table={"catalog_properties": {"type": "glue", "glue.region": "us-east-2", "glue.id": "999"}})
    found = lineage.batch_lineage(glue, [figures()], ARN)
    (out,) = found.outputs
    assert out.dataset == lineage.DatasetName("arn:aws:glue:us-east-2:999", "table/kinesis_replay/orders")
    assert out.location == lineage.DatasetName("s3://lake", "orders")  # s3a:// as s3://, the key without its leading /
    assert (out.rows, out.bytes, out.snapshot_id) == (10, 100, 77)
    assert out.catalog == {"framework": "iceberg", "type": "glue", "name": glue.table.catalog if glue.table else ""}


def test_a_glue_catalog_without_region_or_id_takes_the_streams() -> None:
    glue = pipeline("s3://lake/orders", table={"catalog_properties": {"type": "glue"}})
    (out,) = lineage.batch_lineage(glue, [figures()], ARN).outputs
    assert out.dataset.namespace == "arn:aws:glue:eu-west-1:123456789012"


def test_any_other_catalog_names_the_table_by_its_location(tmp_path: Path) -> None:
    embedded = pipeline(str(tmp_path / "out"), table={})
    (out,) = lineage.batch_lineage(embedded, [figures()], ARN).outputs
    assert out.dataset == lineage.DatasetName("file", str(tmp_path / "out")) and out.location is None
    assert out.catalog is not None and out.catalog["type"] == "sql"
    rest = pipeline("s3://lake/t/", table={"catalog_properties": {"type": "rest", "uri": "http://catalog"}})
    (out,) = lineage.batch_lineage(rest, [figures()], ARN).outputs
    assert out.dataset == lineage.DatasetName("s3://lake", "t") and out.catalog == {
        "framework": "iceberg",
        "type": "rest",
        "name": "kinesis_replay",
    }


def test_a_directory_output_is_one_dataset_its_root_each_batch_folder_in_the_facet(tmp_path: Path) -> None:
    folders = pipeline(str(tmp_path / "out"), output_format="directory")
    found = lineage.batch_lineage(folders, [figures(path=str(tmp_path / "out" / "batch_id=0000000003"), snapshot_id=None)], ARN)
    (out,) = found.outputs
    assert out.dataset == lineage.DatasetName("file", str(tmp_path / "out")) and out.snapshot_id is None and out.catalog is None
    assert lineage.run_facet(found)["path"].endswith("batch_id=0000000003")


def test_the_run_facet_carries_the_figures_ranges_as_capped_and_a_redecodes_batches() -> None:
    wide = figures(ranges_in="/lake/orders/_commits/batch_id=0000000003.json")
    del wide["ranges"]  # past SUMMARY_RANGES the figures name the commit record instead: the facet does the same
    one = lineage.run_facet(lineage.batch_lineage(pipeline("/lake/orders", output_format="directory"), [wide], ARN))
    assert "ranges" not in one and one["ranges_in"].endswith(".json") and "seconds" not in one
    assert {k: one[k] for k in ("batch_id", "records", "snapshot_id")} == {"batch_id": 3, "records": 10, "snapshot_id": 77}
    many = lineage.batch_lineage(pipeline("/lake/orders", table={}), [figures(1, snapshot_id=9), figures(2, snapshot_id=9)], ARN)
    assert [b["batch_id"] for b in lineage.run_facet(many)["batches"]] == [1, 2]
    assert many.outputs[0].rows == 20


def test_a_glue_catalog_whose_account_cannot_be_known_is_a_clear_error() -> None:
    glue = pipeline("s3://lake/orders", table={"catalog_properties": {"type": "glue"}})
    with pytest.raises(ConfigError, match=r"pipeline 'orders'.*set glue.id in table.catalog_properties"):
        lineage.glue_region_and_account(glue, "eu-west-1", None)
