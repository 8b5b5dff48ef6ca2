"""What Airflow imports from plugins/: the plugin, and none of the library's layers as top-level modules of their own.

Airflow imports every .py file under its plugins folder as a module named after the file alone; plugins/.airflowignore
keeps it to the package's top-level files, so that a layer's ``config.py`` or ``plan.py`` never becomes the module
``config`` or ``plan`` of an Airflow process. Run in a fresh interpreter: sys.modules is what is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory
before = set(sys.modules)
plugins, errors = _load_plugins_from_plugin_directory(sys.argv[1])
print(json.dumps({"plugins": [p.name for p in plugins], "errors": errors, "new": sorted(set(sys.modules) - before)}))
"""


def load(folder: Path) -> dict[str, object]:
    env_path = str(ROOT / "plugins")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, check=True, env={"PYTHONPATH": env_path, "PATH": ""}
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_airflow_imports_the_plugin_and_no_layer_as_a_module_of_its_own() -> None:
    found = load(ROOT / "plugins")
    assert found["plugins"] == ["kinesis_replay"] and found["errors"] == {}
    layer_files = {p.stem for p in (ROOT / "plugins" / "kinesis_replay").glob("*/*.py")} - {"__init__"}
    assert layer_files and not layer_files & set(found["new"])  # type: ignore[arg-type]
    assert "kinesis_replay.steps.plan" not in found["new"]  # importing the plugin is cheap: no step is loaded with it


def test_without_the_ignore_file_every_layer_file_would_be_a_top_level_module(tmp_path: Path) -> None:
    """The check above can fail: a plugins folder without .airflowignore has its layers' files imported by their names."""
    import shutil

    shutil.copytree(ROOT / "plugins" / "kinesis_replay", tmp_path / "kinesis_replay")
    found = load(tmp_path)
    assert {"plan", "config", "status"} <= set(found["new"])  # type: ignore[arg-type]
