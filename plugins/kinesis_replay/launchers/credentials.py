"""How the replay job gets AWS credentials that last as long as it runs: a botocore profile that assumes the connection's role.

Temporary credentials from an assumed role last an hour by default. Handed to spark-submit once, they
expire under a longer job, and its retry gets the same short-lived kind. So when the pipeline's connection
names a role, the job does not get the role's credentials: it gets an AWS config file whose profile
assumes the role itself (``role_arn`` with ``source_profile`` or ``credential_source``). botocore's
AssumeRoleProvider gives such a profile refreshable credentials: it calls AssumeRole again 15 minutes
before they expire (10 minutes before, it blocks until it has new ones), in every boto3 session the job
opens. The connection's other setups need nothing of the kind:

- static keys (login and password, no session token): passed as they are, as before; they do not expire.
- no keys and no role (instance profile, ECS task role, IRSA, the worker's environment): nothing is passed;
  the job's default chain finds the same source and refreshes it.
- a profile name: the job uses that profile, as the hook does.
- a session token and no role: passed once, with a warning: nothing can renew them.

A pipeline whose stream has a connection of its own (``stream_conn_id``: a role of the stream's account, say) gets a
second config file, with one profile (STREAM_PROFILE) that only the job's Kinesis clients use (``for_stream``): the
spec names the profile and the file, so every other client of the job keeps the pipeline connection's credentials.

Standard library only: the task reads the connection through its hook and hands plain values here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The job's profile in its own config file, and the profile holding its base keys.
PROFILE = "kinesis-replay"
SOURCE_PROFILE = "kinesis-replay-source"
CONFIG_FILE = "aws_config"
CREDENTIALS_FILE = "aws_credentials"  # empty: a user's shared credentials file never mixes into the job's profiles
# The stream connection's profile, in a config file of its own that only the job's Kinesis clients load.
STREAM_PROFILE = "kinesis-replay-stream"
STREAM_SOURCE_PROFILE = "kinesis-replay-stream-source"
STREAM_CONFIG_FILE = "aws_config_stream"
# The credential variables of the environment: they would win over AWS_PROFILE in botocore's chain.
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE")
# The AssumeRole arguments (the connection's assume_role_kwargs) that a botocore profile can carry.
PROFILE_KEYS = {"RoleSessionName": "role_session_name", "DurationSeconds": "duration_seconds", "ExternalId": "external_id"}
# botocore's credential_source names, by the method botocore reports for credentials it found that way.
CREDENTIAL_SOURCES = {"container-role": "EcsContainer", "iam-role": "Ec2InstanceMetadata"}
_SESSION_NAME = re.compile(r"[^\w+=,.@-]")  # what STS accepts in a role session name


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Role:
    """The connection's role (its extra's role_arn, assume_role_method and assume_role_kwargs)."""

    arn: str
    method: str = "assume_role"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    sts_endpoint_url: str | None = None  # the connection's service_config sts endpoint, as the hook uses to assume it


@dataclass(frozen=True)
class BaseCredentials:
    """What the worker's default chain found, for a role connection without keys of its own."""

    method: str  # botocore's name for where they came from: env, iam-role, container-role, ...
    refreshable: bool
    keys: Keys


@dataclass(frozen=True)
class Connection:
    """What the pipeline's AWS connection says about credentials, in plain values."""

    role: Role | None = None
    keys: Keys | None = None
    profile_name: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class JobCredentials:
    """What the job's environment gets: variables to set (None: to remove), and the AWS config file to write, if any."""

    how: str  # for the task log: where the job's credentials come from
    env: Mapping[str, str | None] = field(default_factory=dict, repr=False)
    config: str | None = field(default=None, repr=False)
    warning: str | None = None
    renews: bool = False

    def write(self, work: Path) -> dict[str, str | None]:
        """Write the config file (if any) into ``work``, readable by its owner only; the variables that point to it."""
        env = dict(self.env)
        if self.config is not None:
            config, credentials = work / CONFIG_FILE, work / CREDENTIALS_FILE
            for path, text in ((config, self.config), (credentials, "")):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
            env.update({"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_PROFILE": PROFILE})
        return env


def session_name(pipeline_name: str, batch_id: int) -> str:
    """A role session name that says which job assumed the role (CloudTrail shows it); STS allows 2 to 64 characters."""
    return _SESSION_NAME.sub("-", f"kinesis-replay-{pipeline_name}-{batch_id}")[:64]


def for_job(connection: Connection, default_session_name: str, base: BaseCredentials | None, frozen: Callable[[], Keys]) -> JobCredentials:
    """The job's credentials for this connection.

    ``base`` is what the worker's default chain found (needed only for a role connection with no keys or profile of
    its own); ``frozen`` gives the connection's credentials as they are now, for the setups that cannot renew them.
    """
    region = {"AWS_DEFAULT_REGION": connection.region} if connection.region else {}
    if connection.role is None:
        return _without_role(connection, region)
    problem = _unsupported(connection.role)
    source, source_problem = _source(connection, base)
    problem = problem or source_problem
    if problem is not None or source is None:
        keys = frozen()
        return JobCredentials(
            "the role's credentials as they are now, once",
            {**_keys_env(keys), **region},
            warning=(
                f"the job cannot assume role {connection.role.arn} itself ({problem}): it gets the role's credentials "
                "as they are now, and fails if it runs longer than they last"
            ),
        )
    config = profile_config(connection.role, source, default_session_name, connection.region)
    how = f"a profile that assumes role {connection.role.arn} and renews its credentials"
    warning = None
    if isinstance(source, Keys) and source.token:
        warning = (
            f"the base credentials that assume role {connection.role.arn} are temporary (a session token): the job renews "
            "the role's credentials only as long as they last"
        )
    return JobCredentials(how, {**dict.fromkeys(CREDENTIAL_VARS), **region}, config, warning, renews=True)


def _without_role(connection: Connection, region: dict[str, str]) -> JobCredentials:
    if connection.keys is not None:
        keys = connection.keys
        warning = None
        if keys.token:
            warning = (
                "the connection holds temporary credentials (a session token) and nothing that renews them: the job fails "
                "if it runs longer than they last; give the connection a role_arn instead"
            )
        return JobCredentials("the connection's keys", {**_keys_env(keys), **region}, warning=warning)
    if connection.profile_name is not None:
        env = {**dict.fromkeys(CREDENTIAL_VARS), "AWS_PROFILE": connection.profile_name, **region}
        return JobCredentials(f"the connection's profile {connection.profile_name}", env, renews=True)
    return JobCredentials("the worker's default chain (environment, instance or container role, web identity)", region, renews=True)


def _unsupported(role: Role) -> str | None:
    if role.method != "assume_role":
        return f"assume_role_method {role.method} has no botocore profile form"
    extra = sorted(set(role.kwargs) - set(PROFILE_KEYS))
    if extra:
        return f"assume_role_kwargs {', '.join(extra)} have no botocore profile form"
    return None


def _source(connection: Connection, base: BaseCredentials | None) -> tuple[Keys | str | None, str | None]:
    """The role's base credentials: keys for a source profile, or a credential_source name."""
    if connection.keys is not None:
        return connection.keys, None
    if connection.profile_name is not None:
        return None, f"its base credentials come from profile {connection.profile_name}, outside the job's config file"
    if base is None:
        return None, "the worker has no base credentials to assume it with"
    if not base.refreshable:
        return base.keys, None
    if base.method in CREDENTIAL_SOURCES:
        return CREDENTIAL_SOURCES[base.method], None
    return None, f"its base credentials come from {base.method}, which a profile cannot name as its credential_source"


def profile_config(
    role: Role, source: Keys | str, default_session_name: str, region: str | None, name: str = PROFILE, source_name: str = SOURCE_PROFILE
) -> str:
    """The AWS config file: a profile ``name`` that assumes ``role`` from ``source`` (keys, or a credential_source name)."""
    profile: dict[str, object] = {"role_arn": role.arn}
    if isinstance(source, Keys):
        profile["source_profile"] = source_name
    else:
        profile["credential_source"] = source
    profile["role_session_name"] = default_session_name
    profile.update({PROFILE_KEYS[key]: value for key, value in role.kwargs.items()})
    if region:
        profile["region"] = region
    if role.sts_endpoint_url:
        profile["services"] = name
    sections = [_section(f"profile {name}", profile)]
    if isinstance(source, Keys):
        sections.append(_section(f"profile {source_name}", _keys_profile(source)))
    if role.sts_endpoint_url:
        # The STS endpoint for this profile's clients only (a local stack's); Kinesis keeps the one in the job spec.
        sections.append(f"[services {name}]\nsts =\n  endpoint_url = {_value('endpoint_url', role.sts_endpoint_url)}\n")
    return "\n".join(sections)


def _keys_profile(keys: Keys) -> dict[str, str]:
    values = {"aws_access_key_id": keys.access_key, "aws_secret_access_key": keys.secret_key, "aws_session_token": keys.token}
    return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class StreamCredentials:
    """The stream connection's credentials for the job's Kinesis clients: a config file holding STREAM_PROFILE."""

    how: str
    config: str = field(repr=False)
    warning: str | None = None
    renews: bool = False

    def write(self, work: Path) -> Path:
        """Write the config file into ``work``, readable by its owner only; its path, which the job spec names."""
        path = work / STREAM_CONFIG_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.config)
        return path


def for_stream(
    connection: Connection, default_session_name: str, base: BaseCredentials | None, frozen: Callable[[], Keys]
) -> StreamCredentials:
    """The job's Kinesis credentials when the stream has a connection of its own: STREAM_PROFILE, which assumes the
    connection's role and renews it (as ``for_job``'s profile does), or else holds the connection's keys as they are now.

    A connection with no role and no keys of its own (a profile, the worker's default chain) is read through its hook
    (``frozen``): a profile in the job's own file cannot name the worker's profiles or chain, and the job's default chain
    is the pipeline connection's.
    """
    region = {"region": connection.region} if connection.region else {}
    if connection.role is not None:
        role = connection.role
        source, source_problem = _source(connection, base)
        problem = _unsupported(role) or source_problem
        if problem is None and source is not None:
            config = profile_config(role, source, default_session_name, connection.region, STREAM_PROFILE, STREAM_SOURCE_PROFILE)
            warning = None
            if isinstance(source, Keys) and source.token:
                warning = (
                    f"the base credentials that assume the stream's role {role.arn} are temporary (a session token): the job "
                    "renews the role's credentials only as long as they last"
                )
            how = f"a profile that assumes the stream's role {role.arn} and renews its credentials"
            return StreamCredentials(how, config, warning, renews=True)
        keys, how = frozen(), f"the stream's role {role.arn}: its credentials as they are now, once"
        warning = (
            f"the job cannot assume the stream's role {role.arn} itself ({problem}): its Kinesis clients get the role's "
            "credentials as they are now, and fail if the job runs longer than they last"
        )
    elif connection.keys is not None:
        keys, how, warning = connection.keys, "the stream connection's keys", None
    else:
        keys, how, warning = frozen(), "the stream connection's credentials as they are now", None
    if warning is None and keys.token:
        warning = (
            "the stream's connection gives temporary credentials (a session token) and nothing that renews them: the job's "
            "Kinesis reads fail if it runs longer than they last; give that connection a role_arn instead"
        )
    config = _section(f"profile {STREAM_PROFILE}", {**_keys_profile(keys), **region})
    return StreamCredentials(how, config, warning, renews=not keys.token)


def _section(name: str, values: Mapping[str, object]) -> str:
    return f"[{name}]\n" + "".join(f"{key} = {_value(key, value)}\n" for key, value in values.items())


def _value(key: str, value: object) -> str:
    text = str(value)
    if "\n" in text or "\r" in text or text != text.strip() or not text:
        raise ValueError(f"AWS config value {key} must be one line with no surrounding spaces")  # never quoted: it may be a secret
    return text


def _keys_env(keys: Keys) -> dict[str, str | None]:
    return {"AWS_ACCESS_KEY_ID": keys.access_key, "AWS_SECRET_ACCESS_KEY": keys.secret_key, "AWS_SESSION_TOKEN": keys.token}
