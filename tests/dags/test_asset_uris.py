"""The output's Asset: one root is one Asset, whichever of S3's schemes the config spells it with (issue 44, point 6)."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_replay.core.config import PipelineConfig, parse_config

GLUE = {"table": {"catalog_properties": {"type": "glue", "glue.region": "eu-west-1"}}}


def pipeline(output: str, **changes: Any) -> PipelineConfig:
    entry = {"name": "orders", "stream": "orders", "output": output, "schedule": None, "initial_position": "LATEST",
             "state_table": "kr-state", "spark": {}, **changes}  # fmt: skip
    return parse_config({"pipelines": [entry]})[0]


@pytest.mark.parametrize("output", ["s3a://lake/orders", "s3://lake/orders", "s3n://lake/orders/", "S3A://lake/raw/../orders"])
def test_every_spelling_of_an_s3_root_is_one_asset(output: str) -> None:
    from kinesis_replay_dags import output_asset

    asset = output_asset(pipeline(output, **GLUE))
    assert (asset.name, asset.uri) == ("kinesis_replay_orders", "s3://lake/orders")


def test_a_local_root_is_a_file_uri() -> None:
    from kinesis_replay_dags import output_asset

    assert output_asset(pipeline("/data/lake/./orders/", output_format="directory")).uri == "file:///data/lake/orders"
