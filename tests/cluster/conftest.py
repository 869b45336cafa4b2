"""The cluster tests' fixture: ``netmon cluster up`` in a temporary state directory, and helpers to
run ``netmon`` against it, write its config files and kill its processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netmon.cluster import ClusterProcess
from netmon.results import read_results

NETMON = Path(sys.executable).with_name("netmon")


@dataclass
class Cluster:
    env: dict[str, str]
    record: dict[str, Any]
    tmp: Path

    @property
    def bootstrap(self) -> str:
        return str(self.record["bootstrap_servers"])

    @property
    def master_url(self) -> str:
        return str(self.record["master_url"])

    def netmon(
        self, *args: str, config: Path | None = None, timeout: float = 240, data_dir: Path | None = None
    ) -> subprocess.CompletedProcess:
        """``netmon [--config CONFIG] ARGS`` (``data_dir``: instead of the cluster's; the
        environment's ``NETMON_DATA_DIR`` would win over a config file's)."""
        cmd = [str(NETMON), *(["--config", str(config)] if config else []), *args]
        return subprocess.run(cmd, env=self._env(data_dir), capture_output=True, text=True, timeout=timeout)

    def popen(self, *args: str, config: Path, data_dir: Path | None = None) -> subprocess.Popen[str]:
        """``netmon --config CONFIG ARGS`` running in the background (output to pipes)."""
        return subprocess.Popen(
            [str(NETMON), "--config", str(config), *args],
            env=self._env(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _env(self, data_dir: Path | None) -> dict[str, str]:
        return self.env if data_dir is None else {**self.env, "NETMON_DATA_DIR": str(data_dir)}

    def config(self, name: str, **kafka: Any) -> Path:
        """A netmon.toml pointing at the cluster with these ``[kafka]`` keys."""
        return self.toml(name, kafka=kafka)

    def toml(self, name: str, **sections: dict[str, Any]) -> Path:
        """A netmon.toml with these sections; ``[kafka] bootstrap_servers`` is the cluster's."""
        sections = {**sections, "kafka": {"bootstrap_servers": self.bootstrap, **sections.get("kafka", {})}}
        text = ""
        for section, keys in sections.items():
            text += f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        path = self.tmp / name
        path.write_text(text)
        return path

    def process(self, name: str) -> ClusterProcess:
        (found,) = [ClusterProcess(**p) for p in self.record["processes"] if p["name"] == name]
        return found

    def kill(self, name: str) -> list[int]:
        """``kill -9`` a process of the cluster and the processes it started (a worker's executors),
        as a host that loses power would; wait until they are gone. Returns their pids."""
        proc = self.process(name)
        assert proc.alive(), f"{name} is not running"
        pids = [proc.pid, *_children(proc.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(running(pid) for pid in pids):
            assert time.monotonic() < deadline, f"{name} still running after SIGKILL"
            for pid in pids:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        return pids


def traffic_of(data_dir: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """A pipeline's traffic rows as ``traffic_per_window`` gives them: (window start ns, proto) ->
    (packets, bytes); a window written twice fails."""
    table = read_results(data_dir / "results" / "traffic")
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for row in [] if table is None else table.to_pylist():
        key = (int(row["window_start"].timestamp() * 1_000_000) * 1000, int(row["proto"]))
        assert key not in out, f"window {key} written twice"
        out[key] = (int(row["packets"]), int(row["bytes"]))
    return out


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (by the parent pid in ``/proc/*/stat``)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        todo += kids
    return found


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def running_cluster(tmp: Path, brokers: int = 3, workers: int = 1) -> Iterator[Cluster]:
    """``netmon cluster up`` in ``tmp``; on the way out ``netmon cluster down``, then SIGKILL for
    anything of the record still alive, whatever the tests did."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_") or k == "NETMON_CACHE_DIR"}
    env.update(NETMON_STATE_DIR=str(tmp / "state"), NETMON_DATA_DIR=str(tmp / "data"))
    up = subprocess.run(
        [str(NETMON), "cluster", "up", "--brokers", str(brokers), "--workers", str(workers), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    record_file = tmp / "state" / "cluster" / "cluster.json"
    try:
        assert up.returncode == 0, up.stderr
        record = json.loads(up.stdout)
        assert record["reused"] is False
        yield Cluster(env, record, tmp)
    finally:
        subprocess.run(
            [str(NETMON), "cluster", "down", "--grace", "10"], env=env, capture_output=True, timeout=120
        )
        if record_file.exists():
            for p in json.loads(record_file.read_text())["processes"]:
                proc = ClusterProcess(**p)
                if proc.alive():
                    os.kill(proc.pid, 9)
