"""Child processes kept running: start in order, restart with backoff, stop in reverse order.

``netmon up`` runs every service (capture or replay, pipeline, dashboard, alert service) as a
child process given by its ``netmon ...`` command line, so this module imports none of them. Each
child gets a process group of its own and a log file ``<state>/logs/<name>.log`` (the console
stays quiet). A child that dies is started again after a backoff that doubles at each death in a
row (``[services] restart_backoff_s`` up to ``restart_backoff_max_s``) and falls back to the first
step once a child has run ``stable_s``. A child marked ``once`` (a replay) that exits 0 is done.

:meth:`Supervisor.stop` stops the children in the reverse order of their start — capture first,
pipeline last — each with SIGTERM to the child (which then stops its own work: the pipeline its
running batch), then, after ``stop_timeout_s``, SIGKILL to its whole group; whatever else is left
in the group is killed too, so no process outlives it.

Were the supervisor killed outright (SIGKILL), its children would not be left running either
(:mod:`netmon.orphans`): each child gets SIGTERM from the kernel when the supervisor's main thread
ends (start and poll from the main thread), a guard process then does what :meth:`Supervisor.stop`
would have done, and every child carries the supervisor's tag (:data:`netmon.orphans.TAG_ENV`),
by which the next supervisor on the state directory finds and stops what is still left
(:meth:`Supervisor.clean_leftovers`).

The state file (``<state>/up/state.json``, :func:`state_file`) says, per service, its pid, start
time, restarts and state; ``netmon status`` and ``/metrics`` read it. A supervisor killed outright
leaves its last state behind, its services still "running" with pids that are gone (or, later,
another process's): :func:`service_alive` tells, and ``netmon status`` shows them ``dead``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from netmon import pidlock
from netmon.config import Config
from netmon.orphans import TAG_ENV, Guard, die_with_parent, group_alive, process_alive, stop_tagged, tagged
from netmon.results import PIPELINE_LOCK, status_file

__all__ = [
    "Backoff",
    "Service",
    "ServiceState",
    "Supervisor",
    "SupervisorRunning",
    "group_alive",
    "monitor_services",
    "netmon_argv",
    "read_state",
    "running_supervisor",
    "service_alive",
    "state_file",
]

log = logging.getLogger(__name__)

#: states of a service in the state file
RUNNING, WAITING, DONE, STOPPED, REUSED = "running", "waiting", "done", "stopped", "reused"
#: what ``netmon status`` shows for a service recorded as running whose process is gone
DEAD = "dead"
#: how much later than its recorded start a process may have started and still be the one recorded:
#: the start is recorded just after the fork, the kernel's boot time is in whole seconds, and the
#: wall clock may have been slewed since (a pid is not handed on again that soon)
_START_SLACK_S = 30.0
_PROC = Path("/proc")


def state_file(cfg: Config) -> Path:
    """Where ``netmon up`` keeps its services' state: ``<state>/up/state.json``."""
    return Path(cfg.paths.state_dir) / "up" / "state.json"


def read_state(path: Path) -> dict[str, Any] | None:
    """The state file's contents, or None when there is none (no ``netmon up`` ran)."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _lock_holder(lock: Path) -> int | None:
    """The pid written in ``lock`` while a process holds it locked (0: unreadable), else None."""
    return pidlock.holder(lock)


def running_supervisor(path: Path) -> int | None:
    """The pid of the ``netmon up`` holding the lock beside state file ``path`` (None: none runs)."""
    return _lock_holder(path.with_name("up.lock"))


def _proc_start(pid: int) -> float | None:
    """When process ``pid`` started (wall clock, to the second), from ``/proc``; None: unknown."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        btime = next(
            int(line.split()[1])
            for line in (_PROC / "stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def service_alive(pid: int, started: float | None = None) -> bool:
    """Whether ``pid`` is still the process a state file recorded (started at ``started``, wall
    clock; None: not recorded).

    False when no process has the pid, when it is a zombie, or when the process with that pid
    started after ``started`` (the recorded one died and the pid went to another). Where there is
    no ``/proc``, only whether some process has the pid.

    >>> service_alive(os.getpid(), time.time()), service_alive(os.getpid(), time.time() - 1e6)
    (True, False)
    """
    if not process_alive(pid):
        return False
    if started is None or not _PROC.is_dir():
        return True
    began = _proc_start(pid)
    return began is None or began <= float(started) + _START_SLACK_S


class SupervisorRunning(RuntimeError):
    """Another ``netmon up`` supervises the services of this state directory."""


@dataclass(frozen=True)
class Service:
    """A child process: its name and command line."""

    name: str
    argv: tuple[str, ...]
    #: exit status 0 means the work is done (a replay of a file): not restarted
    once: bool = False
    #: extra environment variables
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class ServiceState:
    """One service as the state file shows it."""

    name: str
    command: str
    state: str = WAITING
    pid: int | None = None
    #: wall-clock time the current process started (None: not running)
    started: float | None = None
    restarts: int = 0
    last_exit: int | None = None
    #: wall-clock time of the next start while waiting after a death
    next_start: float | None = None
    log: str = ""


class Backoff:
    """The wait before restarting a child that died: doubles per death in a row, capped.

    A child that ran at least ``stable_s`` before dying starts the sequence again.

    >>> b = Backoff(1.0, 5.0, stable_s=60.0)
    >>> [b.next(ran_s=0.5) for _ in range(5)], b.next(ran_s=120.0)
    ([1.0, 2.0, 4.0, 5.0, 5.0], 1.0)
    """

    def __init__(self, initial_s: float, max_s: float, *, stable_s: float) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.stable_s = stable_s
        self._deaths = 0

    def next(self, ran_s: float) -> float:
        """The wait after a death of a child that had run ``ran_s`` seconds."""
        self._deaths = 1 if ran_s >= self.stable_s else self._deaths + 1
        return float(min(self.max_s, self.initial_s * 2 ** (self._deaths - 1)))

    def __repr__(self) -> str:
        return f"Backoff(initial_s={self.initial_s!r}, max_s={self.max_s!r}, stable_s={self.stable_s!r})"


class _Child:
    def __init__(self, service: Service, log_dir: Path, backoff: Backoff) -> None:
        self.service = service
        self.backoff = backoff
        self.log_path = log_dir / f"{service.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_mono = 0.0
        self.next_mono: float | None = None
        self.state = ServiceState(service.name, " ".join(service.argv), log=str(self.log_path))

    def spawn(self, tag: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.service.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.service.env, TAG_ENV: tag},
                start_new_session=True,  # its own process group: stopped (and killed) as a whole
                preexec_fn=die_with_parent(),  # SIGTERM should the supervisor die (netmon.orphans)
            )
        self.started_mono = time.monotonic()
        self.next_mono = None
        self.state.pid, self.state.started, self.state.state = self.proc.pid, time.time(), RUNNING
        self.state.next_start = None
        log.info("service started", extra={"service": self.service.name, "pid": self.proc.pid})


class Supervisor:
    """Start ``services`` in order, keep them running, stop them in reverse order.

    Parameters
    ----------
    services
        The children, in start order (stopped in the reverse order).
    state_path
        The state file; its directory also holds the lock that keeps a second supervisor out.
    log_dir
        Each child's stdout and stderr go to ``<log_dir>/<name>.log`` (appended).
    backoff_s, backoff_max_s, stable_s
        The restart backoff (:class:`Backoff`).
    stop_timeout_s
        How long a child may take to exit after SIGTERM before its group is killed.
    reused
        Services already running outside this supervisor (name -> pid): shown, not started.

    Call :meth:`start` and :meth:`poll` from the main thread: a child's parent-death signal
    (:mod:`netmon.orphans`) comes when the thread that started it ends.
    """

    def __init__(
        self,
        services: Sequence[Service],
        *,
        state_path: Path,
        log_dir: Path,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        stable_s: float = 60.0,
        stop_timeout_s: float = 45.0,
        reused: Mapping[str, int | None] | None = None,
    ) -> None:
        self.state_path = state_path
        self.log_dir = log_dir
        self.stop_timeout_s = stop_timeout_s
        self._backoff = (backoff_s, backoff_max_s, stable_s)
        self.children: list[_Child] = []
        self.reused: list[ServiceState] = []
        self.add(services, reused)
        self.started = time.time()
        #: carried by every process this supervisor starts, and theirs (``netmon.orphans``)
        self.tag = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._lock: IO[str] | None = None
        self._guard: Guard | None = None

    @classmethod
    def from_config(
        cls, cfg: Config, services: Sequence[Service], reused: Mapping[str, int | None] | None = None
    ) -> Supervisor:
        s = cfg.services
        return cls(
            services,
            state_path=state_file(cfg),
            log_dir=Path(cfg.paths.state_dir) / "logs",
            backoff_s=s.restart_backoff_s,
            backoff_max_s=s.restart_backoff_max_s,
            stable_s=s.stable_s,
            stop_timeout_s=s.stop_timeout_s,
            reused=reused,
        )

    def add(self, services: Sequence[Service], reused: Mapping[str, int | None] | None = None) -> None:
        """More children (after those given so far) and reused services, before :meth:`start`."""
        initial_s, max_s, stable_s = self._backoff
        self.children += [
            _Child(s, self.log_dir, Backoff(initial_s, max_s, stable_s=stable_s)) for s in services
        ]
        self.reused += [ServiceState(name, "", state=REUSED, pid=pid) for name, pid in (reused or {}).items()]

    # -- start, watch, stop ------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the state directory's lock, or raise :class:`SupervisorRunning` (idempotent); start
        the guard that stops the children should this process be killed (``netmon.orphans``)."""
        if self._lock is None:
            self._take_lock()
        if self._guard is None:
            self._guard = Guard(self.tag, self.stop_timeout_s, self.log_dir / "up-guard.log")

    def child_env(self) -> dict[str, str]:
        """The environment variable that marks a process as this supervisor's (its tag)."""
        return {TAG_ENV: self.tag}

    def track(self, pid: int) -> None:
        """Have the guard stop ``pid`` (and its group) too, should this process be killed: a
        process started outside :meth:`start` (the local broker), with :meth:`child_env`."""
        if self._guard is not None:
            self._guard.add(pid)

    def untrack(self, pid: int) -> None:
        if self._guard is not None:
            self._guard.discard(pid)

    def clean_leftovers(self) -> list[str]:
        """Stop what a previous supervisor of this state directory left running; one line per
        service found. Call it holding the lock (:meth:`lock`): the previous one is then gone.

        The previous state file names its tag and its services' pids; the processes still
        carrying that tag (Linux: read from ``/proc``) are stopped as :meth:`stop` would have:
        SIGTERM to the services, ``stop_timeout_s``, then SIGTERM and SIGKILL to what is left.
        """
        previous = read_state(self.state_path) or {}
        old = previous.get("supervisor") or {}
        tag = old.get("tag")
        if not isinstance(tag, str) or not tag or tag == self.tag or not tagged(tag):
            return []
        services = {
            int(s["pid"]): str(s.get("name"))
            for s in previous.get("services") or []
            if isinstance(s, dict) and isinstance(s.get("pid"), int) and s.get("state") == RUNNING
        }
        found = stop_tagged(tag, sorted(services), grace_s=self.stop_timeout_s)
        named = [f"{services[pid]} (pid {pid})" for pid in found if pid in services]
        others = len(found) - len(named)
        plural = "es" if others != 1 else ""
        what = ", ".join(named) + (f" and {others} other process{plural}" if named and others else "")
        what = what or f"{others} process{plural}"
        log.info("leftovers stopped", extra={"supervisor": old.get("pid"), "pids": found})
        return [f"stopped what the netmon up killed before (pid {old.get('pid')}) left running: {what}"]

    def start(self) -> None:
        """Take the lock (else :class:`SupervisorRunning`), start every child in order."""
        self.lock()
        for child in self.children:
            self._spawn(child)
        self.write_state()

    def _spawn(self, child: _Child) -> None:
        child.spawn(self.tag)
        assert child.proc is not None
        self.track(child.proc.pid)

    def poll(self) -> list[str]:
        """Reap children that died, start those whose backoff is over; return what happened."""
        events: list[str] = []
        now = time.monotonic()
        if self._guard is not None and self._guard.check():
            log.warning("the guard process died; started again")
        for child in self.children:
            proc = child.proc
            if proc is not None:
                code = proc.poll()
                if code is None:
                    continue
                events.append(self._died(child, code, now))
            elif child.next_mono is not None and now >= child.next_mono:
                child.state.restarts += 1
                self._spawn(child)
                events.append(
                    f"{child.service.name}: restarted (pid {child.state.pid}, restart {child.state.restarts})"
                )
                log.info(
                    "service restarted",
                    extra={
                        "service": child.service.name,
                        "pid": child.state.pid,
                        "restarts": child.state.restarts,
                    },
                )
        self.write_state()
        return events

    def _died(self, child: _Child, code: int, now: float) -> str:
        name = child.service.name
        assert child.proc is not None
        pgid = child.proc.pid
        child.proc = None
        _kill_group(pgid)  # whatever it left behind (a JVM, Python workers)
        self.untrack(pgid)
        child.state.pid, child.state.started, child.state.last_exit = None, None, code
        if code == 0 and child.service.once:
            child.state.state = DONE
            log.info("service done", extra={"service": name})
            return f"{name}: done"
        wait_s = child.backoff.next(now - child.started_mono)
        child.next_mono = now + wait_s
        child.state.state, child.state.next_start = WAITING, time.time() + wait_s
        log.info("service died", extra={"service": name, "exit": code, "restart_in_s": wait_s})
        return f"{name}: exited with {_exit_text(code)}; restarting in {wait_s:g} s (log: {child.log_path})"

    def stop(self) -> list[str]:
        """Stop every child, the last started first; return one line per child."""
        lines = []
        for child in reversed(self.children):
            lines.append(self._stop_child(child))
            self.write_state()
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        self._release_lock()
        return lines

    def _stop_child(self, child: _Child) -> str:
        name, proc = child.service.name, child.proc
        child.next_mono = None
        if proc is None:
            if child.state.state != DONE:
                child.state.state = STOPPED
            return f"{name}: {child.state.state}"
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        how = "stopped"
        try:
            code = proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            how = f"killed (no exit {self.stop_timeout_s:g} s after SIGTERM)"
            _kill_group(proc.pid, grace_s=0.0)
            code = proc.wait()
        _kill_group(proc.pid)
        self.untrack(proc.pid)
        child.proc = None
        child.state.state, child.state.pid, child.state.started = STOPPED, None, None
        child.state.last_exit = code
        log.info("service stopped", extra={"service": name, "exit": code})
        return f"{name}: {how} (exit {_exit_text(code)})"

    # -- state -------------------------------------------------------------------------------------

    def states(self) -> list[ServiceState]:
        return self.reused + [c.state for c in self.children]

    def write_state(self) -> None:
        body = {
            "supervisor": {
                "pid": os.getpid(),
                "started": self.started,
                "updated": time.time(),
                "tag": self.tag,
            },
            "services": [asdict(s) for s in self.states()],
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(self.state_path)

    def _take_lock(self) -> None:
        path = self.state_path.with_name("up.lock")
        try:
            self._lock = pidlock.take(path)
        except pidlock.LockHeld as held:
            raise SupervisorRunning(
                f"netmon up is already running (pid {held.holder}) for {path.parent.parent}; "
                "see `netmon status`"
            ) from None

    def _release_lock(self) -> None:
        if self._lock is not None:
            pidlock.release(self._lock)
            self._lock = None


def _kill_group(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM what is left of process group ``pgid``, then SIGKILL it after ``grace_s`` (0: at once)."""
    steps = ((signal.SIGTERM, grace_s),) if grace_s > 0 else ()
    for sig, wait_s in (*steps, (signal.SIGKILL, 5.0)):
        if not group_alive(pgid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.05)


def _exit_text(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else str(code)


# -- the services of `netmon up` ------------------------------------------------------------------


def netmon_argv(cfg: Config, *args: str) -> tuple[str, ...]:
    """``netmon [--config FILE] ARGS`` run by this interpreter (the same installation)."""
    config = ("--config", str(cfg.source)) if cfg.source else ()
    return (sys.executable, "-m", "cli.main", *config, *args)


def _pipeline_lock_holder(cfg: Config) -> int | None:
    """The pid of a pipeline running on the data directory (holding its lock), or None."""
    return _lock_holder(Path(cfg.paths.data_dir) / PIPELINE_LOCK)


def _port_open(host: str, port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def monitor_services(
    cfg: Config,
    *,
    ifaces: Sequence[str] = (),
    replay: str | None = None,
    replay_args: Sequence[str] = (),
    capture_args: Sequence[str] = (),
    run_id: str | None = None,
) -> tuple[list[Service], dict[str, int | None]]:
    """The services ``netmon up`` runs, in start order, and those it reuses (name -> pid).

    Start order: pipeline, alert service, dashboard, then the sources (one capture per interface,
    or the replay), so that stopping in reverse stops the sources first and the pipeline last.
    A pipeline already holding the data directory's lock and a dashboard already answering on
    its port are reused, not started again. A replay is given a run id up front (``--resume``),
    so a replay restarted after a failure sends only what the topic lacks.
    """
    services: list[Service] = []
    reused: dict[str, int | None] = {}
    holder = _pipeline_lock_holder(cfg)
    if holder is None:
        services.append(Service("pipeline", netmon_argv(cfg, "pipeline", "--quiet")))
    else:
        reused["pipeline"] = holder or None
    if cfg.services.alerts and cfg.alerts.enabled:
        services.append(Service("alerts", netmon_argv(cfg, "alerts", "run")))
    if cfg.services.dashboard:
        if _port_open(cfg.dashboard.host, cfg.dashboard.port):
            reused["dashboard"] = None
        else:
            services.append(Service("dashboard", netmon_argv(cfg, "dashboard")))
    for iface in ifaces:
        status = status_file(cfg).with_name(f"capture-{iface}.json")
        argv = netmon_argv(
            cfg, "capture", "--iface", iface, "--quiet", "--status-file", str(status), *capture_args
        )
        services.append(Service(f"capture-{iface}", argv))
    if replay is not None:
        if run_id is None:
            import secrets

            run_id = f"{time.time_ns()}-{secrets.token_hex(3)}"
        argv = netmon_argv(cfg, "replay", replay, "--quiet", "--resume", run_id, *replay_args)
        services.append(Service("replay", argv, once=True))
    return services, reused
