"""Output roots: where a pipeline may write, one spelling per root, and which roots overlap."""

from __future__ import annotations

import posixpath
import re

from kinesis_replay.core.errors import ConfigError
from kinesis_replay.core.formats import s3_uri

# Roots no pipeline may own: the file system's root, and the system's own folders (or anything under the ones
# marked True). A pipeline's output root is replaced batch by batch and carries an owner record.
_FORBIDDEN_ROOTS = {
    "/": False, "/bin": True, "/boot": True, "/dev": True, "/etc": True, "/lib": True, "/lib64": True, "/proc": True,
    "/sbin": True, "/sys": True, "/usr": True, "/run": True, "/home": False, "/root": False, "/tmp": False, "/var": False,
    "/opt": False, "/mnt": False, "/srv": False,
}  # fmt: skip
_URI = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<authority>[^/]*)(?P<path>/.*)?$", re.IGNORECASE)


def normalize_output(value: str) -> str:
    """An output root in one spelling: ``.``, ``..``, doubled and trailing slashes resolved, ``file://`` dropped.

    Raises ValueError, with the reason, for a root no pipeline should own: a relative path, ``/``, a system
    folder, a bucket with no prefix.
    """
    text = value.strip()
    if text.lower().startswith("file:"):
        # file:///x (a URI) and file:/x (Hadoop's spelling) are the local path /x; file://host/x is another machine's.
        rest = text[len("file:") :]
        if rest.startswith("//") and not rest.startswith("///"):
            raise ValueError(f"{value!r} names a file on another host; give a local path such as /data/lake/orders")
        text = "/" + rest.lstrip("/")
    match = _URI.match(text)
    if match:
        path = posixpath.normpath(match["path"] or "/")
        path = "/" + path.lstrip("/")
        if not match["authority"]:
            raise ValueError(f"{value!r} has no bucket or host after {match['scheme']}://")
        if path == "/":
            raise ValueError(
                f"{value!r} is a whole bucket; give a prefix of its own, such as {match['scheme']}://{match['authority']}/orders"
            )
        return f"{match['scheme'].lower()}://{match['authority']}{path}"
    if "://" in text:
        raise ValueError(f"{value!r} is not a URI (scheme://bucket/prefix) nor an absolute path")
    if not text.startswith("/"):
        raise ValueError(f"{value!r} is relative: it would land wherever the worker happens to run; give an absolute path")
    path = "/" + posixpath.normpath(text).lstrip("/")
    for root, below in _FORBIDDEN_ROOTS.items():
        if path == root or (below and path.startswith(root + "/")):
            raise ValueError(f"{value!r} is {'the file system root' if path == '/' else 'a system folder'}; no pipeline may own it")
    return path


def output_key(output: str) -> str:
    """What two outputs are compared by: the normalized root, with S3's Hadoop schemes as s3."""
    match = _URI.match(output)
    if not match:
        return output
    return s3_uri(f"{match['scheme'].lower()}://{match['authority']}{match['path']}")


def outputs_overlap(a: str, b: str) -> bool:
    """The same root, or one inside the other (each pipeline replaces what is under its own root)."""
    ka, kb = output_key(a), output_key(b)
    return ka == kb or ka.startswith(kb + "/") or kb.startswith(ka + "/")


def split_s3_uri(uri: str, what: str = "S3 URI") -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``; anything else is a ConfigError naming ``what``."""
    if not uri.startswith("s3://"):
        raise ConfigError(f"{what} must start with s3:// (EMR Serverless reads its code from S3), got {uri!r}")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise ConfigError(f"{what} names no bucket: {uri!r}")
    return bucket, prefix.strip("/")
