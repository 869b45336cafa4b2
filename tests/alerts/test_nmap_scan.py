"""A real SYN scan: nmap in one network namespace against a listener in another, captured, then analysed.

The test builds two namespaces joined by a veth pair, captures every frame on the target's side
(an AF_PACKET socket, written with netmon's own pcap writer), runs ``nmap -sS`` from the scanner's
side, and expects ``netmon analyze alerts`` to name the scanner's address in a ``port-scan``
episode, and nothing else. It needs root (namespaces, raw sockets), ``ip`` and ``nmap``
(``apt-get install nmap``); without them it is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.defaults import DETECTION_RULES
from alerts.offline import analyze_capture
from netmon.config import AlertsConfig
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nmap"),
    reason="needs root, iproute2 and nmap (apt-get install nmap)",
)

SCANNER, TARGET = "10.213.0.1", "10.213.0.2"
LISTEN_PORT = 8080

#: runs in the target namespace: every frame of the veth into a pcap until SIGTERM
CAPTURE = """
import signal, socket, sys, time
from ingest.pcapwriter import PcapWriter
stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[2], 0))
s.settimeout(0.2)
with PcapWriter(sys.argv[1]) as out:
    print("ready", flush=True)
    while not stop:
        try:
            frame = s.recv(65535)
        except TimeoutError:
            continue
        out.write(frame, time.time_ns())
"""


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str, str]]:
    tag = f"{os.getpid() % 100000}"
    scan, target, veth = f"nmscan{tag}", f"nmtgt{tag}", f"nmv{tag}"
    _run("ip", "netns", "add", scan)
    _run("ip", "netns", "add", target)
    try:
        _run(
            "ip",
            "link",
            "add",
            f"{veth}a",
            "netns",
            scan,
            "type",
            "veth",
            "peer",
            "name",
            f"{veth}b",
            "netns",
            target,
        )
        for ns, dev, addr in ((scan, f"{veth}a", SCANNER), (target, f"{veth}b", TARGET)):
            _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield scan, target, f"{veth}b"
    finally:
        subprocess.run(["ip", "netns", "del", scan], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", target], capture_output=True, timeout=30)


def test_an_nmap_syn_scan_alerts_with_the_scanners_address(
    namespaces: tuple[str, str, str], tmp_path: Path
) -> None:
    scan, target, dev = namespaces
    pcap = tmp_path / "nmap-syn-scan.pcap"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    in_target = ["ip", "netns", "exec", target]
    listener = subprocess.Popen(
        [*in_target, sys.executable, "-m", "http.server", "--bind", TARGET, str(LISTEN_PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    capture = subprocess.Popen(
        [*in_target, sys.executable, "-c", CAPTURE, str(pcap), dev],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert capture.stdout is not None and capture.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the listener is up
        nmap = subprocess.run(
            ["ip", "netns", "exec", scan, "nmap", "-sS", "-Pn", "-n", "-T4", "--max-retries", "1",
             "-p", f"1-1000,{LISTEN_PORT}", TARGET],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert nmap.returncode == 0, nmap.stderr
        assert f"{LISTEN_PORT}/tcp open" in nmap.stdout
        # a connection 4 s later: the probes' fates are known only [alerts] features_timeout_s after them
        time.sleep(4)
        subprocess.run(
            ["ip", "netns", "exec", scan, sys.executable, "-c",
             f"import socket; socket.create_connection(('{TARGET}', {LISTEN_PORT}), timeout=5).close()"],
            check=True, timeout=30,
        )  # fmt: skip
        time.sleep(0.5)
    finally:
        capture.terminate()
        capture.wait(timeout=30)
        listener.terminate()
        listener.wait(timeout=30)
    episodes = analyze_capture([pcap], DETECTION_RULES, AlertsConfig())
    assert [(e.rule, e.subject) for e in episodes] == [("port-scan", SCANNER)]
    # 1000 closed ports answered with RST; the busiest window holds hundreds of them (the scan can
    # straddle two windows, and a Python capture may drop frames at nmap's -T4 pace)
    assert episodes[0].value >= 100
