"""``netmon dashboard`` takes its Streamlit child down with it: SIGTERM, Ctrl-C, even SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dashboard.server import wait_healthy
from tests.conftest import free_port

NETMON = Path(sys.executable).with_name("netmon")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _port_free(port: int) -> bool:
    """Nothing answers on the port, and a new server could listen there (as Streamlit does, with
    SO_REUSEADDR: connections of the old one may linger in TIME_WAIT)."""
    with socket.socket() as s:
        s.settimeout(1)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_to_netmon_dashboard_stops_streamlit_and_frees_the_port(
    tmp_path: Path, sig: signal.Signals
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "NETMON_CONFIG"}
    env.update(NETMON_DATA_DIR=str(tmp_path / "data"), NETMON_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen(
        [str(NETMON), "dashboard", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    children: list[int] = []
    try:
        assert wait_healthy(f"http://127.0.0.1:{port}", timeout_s=90), "the dashboard never answered"
        children = _children(proc.pid)
        assert children, "Streamlit runs as a child of netmon dashboard"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == (-9 if sig == signal.SIGKILL else 128 + sig), err
        assert "Traceback" not in err
        deadline = time.monotonic() + 15
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), "the Streamlit child outlived netmon dashboard"
        assert _port_free(port)
    finally:
        proc.kill()
        for child in children:  # the old behaviour left it running: do not leak it
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
