"""The built-in join queries against brute force on constructed, generated and real captures."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analytics.join_queries import (
    HandshakeQuery,
    LinkQuery,
    analyze_join,
    handshake_rtts,
    link_matches,
    make_shedder,
    rtt_per_server,
    run_join,
    unanswered_syns,
)
from cli.main import cli
from netmon.records import ARROW_SCHEMA

S = 1_000_000_000
SYN, ACK, RST = 0x02, 0x10, 0x04


def records(rows: list[dict]) -> pa.Table:
    """A table in the record schema from a few hand-written packets (missing columns null)."""
    cols = {name: [r.get(name) for r in rows] for name in ARROW_SCHEMA.names}
    return pa.Table.from_pydict(cols, schema=ARROW_SCHEMA)


def pkt(ts_ms, src, dst, sport, dport, flags, seq=0, ack=0, iface="0", proto=6):
    return {
        "ts": ts_ms * 1_000_000,
        "src_ip": src,
        "dst_ip": dst,
        "src_port": sport,
        "dst_port": dport,
        "proto": proto,
        "tcp_flags": flags,
        "tcp_seq": seq,
        "tcp_ack": ack,
        "iface": iface,
    }


# -- brute force -----------------------------------------------------------------------------------
def brute_force_handshakes(table: pa.Table, window_s: float) -> tuple[dict[int, float], dict[str, int]]:
    """A loop over the packets: {SYN-ACK row: RTT to the latest matching SYN within T} and the SYNs
    never answered within T (and due before the end) per destination."""
    rows = table.to_pylist()
    ts_ns = table.column("ts").cast(pa.int64()).to_pylist()
    syns: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    end = 0
    for i, r in enumerate(rows):
        t = ts_ns[i]
        end = max(end, t)
        flags = r["tcp_flags"] or 0
        if r["proto"] == 6 and flags & SYN and not flags & ACK and r["src_port"] is not None:
            key = (r["src_ip"], r["dst_ip"], r["src_port"], r["dst_port"], (r["tcp_seq"] + 1) % 2**32)
            syns[key].append((t, i))
    rtts: dict[int, float] = {}
    answered: set[int] = set()
    for i, r in enumerate(rows):
        flags = r["tcp_flags"] or 0
        if r["proto"] == 6 and flags & SYN and flags & ACK and r["src_port"] is not None:
            t = ts_ns[i]
            key = (r["dst_ip"], r["src_ip"], r["dst_port"], r["src_port"], r["tcp_ack"])
            delays = [t - ts for ts, j in syns.get(key, []) if 0 <= t - ts <= window_s * S]
            answered |= {j for ts, j in syns.get(key, []) if 0 <= t - ts <= window_s * S}
            if delays:
                rtts[i] = min(delays) / S
    unanswered: dict[str, int] = defaultdict(int)
    for key, lst in syns.items():
        for ts, j in lst:
            if j not in answered and ts + window_s * S < end:
                unanswered[key[1]] += 1
    return rtts, dict(unanswered)


def check_handshakes(table: pa.Table, window_s: float = 3.0) -> pd.DataFrame:
    q = HandshakeQuery(window_s)
    run = run_join(q, table, track_unmatched=True)
    rtts = handshake_rtts(run.results)
    expected_rtts, expected_unanswered = brute_force_handshakes(table, window_s)
    assert sorted(rtts["synack_id"].tolist()) == sorted(expected_rtts)
    got = dict(zip(rtts["synack_id"].tolist(), rtts["rtt_s"].tolist(), strict=True))
    for i, rtt in expected_rtts.items():
        assert got[i] == pytest.approx(rtt, abs=1e-9)
    un = unanswered_syns(run, window_s)
    assert dict(zip(un["server"], un["syns"], strict=True)) == expected_unanswered
    # The streaming way (SYNs expiring unmatched from the join state) agrees.
    if len(run.unmatched):
        streamed = run.unmatched[run.unmatched["side"] == "left"]["server"].value_counts().to_dict()
    else:
        streamed = {}
    assert streamed == expected_unanswered
    return rtts


# -- constructed packets ---------------------------------------------------------------------------
def test_handshake_on_constructed_packets():
    c, s = "10.0.0.1", "192.0.2.7"
    t = records(
        [
            pkt(0, c, s, 5000, 443, SYN, seq=99),  # 0: answered by 2 (RTT 20 ms)
            pkt(5, c, s, 5001, 443, SYN, seq=2**32 - 1),  # 1: seq wraps: answered by 3 with ack 0
            pkt(20, s, c, 443, 5000, SYN | ACK, seq=7, ack=100),  # 2
            pkt(30, s, c, 443, 5001, SYN | ACK, seq=8, ack=0),  # 3: RTT 25 ms
            pkt(40, c, s, 5002, 443, SYN, seq=10),  # 4: wrong ack below -> unanswered
            pkt(50, s, c, 443, 5002, SYN | ACK, seq=9, ack=10),  # 5: ack = seq, not seq + 1
            pkt(60, c, s, 5003, 443, SYN | ACK, seq=1, ack=1),  # 6: a SYN-ACK from the client side
            pkt(70, c, s, 5004, 443, SYN, seq=1),  # 7: answered 3.5 s later: too late
            pkt(3570, s, c, 443, 5004, SYN | ACK, seq=1, ack=2),  # 8
            pkt(3600, c, "198.51.100.1", 5005, 80, SYN, seq=5),  # 9: retransmitted below
            pkt(3900, c, "198.51.100.1", 5005, 80, SYN, seq=5),  # 10: same key
            pkt(3950, "198.51.100.1", c, 80, 5005, SYN | ACK, seq=3, ack=6),  # 11: RTT 50 ms (latest SYN)
            pkt(3960, c, s, 5006, 443, RST, seq=1),  # 12: not a SYN
            pkt(9000, c, s, 5007, 443, SYN, seq=1, proto=17),  # 13: not TCP
        ]
    )
    rtts = check_handshakes(t, window_s=3.0)
    assert rtts[["synack_id", "syn_id"]].values.tolist() == [[2, 0], [3, 1], [11, 10]]
    assert rtts["rtt_s"].tolist() == pytest.approx([0.020, 0.025, 0.050])
    per = rtt_per_server(rtts)
    assert per[["server", "server_port", "handshakes"]].values.tolist() == [
        ["192.0.2.7", 443, 2],
        ["198.51.100.1", 80, 1],
    ]
    assert per.loc[0, "rtt_p50_s"] == pytest.approx(0.0225)
    run = run_join(HandshakeQuery(3.0), t)
    # Rows 4 and 7; row 9 is answered too (350 ms before the SYN-ACK of its retransmission).
    assert unanswered_syns(run, 3.0).values.tolist() == [["192.0.2.7", 2]]


def test_link_query_with_interfaces_and_address_ranges():
    t = records(
        [
            pkt(0, "10.0.0.1", "172.16.0.1", 1, 2, ACK, iface="eth0"),  # 0
            pkt(500, "10.0.0.1", "192.168.0.9", 1, 2, ACK, iface="eth1"),  # 1: 0.5 s after 0
            pkt(900, "10.0.0.2", "172.16.0.4", 1, 2, ACK, iface="eth0"),  # 2
            pkt(4000, "10.0.0.2", "192.168.1.1", 1, 2, ACK, iface="eth1"),  # 3: 3.1 s after 2
            pkt(4100, "10.0.0.1", "192.168.0.3", 1, 2, ACK, iface="eth1"),  # 4: 4.1 s after 0
            pkt(4200, "10.0.0.1", "172.16.9.9", 1, 2, ACK, iface="eth0"),  # 5: 0.1 s after 4
        ]
    )
    by_iface = run_join(LinkQuery("iface=eth0", "iface=eth1", window_s=3.0), t).results
    assert by_iface[["left_id", "right_id", "key"]].values.tolist() == [
        [0, 1, "10.0.0.1"],
        [5, 4, "10.0.0.1"],
    ]
    by_range = run_join(LinkQuery("dst_ip=172.16.0.0/12", "dst_ip=192.168.0.0/16", window_s=3.2), t).results
    assert by_range[["left_id", "right_id"]].values.tolist() == [[0, 1], [2, 3], [5, 4]]
    m = link_matches(by_range)
    assert m[["key", "matches", "left_tuples", "right_tuples"]].values.tolist() == [
        ["10.0.0.1", 2, 2, 2],
        ["10.0.0.2", 1, 1, 1],
    ]
    # A different key per side: the client's packets against the packets sent to the client.
    two_way = LinkQuery("iface=eth0", "iface=eth1", 10.0, key="src_ip", right_key="src_ip,src_port")
    assert two_way.sides(t)[1].keys.tolist()[0] == "10.0.0.1,1"
    with pytest.raises(ValueError, match="window_s"):
        LinkQuery("iface=a", "iface=b", window_s=-1)
    with pytest.raises(ValueError):
        LinkQuery("iface=", "iface=b")


def test_shedding_on_a_query_keeps_a_subset():
    rng = np.random.default_rng(1)
    n = 3000
    t = records(
        [
            pkt(
                int(ms),
                f"10.0.0.{rng.integers(0, 30)}",
                "192.0.2.1",
                1,
                2,
                ACK,
                iface=str(rng.integers(0, 2)),
            )
            for ms in np.sort(rng.integers(0, 30_000, n))
        ]
    )
    q = LinkQuery("iface=0", "iface=1", window_s=1.0)
    full = run_join(q, t)
    for strategy in ("cf", "inp", "pni"):
        shed = run_join(q, t, shedder=make_shedder(strategy, x_left=0.5, x_right=0.5, seed=2))
        got = set(zip(shed.results["left_id"], shed.results["right_id"], strict=True))
        assert got < set(zip(full.results["left_id"], full.results["right_id"], strict=True))
    budget = 0.3 * full.total.cost(1e-6, 1e-6)  # a third of the unshed cost at C_u = C_p = 1 µs
    run, model = analyze_join(q, t, strategy="pni", budget=budget, cu_s=1e-6, cp_s=1e-6, seed=1)
    assert model is not None
    x = model.optimum("pni", budget)
    assert run.total.strategy == "pni"
    assert (run.total.x_left, run.total.x_right) == (x.x_left, x.x_right)
    assert max(x.x_left, x.x_right) < 1
    assert run.total.cost(1e-6, 1e-6) == pytest.approx(budget, rel=0.15)
    with pytest.raises(ValueError, match="budget"):
        analyze_join(q, t, strategy="pni", budget=1e-3, x_left=0.5)
    with pytest.raises(ValueError, match="strategy"):
        make_shedder("random")


# -- generated and real captures -------------------------------------------------------------------
def read(path: Path) -> pa.Table:
    from ingest import read_records

    return pa.Table.from_batches(list(read_records(path)), schema=ARROW_SCHEMA)


def test_handshake_on_a_generated_syn_flood(tmp_path):
    gen = pytest.importorskip("ingest.generate")
    summary = gen.generate(tmp_path / "flood.pcap", scenario="syn-flood", packets=4000, seed=3, duration_s=20)
    table = read(tmp_path / "flood.pcap")
    rtts = check_handshakes(table, 3.0)
    assert len(rtts) > 20
    # The generator gives each server one fixed RTT.
    per = rtt_per_server(rtts)
    assert np.allclose(per["rtt_min_s"], per["rtt_max_s"])
    # The flood's victim tops the unanswered SYNs.
    un = unanswered_syns(run_join(HandshakeQuery(3.0), table), 3.0)
    assert un.loc[0, "server"] == summary.details["victim"]
    assert un.loc[0, "syns"] >= 0.9 * summary.details["attack_packets"]


@pytest.mark.parametrize("name", ["echo-connections.pcap.gz", "http-bro.org.pcap"])
def test_handshake_rtts_on_real_captures(captures_dir, name):
    table = read(captures_dir / name)
    rtts = check_handshakes(table, 3.0)
    assert len(rtts) > 10


def test_cli_analyze_join(captures_dir):
    path = str(captures_dir / "http-bro.org.pcap")
    runner = CliRunner()
    result = runner.invoke(cli, ["analyze", "join", path, "--query", "handshake"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    expected, _ = brute_force_handshakes(read(captures_dir / "http-bro.org.pcap"), 3.0)
    assert sorted(x["right_id"] for x in lines) == sorted(expected)
    assert all(x["rtt_s"] == pytest.approx(expected[x["right_id"]], abs=1e-9) for x in lines)
    stats = json.loads(result.stderr.splitlines()[-1])
    assert stats["results"] == len(lines)
    table = runner.invoke(cli, ["analyze", "join", path, "--query", "handshake", "--format", "table"])
    assert "192.150.187.43" in table.stdout and "Handshake RTT per server" in table.stdout
    link = runner.invoke(
        cli,
        [
            "analyze", "join", path, "--query", "link", "--left", "dst_ip=192.150.187.43", "--right",
            "src_ip=192.150.187.43", "--right-key", "dst_ip", "--window", "500ms", "--strategy", "pni",
            "--x-left", "0.5", "--x-right", "1", "--format", "table",
        ],
    )  # fmt: skip
    assert link.exit_code == 0, link.output
    assert "10.0.2.15" in link.stdout
    bad = runner.invoke(cli, ["analyze", "join", path, "--query", "link"])
    assert bad.exit_code != 0 and "--left" in bad.output
    both = runner.invoke(
        cli, ["analyze", "join", path, "--query", "handshake", "--budget", "1", "--x-left", "1"]
    )
    assert both.exit_code != 0
