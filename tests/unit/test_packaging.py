"""The package's shape without building it (tests/installed builds, installs and runs it): where the installed job and
config are found, what its zip leaves out, its dependency ranges against the tested pins, and one plugin either way."""

from __future__ import annotations

import importlib.metadata
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kinesis_replay import airflow_config, airflow_plugin
from kinesis_replay.core.errors import ConfigError
from kinesis_replay.launchers import spark_submit

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pinned() -> dict[str, str]:
    """requirements.txt's pins, by normalised name."""
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


@pytest.mark.parametrize(
    "requirement",
    [*PYPROJECT["project"]["dependencies"], *(r for rs in PYPROJECT["project"]["optional-dependencies"].values() for r in rs)],
)
def test_each_dependency_range_admits_the_tested_pin(requirement: str) -> None:
    """requirements.txt is the tested set and the constraints of every install: each range must hold its pin."""
    parsed = Requirement(requirement)
    version = pinned().get(parsed.name.lower())
    assert version is not None, f"{parsed.name} is a dependency of the package but not pinned in requirements.txt"
    assert parsed.specifier.contains(version), f"{requirement} does not admit the tested {parsed.name}=={version}"


def test_the_wheel_takes_files_that_exist_and_the_version_is_the_library_s() -> None:
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    for path in wheel["only-include"]:
        assert (ROOT / path).exists(), f"pyproject.toml's wheel names {path}, which does not exist"
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "plugins/kinesis_replay/__init__.py"
    # The sdist holds every file the wheel is built from.
    sdist = PYPROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["only-include"]
    assert set(wheel["only-include"]) <= set(sdist)
    # Every module of the DAG factory is in the wheel: a new one left out would fail only where the package is installed.
    modules = {f"dags/{p.name}" for p in (ROOT / "dags").glob("kinesis_replay_*.py")}
    assert modules <= set(wheel["only-include"]), f"dags modules the wheel leaves out: {sorted(modules - set(wheel['only-include']))}"


def test_the_entry_point_names_the_plugin_the_plugins_folder_holds() -> None:
    target = PYPROJECT["project"]["entry-points"]["airflow.plugins"]["kinesis_replay"]
    module, _, name = target.partition(":")
    assert module == "kinesis_replay.airflow_plugin" and getattr(airflow_plugin, name) is airflow_plugin.KinesisReplayPlugin


def test_the_repository_s_environment_has_no_installed_plugin_to_register_twice() -> None:
    """make demo, make up and the compose stack load the plugin from plugins/; Airflow loads that folder first, then the
    entry points, and reports a second plugin of the same name as an import error. Their environment (requirements.txt)
    holds no kinesis-replay distribution, so the folder's copy is the only one."""
    found = [ep for ep in importlib.metadata.entry_points(group="airflow.plugins") if ep.value.startswith("kinesis_replay")]
    assert found == [], f"a kinesis-replay distribution is installed in this environment: {found}; pip uninstall kinesis-replay"


def test_the_job_is_found_in_the_repository_or_in_the_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert spark_submit.spark_jobs_dir() == ROOT / "spark_jobs"
    installed = tmp_path / "kinesis_replay" / "spark_jobs"
    installed.mkdir(parents=True)
    (installed / "replay_job.py").write_text("")
    monkeypatch.setattr(spark_submit, "INSTALLED_JOBS", installed)
    assert spark_submit.spark_jobs_dir() == installed  # the installed package's, first
    monkeypatch.setattr(spark_submit, "REPOSITORY_JOBS", tmp_path / "nowhere")
    (installed / "replay_job.py").unlink()
    with pytest.raises(ConfigError, match=r"replay_job\.py is neither in .*kinesis_replay/spark_jobs .*nor in .*nowhere"):
        spark_submit.spark_jobs_dir()


def test_the_library_zip_of_an_installed_package_leaves_its_job_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site-packages" / "kinesis_replay"
    (package / "core").mkdir(parents=True)
    (package / "spark_jobs").mkdir()
    (package / "__init__.py").write_text("")
    (package / "core" / "ranges.py").write_text("X = 1\n")
    (package / "spark_jobs" / "replay_job.py").write_text("import pyspark\n")
    monkeypatch.setattr(spark_submit, "PACKAGE_DIR", package)
    monkeypatch.setattr(spark_submit, "INSTALLED_JOBS", package / "spark_jobs")
    with zipfile.ZipFile(spark_submit.package_library(tmp_path / "lib.zip")) as zf:
        names = zf.namelist()
    assert "kinesis_replay/core/ranges.py" in names and not [n for n in names if "spark_jobs" in n]


def test_the_config_is_the_path_given_else_the_variable_else_the_dags_folder_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    monkeypatch.setenv("KINESIS_REPLAY_CONFIG", str(tmp_path / "env.yaml"))
    assert airflow_config.pipelines_path(tmp_path / "given.yaml") == tmp_path / "given.yaml"
    assert airflow_config.pipelines_path() == tmp_path / "env.yaml"
    monkeypatch.delenv("KINESIS_REPLAY_CONFIG")
    assert airflow_config.pipelines_path() == tmp_path / "dags" / "pipelines.yaml"


def test_a_missing_config_is_refused_naming_the_path_and_where_it_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    monkeypatch.delenv("KINESIS_REPLAY_CONFIG", raising=False)
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=rf"pipelines config {missing} does not exist: it is the path given to build_dags"):
        airflow_config.existing_pipelines_path(missing)
    with pytest.raises(ConfigError, match=r"dags/pipelines\.yaml does not exist: it is pipelines\.yaml in Airflow's DAGs folder"):
        airflow_config.existing_pipelines_path()
    monkeypatch.setenv("KINESIS_REPLAY_CONFIG", str(missing))
    with pytest.raises(ConfigError, match=r"missing\.yaml does not exist: it is \$KINESIS_REPLAY_CONFIG"):
        airflow_config.existing_pipelines_path()
