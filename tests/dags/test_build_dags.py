"""The DAG factory as the installed package's module: imported by name it builds nothing; a DAG file calls build_dags
with the pipelines file, else $KINESIS_REPLAY_CONFIG, else pipelines.yaml in the DAGs folder (docs/deployment.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kinesis_replay.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, **changes: object) -> Path:
    entry = {**yaml.safe_load((ROOT / "dags" / "pipelines.yaml").read_text())["pipelines"][0], **changes}
    path.write_text(yaml.safe_dump({"pipelines": [entry]}))
    return path


def test_imported_by_name_it_builds_no_dag_and_build_dags_builds_the_file_s(tmp_path: Path) -> None:
    from airflow.sdk import DAG

    import kinesis_replay_dags

    assert not [v for v in vars(kinesis_replay_dags).values() if isinstance(v, DAG)]
    dags = kinesis_replay_dags.build_dags(write_config(tmp_path / "mine.yaml", name="mine"))
    assert {"kinesis_replay_mine", "kinesis_replay_backfill_mine"} <= set(dags)
    assert all(dag.dag_id == dag_id for dag_id, dag in dags.items())


def test_by_default_it_reads_pipelines_yaml_in_the_dags_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kinesis_replay_dags

    monkeypatch.delenv("KINESIS_REPLAY_CONFIG", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path))
    write_config(tmp_path / "pipelines.yaml", name="here")
    assert "kinesis_replay_here" in kinesis_replay_dags.build_dags()


def test_a_missing_file_is_refused_naming_the_path(tmp_path: Path) -> None:
    import kinesis_replay_dags

    with pytest.raises(ConfigError, match=rf"pipelines config {tmp_path}/nowhere\.yaml does not exist: it is the path given"):
        kinesis_replay_dags.build_dags(tmp_path / "nowhere.yaml")


def test_report_invalid_names_each_invalid_pipeline_and_leaves_a_missing_file_to_build_dags(tmp_path: Path) -> None:
    import kinesis_replay_config_check

    kinesis_replay_config_check.report_invalid(tmp_path / "nowhere.yaml")  # build_dags's file reports it, once
    kinesis_replay_config_check.report_invalid(write_config(tmp_path / "good.yaml", name="good"))
    bad = write_config(tmp_path / "bad.yaml", name="bad", schedule="not a cron")
    with pytest.raises(ConfigError, match=r"(?s)1 pipeline\(s\) of .*bad\.yaml are invalid .*- bad: .*schedule"):
        kinesis_replay_config_check.report_invalid(bad)
