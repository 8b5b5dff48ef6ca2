"""The launcher: the command it builds, the library it ships, the environment it gives the job."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from kinesis_replay import spark_submit
from kinesis_replay.config import parse_config

ENTRY = {
    "name": "orders", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST",
    "state_table": "t", "spark": {"master": "spark://host:7077", "conf": {"spark.executor.cores": 2}},
}  # fmt: skip
PIPELINE = parse_config({"pipelines": [ENTRY]})[0]


def test_the_library_zip_holds_the_package_this_process_runs(tmp_path: Path) -> None:
    zipped = spark_submit.package_library(tmp_path / "lib.zip")
    names = zipfile.ZipFile(zipped).namelist()
    assert "kinesis_replay/kinesis.py" in names and "kinesis_replay/__init__.py" in names
    assert all(n.startswith("kinesis_replay/") and n.endswith(".py") for n in names)


def test_the_command_carries_master_conf_py_files_and_spec(tmp_path: Path) -> None:
    command = spark_submit.build_command(PIPELINE, 42, tmp_path / "b.json", Path("job.py"), [Path("a.zip"), Path("src.py")])
    assert command[0].endswith("spark-submit")
    assert command[1:5] == ["--master", "spark://host:7077", "--name", "kinesis-replay-orders-batch-42"]
    assert command[5:7] == ["--conf", "spark.executor.cores=2"]
    assert command[-5:] == ["--py-files", "a.zip,src.py", "job.py", "--spec", str(tmp_path / "b.json")]


def test_the_job_runs_with_this_python_and_a_local_ip_for_local_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    env = spark_submit.submit_env("local[2]", {"AWS_ACCESS_KEY_ID": "k"})
    assert env["PYSPARK_PYTHON"] == sys.executable and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["AWS_ACCESS_KEY_ID"] == "k" and env["PATH"].startswith(str(Path(sys.executable).parent))
    assert "SPARK_LOCAL_IP" not in spark_submit.submit_env("yarn", {})


def test_a_failing_job_raises_with_its_own_error_line() -> None:
    command = [sys.executable, "-c", "import sys; print('noise'); print('kinesis-replay: range s0 is gone'); sys.exit(2)"]
    with pytest.raises(spark_submit.SparkSubmitError, match="batch 9: spark-submit exited with 2: kinesis-replay: range s0 is gone"):
        spark_submit.run(command, {}, "pipeline p, batch 9")


def test_the_pipeline_may_raise_spark_log_level(tmp_path: Path) -> None:
    chatty = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "local[1]", "conf": {"spark.log.level": "INFO"}}}]})[0]
    command = spark_submit.build_command(chatty, 1, tmp_path / "b.json", Path("job.py"), [])
    assert "spark.log.level=INFO" in command and "spark.log.level=WARN" not in command


def test_local_jobs_run_their_jvm_with_c1_only_and_the_pipelines_own_options_still_apply(tmp_path: Path) -> None:
    def java_options(spark: dict[str, object]) -> list[str]:
        pipeline = parse_config({"pipelines": [{**ENTRY, "spark": spark}]})[0]
        return [c for c in spark_submit.build_command(pipeline, 1, tmp_path / "b.json", Path("job.py"), []) if "JavaOptions" in c]

    (default,) = java_options({"master": "local[2]"})
    assert default.startswith(f"spark.driver.defaultJavaOptions={spark_submit.LOCAL_DRIVER_JAVA_OPTIONS}")
    assert "-XX:TieredStopAtLevel=1" in spark_submit.LOCAL_DRIVER_JAVA_OPTIONS
    # Spark puts extraJavaOptions after the default ones: a pipeline's (or spark-defaults.conf's) still apply.
    assert java_options({"master": "local[2]", "conf": {"spark.driver.extraJavaOptions": "-Xss4m"}}) == [
        default,
        "spark.driver.extraJavaOptions=-Xss4m",
    ]
    assert java_options({"master": "local[2]", "conf": {"spark.driver.defaultJavaOptions": "-Xss4m"}}) == [
        "spark.driver.defaultJavaOptions=-Xss4m"
    ]
    # On a cluster the tasks run in executors' JVMs, which the job does not tune.
    assert java_options({"master": "spark://host:7077"}) == []


def test_a_jvm_failure_after_the_jobs_success_line_reports_the_jvms_lines() -> None:
    script = (
        "import sys; print('kinesis-replay: batch 3 of p: 9 records'); print('Error occurred during initialization of VM'); sys.exit(1)"
    )
    with pytest.raises(
        spark_submit.SparkSubmitError, match=re.escape("batch 3 of p: 9 records | Error occurred during initialization of VM")
    ):
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")


def test_the_jobs_error_line_is_reported_even_when_the_jvm_prints_pages_after_it() -> None:
    script = "import sys; print('kinesis-replay: range s0 is gone'); [print(f'[warning][cds] noise {i}') for i in range(200)]; sys.exit(2)"
    with pytest.raises(spark_submit.SparkSubmitError, match=r"exited with 2: kinesis-replay: range s0 is gone$"):
        spark_submit.run([sys.executable, "-c", script], {}, "pipeline p, batch 9")
