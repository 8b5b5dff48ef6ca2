"""The layers of docs/code-map.md, read from the package's folders: no import upward, no import cycle, no framework in the core.

A layer is a folder of ``plugins/kinesis_replay/``; a module belongs to the layer of its folder. The package's own
top-level files (the Airflow plugin and its config helper), ``dags/`` and ``spark_jobs/`` are the entry points, above
every layer. Every import counts, a function's own ones too: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "kinesis_replay"
ENTRY = "entry points"

# The folders, lower layers first: a module may import its own layer and those before it, never one after.
ORDER = ("core", "adapters", "launchers", "steps", "ui", ENTRY)
# What each layer may not import from outside the project: the core knows no framework and no AWS SDK.
FORBIDDEN = {
    "core": {"airflow", "pyspark", "boto3", "botocore", "pyarrow", "pyiceberg", "fastapi"},
    "adapters": {"airflow", "pyspark"},
    "launchers": {"airflow", "pyspark"},
    "steps": {"airflow", "pyspark", "boto3", "botocore"},
    "ui": {"airflow", "pyspark", "boto3", "botocore", "pyarrow", "pyiceberg"},
}
SPARK_SIDE = {"spark_jobs.kinesis_source", "spark_jobs.replay_job"}  # the Spark job knows nothing of Airflow

# The steps are two floors: plan, in_flight, verify, commit and maintenance are siblings, sharing their rules through
# core/ and adapters/; backfill and recovery sit above them. Each step imports exactly the siblings named here, each
# with the reason. A new step fails test_steps_import_only_the_siblings_named until it is given its row.
STEP_IMPORTS: dict[str, dict[str, str]] = {
    "plan": {},
    "in_flight": {},
    "verify": {},
    "commit": {},
    "maintenance": {},
    "backfill": {
        "in_flight": "a backfill's and a restore's ranges are checked against the retention as the batch in flight's are",
        "verify": "a backfill's replayed files are verified as a batch's are (check_files)",
        "commit": "a backfill and a restore put their files in the table as a batch's commit does (commit_to_table)",
    },
    "compaction": {
        "verify": "a compacted attempt's files are checked against the batch's ledger entry as a backfill's are (check_files)",
        "commit": "a compaction's snapshot is guarded by the table check every commit runs (table_check)",
    },
    "recovery": {
        "commit": "a recovered batch whose commit was cut short is put in the table as a restore does (commit_to_table)",
    },
    "redecode": {
        "commit": "a re-decode's staged batches are made visible as every staged selection is (commit_staged)",
    },
    "rebuild": {
        "commit": "a rebuild's switch makes its staged batches visible as a re-decode's commit does (commit_staged)",
        "in_flight": "the batches a rebuild copies are those the retention check finds gone (beyond_retention)",
        "verify": "a copied batch's files are verified as a replay's are (check_files)",
    },
}
STEP_FLOORS = 2  # the siblings, then backfill, recovery, redecode and rebuild


def layer_folders() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def sources() -> dict[str, tuple[str, Path]]:
    """Each module of the project by its dotted name under kinesis_replay (or its folder, for dags/ and spark_jobs/), with its layer."""
    found = {f"{path.parent.name}.{path.stem}": (path.parent.name, path) for path in PACKAGE.glob("*/*.py")}
    found |= {path.stem: (ENTRY, path) for path in PACKAGE.glob("*.py")}
    for folder in ("dags", "spark_jobs"):
        found |= {f"{folder}.{path.stem}": (ENTRY, path) for path in (ROOT / folder).glob("*.py")}
    return found


def _ours(name: str, modules: set[str]) -> str | None:
    """The project module a dotted import name refers to, if any."""
    parts = name.split(".")
    if parts[0] == "kinesis_replay":
        return next((c for c in (".".join(parts[1:3]), ".".join(parts[1:2])) if c in modules), None)
    for folder in ("dags", "spark_jobs"):
        if f"{folder}.{parts[0]}" in modules:
            return f"{folder}.{parts[0]}"
    return None


def imports(path: Path, modules: set[str]) -> tuple[set[str], set[str]]:
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
            if (module := _ours(name, modules)) is not None:
                ours.add(module)
            elif name.split(".")[0] not in ("kinesis_replay", "__future__") and _ours(name.split(".")[0], modules) is None:
                outside.add(name.split(".")[0])
    return ours, outside


def test_every_folder_of_the_package_is_a_layer() -> None:
    assert layer_folders() == sorted(ORDER[:-1]), "each folder of the package is a layer: place it in ORDER and docs/code-map.md"


def test_no_module_imports_from_a_higher_layer_or_a_forbidden_package() -> None:
    modules = sources()
    problems = []
    for module, (layer, path) in modules.items():
        ours, outside = imports(path, set(modules))
        problems += [
            f"{module} ({layer}) imports {dep} ({modules[dep][0]})" for dep in ours if ORDER.index(modules[dep][0]) > ORDER.index(layer)
        ]
        problems += [f"{module} imports {pkg}" for pkg in outside & FORBIDDEN.get(layer, set())]
        if module in SPARK_SIDE:
            problems += [f"{module} imports {pkg}" for pkg in outside & {"airflow"}]
    assert problems == []


def test_no_import_cycle() -> None:
    modules = sources()
    graph = {module: imports(path, set(modules))[0] - {module} for module, (_, path) in modules.items()}
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


def test_the_layers_are_read_from_the_folders() -> None:
    """Every module sits in the layer of its folder: the steps of the protocol are where a reader looks for them."""
    modules = sources()
    assert {"steps.plan", "steps.verify", "steps.commit", "adapters.kinesis_client", "core.config", "ui.status"} <= set(modules)
    assert {name: layer for name, (layer, _) in modules.items() if name.startswith("steps.")} == {
        f"steps.{p.stem}": "steps" for p in (PACKAGE / "steps").glob("*.py")
    }


def step_imports() -> dict[str, set[str]]:
    """Each step's sibling steps, by their short names, as its imports name them."""
    modules = sources()
    steps = {name: path for name, (_, path) in modules.items() if name.startswith("steps.") and name != "steps.__init__"}
    return {
        name.removeprefix("steps."): {dep.removeprefix("steps.") for dep in imports(path, set(modules))[0] if dep in steps} - {name}
        for name, path in steps.items()
    }


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor: 1 when it imports none of the graph's nodes, else one above the highest it imports (no cycles)."""
    found: dict[str, int] = {}

    def floor(node: str) -> int:
        if node not in found:
            found[node] = 1 + max((floor(dep) for dep in graph.get(node, ())), default=0)
        return found[node]

    for node in graph:
        floor(node)
    return found


def test_steps_import_only_the_siblings_named() -> None:
    """Steps share rules through core/ and adapters/, not through each other: each imports the siblings STEP_IMPORTS names."""
    found = step_imports()
    assert set(found) == set(STEP_IMPORTS), "each step has its row in STEP_IMPORTS, naming the siblings it may import and why"
    wrong = {step: sorted(deps) for step, deps in found.items() if deps != set(STEP_IMPORTS[step])}
    # A sibling not named: move the shared rule to core/ or adapters/. A sibling named and no longer imported: drop its entry.
    assert wrong == {}, "each step imports exactly the siblings its row of STEP_IMPORTS names"
    assert all(reason for row in STEP_IMPORTS.values() for reason in row.values()), "each allowed sibling says why"


def test_the_steps_are_two_floors() -> None:
    """The siblings on one floor, backfill, compaction, recovery, redecode and rebuild above them, and no third floor."""
    built = floors(step_imports())
    assert max(built.values()) <= STEP_FLOORS, built
    assert {step for step, floor in built.items() if floor == STEP_FLOORS} == {"backfill", "compaction", "recovery", "redecode", "rebuild"}
    assert floors({"recovery": {"backfill"}, "backfill": {"commit"}, "commit": set()})["recovery"] == 3  # a chain is seen


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    """The checks above can fail: an upward import, a framework in the core and a deferred import are all found."""
    bad = tmp_path / "state.py"
    bad.write_text("from kinesis_replay.steps import plan\nimport airflow\n\ndef f():\n    from kinesis_replay.steps.commit import x\n")
    modules = set(sources())
    ours, outside = imports(bad, modules)
    assert ours == {"steps.plan", "steps.commit"} and "airflow" in outside
    assert all(ORDER.index(sources()[dep][0]) > ORDER.index("core") for dep in ours)
