"""Brute-force oracles for pipeline tests, independent of netmon's decoder: Scapy full dissection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.utils import PcapReader


def traffic_per_window(path: Path, window_ns: int = 1_000_000_000) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(window_start_ns, proto): (packets, bytes)}`` over every IP packet of a capture."""
    packets: Counter[tuple[int, int]] = Counter()
    volume: Counter[tuple[int, int]] = Counter()
    with PcapReader(str(path)) as reader:
        for pkt in reader:
            if IP in pkt:
                proto = int(pkt[IP].proto)
            elif IPv6 in pkt:
                layer = pkt[IPv6].payload
                # Walk IPv6 extension headers to the transport protocol number.
                nh = int(pkt[IPv6].nh)
                while nh in (0, 43, 44, 60, 135, 51) and hasattr(layer, "nh"):
                    nh = int(layer.nh)
                    layer = layer.payload
                proto = nh
            else:
                continue
            ts_ns = int(pkt.time * 1_000_000_000)
            key = (ts_ns // window_ns * window_ns, proto)
            packets[key] += 1
            volume[key] += int(pkt.wirelen or len(pkt))
    return {k: (packets[k], volume[k]) for k in packets}
