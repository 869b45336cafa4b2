"""``bench.parse``: the benchmark's synthetic capture against Scapy's dissection, and the parse bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.parse import bench_parse, write_synthetic_pcap
from tests.ingest.conftest import assert_records_equal, scapy_file_records
from tests.ingest.test_readers import read_all


def test_synthetic_benchmark_capture_matches_scapy_and_bench_runs(tmp_path: Path) -> None:
    path = write_synthetic_pcap(tmp_path / "synthetic.pcap", 3000, seed=3)
    expected = scapy_file_records(path, limit=400)
    ours, summary = read_all(path)
    assert summary.frames == summary.records == 3000
    assert_records_equal(ours[:400], expected)
    assert {r["ip_version"] for r in ours} == {4, 6} and {r["proto"] for r in ours} == {1, 6, 17, 58}
    result = bench_parse(path, scapy_packets=50)
    assert (result["packets"], result["records"], result["scapy_packets"]) == (3000, 3000, 50)
    assert result["ratio"] == pytest.approx(result["packets_per_s"] / result["scapy_packets_per_s"], rel=0.01)
