"""The sample generator: determinism, the committed samples, and the traffic structure seen by Scapy."""

from __future__ import annotations

import collections
import json
import re
import shlex
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from scapy.layers.dns import DNS
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.packet import Raw
from scapy.utils import PcapReader, rdpcap

from cli.main import cli
from ingest.generate import SCENARIOS, generate, parse_start
from ingest.pcapwriter import PcapWriter
from tests.conftest import REPO_ROOT

SAMPLES = REPO_ROOT / "samples"
SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04


def readme_commands() -> list[list[str]]:
    text = (SAMPLES / "README.md").read_text()
    return [shlex.split(line)[1:] for line in text.splitlines() if line.startswith("netmon samples generate")]


def test_readme_lists_every_committed_sample() -> None:
    outs = {Path(cmd[cmd.index("--out") + 1]).name for cmd in readme_commands()}
    assert outs == {p.name for p in SAMPLES.glob("*.pcap")}
    assert {cmd[cmd.index("--scenario") + 1] for cmd in readme_commands()} == set(SCENARIOS)


@pytest.mark.parametrize("args", readme_commands(), ids=lambda a: a[a.index("--out") + 1])
def test_committed_sample_is_regenerated_byte_identical(args: list[str], tmp_path: Path) -> None:
    i = args.index("--out")
    committed = REPO_ROOT / args[i + 1]
    out = tmp_path / committed.name
    result = CliRunner().invoke(cli, [*args[:i], "--out", str(out), *args[i + 2 :]])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == committed.read_bytes(), f"{committed.name} differs from a fresh generation"
    limit = 2_000_000 if committed.name == "mixed-small.pcap" else 310_000
    assert committed.stat().st_size <= limit


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"{n}.pcap" for n in "abc")
    generate(a, packets=500, seed=7)
    generate(b, packets=500, seed=7)
    generate(c, packets=500, seed=8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> list:
    path = tmp_path_factory.mktemp("gen") / "baseline.pcap"
    summary = generate(
        path, packets=4000, seed=21, duration_s=30, snaplen=65535, start="2024-03-01T12:00:00Z"
    )
    assert summary.packets == 4000
    return list(rdpcap(str(path)))


def _flags(p) -> int:
    return int(p[TCP].flags)


def test_exact_count_time_order_and_span(baseline: list) -> None:
    times = [Decimal(p.time) for p in baseline]
    assert len(baseline) == 4000
    assert times == sorted(times)
    start = Decimal(parse_start("2024-03-01T12:00:00Z")) / 10**9
    assert start <= times[0] < start + 1
    assert 27 <= times[-1] - times[0] <= 30


def test_checksums_are_valid(baseline: list) -> None:
    sample = baseline[:1000]  # Scapy rebuilds ~1k packets/s: a sample with every protocol
    assert all(any(layer in p for p in sample) for layer in (TCP, UDP, ICMP))
    for p in sample:
        for layer in (IP, TCP, UDP, ICMP):
            if layer in p:
                rebuilt = p.copy()
                del rebuilt[layer].chksum
                assert IP(bytes(rebuilt[IP]))[layer].chksum == p[layer].chksum, (
                    f"{layer.__name__}: {p.summary()}"
                )


def test_protocol_mix(baseline: list) -> None:
    kinds = collections.Counter(
        "tcp" if TCP in p else "dns" if DNS in p else "icmp" if ICMP in p else "?" for p in baseline
    )
    assert set(kinds) == {"tcp", "dns", "icmp"}
    assert kinds["tcp"] > kinds["dns"] > kinds["icmp"] > 50


def test_tcp_handshakes_and_teardown(baseline: list) -> None:
    syns = {}
    synacks = 0
    for p in baseline:
        if TCP not in p:
            continue
        ip, tcp, f = p[IP], p[TCP], _flags(p)
        if f == SYN:
            syns[(ip.src, tcp.sport, ip.dst, tcp.dport)] = (tcp.seq, p.time)
        elif f == SYN | ACK:
            key = (ip.dst, tcp.dport, ip.src, tcp.sport)
            assert key in syns, "SYN-ACK without its SYN"
            seq, t = syns[key]
            assert tcp.ack == (seq + 1) % 2**32
            assert 0.0009 <= p.time - t <= 0.31, "RTT outside 1-300 ms"
            synacks += 1
    assert synacks >= 100
    # Every connection whose FIN/ACK teardown completes went through the handshake first.
    states = collections.defaultdict(list)
    for p in baseline:
        if TCP in p:
            ip, tcp = p[IP], p[TCP]
            client = (ip.src, tcp.sport) if tcp.dport in (80, 443, 22) else (ip.dst, tcp.dport)
            states[client].append(_flags(p))
    closed = [f for f in states.values() if f.count(FIN | ACK) == 2]
    assert len(closed) >= 50
    for flags in closed:
        assert flags[:3] == [SYN, SYN | ACK, ACK] and flags[-1] == ACK


def test_dns_answers_match_queries(baseline: list) -> None:
    queries = {}
    answered = 0
    for p in baseline:
        if DNS not in p:
            continue
        dns = p[DNS]
        if dns.qr == 0:
            assert p[UDP].dport == 53
            queries[(p[IP].src, p[UDP].sport, dns.id)] = dns.qd[0].qname
        else:
            key = (p[IP].dst, p[UDP].dport, dns.id)
            assert queries[key] == dns.qd[0].qname
            assert (dns.ancount == 1) == (dns.rcode == 0)
            answered += 1
    assert answered >= 50


def test_icmp_echo_replies(baseline: list) -> None:
    requests = {
        (p[IP].src, p[IP].dst, p[ICMP].id, p[ICMP].seq) for p in baseline if ICMP in p and p[ICMP].type == 8
    }
    replies = [
        (p[IP].dst, p[IP].src, p[ICMP].id, p[ICMP].seq) for p in baseline if ICMP in p and p[ICMP].type == 0
    ]
    assert replies and set(replies) <= requests


def test_sources_and_destinations_are_zipf_skewed(baseline: list) -> None:
    for field in ("src", "dst"):
        counts = sorted(collections.Counter(getattr(p[IP], field) for p in baseline).values(), reverse=True)
        top = sum(counts[: max(1, len(counts) // 10)])
        assert top / len(baseline) > 0.5, f"top 10% of {field} carry only {top / len(baseline):.0%}"
        assert len(counts) > 30


def scenario(tmp_path: Path, name: str, packets: int = 3000) -> tuple[list, dict]:
    path = tmp_path / f"{name}.pcap"
    summary = generate(path, scenario=name, packets=packets, seed=5)
    assert summary.packets == packets
    with PcapReader(str(path)) as reader:
        return list(reader), summary.details


def test_syn_flood_victim_gets_unanswered_syns(tmp_path: Path) -> None:
    pkts, details = scenario(tmp_path, "syn-flood")
    victim, port = details["victim"], details["victim_port"]
    to_victim = [
        p for p in pkts if TCP in p and p[IP].dst == victim and p[TCP].dport == port and _flags(p) == SYN
    ]
    answered = [p for p in pkts if TCP in p and p[IP].src == victim and _flags(p) == SYN | ACK]
    assert len(to_victim) - len(answered) >= 1400
    assert len({p[IP].src for p in to_victim}) > 500


def test_port_scan_touches_many_ports(tmp_path: Path) -> None:
    pkts, details = scenario(tmp_path, "port-scan")
    scanner, target = details["scanner"], details["target"]
    probes = {
        p[TCP].dport: p[TCP].seq for p in pkts if TCP in p and p[IP].src == scanner and _flags(p) == SYN
    }
    assert len(probes) >= 500
    answers = {p[TCP].sport: p for p in pkts if TCP in p and p[IP].src == target and p[IP].dst == scanner}
    assert set(answers) == set(probes)
    for port, answer in answers.items():
        assert answer[TCP].ack == (probes[port] + 1) % 2**32
        assert _flags(answer) == (SYN | ACK if port in details["open_ports"] else RST | ACK)


def test_heavy_hitter_burst_takes_most_packets_for_a_while(tmp_path: Path) -> None:
    pkts, details = scenario(tmp_path, "heavy-hitter-burst")
    t0 = float(pkts[0].time) - float(pkts[0].time) % 60  # the default start is on a minute
    during = [details["burst_start_s"] <= float(p.time) - t0 < details["burst_end_s"] for p in pkts]
    inside = [p for p, d in zip(pkts, during, strict=True) if d]
    outside = [p for p, d in zip(pkts, during, strict=True) if not d]
    share = lambda ps: sum(p[IP].src == details["heavy_hitter"] for p in ps) / len(ps)  # noqa: E731
    assert share(inside) > 0.6 and share(outside) < 0.05


def test_ddos_many_sources_one_destination(tmp_path: Path) -> None:
    pkts, details = scenario(tmp_path, "ddos")
    to_victim = [p for p in pkts if p[IP].dst == details["victim"]]
    top_dst = collections.Counter(p[IP].dst for p in pkts).most_common(1)[0][0]
    assert top_dst == details["victim"]
    assert len({p[IP].src for p in to_victim}) >= 300
    assert {TCP in p for p in to_victim} == {True, False}


def test_pcap_writer_nanosecond_timestamps_and_snaplen(tmp_path: Path) -> None:
    path = tmp_path / "ns.pcap"
    frame = bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / Raw(b"x" * 100))
    with PcapWriter(path, linktype=101, snaplen=60, nanosecond=True) as w:
        w.write(frame, 1_700_000_000_123_456_789)
    [p] = rdpcap(str(path))
    assert Decimal(p.time) == Decimal("1700000000.123456789")
    assert len(bytes(p)) == 60 and p.wirelen == len(frame) and p[IP].src == "10.0.0.1"


def test_cli_json_and_errors(tmp_path: Path) -> None:
    out = tmp_path / "x.pcap"
    ok = CliRunner().invoke(
        cli, ["samples", "generate", "--scenario", "ddos", "--packets", "300", "--out", str(out), "--json"]
    )
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["packets"] == 300 and out.stat().st_size > 300 * 54
    bad = CliRunner().invoke(cli, ["samples", "generate", "--start", "yesterday", "--out", str(out)])
    assert bad.exit_code == 2 and re.search(r"--start 'yesterday' is not an ISO-8601 time", bad.output)
    bad = CliRunner().invoke(cli, ["samples", "generate", "--scenario", "nope", "--out", str(out)])
    assert bad.exit_code == 2 and "nope" in bad.output
