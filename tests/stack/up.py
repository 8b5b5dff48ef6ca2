"""`make up` / `make down`: the local stack, a producer that keeps writing, and Airflow with the DAGs scheduled.

python tests/stack/up.py start     # prints the UI address and how to log in
python tests/stack/up.py stop
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STATE = ROOT / ".stack" / "up"
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests")]

from stack import local_stack  # noqa: E402
from stack.producer import ensure_stream, kinesis_client  # noqa: E402

# Airflow's own components, as `make up` runs them (and as tests/integration/test_live.py starts them): one process
# group each, so that stopping a component stops the task processes and spark-submit jobs it started too.
COMPONENTS = {
    "api-server": ["airflow", "api-server", "--host", "127.0.0.1"],
    "scheduler": ["airflow", "scheduler"],
    "dag-processor": ["airflow", "dag-processor"],
    "triggerer": ["airflow", "triggerer"],
}


def airflow_env(port: int, home: Path | None = None, config: Path | None = None) -> dict[str, str]:
    """The environment of every Airflow component: the LocalExecutor, whose task processes reach the api-server's
    execution API on ``port``, with its metadata database in ``home``."""
    base = f"http://127.0.0.1:{port}"
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home or STATE / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",  # the LocalExecutor otherwise starts 32 workers
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # the pipelines run on their schedule at once
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
        # A task's supervisor gives the execution API 5 s per call by default; on a busy 2-core machine the api-server's
        # first answers took longer, and the task failed before it started ("httpx.ReadTimeout" in the scheduler's log).
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "stack.airflow_sqlite.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "stack.airflow_sqlite.CONNECT_ARGS",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
        "KINESIS_REPLAY_CONFIG": str(config) if config else os.environ.get("KINESIS_REPLAY_CONFIG", str(ROOT / "dags" / "pipelines.yaml")),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _spawn(name: str, command: list[str], env: dict[str, str], logs: Path = STATE) -> subprocess.Popen[bytes]:
    log = (logs / f"{name}.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (logs / f"{name}.pid").write_text(str(proc.pid))
    return proc


def migrate(env: dict[str, str]) -> None:
    """Create (or upgrade) the metadata database in the environment's AIRFLOW_HOME."""
    import sqlite3

    home = Path(env["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    database = home / "airflow.db"  # SQLite, Airflow's default: WAL mode stays with the file (see stack/airflow_sqlite.py)
    if database.exists() and "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env:
        with contextlib.closing(sqlite3.connect(database)) as db:
            db.execute("PRAGMA journal_mode=WAL")


# Started once the api-server answers: they start task processes, whose supervisors call its execution API at once.
# Started together, on a busy 2-core machine, the first task found nothing listening ("Connection refused") and failed.
NEED_API = ("scheduler", "triggerer")


def start_airflow(env: dict[str, str], logs: Path, components: tuple[str, ...] = tuple(COMPONENTS)) -> dict[str, subprocess.Popen[bytes]]:
    """Start Airflow's components, each in a process group of its own, logging to ``logs/<name>.log`` (pid in ``<name>.pid``):
    the api-server and DAG processor first, the scheduler and triggerer when the api-server answers.

    Every process started is in the result, even when the api-server fails to answer (then RuntimeError is raised
    after stopping them)."""
    logs.mkdir(parents=True, exist_ok=True)
    port = env["AIRFLOW__API__PORT"]
    commands = {name: COMPONENTS[name] + (["--port", port] if name == "api-server" else []) for name in components}
    procs = {name: _spawn(name, command, env, logs) for name, command in commands.items() if name not in NEED_API}
    if "api-server" in procs:
        try:
            local_stack.wait_for_http(f"{env['AIRFLOW__API__BASE_URL']}/api/v2/monitor/health", 180, "Airflow's api-server",
                                      procs["api-server"], logs / "api-server.log")  # fmt: skip
        except RuntimeError:
            stop_airflow([p.pid for p in procs.values()])
            raise
    procs.update({name: _spawn(name, command, env, logs) for name, command in commands.items() if name in NEED_API})
    return procs


def stop_airflow(pids: list[int]) -> list[str]:
    """Stop the components and everything they started (task processes, spark-submit and its JVM, which run in
    sessions of their own): SIGTERM to each process group and to every descendant, then SIGKILL to whatever is left.

    Returns the processes that had to be killed, described: none when every process stopped on SIGTERM.
    """
    import psutil

    family: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            family += [root, *root.children(recursive=True)]
    groups = set(pids)  # each component leads a process group of its own (_spawn starts a new session)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    # One SIGTERM per process, never two: a second one tells the scheduler not to wait for its LocalExecutor workers,
    # and arriving while it shuts them down leaves it and them waiting on each other until SIGKILL.
    for proc in family:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            if os.getpgid(proc.pid) not in groups:
                proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=60)  # a loaded machine: the scheduler stops its workers first
    killed = []
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
            proc.kill()
    psutil.wait_procs(alive, timeout=10)
    return killed


def clear_demo_output() -> None:
    """Remove the shipped demo's output, when the shipped config is the one in use.

    kinesalite and moto keep their streams and tables in memory, so each `make up` has a new stream and an
    empty state table. The output of an earlier `make up` holds committed batches of a stream that is gone,
    and the pipeline would rightly refuse to start over on top of them.
    """
    import shutil

    import yaml

    from kinesis_replay.core.roots import normalize_output

    shipped = ROOT / "dags" / "pipelines.yaml"
    if Path(os.environ.get("KINESIS_REPLAY_CONFIG", shipped)).resolve() != shipped.resolve():
        return
    for entry in yaml.safe_load(shipped.read_text())["pipelines"]:
        output = Path(normalize_output(entry["output"]))
        if output.is_dir():
            shutil.rmtree(output)
            print(f"removed {output}, the demo output of an earlier `make up` (its stream and state table were in memory)")


def create_pools(env: dict[str, str]) -> None:
    """Each pipeline's replays wait for a slot of its pool, which Airflow does not create: a missing one stalls them for good."""
    from kinesis_replay.core.airflow_names import pool_set_args
    from kinesis_replay.core.config import load_pipelines

    for pool in sorted({p.pool for p in load_pipelines(env["KINESIS_REPLAY_CONFIG"]).pipelines}):
        subprocess.run(pool_set_args(pool), env=env, check=True, capture_output=True)
        print(f"created the Airflow pool {pool} (1 slot): one replay at a time reads the stream")


def start(port: int, rate: float) -> None:
    stop(quiet=True)
    STATE.mkdir(parents=True, exist_ok=True)
    clear_demo_output()
    stack = local_stack.start(STATE / "stack")
    os.environ.update(stack.env())
    ensure_stream(kinesis_client(), "demo", 4)
    _spawn(
        "producer",
        [sys.executable, str(HERE / "producer.py"), "--stream", "demo", "--count", "100000000", "--rate", str(rate)],
        dict(os.environ),
    )
    env = airflow_env(port)
    migrate(env)
    create_pools(env)
    start_airflow(env, STATE)
    passwords = STATE / "airflow" / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())["admin"] if passwords.exists() else "(see the log)"
    print(f"""
kinesis-replay is up.
  Airflow UI:    http://127.0.0.1:{port}   (user admin, password {password})
  Pipelines:     kinesis_replay_demo runs every 5 minutes; kinesis_replay_backfill_demo is triggered by hand
  Read budget:   their replays take turns in the pool kinesis_replay_demo (1 slot)
  Status page:   Browse > Kinesis replay
  Producer:      {rate:g} records/s into the stream "demo"; output in /tmp/kinesis-replay/demo
  Logs:          {STATE}
Stop everything with `make down`.""")


def stop(quiet: bool = False) -> None:
    # All at once: each component takes many seconds to shut down. "airflow": the standalone process of an older `make up`.
    pid_files = {name: STATE / f"{name}.pid" for name in (*COMPONENTS, "airflow", "producer")}
    running = {name: pid_file for name, pid_file in pid_files.items() if pid_file.exists()}
    stop_airflow([int(pid_file.read_text()) for pid_file in running.values()])
    for pid_file in running.values():
        pid_file.unlink()
    stopped = [*running, *local_stack.stop(STATE / "stack")]
    if not quiet:
        print("stopped: " + (", ".join(stopped) or "nothing was running"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("--port", type=int, default=int(os.environ.get("AIRFLOW_PORT", 8080)))
    parser.add_argument("--rate", type=float, default=20.0, help="records per second the producer writes")
    args = parser.parse_args(argv)
    if args.command == "start":
        start(args.port, args.rate)
    else:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
