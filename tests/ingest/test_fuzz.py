"""Bounded fuzzing of every capture reader and of the header decoder (hypothesis, in CI).

Captures are generated (classic pcap in either byte order and resolution; pcapng with one or two
sections, several interfaces, Enhanced, Simple and obsolete Packet Blocks), optionally gzip-, bz2-
or xz-compressed, then damaged: bytes overwritten, bits flipped, bytes inserted or deleted, the
file cut. For every case:

- nothing but :class:`~ingest.errors.CaptureError` (one line, naming the file) escapes;
- every batch has exactly :data:`netmon.records.ARROW_SCHEMA` and every record its sanity bounds
  (time in 1970..2200, ``0 <= cap_len <= wire_len < 2**32``, fields in their ranges);
- the summary adds up (``frames == records + skipped``, rows yielded == ``records``);
- the records before the damage are exactly those of the undamaged file (the oracle: the reader
  on the undamaged file; for a compressed file, the damage point is where the bytes a codec fed
  one byte at a time decompresses first differ from the original, see ``salvage``).

The decoder is fuzzed with mutated and random frames of every link type and with timestamps and
lengths of any size; the oracle for a batch is the same frames decoded one by one (a frame's
record never depends on its neighbours: no read past a frame's end). Parquet files of records
are fuzzed through :func:`ingest.readers.parquet.read_parquet_records`.

About 2,250 cases in about 20 s on two cores; cases are derandomised (the same every run) so
CI is reproducible. ``NETMON_FUZZ_SCALE=10`` runs ten times as many, with fresh random cases.
"""

from __future__ import annotations

import bz2
import gzip
import ipaddress
import lzma
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ingest import CaptureError, decode_frames, read_records
from ingest.decode import MAX_TS_NS, SUPPORTED_LINKTYPES
from ingest.readers.parquet import read_parquet_records
from netmon.records import ARROW_SCHEMA
from tests.ingest.conftest import (
    ethernet_packets,
    intact_prefix,
    ip_payloads,
    netmon_records,
    ng_section,
    salvage,
)

_SCALE = float(os.environ.get("NETMON_FUZZ_SCALE", "1"))


def fuzz(examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings of a fuzz test: ``examples`` cases (scaled by ``NETMON_FUZZ_SCALE``)."""
    return settings(
        max_examples=max(1, int(examples * _SCALE)),
        deadline=None,
        derandomize=_SCALE == 1,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


_COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda data: gzip.compress(data, 6, mtime=0),
    "bz2": lambda data: bz2.compress(data, 1),
    "xz": lambda data: lzma.compress(data, preset=1),
}

# -- the frames captures are made of ---------------------------------------------------------------

#: link type -> frames of that link type
_POOL: dict[int, list[bytes]] = {}


def _pool() -> dict[int, list[bytes]]:
    if not _POOL:
        _POOL[1] = [bytes(p) for p in ethernet_packets()]
        _POOL[101] = [bytes(p) for p in ip_payloads()]
    return _POOL


# -- captures with the offsets of their packets ------------------------------------------------------


@dataclass
class Capture:
    data: bytes
    #: end offset of each packet's record / block, in file order
    ends: list[int]


@st.composite
def pcap_captures(draw: st.DrawFn) -> Capture:
    order = draw(st.sampled_from("<>"))
    nano = draw(st.booleans())
    frames = draw(st.lists(st.sampled_from(_pool()[1]), min_size=1, max_size=40))
    ticks = 10**9 if nano else 10**6
    t = draw(st.integers(0, 2**32 - 200)) * ticks
    out = [struct.pack(order + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    ends, pos = [], 24
    for frame in frames:
        t += draw(st.integers(-ticks, 3 * ticks))  # sometimes backwards
        t = max(t, 0)
        cut = len(frame) if draw(st.booleans()) else draw(st.integers(0, len(frame)))
        wire = cut + draw(st.sampled_from([0, 0, len(frame) - cut, 4, 2**31, 2**32 - 1 - cut]))
        out.append(struct.pack(order + "IIII", t // ticks, t % ticks, cut, wire) + frame[:cut])
        pos += 16 + cut
        ends.append(pos)
    return Capture(b"".join(out), ends)


_TSRESOL = [None, 6, 9, 3, 0, 0x80 | 20, 0x80 | 30, 0x80 | 40, 12]


@st.composite
def pcapng_captures(draw: st.DrawFn) -> Capture:
    data, ends = b"", []
    for _ in range(draw(st.integers(1, 2))):
        order = draw(st.sampled_from("<>"))
        ifaces = []
        for i in range(draw(st.integers(1, 3))):
            itf: dict[str, Any] = {"linktype": draw(st.sampled_from([1, 101])), "name": f"if{i}"}
            itf["tsresol"] = draw(st.sampled_from(_TSRESOL))
            itf["tsoffset"] = draw(st.sampled_from([None, 0, 100, -100]))
            itf["snaplen"] = draw(st.sampled_from([0, 0, 64]))
            ifaces.append(itf)
        head = ng_section(order, ifaces, [])
        shb_only = len(ng_section(order, [], []))
        pos = len(data) + len(head)
        data += head
        for _ in range(draw(st.integers(0, 25))):
            kind = draw(st.sampled_from(["epb"] * 6 + ["opb", "spb"]))
            ifid = 0 if kind == "spb" else draw(st.integers(0, len(ifaces) - 1))
            frame = draw(st.sampled_from(_pool()[ifaces[ifid]["linktype"]]))
            wire = len(frame) + draw(st.sampled_from([0, 0, 4]))
            if kind == "spb":
                packet: tuple[Any, ...] = ("spb", frame, wire)
            else:
                resol = ifaces[ifid]["tsresol"]
                base, exp = (
                    (2, resol & 0x7F) if resol and resol & 0x80 else (10, 6 if resol is None else resol)
                )
                ticks = draw(st.integers(1_600_000_000, 1_800_000_000)) * base**exp
                packet = (kind, ifid, min(ticks, 2**64 - 1), frame, wire)
            block = ng_section(order, [], [packet])[shb_only:]
            data += block
            pos += len(block)
            ends.append(pos)
    return Capture(data, ends)


# -- damage ---------------------------------------------------------------------------------------


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> tuple[bytes, int]:
    """``data`` damaged a few times, and how many of its first bytes are unchanged."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        if not out:
            break
        # anywhere, or in the second half (so that records usually come before the damage)
        at = draw(st.integers(len(out) // 2 * draw(st.integers(0, 1)), len(out) - 1))
        how = draw(st.sampled_from(["overwrite", "overwrite", "flip", "insert", "delete", "cut"]))
        if how == "overwrite":
            junk = draw(st.binary(min_size=1, max_size=8))
            out[at : at + len(junk)] = junk
        elif how == "flip":
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif how == "delete":
            del out[at : at + draw(st.integers(1, 64))]
        else:
            del out[at:]
    return bytes(out), intact_prefix(bytes(out), data)


# -- what every read must satisfy -----------------------------------------------------------------

_RANGES = {
    "ip_version": (4, 6),
    "proto": (0, 255),
    "ip_len": (0, 65535 + 40),
    "ttl": (0, 255),
    "src_port": (0, 65535),
    "dst_port": (0, 65535),
    "tcp_flags": (0, 255),
    "tcp_seq": (0, 2**32 - 1),
    "tcp_ack": (0, 2**32 - 1),
    "tcp_window": (0, 65535),
    "icmp_type": (0, 255),
    "icmp_code": (0, 255),
    "vlan": (0, 4095),
}


def check_record(row: dict) -> None:
    assert 0 <= row["ts"] <= MAX_TS_NS, row
    assert 0 <= row["cap_len"] <= row["wire_len"] <= 2**32 - 1, row
    for name, (lo, hi) in _RANGES.items():
        assert row[name] is None or lo <= row[name] <= hi, (name, row)
    assert row["ip_version"] in (4, 6)
    for name in ("src_ip", "dst_ip"):
        assert ipaddress.ip_address(row[name]).version == row["ip_version"], row
    assert row["iface"] is not None and not set(row["iface"]) & set(",\n\r")


def read_checked(path: Path, chunk: int, batch_size: int = 16) -> tuple[list[dict], CaptureError | None]:
    """Read ``path``; check the schema, every record's bounds and the summary; return the records
    and the CaptureError the read ended with, if any (any other exception fails the test)."""
    try:
        reader = read_records(path, chunk_bytes=chunk, batch_size=batch_size)
    except CaptureError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
        return [], exc
    batches, error = [], None
    try:
        for batch in reader:
            assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
            assert 1 <= batch.num_rows <= batch_size
            batches.append(batch)
    except CaptureError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)
        error = exc
    rows = netmon_records(batches)
    for row in rows:
        check_record(row)
    summary = reader.summary
    assert summary.frames == summary.records + sum(summary.skipped.values())
    assert all(count > 0 for count in summary.skipped.values())
    if error is None:
        assert len(rows) == summary.records
    return rows, error


def expected_prefix(capture: Capture, intact: int, work: Path) -> list[dict]:
    """The records of the undamaged capture's packets that lie wholly before byte ``intact``: the
    undamaged file up to the end of the last of them (a whole capture file), read."""
    packets = sum(end <= intact for end in capture.ends)
    if packets == 0:
        return []
    head = work / "undamaged.bin"
    head.write_bytes(capture.data[: capture.ends[packets - 1]])
    want, error = read_checked(head, 1 << 20, batch_size=65536)
    assert error is None
    return want


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_CHUNKS = st.sampled_from([64, 100, 256, 4096, 1 << 20])


def check_damaged(capture: Capture, bad: bytes, intact: int, chunk: int, work: Path) -> None:
    path = work / "damaged.bin"
    path.write_bytes(bad)
    got, error = read_checked(path, chunk)
    want = expected_prefix(capture, intact, work)
    assert got[: len(want)] == want
    event("ends with a CaptureError" if error else "ends normally")
    event("records before the damage" if want else "no record before the damage")


@fuzz(500)
@given(data=st.data(), capture=pcap_captures(), chunk=_CHUNKS)
def test_fuzz_pcap(work: Path, data: st.DataObject, capture: Capture, chunk: int) -> None:
    bad, intact = data.draw(damaged(capture.data))
    check_damaged(capture, bad, intact, chunk, work)


@fuzz(500)
@given(data=st.data(), capture=pcapng_captures(), chunk=_CHUNKS)
def test_fuzz_pcapng(work: Path, data: st.DataObject, capture: Capture, chunk: int) -> None:
    bad, intact = data.draw(damaged(capture.data))
    check_damaged(capture, bad, intact, chunk, work)


@pytest.mark.parametrize("codec", list(_COMPRESS))
@fuzz(200)
@given(data=st.data(), chunk=_CHUNKS)
def test_fuzz_compressed(work: Path, codec: str, data: st.DataObject, chunk: int) -> None:
    """Damage to the compressed bytes: the damage point is where the bytes the codec can give
    (fed one byte at a time) first differ from the original capture."""
    capture = data.draw(st.one_of(pcap_captures(), pcapng_captures()))
    # one to three members / streams (as pigz, pbzip2 and xz -T write), maybe zero padding after
    cuts = sorted(data.draw(st.lists(st.integers(0, len(capture.data)), max_size=2)))
    bounds = [0, *cuts, len(capture.data)]
    packed = b"".join(_COMPRESS[codec](capture.data[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    packed += b"\0" * data.draw(st.sampled_from([0, 0, 4]))
    bad, _ = data.draw(damaged(packed))
    plain, _ = salvage(bad, codec)
    check_damaged(capture, bad, intact_prefix(plain, capture.data), chunk, work)


# -- the decoder ----------------------------------------------------------------------------------

_LINKTYPES = sorted(SUPPORTED_LINKTYPES) + [147, 239]


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    pool = _pool()
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=120))
    frame = bytearray(draw(st.sampled_from(pool[1] + pool[101])))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, max(0, len(frame) - 1)))
        frame[at : at + 2] = draw(st.binary(min_size=1, max_size=2))
    return bytes(frame[: draw(st.integers(0, len(frame)))] if draw(st.booleans()) else frame)


_WIDE = st.one_of(
    st.integers(0, 2**64),
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, MAX_TS_NS, MAX_TS_NS + 1, -1, 2**32 - 1, 2**32, 1_700_000_000 * 10**9]),
)


@fuzz(500)
@given(
    batch=st.lists(st.tuples(frames(), _WIDE, st.one_of(_WIDE, st.integers(0, 200))), max_size=8),
    linktype=st.sampled_from(_LINKTYPES),
)
def test_fuzz_decoder(batch: list[tuple[bytes, int, int]], linktype: int) -> None:
    """Frames decoded together give the records of the frames decoded one by one, in order."""
    raw = [f for f, _, _ in batch]
    ts = [t for _, t, _ in batch]
    wire = [w for _, _, w in batch]
    records, skipped = decode_frames(raw, ts, wire, linktype)
    assert records.schema.equals(ARROW_SCHEMA)
    rows = netmon_records([records])
    for row in rows:
        check_record(row)
    assert len(rows) + sum(skipped.values()) == len(batch)
    assert all(count > 0 for count in skipped.values())
    one_by_one: list[dict] = []
    reasons: dict[str, int] = {}
    for f, t, w in batch:
        single, why = decode_frames([f], [t], [w], linktype)
        one_by_one += netmon_records([single])
        for reason, count in why.items():
            reasons[reason] = reasons.get(reason, 0) + count
        # the metadata rules, written out
        if not 0 <= t <= MAX_TS_NS:
            assert why == {"bad_timestamp": 1}
        elif not len(f) <= w <= 2**32 - 1:
            assert why == {"bad_length": 1}
        elif single.num_rows:
            assert single.column("wire_len")[0].as_py() == w and single.column("cap_len")[0].as_py() == len(f)
    assert rows == one_by_one
    assert skipped == reasons


# -- Parquet --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parquet_file(work: Path) -> tuple[bytes, pa.Table]:
    from ingest.readers.parquet import parse_to_parquet

    capture = work / "pool.pcap"
    frames = _pool()[1] * 4
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    body = b"".join(
        struct.pack("<IIII", 1_700_000_000 + i, i, len(f), len(f) + 4) + f for i, f in enumerate(frames)
    )
    capture.write_bytes(header + body)
    out = work / "pool.parquet"
    parse_to_parquet([capture], out)
    return out.read_bytes(), pq.read_table(out)


@fuzz(150)
@given(data=st.data())
def test_fuzz_parquet(work: Path, parquet_file: tuple[bytes, pa.Table], data: st.DataObject) -> None:
    """Damaged Parquet: a one-line CaptureError, or records of the schema within the bounds."""
    original, table = parquet_file
    bad, intact = data.draw(damaged(original))
    path = work / "damaged.parquet"
    path.write_bytes(bad)
    try:
        got = read_parquet_records(path)
    except CaptureError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert got.schema.equals(ARROW_SCHEMA)
    ts = got.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
    assert ((ts >= 0) & (ts <= MAX_TS_NS)).all()
    cap = got.column("cap_len").to_numpy(zero_copy_only=False)
    wire = got.column("wire_len").to_numpy(zero_copy_only=False)
    assert ((cap >= 0) & (cap <= wire) & (wire <= 2**32 - 1)).all()
    if intact == len(original):
        assert got.equals(table)
