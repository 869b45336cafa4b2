"""Capture readers against Scapy's reading and dissection: formats, link types, real captures, bad input."""

from __future__ import annotations

import bz2
import gzip
import lzma
import random
import re
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Loopback, LoopbackOpenBSD

from ingest import CaptureError, ReadSummary, read_records
from ingest.decode import MAX_TS_NS
from netmon.records import ARROW_SCHEMA
from tests.ingest.conftest import (
    assert_records_equal,
    ethernet_packets,
    intact_prefix,
    ip_payloads,
    netmon_records,
    ng_block,
    ng_section,
    pcap_bytes,
    salvage,
    scapy_file_records,
    timed,
    write_pcap,
)


def read_all(path: Path, **kwargs: object) -> tuple[list[dict], ReadSummary]:
    reader = read_records(path, **kwargs)
    batches = list(reader)
    for batch in batches:
        assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    return netmon_records(batches), reader.summary


def check_summary(summary: ReadSummary, expected: list) -> None:
    """The counts the oracle implies: frames, records, and frames = records + skipped."""
    assert summary.frames == len(expected)
    assert summary.records == sum(r is not None for r in expected)
    assert summary.frames == summary.records + sum(summary.skipped.values())


# -- classic pcap ---------------------------------------------------------------------------------


@pytest.mark.parametrize("endianness", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True], ids=["us", "ns"])
def test_pcap_variants_match_scapy(tmp_path: Path, nano: bool, endianness: str) -> None:
    path = write_pcap(tmp_path / "x.pcap", ethernet_packets(), nano=nano, endianness=endianness)
    magic = path.read_bytes()[:4]
    assert magic == struct.pack(endianness + "I", 0xA1B23C4D if nano else 0xA1B2C3D4)
    expected = scapy_file_records(path)
    ours, summary = read_all(path)
    assert_records_equal(ours, expected)
    check_summary(summary, expected)
    assert summary.skipped == {"non_ip": 4}
    assert summary.non_first_fragments == 2
    assert (summary.format, summary.compression, summary.linktypes) == ("pcap", None, [1])
    if nano:  # the ns steps survive a ns file exactly
        assert ours[1]["ts"] - ours[0]["ts"] == 1_234_567


@pytest.mark.parametrize(
    ("linktype", "wrap"),
    [
        (113, lambda p: CookedLinux(pkttype=0, lladdrtype=1, src=b"\x02\0\0\0\0\x01") / p),
        (276, lambda p: CookedLinuxV2(ifindex=3, lladdrtype=1, src=b"\x02\0\0\0\0\x01") / p),
        (101, lambda p: p),
        (12, lambda p: p),
        (0, lambda p: Loopback(type=2 if isinstance(p, IP) else 10) / p),
        (108, lambda p: LoopbackOpenBSD(type=2 if isinstance(p, IP) else 24) / p),
    ],
    ids=["linux_sll", "linux_sll2", "raw101", "raw12", "null", "loop"],
)
def test_link_types_match_scapy(tmp_path: Path, linktype: int, wrap) -> None:
    pkts = [wrap(p) for p in ip_payloads()]
    if linktype == 108:  # Scapy binds OpenBSD loopback to IPv4 only: compare on IPv4
        pkts = [p for p in pkts if isinstance(p.payload, IP)]
    path = write_pcap(tmp_path / "x.pcap", timed(pkts), linktype=linktype)
    expected = scapy_file_records(path)
    assert all(r is not None for r in expected)
    ours, summary = read_all(path)
    assert_records_equal(ours, expected)
    check_summary(summary, expected)
    assert summary.linktypes == [linktype]


def test_loop_ipv6_and_null_big_endian(tmp_path: Path) -> None:
    """IPv6 over OpenBSD loopback, and a big-endian-written NULL family (Scapy reads neither)."""
    v6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=7, dport=9)
    v4 = IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=7, dport=9)
    frames = [
        struct.pack(">I", 24) + bytes(v6),
        struct.pack(">I", 30) + bytes(v6),
        struct.pack(">I", 2) + bytes(v4),
        struct.pack(">I", 7) + bytes(v4),
    ]
    for linktype in (108, 0):
        path = tmp_path / f"{linktype}.pcap"
        path.write_bytes(pcap_bytes(frames, linktype=linktype))
        ours, summary = read_all(path)
        assert [(r["ip_version"], r["src_ip"], r["src_port"]) for r in ours] == [
            (6, "2001:db8::1", 7),
            (6, "2001:db8::1", 7),
            (4, "10.0.0.1", 7),
        ]
        assert summary.skipped == {"non_ip": 1}


def test_raw_ipv4_and_ipv6_linktypes(tmp_path: Path) -> None:
    v4 = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=6)
    v6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=5, dport=6)
    for linktype, pkt in ((228, v4), (229, v6)):
        path = tmp_path / f"{linktype}.pcap"
        write_pcap(path, timed([pkt, pkt]), linktype=linktype)
        ours, _ = read_all(path)
        assert_records_equal(ours, scapy_file_records(path))
    path = tmp_path / "mismatch.pcap"
    path.write_bytes(pcap_bytes([bytes(v6)], linktype=228))
    ours, summary = read_all(path)
    assert ours == [] and summary.skipped == {"bad_ip_header": 1}


@pytest.mark.parametrize("codec", ["gzip", "bz2", "xz"])
def test_compressed_input_detected_by_magic(tmp_path: Path, codec: str) -> None:
    plain = write_pcap(tmp_path / "plain.pcap", ethernet_packets(), nano=True)
    data = plain.read_bytes()
    packed = {"gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[codec](data)
    path = tmp_path / "capture.bin"  # no telling extension: detection is by magic
    path.write_bytes(packed)
    ours, summary = read_all(path, chunk_bytes=4096)
    plain_records, plain_summary = read_all(plain)
    assert ours == plain_records
    assert summary.compression == codec
    assert summary.bytes_read == len(data)
    assert summary.frames == plain_summary.frames


def test_scapy_gzip_writer(tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "x.pcap.gz", ethernet_packets(), gz=True)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    ours, summary = read_all(path)
    assert_records_equal(ours, scapy_file_records(path))
    assert summary.compression == "gzip"


@pytest.mark.parametrize("chunk_bytes", [64, 100, 1000, 4096])
def test_chunk_boundaries_do_not_change_records(ethernet_pcap: Path, chunk_bytes: int) -> None:
    whole, whole_summary = read_all(ethernet_pcap)
    chunked, summary = read_all(ethernet_pcap, chunk_bytes=chunk_bytes)
    assert chunked == whole
    assert summary.to_dict() == whole_summary.to_dict()


def test_batch_size_bounds_batches_and_keeps_order(ethernet_pcap: Path) -> None:
    batches = list(read_records(ethernet_pcap, batch_size=4))
    assert all(1 <= b.num_rows <= 4 for b in batches)
    assert netmon_records(batches) == read_all(ethernet_pcap)[0]
    with pytest.raises(ValueError, match="batch_size"):
        read_records(ethernet_pcap, batch_size=0)


def test_iface_override_is_sanitized(ethernet_pcap: Path) -> None:
    ours, _ = read_all(ethernet_pcap)
    assert {r["iface"] for r in ours} == {"0"}
    ours, _ = read_all(ethernet_pcap, iface="tap,1\nx")
    assert {r["iface"] for r in ours} == {"tap_1_x"}


def test_reader_iterates_once_and_reports_progress(ethernet_pcap: Path) -> None:
    reader = read_records(ethernet_pcap)
    assert reader.file_size == ethernet_pcap.stat().st_size
    list(reader)
    assert reader.file_position == reader.file_size
    assert reader.summary.bytes_read == reader.file_size
    with pytest.raises(RuntimeError, match="only once"):
        iter(reader)


# -- pcapng ---------------------------------------------------------------------------------------


def _frames() -> list[bytes]:
    return [bytes(p) for p in ethernet_packets()]


def _section_one(order: str) -> bytes:
    """Three interfaces: Ethernet µs (named), raw IP with ns resolution, Linux cooked at 2^-20 s."""
    frames = _frames()
    raw = [bytes(p) for p in ip_payloads()]
    cooked = [bytes(CookedLinux(lladdrtype=1) / p) for p in ip_payloads()[:5]]
    interfaces = [
        {"linktype": 1, "name": "eth0"},
        {"linktype": 101, "name": "tun0", "tsresol": 9},
        {"linktype": 113, "name": "any", "tsresol": 0x80 | 20},
    ]
    packets: list[tuple] = []
    t_us, t_ns, t_bin = 1_700_000_000_000_000, 1_700_000_000_000_000_123, 1_700_000_000 << 20
    for i, frame in enumerate(frames):
        packets.append(("epb", 0, t_us + 1000 * i, frame, len(frame) + 4))
        if i < len(raw):
            packets.append(("epb", 1, t_ns + 7 * i, raw[i], len(raw[i])))
        if i < len(cooked):
            packets.append(("epb", 2, t_bin + (i << 10), cooked[i], len(cooked[i])))
    return ng_section(order, interfaces, packets)


def _section_two(order: str) -> bytes:
    """Another section (own interface numbering): ms resolution, SPB and obsolete PB."""
    frames = _frames()
    interfaces = [{"linktype": 1, "name": "wlan0", "tsresol": 3, "snaplen": 96}]
    packets: list[tuple] = [("epb", 0, 1_700_000_100_000 + i, f, len(f)) for i, f in enumerate(frames[:6])]
    packets += [("opb", 0, 1_700_000_200_000 + i, f, len(f)) for i, f in enumerate(frames[6:9])]
    packets += [("spb", f, len(f)) for f in frames[9:12]]
    return ng_section(order, interfaces, packets)


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_interfaces_resolutions_sections_match_scapy(tmp_path: Path, order: str) -> None:
    one, two = _section_one(order), _section_two(">" if order == "<" else "<")
    # Scapy keeps interfaces across sections, so the oracle reads each section on its own.
    (tmp_path / "one.pcapng").write_bytes(one)
    (tmp_path / "two.pcapng").write_bytes(two)
    expected = scapy_file_records(tmp_path / "one.pcapng") + scapy_file_records(tmp_path / "two.pcapng")
    path = tmp_path / "both.pcapng"
    path.write_bytes(one + two)
    ours, summary = read_all(path)
    spb = 3  # Simple Packet Blocks have no timestamp: we carry the previous one, Scapy has none
    assert [r["ts"] for r in ours[-spb:]] == [ours[-spb - 1]["ts"]] * spb
    wanted = [r for r in expected if r]
    for row, want in zip(ours[-spb:], wanted[-spb:], strict=True):
        row["ts"] = want["ts"]
    for want in wanted[-2 * spb :]:  # Scapy names no interface for SPB / obsolete PB
        assert want["iface"] == "0"
        want["iface"] = "wlan0"
    assert_records_equal(ours, expected)
    check_summary(summary, expected)
    assert summary.format == "pcapng"
    assert sorted(summary.linktypes) == [1, 101, 113]
    assert {r["iface"] for r in ours} == {"eth0", "tun0", "any", "wlan0"}
    cooked = [r for r in ours if r["iface"] == "any"]
    assert [r["ts"] % 10**9 for r in cooked[:2]] == [0, 976562]  # 2^10 ticks of 2^-20 s, floored
    assert all(r["cap_len"] <= 96 for r in ours[-spb:])  # SPB: cut to the interface's snaplen


def test_pcapng_unnamed_interfaces_tsoffset_and_chunks(tmp_path: Path) -> None:
    frame = _frames()[0]
    section = ng_section(
        "<",
        [{"linktype": 1}, {"linktype": 1, "tsoffset": 1000}],
        [("epb", 0, 5_000_000, frame, 60), ("epb", 1, 5_000_000, frame, 60)],
    )
    path = tmp_path / "x.pcapng"
    path.write_bytes(section)
    ours, _ = read_all(path)
    assert [(r["iface"], r["ts"]) for r in ours] == [("0", 5 * 10**9), ("1", 1005 * 10**9)]
    for chunk in (64, 80, 128):
        assert read_all(path, chunk_bytes=chunk)[0] == ours


def test_pcapng_unsupported_interface_skipped_others_kept(tmp_path: Path) -> None:
    frames = _frames()
    section = ng_section(
        "<",
        [{"linktype": 239, "name": "nflog"}, {"linktype": 1, "name": "eth0"}],
        [("epb", 0, 1, b"\x02\0\0\0" + frames[0], 99), ("epb", 1, 2, frames[0], 60)]
        + [("epb", 0, 3, b"junk", 4), ("epb", 5, 4, frames[0], 60)],
    )
    path = tmp_path / "x.pcapng"
    path.write_bytes(section)
    ours, summary = read_all(path)
    assert [(r["iface"], r["src_ip"]) for r in ours] == [("eth0", "10.0.0.1")]
    assert summary.skipped == {"unsupported_linktype:239": 2, "unknown_interface": 1}
    assert summary.frames == 4
    assert any("unsupported link type 239" in w for w in summary.warnings)


# -- real captures --------------------------------------------------------------------------------

REAL = [
    "http-vlan-0.pcap",
    "communityid-ipv6.pcap",
    "ipv6-fragmented-dns.pcap",
    "ipv6-mobility-dst-opts.pcap",
    "ipv4-fragmented-1.pcap",
    "tunnels-gre-aruba.pcap",
    "linux_dlt_sll2.pcap",
    "irc-dcc-send.pcapng",
    "echo-connections.pcap.gz",
    "http-bro.org.pcap",
]


#: Scapy dissects ~3k packets/s: the big capture is compared on its first packets (all of them
#: are checked against Scapy's raw reader below).
ORACLE_LIMIT = 2000


@pytest.mark.parametrize("name", REAL)
def test_real_captures_match_scapy(captures_dir: Path, name: str) -> None:
    path = captures_dir / name
    expected = scapy_file_records(path, limit=ORACLE_LIMIT)
    ours, summary = read_all(path)
    if len(expected) < ORACLE_LIMIT:
        check_summary(summary, expected)
    else:
        ours = ours[: sum(r is not None for r in expected)]
    assert_records_equal(ours, expected)
    assert summary.warnings == []


def test_real_gzip_capture_whole_file_against_scapy_raw_reader(captures_dir: Path) -> None:
    from scapy.utils import RawPcapReader

    path = captures_dir / "echo-connections.pcap.gz"
    with RawPcapReader(str(path)) as raw:
        meta = [(m.sec * 10**9 + m.usec * 1000, len(data), m.wirelen) for data, m in raw]
    ours, summary = read_all(path)
    assert summary.frames == summary.records == len(meta) == 82582
    assert [(r["ts"], r["cap_len"], r["wire_len"]) for r in ours] == meta
    assert summary.ts_backwards == sum(b[0] < a[0] for a, b in zip(meta, meta[1:], strict=False)) > 0


def test_real_capture_details(captures_dir: Path) -> None:
    ours, _ = read_all(captures_dir / "http-vlan-0.pcap")
    assert {r["vlan"] for r in ours} - {None}
    _, summary = read_all(captures_dir / "ipv4-fragmented-1.pcap")
    assert summary.non_first_fragments >= 1
    _, summary = read_all(captures_dir / "ipv6-fragmented-dns.pcap")
    assert summary.non_first_fragments >= 1
    ours, _ = read_all(captures_dir / "tunnels-gre-aruba.pcap")
    gre = [r for r in ours if r["proto"] == 47]
    assert gre and all(r["src_port"] is None for r in gre)


def test_real_nflog_is_a_clear_unsupported_link_type_error(captures_dir: Path) -> None:
    with pytest.raises(CaptureError) as err:
        read_records(captures_dir / "nflog-http.pcap")
    message = str(err.value)
    assert "\n" not in message
    assert "nflog-http.pcap" in message and "byte 20" in message and "link type 239 (NFLOG)" in message


# -- bad input ------------------------------------------------------------------------------------


def one_line(err: pytest.ExceptionInfo[CaptureError]) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b"<!DOCTYPE html><html>", "3c 21 44 4f 43 54 59 50 ('<!DOCTYP')"),
        (b"\x00\x01", "00 01 ('..')"),
        (gzip.compress(b"hello world"), "after gzip decompression: starts with 68 65 6c 6c 6f 20 77 6f"),
    ],
)
def test_unknown_magic_names_file_and_bytes(tmp_path: Path, content: bytes, found: str) -> None:
    path = tmp_path / "notes.pcap"
    path.write_bytes(content)
    with pytest.raises(CaptureError) as err:
        read_records(path)
    message = one_line(err)
    assert message.startswith(f"{path}: byte 0: not a capture file")
    assert found in message


def test_empty_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "empty.pcap"
    path.write_bytes(b"")
    with pytest.raises(CaptureError, match=r"empty\.pcap: byte 0: empty, not a capture file"):
        read_records(path)
    with pytest.raises(CaptureError, match=r"missing\.pcap: cannot open"):
        read_records(tmp_path / "missing.pcap")
    path.write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00")
    with pytest.raises(CaptureError, match="inside the 24-byte pcap header"):
        read_records(path)


@pytest.mark.parametrize("cut", [1, 10, 16, 20, 40])
def test_truncated_last_record_keeps_complete_packets(tmp_path: Path, cut: int) -> None:
    frames = _frames()
    data = pcap_bytes(frames)
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:-cut])
    last_start = len(data) - 16 - len(frames[-1])
    ours, summary = read_all(path)
    full, _ = read_all(_write(tmp_path / "full.pcap", pcap_bytes(frames[:-1])))
    assert ours == full
    assert summary.frames == len(frames) - 1
    [warning] = summary.warnings
    assert f"byte {last_start}: last record truncated" in warning and "cut.pcap" in warning


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_damaged_record_length_mid_file_yields_earlier_then_errors(tmp_path: Path) -> None:
    frames = _frames() * 3
    data = bytearray(pcap_bytes(frames))
    offset = 24 + sum(16 + len(f) for f in frames[:20])
    data[offset + 8 : offset + 12] = struct.pack("<I", 0x00FFFFFF)
    path = _write(tmp_path / "bad.pcap", bytes(data))
    for chunk in (64, 500, 1 << 20):
        reader = read_records(path, chunk_bytes=chunk)
        got = []
        with pytest.raises(CaptureError) as err:
            for batch in reader:
                got.append(batch)
        message = one_line(err)
        assert f"bad.pcap: byte {offset}: damaged record header: captured length 16777215" in message
        want, _ = read_all(_write(tmp_path / "head.pcap", pcap_bytes(frames[:20])))
        assert netmon_records(got) == want


def test_unsupported_pcap_link_type(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.pcap", pcap_bytes([b"\0" * 20], linktype=147))
    with pytest.raises(CaptureError) as err:
        read_records(path)
    assert "x.pcap: byte 20: unsupported link type 147" in one_line(err)


def test_frames_shorter_than_headers_are_counted_truncated(tmp_path: Path) -> None:
    frame = bytes(ethernet_packets()[0])  # Ethernet 14 + IPv4 20 + TCP 20
    cuts = [frame[:k] for k in (0, 5, 13, 14, 20, 33)] + [frame[:34], frame[:40], frame]
    path = _write(tmp_path / "snap.pcap", pcap_bytes(cuts))
    ours, summary = read_all(path)
    assert summary.skipped == {"truncated": 6}
    assert summary.l4_truncated == 2
    assert [(r["src_ip"], r["src_port"], r["cap_len"]) for r in ours] == [
        ("10.0.0.1", None, 34),
        ("10.0.0.1", None, 40),
        ("10.0.0.1", 12345, 54),
    ]


def test_timestamps_going_backwards_are_kept_and_counted(tmp_path: Path) -> None:
    pkts = ethernet_packets()[:6]
    seconds = ["100.5", "100.4", "100.6", "99", "101", "101"]
    for pkt, t in zip(pkts, seconds, strict=True):
        pkt.time = Decimal(t)
    path = write_pcap(tmp_path / "back.pcap", pkts)
    ours, summary = read_all(path, chunk_bytes=64)
    assert [r["ts"] for r in ours] == [int(Decimal(t) * 10**9) for t in seconds]
    assert summary.ts_backwards == 2


def test_pcapng_truncated_last_block(tmp_path: Path) -> None:
    data = _section_one("<")
    path = _write(tmp_path / "cut.pcapng", data[:-10])
    last_start = len(data) - struct.unpack("<I", data[-4:])[0]
    ours, summary = read_all(path)
    assert ours == read_all(_write(tmp_path / "head.pcapng", data[:last_start]))[0]
    [warning] = summary.warnings
    assert f"cut.pcapng: byte {last_start}: last block truncated" in warning


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda b, o: struct.pack_into("<I", b, o + 4, 0x7FFFFFF1), "impossible block length 2147483633"),
        (lambda b, o: struct.pack_into("<I", b, o + 4, 200), "does not match its trailing copy"),
        (lambda b, o: struct.pack_into("<I", b, o + 20, 5000), "captured length 5000 does not fit"),
    ],
    ids=["absurd-length", "wrong-length", "caplen"],
)
def test_pcapng_damaged_block_resyncs_with_warning(tmp_path: Path, damage, why: str) -> None:
    frames = _frames()
    blocks = [
        ng_block("<", 6, struct.pack("<IIIII", 0, 0, i, len(f), len(f)) + f) for i, f in enumerate(frames)
    ]
    head = ng_section("<", [{"linktype": 1, "name": "eth0"}], [])
    data = bytearray(head + b"".join(blocks))
    offset = len(head) + sum(len(b) for b in blocks[:5])
    damage(data, offset)
    path = _write(tmp_path / "bad.pcapng", bytes(data))
    clean = _write(tmp_path / "clean.pcapng", head + b"".join(blocks[:5] + blocks[6:]))
    want, _ = read_all(clean)
    for chunk in (64, 256, 1 << 20):
        ours, summary = read_all(path, chunk_bytes=chunk)
        assert ours == want
        [warning] = summary.warnings
        next_block = offset + len(blocks[5])
        assert re.search(
            rf"bad\.pcapng: byte {offset}: damaged pcapng block \(.*{re.escape(why)}.*\); skipped "
            rf"{next_block - offset} bytes to the next valid block at byte {next_block}$",
            warning,
        ), warning


def test_pcapng_damaged_block_without_recovery_raises_after_earlier(tmp_path: Path) -> None:
    frames = _frames()
    head = ng_section("<", [{"linktype": 1}], [("epb", 0, i, f, len(f)) for i, f in enumerate(frames[:4])])
    tail = b"\xee" * 200
    path = _write(tmp_path / "bad.pcapng", head + struct.pack("<II", 6, 7) + tail)
    got = []
    with pytest.raises(CaptureError) as err:
        for batch in read_records(path, chunk_bytes=128):
            got.append(batch)
    message = one_line(err)
    assert f"bad.pcapng: byte {len(head)}: damaged pcapng block (impossible block length 7)" in message
    assert "no valid block after it" in message
    assert len(netmon_records(got)) == 4


def test_pcapng_bad_section_magic(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.pcapng", b"\x0a\x0d\x0d\x0a" + b"\x1c\0\0\0" + b"abcd" + b"\0" * 16)
    with pytest.raises(CaptureError) as err:
        read_records(path)
    assert "x.pcapng: byte 8: pcapng byte-order magic expected, found 61 62 63 64" in one_line(err)


def test_summary_to_dict_is_json_ready(ethernet_pcap: Path) -> None:
    import json

    _, summary = read_all(ethernet_pcap)
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["frames"] == summary.frames and data["skipped"] == {"non_ip": 4}


def test_batches_are_independent_of_the_reader_buffer(ethernet_pcap: Path) -> None:
    batches = list(read_records(ethernet_pcap, chunk_bytes=64))
    again = list(read_records(ethernet_pcap))
    assert pa.Table.from_batches(batches).equals(pa.Table.from_batches(again))


@pytest.mark.parametrize(
    ("tsresol", "ticks"),
    [(6, 1_700_000_000_123_456), (9, 1_700_000_000_123_456_789), (12, 1_700_000_000_123_456_789)]
    + [(3, 1_700_000_000_123), (0, 1_700_000_000), (0x80 | 20, 1_700_000_000 << 20 | 0xABCDE)]
    + [(0x80 | 40, (1_700_000 << 40) | 0xABCDEF0123), (0x80 | 64, 2**63 + 12345), (0x80, 1_700_000_000)],
)
def test_pcapng_timestamp_resolutions(tmp_path: Path, tsresol: int, ticks: int) -> None:
    """Nanoseconds = floor(ticks * 1e9 * resolution), computed here with Python integers."""
    base, exp = (2, tsresol & 0x7F) if tsresol & 0x80 else (10, tsresol)
    frame = _frames()[0]
    path = _write(
        tmp_path / "t.pcapng",
        ng_section("<", [{"linktype": 1, "tsresol": tsresol}], [("epb", 0, ticks, frame, 60)]),
    )
    [row], _ = read_all(path)
    assert row["ts"] == ticks * 10**9 // base**exp


# -- impossible timestamps and lengths -----------------------------------------------------------


def _exact_ns(tsresol: int, offset_s: int, ticks: int) -> int:
    """pcapng time in ns, with Python integers: floor(ticks * 1e9 * resolution) + offset."""
    base, exp = (2, tsresol & 0x7F) if tsresol & 0x80 else (10, tsresol)
    return ticks * 10**9 // base**exp + offset_s * 10**9


def test_pcapng_overflowing_tsoffset_and_tsresol_are_skipped_not_wrapped(tmp_path: Path) -> None:
    """The faults' examples: 64-bit wrap-around gave years 2242 and 1711; now those packets are
    skipped and counted, and the packets around them are kept."""
    frame = _frames()[0]
    year_2023_us = 1_700_000_000_000_000
    interfaces = [
        {"linktype": 1, "name": "good"},
        {"linktype": 1, "name": "offset", "tsoffset": 2**62 // 10**9 * 2},  # ticks * 1000 + 9.2e18 wraps
        {"linktype": 1, "name": "resol", "tsresol": 0},  # seconds: 1.7e15 s * 1e9 wraps
        {"linktype": 1, "name": "early", "tsoffset": -1_800_000_000},  # 1969
        {"linktype": 1, "name": "late", "tsresol": 3},  # 2^53 ms: year 287,000
    ]
    packets = [("epb", i, year_2023_us + i, frame, 60) for i in (0, 1, 0, 2, 3, 0)] + [
        ("epb", 4, 2**53, frame, 60),
        ("epb", 0, year_2023_us + 9, frame, 60),
    ]
    path = _write(tmp_path / "wrap.pcapng", ng_section("<", interfaces, packets))
    ours, summary = read_all(path)
    assert [(r["iface"], r["ts"]) for r in ours] == [
        ("good", 1_700_000_000_000_000_000),
        ("good", 1_700_000_000_000_000_000),
        ("good", 1_700_000_000_000_000_000),
        ("good", 1_700_000_000_000_009_000),
    ]
    assert summary.skipped == {"bad_timestamp": 4}
    assert summary.frames == 8 and summary.records == 4
    [warning] = summary.warnings
    second_epb = len(ng_section("<", interfaces, packets[:1]))
    assert warning.startswith(f"{path}: byte {second_epb}: packet with an impossible timestamp")
    assert "counted as bad_timestamp" in warning


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tsresol=st.integers(0, 255),
    offset_s=st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(10**10), 10**10)),
    ticks=st.lists(
        st.one_of(
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**40),
            st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1, 1_700_000_000_000_000]),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_pcapng_timestamps_exact_or_skipped(
    tmp_path: Path, tsresol: int, offset_s: int, ticks: list[int]
) -> None:
    """Any resolution, offset and 64-bit count: the exact time if it lies in 1970..2200, else the
    packet is skipped as bad_timestamp (oracle: Python integers)."""
    frame = _frames()[0]
    interfaces = [{"linktype": 1, "tsresol": tsresol, "tsoffset": offset_s}]
    path = _write(
        tmp_path / "t.pcapng", ng_section("<", interfaces, [("epb", 0, t, frame, 60) for t in ticks])
    )
    exact = [_exact_ns(tsresol, offset_s, t) for t in ticks]
    valid = [ns for ns in exact if 0 <= ns <= MAX_TS_NS]
    ours, summary = read_all(path)
    assert [r["ts"] for r in ours] == valid
    assert summary.skipped.get("bad_timestamp", 0) == len(exact) - len(valid)
    assert summary.frames == len(ticks)


def test_spb_takes_the_last_possible_timestamp(tmp_path: Path) -> None:
    frame = _frames()[0]
    interfaces = [{"linktype": 1}, {"linktype": 1, "tsoffset": 2**60}]
    packets = [("epb", 0, 5_000_000, frame, 60), ("epb", 1, 1, frame, 60), ("spb", frame, 60)]
    ours, summary = read_all(_write(tmp_path / "s.pcapng", ng_section("<", interfaces, packets)))
    assert [r["ts"] for r in ours] == [5 * 10**9, 5 * 10**9]
    assert summary.skipped == {"bad_timestamp": 1}


def test_impossible_lengths_are_skipped_and_counted(tmp_path: Path) -> None:
    """An original length of 0xFFFFFFFF is kept as it is (it used to become -1 in an int32); a
    captured length above the original one is impossible: skipped as bad_length."""
    frame = _frames()[0]  # 54 bytes
    heads = [(54, 0xFFFFFFFF), (54, 53), (54, 54), (54, 0), (54, 0x80000000)]
    data = bytearray(pcap_bytes([frame] * len(heads)))
    offsets = [24 + i * (16 + len(frame)) for i in range(len(heads))]
    for off, (cap, wire) in zip(offsets, heads, strict=True):
        struct.pack_into("<II", data, off + 8, cap, wire)
    path = _write(tmp_path / "len.pcap", bytes(data))
    ours, summary = read_all(path)
    assert [(r["cap_len"], r["wire_len"]) for r in ours] == [(54, 0xFFFFFFFF), (54, 54), (54, 0x80000000)]
    assert summary.skipped == {"bad_length": 2}
    assert summary.frames == 5 and summary.records == 3
    [warning] = summary.warnings
    assert warning.startswith(
        f"{path}: byte {offsets[1]}: packet with impossible lengths (captured 54, original 53)"
    )
    # pcapng: the same rules
    packets = [("epb", 0, i, frame, wire) for i, (_, wire) in enumerate(heads)]
    ng = _write(tmp_path / "len.pcapng", ng_section("<", [{"linktype": 1}], packets))
    ours_ng, summary_ng = read_all(ng)
    assert [(r["cap_len"], r["wire_len"]) for r in ours_ng] == [(54, 0xFFFFFFFF), (54, 54), (54, 0x80000000)]
    assert summary_ng.skipped == {"bad_length": 2}
    # the byte counts of what is kept are exact (no negative length)
    table = pa.Table.from_batches(list(read_records(path)))
    assert table.schema.field("wire_len").type == pa.int64()
    assert pc.sum(table.column("wire_len")).as_py() == 0xFFFFFFFF + 54 + 0x80000000


# -- Parquet --------------------------------------------------------------------------------------


def test_parquet_round_trip_and_old_int32_files_are_cast_on_read(tmp_path: Path, ethernet_pcap: Path) -> None:
    from ingest.readers.parquet import parse_to_parquet, read_parquet_records

    out = tmp_path / "new.parquet"
    parse_to_parquet([ethernet_pcap], out)
    want = pa.Table.from_batches(list(read_records(ethernet_pcap)), schema=ARROW_SCHEMA)
    assert pq.read_schema(out).field("wire_len").type == pa.int64()
    assert read_parquet_records(out).equals(want)
    # A file written before the lengths became int64 (netmon parse wrote int32 lengths).
    old_schema = pa.schema(
        [f.with_type(pa.int32()) if f.name in ("cap_len", "wire_len") else f for f in ARROW_SCHEMA]
    )
    old = tmp_path / "old.parquet"
    pq.write_table(want.cast(old_schema), old)
    assert pq.read_schema(old).field("cap_len").type == pa.int32()
    back = read_parquet_records(old)
    assert back.schema.equals(ARROW_SCHEMA) and back.equals(want)
    assert read_parquet_records(old, columns=["wire_len", "src_ip"]).equals(
        want.select(["wire_len", "src_ip"])
    )
    # What the int32 era wrote for an original length of 0xFFFFFFFF (-1), and a wrapped time (1711):
    # the length is the unsigned value it was; the record with the impossible time is dropped.
    rows = want.slice(0, 3).to_pylist()
    rows[0]["wire_len"] = -1
    rows[1]["wire_len"] = -(2**31)
    rows[2]["ts"] = -8_200_000_000 * 10**9
    pq.write_table(pa.Table.from_pylist(rows, schema=old_schema), old)
    got = read_parquet_records(old)
    assert got.column("wire_len").to_pylist() == [2**32 - 1, 2**31]
    assert got.column("ts").to_pylist() == want.column("ts").to_pylist()[:2]
    bad = _write(tmp_path / "bad.parquet", b"PAR1 not really")
    with pytest.raises(CaptureError) as err:
        read_parquet_records(bad)
    assert one_line(err).startswith(f"{bad}: not a readable Parquet file of records")
    with pytest.raises(CaptureError, match="cannot open"):
        read_parquet_records(tmp_path / "missing.parquet")


def test_truncated_gzip_keeps_what_was_decompressed(tmp_path: Path) -> None:
    noise = random.Random(5)
    frames = [f + noise.randbytes(300) for f in _frames() * 40]  # trailers: incompressible
    data = pcap_bytes(frames)
    packed = gzip.compress(data)[:-200]
    path = _write(tmp_path / "cut.pcap.gz", packed)
    ours, summary = read_all(path)
    assert 0 < summary.frames < len(frames)
    full, _ = read_all(_write(tmp_path / "full.pcap", data))
    assert ours == full[: len(ours)]
    plain, _ = salvage(packed, "gzip")
    assert summary.frames == _complete_frames(frames, len(plain))  # every complete frame decompressed
    assert any(
        f"byte {len(packed)} of the file" in w and "gzip stream damaged" in w for w in summary.warnings
    )


# -- damaged compressed streams -----------------------------------------------------------------

#: bz2 at level 1 (100 kB blocks) so that a damaged block leaves whole blocks before it
_COMPRESS = {
    "gzip": gzip.compress,
    "bz2": lambda data: bz2.compress(data, 1),
    "xz": lzma.compress,
}


def _noisy_frames(count: int, seed: int) -> list[bytes]:
    """Frames with random trailers (after the IP packet: ignored), so compressed bytes map to
    decompressed ones roughly one to one."""
    rng = random.Random(seed)
    base = _frames()
    return [base[i % len(base)] + rng.randbytes(rng.randint(20, 140)) for i in range(count)]


def _complete_frames(frames: list[bytes], length: int, header: int = 24) -> int:
    """How many of the pcap's records (16-byte header + frame) end within its first ``length`` bytes."""
    end, count = header, 0
    for frame in frames:
        end += 16 + len(frame)
        if end > length:
            break
        count += 1
    return count


def read_until_error(path: Path, **kwargs: object) -> tuple[list[dict], ReadSummary, CaptureError | None]:
    """The records read before the reader stopped, its summary, and its CaptureError if any."""
    reader = read_records(path, **kwargs)
    batches = []
    error = None
    try:
        for batch in reader:
            assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
            batches.append(batch)
    except CaptureError as exc:
        error = exc
    return netmon_records(batches), reader.summary, error


@pytest.mark.parametrize("codec", list(_COMPRESS))
@pytest.mark.parametrize("damage", ["smash", "flip", "cut", "trailing"])
def test_damaged_compressed_stream_keeps_every_record_before_the_damage(
    tmp_path: Path, codec: str, damage: str
) -> None:
    """Every record the codec can decompress before the damage is read, then a warning names the
    offset (brute-force oracle: the codec fed one byte at a time; the records of the undamaged file)."""
    frames = _noisy_frames(1500, seed=7)
    data = pcap_bytes(frames)
    packed = bytearray(_COMPRESS[codec](data))
    at = len(packed) * 3 // 5
    if damage == "smash":
        packed[at : at + 48] = bytes(range(48))
    elif damage == "flip":
        packed[at] ^= 0x20
    elif damage == "cut":
        del packed[at:]
    else:
        packed += b"\x07 trailing junk"
    path = _write(tmp_path / "damaged.bin", bytes(packed))
    plain, fail_at = salvage(bytes(packed), codec)
    assert fail_at is not None  # the codec does notice
    keep = _complete_frames(frames, intact_prefix(plain, data))
    assert keep > 500
    want, _ = read_all(_write(tmp_path / "head.pcap", pcap_bytes(frames[:keep])))
    for chunk in (4096, 1 << 20):
        ours, summary, error = read_until_error(path, chunk_bytes=chunk)
        assert ours[: len(want)] == want
        assert summary.compression == codec
        if error is None:
            assert summary.frames == summary.records + sum(summary.skipped.values())
            assert any(
                f"damaged.bin: byte {fail_at} of the file (byte " in w and f"{codec} stream damaged" in w
                for w in summary.warnings
            ), summary.warnings
        else:  # garbage decompressed after the damage can look like a damaged record header
            assert "\n" not in str(error) and "damaged.bin: byte " in str(error)


@pytest.mark.parametrize("codec", list(_COMPRESS))
def test_compressed_stream_damaged_before_any_capture_data_is_one_line_error(
    tmp_path: Path, codec: str
) -> None:
    packed = bytearray(_COMPRESS[codec](pcap_bytes(_frames())))
    packed[7 if codec == "xz" else 3] ^= 0xFF  # inside the gzip / bz2 / xz header, past its magic
    path = _write(tmp_path / "bad.bin", bytes(packed))
    plain, fail_at = salvage(bytes(packed), codec)
    assert plain == b"" and fail_at is not None
    with pytest.raises(CaptureError) as err:
        read_records(path)
    message = one_line(err)
    assert (
        f"bad.bin: byte {fail_at} of the file (byte 0 of the {codec} data): {codec} stream damaged" in message
    )
    assert "nothing readable before it" in message


def test_compressed_concatenated_members_and_zero_padding(tmp_path: Path) -> None:
    frames = _noisy_frames(300, seed=3)
    data = pcap_bytes(frames)
    want, _ = read_all(_write(tmp_path / "plain.pcap", data))
    for codec, pack in _COMPRESS.items():
        parts = [pack(data[:1000]), pack(data[1000:20000]), pack(data[20000:])]
        path = _write(tmp_path / f"multi.{codec}", parts[0] + b"\0" * 8 + parts[1] + parts[2] + b"\0" * 4)
        for chunk in (64, 4096):
            ours, summary = read_all(path, chunk_bytes=chunk)
            assert ours == want and summary.warnings == []
            assert summary.bytes_read == len(data)


def test_decompressor_small_pieces_equal_brute_force(tmp_path: Path) -> None:
    """The decompressed bytes do not depend on the piece sizes, damaged or not, and are never
    fewer than the brute-force oracle's (a codec may hand out a damaged block before its check)."""
    from ingest.readers._source import Decompressor

    rng = random.Random(21)
    data = pcap_bytes(_noisy_frames(200, seed=9))
    for codec, pack in _COMPRESS.items():
        packed = bytearray(pack(data))
        for trial in range(6):
            damaged = bytearray(packed)
            if trial:
                i = rng.randrange(len(damaged))
                damaged[i : i + 3] = rng.randbytes(3)
            path = _write(tmp_path / f"d.{codec}", bytes(damaged))
            plain, fail_at = salvage(bytes(damaged), codec)
            for in_piece, out_piece in ((1, 64), (7, 100), (4096, 333), (1 << 16, 1 << 18)):
                with path.open("rb", buffering=0) as raw:
                    dec = Decompressor(raw, codec, str(path), in_piece=in_piece, out_piece=out_piece)
                    got = b"".join(dec.pieces())
                assert got[: len(plain)] == plain and len(got) >= len(plain)
                assert (dec.error is None) == (fail_at is None)
                if fail_at is not None:
                    assert dec.error is not None and f"byte {fail_at} of the file" in dec.error


@pytest.mark.parametrize("codec", [None, *_COMPRESS])
def test_random_damage_never_crashes(tmp_path: Path, codec: str | None) -> None:
    """Random byte damage and cuts (of the compressed bytes, if compressed): records and a
    consistent summary, or a one-line CaptureError."""
    rng = random.Random(11)
    bases = [pcap_bytes(_frames() * 2), _section_one("<") + _section_two(">")]
    if codec is not None:
        bases = [_COMPRESS[codec](b) for b in bases]
    for _ in range(100):
        data = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(data))
            if rng.random() < 0.8:
                data[i : i + 4] = rng.randbytes(4)
            else:
                del data[i:]
                break
        path = _write(tmp_path / "damaged.bin", bytes(data))
        try:
            reader = read_records(path, chunk_bytes=rng.choice([64, 300, 1 << 20]))
            rows = sum(b.num_rows for b in reader)
        except CaptureError as err:
            assert "\n" not in str(err)
            continue
        summary = reader.summary
        assert rows == summary.records
        assert summary.frames == summary.records + sum(summary.skipped.values())
        assert summary.compression == codec


def test_package_exports() -> None:
    import ingest
    import ingest.readers

    for module in (ingest, ingest.readers):
        assert sorted(module.__all__) == list(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None
    assert ingest.read_records is read_records and ingest.CaptureError is CaptureError
    with pytest.raises(AttributeError):
        ingest.no_such_name  # noqa: B018
