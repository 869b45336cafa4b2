"""Fixtures for the reader/decoder tests: Scapy-built captures and Scapy's dissection as the oracle.

The oracle (:func:`scapy_record`) turns one packet dissected by Scapy into the record netmon
must produce, from Scapy's own layer objects: it shares no code with ``ingest.decode``.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
import scapy.layers.inet  # noqa: F401 - registers the link types and bindings Scapy dissects with
import scapy.layers.inet6  # noqa: F401
import scapy.layers.ipsec  # noqa: F401
import scapy.layers.l2  # noqa: F401
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    _ICMPv6,
    _MobilityHeader,
)
from scapy.layers.ipsec import AH
from scapy.layers.l2 import Dot1Q
from scapy.packet import Packet
from scapy.utils import PcapReader

from netmon.records import RECORD_COLUMNS

_EXT_HEADERS = (
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    IPv6ExtHdrFragment,
    IPv6ExtHdrDestOpt,
    AH,
    _MobilityHeader,
)

Record = dict[str, Any]


# -- the oracle -----------------------------------------------------------------------------------


def scapy_record(pkt: Packet, *, iface: str = "0") -> Record | None:
    """The record for one Scapy-dissected packet, or None when the packet has no IP header."""
    layer: Packet = pkt
    vlan = None
    while layer is not None and layer.name != "NoPayload" and type(layer) not in (IP, IPv6):
        if isinstance(layer, Dot1Q) and vlan is None:
            vlan = layer.vlan
        layer = layer.payload
    if type(layer) not in (IP, IPv6):
        return None
    ip = layer
    rec: Record = dict.fromkeys(RECORD_COLUMNS)
    rec.update(
        ts=int(Decimal(pkt.time) * 10**9),
        cap_len=len(pkt.original),
        wire_len=pkt.wirelen if pkt.wirelen is not None else len(pkt.original),
        src_ip=str(ipaddress.ip_address(ip.src)),
        dst_ip=str(ipaddress.ip_address(ip.dst)),
        vlan=vlan,
        iface=getattr(pkt, "sniffed_on", None) or iface,
    )
    transport: Packet | None = None
    if type(ip) is IP:
        rec.update(ip_version=4, proto=ip.proto, ip_len=ip.len, ttl=ip.ttl)
        if ip.frag == 0 and isinstance(ip.payload, TCP | UDP | ICMP):
            transport = ip.payload
    else:
        rec.update(ip_version=6, proto=ip.nh, ip_len=ip.plen + 40, ttl=ip.hlim)
        cur = ip.payload
        while isinstance(cur, _EXT_HEADERS):
            rec["proto"] = cur.nh
            if isinstance(cur, IPv6ExtHdrFragment) and cur.offset:
                cur = None
                break
            cur = cur.payload
        if isinstance(cur, TCP | UDP | _ICMPv6):
            transport = cur
    if isinstance(transport, TCP | UDP):
        rec.update(src_port=transport.sport, dst_port=transport.dport)
    if isinstance(transport, TCP):
        rec.update(
            tcp_flags=int(transport.flags) & 0xFF,
            tcp_seq=transport.seq,
            tcp_ack=transport.ack,
            tcp_window=transport.window,
        )
    if isinstance(transport, ICMP | _ICMPv6):
        rec.update(icmp_type=transport.type, icmp_code=transport.code)
    return rec


def scapy_file_records(
    path: str | Path, *, iface: str = "0", limit: int | None = None
) -> list[Record | None]:
    """Scapy's reading and dissection of a capture (its first ``limit`` packets): one entry per packet."""
    with PcapReader(str(path)) as reader:
        return [scapy_record(pkt, iface=iface) for pkt in islice(reader, limit)]


def netmon_records(batches: Iterable[Any]) -> list[Record]:
    """Our records as dicts, ``ts`` as integer nanoseconds (to compare with the oracle)."""
    out: list[Record] = []
    for batch in batches:
        ts = batch.column("ts").cast("int64").to_pylist()
        for row, ns in zip(batch.to_pylist(), ts, strict=True):
            row["ts"] = ns
            out.append(row)
    return out


def assert_records_equal(ours: Sequence[Record], expected: Sequence[Record | None]) -> None:
    """Field-by-field equality, reporting the first differing packet and field."""
    wanted = [r for r in expected if r is not None]
    assert len(ours) == len(wanted), f"{len(ours)} records, oracle has {len(wanted)}"
    for i, (got, want) in enumerate(zip(ours, wanted, strict=True)):
        diff = {k: (got[k], want[k]) for k in RECORD_COLUMNS if got[k] != want[k]}
        assert not diff, f"record {i}: (ours, oracle) differ: {diff}"


@pytest.fixture(scope="session")
def oracle() -> Callable[..., list[Record | None]]:
    """``oracle(path, iface="0")``: Scapy's records for a capture file."""
    return scapy_file_records


# -- packets --------------------------------------------------------------------------------------


def timed(
    pkts: Sequence[Packet], start: str = "1700000000.000000000", step_ns: int = 1_234_567
) -> list[Packet]:
    """Give packets increasing timestamps (exact decimals, ns apart)."""
    t0 = Decimal(start)
    for i, pkt in enumerate(pkts):
        pkt.time = t0 + Decimal(i * step_ns) / Decimal(10**9)
    return list(pkts)


def ip_payloads() -> list[Packet]:
    """Network-layer packets covering IPv4/IPv6, options, fragments, extension headers, ICMP."""
    from scapy.layers.inet import GRE, IPerror, IPOption_RR, UDPerror
    from scapy.layers.inet6 import (
        MIP6MH_BU,
        ICMPv6EchoRequest,
        ICMPv6ND_NS,
        ICMPv6PacketTooBig,
    )

    return [
        IP(src="10.0.0.1", dst="192.0.2.7", ttl=64)
        / TCP(sport=12345, dport=80, flags="S", seq=1, window=8192),
        IP(src="192.0.2.7", dst="10.0.0.1", ttl=255)
        / TCP(
            sport=80, dport=12345, flags="SA", seq=2**32 - 1, ack=2, options=[("MSS", 1460), ("NOP", None)]
        ),
        IP(src="172.16.5.4", dst="8.8.8.8", options=[IPOption_RR(routers=["1.2.3.4"])])
        / UDP(sport=5353, dport=53)
        / b"q",
        IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67),
        IP(src="10.1.2.3", dst="10.3.2.1") / ICMP(type=8, code=0, id=7, seq=1),
        IP(src="10.1.2.3", dst="10.3.2.1")
        / ICMP(type=3, code=3)
        / IPerror(dst="9.9.9.9")
        / UDPerror(dport=33434),
        IP(src="10.9.9.9", dst="10.8.8.8", flags="MF", frag=0, proto=17, id=99)
        / UDP(sport=1000, dport=2000)
        / (b"x" * 24),
        IP(src="10.9.9.9", dst="10.8.8.8", frag=4, proto=17, id=99) / (b"y" * 24),
        IP(src="100.64.0.1", dst="100.64.0.2") / GRE() / IP(src="1.1.1.1", dst="2.2.2.2") / TCP(dport=443),
        IP(src="198.51.100.1", dst="203.0.113.9", proto=41)
        / IPv6(src="2001:db8::5", dst="2001:db8::6")
        / UDP(),
        IP(src="10.0.0.2", dst="10.0.0.3", proto=132) / (b"\0" * 12),
        IPv6(src="2001:db8::1", dst="fe80::1:2", hlim=33)
        / TCP(sport=40000, dport=22, flags="FA", seq=5, ack=6, window=1),
        IPv6(src="::ffff:1.2.3.4", dst="::") / UDP(sport=1, dport=65535),
        IPv6(src="2001:db8:0:0:1:0:0:1", dst="2001:0:0:1::1") / ICMPv6EchoRequest(id=1, seq=2),
        IPv6(src="fe80::1", dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt="fe80::99"),
        IPv6(src="2001:db8::9", dst="2001:db8::a") / ICMPv6PacketTooBig(mtu=1280) / IPv6() / UDP(),
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(addresses=["2001:db8::3"])
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrFragment(m=1, offset=0, id=5)
        / TCP(sport=1111, dport=2222, flags="PA"),
        IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(offset=100, id=5, nh=6) / (b"z" * 16),
        IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrDestOpt() / UDP(sport=3, dport=4),
        IPv6(src="2001:db8::7", dst="2001:db8::8") / IPv6ExtHdrDestOpt() / MIP6MH_BU(),
        IPv6(src="2001:db8::7", dst="2001:db8::8", nh=59),
    ]


def ethernet_packets() -> list[Packet]:
    """Ethernet frames: every IP payload, VLAN/QinQ tags, and non-IP frames (ARP, LLDP, 802.3)."""
    from scapy.layers.l2 import ARP, LLC, SNAP, Dot1AD, Dot3, Ether

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = [eth / p for p in ip_payloads()]
    frames += [
        eth / Dot1Q(vlan=10) / IP(src="10.10.0.1", dst="10.10.0.2") / TCP(dport=8080),
        eth / Dot1AD(vlan=100) / Dot1Q(vlan=200) / IP(src="10.20.0.1", dst="10.20.0.2") / UDP(dport=161),
        eth / Dot1Q(vlan=4094) / IPv6(src="2001:db8::10", dst="2001:db8::11") / TCP(),
        eth / Dot1Q(vlan=3) / Dot1Q(vlan=4) / Dot1Q(vlan=5) / IP(src="10.30.0.1", dst="10.30.0.2") / ICMP(),
        eth / ARP(psrc="10.0.0.1", pdst="10.0.0.2"),
        Ether(src="02:00:00:00:00:01", dst="01:80:c2:00:00:0e", type=0x88CC) / (b"\x02\x07lldp" * 4),
        Dot3(src="02:00:00:00:00:01", dst="01:80:c2:00:00:00") / LLC() / SNAP() / (b"\0" * 30),
        eth / Dot1Q(vlan=7) / ARP(),
    ]
    return timed(frames)


# -- writers --------------------------------------------------------------------------------------


def write_pcap(
    path: Path,
    pkts: Sequence[Packet],
    *,
    linktype: int | None = None,
    nano: bool = False,
    endianness: str = "",
    gz: bool = False,
) -> Path:
    """A classic pcap written by Scapy's own writer."""
    from scapy.utils import PcapWriter

    with PcapWriter(str(path), linktype=linktype, nano=nano, endianness=endianness, gz=gz, sync=True) as w:
        for pkt in pkts:
            w.write(pkt)
    return path


def pcap_bytes(
    frames: Sequence[bytes], *, linktype: int = 1, order: str = "<", ts0: int = 1_700_000_000
) -> bytes:
    """A classic µs pcap made by hand (for damaged-file tests): one record per frame, 1 ms apart."""
    out = [struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)]
    for i, frame in enumerate(frames):
        out.append(struct.pack(order + "IIII", ts0 + i // 1000, (i % 1000) * 1000, len(frame), len(frame)))
        out.append(frame)
    return b"".join(out)


def _pad4(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def ng_block(order: str, btype: int, body: bytes) -> bytes:
    """One pcapng block: type, total length, body (padded), total length."""
    body = _pad4(body)
    total = len(body) + 12
    return struct.pack(order + "II", btype, total) + body + struct.pack(order + "I", total)


def ng_option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + _pad4(value)


def ng_section(
    order: str,
    interfaces: Sequence[dict[str, Any]],
    packets: Sequence[tuple[Any, ...]],
) -> bytes:
    """A pcapng section made by hand.

    ``interfaces``: dicts with ``linktype`` and optional ``name``, ``tsresol`` (the option byte),
    ``snaplen``, ``tsoffset``. ``packets``: ``("epb", ifid, ticks, frame, wirelen)``,
    ``("opb", ifid, ticks, frame, wirelen)`` or ``("spb", frame, wirelen)``.
    """
    out = [ng_block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for itf in interfaces:
        opts = b""
        if itf.get("name") is not None:
            opts += ng_option(order, 2, itf["name"].encode())
        if itf.get("tsresol") is not None:
            opts += ng_option(order, 9, bytes([itf["tsresol"]]))
        if itf.get("tsoffset") is not None:
            opts += ng_option(order, 14, struct.pack(order + "q", itf["tsoffset"]))
        if opts:
            opts += struct.pack(order + "HH", 0, 0)
        body = struct.pack(order + "HHI", itf["linktype"], 0, itf.get("snaplen", 0)) + opts
        out.append(ng_block(order, 1, body))
    for pkt in packets:
        if pkt[0] == "spb":
            _, frame, wirelen = pkt
            out.append(ng_block(order, 3, struct.pack(order + "I", wirelen) + frame))
            continue
        kind, ifid, ticks, frame, wirelen = pkt
        hi, lo = ticks >> 32, ticks & 0xFFFFFFFF
        if kind == "epb":
            head = struct.pack(order + "IIIII", ifid, hi, lo, len(frame), wirelen)
            out.append(ng_block(order, 6, head + frame))
        else:
            head = struct.pack(order + "HHIIII", ifid, 0, hi, lo, len(frame), wirelen)
            out.append(ng_block(order, 2, head + frame))
    return b"".join(out)


@pytest.fixture
def ethernet_pcap(tmp_path: Path) -> Path:
    """A Scapy-written µs pcap of :func:`ethernet_packets`."""
    return write_pcap(tmp_path / "ethernet.pcap", ethernet_packets())


# -- compressed streams: the brute-force oracle of what survives damage --------------------------


def _decompressor(codec: str) -> Any:
    import bz2
    import lzma
    import zlib

    if codec == "gzip":
        return zlib.decompressobj(wbits=31)
    if codec == "bz2":
        return bz2.BZ2Decompressor()
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)


def salvage(data: bytes, codec: str) -> tuple[bytes, int | None]:
    """What a stream decompressor fed one byte at a time gives before it reports damage.

    After each byte the decompressor is called without input until it gives nothing (bz2 may
    hold output, or bits it has not looked at, until called again). Returns the decompressed
    bytes and the file offset of the byte at which the decompressor reported damage
    (``len(data)`` when the file ends inside a member; None when whole). Members/streams follow
    each other, with zero bytes between them skipped.
    """
    import lzma
    import zlib

    out = bytearray()
    pos = 0
    while pos < len(data):
        dec = _decompressor(codec)
        while not dec.eof:
            if pos == len(data):
                return bytes(out), len(data)
            try:
                more = dec.decompress(data[pos : pos + 1])
                while more:
                    out += more
                    more = b"" if dec.eof else dec.decompress(b"")
            except (OSError, EOFError, zlib.error, lzma.LZMAError):
                return bytes(out), pos
            pos += 1
        pos -= len(dec.unused_data)
        while pos < len(data) and data[pos] == 0:
            pos += 1
    return bytes(out), None


def intact_prefix(damaged: bytes, original: bytes) -> int:
    """Length of the longest common prefix of two byte strings."""
    n = min(len(damaged), len(original))
    step = 4096
    i = 0
    while i < n and damaged[i : i + step] == original[i : i + step]:
        i += step
    while i < n and damaged[i] == original[i]:
        i += 1
    return min(i, n)
