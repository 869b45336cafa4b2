"""Parse-speed benchmark: our reader against Scapy's full dissection, on the same file, same run.

``python -m bench.parse [FILE] [--packets N]`` measures :func:`ingest.readers.read_records`
over the whole file and Scapy's ``PcapReader`` (full dissection, the first ``--scapy-packets``
packets) on the same file, and prints both rates and their ratio. Without ``FILE`` it first
writes a synthetic capture of ``--packets`` packets to a temporary directory with
:func:`write_synthetic_pcap` (numpy, a few seconds per million packets; Scapy would take hours).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bench_parse", "write_synthetic_pcap"]


def _put(out: np.ndarray, pos: np.ndarray, values: np.ndarray | int, fmt: str) -> None:
    """Write ``values`` (dtype ``fmt``, e.g. ``'>u2'``) at byte offsets ``pos`` of ``out``."""
    size = np.dtype(fmt).itemsize
    view = np.ndarray(shape=(len(out) - size + 1,), dtype=fmt, buffer=out, strides=(1,))
    view[pos] = values


def write_synthetic_pcap(
    path: str | os.PathLike[str], packets: int, *, seed: int = 0, snaplen: int = 65535
) -> Path:
    """Write a classic pcap of ``packets`` synthetic Ethernet frames (vectorised, no Scapy).

    The mix: 90 % IPv4 / 10 % IPv6, 5 % VLAN-tagged; TCP 80 %, UDP 15 %, ICMP/ICMPv6 5 %;
    Zipf-skewed addresses from pools of 10,000 (IPv4) and 1,000 (IPv6); payloads of 0 bytes
    (half), up to 600 bytes, or 1460 bytes (one in ten). Timestamps are µs, 10 µs apart.
    """
    if snaplen < 96:
        raise ValueError("snaplen must be >= 96 (headers are written whole)")
    rng = np.random.default_rng(seed)
    pool4 = (rng.integers(0x0A000000, 0xDF000000, 10_000, dtype=np.int64)).astype(np.uint32)
    pool6 = rng.integers(0, 256, (1_000, 16), dtype=np.uint8)
    pool6[:, 0:2] = (0x20, 0x01)
    pool6[::3, 8:14] = 0  # some addresses with zero runs (exercise ``::``)
    path = Path(path)
    with open(path, "wb") as fh:
        fh.write(np.array([0xA1B2C3D4], "<u4").tobytes())
        fh.write(np.array([2, 4], "<u2").tobytes() + np.array([0, 0, snaplen, 1], "<u4").tobytes())
        done = 0
        while done < packets:
            m = min(200_000, packets - done)
            fh.write(_synthetic_chunk(rng, m, done, pool4, pool6, snaplen).tobytes())
            done += m
    return path


def _synthetic_chunk(
    rng: np.random.Generator, m: int, first: int, pool4: np.ndarray, pool6: np.ndarray, snaplen: int
) -> np.ndarray:
    v6 = rng.random(m) < 0.10
    vlan = rng.random(m) < 0.05
    kind = rng.choice(3, m, p=[0.80, 0.15, 0.05])  # tcp, udp, icmp
    payload = np.where(rng.random(m) < 0.5, 0, np.where(rng.random(m) < 0.8, rng.integers(1, 600, m), 1460))
    l2 = 14 + 4 * vlan
    l3 = np.where(v6, 40, 20)
    l4 = np.where(kind == 0, 20, 8)
    wire = l2 + l3 + l4 + payload
    cap = np.minimum(wire, snaplen)
    starts = np.zeros(m, np.int64)
    np.cumsum(16 + cap[:-1], out=starts[1:])
    out = np.zeros(int(starts[-1] + 16 + cap[-1]) + 64, np.uint8)
    ts_us = (np.arange(first, first + m, dtype=np.int64) * 10) + 1_700_000_000_000_000
    _put(out, starts, ts_us // 1_000_000, "<u4")
    _put(out, starts + 4, ts_us % 1_000_000, "<u4")
    _put(out, starts + 8, cap, "<u4")
    _put(out, starts + 12, wire, "<u4")
    eth = starts + 16
    _put(out, eth, 0x02000000, ">u4")
    _put(out, eth + 6, 0x02000000, ">u4")
    ethertype = np.where(v6, 0x86DD, 0x0800)
    tagged = np.flatnonzero(vlan)
    _put(out, eth[tagged] + 12, 0x8100, ">u2")
    _put(out, eth[tagged] + 14, rng.integers(1, 4095, len(tagged)), ">u2")
    _put(out, eth + l2 - 2, ethertype, ">u2")
    ip = eth + l2
    proto = np.array([6, 17, 1])[kind]
    ttl = rng.choice([64, 128, 255, 57], m)
    src = rng.zipf(1.3, m) % len(pool4)
    dst = rng.zipf(1.5, m) % len(pool4)
    i4 = np.flatnonzero(~v6)
    _put(out, ip[i4], 0x45, "u1")
    _put(out, ip[i4] + 2, (wire - l2)[i4], ">u2")
    _put(out, ip[i4] + 4, np.arange(len(i4)) & 0xFFFF, ">u2")
    _put(out, ip[i4] + 6, 0x4000, ">u2")
    _put(out, ip[i4] + 8, ttl[i4], "u1")
    _put(out, ip[i4] + 9, proto[i4], "u1")
    _put(out, ip[i4] + 12, pool4[src[i4]], ">u4")
    _put(out, ip[i4] + 16, pool4[dst[i4]], ">u4")
    i6 = np.flatnonzero(v6)
    _put(out, ip[i6], 0x60000000, ">u4")
    _put(out, ip[i6] + 4, (wire - l2 - 40)[i6], ">u2")
    _put(out, ip[i6] + 6, np.where(proto[i6] == 1, 58, proto[i6]), "u1")
    _put(out, ip[i6] + 7, ttl[i6], "u1")
    for col in range(16):
        _put(out, ip[i6] + 8 + col, pool6[src[i6] % len(pool6), col], "u1")
        _put(out, ip[i6] + 24 + col, pool6[dst[i6] % len(pool6), col], "u1")
    th = ip + l3
    sport = rng.integers(1024, 65536, m)
    dport = rng.choice([80, 443, 53, 22, 8080, 123], m)
    ports = np.flatnonzero(kind < 2)
    _put(out, th[ports], sport[ports], ">u2")
    _put(out, th[ports] + 2, dport[ports], ">u2")
    t = np.flatnonzero(kind == 0)
    _put(out, th[t] + 4, rng.integers(0, 2**32, len(t), dtype=np.uint64).astype(np.uint32), ">u4")
    _put(out, th[t] + 8, rng.integers(0, 2**32, len(t), dtype=np.uint64).astype(np.uint32), ">u4")
    _put(out, th[t] + 12, 0x50, "u1")
    _put(out, th[t] + 13, rng.choice([0x02, 0x12, 0x10, 0x18, 0x11, 0x04], len(t)), "u1")
    _put(out, th[t] + 14, rng.integers(0, 65536, len(t)), ">u2")
    u = np.flatnonzero(kind == 1)
    _put(out, th[u] + 4, (8 + payload)[u], ">u2")
    c = np.flatnonzero(kind == 2)
    _put(out, th[c], np.where(v6[c], 128, 8), "u1")
    return out[: int(starts[-1] + 16 + cap[-1])]


def _scapy_rate(path: Path, count: int) -> tuple[int, float, float]:
    """Packets, wall seconds and CPU seconds of Scapy's full dissection of the first ``count``."""
    import scapy.layers.inet  # noqa: F401 - the layers Scapy dissects into
    import scapy.layers.inet6  # noqa: F401
    import scapy.layers.l2  # noqa: F401
    from scapy.utils import PcapReader

    seen = 0
    wall, cpu = time.perf_counter(), time.process_time()
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            pkt.summary()  # touch every layer, as a dissecting consumer would
            seen += 1
            if seen >= count:
                break
    return seen, time.perf_counter() - wall, time.process_time() - cpu


def bench_parse(path: str | os.PathLike[str], *, scapy_packets: int = 20000) -> dict[str, Any]:
    """Packets per second of :func:`ingest.readers.read_records` and of Scapy on the same file.

    Both are timed by the wall clock and by this process's CPU time (the machine may be shared:
    the CPU-time rates are what an idle machine would show). One-time start-up costs (imports,
    lookup tables) are paid by a warm-up on the first chunk before timing.

    Returns
    -------
    dict
        ``file``, ``bytes``, ``packets`` (frames read), ``records``, ``seconds``, ``cpu_seconds``,
        ``packets_per_s``, ``cpu_packets_per_s``, ``mb_per_s``; ``scapy_packets``,
        ``scapy_seconds``, ``scapy_packets_per_s``, ``scapy_cpu_packets_per_s``; ``ratio`` and
        ``cpu_ratio`` (ours / Scapy's rate).
    """
    from ingest.readers import read_records

    path = Path(path)
    size = path.stat().st_size
    with read_records(path, chunk_bytes=1 << 20) as warm:
        next(iter(warm), None)
    wall, cpu = time.perf_counter(), time.process_time()
    reader = read_records(path)
    for _batch in reader:
        pass
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    frames = reader.summary.frames
    scapy_seen, scapy_seconds, scapy_cpu = _scapy_rate(path, scapy_packets)

    def rate(n: int, s: float) -> float:
        return n / s if s > 0 else float("inf")

    ours, ours_cpu = rate(frames, seconds), rate(frames, cpu_seconds)
    theirs, theirs_cpu = rate(scapy_seen, scapy_seconds), rate(scapy_seen, scapy_cpu)
    return {
        "file": str(path),
        "bytes": size,
        "packets": frames,
        "records": reader.summary.records,
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu_seconds, 4),
        "packets_per_s": round(ours),
        "cpu_packets_per_s": round(ours_cpu),
        "mb_per_s": round(size / seconds / 1e6, 1) if seconds > 0 else None,
        "scapy_packets": scapy_seen,
        "scapy_seconds": round(scapy_seconds, 4),
        "scapy_packets_per_s": round(theirs),
        "scapy_cpu_packets_per_s": round(theirs_cpu),
        "ratio": round(ours / theirs, 1) if theirs else None,
        "cpu_ratio": round(ours_cpu / theirs_cpu, 1) if theirs_cpu else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.parse", description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", help="capture to read (default: a synthetic one)")
    parser.add_argument("--packets", type=int, default=1_000_000, help="synthetic capture size")
    parser.add_argument("--scapy-packets", type=int, default=20_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netmon-bench-") as tmp:
        path = (
            Path(args.file) if args.file else write_synthetic_pcap(Path(tmp) / "synthetic.pcap", args.packets)
        )
        result = bench_parse(path, scapy_packets=args.scapy_packets)
    print(json.dumps(result, indent=2))
    print(
        f"netmon {result['packets_per_s']:,} packets/s vs Scapy {result['scapy_packets_per_s']:,} "
        f"packets/s: {result['ratio']}x (CPU time: {result['cpu_packets_per_s']:,} vs "
        f"{result['scapy_cpu_packets_per_s']:,} packets/s, {result['cpu_ratio']}x)"
    )


if __name__ == "__main__":
    main()
