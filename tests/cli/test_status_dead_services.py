"""``netmon status`` after ``netmon up`` was killed outright: services whose process is gone are ``dead``.

``netmon up`` killed with SIGKILL leaves its last state file, every service "running" with its
pid; the services themselves exit (parent-death signal, the guard). ``netmon status`` checks each
recorded pid: gone, a zombie, or a process that started after the service did (the pid went to
another process) is shown ``dead``, not running. First over state files written by hand with real
processes in each case, then end to end: a real ``netmon up --replay`` of a generated capture
(the pipeline a stand-in holding the data directory's lock, so it is reused and no Spark starts;
Kafka a closed port, so the replay waits for it), killed with ``kill -9``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli
from netmon.supervisor import read_state, service_alive
from tests.conftest import REPO_ROOT, free_port

#: holds the pipeline's lock on a data directory as a running pipeline does, until killed
HOLDER = """
import fcntl, os, sys, time
lock = open(sys.argv[1], "a+")
fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
lock.seek(0); lock.truncate(); lock.write(f"{os.getpid()}\\n"); lock.flush()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _sleeper(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    procs.append(p)
    return p


def _gone_pid() -> int:
    """The pid of a process that ran and was reaped: no process has it (for a while)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _service(name: str, state: str, pid: int | None, started: float | None) -> dict[str, Any]:
    return {
        "name": name,
        "command": "",
        "state": state,
        "pid": pid,
        "started": started,
        "restarts": 0,
        "last_exit": None,
        "next_start": None,
        "log": "",
    }


def _status(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["status", *args], env=env)
    return result.exit_code, result.output


def _rows(output: str) -> dict[str, list[str]]:
    """The table of ``netmon status``: service -> its columns."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("SERVICE"))
    return {
        line.split()[0]: line.split()[1:] for line in lines[start + 1 :] if not line.startswith("pipeline:")
    }


def test_status_marks_services_whose_process_is_gone_or_another_as_dead(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    now = time.time()
    live = _sleeper(sleepers)
    recycled = _sleeper(sleepers)  # stands for a pid handed on to a new process
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    sleepers.append(zombie)
    while (
        Path(f"/proc/{zombie.pid}/stat").exists()
        and " Z " not in Path(f"/proc/{zombie.pid}/stat").read_text()
    ):
        time.sleep(0.02)  # exited, not reaped yet
    gone = _gone_pid()
    services = [
        _service("broker", "reused", live.pid, None),
        _service("pipeline", "running", live.pid, now),
        _service("alerts", "running", gone, now - 60),
        _service("dashboard", "running", recycled.pid, now - 3600),  # recorded an hour before it started
        _service("capture-eth0", "running", zombie.pid, now),
        _service("replay", "waiting", None, None),
        _service("other", "reused", gone, None),
    ]
    path = tmp_path / "state" / "up" / "state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"supervisor": {"pid": gone, "started": now - 60}, "services": services}))
    env = {
        "NETMON_STATE_DIR": str(tmp_path / "state"),
        "NETMON_DATA_DIR": str(tmp_path / "data"),
        "NETMON_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
    }
    code, output = _status(env)
    assert code == 3 and output.splitlines()[0] == "netmon up: not running", output
    rows = _rows(output)
    assert {name: cols[0] for name, cols in rows.items()} == {
        "broker": "reused",
        "pipeline": "running",
        "alerts": "dead",
        "dashboard": "dead",
        "capture-eth0": "dead",
        "replay": "waiting",
        "other": "dead",
    }, output
    assert rows["alerts"][1] == str(gone) and rows["alerts"][2] == "-"  # its pid kept, no uptime
    code, output = _status(env, "--json")
    body = json.loads(output)
    shown = {s["name"]: (s["state"], s.get("recorded_state")) for s in body["services"]}
    assert shown["dashboard"] == ("dead", "running") and shown["other"] == ("dead", "reused")
    assert shown["pipeline"] == ("running", None)
    # the state file itself is left as netmon up wrote it
    assert [s["state"] for s in (read_state(path) or {})["services"]][:3] == ["reused", "running", "running"]


def test_service_alive_tells_a_recorded_process_from_another_with_its_pid(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    before = time.time() - 3600
    p = _sleeper(sleepers)
    assert service_alive(p.pid, time.time()) and service_alive(p.pid, None)
    assert not service_alive(p.pid, before)  # started an hour after the one recorded
    p.kill()
    p.wait()
    assert not service_alive(p.pid, None) and not service_alive(_gone_pid())


def _wait(check: Any, timeout_s: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; netmon up said:\n{log.read_text()[-3000:]}")


def test_status_after_netmon_up_is_killed_shows_its_services_dead(tmp_path: Path) -> None:
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    capture = tmp_path / "capture.pcap"
    toml = tmp_path / "netmon.toml"
    toml.write_text(
        f'[paths]\ndata_dir = "{data}"\nstate_dir = "{state}"\n'
        f'[kafka]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n'
        f"[metrics]\nport = {free_port()}\n"
        "[services]\nstop_timeout_s = 5.0\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    netmon = [sys.executable, "-m", "cli.main", "--config", str(toml)]
    subprocess.run(
        [*netmon, "samples", "generate", "--packets", "2000", "--out", str(capture)],
        check=True,
        capture_output=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data / "pipeline.lock")], stdout=subprocess.PIPE, env=env
    )
    log = tmp_path / "up.log"
    up: subprocess.Popen[bytes] | None = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        with log.open("wb") as out:
            up = subprocess.Popen(
                [*netmon, "up", "--replay", str(capture), "--no-dashboard", "--no-alerts"],
                stdout=out,
                stderr=out,
                cwd=REPO_ROOT,
                env=env,
            )

        def replay_running() -> int | None:
            services = {
                s["name"]: s for s in (read_state(state / "up" / "state.json") or {}).get("services", [])
            }
            replay = services.get("replay") or {}
            pid = replay.get("pid")
            return pid if replay.get("state") == "running" and pid and service_alive(pid) else None

        replay = _wait(replay_running, 60, "the replay to run", log)
        status = subprocess.run([*netmon, "status"], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert _rows(status.stdout)["replay"][:2] == ["running", str(replay)]
        os.kill(up.pid, signal.SIGKILL)
        assert up.wait(10) == -signal.SIGKILL
        # the replay goes with it (its parent-death signal), the state file stays as it was
        _wait(lambda: not service_alive(replay), 30, "the replay to exit", log)
        recorded = {
            s["name"]: s["state"] for s in (read_state(state / "up" / "state.json") or {})["services"]
        }
        assert recorded == {"pipeline": "reused", "replay": "running"}
        status = subprocess.run([*netmon, "status"], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
        assert status.returncode == 3 and status.stdout.splitlines()[0] == "netmon up: not running"
        rows = _rows(status.stdout)
        assert rows["replay"][:2] == ["dead", str(replay)], status.stdout
        assert rows["pipeline"][:2] == ["reused", str(holder.pid)], status.stdout  # still holds the lock
        holder.kill()
        holder.wait()
        status = subprocess.run([*netmon, "status"], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
        assert _rows(status.stdout)["pipeline"][:2] == ["dead", str(holder.pid)], status.stdout
    finally:
        if up is not None and up.poll() is None:
            up.kill()
            up.wait()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
