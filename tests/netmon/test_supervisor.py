"""The supervisor with small real child processes: restart backoff, once-services, ordered stop,
group cleanup, the state file and the lock."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from netmon.config import ConfigError
from netmon.config.services import ServicesConfig
from netmon.supervisor import (
    Backoff,
    Service,
    Supervisor,
    SupervisorRunning,
    group_alive,
    monitor_services,
    read_state,
)
from tests.conftest import free_port

#: a child that appends "<name> <event> <pid>" lines to a file: started; on SIGTERM "term", exits;
#: takes its parent's death as netmon's commands do (mode "ignore": notes "hup", ignores it too)
CHILD = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    name, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    def note(event):
        with open(out, "a") as f:
            f.write(f"{name} {event} {os.getpid()}\\n")
    def term(*_):
        note("term")
        if mode == "ignore":
            return
        time.sleep(0.2)
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    if mode == "ignore":
        signal.signal(signal.SIGHUP, lambda *_: note("hup"))
    else:
        from netmon.orphans import parent_death_as_sigterm
        parent_death_as_sigterm()
    if mode == "grandchild":
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        note(f"kid{kid.pid}")
    note("start")
    if mode == "exit":
        sys.exit(int(sys.argv[4]))
    while True:
        time.sleep(0.05)
    """
)


def _service(tmp_path: Path, name: str, mode: str = "run", *extra: str, once: bool = False) -> Service:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "events.txt"
    return Service(name, (sys.executable, str(script), name, str(out), mode, *extra), once=once)


def _events(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "events.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _wait(predicate, timeout_s: float = 15.0, step_s: float = 0.05, sup: Supervisor | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sup is not None:
            sup.poll()
        if predicate():
            return
        time.sleep(step_s)
    raise AssertionError("condition not met in time")


def _supervisor(tmp_path: Path, services: list[Service], **kwargs: Any) -> Supervisor:
    return Supervisor(
        services, state_path=tmp_path / "up" / "state.json", log_dir=tmp_path / "logs", **kwargs
    )


def test_backoff_doubles_caps_and_starts_over_after_a_stable_run() -> None:
    b = Backoff(0.5, 3.0, stable_s=10.0)
    assert [b.next(ran_s=1.0) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.next(ran_s=10.0) == 0.5
    assert b.next(ran_s=0.1) == 1.0


def test_dead_child_is_restarted_after_growing_waits(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [_service(tmp_path, "flaky", "exit", "3")], backoff_s=0.4, backoff_max_s=1.2)
    sup.start()
    try:
        starts: list[float] = []
        seen = 0
        deadline = time.monotonic() + 30
        while len(starts) < 5 and time.monotonic() < deadline:
            sup.poll()
            events = [e for e in _events(tmp_path) if e[1] == "start"]
            if len(events) > seen:
                starts.append(time.monotonic())
                seen = len(events)
            time.sleep(0.01)
        assert len(starts) == 5
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        # waits 0.4, 0.8, 1.2 (capped), 1.2; plus a Python start-up each
        for gap, wait in zip(gaps, [0.4, 0.8, 1.2, 1.2], strict=True):
            assert wait <= gap < wait + 0.8, gaps
        state = read_state(tmp_path / "up" / "state.json")
        assert state is not None
        (flaky,) = state["services"]
        assert flaky["name"] == "flaky"
        assert flaky["restarts"] == 4
        assert flaky["last_exit"] == 3
        assert state["supervisor"]["pid"] == os.getpid()
    finally:
        sup.stop()


def test_once_service_that_exits_zero_is_done_not_restarted(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [_service(tmp_path, "replay", "exit", "0", once=True)], backoff_s=0.1)
    sup.start()
    _wait(lambda: sup.states()[0].state == "done", sup=sup)
    time.sleep(0.5)
    sup.poll()
    assert [e[1] for e in _events(tmp_path)] == ["start"]
    assert sup.states()[0].restarts == 0
    assert sup.stop() == ["replay: done"]


def test_stop_runs_in_reverse_order_and_leaves_no_process(tmp_path: Path) -> None:
    services = [
        _service(tmp_path, "pipeline", "grandchild"),
        _service(tmp_path, "dashboard", "ignore"),
        _service(tmp_path, "capture", "run"),
    ]
    sup = _supervisor(tmp_path, services, stop_timeout_s=1.0)
    sup.start()
    _wait(lambda: sum(e[1] == "start" for e in _events(tmp_path)) == 3)
    pids = {s.name: s.pid for s in sup.states()}
    kid = next(int(e[1][3:]) for e in _events(tmp_path) if e[1].startswith("kid"))
    lines = sup.stop()
    assert [e[0] for e in _events(tmp_path) if e[1] == "term"] == ["capture", "dashboard", "pipeline"]
    assert lines[0] == "capture: stopped (exit 0)"
    assert lines[1] == "dashboard: killed (no exit 1 s after SIGTERM) (exit signal SIGKILL)"
    assert lines[2] == "pipeline: stopped (exit 0)"
    for pid in [*pids.values(), kid]:
        assert pid is not None
        assert not group_alive(pid) or pid == kid
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid
    state = read_state(tmp_path / "up" / "state.json")
    assert state is not None
    assert {s["name"]: s["state"] for s in state["services"]} == {
        "pipeline": "stopped",
        "dashboard": "stopped",
        "capture": "stopped",
    }


def _zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] == "Z"


def test_killed_child_takes_its_group_down_and_is_restarted(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [_service(tmp_path, "pipeline", "grandchild")], backoff_s=0.2)
    sup.start()
    try:
        _wait(lambda: any(e[1] == "start" for e in _events(tmp_path)))
        first = sup.states()[0].pid
        assert first is not None
        kid = next(int(e[1][3:]) for e in _events(tmp_path) if e[1].startswith("kid"))
        os.kill(first, signal.SIGKILL)
        _wait(lambda: sup.states()[0].restarts == 1 and sup.states()[0].pid is not None, sup=sup)
        assert not Path(f"/proc/{kid}").exists() or _zombie(kid)
        assert sup.states()[0].last_exit == -signal.SIGKILL
        assert sup.states()[0].pid != first
    finally:
        sup.stop()


def test_a_second_supervisor_on_the_same_state_is_refused(tmp_path: Path) -> None:
    first = _supervisor(tmp_path, [])
    first.start()
    try:
        with pytest.raises(SupervisorRunning, match=f"already running \\(pid {os.getpid()}\\)"):
            _supervisor(tmp_path, []).start()
    finally:
        first.stop()
    again = _supervisor(tmp_path, [])
    again.start()
    again.stop()


def test_services_config_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"^\[services\] restart_backoff_max_s: expected a number >= "):
        ServicesConfig(restart_backoff_s=5.0, restart_backoff_max_s=1.0)
    with pytest.raises(ConfigError, match=r"^\[services\] poll_s: expected a number > 0, got 0"):
        ServicesConfig(poll_s=0)


def test_monitor_services_order_reuse_and_replay_resume(tmp_path: Path) -> None:
    import fcntl
    import socket

    from netmon.config import load_config

    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    cfg = load_config(None, env=env).replace(dashboard={"port": free_port()})
    services, reused = monitor_services(cfg, ifaces=("eth0", "eth1"), capture_args=("--bpf", "udp"))
    assert [s.name for s in services] == ["pipeline", "alerts", "dashboard", "capture-eth0", "capture-eth1"]
    status = str(tmp_path / "data" / "status" / "capture-eth0.json")
    assert services[3].argv[-7:] == ("--iface", "eth0", "--quiet", "--status-file", status, "--bpf", "udp")
    assert reused == {}
    # a running pipeline (holding the data directory's lock) and a dashboard on its port are reused
    (tmp_path / "data").mkdir()
    with (tmp_path / "data" / "pipeline.lock").open("w") as lock, socket.socket() as dash:
        lock.write("4242\n")
        lock.flush()
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        dash.bind((cfg.dashboard.host, cfg.dashboard.port))
        dash.listen()
        services, reused = monitor_services(
            cfg, replay="x.pcap", replay_args=("--speed", "2"), run_id="1-abcdef"
        )
    assert reused == {"pipeline": 4242, "dashboard": None}
    assert [s.name for s in services] == ["alerts", "replay"]
    replay = services[-1]
    assert replay.once
    assert replay.argv[3:] == ("replay", "x.pcap", "--quiet", "--resume", "1-abcdef", "--speed", "2")


# -- a supervisor killed outright (SIGKILL) -------------------------------------------------------

#: a supervisor of three children, as `netmon up` runs them: one with a grandchild in its group, one
#: that ignores SIGTERM, one that stops on it; polled from the main thread until killed, with more
#: threads beside it (netmon up's metrics server, Kafka's): the kernel signals an orphan once per
#: thread it hands it to
SUPERVISOR = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    from netmon.supervisor import Service, Supervisor
    for _ in range(4):
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    tmp, child = Path(sys.argv[1]), sys.argv[2]
    modes = (("pipeline", "grandchild"), ("dashboard", "ignore"), ("capture", "run"))
    services = [Service(n, (sys.executable, child, n, str(tmp / "events.txt"), m)) for n, m in modes]
    sup = Supervisor(services, state_path=tmp / "up" / "state.json", log_dir=tmp / "logs", stop_timeout_s=3.0)
    sup.start()
    while True:
        sup.poll()
        time.sleep(0.1)
    """
)


def _descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, with its command line (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if stat:
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        todo += children.get(pid, [])
    return found


def _running(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not _zombie(pid)


def _killed_supervisor(tmp_path: Path) -> tuple[subprocess.Popen[bytes], dict[int, str]]:
    """The :data:`SUPERVISOR` script running its three children (and the grandchild), and every
    process below it."""
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "sup.py").write_text(SUPERVISOR)
    sup = subprocess.Popen(
        [sys.executable, str(tmp_path / "sup.py"), str(tmp_path), str(tmp_path / "child.py")],
        cwd=Path(__file__).resolve().parents[2],
    )
    _wait(lambda: sum(e[1] == "start" for e in _events(tmp_path)) == 3)
    tree = _descendants(sup.pid)
    assert sum("child.py" in c for c in tree.values()) == 3 and any("sleep(600)" in c for c in tree.values())
    assert sum("netmon.orphans" in c for c in tree.values()) == 1  # the guard
    return sup, tree


def test_a_supervisor_killed_outright_leaves_no_process(tmp_path: Path) -> None:
    sup, tree = _killed_supervisor(tmp_path)
    try:
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        # the children get SIGHUP from the kernel; the guard waits stop_timeout_s (3 s), then
        # SIGTERM to what is left (the grandchild, the child ignoring it all), SIGKILL 5 s later
        _wait(lambda: not any(_running(pid) for pid in tree), timeout_s=30, step_s=0.2)
    finally:
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    # one SIGTERM each, as a clean stop sends, however many SIGHUPs the kernel sent; the guard's
    # for the one ignoring its SIGHUPs
    terms = collections.Counter(e[0] for e in _events(tmp_path) if e[1] == "term")
    assert terms == {"capture": 1, "pipeline": 1, "dashboard": 1}
    assert sum(e[:2] == ["dashboard", "hup"] for e in _events(tmp_path)) >= 1
    guard_log = (tmp_path / "logs" / "up-guard.log").read_text()
    assert "is gone; stopping its processes" in guard_log and "stopped: " in guard_log


def test_the_next_supervisor_stops_what_a_killed_one_and_its_guard_left(tmp_path: Path) -> None:
    sup, tree = _killed_supervisor(tmp_path)
    guard = next(pid for pid, command in tree.items() if "netmon.orphans" in command)
    kid = next(pid for pid, command in tree.items() if "sleep(600)" in command)
    dashboard = next(pid for pid, command in tree.items() if " dashboard " in command)
    try:
        os.kill(guard, signal.SIGKILL)
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        # nobody is left to finish the job: the grandchild and the child ignoring SIGTERM stay
        _wait(lambda: sum(_running(pid) for pid in tree) == 2, timeout_s=15)
        assert _running(kid) and _running(dashboard)
        state = read_state(tmp_path / "up" / "state.json")
        assert state is not None
        other = _supervisor(tmp_path, [], stop_timeout_s=1.0)
        other.lock()
        try:
            lines = other.clean_leftovers()
            assert not any(_running(pid) for pid in tree)
            assert lines == [
                f"stopped what the netmon up killed before (pid {sup.pid}) left running: "
                f"dashboard (pid {dashboard}) and 1 other process"
            ]
            assert other.clean_leftovers() == []  # nothing left
        finally:
            other.stop()
    finally:
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
