"""The JVM's class-data-sharing archive: named by what it depends on, kept only whole, dropped when the JVM crashes on it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kinesis_replay import jvm_archive, spark_submit
from kinesis_replay.config import parse_config

OPTIONS = "-XX:TieredStopAtLevel=1"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A java binary, a Spark home with two jars, and a cache folder, all under tmp_path."""
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "bin" / "java").write_text("#!/bin/sh\n")
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    for jar in ("spark-core.jar", "spark-sql.jar"):
        (tmp_path / "spark" / "jars" / jar).write_bytes(b"jar")
    return {"JAVA_HOME": str(tmp_path / "jdk"), "SPARK_HOME": str(tmp_path / "spark"), jvm_archive.CACHE_ENV: str(tmp_path / "cache")}


def recorded(archive: jvm_archive.ClassArchive, size: int = 100) -> str:
    """What a recording run leaves: its option, and its archive under the temporary name."""
    option = archive.java_option()
    assert option.startswith(jvm_archive.RECORD)
    Path(option.split()[0].removeprefix(jvm_archive.RECORD)).write_bytes(b"x" * size)
    return option


def test_the_archive_is_named_by_the_java_binary_the_spark_jars_and_the_options(env: dict[str, str], tmp_path: Path) -> None:
    first = jvm_archive.for_spark(OPTIONS, env)
    assert first is not None and first.path.parent == tmp_path / "cache"
    assert jvm_archive.for_spark(OPTIONS, env) == first
    assert jvm_archive.for_spark("-XX:+UseSerialGC", env) != first
    (tmp_path / "spark" / "jars" / "spark-sql.jar").write_bytes(b"a newer jar")
    upgraded = jvm_archive.for_spark(OPTIONS, env)
    assert upgraded is not None and upgraded != first
    os.utime(tmp_path / "jdk" / "bin" / "java", ns=(1, 1))
    assert jvm_archive.for_spark(OPTIONS, env) not in (first, upgraded)


def test_with_no_java_or_no_writable_cache_there_is_no_archive(env: dict[str, str], tmp_path: Path) -> None:
    assert jvm_archive.for_spark(OPTIONS, {**env, "JAVA_HOME": str(tmp_path / "nowhere")}) is None
    (tmp_path / "file").write_text("")
    assert jvm_archive.for_spark(OPTIONS, {**env, jvm_archive.CACHE_ENV: str(tmp_path / "file" / "cache")}) is None


def test_a_successful_recording_run_puts_the_archive_in_place_and_later_runs_map_it(env: dict[str, str]) -> None:
    archive = jvm_archive.for_spark(OPTIONS, env)
    assert archive is not None and not archive.ready()
    option = recorded(archive)
    jvm_archive.settle(["spark-submit", "--conf", f"spark.driver.extraJavaOptions={OPTIONS} {option}"], True, [])
    assert archive.ready() and archive.path.stat().st_size == 100
    assert archive.java_option() == f"{jvm_archive.USE}{archive.path}"
    assert list(archive.path.parent.glob("*.tmp")) == []


def test_a_failed_recording_run_leaves_no_archive(env: dict[str, str]) -> None:
    archive = jvm_archive.for_spark(OPTIONS, env)
    assert archive is not None
    option = recorded(archive)
    jvm_archive.settle(["--conf", f"spark.driver.extraJavaOptions={option}"], False, [])
    assert not archive.path.exists() and list(archive.path.parent.iterdir()) == []


def test_a_truncated_archive_is_not_used_the_jvm_would_crash_on_it(env: dict[str, str]) -> None:
    archive = jvm_archive.for_spark(OPTIONS, env)
    assert archive is not None
    jvm_archive.settle([f"spark.driver.extraJavaOptions={recorded(archive)}"], True, [])
    archive.path.write_bytes(b"x" * 10)  # cut short after it was kept
    assert not archive.ready()
    assert archive.java_option().startswith(jvm_archive.RECORD)


def test_an_archive_the_jvm_crashed_on_is_removed_and_a_plain_failure_keeps_it(env: dict[str, str]) -> None:
    archive = jvm_archive.for_spark(OPTIONS, env)
    assert archive is not None
    jvm_archive.settle([f"spark.driver.extraJavaOptions={recorded(archive)}"], True, [])
    using = [f"spark.driver.extraJavaOptions={OPTIONS} {archive.java_option()}"]
    jvm_archive.settle(using, False, ["kinesis-replay: range gone"])
    assert archive.ready()
    jvm_archive.settle(using, False, [f"# {jvm_archive.JVM_CRASH}:"])
    assert not archive.path.exists() and not archive.size_file.exists()


def test_local_jobs_get_the_archive_and_a_pipeline_with_its_own_jvm_options_does_not(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    entry = {"name": "p", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST", "state_table": "t"}
    local = parse_config({"pipelines": [{**entry, "spark": {"master": "local[2]"}}]})[0]
    (option,) = [c for c in spark_submit.build_command(local, 1, tmp_path / "b.json", Path("job.py"), []) if "extraJavaOptions" in c]
    assert option.startswith(
        f"spark.driver.extraJavaOptions={spark_submit.LOCAL_DRIVER_JAVA_OPTIONS} {jvm_archive.RECORD}{tmp_path}/cache/"
    )
    own = parse_config({"pipelines": [{**entry, "spark": {"master": "local[2]", "conf": {"spark.driver.extraJavaOptions": "-Xss4m"}}}]})[0]
    assert "spark.driver.extraJavaOptions=-Xss4m" in spark_submit.build_command(own, 1, tmp_path / "b.json", Path("job.py"), [])


def test_what_a_killed_recording_run_left_is_removed_once_it_is_stale(env: dict[str, str]) -> None:
    archive = jvm_archive.for_spark(OPTIONS, env)
    assert archive is not None
    stale, fresh = (Path(recorded(archive).split()[0].removeprefix(jvm_archive.RECORD)) for _ in range(2))
    os.utime(stale, (0, 0))
    jvm_archive.for_spark(OPTIONS, env)
    assert not stale.exists() and fresh.exists()  # a run still recording is left alone
