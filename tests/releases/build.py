"""Run an earlier release's DAGs, as its users ran them, to leave its outputs and state table for the upgrade suite.

Run by tests/integration/test_upgrades.py in a process of its own, with the earlier release's source unpacked from
``tests/releases/<version>/source.tar.gz`` first on the path (its ``plugins``, ``dags``, ``spark_jobs`` and
``tests/stack/harness.py``), against the test session's local stack and Airflow database:

    python tests/releases/build.py SOURCE_DIR STEPS_JSON RESULT_JSON

STEPS_JSON holds the pipelines config (``entries``) and the ``steps``, in order, each one of
``{"produce": {"stream": ..., "records": [[partition_key, base64 data], ...]}}`` (PutRecords, one record a call so that
each record's sequence number is its own answer) or ``{"run": {"dag": ..., "tasks": [...] | null, "conf": {...}}}``
(one ``dag.test()`` run of the release's own DAG, or of the named tasks and their upstream ones). RESULT_JSON gets
what each step did: the records' shards and sequence numbers, each run's task states.

This file uses nothing of the current code: only boto3, and ``load_dags`` / ``run_dag`` of the release's own harness,
which every release so far has had. A release whose harness differs brings a builder of its own.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    source, steps_file, result_file = (Path(a) for a in argv)
    for folder in ("plugins", "dags", "spark_jobs", "tests"):
        sys.path.insert(0, str(source / folder))
    import boto3

    from stack.harness import load_dags, run_dag  # the release's own harness

    spec = json.loads(steps_file.read_text())
    dags = load_dags(steps_file.with_suffix(".yaml"), *spec["entries"])
    kinesis = boto3.client("kinesis")
    results: list[Any] = []
    for step in spec["steps"]:
        if "produce" in step:
            produce = step["produce"]
            acknowledged = []
            for key, data in produce["records"]:
                answer = kinesis.put_record(StreamName=produce["stream"], PartitionKey=key, Data=base64.b64decode(data))
                acknowledged.append([answer["ShardId"], answer["SequenceNumber"], key, data])
            results.append({"produced": acknowledged})
        else:
            run = step["run"]
            dag = dags[run["dag"]]
            if run.get("tasks"):
                dag = dag.partial_subset(task_ids=run["tasks"], include_upstream=True)
            result = run_dag(dag, run_conf=run.get("conf") or None)
            results.append({"state": result.state, "tasks": result.tasks, "run_id": result.run_id})
    result_file.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
