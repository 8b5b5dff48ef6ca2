"""EMR Serverless at the request level, over HTTP: the DAG stages the batch on S3 and starts a job run (moto serves both).

moto records the job run and reports it finished without running anything. So the test plays EMR: it takes
the job run moto received, fetches the files it names from S3, and runs exactly that request with spark-submit
in local mode (the spec still read from its s3:// URI). The DAG's next run then verifies and commits the batch.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest

from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore
from kinesis_replay.core.job_spec import JobSpec
from kinesis_replay.launchers import spark_submit
from stack import local_stack
from stack.harness import check_exactly_once, load_dags, read_output, run_dag
from stack.producer import produce

ROOT = Path(__file__).resolve().parents[2]
ROLE = "arn:aws:iam::123456789012:role/kinesis-replay-emr"


@pytest.fixture
def emr_entry(entry: dict[str, Any], stack: local_stack.Stack) -> dict[str, Any]:
    emr = boto3.client("emr-serverless")
    application = emr.create_application(name=f"kr-{uuid.uuid4().hex[:8]}", releaseLabel="emr-7.5.0", type="SPARK")
    bucket = f"kr-code-{uuid.uuid4().hex[:8]}"
    local_stack.s3_client().create_bucket(Bucket=bucket)
    spark = {
        "conf": {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
        "emr_serverless": {
            "application_id": application["applicationId"],
            "execution_role_arn": ROLE,
            "code_prefix": f"s3://{bucket}/kinesis-replay",
            "poll_seconds": 1,
        },
    }
    return {**entry, "spark": spark}


def job_runs(application_id: str) -> list[dict[str, Any]]:
    emr = boto3.client("emr-serverless")
    listed = emr.list_job_runs(applicationId=application_id)["jobRuns"]
    return [emr.get_job_run(applicationId=application_id, jobRunId=run["id"])["jobRun"] for run in listed]


def s3_object(uri: str) -> bytes:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body: bytes = local_stack.s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def run_as_emr(job_run: dict[str, Any], work: Path) -> None:
    """Run the job run's request as EMR Serverless would: its entry point, py-files and conf, its arguments verbatim."""
    driver = job_run["jobDriver"]["sparkSubmit"]
    parameters = shlex.split(driver["sparkSubmitParameters"])
    local: dict[str, Path] = {}
    for uri in [driver["entryPoint"], *parameters[parameters.index("--py-files") + 1].split(",")]:
        local[uri] = work / uri.rsplit("/", 1)[1]
        local[uri].write_bytes(s3_object(uri))
    py_files = ",".join(str(local[uri]) for uri in parameters[parameters.index("--py-files") + 1].split(","))
    confs = [arg for i, arg in enumerate(parameters) if i > 0 and parameters[i - 1] == "--conf"]
    command = [spark_submit.spark_submit_binary(), "--master", "local[2]", "--py-files", py_files]
    for conf in confs:
        command += ["--conf", conf]
    command += [str(local[driver["entryPoint"]]), *driver["entryPointArguments"]]
    # The stack's keys and Kinesis endpoint are in this process's environment. S3's is not (the Airflow side reaches
    # it through the connection alone); in AWS the job finds S3 by its region, so here it is told where S3 stands.
    env = spark_submit.submit_env("local[2]", {"AWS_ENDPOINT_URL_S3": local_stack.s3_client().meta.endpoint_url})
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_batch_is_staged_on_s3_submitted_as_a_job_run_and_that_request_replays_it_exactly_once(
    kinesis: Any, store: DynamoDBStateStore, emr_entry: dict[str, Any], tmp_path: Path, airflow_db: Path
) -> None:
    name, application_id = emr_entry["name"], emr_entry["spark"]["emr_serverless"]["application_id"]
    code_prefix = emr_entry["spark"]["emr_serverless"]["code_prefix"]
    produced = produce(kinesis, emr_entry["stream"], 200)

    dag = load_dags(tmp_path / "emr.yaml", emr_entry)[f"kinesis_replay_{name}"]
    staged = run_dag(dag.partial_subset(task_ids=["replay"], include_upstream=True, include_downstream=False))
    assert staged.tasks == {"plan": "success", "stage": "success", "replay": "success"}, staged

    (job_run,) = job_runs(application_id)
    batch = store.get_batch(name, 1)
    base = f"{code_prefix}/{name}/batch_id=0000000001"
    driver = job_run["jobDriver"]["sparkSubmit"]
    assert job_run["executionRole"] == ROLE and job_run["name"] == f"kinesis-replay-{name}-batch-1"
    assert driver["entryPoint"] == f"{base}/replay_job.py"
    assert driver["entryPointArguments"] == ["--spec", f"{base}/batch.json"]
    parameters = shlex.split(driver["sparkSubmitParameters"])
    assert parameters[:2] == ["--py-files", f"{base}/kinesis_replay.zip,{base}/kinesis_source.py"]
    assert "spark.sql.shuffle.partitions=4" in parameters

    # What was staged is what this checkout holds, and the spec is the stored batch.
    assert s3_object(f"{base}/replay_job.py") == (ROOT / "spark_jobs" / "replay_job.py").read_bytes()
    assert s3_object(f"{base}/kinesis_source.py") == (ROOT / "spark_jobs" / "kinesis_source.py").read_bytes()
    (tmp_path / "library.zip").write_bytes(s3_object(f"{base}/kinesis_replay.zip"))
    assert "kinesis_replay/steps/commit.py" in zipfile.ZipFile(tmp_path / "library.zip").namelist()
    spec = JobSpec.from_json(s3_object(f"{base}/batch.json"))
    assert spec.ranges == batch.ranges
    assert spec.kinesis.endpoint_url is None, "a job in AWS must not be sent an endpoint only Airflow can reach"

    # moto ran nothing: nothing is committed yet. Run the request as EMR would, then let the DAG finish the batch.
    assert store.get_batch(name, 1).status.value == "PLANNED" and read_output(emr_entry["output"]).num_rows == 0
    work = tmp_path / "emr"
    work.mkdir()
    run_as_emr(job_run, work)

    dag = load_dags(tmp_path / "emr.yaml", emr_entry)[f"kinesis_replay_{name}"]
    finished = run_dag(dag)
    assert finished.tasks == {**{t: "success" for t in ("plan", "stage", "replay", "verify", "commit", "check", "catch_up")},
                              "plan_next": "skipped"}, finished  # fmt: skip
    result = check_exactly_once(produced, read_output(emr_entry["output"]))
    assert result.ok and result.rows == 200, result
    ends = {r.shard_id: r.end for r in batch.ranges}
    assert {sid: s.checkpoint for sid, s in store.get_shards(name).items() if sid in ends} == ends
    # The rerun staged the same batch again and submitted the same request: a rerun replays the same ranges.
    first, second = job_runs(application_id)
    assert second["jobDriver"] == first["jobDriver"]
