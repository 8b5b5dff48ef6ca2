"""README and docs/ link to each other by file and heading; the code's messages cite docs sections by name.

Every relative link must name a file that exists and, after `#`, a heading of it (GitHub's anchor of the heading);
every section a message, a comment or a config cites as `docs/<file>.md: "<heading>"` (or `README: "..."`)
must be a heading of that file. A heading renamed or moved without its links fails here, naming both.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CITED = re.compile(r'\b(README|docs/[a-z-]+\.md)[:,] "([^"]+)"')
CODE = ["plugins", "dags", "spark_jobs", "bench", "tests", "Makefile", "docker-compose.yml", ".env.example"]


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def headings(path: Path) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", without_code_blocks(path.read_text()), flags=re.M)]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors: lower case, punctuation dropped, spaces as '-', '-1', '-2'... after a repeated one."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_docs_are_where_readme_says() -> None:
    assert len(DOCS) >= 10, f"README and the docs/ files it maps: found {[str(p.relative_to(ROOT)) for p in DOCS]}"
    readme = (ROOT / "README.md").read_text()
    for doc in DOCS[1:]:
        assert f"](docs/{doc.name})" in readme, f"docs/{doc.name} is missing from README's map of the docs"


def test_every_relative_link_names_a_file_and_a_heading_that_exist() -> None:
    broken = []
    for doc in DOCS:
        for target in LINK.findall(without_code_blocks(doc.read_text())):
            if re.match(r"[a-z]+:", target):  # http(s), mailto
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            where = f"{doc.relative_to(ROOT)} links to {target}"
            if not path.exists():
                broken.append(f"{where}: no file {path}")
            elif anchor and anchor not in anchors(path):
                broken.append(f"{where}: no heading with that anchor in {path.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_every_docs_section_the_code_cites_is_a_heading_there() -> None:
    cited = []
    for top in CODE:
        base = ROOT / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file() and p.suffix in {".py", ".yaml", ".yml", ""}]
        for path in files:
            if "node_modules" in path.parts or path == Path(__file__).resolve():
                continue
            text = path.read_text(errors="replace")
            for file, heading in CITED.findall(re.sub(r"'\s*\n\s*'|\"\s*\n\s*\"", "", text)):
                cited.append((path.relative_to(ROOT), file, heading))
    assert len(cited) >= 6, f"the code cites docs sections in at least six places; found {cited}"
    wrong = [
        f"{where} cites {file}: {heading!r}, not a heading of {file}"
        for where, file, heading in cited
        if heading not in headings(ROOT / (f"{file}.md" if file == "README" else file))
    ]
    assert not wrong, "\n".join(wrong)
