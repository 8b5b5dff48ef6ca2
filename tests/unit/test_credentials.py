"""The replay job's credentials for each setup of the connection; the role's profile as botocore itself reads it."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from kinesis_replay.launchers import credentials
from kinesis_replay.launchers.credentials import BaseCredentials, Connection, Keys, Role

ROLE = Role("arn:aws:iam::123456789012:role/replay", kwargs={"DurationSeconds": 905}, sts_endpoint_url="http://127.0.0.1:5000")
KEYS = Keys("AKIDBASE", "base-secret")
SESSION = "kinesis-replay-orders-7"
CREDENTIAL_VARS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}


def never_frozen() -> Keys:
    raise AssertionError("the connection's credentials were frozen")


def job_env(tmp_path: Path, given: credentials.JobCredentials) -> dict[str, str]:
    """The job's environment as spark-submit gets it, from a worker whose own environment holds keys."""
    import os

    from kinesis_replay.launchers import spark_submit

    worker = {"AWS_ACCESS_KEY_ID": "AKIDWORKER", "AWS_SECRET_ACCESS_KEY": "worker-secret", "AWS_SESSION_TOKEN": "worker-token"}
    saved = {k: os.environ.get(k) for k in worker}
    os.environ.update(worker)
    try:
        return spark_submit.submit_env("local[2]", given.write(tmp_path))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def botocore_session(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A botocore session in the job's environment, as the job's boto3 clients create theirs."""
    import botocore.session

    for key in [k for k in env if k.startswith("AWS_")]:
        monkeypatch.setenv(key, env[key])
    for key in CREDENTIAL_VARS - set(env):
        monkeypatch.delenv(key, raising=False)
    return botocore.session.get_session()


def test_a_role_connection_gives_the_job_a_profile_that_assumes_the_role_and_renews_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.credentials import DeferredRefreshableCredentials

    given = credentials.for_job(Connection(ROLE, KEYS, region="eu-west-1"), SESSION, None, never_frozen)
    assert given.renews and given.warning is None
    env = job_env(tmp_path, given)
    assert not CREDENTIAL_VARS & set(env)  # neither frozen keys nor the worker's own: they would win over the profile
    assert env["AWS_PROFILE"] == credentials.PROFILE and env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert stat.S_IMODE(Path(env["AWS_CONFIG_FILE"]).stat().st_mode) == 0o600  # it holds the base keys

    session = botocore_session(env, monkeypatch)
    profiles = session.full_config["profiles"]
    assert profiles[credentials.PROFILE] == {
        "role_arn": ROLE.arn, "source_profile": credentials.SOURCE_PROFILE, "role_session_name": SESSION,
        "duration_seconds": "905", "region": "eu-west-1", "services": credentials.PROFILE,
    }  # fmt: skip
    assert profiles[credentials.SOURCE_PROFILE] == {"aws_access_key_id": "AKIDBASE", "aws_secret_access_key": "base-secret"}
    assert session.get_scoped_config()["region"] == "eu-west-1"
    found = session.get_credentials()  # nothing is called yet: the first request assumes the role
    assert isinstance(found, DeferredRefreshableCredentials) and found.method == "assume-role"
    assert session.full_config["services"][credentials.PROFILE] == {"sts": {"endpoint_url": ROLE.sts_endpoint_url}}


def test_temporary_base_keys_beneath_a_role_are_named_in_a_warning() -> None:
    given = credentials.for_job(Connection(ROLE, Keys("ASIABASE", "s", "base-token")), SESSION, None, never_frozen)
    assert given.renews and given.config is not None and "aws_session_token = base-token\n" in given.config
    assert given.warning is not None and "only as long as they last" in given.warning


def test_the_roles_session_name_and_external_id_come_from_assume_role_kwargs() -> None:
    role = Role(ROLE.arn, kwargs={"RoleSessionName": "etl", "ExternalId": "x-1"})
    config = credentials.profile_config(role, KEYS, SESSION, None)
    assert "role_session_name = etl\n" in config and "external_id = x-1\n" in config and "[services" not in config


@pytest.mark.parametrize(
    ("method", "source"), [("iam-role", "Ec2InstanceMetadata"), ("container-role", "EcsContainer")]
)  # fmt: skip
def test_a_role_without_keys_is_assumed_from_the_workers_renewing_source(method: str, source: str) -> None:
    base = BaseCredentials(method, refreshable=True, keys=Keys("ASIAWORKER", "s", "t"))
    given = credentials.for_job(Connection(ROLE), SESSION, base, never_frozen)
    assert given.renews and given.config is not None
    assert f"credential_source = {source}\n" in given.config and "aws_access_key_id" not in given.config


def test_a_role_without_keys_is_assumed_from_the_workers_static_keys() -> None:
    base = BaseCredentials("env", refreshable=False, keys=Keys("AKIDWORKER", "worker-secret"))
    given = credentials.for_job(Connection(ROLE), SESSION, base, never_frozen)
    assert given.config is not None and "aws_access_key_id = AKIDWORKER\n" in given.config


@pytest.mark.parametrize(
    ("connection", "base", "reason"),
    [
        (Connection(Role(ROLE.arn, kwargs={"Policy": "{}"}), KEYS), None, "assume_role_kwargs Policy have no botocore profile form"),
        (Connection(Role(ROLE.arn, method="assume_role_with_saml"), KEYS), None, "assume_role_method assume_role_with_saml"),
        (Connection(ROLE, profile_name="ops"), None, "profile ops"),
        (Connection(ROLE), BaseCredentials("sso", True, KEYS), "come from sso"),
    ],
)
def test_a_role_the_job_cannot_assume_itself_gets_its_credentials_once_and_says_so(
    connection: Connection, base: BaseCredentials | None, reason: str
) -> None:
    frozen = Keys("ASIAROLE", "role-secret", "role-token")
    given = credentials.for_job(connection, SESSION, base, lambda: frozen)
    assert not given.renews and given.config is None
    assert given.env["AWS_SESSION_TOKEN"] == "role-token"
    assert given.warning is not None and reason in given.warning and "fails if it runs longer than they last" in given.warning


def test_static_keys_are_passed_as_they_are_and_no_worker_token_goes_with_them(tmp_path: Path) -> None:
    given = credentials.for_job(Connection(keys=KEYS, region="us-east-1"), SESSION, None, never_frozen)
    assert given.warning is None and given.config is None
    env = job_env(tmp_path, given)
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("AKIDBASE", "base-secret")
    assert "AWS_SESSION_TOKEN" not in env and "AWS_CONFIG_FILE" not in given.write(tmp_path)


def test_a_session_token_without_a_role_is_passed_once_with_a_warning() -> None:
    given = credentials.for_job(Connection(keys=Keys("ASIATEMP", "s", "t")), SESSION, None, never_frozen)
    assert given.env["AWS_SESSION_TOKEN"] == "t" and not given.renews
    assert given.warning is not None and "give the connection a role_arn" in given.warning


def test_a_connection_without_keys_or_role_leaves_the_job_to_the_default_chain(tmp_path: Path) -> None:
    given = credentials.for_job(Connection(region="us-east-1"), SESSION, None, never_frozen)
    assert given.renews and given.env == {"AWS_DEFAULT_REGION": "us-east-1"}
    assert job_env(tmp_path, given)["AWS_ACCESS_KEY_ID"] == "AKIDWORKER"  # the worker's own source, renewed by the chain


def test_a_profile_connection_hands_the_job_that_profile(tmp_path: Path) -> None:
    env = job_env(tmp_path, credentials.for_job(Connection(profile_name="ops"), SESSION, None, never_frozen))
    assert env["AWS_PROFILE"] == "ops" and not CREDENTIAL_VARS & set(env)


def test_a_session_name_keeps_to_what_sts_accepts() -> None:
    assert credentials.session_name("orders", 7) == "kinesis-replay-orders-7"
    assert len(credentials.session_name("p" * 64, 10**9)) == 64


def test_a_config_value_that_would_break_the_file_is_refused_without_quoting_it() -> None:
    with pytest.raises(ValueError, match="aws_secret_access_key must be one line") as raised:
        credentials.profile_config(ROLE, Keys("AKID", "secret\n[profile x]"), SESSION, None)
    assert "secret" not in str(raised.value).replace("aws_secret_access_key", "")


# -- the stream's own connection (stream_conn_id): a profile only the job's Kinesis clients load ----------------------


def stream_client(tmp_path: Path, given: credentials.StreamCredentials, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The replay job's Kinesis client for a spec naming the stream's profile, in a job whose environment holds the
    pipeline connection's keys (which would win over any profile but an explicit one)."""
    from kinesis_replay.core.job_spec import KinesisEndpoint
    from kinesis_source import kinesis_client

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPIPELINE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "pipeline-secret")
    path = given.write(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it may hold keys
    return kinesis_client(KinesisEndpoint("eu-west-1", "http://127.0.0.1:9", credentials.STREAM_PROFILE, str(path)))


def test_a_stream_role_connection_gives_the_jobs_kinesis_clients_a_profile_of_their_own_that_assumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.credentials import DeferredRefreshableCredentials

    given = credentials.for_stream(Connection(ROLE, KEYS, region="eu-west-1"), SESSION, None, never_frozen)
    assert given.renews and given.warning is None and ROLE.arn in given.how
    client = stream_client(tmp_path, given, monkeypatch)
    found = client._request_signer._credentials
    assert isinstance(found, DeferredRefreshableCredentials) and found.method == "assume-role"  # not the environment's keys
    session_config = client.meta.config
    assert client.meta.region_name == "eu-west-1" and session_config.user_agent.startswith("kinesis-replay/")
    text = (tmp_path / credentials.STREAM_CONFIG_FILE).read_text()
    assert f"[profile {credentials.STREAM_PROFILE}]\nrole_arn = {ROLE.arn}\nsource_profile = {credentials.STREAM_SOURCE_PROFILE}" in text
    assert f"[profile {credentials.STREAM_SOURCE_PROFILE}]\naws_access_key_id = AKIDBASE" in text
    assert f"[services {credentials.STREAM_PROFILE}]\nsts =\n  endpoint_url = {ROLE.sts_endpoint_url}" in text


def test_a_stream_connection_with_keys_or_the_workers_chain_gives_those_keys_to_the_jobs_kinesis_clients_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = credentials.for_stream(Connection(keys=Keys("AKIDSTREAM", "stream-secret"), region="eu-west-1"), SESSION, None, never_frozen)
    assert given.warning is None and given.renews
    assert stream_client(tmp_path, given, monkeypatch)._request_signer._credentials.access_key == "AKIDSTREAM"
    chain = credentials.for_stream(Connection(), SESSION, None, lambda: Keys("ASIACHAIN", "s", "chain-token"))
    assert not chain.renews and "nothing that renews them" in (chain.warning or "")
    assert "aws_session_token = chain-token" in chain.config


def test_a_stream_role_the_job_cannot_assume_itself_gets_its_credentials_once_and_says_so() -> None:
    odd = Role("arn:aws:iam::210987654321:role/stream", kwargs={"Policy": "{}"})
    given = credentials.for_stream(Connection(odd, KEYS), SESSION, None, lambda: Keys("ASIAROLE", "s", "role-token"))
    assert not given.renews and "cannot assume the stream's role" in (given.warning or "") and "Policy" in (given.warning or "")
    assert "aws_access_key_id = ASIAROLE" in given.config and "role_arn" not in given.config


def test_a_spec_naming_a_stream_profile_file_this_machine_lacks_fails_naming_it(tmp_path: Path) -> None:
    from kinesis_replay.core.job_spec import KinesisEndpoint
    from kinesis_source import kinesis_client

    missing = tmp_path / "nowhere" / credentials.STREAM_CONFIG_FILE
    with pytest.raises(FileNotFoundError, match=f"profile {credentials.STREAM_PROFILE} of {missing}, which is not on this machine"):
        kinesis_client(KinesisEndpoint("eu-west-1", None, credentials.STREAM_PROFILE, str(missing)))
