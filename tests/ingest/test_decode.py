"""The header decoder on separate frames: link types, edge cases, truncation, address text."""

from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.config import conf
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.ipsec import AH
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Dot1Q, Ether, Loopback

from ingest import decode_frames
from ingest.decode import (
    MAX_TS_NS,
    SUPPORTED_LINKTYPES,
    _ipv4_strings,
    _IPv4Text,
    decode_headers,
    impossible_frames,
    sanitize_iface,
)
from netmon.records import ARROW_SCHEMA
from tests.ingest.conftest import (
    assert_records_equal,
    ethernet_packets,
    ip_payloads,
    netmon_records,
    scapy_record,
)

TS = 1_700_000_000_000_000_000


def eth(**kwargs: object) -> Ether:
    """An Ethernet header with explicit addresses (Scapy would otherwise resolve them, slowly)."""
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", **kwargs)


def decode(frames: list[bytes], linktype: int = 1, iface: str = "0") -> tuple[list[dict], dict]:
    ts = [TS + i for i in range(len(frames))]
    batch, skipped = decode_frames(frames, ts, [len(f) + 4 for f in frames], linktype, iface)
    assert batch.schema.equals(ARROW_SCHEMA)
    return netmon_records([batch]), skipped


def oracle(frames: list[bytes], linktype: int) -> list[dict | None]:
    """Scapy's dissection of the same bytes with the class it binds to the link type."""
    cls = conf.l2types.num2layer[linktype]
    out = []
    for i, frame in enumerate(frames):
        pkt = cls(frame)
        pkt.time = TS // 10**9
        rec = scapy_record(pkt)
        if rec is not None:
            rec.update(ts=TS + i, wire_len=len(frame) + 4)
        out.append(rec)
    return out


@pytest.mark.parametrize(
    ("linktype", "wrap"),
    [
        (1, None),
        (113, lambda p: CookedLinux(lladdrtype=1) / p),
        (276, lambda p: CookedLinuxV2(ifindex=2, lladdrtype=1) / p),
        (101, lambda p: p),
        (0, lambda p: Loopback(type=2 if isinstance(p, IP) else 10) / p),
    ],
    ids=["ethernet", "sll", "sll2", "raw", "null"],
)
def test_decode_frames_matches_scapy(linktype: int, wrap) -> None:
    pkts = ethernet_packets() if wrap is None else [wrap(p) for p in ip_payloads()]
    frames = [bytes(p) for p in pkts]
    ours, skipped = decode(frames, linktype)
    expected = oracle(frames, linktype)
    assert_records_equal(ours, expected)
    assert sum(skipped.values()) == sum(r is None for r in expected)


@settings(max_examples=150, deadline=None)
@given(
    src=st.integers(0, 2**32 - 1),
    dst=st.integers(0, 2**32 - 1),
    sport=st.integers(0, 65535),
    dport=st.integers(0, 65535),
    seq=st.integers(0, 2**32 - 1),
    ack=st.integers(0, 2**32 - 1),
    flags=st.integers(0, 255),
    window=st.integers(0, 65535),
    ttl=st.integers(0, 255),
    vlans=st.lists(st.integers(0, 4095), max_size=3),
)
def test_ipv4_tcp_fields_roundtrip(src, dst, sport, dport, seq, ack, flags, window, ttl, vlans) -> None:
    pkt = eth()
    for vid in vlans:
        pkt = pkt / Dot1Q(vlan=vid)
    pkt = pkt / IP(src=str(ipaddress.IPv4Address(src)), dst=str(ipaddress.IPv4Address(dst)), ttl=ttl)
    pkt = pkt / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, window=window)
    [rec], _ = decode([bytes(pkt)])
    assert rec["src_ip"] == str(ipaddress.IPv4Address(src))
    assert rec["dst_ip"] == str(ipaddress.IPv4Address(dst))
    assert (rec["src_port"], rec["dst_port"], rec["tcp_seq"], rec["tcp_ack"]) == (sport, dport, seq, ack)
    assert (rec["tcp_flags"], rec["tcp_window"], rec["ttl"], rec["proto"]) == (flags, window, ttl, 6)
    assert rec["vlan"] == (vlans[0] if vlans else None)
    assert rec["ip_len"] == 40 and rec["cap_len"] == len(bytes(pkt))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.booleans()), min_size=1, max_size=12))
def test_ipv6_and_mixed_address_text_equals_ipaddress(addrs: list[tuple[bytes, bool]]) -> None:
    frames = []
    want = []
    for raw, as_v4 in addrs:
        if as_v4:
            a = ipaddress.IPv4Address(raw[:4])
            frames.append(bytes(eth() / IP(src=str(a), dst="10.0.0.1") / UDP()))
        else:
            a = ipaddress.IPv6Address(raw)
            frames.append(bytes(eth() / IPv6(src=str(a), dst="::1") / UDP()))
        want.append(str(a))
    ours, _ = decode(frames)
    assert [r["src_ip"] for r in ours] == want


@pytest.mark.parametrize(
    "text",
    [
        "::",
        "::1",
        "::ffff:1.2.3.4",
        "2001:db8::1",
        "1:0:0:1:0:0:0:1",
        "2001:db8:0:1:1:1:1:1",
        "fe80::",
        "ff02::1:ff00:1",
    ],
)
def test_ipv6_special_forms(text: str) -> None:
    [rec], _ = decode([bytes(eth() / IPv6(src=text, dst=text) / ICMP())])
    assert rec["src_ip"] == rec["dst_ip"] == str(ipaddress.IPv6Address(text))


def test_ipv4_text_vectorised_equals_ipaddress() -> None:
    rng = np.random.default_rng(7)
    addr = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32)
    addr[:6] = [0, 2**32 - 1, 0x0A000001, 0x01020304, 0x64000A0B, 0x00FF00FF]
    assert _IPv4Text()(addr).to_pylist() == [str(ipaddress.IPv4Address(int(a))) for a in addr]
    repeated = addr[rng.zipf(1.5, 20_000) % 300]  # the formatted-once-per-distinct-address path
    assert _ipv4_strings(_IPv4Text(), repeated).to_pylist() == [
        str(ipaddress.IPv4Address(int(a))) for a in repeated
    ]


def frame_offsets(pkt) -> tuple[int, int, int]:
    """(end of the link header, end of the IP header, end of the transport header) from Scapy."""
    raw = bytes(pkt)
    ip = pkt.getlayer(IP) or pkt.getlayer(IPv6)
    l3 = len(raw) - len(bytes(ip))
    transport = ip.getlayer(TCP) or ip.getlayer(UDP)
    l4 = len(raw) - len(bytes(transport))
    return l3, l3 + (20 if isinstance(ip, IP) else 40), l4 + (20 if isinstance(transport, TCP) else 8)


@pytest.mark.parametrize(
    ("pkt", "protos"),
    [
        (eth() / Dot1Q(vlan=9) / IP(src="10.0.0.1") / TCP(sport=1, dport=2) / b"payload", {0: 6}),
        (
            eth()
            / IPv6(src="::2")
            / IPv6ExtHdrHopByHop()
            / IPv6ExtHdrDestOpt()
            / UDP(sport=1, dport=2)
            / b"x",
            {0: 0, 56: 60, 64: 17},  # the last next-header field captured (as Scapy reads it)
        ),
    ],
    ids=["vlan-ipv4-tcp", "ipv6-ext-udp"],
)
def test_every_cut_length(pkt, protos: dict[int, int]) -> None:
    """Cut a frame at every length: no record before the IP header ends, no ports before L4 ends."""
    raw = bytes(pkt)
    ip_start, ip_end, l4_end = frame_offsets(pkt)
    for k in range(len(raw) + 1):
        ours, skipped = decode([raw[:k]])
        if k < ip_end:
            assert ours == [] and skipped == {"truncated": 1}, k
            continue
        [rec] = ours
        assert rec["cap_len"] == k
        assert rec["proto"] == protos[max(t for t in protos if t <= k)], k
        assert rec["src_port"] == (1 if k >= l4_end else None), k
    assert ip_start in (18, 14)


def test_transport_outside_the_ip_length_is_not_read() -> None:
    """Bytes after the IP total length are padding, even when they look like a TCP header."""
    ip = IP(src="10.0.0.1", dst="10.0.0.2", proto=6, len=20)
    frame = bytes(eth() / ip) + bytes(TCP(sport=5, dport=6))
    [rec], _ = decode([frame])
    assert rec["ip_len"] == 20 and rec["src_port"] is None
    padded = bytes(eth() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=6)) + b"\0" * 20
    [rec], _ = decode([padded])
    assert rec["src_port"] == 5 and rec["cap_len"] == 62


def test_bad_ip_headers_and_non_ip() -> None:
    v6_in_v4_type = bytes(eth(type=0x0800) / IPv6() / UDP())
    short_ihl = bytearray(bytes(eth() / IP() / UDP()))
    short_ihl[14] = 0x44
    arp = bytes.fromhex("ffffffffffff0200000000010806") + b"\0" * 28
    ours, skipped = decode([v6_in_v4_type, bytes(short_ihl), arp])
    assert ours == []
    assert skipped == {"bad_ip_header": 2, "non_ip": 1}


def test_qinq_0x9100_and_too_many_tags() -> None:
    inner = bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2))
    eth = bytes.fromhex("020000000002020000000001")
    qinq = eth + struct.pack("!HHHH", 0x9100, 0x2064, 0x8100, 0x00C8) + b"\x08\x00" + inner
    nine = eth + b"".join(struct.pack("!HH", 0x8100, i) for i in range(9)) + b"\x08\x00" + inner
    cut = eth + struct.pack("!HH", 0x8100, 5)[:3]
    ours, skipped = decode([qinq, nine, cut])
    assert [(r["vlan"], r["src_port"]) for r in ours] == [(100, 1)]
    assert skipped == {"non_ip": 1, "truncated": 1}


def test_ipv6_ah_is_walked_to_tcp() -> None:
    """Scapy does not dissect past AH: the oracle is Scapy's TCP on the bytes after AH."""
    ah = AH(nh=6, payloadlen=4, spi=7, seq=1, icv=b"\x01" * 12)
    tcp = TCP(sport=443, dport=51000, flags="A", seq=11, ack=12, window=13)
    frame = bytes(eth() / IPv6(src="2001:db8::1", dst="2001:db8::2", nh=51) / ah / tcp)
    ah_len = (4 + 2) * 4
    after = TCP(frame[14 + 40 + ah_len :])
    [rec], _ = decode([frame])
    assert (
        (rec["proto"], rec["src_port"], rec["dst_port"]) == (6, after.sport, after.dport) == (6, 443, 51000)
    )
    assert (rec["tcp_seq"], rec["tcp_ack"], rec["tcp_window"]) == (after.seq, after.ack, after.window)
    assert rec["tcp_flags"] == int(after.flags) & 0xFF


def test_unsupported_and_mixed_link_types() -> None:
    frames = [bytes(ethernet_packets()[0]), bytes(IP(src="10.0.0.9") / UDP()), b"\0" * 40]
    ours, skipped = decode(frames[:1], linktype=239)
    assert ours == [] and skipped == {"unsupported_linktype:239": 1}
    buf = np.frombuffer(b"".join(frames) + bytes(256), np.uint8)
    lens = np.array([len(f) for f in frames])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    cols = decode_headers(buf, starts, lens, np.array([1, 101, 147]))
    assert cols.index.tolist() == [0, 1]
    assert cols.skipped == {"unsupported_linktype:147": 1}
    assert 1 in SUPPORTED_LINKTYPES and 239 not in SUPPORTED_LINKTYPES


def test_empty_input_and_iface() -> None:
    ours, skipped = decode([])
    assert ours == [] and skipped == {}
    ours, skipped = decode([], linktype=239)  # no frames: no count, not a count of 0
    assert ours == [] and skipped == {}
    ours, _ = decode([bytes(ethernet_packets()[0])], iface="br0,\r\nx")
    assert ours[0]["iface"] == "br0___x"
    assert sanitize_iface("eth0") == "eth0"


def test_impossible_timestamps_and_lengths_are_skipped_and_counted() -> None:
    """Live frames with metadata that cannot be true are counted, never records, never fatal."""
    frame = bytes(ethernet_packets()[0])  # 54 bytes, a TCP SYN
    n = len(frame)
    cases = [  # (ts, wire_len, expected: a record's wire_len, or the skip reason)
        (TS, n, n),
        (TS, 0xFFFFFFFF, 0xFFFFFFFF),  # was -1 after an int32 cast
        (0, n, n),  # the epoch itself is possible
        (MAX_TS_NS, n, n),
        (-1, n, "bad_timestamp"),
        (MAX_TS_NS + 1, n, "bad_timestamp"),
        (2**63, n, "bad_timestamp"),  # beyond int64: OverflowError before
        (-(2**70), n, "bad_timestamp"),
        (TS, n - 1, "bad_length"),  # more bytes captured than were on the wire
        (TS, -5, "bad_length"),
        (TS, 2**32, "bad_length"),
        (TS, 2**64, "bad_length"),
        (-1, -1, "bad_timestamp"),  # both: counted once, as bad_timestamp
    ]
    batch, skipped = decode_frames([frame] * len(cases), [c[0] for c in cases], [c[1] for c in cases], 1)
    assert batch.schema.equals(ARROW_SCHEMA)
    kept = [c for c in cases if not isinstance(c[2], str)]
    assert batch.column("wire_len").to_pylist() == [c[2] for c in kept]
    assert batch.column("ts").cast("int64").to_pylist() == [c[0] for c in kept]
    assert batch.column("cap_len").to_pylist() == [n] * len(kept)
    reasons = [c[2] for c in cases if isinstance(c[2], str)]
    assert skipped == {r: reasons.count(r) for r in set(reasons)}
    with pytest.raises(ValueError, match="3 frames, 2 timestamps"):
        decode_frames([frame] * 3, [TS] * 2, [n] * 3, 1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**64), 2**64), st.integers(-(2**33), 2**33), st.integers(0, 80)),
        max_size=12,
    )
)
def test_impossible_frames_equals_brute_force(rows: list[tuple[int, int, int]]) -> None:
    """impossible_frames against the rules written out one frame at a time."""
    ts = np.array([min(max(t, -(2**63)), 2**63 - 1) for t, _, _ in rows], np.int64)
    wire = np.array([w for _, w, _ in rows], np.int64)
    cap = np.array([c for _, _, c in rows], np.int64)
    mask, counts = impossible_frames(ts, cap, wire)
    want = []
    for t, w, c in zip(ts.tolist(), wire.tolist(), cap.tolist(), strict=True):
        if not 0 <= t <= MAX_TS_NS:
            want.append("bad_timestamp")
        elif w < 0 or c < 0 or w > 2**32 - 1 or c > w:
            want.append("bad_length")
        else:
            want.append(None)
    assert (mask is None) == all(r is None for r in want)
    if mask is not None:
        assert mask.tolist() == [r is not None for r in want]
    assert counts == {r: want.count(r) for r in ("bad_timestamp", "bad_length") if want.count(r)}
