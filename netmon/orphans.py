"""No process of ``netmon up`` outlives it, even when it is killed outright (SIGKILL, the OOM killer).

A clean stop (:meth:`netmon.supervisor.Supervisor.stop`) stops every service and whatever its
process group holds. When ``netmon up`` dies without running that code, three things take over:

1. **Parent-death signal** (Linux). Every process ``netmon up`` starts itself — each service's
   process and the local broker's JVM — asks the kernel, between fork and exec, for a signal when
   the thread that started it ends (``prctl(PR_SET_PDEATHSIG)``, :func:`die_with_parent`); the
   supervisor starts them from its main thread, which ends only with the process. The signal is
   SIGHUP (:data:`PARENT_DEATH_SIGNAL`), not SIGTERM, because the kernel sends it again at each
   step as it hands the orphan from one dying thread of ``netmon up`` to the next (the metrics
   server's thread, Kafka's): as many signals as threads, and a second SIGTERM means "stop at
   once" to the pipeline (its running batch is cancelled) and interrupts a capture's flush. A
   ``netmon`` command started by ``netmon up`` takes the first SIGHUP as one SIGTERM to itself
   and ignores the others (:func:`parent_death_as_sigterm`, installed by ``cli.main``): the stop
   of a clean stop, once — the pipeline finishes its batch, a capture flushes. The JVMs take
   SIGHUP as SIGTERM. The services' own children follow their parent: the pipeline's Spark JVM
   exits when its stdin pipe from PySpark closes (PySpark's design), Spark's Python workers with
   the JVM, Streamlit on its own parent-death signal (``dashboard.server``).
2. **The guard** (:class:`Guard`): a small process ``python -m netmon.orphans`` that ``netmon up``
   starts in a session of its own and writes to through a pipe: the pid of each process it
   starts, and ``stop`` once it stopped them itself. When the pipe closes without ``stop``
   (``netmon up`` is gone, however it died), the guard does what the clean stop would have
   done, :func:`stop_tagged`: it waits ``[services] stop_timeout_s`` for those processes to exit
   (sending them SIGTERM first where there is no parent-death signal), then sends SIGTERM and, 5 s
   later, SIGKILL to what is left of their process groups and to every process carrying the tag:
   a service that ignored the signal or hangs, a grandchild that outlived its parent.
3. **The tag**: every process ``netmon up`` starts gets ``NETMON_UP_TAG=<tag>`` in its environment
   (:data:`TAG_ENV`), which their own children inherit (Spark's JVM and Python workers, Streamlit),
   and the tag is in the state file. A ``netmon up`` that takes the lock and finds a previous
   one's tag still carried by processes (that one and its guard were both killed) stops them
   before it starts anything (:meth:`netmon.supervisor.Supervisor.clean_leftovers`).

Elsewhere than Linux there is no parent-death signal and no ``/proc``: the guard sends the SIGTERM
itself and stops the services' process groups (their pids come through the pipe), but it cannot
find a child that left its group (Streamlit), and the next ``netmon up`` cannot recognise
leftovers (it leaves them alone rather than signal a process it cannot identify).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

__all__ = [
    "HAS_PARENT_DEATH_SIGNAL",
    "PARENT_DEATH_SIGNAL",
    "TAG_ENV",
    "Guard",
    "die_with_parent",
    "group_alive",
    "group_members",
    "parent_death_as_sigterm",
    "process_alive",
    "stop_tagged",
    "tagged",
]

#: the environment variable that marks every process of one ``netmon up`` and their children
TAG_ENV = "NETMON_UP_TAG"
#: how long the processes left after the services' own exit get between SIGTERM and SIGKILL
KILL_AFTER_S = 5.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PROC = Path("/proc")


def _libc() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's ``prctl`` and ``signal`` (Linux), typed for ctypes; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, set_signal = libc.prctl, libc.signal
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    set_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    set_signal.restype = ctypes.c_void_p
    return prctl, set_signal


_LIBC = _libc()
#: whether the kernel can signal a child when its parent dies (Linux's ``PR_SET_PDEATHSIG``)
HAS_PARENT_DEATH_SIGNAL = _LIBC is not None
#: the signal a process ``netmon up`` started gets when it dies, once or more (module docstring)
PARENT_DEATH_SIGNAL = signal.SIGHUP


def die_with_parent(sig: int = PARENT_DEATH_SIGNAL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when the thread that
    starts it ends (so start it from the main thread), and again each time the kernel hands it
    on to another thread of the parent that then ends; None where there is no such signal.

    Between fork and exec the child only calls libc (resolved here, beforehand) and ``getppid``:
    no import, no lock. An inherited "ignore" of ``sig`` (``nohup``) is undone. Should the parent
    have died before the call, the child exits at once rather than run unwatched.
    """
    if _LIBC is None:
        return None
    (prctl, set_signal), parent = _LIBC, os.getpid()

    def preexec() -> None:
        set_signal(int(sig), None)  # SIG_DFL
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + int(sig))

    return preexec


def parent_death_as_sigterm() -> bool:
    """In a process ``netmon up`` started (its environment holds :data:`TAG_ENV`), from the main
    thread: the first :data:`PARENT_DEATH_SIGNAL` becomes one SIGTERM to this process — the
    clean stop its command handles — and later ones are ignored. Returns whether it was set up."""
    if TAG_ENV not in os.environ or threading.current_thread() is not threading.main_thread():
        return False
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not fired:
            fired.append(signum)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(PARENT_DEATH_SIGNAL, handler)
    return True


# -- processes, from /proc ----------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ..."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot; ``/proc/<pid>/stat`` field 22): with
    the pid, it names one process, not whichever takes the pid next."""
    fields = _stat(pid)
    return int(fields[19]) if fields is not None else None


def _same_process(pid: int, started: dict[int, int]) -> bool:
    """Whether the process seen as ``pid`` (started at ``started[pid]``) still runs."""
    return pid in started and process_alive(pid) and _start_time(pid) == started[pid]


def _pids() -> Iterable[int]:
    try:
        entries = list(_PROC.iterdir())
    except OSError:
        return []
    return [int(e.name) for e in entries if e.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc``."""
    members = []
    for pid in _pids():
        fields = _stat(pid)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(pid)
    return members


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies do not count)."""
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return bool(group_members(pgid))


def process_alive(pid: int) -> bool:
    """Whether some process has ``pid`` and is not a zombie (without ``/proc``: has the pid)."""
    if not _PROC.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def tagged(tag: str) -> list[int]:
    """Live processes (this one excepted) whose environment holds ``NETMON_UP_TAG=<tag>``; none
    where there is no ``/proc``. Only this user's processes can be read: those are the ones."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            environ = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and process_alive(pid):
            found.append(pid)
    return sorted(found)


def _signal(pid: int, sig: int, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


def _wait(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_tagged(
    tag: str,
    leaders: Iterable[int] = (),
    *,
    grace_s: float,
    signal_leaders: bool = True,
    kill_after_s: float = KILL_AFTER_S,
) -> list[int]:
    """Stop what one ``netmon up`` left, as its own stop would have; return the pids found.

    ``leaders``: the processes it started (each leads a process group). Those that run and carry
    ``tag`` (where ``/proc`` tells; elsewhere every one that runs) get SIGTERM unless
    ``signal_leaders`` is false (the kernel's parent-death signal reached them), and
    ``grace_s`` to exit. Then what is left of their groups and every process carrying the tag gets
    SIGTERM, and SIGKILL ``kill_after_s`` later.
    """
    proc = _PROC.is_dir()
    found = set(tagged(tag))
    mine = [p for p in leaders if (p in found if proc else process_alive(p))]
    found.update(mine)
    if signal_leaders:
        for pid in mine:
            _signal(pid, signal.SIGTERM)
    started = {p: t for p in found if (t := _start_time(p)) is not None}
    _wait(lambda: not any(process_alive(p) for p in mine), grace_s)

    def left() -> tuple[list[int], list[int]]:
        """The tagged processes outside the leaders' groups, and the leaders' groups left."""
        # a process found once counts until it is gone: while it exits, its environment reads
        # empty (its memory is released) before it turns zombie, so the tag alone would call it
        # stopped too early
        pids = sorted(set(tagged(tag)) | {p for p in found if _same_process(p, started)})
        if not proc:
            return pids, [p for p in mine if group_alive(p)]
        # a group is the leader's while a process of it carries the tag (a group id can be
        # taken again once the group is empty)
        pgid = {pid: int(fields[2]) for pid in pids if (fields := _stat(pid)) is not None}
        groups = [p for p in mine if p in pgid.values()]
        return [p for p in pids if pgid.get(p) not in groups], groups

    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids, groups = left()
        if not pids and not groups:
            break
        found.update(pids)
        for pgid in groups:  # one signal per process: a group's members through the group
            found.update(group_members(pgid) if proc else ())
        started.update({p: t for p in found if p not in started and (t := _start_time(p)) is not None})
        for pgid in groups:
            _signal(pgid, sig, group=True)
        for pid in pids:
            _signal(pid, sig)
        _wait(lambda: left() == ([], []), kill_after_s)
    return sorted(found)


# -- the guard -------------------------------------------------------------------------------------


class Guard:
    """The guard process of one ``netmon up`` (module docstring, 2): :meth:`add` each process
    started, :meth:`discard` each one reaped, :meth:`close` once every one is stopped.

    Start it, and everything it watches, from the main thread. Should the guard die, :meth:`check`
    starts another one with the same processes.
    """

    def __init__(self, tag: str, grace_s: float, log_path: Path) -> None:
        self.tag = tag
        self.grace_s = grace_s
        self.log_path = log_path
        self.pids: set[int] = set()
        self.proc: subprocess.Popen[bytes] | None = None
        self._start()

    def _start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != TAG_ENV}
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "netmon.orphans", self.tag, repr(self.grace_s)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a group kill of netmon up's group does not reach it
            )
        for pid in sorted(self.pids):
            self._send(f"+{pid}")

    def _send(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(f"{line}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the guard died: check() starts another one

    def add(self, pid: int) -> None:
        self.pids.add(pid)
        self._send(f"+{pid}")

    def discard(self, pid: int) -> None:
        self.pids.discard(pid)
        self._send(f"-{pid}")

    def check(self) -> bool:
        """Start the guard again if it died; return whether it had."""
        if self.proc is None or self.proc.poll() is None:
            return False
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        self._start()
        return True

    def close(self) -> None:
        """Tell the guard every process is stopped, and let it exit."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            if proc.stdin is not None:
                proc.stdin.write(b"stop\n")
                proc.stdin.close()
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _guard(tag: str, grace_s: float, commands: IO[bytes]) -> int:
    """The guard's body: follow the pids on ``commands`` until ``stop`` (0) or end of file."""
    leaders: set[int] = set()
    for line in commands:
        word = line.strip()
        if word == b"stop":
            return 0
        if word[:1] in (b"+", b"-") and word[1:].isdigit():
            (leaders.add if word[:1] == b"+" else leaders.discard)(int(word[1:]))
    parent = "netmon up" + (f" (tag {tag})" if tag else "")
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {parent} is gone; stopping its processes", flush=True)
    found = stop_tagged(tag, sorted(leaders), grace_s=grace_s, signal_leaders=not HAS_PARENT_DEATH_SIGNAL)
    pids = " ".join(map(str, found)) or "none"
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} stopped: {pids}", flush=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is netmon up's to handle
    sys.exit(_guard(sys.argv[1], float(sys.argv[2]), sys.stdin.buffer))
