"""A Spark standalone master and its workers, each its own JVM, run with PySpark's ``spark-class``.

The installed PySpark package is a complete Spark distribution (``bin/spark-class``, ``jars/``), so
``SPARK_HOME`` is its directory and nothing else is downloaded. :mod:`netmon.cluster` starts these
daemons detached (their own session, output to a log file) and records their pids; this module
only knows how to start one, and how to ask the master which workers it has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DAEMON_MEMORY",
    "MASTER_CLASS",
    "WORKER_CLASS",
    "SparkStandaloneError",
    "WorkerSpec",
    "alive_workers",
    "master_state",
    "spark_class",
    "spark_home",
    "start_master",
    "start_worker",
    "wait_for_workers",
]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Heap of the master and worker daemons themselves (not of the executors, which ``--memory`` sets):
#: they only keep bookkeeping, and Spark's default of 1g each is a lot on a small shared machine.
DAEMON_MEMORY = "512m"


class SparkStandaloneError(RuntimeError):
    """A master or worker did not start or register; the message gives the reason in one line."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's resources and ports."""

    cores: int
    memory: str
    port: int
    webui_port: int


def spark_home() -> Path:
    """The installed PySpark package's directory: a Spark distribution of its own."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_class() -> Path:
    path = spark_home() / "bin" / "spark-class"
    if not path.is_file():
        raise SparkStandaloneError(f"spark-class not found at {path}: reinstall pyspark")
    return path


def _env(work_dir: Path, host: str) -> dict[str, str]:
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # the web UIs bind to this address (else 0.0.0.0) and advertise it (else the host's name)
        "SPARK_LOCAL_IP": host,
        "SPARK_PUBLIC_DNS": host,
        # no REST submission server: it would listen on the fixed port 6066 as well
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # no spark-env.sh of the package or the user's: the command line says everything
        "SPARK_CONF_DIR": str(work_dir / "conf"),
        "SPARK_LOCAL_DIRS": str(work_dir / "tmp"),
        # executors run netmon's Python functions: with this interpreter and its packages
        "PYSPARK_PYTHON": sys.executable,
    }
    env.pop("SPARK_ENV_LOADED", None)
    return env


def _spawn(args: list[str], host: str, work_dir: Path, log_file: Path) -> int:
    """Start ``spark-class ARGS`` detached; return its pid (``spark-class`` execs the JVM, so this
    is the JVM's pid)."""
    for sub in ("conf", "tmp"):
        (work_dir / sub).mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen(
            [str(spark_class()), *args],
            cwd=work_dir,
            env=_env(work_dir, host),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives `netmon cluster up`; Ctrl-C there must not reach it
        )
    return proc.pid


def start_master(host: str, port: int, webui_port: int, work_dir: Path, log_file: Path) -> int:
    """Start the master on ``spark://host:port`` (web UI and its JSON on ``webui_port``)."""
    args = [MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(webui_port)]
    return _spawn(args, host, work_dir, log_file)


def start_worker(master_url: str, host: str, spec: WorkerSpec, work_dir: Path, log_file: Path) -> int:
    """Start a worker offering ``spec.cores`` and ``spec.memory`` to the master at ``master_url``."""
    args = [
        WORKER_CLASS,
        master_url,
        "--cores",
        str(spec.cores),
        "--memory",
        spec.memory,
        "--host",
        host,
        "--port",
        str(spec.port),
        "--webui-port",
        str(spec.webui_port),
        "--work-dir",
        str(work_dir / "work"),
    ]
    return _spawn(args, host, work_dir, log_file)


def master_state(host: str, webui_port: int, timeout_s: float = 3.0) -> dict[str, Any]:
    """The master's own report (``/json/``: its status, workers, applications)."""
    url = f"http://{host}:{webui_port}/json/"
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - our own http URL
        state = json.loads(response.read())
    if not isinstance(state, dict):
        raise SparkStandaloneError(f"{url}: expected a JSON object")
    return state


def alive_workers(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The workers the master reports ALIVE (a restarted worker's old entry stays DEAD)."""
    return [w for w in state.get("workers", []) if isinstance(w, dict) and w.get("state") == "ALIVE"]


def wait_for_workers(host: str, webui_port: int, count: int, timeout_s: float) -> dict[str, Any]:
    """Return the master's state once it reports ``count`` workers ALIVE; else raise
    :class:`SparkStandaloneError` with what it reported last."""
    deadline = time.monotonic() + timeout_s
    seen = "no answer"
    while True:
        try:
            state = master_state(host, webui_port)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            seen = f"no answer from its web UI ({type(exc).__name__})"
        else:
            alive = len(alive_workers(state))
            if state.get("status") == "ALIVE" and alive >= count:
                return state
            seen = f"status {state.get('status')}, {alive} of {count} workers ALIVE"
        if time.monotonic() > deadline:
            raise SparkStandaloneError(
                f"the Spark master on {host}:{webui_port} did not report {count} workers ALIVE within "
                f"{timeout_s:.0f}s ({seen})"
            )
        time.sleep(0.5)
