"""The shape of the code a reviewer must trust most, measured from its source: ``python bench/structure.py``.

Prints the largest modules and classes of the package, dags/ and spark_jobs/; the lines inside ``raise`` statements in
the steps (error prose inside control flow); and the floors of the steps (the longest chain of steps importing steps).
Nothing is run but Python's own parser. The owner-record reads per plan and per commit are held by
tests/unit/test_root_reads.py.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plugins" / "kinesis_replay"
STEPS = PACKAGE / "steps"


def sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "dags").glob("*.py"), *(ROOT / "spark_jobs").glob("*.py")])


def largest_modules(count: int = 5) -> list[tuple[int, str]]:
    sized = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in sources()]
    return sorted(sized, reverse=True)[:count]


def largest_classes(count: int = 5) -> list[tuple[int, str]]:
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.name}"))
    return sorted(found, reverse=True)[:count]


def raise_lines(folder: Path = STEPS) -> dict[str, int]:
    """Lines spanned by ``raise`` statements, per module of ``folder``."""
    lines = {}
    for path in sorted(folder.glob("*.py")):
        spans = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.end_lineno is not None:
                spans.update(range(node.lineno, node.end_lineno + 1))
        lines[path.stem] = len(spans)
    return lines


def step_imports() -> dict[str, set[str]]:
    steps = {p.stem for p in STEPS.glob("*.py")} - {"__init__"}
    found: dict[str, set[str]] = {}
    for name in steps:
        tree = ast.parse((STEPS / f"{name}.py").read_text())
        used = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "kinesis_replay.steps":
                    used |= {a.name for a in node.names}
                elif node.module.startswith("kinesis_replay.steps."):
                    used.add(node.module.rsplit(".", 1)[1])
        found[name] = used & steps - {name}
    return found


def floors() -> tuple[int, list[str]]:
    """The longest chain of steps importing steps, and the chain (a step importing none is on floor 1)."""
    imports = step_imports()

    @cache
    def chain(name: str) -> tuple[str, ...]:
        below = [chain(other) for other in sorted(imports[name])]
        return (name, *max(below, key=len, default=()))

    longest = max((chain(n) for n in imports), key=len)
    return len(longest), list(longest)


def main() -> None:
    print("largest modules (lines):")
    for size, name in largest_modules():
        print(f"  {size:5d}  {name}")
    print("largest classes (lines):")
    for size, name in largest_classes():
        print(f"  {size:5d}  {name}")
    lines = raise_lines()
    print(f"lines inside raise statements in steps/: {sum(lines.values())} ({', '.join(f'{k} {v}' for k, v in lines.items() if v)})")
    depth, chain = floors()
    print(f"floors inside steps/: {depth} ({' -> '.join(chain)})")


if __name__ == "__main__":
    main()
