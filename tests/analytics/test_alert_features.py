"""The detection features against a brute-force oracle: plain loops over the records, every row compared."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from analytics.alert_features import FEATURE_COLUMNS, feature_rows
from ingest.generate import generate
from ingest.readers import read_records

S = 10**9


def oracle(records: list[dict[str, Any]], window_s: float, timeout_s: float) -> list[dict[str, Any]]:
    """Every src and dst row, from the definitions in the module docstring, one record at a time."""
    w_ns, t_ns = round(window_s * S), round(timeout_s * S)
    last = max(r["ts"] for r in records)
    replies: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # reversed 4-tuple -> (t, flags)
    for r in records:
        f = r["tcp_flags"] or 0
        if r["proto"] == 6 and ((f & 0x12) == 0x12 or f & 0x04):
            replies[(r["dst_ip"], r["src_ip"], r["dst_port"], r["src_port"])].append((r["ts"], f))
    packets: dict[tuple, int] = defaultdict(int)
    total: dict[int, int] = defaultdict(int)
    received: dict[tuple, int] = defaultdict(int)
    sources: dict[tuple, set] = defaultdict(set)
    attempts: dict[tuple, set] = defaultdict(set)
    failed: dict[tuple, set] = defaultdict(set)
    syn: dict[tuple, int] = defaultdict(int)
    half: dict[tuple, int] = defaultdict(int)
    half_src: dict[tuple, set] = defaultdict(set)
    for r in records:
        w = r["ts"] // w_ns
        src, dst = r["src_ip"], r["dst_ip"]
        total[w] += 1
        packets[(w, src)] += 1
        received[(w, dst)] += 1
        sources[(w, dst)].add(src)
        f = r["tcp_flags"] or 0
        if r["proto"] == 6 and (f & 0x12) == 0x02:
            answers = [
                fl
                for t, fl in replies.get((src, dst, r["src_port"], r["dst_port"]), [])
                if r["ts"] <= t <= r["ts"] + t_ns
            ]
            answered = any(fl & 0x02 for fl in answers)
            refused = bool(answers) and not answered
            if not answered and not refused and r["ts"] + t_ns > last:
                continue  # fate unknown at the end
            attempts[(w, src)].add((dst, r["dst_port"]))
            syn[(w, dst)] += 1
            if not answered:
                failed[(w, src)].add((dst, r["dst_port"]))
            if not answered and not refused:
                half[(w, dst)] += 1
                half_src[(w, dst)].add(src)
        if (r["proto"], r["icmp_type"]) in ((1, 3), (58, 1)):
            failed[(w, dst)].add((src, -1))
    out = []
    for (w, src), n in packets.items():
        fails = failed.get((w, src), set())
        per_host: dict[str, set] = defaultdict(set)
        per_port: dict[int, set] = defaultdict(set)
        for host, port in fails:
            per_host[host].add(port)
            per_port[port].add(host)
        vertical = max((len(p) for p in per_host.values()), default=0)
        horizontal = max((len(h) for h in per_port.values()), default=0)
        a = len(attempts.get((w, src), ()))
        out.append({
            "query": "src", "w": w, "subject": src, "packets": n, "total": total[w], "share": n / total[w],
            "attempts": a, "failed": len(fails), "fail_ratio": len(fails) / max(a, len(fails), 1),
            "vertical": vertical,
            "vertical_host": min((h for h, p in per_host.items() if len(p) == vertical), default=None),
            "horizontal": horizontal,
            "horizontal_port": min((q for q, h in per_port.items() if len(h) == horizontal), default=None),
        })  # fmt: skip
    for (w, dst), n in received.items():
        s = syn.get((w, dst), 0)
        out.append({
            "query": "dst", "w": w, "subject": dst, "packets": n, "sources": len(sources[(w, dst)]), "syn": s,
            "half_open": half.get((w, dst), 0), "half_open_sources": len(half_src.get((w, dst), ())),
            "half_open_ratio": half.get((w, dst), 0) / max(s, 1),
        })  # fmt: skip
    return out


def _records(table: pa.Table) -> list[dict[str, Any]]:
    t = table.set_column(0, "ts", table.column("ts").cast(pa.int64()))
    return t.to_pylist()


def _compare(rows: list[dict[str, Any]], expected: list[dict[str, Any]], window_s: float) -> None:
    from analytics.alert_features import _iso

    w_ns = round(window_s * S)
    want = {}
    for e in expected:
        e = dict(e)
        w = e.pop("w")
        e["window_start"], e["window_end"] = _iso(w * w_ns), _iso((w + 1) * w_ns)
        want[(e["query"], e["window_end"], e["subject"])] = e
    got = {(r["query"], r["window_end"], r["subject"]): r for r in rows}
    assert set(got) == set(want)
    for key, row in got.items():
        for column, value in want[key].items():
            if isinstance(value, float):
                assert row[column] == pytest.approx(value), (key, column)
            else:
                assert row[column] == value, (key, column)


def crafted() -> pa.Table:
    """A scan with every fate, a retransmitted SYN, an ICMP unreachable and a SYN too late to judge."""
    rows = [
        # t(s), src, dst, proto, sport, dport, flags, icmp_type
        (0.0, "6.6.6.6", "10.0.0.1", 6, 999, 22, 0x02, None),  # answered by SYN-ACK
        (0.1, "10.0.0.1", "6.6.6.6", 6, 22, 999, 0x12, None),
        (0.2, "6.6.6.6", "10.0.0.1", 6, 999, 23, 0x02, None),  # refused by RST/ACK
        (0.3, "10.0.0.1", "6.6.6.6", 6, 23, 999, 0x14, None),
        (0.4, "6.6.6.6", "10.0.0.1", 6, 999, 24, 0x02, None),  # unanswered
        (1.4, "6.6.6.6", "10.0.0.1", 6, 999, 24, 0x02, None),  # ... retransmitted: the same target
        (0.5, "6.6.6.6", "10.0.0.2", 6, 999, 24, 0x02, None),  # answered too late (after 2 s)
        (3.0, "10.0.0.2", "6.6.6.6", 6, 24, 999, 0x12, None),
        (1.0, "6.6.6.6", "10.0.0.3", 17, 999, 161, None, None),  # UDP probe ...
        (1.1, "10.0.0.9", "6.6.6.6", 1, None, None, None, 3),  # ... an ICMP unreachable from a router
        (6.0, "6.6.6.6", "10.0.0.4", 6, 999, 80, 0x02, None),  # second window: a SYN answered by SYN-ACK
        (6.5, "10.0.0.4", "6.6.6.6", 6, 80, 999, 0x12, None),
        (7.0, "6.6.6.6", "10.0.0.5", 6, 999, 80, 0x02, None),  # fate unknown at the end (timeout 2 s)
        (7.5, "10.0.0.7", "10.0.0.5", 6, 40000, 80, 0x10, None),
    ]
    rows.sort(key=lambda r: r[0])
    cols = list(zip(*rows, strict=True))
    return pa.table({
        "ts": pa.array([round(t * S) for t in cols[0]], pa.timestamp("ns", tz="UTC")),
        "src_ip": list(cols[1]), "dst_ip": list(cols[2]), "proto": pa.array(cols[3], pa.int16()),
        "src_port": pa.array(cols[4], pa.int32()), "dst_port": pa.array(cols[5], pa.int32()),
        "tcp_flags": pa.array(cols[6], pa.int16()), "icmp_type": pa.array(cols[7], pa.int16()),
    })  # fmt: skip


def test_crafted_fates_against_the_oracle_and_by_hand() -> None:
    table = crafted()
    rows = feature_rows([table], window_s=5, timeout_s=2, top=10**6)
    _compare(rows, oracle(_records(table), 5, 2), 5)
    scanner = next(
        r
        for r in rows
        if r["query"] == "src" and r["subject"] == "6.6.6.6" and r["window_end"].endswith("05Z")
    )
    # attempts 10.0.0.1:22, :23, :24, 10.0.0.2:24; failed :23 (RST), :24 (none), 10.0.0.2:24 (late), router
    assert (scanner["attempts"], scanner["failed"], scanner["vertical"], scanner["vertical_host"]) == (
        4,
        4,
        2,
        "10.0.0.1",
    )
    assert (scanner["horizontal"], scanner["horizontal_port"]) == (2, 24)
    late = next(r for r in rows if r["query"] == "dst" and r["subject"] == "10.0.0.5")
    assert (late["syn"], late["half_open"]) == (0, 0)  # its SYN's fate is not known yet


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    out = {}
    for scenario in ("baseline", "syn-flood", "port-scan", "ddos"):
        path = Path(tmp_path_factory.mktemp("features")) / f"{scenario}.pcap"
        generate(path, scenario=scenario, packets=6000, seed=7, duration_s=30)
        out[scenario] = pa.Table.from_batches(list(read_records(path, columns=list(FEATURE_COLUMNS))))
    return out


@pytest.mark.parametrize("scenario", ["baseline", "syn-flood", "port-scan", "ddos"])
@pytest.mark.parametrize(("window_s", "timeout_s"), [(5.0, 3.0), (2.0, 0.5)])
def test_generated_captures_against_the_oracle(
    scenarios: dict[str, pa.Table], scenario: str, window_s: float, timeout_s: float
) -> None:
    table = scenarios[scenario]
    rows = feature_rows([table], window_s=window_s, timeout_s=timeout_s, top=10**6)
    _compare(rows, oracle(_records(table), window_s, timeout_s), window_s)


def test_top_keeps_exactly_the_leaders_of_each_ranked_column(scenarios: dict[str, pa.Table]) -> None:
    table = scenarios["syn-flood"]
    every = feature_rows([table], top=10**6)
    cut = feature_rows([table], top=5)
    kept = {(r["query"], r["window_end"], r["subject"]) for r in cut}
    assert kept < {(r["query"], r["window_end"], r["subject"]) for r in every}
    for query, columns in (("src", ("failed", "packets")), ("dst", ("sources", "packets", "half_open"))):
        want = set()
        for end in {r["window_end"] for r in every}:
            group = [r for r in every if r["query"] == query and r["window_end"] == end]
            for column in columns:
                leaders = sorted(
                    (r for r in group if r[column] > 0), key=lambda r: (-r[column], r["subject"])
                )
                want |= {(query, end, r["subject"]) for r in leaders[:5]}
        assert {k for k in kept if k[0] == query} == want
