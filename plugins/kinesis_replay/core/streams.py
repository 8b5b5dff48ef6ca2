"""A pipeline's stream as its config names it: a stream name, or a stream ARN (which may be of another account).

With a name, Kinesis finds the stream in the account and region of the caller's credentials. With an ARN, the ARN says
both, and every Kinesis call addresses the stream by ``StreamARN`` (``address``): that is the only way to reach a stream
in another account, through a role of that account or through a resource policy on the stream. botocore's endpoint
rules check an ARN's partition against the client's, not its region, so a client of another region would send the call
to the wrong region's endpoint: ``check_region`` refuses that first, naming both regions.

Standard library only: the config reader, the job spec and the Kinesis adapters all use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A stream's name, as Kinesis allows it.
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
PARTITION = re.compile(r"^aws(-[a-z]+)*$")  # aws, aws-cn, aws-us-gov, aws-iso-b...
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")  # us-east-1, us-gov-west-1, cn-north-1...
ACCOUNT = re.compile(r"^\d{12}$")
ARN_FORM = "arn:<partition>:kinesis:<region>:<account>:stream/<name>"


@dataclass(frozen=True)
class StreamArn:
    """The parts of a Kinesis data stream's ARN."""

    partition: str
    region: str
    account: str
    name: str

    @property
    def arn(self) -> str:
        return f"arn:{self.partition}:kinesis:{self.region}:{self.account}:stream/{self.name}"


def is_arn(stream: str) -> bool:
    """Whether ``stream`` is given as an ARN (else it is a name: no name may hold ':')."""
    return stream.startswith("arn:")


def parse_arn(value: str) -> StreamArn:
    """The parts of a Kinesis stream ARN; a ValueError naming the part that is wrong, and the form it must have."""
    parts = value.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        raise ValueError(f"{value!r} is not an ARN: a stream ARN has six ':'-separated parts, {ARN_FORM}")
    _, partition, service, region, account, resource = parts

    def wrong(what: str) -> ValueError:
        return ValueError(f"{value!r} is not a Kinesis stream ARN: {what} ({ARN_FORM})")

    if not PARTITION.match(partition):
        raise wrong(f"its partition {partition!r} is not an AWS partition such as aws, aws-cn or aws-us-gov")
    if service != "kinesis":
        raise wrong(f"its service is {service!r}, not kinesis")
    if not region:
        raise wrong("it names no region")
    if not REGION.match(region):
        raise wrong(f"its region {region!r} is not a region name such as us-east-1")
    if not ACCOUNT.match(account):
        raise wrong(f"its account {account!r} is not a 12-digit account id")
    kind, _, name = resource.partition("/")
    if kind != "stream" or "/consumer/" in resource:
        what = "a stream consumer's" if "/consumer/" in resource else f"a {kind!r} resource's"
        raise wrong(f"it is {what} ARN, not a data stream's (stream/<name>)")
    if not NAME.match(name):
        raise wrong(f"its stream name {name!r} is not 1 to 128 letters, digits, '_', '.' and '-'")
    return StreamArn(partition, region, account, name)


def check_stream(value: str) -> str:
    """The config's ``stream``: a stream name or a stream ARN, as given; a ValueError saying what is wrong."""
    if is_arn(value):
        parse_arn(value)
        return value
    if not NAME.match(value):
        raise ValueError(
            f"{value!r} is neither a Kinesis stream name (1 to 128 letters, digits, '_', '.' and '-') nor a stream ARN ({ARN_FORM})"
        )
    return value


def stream_arn(stream: str) -> StreamArn | None:
    """The stream's ARN, if it is given as one (None for a name)."""
    return parse_arn(stream) if is_arn(stream) else None


def stream_name(stream: str) -> str:
    """The stream's name, whether it is given by name or by ARN."""
    arn = stream_arn(stream)
    return stream if arn is None else arn.name


def consumer_stream_refusal(consumer: str, stream: str) -> str | None:
    """Why a consumer's ARN is not of ``stream`` (a name or an ARN), or None: a consumer's ARN is its stream's ARN, then
    ``/consumer/<name>:<created>``. Against a stream given by name only the names are compared (its account and region
    are the connection's); against an ARN the whole stream ARN, account and region with it."""
    if not consumer.startswith("arn:") or "/consumer/" not in consumer:
        return None
    owner_arn = consumer.split("/consumer/", 1)[0]
    owner = owner_arn.split(":", 5)[-1].removeprefix("stream/")
    if is_arn(stream):
        return None if owner_arn == stream else f"is a consumer of stream {owner_arn}, not of the pipeline's stream {stream}"
    return None if owner == stream else f"is a consumer of stream {owner!r}, not of the pipeline's stream {stream!r}"


def address(stream: str) -> dict[str, Any]:
    """The parameter each Kinesis call names the stream by: ``StreamARN`` for an ARN, else ``StreamName``."""
    return {"StreamARN": stream} if is_arn(stream) else {"StreamName": stream}


def check_region(stream: str, region: str | None, connection: str) -> str | None:
    """The region the stream's Kinesis client must use: the ARN's, which a region the connection names must equal.

    None for a stream given by name (the connection's region, or the default chain's, as ever). For an ARN, the
    connection may name no region (the ARN's is used) or the ARN's; any other is a ValueError naming both regions and
    ``connection``: botocore would check only the ARN's partition and send the calls to the connection's region.
    """
    arn = stream_arn(stream)
    if arn is None:
        return None
    if region and region != arn.region:
        raise ValueError(
            f"stream {stream} is in region {arn.region}, and {connection} names region {region}: a Kinesis client reaches "
            f"only its own region's streams. Set the connection's region_name to {arn.region} (or leave it out), or name a "
            "stream of that region"
        )
    return arn.region
