"""How the output's files reach S3: the caller's S3Access (a DAG task's: the pipeline's connection), never a guess."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials

from kinesis_replay.adapters import files, iceberg_table
from kinesis_replay.core.config import parse_config


class Session:
    """What S3Access asks of a boto3 session: its credentials now (a refreshable role's change between asks)."""

    def __init__(self, *keys: tuple[str, str, str | None]) -> None:
        self.keys = list(keys)
        self.asked = 0

    def get_credentials(self) -> Credentials:
        access, secret, token = self.keys[min(self.asked, len(self.keys) - 1)]
        self.asked += 1
        return Credentials(access, secret, token)

    def client(self, service: str, **options: Any) -> Any:
        session: Any = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
        return session.client(service, **options)


def test_outside_a_block_s3_is_reached_through_the_default_chain_and_inside_through_the_given_access() -> None:
    access = files.S3Access(Session(("AK", "SK", None)), "http://127.0.0.1:5000", "eu-west-1", "connection lake")
    assert files.s3_access() == files.S3Access()
    with files.reaching_s3(access):
        assert files.s3_access() is access
        with files.reaching_s3(files.S3Access()):
            assert files.s3_access() == files.S3Access()
        assert files.s3_access() is access
    assert files.s3_access() == files.S3Access()


def test_pyarrows_file_system_takes_the_endpoint_the_region_and_the_keys_of_the_moment() -> None:
    session = Session(("AK1", "SK1", "T1"), ("AK2", "SK2", "T2"))
    access = files.S3Access(session, "http://127.0.0.1:5000", "eu-west-1", "connection lake")
    with files.reaching_s3(access):
        filesystem, path = files.filesystem_of("s3a://lake/raw/orders/")
        files.filesystem_of("s3://lake/raw/orders")

    assert path == "lake/raw/orders" and filesystem.region == "eu-west-1"
    assert session.asked == 2  # a file system per use: an assumed role's keys are asked for each time, never kept
    local, where = files.filesystem_of("relative/out")
    assert type(local).__name__ == "LocalFileSystem" and where.endswith("/relative/out")


def test_the_client_goes_to_the_connections_s3_endpoint() -> None:
    access = files.S3Access(Session(("AK", "SK", None)), "http://127.0.0.1:5000", "eu-west-1", "connection lake")
    assert access.client().meta.endpoint_url == "http://127.0.0.1:5000" and access.client() is access.client()


def catalog_properties_with(access: files.S3Access, configured: dict[str, str]) -> dict[str, str]:
    with files.reaching_s3(access):
        return {**iceberg_table._file_io_defaults(configured), **configured}


def test_the_catalogs_file_io_gets_what_its_own_properties_leave_unsaid_and_never_one_keys_secret_with_anothers_token() -> None:
    access = files.S3Access(Session(("AK", "SK", "TOKEN")), "http://127.0.0.1:5000", "eu-west-1", "connection lake")

    unsaid = catalog_properties_with(access, {"type": "glue"})
    assert unsaid == {
        "type": "glue", "s3.endpoint": "http://127.0.0.1:5000", "s3.region": "eu-west-1",
        "s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.session-token": "TOKEN",
    }  # fmt: skip
    own_keys = {"type": "glue", "s3.access-key-id": "MINE", "s3.secret-access-key": "MYSECRET", "s3.endpoint": "https://minio:9000"}
    assert catalog_properties_with(access, own_keys) == {**own_keys, "s3.region": "eu-west-1"}
    assert catalog_properties_with(files.S3Access(), {"type": "glue"}) == {"type": "glue"}  # the default chain adds nothing


def test_a_pipeline_on_s3_reaches_it_through_its_own_connection_and_one_on_local_disk_through_the_default_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    import kinesis_replay_tasks as tasks

    connection = {"conn_type": "aws", "login": "AK", "password": "SK"}
    connection["extra"] = {"region_name": "eu-west-1", "service_config": {"s3": {"endpoint_url": "http://minio:9000"}}}  # type: ignore[assignment]
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps(connection))
    base = {"stream": "s", "schedule": None, "state_table": "t", "aws_conn_id": "lake", "output_format": "directory",
            "initial_position": "TRIM_HORIZON", "spark": {"master": "local[1]"}}  # fmt: skip
    local, on_s3 = parse_config(
        {"pipelines": [{**base, "name": "local", "output": "/data/local"}, {**base, "name": "on_s3", "output": "s3a://lake/raw"}]}
    )

    assert tasks.s3_access(local) == files.S3Access()
    access = tasks.s3_access(on_s3)
    assert (access.endpoint_url, access.region, access.source) == ("http://minio:9000", "eu-west-1", "connection lake")
    assert access.iceberg_properties()["s3.access-key-id"] == "AK"
