"""The generator's ground truth (``details["truth"]``, ``samples generate --json``) against its packets."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from cli.main import cli
from ingest.generate import SCENARIOS, generate
from ingest.readers import read_records

SYN, UDP = 0x02, 17


def _table(path: Path) -> pa.Table:
    t = pa.Table.from_batches(list(read_records(path)))
    return t.set_column(0, "ts", t.column("ts").cast(pa.int64()))


def _ns(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return round(moment.timestamp() * 1e6) * 1000


def _attack(t: pa.Table, scenario: str, truth: dict) -> pa.Table:
    """The attack's packets, found from what they look like (not from the generator's variables)."""
    if scenario == "port-scan":
        [scanner] = truth["attackers"]
        mask = pc.or_kleene(pc.equal(t["src_ip"], scanner), pc.equal(t["dst_ip"], scanner))
    elif scenario == "heavy-hitter-burst":
        mask = pc.and_kleene(pc.equal(t["src_ip"], truth["attackers"][0]), pc.equal(t["dst_port"], 5001))
    else:  # syn-flood, ddos: SYNs with the attack's window 1024, or (ddos) UDP to port 80 of the victim
        to_victim = pc.equal(t["dst_ip"], truth["victims"][0])
        syn = pc.and_kleene(pc.equal(t["tcp_flags"], SYN), pc.equal(t["tcp_window"], 1024))
        udp80 = pc.and_kleene(pc.equal(t["proto"], UDP), pc.equal(t["dst_port"], 80))
        mask = pc.and_kleene(to_victim, pc.or_kleene(syn, udp80))
    return t.filter(mask)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "baseline"])
@pytest.mark.parametrize("seed", [1, 5])
def test_truth_names_the_attack_and_its_first_and_last_packet(
    tmp_path: Path, scenario: str, seed: int
) -> None:
    path = tmp_path / "x.pcap"
    summary = generate(path, scenario=scenario, packets=8000, seed=seed, duration_s=20)
    truth = summary.details["truth"]
    assert truth["scenario"] == scenario
    attack = _attack(_table(path), scenario, truth)
    assert attack.num_rows > 100
    assert _ns(truth["start"]) == pc.min(attack["ts"]).as_py()
    assert _ns(truth["end"]) == pc.max(attack["ts"]).as_py()
    assert truth["start_s"] == pytest.approx((_ns(truth["start"]) - _ns("2024-01-01T00:00:00+00:00")) / 1e9)
    senders = set(attack.filter(pc.equal(attack["dst_ip"], truth["victims"][0]))["src_ip"].to_pylist())
    if scenario == "ddos":
        assert set(truth["attackers"]) == senders or (
            not truth["attackers"] and truth["attackers_count"] > 100
        )
        assert truth["attackers_count"] == len(senders) and not truth["spoofed"]
    if scenario == "syn-flood":
        assert truth["spoofed"] and truth["attackers"] == [] and truth["attackers_count"] == len(senders)
    if scenario in ("port-scan", "heavy-hitter-burst"):
        assert truth["attackers_count"] == 1 and senders == set(truth["attackers"])


def test_baseline_has_no_attack(tmp_path: Path) -> None:
    truth = generate(tmp_path / "b.pcap", packets=2000).details["truth"]
    assert truth == {"attackers": [], "attackers_count": 0, "spoofed": False, "victims": [], "start": None,
                     "start_s": None, "end": None, "end_s": None, "scenario": "baseline"}  # fmt: skip


def test_truth_is_in_the_json_summary_and_the_capture_is_unchanged_by_it(tmp_path: Path) -> None:
    out = tmp_path / "scan.pcap"
    args = ["samples", "generate", "--scenario", "port-scan", "--packets", "3000", "--out", str(out)]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    truth = json.loads(result.output)["details"]["truth"]
    assert truth["attackers"] == ["198.51.100.200"] and truth["victims"] == ["10.0.0.10"]
    text = CliRunner().invoke(cli, args)
    assert "  attack: 198.51.100.200 -> 10.0.0.10" in text.output.splitlines()
    assert f"  attack time: {truth['start']} .. {truth['end']}" in text.output.splitlines()
