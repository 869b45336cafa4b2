"""Live capture on the loopback interface into the real broker, with traffic the test sends itself."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from scapy.layers.inet import IP, TCP, UDP
from scapy.utils import rdpcap

from cli.main import cli
from ingest.capture import (
    CaptureOptions,
    CaptureSummary,
    LiveCaptureError,
    capture,
    list_interfaces,
    open_socket,
)
from tests.ingest.kafka_util import consume_all, records_of

NETMON = Path(sys.executable).with_name("netmon")
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="live capture needs root (CI runs as root)")
HAVE_LIBPCAP = ctypes.util.find_library("pcap") is not None  # what Scapy loads to compile --bpf
needs_libpcap = pytest.mark.skipif(
    not HAVE_LIBPCAP, reason="--bpf needs libpcap (make setup installs it when run as root)"
)


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_list_interfaces_has_loopback() -> None:
    ifaces = {i.name: i for i in list_interfaces()}
    assert ifaces["lo"].hardware == "loopback" and ifaces["lo"].index == socket.if_nametoindex("lo")
    res = CliRunner().invoke(cli, ["capture", "--list-ifaces"])
    assert res.exit_code == 0 and any(line.split()[1] == "lo" for line in res.output.splitlines())


def test_unknown_interface_lists_the_available_ones() -> None:
    with pytest.raises(LiveCaptureError) as info:
        open_socket("nosuch0")
    assert str(info.value).startswith("unknown interface 'nosuch0' (available: lo")
    res = CliRunner().invoke(cli, ["capture", "--iface", "nosuch0", "--bootstrap", "127.0.0.1:1"])
    assert res.exit_code == 2 and "unknown interface 'nosuch0' (available: " in res.output


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) not installed")
def test_without_cap_net_raw_the_error_names_it() -> None:
    drop = ["setpriv", "--inh-caps=-net_raw", "--bounding-set=-net_raw", "--"]
    res = subprocess.run(
        [*drop, str(NETMON), "capture", "--iface", "lo", "--count", "1", "--bootstrap", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stderr
    assert "live capture needs root or the CAP_NET_RAW capability" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@needs_root
@pytest.mark.skipif(HAVE_LIBPCAP, reason="libpcap is installed: the missing-libpcap error cannot occur")
def test_bpf_without_libpcap_says_so() -> None:
    with pytest.raises(LiveCaptureError, match="--bpf needs libpcap"):
        open_socket("lo", bpf="udp port 53")


@needs_root
@needs_libpcap
def test_bpf_is_compiled_and_attached_on_loopback() -> None:
    from scapy.arch.common import compile_filter

    assert compile_filter("udp port 53", "lo").bf_len > 0
    sock, linktype = open_socket("lo", bpf="udp port 53 or (tcp and not port 22)")
    sock.close()
    assert linktype == 1


@needs_root
@needs_libpcap
def test_bad_bpf_expression_is_one_line_naming_bpf() -> None:
    with pytest.raises(LiveCaptureError) as info:
        open_socket("lo", bpf="udp prt 53")
    assert str(info.value).startswith("bad --bpf expression 'udp prt 53': ")
    assert "syntax error" in str(info.value) and "Failed to compile" not in str(info.value)
    with pytest.raises(LiveCaptureError, match=r"^bad --bpf expression 'port 99999': .*99999"):
        open_socket("lo", bpf="port 99999")
    # The CLI: exit 2, one line on stderr, before any broker is contacted.
    res = CliRunner().invoke(
        cli, ["capture", "--iface", "lo", "--bpf", "udp prt 53", "--bootstrap", "127.0.0.1:1"]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("netmon capture: error: bad --bpf expression 'udp prt 53': ")
    assert len(res.stderr.strip().splitlines()) == 1


class Traffic:
    """UDP datagrams and one TCP connection on 127.0.0.1, with what the test knows about them."""

    def __init__(self) -> None:
        self.udp_port = free_port(socket.SOCK_DGRAM)
        self.tcp_port = free_port(socket.SOCK_STREAM)
        self.payloads = [b"x" * n for n in (0, 1, 17, 200, 1000)]
        self.udp_src = 0
        self.tcp_client = 0

    def send(self) -> None:
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
        ):
            rx.bind(("127.0.0.1", self.udp_port))
            tx.bind(("127.0.0.1", 0))
            self.udp_src = tx.getsockname()[1]
            for payload in self.payloads:
                tx.sendto(payload, ("127.0.0.1", self.udp_port))
                assert rx.recv(2048) == payload
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", self.tcp_port))
            server.listen(1)
            client = socket.create_connection(("127.0.0.1", self.tcp_port))
            self.tcp_client = client.getsockname()[1]
            conn, _ = server.accept()
            client.sendall(b"hello netmon")
            assert conn.recv(100) == b"hello netmon"
            client.close()
            conn.recv(100)
            conn.close()

    @property
    def filter(self) -> str:
        return f"port={self.udp_port} or port={self.tcp_port}"


@needs_root
@pytest.mark.kafka
def test_loopback_capture_delivers_every_sent_packet(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"test.capture.{uuid.uuid4().hex[:8]}"
    traffic = Traffic()
    pcap = tmp_path / "live.pcap"
    ready, stop = threading.Event(), threading.Event()
    result: dict[str, CaptureSummary | BaseException] = {}
    progress: list[int] = []

    def run() -> None:
        try:
            result["summary"] = capture(
                bootstrap=kafka_bootstrap,
                topic=topic,
                options=CaptureOptions(iface="lo", filter=traffic.filter, write_pcap=pcap),
                status=lambda s: progress.append(s.produced),
                stop=stop,
                ready=ready.set,
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["error"] = exc
            ready.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert ready.wait(30) and "error" not in result, result.get("error")
        traffic.send()
        # 5 datagrams + at least 7 TCP segments; then wait until nothing more comes for a second.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            len(progress) < 3 or progress[-1] < 12 or progress[-1] != progress[-3]
        ):
            time.sleep(0.25)
    finally:
        stop.set()
        thread.join(30)
    summary = result["summary"]
    assert isinstance(summary, CaptureSummary)

    records = records_of(consume_all(kafka_bootstrap, topic)).to_pylist()
    assert summary.produced == summary.acknowledged == len(records)
    assert all(r["iface"] == "lo" and r["src_ip"] == r["dst_ip"] == "127.0.0.1" for r in records)
    # Every UDP datagram, with its exact lengths, once (the loopback's outgoing copy is dropped).
    udp = [r for r in records if r["proto"] == 17]
    assert sorted((r["src_port"], r["dst_port"], r["ip_len"], r["wire_len"]) for r in udp) == sorted(
        (traffic.udp_src, traffic.udp_port, 28 + len(p), 42 + len(p)) for p in traffic.payloads
    )
    # The TCP connection: handshake with ack = seq + 1, the data segment, FIN from both sides.
    tcp = [r for r in records if r["proto"] == 6]
    syn = [r for r in tcp if r["tcp_flags"] == 0x02]
    synack = [r for r in tcp if r["tcp_flags"] == 0x12]
    assert len(syn) == len(synack) == 1
    assert (syn[0]["src_port"], syn[0]["dst_port"]) == (traffic.tcp_client, traffic.tcp_port)
    assert (synack[0]["src_port"], synack[0]["dst_port"]) == (traffic.tcp_port, traffic.tcp_client)
    assert synack[0]["tcp_ack"] == (syn[0]["tcp_seq"] + 1) % 2**32
    data = [r for r in tcp if r["tcp_flags"] & 0x08 and r["src_port"] == traffic.tcp_client]  # PSH
    assert len(data) == 1 and data[0]["tcp_seq"] == (syn[0]["tcp_seq"] + 1) % 2**32
    assert data[0]["ip_len"] >= 20 + 20 + len(b"hello netmon")
    assert sum(r["tcp_flags"] & 0x01 for r in tcp) == 2  # FIN from both sides
    # The pcap holds the same frames: Scapy reads it independently.
    frames = [
        p
        for p in rdpcap(str(pcap))
        if (UDP in p and traffic.udp_port in (p[UDP].sport, p[UDP].dport))
        or (TCP in p and traffic.tcp_port in (p[TCP].sport, p[TCP].dport))
    ]
    assert len(frames) == len(records) and all(p[IP].src == "127.0.0.1" for p in frames)
    assert summary.pcap == str(pcap) and summary.interrupted is False


@needs_root
@pytest.mark.kafka
def test_duration_bounds_the_capture(kafka_bootstrap: str) -> None:
    topic = f"test.capture.{uuid.uuid4().hex[:8]}"
    began = time.monotonic()
    summary = capture(
        bootstrap=kafka_bootstrap,
        topic=topic,
        options=CaptureOptions(iface="lo", duration_s=1.0, filter="port=1"),
        status=False,
    )
    assert 1.0 <= time.monotonic() - began < 20 and summary.produced == summary.acknowledged


class FilteredTraffic:
    """UDP datagrams to a port P and to a port Q, and TCP data, on 127.0.0.1: ``udp port P`` keeps
    only the first kind. Round ``i`` sends ``i`` bytes to P and to Q and ``i + 1`` bytes over TCP."""

    def __init__(self) -> None:
        self.port = free_port(socket.SOCK_DGRAM)  # P
        self.other = free_port(socket.SOCK_DGRAM)  # Q
        self.tcp_port = free_port(socket.SOCK_STREAM)
        self.src = 0
        self.sent: list[int] = []  # payload lengths of the datagrams sent to P

    @property
    def bpf(self) -> str:
        return f"udp port {self.port}"

    def __enter__(self) -> FilteredTraffic:
        self._rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._rx_other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._server = socket.socket()
        for s in (self._rx, self._rx_other):
            s.settimeout(5)
        self._rx.bind(("127.0.0.1", self.port))
        self._rx_other.bind(("127.0.0.1", self.other))
        self._tx.bind(("127.0.0.1", 0))
        self.src = self._tx.getsockname()[1]
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", self.tcp_port))
        self._server.listen(1)
        self._client = socket.create_connection(("127.0.0.1", self.tcp_port), timeout=5)
        self._conn, _ = self._server.accept()
        self._conn.settimeout(5)
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self._client, self._conn, self._server, self._tx, self._rx, self._rx_other):
            s.close()

    def round(self, i: int) -> None:
        self._tx.sendto(b"q" * i, ("127.0.0.1", self.other))
        self._client.sendall(b"t" * (i + 1))
        self._tx.sendto(b"p" * i, ("127.0.0.1", self.port))
        self.sent.append(i)
        assert self._rx_other.recv(2048) == b"q" * i and self._rx.recv(2048) == b"p" * i
        received = b""
        while len(received) < i + 1:
            received += self._conn.recv(i + 1 - len(received))
        self._conn.sendall(b"ok")  # and back the other way
        assert self._client.recv(2) == b"ok"


@needs_root
@needs_libpcap
@pytest.mark.kafka
def test_bpf_capture_keeps_only_the_filtered_port(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"test.capture.{uuid.uuid4().hex[:8]}"
    pcap = tmp_path / "bpf.pcap"
    ready, stop = threading.Event(), threading.Event()
    result: dict[str, CaptureSummary | BaseException] = {}
    progress: list[int] = []

    with FilteredTraffic() as traffic:

        def run() -> None:
            try:
                result["summary"] = capture(
                    bootstrap=kafka_bootstrap,
                    topic=topic,
                    options=CaptureOptions(iface="lo", bpf=traffic.bpf, write_pcap=pcap),
                    status=lambda s: progress.append(s.packets),
                    stop=stop,
                    ready=ready.set,
                )
            except BaseException as exc:  # noqa: BLE001 - reported below
                result["error"] = exc
                ready.set()

        thread = threading.Thread(target=run)
        thread.start()
        try:
            assert ready.wait(30) and "error" not in result, result.get("error")
            for i in range(1, 7):
                traffic.round(i)
            # Then wait until nothing more comes for a second (the broker's own traffic is on lo too).
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (
                len(progress) < 3 or progress[-1] < 6 or progress[-1] != progress[-3]
            ):
                time.sleep(0.25)
        finally:
            stop.set()
            thread.join(30)
    summary = result["summary"]
    assert isinstance(summary, CaptureSummary)

    # Only the 6 datagrams to P reached the socket: no record filter had anything to drop.
    assert (summary.packets, summary.decoded, summary.skipped, summary.filtered_out) == (6, 6, {}, 0)
    records = records_of(consume_all(kafka_bootstrap, topic)).to_pylist()
    assert summary.produced == summary.acknowledged == len(records) == 6
    assert sorted(
        (r["proto"], r["src_port"], r["dst_port"], r["ip_len"], r["wire_len"]) for r in records
    ) == [(17, traffic.src, traffic.port, 28 + i, 42 + i) for i in range(1, 7)]
    frames = rdpcap(str(pcap))
    assert sorted((p[UDP].dport, len(p[UDP].payload)) for p in frames) == [
        (traffic.port, i) for i in range(1, 7)
    ]


@needs_root
@needs_libpcap
@pytest.mark.kafka
def test_cli_capture_with_bpf(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"test.capture.{uuid.uuid4().hex[:8]}"
    pcap = tmp_path / "cli.pcap"
    with FilteredTraffic() as traffic:
        args = ["capture", "--iface", "lo", "--bpf", traffic.bpf, "--count", "5", "--duration", "60"]
        args += ["--write-pcap", str(pcap), "--bootstrap", kafka_bootstrap, "--topic", topic, "-q", "--json"]
        args += ["--status-file", str(tmp_path / "status" / "capture-lo.json")]
        proc = subprocess.Popen(
            [str(NETMON), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            # The command says nothing when it is listening: send rounds until it has its 5 frames.
            deadline = time.monotonic() + 60
            i = 0
            while proc.poll() is None and time.monotonic() < deadline:
                i += 1
                traffic.round(i)
                time.sleep(0.05)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert (summary["packets"], summary["decoded"], summary["filtered_out"]) == (5, 5, 0)
    # The status file (netmon up, /metrics) ends with the final summary.
    assert json.loads((tmp_path / "status" / "capture-lo.json").read_text()) == summary
    assert summary["produced"] == summary["acknowledged"] == 5 and summary["skipped"] == {}
    records = sorted(records_of(consume_all(kafka_bootstrap, topic)).to_pylist(), key=lambda r: r["ts"])
    # Five datagrams to P from consecutive rounds (none missed once capturing), nothing else.
    assert [(r["proto"], r["src_port"], r["dst_port"]) for r in records] == [
        (17, traffic.src, traffic.port)
    ] * 5
    lengths = [r["ip_len"] - 28 for r in records]
    assert lengths == list(range(lengths[0], lengths[0] + 5)) and set(lengths) <= set(traffic.sent)
    frames = rdpcap(str(pcap))
    assert sorted((p[UDP].dport, len(p[UDP].payload)) for p in frames) == [(traffic.port, n) for n in lengths]
