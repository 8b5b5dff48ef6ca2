"""The layers of the Layout of docs/code-map.md, checked on the source: no import upward, no import cycle, no framework in the core.

Every import counts, a function's own ones too: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "kinesis_replay"

# Lower layers first; a module may import its own layer and those below it, never one above.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "__init__",
        "errors",
        "formats",
        "ranges",
        "records",
        "config",
        "payloads",
        "state",
        "job_spec",
        "status",
        "charts",
        "holdings",
    ),
    "adapters": (
        "kinesis",
        "dynamodb_store",
        "output",
        "iceberg_table",
        "credentials",
        "jvm_archive",
        "spark_submit",
        "emr_serverless",
        "table_maintenance",
    ),
    "steps": ("guards", "batches", "backfill", "recovery"),
    "entry points": (
        "airflow_config",
        "airflow_plugin",
        "kinesis_replay_tasks",
        "kinesis_replay_dags",
        "kinesis_replay_config_check",
        "kinesis_source",
        "replay_job",
    ),
}
# What each layer may not import from outside the project: the core knows no framework and no AWS SDK.
FORBIDDEN = {
    "core": {"airflow", "pyspark", "boto3", "botocore", "pyarrow", "fastapi"},
    "adapters": {"airflow", "pyspark"},
    "steps": {"airflow", "pyspark", "boto3"},
}
SPARK_SIDE = {"kinesis_source", "replay_job"}  # the Spark job knows nothing of Airflow
OURS = {name for names in LAYERS.values() for name in names}


def sources() -> dict[str, Path]:
    files = [*PACKAGE.glob("*.py"), *(ROOT / "dags").glob("*.py"), *(ROOT / "spark_jobs").glob("*.py")]
    return {path.stem: path for path in files}


def imports(path: Path) -> tuple[set[str], set[str]]:
    """The project's modules and the outside packages that one file imports."""
    ours, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "kinesis_replay" and len(parts) > 1 and parts[1] in OURS:
                ours.add(parts[1])
            elif parts[0] in OURS:
                ours.add(parts[0])
            elif parts[0] not in ("kinesis_replay", "__future__"):
                outside.add(parts[0])
    return ours, outside


def layer_of(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS.values()) if module in names)


def test_every_module_has_a_layer() -> None:
    assert set(sources()) == OURS, "place each new module in a layer of docs/code-map.md's Layout (and here)"


def test_no_module_imports_from_a_higher_layer_or_a_forbidden_package() -> None:
    names = list(LAYERS)
    problems = []
    for module, path in sources().items():
        ours, outside = imports(path)
        problems += [
            f"{module} ({names[layer_of(module)]}) imports {dep} ({names[layer_of(dep)]})"
            for dep in ours
            if layer_of(dep) > layer_of(module)
        ]
        problems += [f"{module} imports {pkg}" for pkg in outside & FORBIDDEN.get(names[layer_of(module)], set())]
        if module in SPARK_SIDE:
            problems += [f"{module} imports {pkg}" for pkg in outside & {"airflow"}]
    assert problems == []


def test_no_import_cycle() -> None:
    graph = {module: imports(path)[0] - {module} for module, path in sources().items()}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        for dep in sorted(graph[module]):
            if dep in trail:
                cycles.append(" -> ".join([*trail[trail.index(dep) :], dep]))
            elif dep not in done:
                visit(dep, [*trail, dep])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert cycles == []


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    """The checks above can fail: an upward import and a framework in the core are found."""
    bad = tmp_path / "state.py"
    bad.write_text("from kinesis_replay import batches\nimport airflow\n\ndef f():\n    from kinesis_replay.guards import x\n")
    ours, outside = imports(bad)
    assert ours == {"batches", "guards"} and "airflow" in outside
    assert all(layer_of(dep) > layer_of("state") for dep in ours)
