"""Starting the Streamlit server for the dashboard, in the foreground or as a child process.

The child runs :func:`main`: it starts the warm-up (``dashboard.warmup``: the last 24 h of every
kind read into the process's caches before a user asks) and then Streamlit's own command line,
``streamlit run dashboard/app.py``, in the same process, whose caches the pages then find warm.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from netmon.config import Config

__all__ = ["APP", "main", "run_foreground", "start_background", "wait_healthy"]

APP = Path(__file__).with_name("app.py")
#: The child's program: this package importable (as ``app.py`` makes it for the pages), then
#: :func:`main` with Streamlit's arguments.
_BOOT = f"import sys; sys.path.insert(0, {str(APP.parents[1])!r}); from dashboard.server import main; main()"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _command(cfg: Config, host: str | None, port: int | None) -> list[str]:
    return [
        sys.executable,
        "-c",
        _BOOT,
        "streamlit",
        "run",
        str(APP),
        "--server.headless=true",
        f"--server.address={host or cfg.dashboard.host}",
        f"--server.port={port or cfg.dashboard.port}",
        "--browser.gatherUsageStats=false",
        "--global.developmentMode=false",
        # dashboard/static: Chart.js and the charts' callbacks (dashboard.chartjs), at /app/static
        "--server.enableStaticServing=true",
    ]


def main() -> None:
    """The dashboard's process: the warm-up started (:func:`_start_warm_up`), then Streamlit's
    command line from ``sys.argv[1:]`` (``streamlit run app.py ...``, as :func:`_command` gives
    it). The configuration is the environment's, as the app's (``NETMON_CONFIG``,
    ``NETMON_DATA_DIR``: :func:`_env`)."""
    from streamlit.web import cli

    _start_warm_up()
    sys.argv = sys.argv[1:]
    cli.main(prog_name="streamlit")


def _start_warm_up(wait_s: float = 120.0) -> threading.Thread:
    """A daemon thread that waits for Streamlit's runtime to exist (the pages' modules are
    imported after it, as under ``streamlit run``: their ``st.cache_data`` then find its caches)
    and starts the warm-up (``dashboard.warmup``); a failure is logged, the dashboard runs
    without it."""

    def run() -> None:
        try:
            from streamlit import runtime

            deadline = time.monotonic() + wait_s
            while not runtime.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            from dashboard import warmup
            from netmon.config import load_config

            warmup.start(load_config())
        except Exception as exc:
            logging.getLogger(__name__).warning("dashboard warm-up not started: %s", exc)

    thread = threading.Thread(target=run, name="netmon-dashboard-warmup-start", daemon=True)
    thread.start()
    return thread


def _env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    # The app reads the configuration itself: hand it the effective paths explicitly.
    if cfg.source:
        env["NETMON_CONFIG"] = str(cfg.source)
    env["NETMON_DATA_DIR"] = str(cfg.paths.data_dir)
    env["NETMON_STATE_DIR"] = str(cfg.paths.state_dir)
    return env


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def run_foreground(
    cfg: Config, *, host: str | None = None, port: int | None = None, stop_timeout_s: float = 10.0
) -> int:
    """Serve the dashboard until Streamlit exits, or until SIGTERM / SIGINT (Ctrl-C).

    Streamlit runs as a child in a process group of its own. A SIGTERM or SIGINT to this process
    is passed to that whole group; after ``stop_timeout_s`` it is killed. The child is always
    waited for, so the port is free once this returns: Streamlit's exit code, or ``128 + signal``.
    (Were this process killed outright, the child gets SIGTERM from the kernel: parent-death signal.)
    """
    print(f"dashboard: http://{host or cfg.dashboard.host}:{port or cfg.dashboard.port}", file=sys.stderr)
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)

    handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        child = subprocess.Popen(
            _command(cfg, host, port),
            env=_env(cfg),
            start_new_session=True,  # a process group of its own: Ctrl-C reaches it through us, once
            preexec_fn=_die_with_parent,  # (no threads run in this command yet)
        )
        try:
            while child.poll() is None and not received:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.2)
        finally:
            if child.poll() is None:
                _stop_group(child, stop_timeout_s)
    finally:
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    return 128 + received[0] if received else int(child.returncode)


def _stop_group(child: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM the child's process group, wait up to ``timeout_s``, then SIGKILL it; reap the child."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)
        try:
            child.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # Whatever else the group held (Streamlit's own children) goes with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)


def start_background(
    cfg: Config, log_file: Path, *, host: str | None = None, port: int | None = None
) -> subprocess.Popen:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        return subprocess.Popen(
            _command(cfg, host, port),
            env=_env(cfg),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_healthy(url: str, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False
