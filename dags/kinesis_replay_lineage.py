"""OpenLineage for the tasks that commit batches (regular, backfill, restore, re-decode): docs/lineage.md.

Not a DAG file (see .airflowignore). A commit task calls ``attach`` with what it committed: that gives the running
operator ``get_openlineage_facets_on_complete``, the method the OpenLineage provider's listener calls (its
DefaultExtractor) to put inputs, outputs and run facets into the task run's COMPLETE event. Without the provider, or
with it disabled (``[openlineage] disabled``, or no transport), no listener calls it: nothing is imported and nothing
is looked up. The mapping itself is kinesis_replay.core.lineage (pure); the OpenLineage client's classes appear only
in ``to_openlineage``, imported when the provider calls. A failure here is logged and the event goes out without
the batch's datasets: the commit has succeeded, and stays so.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import kinesis_replay_tasks as tasks
from kinesis_replay.adapters.kinesis_client import seen_stream_arn
from kinesis_replay.core import lineage
from kinesis_replay.core.config import PipelineConfig
from kinesis_replay.core.streams import address

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

log = logging.getLogger(__name__)
OL_METHOD = "get_openlineage_facets_on_complete"  # the provider's name for it (extractors.base.OL_METHOD_NAME_COMPLETE)


def attach(
    context: Mapping[str, Any], pipeline: PipelineConfig, committed: Mapping[str, Any] | list[Any], stream_arn: str | None = None
) -> None:
    """Let the provider ask the running task for the lineage of what it committed (one batch's figures, or several);
    ``stream_arn`` as an earlier task found it (the plan's), else as this task's stream check did, else looked up."""
    figures = list(committed) if isinstance(committed, list) else [committed]
    # A re-decode's or rebuild's staged batch is not the table's yet: its lineage comes with the commit task's event.
    figures = [f for f in figures if f.get("kind") != "staged"]
    if figures:
        setattr(context["task"], OL_METHOD, functools.partial(facets_on_complete, pipeline, figures, known_arn=stream_arn))


def facets_on_complete(
    pipeline: PipelineConfig, figures: list[Mapping[str, Any]], task_instance: Any = None, known_arn: str | None = None
) -> OperatorLineage[Any, Any] | None:
    """The provider's call once the task succeeded: the batch's lineage, or None (logged) when it cannot be built."""
    try:
        return to_openlineage(describe(pipeline, figures, known_arn))
    except Exception as exc:  # never the commit's failure: it is done
        batches = ", ".join(str(f.get("batch_id")) for f in figures)
        log.warning(
            "pipeline %s: batch %s is committed; its OpenLineage inputs, outputs and facets were left out of the event: %s",
            pipeline.name, batches, exc, exc_info=True,
        )  # fmt: skip
        return None


def describe(pipeline: PipelineConfig, figures: list[Mapping[str, Any]], known_arn: str | None = None) -> lineage.BatchLineage:
    """The lineage of the batches: the stream's ARN (known, or one DescribeStreamSummary call, once per process) and the
    figures."""
    return lineage.batch_lineage(pipeline, figures, known_arn or stream_arn(pipeline))


_ARNS: dict[tuple[str, str], str] = {}  # (connection, stream) -> the stream's ARN, looked up once per process


def stream_arn(pipeline: PipelineConfig) -> str:
    """The stream's ARN: as this process's stream check saw it (a backfill's, a restore's), else looked up once."""
    key = (pipeline.kinesis_conn_id, pipeline.stream)
    seen = seen_stream_arn(pipeline.stream)
    if seen is not None:
        return seen
    if key not in _ARNS:
        summary = tasks.kinesis_client(pipeline).describe_stream_summary(**address(pipeline.stream))["StreamDescriptionSummary"]
        _ARNS[key] = str(summary["StreamARN"])
    return _ARNS[key]


def to_openlineage(found: lineage.BatchLineage) -> OperatorLineage[Any, Any]:
    """The OpenLineage client's datasets and facets for a batch's lineage (imported here: only the provider calls this)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        catalog_dataset,
        dataset_version_dataset,
        output_statistics_output_dataset,
        symlinks_dataset,
    )

    outputs = []
    for out in found.outputs:
        facets: dict[str, Any] = {}
        if out.snapshot_id is not None:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(out.snapshot_id))
        if out.catalog is not None:
            c = out.catalog
            facets["catalog"] = catalog_dataset.CatalogDatasetFacet(framework=c["framework"], type=c["type"], name=c["name"])
        if out.location is not None:
            facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
                identifiers=[symlinks_dataset.Identifier(namespace=out.location.namespace, name=out.location.name, type="LOCATION")]
            )
        stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=out.rows, size=out.bytes)
        name = out.dataset
        outputs.append(OutputDataset(namespace=name.namespace, name=name.name, facets=facets, outputFacets={"outputStatistics": stats}))
    inputs = [InputDataset(namespace=d.namespace, name=d.name) for d in found.inputs]
    run_facets = {lineage.BATCH_FACET: _batch_facet_type()(**lineage.run_facet(found))}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


@functools.cache
def _batch_facet_type() -> Any:
    """The custom run facet's class (docs/lineage/KinesisReplayBatchRunFacet.json), made once the client is imported: each
    field of lineage.BATCH_FACET_KEYS (a re-decode's ``batches``) optional, those left None left out of the event."""
    import attr
    from openlineage.client.facet_v2 import RunFacet

    optional = {key: attr.field(default=None) for key in (*lineage.BATCH_FACET_KEYS, "batches")}
    facet: Any = attr.make_class("KinesisReplayBatchRunFacet", optional, bases=(RunFacet,))
    facet._get_schema = staticmethod(lambda: lineage.BATCH_FACET_SCHEMA)
    return functools.partial(facet, producer=lineage.PRODUCER)
