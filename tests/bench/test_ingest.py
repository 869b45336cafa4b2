"""``bench.ingest`` (``netmon bench ingest``): parse and replay rates into the real broker, every figure."""

from __future__ import annotations

import pytest

from bench.ingest import bench_ingest, format_report


@pytest.mark.kafka
def test_bench_ingest_reports_every_figure(kafka_bootstrap: str) -> None:
    result = bench_ingest(packets=3000, bootstrap=kafka_bootstrap, scapy_packets=300, baseline_packets=300)
    assert result["parse"]["packets"] == result["replay"]["acknowledged"] == 3000
    assert result["parse"]["scapy_packets"] == 300 and result["per_packet"]["packets"] == 300
    assert result["replay"]["ratio"] == round(
        result["replay"]["packets_per_s"] / result["per_packet"]["packets_per_s"], 1
    )
    text = "\n".join(format_report(result))
    for label in ("parse", "scapy", "replay", "baseline", "targets"):
        assert f"\n{label} " in text
