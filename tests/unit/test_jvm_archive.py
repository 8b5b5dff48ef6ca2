"""The JVM's class-data-sharing archive: named by what it depends on, recorded by a warm-up that may fail, kept only whole."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kinesis_replay.core.config import parse_config
from kinesis_replay.launchers import jvm_archive, spark_submit

OPTIONS = "-XX:TieredStopAtLevel=1"
ENTRY = {"name": "p", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST", "state_table": "t"}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A java binary, a Spark home with two jars, and a cache folder, all under tmp_path (and in os.environ)."""
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "bin" / "java").write_text("#!/bin/sh\n")
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    for jar in ("spark-core.jar", "spark-sql.jar"):
        (tmp_path / "spark" / "jars" / jar).write_bytes(b"jar")
    values = {"JAVA_HOME": str(tmp_path / "jdk"), "SPARK_HOME": str(tmp_path / "spark"), jvm_archive.CACHE_ENV: str(tmp_path / "cache")}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def archive(env: dict[str, str], options: str = OPTIONS) -> jvm_archive.ClassArchive:
    found = jvm_archive.for_spark(options, env)
    assert found is not None
    return found


def record(found: jvm_archive.ClassArchive, size: int = 100) -> Path:
    """What a warm-up's JVM leaves: the archive under its temporary name."""
    options, tmp = found.recording()
    assert options == f"{jvm_archive.RECORD}{tmp} {jvm_archive.QUIET}"
    tmp.write_bytes(b"x" * size)
    return tmp


def test_the_archive_is_named_by_the_java_binary_the_spark_jars_and_the_options(env: dict[str, str], tmp_path: Path) -> None:
    first = archive(env)
    assert first.path.parent == tmp_path / "cache" and archive(env) == first
    assert archive(env, "-XX:+UseSerialGC") != first
    (tmp_path / "spark" / "jars" / "spark-sql.jar").write_bytes(b"a newer jar")
    upgraded = archive(env)
    assert upgraded != first
    os.utime(tmp_path / "jdk" / "bin" / "java", ns=(1, 1))
    assert archive(env) not in (first, upgraded)


def test_no_archive_without_java(env: dict[str, str], tmp_path: Path) -> None:
    assert jvm_archive.for_spark(OPTIONS, {**env, "JAVA_HOME": str(tmp_path / "nowhere")}) is None
    assert jvm_archive.for_spark(OPTIONS, env) is not None


def test_no_archive_in_a_cache_no_one_can_create(env: dict[str, str], tmp_path: Path) -> None:
    # A folder under a file cannot be made by any user, root included: the test runs wherever CI runs it.
    (tmp_path / "file").write_text("")
    assert jvm_archive.for_spark(OPTIONS, {**env, jvm_archive.CACHE_ENV: str(tmp_path / "file" / "cache")}) is None
    assert not (tmp_path / "file" / "cache").exists() and (tmp_path / "file").read_text() == ""


def test_a_cache_path_with_a_space_gets_no_archive_spark_submit_would_split_the_option(env: dict[str, str], tmp_path: Path) -> None:
    assert jvm_archive.for_spark(OPTIONS, {**env, jvm_archive.CACHE_ENV: str(tmp_path / "my cache")}) is None


def test_a_recorded_archive_is_kept_with_its_size_and_a_truncated_one_is_not_ready(env: dict[str, str]) -> None:
    found = archive(env)
    assert not found.ready()
    tmp = record(found)
    assert found.keep(tmp) and found.ready() and not tmp.exists()
    assert found.use_option() == f"{jvm_archive.USE}{found.path}"
    found.path.write_bytes(b"x" * 10)  # cut short after it was kept: the JVM would die on it
    assert not found.ready()
    assert not found.keep(found.path.with_name("never-written.tmp"))


def test_a_disabled_archive_says_why(env: dict[str, str]) -> None:
    found = archive(env)
    assert found.disabled() is None
    found.disable("Cannot have non-empty directory in paths")
    assert "non-empty directory" in (found.disabled() or "")


def test_after_a_jvm_crash_only_our_mapped_archive_is_removed(env: dict[str, str], tmp_path: Path) -> None:
    found = archive(env)
    found.keep(record(found))
    theirs = tmp_path / "theirs.jsa"
    theirs.write_bytes(b"a pipeline's own archive")
    command = ["--conf", f"spark.driver.defaultJavaOptions={OPTIONS} {found.use_option()}", "--conf",
               f"spark.driver.extraJavaOptions={jvm_archive.USE}{theirs}"]  # fmt: skip
    jvm_archive.forget_after_crash(command, ["kinesis-replay: replay failed: range gone"])
    assert found.ready()
    jvm_archive.forget_after_crash(command, [f"# {jvm_archive.JVM_CRASH}:"])
    assert not found.path.exists() and not found.size_file.exists() and theirs.exists()


def test_what_a_killed_recording_left_is_removed_once_it_is_stale(env: dict[str, str]) -> None:
    found = archive(env)
    stale, fresh = record(found), record(found)
    os.utime(stale, (0, 0))
    archive(env)
    assert not stale.exists() and fresh.exists()  # a warm-up still recording is left alone


def fake_spark_submit(tmp_path: Path, body: str) -> Path:
    """A stand-in for spark-submit: Python that sees the command line the warm-up passes."""
    script = tmp_path / "spark-submit"
    script.write_text(f"#!{sys.executable}\nimport re, sys\nargs = ' '.join(sys.argv)\n{body}\n")
    script.chmod(0o755)
    return script


WRITES_ARCHIVE = "open(re.search(r'ArchiveClassesAtExit=(\\S+)', args).group(1), 'wb').write(b'archive' * 100)"


def test_the_warm_up_records_the_archive_and_later_jobs_map_it(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        spark_submit, "spark_submit_binary", lambda: str(fake_spark_submit(tmp_path, f"assert '--warm-up' in args\n{WRITES_ARCHIVE}"))
    )
    local = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "local[2]"}}]})[0]
    spark_submit.warm_up(local, Path("job.py"), [], dict(os.environ))
    found = archive(env, spark_submit.LOCAL_DRIVER_JAVA_OPTIONS)
    assert found.ready() and found.path.stat().st_size == 700
    command = spark_submit.build_command(local, 1, tmp_path / "b.json", Path("job.py"), [])
    expected = f"{spark_submit.DEFAULT_JAVA_OPTIONS}={spark_submit.LOCAL_DRIVER_JAVA_OPTIONS} {found.use_option()}"
    assert expected in command


def test_a_failed_warm_up_disables_the_archive_and_jobs_run_without_one(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the JVM does when a non-empty folder (Spark's conf folder, say) is on its class path: the work done, exit 1.
    failing = fake_spark_submit(tmp_path, f"{WRITES_ARCHIVE}\nprint('Cannot have non-empty directory in paths'); sys.exit(1)")
    monkeypatch.setattr(spark_submit, "spark_submit_binary", lambda: str(failing))
    local = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "local[2]"}}]})[0]
    spark_submit.warm_up(local, Path("job.py"), [], dict(os.environ))  # does not raise
    found = archive(env, spark_submit.LOCAL_DRIVER_JAVA_OPTIONS)
    assert not found.ready() and "Cannot have non-empty directory in paths" in (found.disabled() or "")
    assert list(found.path.parent.glob("*.tmp")) == []
    command = spark_submit.build_command(local, 1, tmp_path / "b.json", Path("job.py"), [])
    assert f"{spark_submit.DEFAULT_JAVA_OPTIONS}={spark_submit.LOCAL_DRIVER_JAVA_OPTIONS}" in command
    monkeypatch.setattr(spark_submit, "spark_submit_binary", lambda: pytest.fail("a disabled archive is not recorded again"))
    spark_submit.warm_up(local, Path("job.py"), [], dict(os.environ))


def test_no_warm_up_for_cluster_masters_or_pipelines_that_set_the_drivers_default_options(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_submit, "spark_submit_binary", lambda: pytest.fail("no warm-up expected"))
    cluster = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "spark://host:7077"}}]})[0]
    own = parse_config({"pipelines": [{**ENTRY, "spark": {"master": "local[2]", "conf": {spark_submit.DEFAULT_JAVA_OPTIONS: "-Xss4m"}}}]})[
        0
    ]
    for pipeline in (cluster, own):
        spark_submit.warm_up(pipeline, Path("job.py"), [], dict(os.environ))
    assert list((tmp_path / "cache").glob("*")) == []
