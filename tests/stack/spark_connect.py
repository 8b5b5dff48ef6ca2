"""A Spark Connect server on a local master, started and stopped by the project's own code: the replay job runs as its
client (replay_job.py --remote). Used by tests/integration/test_spark_connect.py and `make bench-connect`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from stack import local_stack


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live descendants, with what each reaped (the server's Python workers)."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            t = process.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


class ConnectServer:
    """A Spark Connect server on a local master, from the pyspark this venv runs, its Python workers this venv's Python."""

    def __init__(self, work: Path, env: dict[str, str], master: str = "local[2]") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.port = local_stack.free_port()
        self.env = {
            **env, "SPARK_HOME": str(self.home), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(work / "connect-logs"), "SPARK_PID_DIR": str(work / "connect-pids"),
        }  # fmt: skip
        self.url = f"sc://127.0.0.1:{self.port}"
        self.master = master

    def start(self) -> dict[str, float]:
        """Start the server (spark-daemon detaches it) and wait for its first answer: how long that took, its CPU so far."""
        started = time.monotonic()
        subprocess.run(
            [str(self.home / "sbin" / "start-connect-server.sh"), "--master", self.master, "--conf", "spark.ui.enabled=false",
             "--conf", f"spark.connect.grpc.binding.port={self.port}"],
            env=self.env, check=True, capture_output=True,
        )  # fmt: skip
        pid_files = list(Path(self.env["SPARK_PID_DIR"]).glob("*SparkConnectServer*.pid"))
        self.pid = int(pid_files[0].read_text())
        first_answer = f"from pyspark.sql import SparkSession; SparkSession.builder.remote({self.url!r}).getOrCreate().range(1).collect()"
        subprocess.run([sys.executable, "-c", first_answer], env=self.env, check=True, capture_output=True, timeout=300)
        return {"seconds": time.monotonic() - started, "cpu": tree_cpu(self.pid)}

    def stop(self) -> None:
        """Stop the server (SIGTERM through Spark's script; its Python workers go with it)."""
        subprocess.run([str(self.home / "sbin" / "stop-connect-server.sh")], env=self.env, capture_output=True)
