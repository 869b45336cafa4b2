"""Starting the Streamlit server for the dashboard, in the foreground or as a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from netmon.config import Config

__all__ = ["APP", "run_foreground", "start_background", "wait_healthy"]

APP = Path(__file__).with_name("app.py")


def _command(cfg: Config, host: str | None, port: int | None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless=true",
        f"--server.address={host or cfg.dashboard.host}",
        f"--server.port={port or cfg.dashboard.port}",
        "--browser.gatherUsageStats=false",
        "--global.developmentMode=false",
    ]


def _env(cfg: Config) -> dict[str, str]:
    env = dict(os.environ)
    # The app reads the configuration itself: hand it the effective paths explicitly.
    if cfg.source:
        env["NETMON_CONFIG"] = str(cfg.source)
    env["NETMON_DATA_DIR"] = str(cfg.paths.data_dir)
    env["NETMON_STATE_DIR"] = str(cfg.paths.state_dir)
    return env


def run_foreground(cfg: Config, *, host: str | None = None, port: int | None = None) -> int:
    print(f"dashboard: http://{host or cfg.dashboard.host}:{port or cfg.dashboard.port}", file=sys.stderr)
    return subprocess.call(_command(cfg, host, port), env=_env(cfg))


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
