"""Brute-force oracles for pipeline tests, independent of netmon's decoder: Scapy full dissection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.utils import PcapReader


def traffic_per_window(
    path: Path, window_ns: int = 1_000_000_000, *, watermark_ns: int | None = None
) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(window_start_ns, proto): (packets, bytes)}`` over every IP packet of a capture.

    ``watermark_ns``: the pipeline's watermark delay (``[pipeline] watermark_s``), and its one
    meaning of late (``docs/reliability.md``): a packet more than that behind the newest IP packet
    before it, in file order (one Kafka partition), is late and not counted. ``None``: every
    packet counts.
    """
    packets: Counter[tuple[int, int]] = Counter()
    volume: Counter[tuple[int, int]] = Counter()
    newest: int | None = None
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
            if watermark_ns is not None:
                late = newest is not None and ts_ns < newest - watermark_ns
                newest = ts_ns if newest is None else max(newest, ts_ns)
                if late:
                    continue
            key = (ts_ns // window_ns * window_ns, proto)
            packets[key] += 1
            volume[key] += int(pkt.wirelen or len(pkt))
    return {k: (packets[k], volume[k]) for k in packets}
