"""The owner record's one write: a pipeline's claim of its output root (read with adapters.output_root)."""

from __future__ import annotations

import os

from kinesis_replay.adapters.files import json_bytes, put_if_absent_on_s3, write_json
from kinesis_replay.adapters.layout import owner_path
from kinesis_replay.adapters.output_root import read_owner
from kinesis_replay.core.errors import OutputIOError
from kinesis_replay.core.formats import is_s3
from kinesis_replay.core.output_root import Owner


def write_owner(output: str, owner: Owner, replace: bool = False) -> Owner:
    """Claim the root for ``owner`` and return whoever holds it afterwards (read back only when this claim did not win outright).

    The first claim wins outright, wherever two pipelines claim one new root at the same instant: on local disk the
    file is created exclusively, on S3 by a conditional PUT (``If-None-Match: *``, which S3 refuses when the key
    exists). Any other file system gets a PUT after a read: there the later of two simultaneous claims wins, each
    then sees the winner, and the loser stops at its next check. ``replace`` overwrites (a recovery's adoption).
    """
    path = owner_path(output)
    if replace:
        write_json(path, owner.to_dict())
    elif "://" not in path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(json_bytes(owner.to_dict()))
            return owner  # created exclusively: this claim won, and nothing need be read back
    elif is_s3(path):
        if put_if_absent_on_s3(path, json_bytes(owner.to_dict()), f"pipeline {owner.pipeline_name!r}"):
            return owner
    elif read_owner(output) is None:
        write_json(path, owner.to_dict())
    found = read_owner(output)  # whoever won (or, after an overwrite, whoever wrote last)
    if found is None:
        raise OutputIOError(f"the owner record {path} vanished right after it was written; the task is retried")
    return found
