"""``netmon parse``: Parquet output and its summary against Scapy's counts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from cli.main import cli
from ingest import read_records
from ingest.readers.parquet import PROTOCOL_NAMES
from netmon.records import ARROW_SCHEMA
from tests.ingest.conftest import pcap_bytes, scapy_file_records

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT / "samples"


def scapy_counts(paths: list[Path]) -> dict:
    """Per-protocol counts, distinct sources and top-5 sources from Scapy's dissection."""
    records = [r for path in paths for r in scapy_file_records(path) if r is not None]
    protocols = Counter(PROTOCOL_NAMES.get(r["proto"], str(r["proto"])) for r in records)
    sources = Counter(r["src_ip"] for r in records)
    top = sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return {
        "records": len(records),
        "protocols": dict(protocols),
        "distinct_sources": len(sources),
        "top_sources": [{"src_ip": ip, "records": n} for ip, n in top],
    }


def run_parse(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["parse", *args])
    return result.exit_code, result.stdout, result.stderr


def check_against_scapy(paths: list[Path], out: Path) -> dict:
    code, stdout, stderr = run_parse(*map(str, paths), "--out", str(out), "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    want = scapy_counts(paths)
    assert report["records"] == want["records"]
    assert report["protocols"] == want["protocols"]
    assert list(report["protocols"].values()) == sorted(want["protocols"].values(), reverse=True)
    assert report["distinct_sources"] == want["distinct_sources"]
    assert report["top_sources"] == want["top_sources"]
    table = pq.read_table(out)
    assert table.schema.equals(ARROW_SCHEMA)
    ours = pa.Table.from_batches([b for p in paths for b in read_records(p)], schema=ARROW_SCHEMA)
    assert table.equals(ours)
    return report


@pytest.mark.skipif(not (SAMPLES / "syn-flood.pcap").exists(), reason="samples/ not generated")
def test_parse_samples_counts_equal_scapy(tmp_path: Path) -> None:
    paths = [SAMPLES / "syn-flood.pcap", SAMPLES / "ddos.pcap"]
    report = check_against_scapy(paths, tmp_path / "out.parquet")
    assert [f["path"] for f in report["files"]] == [str(p) for p in paths]


def test_parse_real_captures_counts_equal_scapy(captures_dir: Path, tmp_path: Path) -> None:
    paths = [captures_dir / "tunnels-gre-aruba.pcap", captures_dir / "http-bro.org.pcap"]
    report = check_against_scapy(paths, tmp_path / "out.parquet")
    assert "gre" in report["protocols"]


def test_parse_text_summary(ethernet_pcap: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    code, stdout, _ = run_parse(str(ethernet_pcap), "--out", str(out), "--iface", "lab")
    assert code == 0
    lines = stdout.splitlines()
    reader = read_records(ethernet_pcap)
    rows = sum(b.num_rows for b in reader)
    assert lines[0] == f"{out}: {rows} records from {reader.summary.frames} frames ({ethernet_pcap})"
    assert lines[1] == "skipped: non_ip 4"
    assert lines[2].startswith("protocols: tcp ")
    assert set(pq.read_table(out).column("iface").to_pylist()) == {"lab"}


def test_parse_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    code, stdout, stderr = run_parse(str(text), "--out", str(tmp_path / "o.parquet"))
    assert code == 2 and stdout == ""
    assert not (tmp_path / "o.parquet").exists()
    assert stderr.count("\n") == 1
    assert stderr.startswith(f"netmon parse: error: {text}: byte 0: not a capture file")


def test_parse_damaged_file_keeps_earlier_records(tmp_path: Path) -> None:
    good = bytes.fromhex(
        "ffffffffffff02000000000108004500001c000100004011000ac0000201c00002020035d43100080000"
    )
    data = bytearray(pcap_bytes([good] * 5))
    data[24 + 3 * (16 + len(good)) + 8 : 24 + 3 * (16 + len(good)) + 12] = b"\xff\xff\xff\x7f"
    path = tmp_path / "bad.pcap"
    path.write_bytes(bytes(data))
    out = tmp_path / "o.parquet"
    code, _, stderr = run_parse(str(path), "--out", str(out))
    assert code == 2
    assert f"bad.pcap: byte {24 + 3 * (16 + len(good))}: damaged record header" in stderr
    assert pq.read_table(out).num_rows == 3


def test_parse_unsupported_link_type(captures_dir: Path, tmp_path: Path) -> None:
    code, _, stderr = run_parse(str(captures_dir / "nflog-http.pcap"), "--out", str(tmp_path / "o.parquet"))
    assert code == 2
    assert "unsupported link type 239 (NFLOG)" in stderr


def test_the_summary_top_sources_equal_a_counter_with_ties_across_batches() -> None:
    """``netmon parse``'s summary counts with pyarrow (a Counter and a sort were half its time)."""
    from collections import Counter

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.readers.parquet import _top_sources

    rng = np.random.default_rng(7)
    ips = [f"10.0.{a}.{b}" for a, b in rng.integers(0, 6, (5000, 2))]  # 36 sources: many ties
    parts = []
    for i in range(0, len(ips), 700):
        counted = pc.value_counts(pa.array(ips[i : i + 700]))
        parts.append(
            pa.table({"src_ip": counted.field("values"), "n": pc.cast(counted.field("counts"), pa.int64())})
        )
    truth = Counter(ips)
    ranked = sorted(truth.items(), key=lambda kv: (-kv[1], kv[0]))
    for top in (1, 5, 36, 50):
        assert _top_sources(parts, top) == (len(truth), ranked[:top])
    assert _top_sources([], 5) == (0, [])
