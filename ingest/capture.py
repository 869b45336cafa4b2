"""Live capture into Kafka: an L2 raw socket, the fast header decoder, the packet producer.

``netmon capture`` calls :func:`capture`. The socket is a Linux ``AF_PACKET`` socket bound to one
interface; a ``--bpf`` expression is compiled by Scapy (with libpcap) and attached in the kernel,
so unwanted packets never reach Python. Frames are read raw (no Scapy dissection), with their
kernel timestamps (``SO_TIMESTAMPNS``), original lengths and VLAN tags (``PACKET_AUXDATA``), and
decoded in small batches by :func:`ingest.decode.decode_frames`; a batch is closed every
``batch_packets`` frames or ``batch_interval_s`` seconds, so records reach Kafka with little delay
and nothing accumulates in memory. ``--write-pcap`` streams the captured frames to a classic pcap
(nanosecond timestamps) as well. On the loopback interface every packet passes the socket twice
(out and in); the outgoing copy is dropped, as libpcap does.

Live capture needs root or the ``CAP_NET_RAW`` capability; without it, or with an unknown
interface, :class:`LiveCaptureError` says so in one line.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ingest.pcapwriter import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapWriter
from ingest.producer import PacketProducer, sigterm_as_interrupt
from ingest.progress import ProgressLine, capture_line
from ingest.replay import iso_ns
from netmon.filters import PacketFilter, parse_filter

__all__ = [
    "CaptureOptions",
    "CaptureSummary",
    "Interface",
    "broker_exclusion",
    "LiveCaptureError",
    "capture",
    "list_interfaces",
    "open_socket",
]

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
SO_TIMESTAMPNS = 35
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
_AUXDATA = struct.Struct(
    "IIIHHHH"
)  # tp_status, tp_len, tp_snaplen, tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid
_TIMESPEC = struct.Struct("qq")
_ARPHRD_LINKTYPE = {
    1: LINKTYPE_ETHERNET,
    772: LINKTYPE_ETHERNET,
    0xFFFE: LINKTYPE_RAW,
}  # ether, loopback, none
_MAX_FRAME = 262_144
_NEED_PRIVILEGE = (
    "live capture needs root or the CAP_NET_RAW capability "
    "(run as root, or: sudo setcap cap_net_raw,cap_net_admin=eip {python})"
)


class LiveCaptureError(RuntimeError):
    """Live capture cannot start: missing privilege, unknown interface, bad BPF expression, ..."""


@dataclass(frozen=True)
class Interface:
    """A network interface as ``--list-ifaces`` shows it."""

    name: str
    index: int
    state: str  # operstate: up, down, unknown
    hardware: str  # ether, loopback, none (tun), or the ARPHRD number
    address: str  # MAC address, or "" for none

    def line(self) -> str:
        return f"{self.index:>3}  {self.name:<16} {self.state:<8} {self.hardware:<9} {self.address}"


def _sysfs(name: str, leaf: str) -> str:
    try:
        return Path("/sys/class/net", name, leaf).read_text().strip()
    except OSError:
        return ""


def list_interfaces() -> list[Interface]:
    """The host's network interfaces, by index."""
    names = {1: "ether", 772: "loopback", 0xFFFE: "none"}
    out = []
    for index, name in sorted(socket.if_nameindex()):
        hw = _sysfs(name, "type")
        hardware = names.get(int(hw), hw) if hw.isdigit() else hw or "?"
        out.append(
            Interface(name, index, _sysfs(name, "operstate") or "?", hardware, _sysfs(name, "address"))
        )
    return out


@dataclass(frozen=True, kw_only=True)
class CaptureOptions:
    """What and how to capture (the ``netmon capture`` options)."""

    iface: str
    bpf: str | None = None  #: kernel filter (tcpdump syntax; compiled by Scapy with libpcap)
    filter: str | None = None  #: netmon field filter on decoded records (:mod:`netmon.filters`)
    count: int | None = None  #: stop after this many frames captured
    duration_s: float | None = None  #: stop after this many seconds
    write_pcap: str | Path | None = None  #: also write the captured frames to this pcap
    batch_packets: int = 512  #: decode and send at least every this many frames ...
    batch_interval_s: float = 0.05  #: ... or this often
    records_per_message: int = 1000
    linger_ms: int = 20
    compression: str | None = "lz4"
    buffer_bytes: int = 16 << 20  #: kernel socket receive buffer
    #: drop records of the producer's own connection to the bootstrap broker (capturing on the
    #: broker's interface would otherwise feed the capture its own Kafka traffic)
    exclude_broker: bool = True

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 1:
            raise ValueError(f"--count must be >= 1, got {self.count}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"--duration must be > 0, got {self.duration_s}")
        if self.batch_packets < 1 or not self.batch_interval_s > 0:
            raise ValueError("batch_packets must be >= 1 and batch_interval_s > 0")


@dataclass
class CaptureSummary:
    """What a live capture saw and sent."""

    iface: str
    topic: str
    packets: int = 0  #: frames captured (after the BPF filter)
    decoded: int = 0  #: records decoded
    skipped: dict[str, int] = field(default_factory=dict)  #: frames that are not records, by reason
    filtered_out: int = 0
    produced: int = 0
    acknowledged: int = 0
    failed: int = 0
    messages: int = 0
    bytes: int = 0
    kernel_drops: int = 0  #: frames the kernel dropped (receive buffer full)
    elapsed_s: float = 0.0
    rate_pps: float = 0.0
    first_ts: str | None = None
    last_ts: str | None = None
    pcap: str | None = None
    interrupted: bool = False
    compression: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(self.skipped.items())) or "none"
        out = [
            f"interface     {self.iface}",
            f"captured      {self.packets:,} frames, {self.decoded:,} records decoded"
            + (f", kernel drops {self.kernel_drops:,}" if self.kernel_drops else ""),
            f"skipped       {skipped}",
            f"filtered out  {self.filtered_out:,}",
            f"produced      {self.produced:,} records in {self.messages:,} messages to {self.topic}",
            f"acknowledged  {self.acknowledged:,}" + (f"  FAILED {self.failed:,}" if self.failed else ""),
            f"elapsed       {self.elapsed_s:.2f} s, {self.rate_pps:,.0f} packets/s",
            f"event time    {self.first_ts} .. {self.last_ts}",
        ]
        if self.pcap:
            out.append(f"pcap          {self.pcap}")
        if self.interrupted:
            out.append("interrupted   yes (flushed and closed)")
        return out


def broker_exclusion(bootstrap: str) -> str:
    """A filter expression matching no packet of a connection to the bootstrap servers.

    >>> broker_exclusion("127.0.0.1:9092,[::1]:9093")
    'not ((ip=127.0.0.1 and port=9092) or (ip=::1 and port=9093))'
    """
    terms = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        if not port.isdigit() or not host:
            continue
        try:
            address = socket.getaddrinfo(host, None)[0][4][0]
        except OSError:
            continue
        terms.append(f"(ip={address} and port={port})")
    return f"not ({' or '.join(terms)})" if terms else ""


def _unknown_iface(name: str) -> LiveCaptureError:
    available = ", ".join(i.name for i in list_interfaces()) or "none"
    return LiveCaptureError(f"unknown interface {name!r} (available: {available})")


def _attach_bpf(sock: socket.socket, expression: str, iface: str) -> None:
    try:
        from scapy.arch.linux import attach_filter
        from scapy.error import Scapy_Exception
    except ImportError as exc:  # pragma: no cover - scapy is a dependency
        raise LiveCaptureError(f"--bpf needs Scapy: {exc}") from None
    try:
        attach_filter(sock, expression, iface)
    except ImportError:
        raise LiveCaptureError(
            "--bpf needs libpcap to compile the expression (`make setup` installs it as root, "
            "or: apt-get install libpcap0.8), or filter decoded records with --filter"
        ) from None
    except Scapy_Exception as exc:
        raise LiveCaptureError(
            f"bad --bpf expression {expression!r}: {_pcap_reason(exc, expression)}"
        ) from None
    except OSError as exc:
        raise LiveCaptureError(
            f"--bpf {expression!r}: the kernel rejected the compiled filter: {exc.strerror or exc}"
        ) from None


def _pcap_reason(exc: Exception, expression: str) -> str:
    """libpcap's own words, from Scapy's "Failed to compile filter expression EXPR (REASON)"."""
    text = str(exc).strip()
    prefix = f"Failed to compile filter expression {expression!r} ("
    if text.startswith(prefix) and text.endswith(")"):
        text = text[len(prefix) : -1]
    return " ".join(text.split()) or type(exc).__name__


def open_socket(
    iface: str, *, bpf: str | None = None, buffer_bytes: int = 16 << 20
) -> tuple[socket.socket, int]:
    """An ``AF_PACKET`` socket bound to ``iface`` (BPF attached, queue flushed) and its pcap link type."""
    try:
        socket.if_nametoindex(iface)
    except OSError:
        raise _unknown_iface(iface) from None
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError:
        raise LiveCaptureError(_NEED_PRIVILEGE.format(python=os.path.realpath(sys.executable))) from None
    try:
        if bpf:
            _attach_bpf(sock, bpf, iface)
        try:
            sock.bind((iface, ETH_P_ALL))
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise _unknown_iface(iface) from None
            raise LiveCaptureError(f"cannot bind to interface {iface!r}: {exc.strerror}") from None
        hatype = sock.getsockname()[3]
        linktype = _ARPHRD_LINKTYPE.get(hatype)
        if linktype is None:
            raise LiveCaptureError(
                f"interface {iface!r} has hardware type {hatype}; supported: Ethernet, loopback, tun (raw IP)"
            )
        for level, option, value in (
            (socket.SOL_SOCKET, 33, buffer_bytes),  # SO_RCVBUFFORCE (root), else SO_RCVBUF below
            (SOL_PACKET, PACKET_AUXDATA, 1),
            (socket.SOL_SOCKET, SO_TIMESTAMPNS, 1),
        ):
            try:
                sock.setsockopt(level, option, value)
            except OSError:
                if option == 33:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        _drain(sock)
        return sock, linktype
    except BaseException:
        sock.close()
        raise


def _drain(sock: socket.socket) -> None:
    """Drop frames queued before the filter was attached."""
    while select.select([sock], [], [], 0)[0]:
        sock.recv(_MAX_FRAME)


def _kernel_drops(sock: socket.socket) -> int:
    try:
        _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops
    except OSError:
        return 0


def _vlan_tag(aux: bytes) -> bytes | None:
    status, _len, _snap, _mac, _net, tci, tpid = _AUXDATA.unpack_from(aux)
    if tci or status & TP_STATUS_VLAN_VALID:
        return struct.pack("!HH", tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100, tci)
    return None


class _Batch:
    """Frames waiting to be decoded."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.ts: list[int] = []
        self.wire: list[int] = []
        self.opened = 0.0

    def add(self, frame: bytes, ts_ns: int, wire_len: int) -> None:
        if not self.frames:
            self.opened = time.monotonic()
        self.frames.append(frame)
        self.ts.append(ts_ns)
        self.wire.append(wire_len)

    def clear(self) -> None:
        self.frames, self.ts, self.wire = [], [], []


def _decode_frames() -> Callable[..., Any]:
    from ingest.decode import decode_frames

    return decode_frames


def capture(
    *,
    bootstrap: str,
    topic: str,
    options: CaptureOptions,
    partitions: int = 2,
    status: bool | Callable[[CaptureSummary], None] = True,
    stop: threading.Event | None = None,
    ready: Callable[[], None] | None = None,
    timeout_s: float = 10.0,
    security: Mapping[str, Any] | None = None,
    replication: int = 1,
    min_insync_replicas: int | None = None,
) -> CaptureSummary:
    """Capture on ``options.iface`` and produce the decoded records to ``topic`` until told to stop.

    Stops after ``options.count`` frames, after ``options.duration_s`` seconds, when ``stop`` is
    set, on Ctrl-C or on SIGTERM (the last two mark the summary ``interrupted``); then flushes and
    closes the producer and the pcap file.

    Parameters
    ----------
    status
        ``True``: a status line on stderr; ``False``: none; a callable: called with the running
        summary about twice a second.
    ready
        Called once the socket is listening (tests start their traffic then).
    replication, min_insync_replicas
        For the topic when it is created (:class:`ingest.producer.PacketProducer`).

    Raises
    ------
    LiveCaptureError
        No privilege, unknown interface, bad BPF expression (before connecting to Kafka).
    netmon.filters.FilterError
        Malformed ``--filter`` expression.
    ingest.producer.BrokerUnavailable
        The broker did not answer within ``timeout_s``.
    """
    opts = options
    packet_filter: PacketFilter | None = parse_filter(opts.filter) if opts.filter else None
    if opts.exclude_broker:
        own = broker_exclusion(bootstrap)
        if own:
            text = f"({opts.filter}) and {own}" if opts.filter else own
            packet_filter = parse_filter(text)
    sock, linktype = open_socket(opts.iface, bpf=opts.bpf, buffer_bytes=opts.buffer_bytes)
    summary = CaptureSummary(iface=opts.iface, topic=topic)
    writer: PcapWriter | None = None
    producer: PacketProducer | None = None
    line = ProgressLine(enabled=status is True, interval_s=0.5, log_interval_s=10.0)
    began = time.monotonic()
    try:
        producer = PacketProducer(
            bootstrap,
            topic,
            compression=opts.compression,
            linger_ms=opts.linger_ms,
            partitions=partitions,
            replication=replication,
            min_insync_replicas=min_insync_replicas,
            timeout_s=timeout_s,
            security=security,
        )
        summary.compression = producer.compression
        if opts.write_pcap:
            writer = PcapWriter(opts.write_pcap, linktype=linktype, snaplen=_MAX_FRAME, nanosecond=True)
            summary.pcap = str(opts.write_pcap)
        with sigterm_as_interrupt():
            _drain(sock)
            began = time.monotonic()
            if ready is not None:
                ready()
            _Session(sock, linktype, opts, packet_filter, producer, writer, summary).run(
                line, status, stop, began
            )
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        summary.kernel_drops = _kernel_drops(sock)
        sock.close()
        if writer is not None:
            writer.close()
        if producer is not None:
            try:
                producer.close(timeout_s=10.0 if summary.interrupted else None)
            finally:
                _tally(summary, producer, began)
                line.close(_status_text(summary, time.monotonic() - began))
    return summary


def _tally(summary: CaptureSummary, producer: PacketProducer, began: float) -> None:
    counts = producer.counts
    summary.acknowledged, summary.failed = counts.acked_records, counts.failed_records
    summary.messages, summary.bytes = counts.messages, counts.bytes
    summary.elapsed_s = round(time.monotonic() - began, 3)
    summary.rate_pps = round(summary.packets / summary.elapsed_s, 1) if summary.elapsed_s > 0 else 0.0


def _status_text(summary: CaptureSummary, elapsed: float) -> str:
    return capture_line(
        iface=summary.iface,
        packets=summary.packets,
        records=summary.decoded,
        produced=summary.produced,
        acknowledged=summary.acknowledged,
        skipped=sum(summary.skipped.values()),
        elapsed_s=elapsed,
    )


class _Session:
    """One capture's receive loop: read frames, decode them in small batches, produce."""

    def __init__(
        self,
        sock: socket.socket,
        linktype: int,
        opts: CaptureOptions,
        packet_filter: PacketFilter | None,
        producer: PacketProducer,
        writer: PcapWriter | None,
        summary: CaptureSummary,
    ) -> None:
        self.sock = sock
        self.linktype = linktype
        self.opts = opts
        self.filter = packet_filter
        self.producer = producer
        self.writer = writer
        self.summary = summary
        self.pending = _Batch()
        self.decode_frames = _decode_frames()

    def flush(self) -> None:
        """Decode the pending frames and produce their records."""
        pending, summary = self.pending, self.summary
        if not pending.frames:
            return
        batch, skipped = self.decode_frames(
            pending.frames, pending.ts, pending.wire, self.linktype, iface=self.opts.iface
        )
        pending.clear()
        summary.decoded += batch.num_rows
        for reason, n in skipped.items():
            summary.skipped[reason] = summary.skipped.get(reason, 0) + n
        if self.filter is not None and batch.num_rows:
            kept = self.filter.apply(batch)
            summary.filtered_out += batch.num_rows - kept.num_rows
            batch = kept
        if batch.num_rows:
            self.producer.send_batch(batch, self.opts.records_per_message)
            summary.produced += batch.num_rows
            if summary.first_ts is None:
                summary.first_ts = iso_ns(batch.column(0)[0].value)
            summary.last_ts = iso_ns(batch.column(0)[-1].value)

    def run(
        self,
        line: ProgressLine,
        status: bool | Callable[[CaptureSummary], None],
        stop: threading.Event | None,
        began: float,
    ) -> None:
        """Receive until the count, the duration or ``stop``; always flush what is pending."""
        try:
            self._receive(line, status, stop, began)
        finally:
            self.flush()

    def _receive(
        self,
        line: ProgressLine,
        status: bool | Callable[[CaptureSummary], None],
        stop: threading.Event | None,
        began: float,
    ) -> None:
        opts, summary, pending = self.opts, self.summary, self.pending
        deadline = began + opts.duration_s if opts.duration_s else None
        last_status = 0.0
        while True:
            now = time.monotonic()
            if (stop is not None and stop.is_set()) or (deadline is not None and now >= deadline):
                break
            if opts.count is not None and summary.packets >= opts.count:
                break
            if pending.frames and (
                len(pending.frames) >= opts.batch_packets or now - pending.opened >= opts.batch_interval_s
            ):
                self.flush()
            if now - last_status >= 0.5:
                last_status = now
                summary.acknowledged = self.producer.counts.acked_records
                if callable(status):
                    status(summary)
                elif line.due():
                    line.show(_status_text(summary, now - began))
            wait = (
                opts.batch_interval_s
                if deadline is None
                else max(0.0, min(opts.batch_interval_s, deadline - now))
            )
            if select.select([self.sock], [], [], wait)[0]:
                self._read_queued()

    def _read_queued(self) -> None:
        """Read the frames queued on the socket, without blocking, up to one batch."""
        sock, opts, summary, linktype = self.sock, self.opts, self.summary, self.linktype
        loopback = sock.getsockname()[3] == 772
        ancillary = socket.CMSG_SPACE(_AUXDATA.size) + socket.CMSG_SPACE(_TIMESPEC.size)
        for _ in range(opts.batch_packets):
            try:
                data, anc, _flags, addr = sock.recvmsg(_MAX_FRAME, ancillary, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if loopback and addr[2] == socket.PACKET_OUTGOING:
                continue  # the same packet comes back in as PACKET_HOST
            ts_ns, wire_len = 0, len(data)
            for level, kind, value in anc:
                if level == SOL_PACKET and kind == PACKET_AUXDATA and len(value) >= _AUXDATA.size:
                    wire_len = max(wire_len, _AUXDATA.unpack_from(value)[1])
                    tag = _vlan_tag(value)
                    if tag is not None and linktype == LINKTYPE_ETHERNET and len(data) >= 12:
                        data = data[:12] + tag + data[12:]  # the kernel strips the 802.1Q tag
                        wire_len += 4
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    ts_ns = sec * 1_000_000_000 + nsec
            ts_ns = ts_ns or time.time_ns()
            summary.packets += 1
            self.pending.add(data, ts_ns, wire_len)
            if self.writer is not None:
                self.writer.write(data, ts_ns, wire_len)
            if opts.count is not None and summary.packets >= opts.count:
                return
