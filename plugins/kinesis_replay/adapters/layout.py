"""Where a batch's output, result, quarantine, commit record and the owner record live under an output root."""

from __future__ import annotations

# The names of the root's own records (results, commit records, the owner record) are declared in the core, whose
# messages name them too; they are layout's names as well (layout.COMMITS_DIR).
from kinesis_replay.core.formats import COMMITS_DIR as COMMITS_DIR
from kinesis_replay.core.formats import OWNER_FILE as OWNER_FILE
from kinesis_replay.core.formats import RESULTS_DIR as RESULTS_DIR
from kinesis_replay.core.formats import path_batch_id

# A directory output's records that could not be decoded, with the reason, per batch; also where a table output of a
# release before the quarantine table kept them (read until the batch is replayed again, which moves them into it).
QUARANTINE_DIR = "_quarantine"
# A table output's quarantine table's location: its own data/ and metadata/ folders under the output root.
QUARANTINE_TABLE_DIR = "quarantine"
STAGING_DIR = "_staging"  # where the replay job writes a batch before swapping it into place
# A table output's data files (Iceberg's own layout under the table location, which is the output root): one folder per
# attempt of a batch, so that a replay never overwrites a file a snapshot references. Not for reading directly.
DATA_DIR = "data"


def batch_path(output: str, batch_id: int) -> str:
    """The only directory a batch's rows are written to; a rewrite of the batch replaces all of it."""
    return f"{output.rstrip('/')}/batch_id={path_batch_id(batch_id)}"


def data_path(output: str, batch_id: int, attempt: str) -> str:
    """Where one attempt of a batch writes its table files: ``<output>/data/batch_id=<id>/attempt=<attempt>``.

    A batch's rows are deterministic; its files are per attempt, and the table's snapshot says which attempt is live.
    """
    return f"{batch_data_path(output, batch_id)}/attempt={attempt}"


def batch_data_path(output: str, batch_id: int) -> str:
    """The folder of a batch's attempts under a table output's data: ``<output>/data/batch_id=<id>``."""
    return batch_path(f"{output.rstrip('/')}/{DATA_DIR}", batch_id)


def quarantine_path(output: str, batch_id: int) -> str:
    """The batch's quarantine partition: rows whose payload could not be decoded, with ``decode_error`` set."""
    return f"{output.rstrip('/')}/{QUARANTINE_DIR}/batch_id={path_batch_id(batch_id)}"


def quarantine_table_path(output: str) -> str:
    """The quarantine table's location: ``<output>/quarantine`` (its data files under ``data/``, metadata ``metadata/``)."""
    return f"{output.rstrip('/')}/{QUARANTINE_TABLE_DIR}"


def quarantine_data_path(output: str, batch_id: int, attempt: str) -> str:
    """Where one attempt of a batch writes its quarantined records, for the quarantine table's commit:
    ``<output>/quarantine/data/batch_id=<id>/attempt=<attempt>``. Not visible until that commit."""
    return data_path(quarantine_table_path(output), batch_id, attempt)


def staging_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{STAGING_DIR}/batch_id={path_batch_id(batch_id)}"


def staged_path(output: str, batch_id: int, attempt: str) -> str:
    """Where one attempt of a batch stages what replaces the batch's folders (``data/`` for a directory output's rows,
    ``quarantine/``), until they are verified and swapped in: ``<output>/_staging/batch_id=<id>/attempt=<attempt>``."""
    return f"{staging_path(output, batch_id)}/attempt={attempt}"


def staged_data_path(output: str, batch_id: int, attempt: str) -> str:
    """A directory output's rows of one attempt, staged: they replace ``batch_path`` once verified."""
    return f"{staged_path(output, batch_id, attempt)}/data"


def staged_quarantine_path(output: str, batch_id: int, attempt: str) -> str:
    """The quarantined rows of one attempt, staged: they replace ``quarantine_path`` once verified."""
    return f"{staged_path(output, batch_id, attempt)}/quarantine"


def swap_record_path(output: str, batch_id: int) -> str:
    """The record of a swap of staged folders into the batch's own, written once they are verified and removed once
    the swap is done: a swap cut short is finished from it (files.finish_swap)."""
    return f"{staging_path(output, batch_id)}/swap.json"


def result_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{RESULTS_DIR}/batch_id={path_batch_id(batch_id)}.json"


def commit_record_path(output: str, batch_id: int) -> str:
    return f"{output.rstrip('/')}/{COMMITS_DIR}/batch_id={path_batch_id(batch_id)}.json"


def owner_path(output: str) -> str:
    return f"{output.rstrip('/')}/{OWNER_FILE}"
