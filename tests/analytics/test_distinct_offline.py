"""Offline distinct-count queries: event-time conventions vs a record-level brute force, real and
generated traffic, the accuracy benchmark, and ``netmon analyze distinct``."""

from __future__ import annotations

import importlib
import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from analytics.distinct_bench import accuracy_report, hll_bound
from analytics.distinct_offline import (
    OfflineStats,
    distinct_reports,
    exact_oracle,
    iso_utc,
    parse_duration_ns,
    run_engine,
    seconds_to_ns,
)
from analytics.distinct_queries import QUERIES, DistinctQuery, get_query
from netmon.records import ARROW_SCHEMA

S = 10**9
T0 = 1_700_000_000 * S  # 2023-11-14T22:13:20Z, a whole multiple of every sub-window used here


def table(rows: list[dict]) -> pa.Table:
    """Records in :data:`ARROW_SCHEMA` (absent fields null) from dicts with ``ts`` in ns."""
    cols = {f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in ARROW_SCHEMA}
    return pa.table(cols, schema=ARROW_SCHEMA)


def key_of(row: dict, fields: tuple[str, ...]) -> str | None:
    vals = [row.get(f) for f in fields]
    return None if any(v is None for v in vals) else ",".join(str(v) for v in vals)


def exact_group(group: str, n: int) -> dict:
    """A report's entry for an exact count: its own interval."""
    return {"group": group, "distinct": n, "distinct_low": n, "distinct_high": n}


def brute_reports(rows, query: DistinctQuery, *, watermark_ns=0, full_windows=False, top=None):
    """Record-by-record reference of docs/distinct.md, from timestamps (no sub-window synopses)."""
    N, b = seconds_to_ns(query.window_s), seconds_to_ns(query.sub_window_s)
    closed_through, max_ts, first, kept, late = None, None, None, [], 0
    for r in rows:
        ts = r.get("ts")
        if ts is None:
            continue
        first = ts // b if first is None else first
        item, group = key_of(r, query.count), key_of(r, query.group_by) if query.group_by else ""
        if item is not None and group is not None:
            # Late: more than the watermark behind the newest timestamp before it (any record's).
            if max_ts is not None and ts < max_ts - watermark_ns:
                late += 1
            else:
                assert closed_through is None or ts // b > closed_through  # never in a closed one
                kept.append((ts, group, item))
        max_ts = ts if max_ts is None else max(max_ts, ts)
        closed_through = (max_ts - watermark_ns) // b - 1
    out = []
    if not kept:
        return out, late
    # Sub-windows still open at the end of the input are not closed.
    for i in range(min(ts for ts, _, _ in kept) // b, closed_through + 1):
        end = (i + 1) * b
        if full_windows and i - first + 1 < N // b:
            continue
        seen = defaultdict(set)
        for ts, g, it in kept:
            if end - N <= ts < end and it:
                seen[g].add(it)
        if seen:
            ranked = sorted(((g, len(s)) for g, s in seen.items()), key=lambda kv: (-kv[1], kv[0]))
            out.append({"end": iso_utc(end), "groups": [exact_group(g, n) for g, n in ranked[:top]]})
    return out, late


def offline(rows, query, batch_size=None, **kw):
    t = table(rows)
    batches = t.to_batches(max_chunksize=batch_size) if batch_size else [t]
    return [r.to_json() for r in distinct_reports(batches, query, exact=True, **kw)]


Q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=1)


# -- hand-derived conventions -------------------------------------------------------------------------


def test_window_boundaries_by_hand():
    # b = 1 s, N = 2 s. A packet at exactly k*b belongs to sub-window k. Windows [end-2s, end).
    rows = [
        {"ts": T0, "src_ip": "a", "dst_ip": "v"},
        {"ts": T0 + S - 1, "src_ip": "b", "dst_ip": "v"},
        {"ts": T0 + S, "src_ip": "c", "dst_ip": "v"},
        {"ts": T0 + 2 * S, "src_ip": "d", "dst_ip": "v"},
    ]
    got = offline(rows, Q)
    assert [(r["end"], r["groups"][0]["distinct"]) for r in got] == [
        ("2023-11-14T22:13:21Z", 2),  # [T0-1s, T0+1s): a, b
        ("2023-11-14T22:13:22Z", 3),  # [T0, T0+2s): a, b, c
    ]  # d's sub-window [T0+2s, T0+3s) is still open at the end of the input: not closed
    assert got == brute_reports(rows, Q)[0]


def test_empty_sub_windows_and_gaps_longer_than_the_window():
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=3, sub_window_s=1)
    rows = [
        {"ts": T0, "src_ip": "a", "dst_ip": "v"},
        {"ts": T0 + 5 * S + S // 2, "src_ip": "b", "dst_ip": "v"},
    ]
    got = offline(rows, q)
    # Windows ending T0+1..T0+3 hold a; T0+4 and T0+5 hold nothing (no report); b's stays open.
    assert [r["end"] for r in got] == [iso_utc(T0 + k * S) for k in (1, 2, 3)]
    assert got == brute_reports(rows, q)[0]
    # A 28-hour gap, then c, then d to close c's sub-window: no empty reports in between.
    far = rows + [{"ts": T0 + k * S, "src_ip": s, "dst_ip": "v"} for k, s in ((10**5, "c"), (10**5 + 1, "d"))]
    got = offline(far, q)
    # b (T0+5.5s) is in the windows ending T0+6..T0+8; c in the one ending T0+10**5+1.
    assert [r["end"] for r in got] == [iso_utc(T0 + k * S) for k in (1, 2, 3, 6, 7, 8, 10**5 + 1)]
    assert got[-1] == {"end": iso_utc(T0 + (10**5 + 1) * S), "groups": [exact_group("v", 1)]}
    assert got == brute_reports(far, q)[0]


def test_a_group_in_one_sub_window_is_reported_for_exactly_n_over_b_slides():
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=4, sub_window_s=1)
    rows = [{"ts": T0 + k * S, "src_ip": "s", "dst_ip": "busy"} for k in range(10)]
    rows.insert(3, {"ts": T0 + 3 * S + 7, "src_ip": "x", "dst_ip": "once"})
    got = offline(rows, q)
    assert sum(any(g["group"] == "once" for g in r["groups"]) for r in got) == 4
    assert got == brute_reports(rows, q)[0]


def test_ipv6_and_tuple_keys_and_null_fields():
    rows = []
    rng = random.Random(7)
    for k in range(400):
        v6 = rng.random() < 0.5
        src = f"2001:db8::{rng.randrange(60):x}" if v6 else f"10.0.0.{rng.randrange(60)}"
        dst = "2001:db8:ffff::1" if v6 else "192.0.2.1"
        icmp = rng.random() < 0.1
        rows.append(
            {
                "ts": T0 + k * S // 50,
                "src_ip": src,
                "dst_ip": dst,
                "proto": 1 if icmp else rng.choice([6, 17]),
                "src_port": None if icmp else rng.randrange(40000, 40100),
                "dst_port": None if icmp else rng.choice([53, 80, 443]),
            }
        )
    for name in QUERIES:
        q = QUERIES[name]
        q = DistinctQuery(name=name, count=q.count, group_by=q.group_by, window_s=2, sub_window_s=0.5)
        stats = OfflineStats()
        got = offline(rows, q, stats=stats)
        assert got == brute_reports(rows, q)[0], name
        if "dst_port" in q.count:  # ICMP has no ports: skipped, not counted
            assert stats.skipped == sum(r["proto"] == 1 for r in rows) > 0
    per_proto = get_query("flows-per-proto")
    flows = offline(
        rows, DistinctQuery(name="f", count=per_proto.count, group_by="proto", window_s=2, sub_window_s=0.5)
    )
    assert {g["group"] for r in flows for g in r["groups"]} == {"6", "17"}  # ICMP has no flows
    host_scan = DistinctQuery(name="h", count="dst_ip", group_by="src_ip", window_s=2, sub_window_s=0.5)
    assert any(g["group"].startswith("2001:db8::") for r in offline(rows, host_scan) for g in r["groups"])


def test_global_count_has_group_text_empty_and_top_orders_ties_by_text():
    q = DistinctQuery(name="g", count="src_ip", window_s=1, sub_window_s=1)
    rows = [
        {"ts": T0 + k, "src_ip": s, "dst_ip": d}
        for k, (s, d) in enumerate([("a", "z"), ("b", "z"), ("a", "y"), ("b", "y"), ("c", "x"), ("c", "w")])
    ]
    rows.append({"ts": T0 + S, "src_ip": None, "dst_ip": "z"})  # not counted, but closes the sub-window
    assert offline(rows, q) == [{"end": iso_utc(T0 + S), "groups": [exact_group("", 3)]}]
    q2 = DistinctQuery(name="g", count="src_ip", group_by="dst_ip", window_s=1, sub_window_s=1)
    assert [g["group"] for g in offline(rows, q2)[0]["groups"]] == ["y", "z", "w", "x"]
    assert [g["group"] for g in offline(rows, q2, top=3)[0]["groups"]] == ["y", "z", "w"]


def test_full_windows_waits_for_n_over_b_sub_windows_from_the_first_record():
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=3, sub_window_s=1)
    rows = [{"ts": T0 + k * S // 2, "src_ip": f"s{k}", "dst_ip": "v"} for k in range(12)]
    rows.insert(0, {"ts": T0 - S, "src_ip": None, "dst_ip": "v"})  # first record, not counted
    got = offline(rows, q, full_windows=True)
    assert got[0]["end"] == iso_utc(T0 + 2 * S)  # sub-windows T0-1s, T0, T0+1s have elapsed
    assert got == brute_reports(rows, q, full_windows=True)[0]


# -- generated streams against the brute force ----------------------------------------------------------


def random_rows(seed: int, n: int = 600, jitter_s: float = 0.0):
    rng = random.Random(seed)
    rows, t = [], T0
    for _ in range(n):
        t += int(rng.expovariate(1 / (S / 40))) if rng.random() > 0.01 else 3 * S  # some gaps
        ts = t - int(rng.random() * jitter_s * S) if jitter_s else t
        if rng.random() < 0.02:
            ts = t - (ts % (S // 2)) if rng.random() < 0.5 else t + (S // 2 - t % (S // 2))  # on a boundary
        rows.append(
            {
                "ts": ts,
                "src_ip": rng.choice(
                    [f"10.0.0.{rng.randrange(30)}", f"2001:db8::{rng.randrange(30):x}", None]
                ),
                "dst_ip": rng.choice(["192.0.2.1", "192.0.2.2", "2001:db8::53"]),
            }
        )
    return rows


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("batch_size", [None, 1, 37])
def test_random_streams_equal_brute_force_for_any_batching(seed, batch_size):
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    rows = random_rows(seed)
    want, _ = brute_reports(rows, q)
    assert offline(rows, q, batch_size) == want
    t = table(rows)
    oracle = [
        r.to_json() for r in run_engine(exact_oracle(q), t.to_batches(max_chunksize=batch_size or 10**5), q)
    ]
    assert oracle == want


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("watermark_s", [0, 0.3, 2])
def test_out_of_order_records_watermark_and_late_counts(seed, watermark_s):
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    rows = random_rows(seed, jitter_s=1.0)
    want, late = brute_reports(rows, q, watermark_ns=seconds_to_ns(watermark_s) if watermark_s else 0)
    stats = OfflineStats()
    got = offline(rows, q, 53, watermark_ns=seconds_to_ns(watermark_s) if watermark_s else 0, stats=stats)
    assert got == want and stats.late == late
    if watermark_s == 0:
        assert late > 0  # the jitter does make late records
    if watermark_s == 2:
        assert late == 0  # jitter (< 1 s) is within the watermark


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("watermark_s", "close_s"), [(0, 0), (0, 0.7), (0.3, 1), (2, 5)])
def test_closing_at_the_end_is_a_keyless_record_past_the_last_one(seed, watermark_s, close_s):
    # The pipeline at the end of a replay: a watermark message watermark + close past the last
    # record; offline, a record without a key at that time, or close_after_ns.
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    rows = random_rows(seed, jitter_s=0.5)
    wm = seconds_to_ns(watermark_s) if watermark_s else 0
    close = seconds_to_ns(close_s) if close_s else 0
    last = max(r["ts"] for r in rows if r.get("ts") is not None)
    want, _ = brute_reports([*rows, {"ts": last + wm + close}], q, watermark_ns=wm)
    got = offline(rows, q, 37, watermark_ns=wm, close_after_ns=close)
    assert got == want
    kept_open = offline(rows, q, 37, watermark_ns=wm)
    assert got[: len(kept_open)] == kept_open
    # With no watermark delay the jittered tail is late (behind the newest timestamp): closing
    # the sub-windows past it may add nothing; with a delay it holds records, and reports.
    assert len(got) > len(kept_open) or wm == 0


def jump_rows(seed: int, n: int = 3000) -> list[dict]:
    """:func:`random_rows` with disorder up to 2 s, some records without a timestamp, and one
    large backward jump: from the middle on, the traffic is 45 s earlier (it repeats)."""
    rows = random_rows(seed, n, jitter_s=2.0)
    rng = random.Random(seed)
    for i, r in enumerate(rows):
        if i >= n // 2:
            r["ts"] -= 45 * S
        if rng.random() < 0.01:
            r["ts"] = None
    return rows


@pytest.mark.parametrize("seed", range(2))
def test_late_is_more_than_the_watermark_behind_the_newest_time(seed):
    # Faults issue, item 12: one meaning of late, offline as in the pipeline, whatever the
    # batches: a record more than the watermark behind the newest timestamp before it is late
    # (brute_reports, record by record). The former rule (late: its sub-window already closed)
    # kept records up to a sub-window further behind.
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    rows = jump_rows(seed)
    last = max(r["ts"] for r in rows if r["ts"] is not None)
    for watermark_s in (0, 0.3, 2, 5, 60):
        wm = seconds_to_ns(watermark_s) if watermark_s else 0
        for close in (None, S):
            tail = [] if close is None else [{"ts": last + wm + close}]  # where finish() moves time
            want, late = brute_reports([*rows, *tail], q, watermark_ns=wm)
            for batch_size in (None, 3, 53):
                stats = OfflineStats()
                got = offline(rows, q, batch_size, watermark_ns=wm, close_after_ns=close, stats=stats)
                assert got == want, (watermark_s, close, batch_size)
                assert stats.late == late, (watermark_s, close, batch_size)
        # The jump makes records late unless the delay covers it.
        assert (late > 100) == (watermark_s < 45) and (late == 0) == (watermark_s >= 45), watermark_s
        assert len(want) > 50


def test_hll_mode_reports_the_same_windows_and_is_exact_for_small_counts():
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    rows = random_rows(11, 1500)
    t = table(rows)
    exact = [r.to_json() for r in distinct_reports([t], q, exact=True)]
    hll = [r.to_json() for r in distinct_reports([t], q, lg_k=12)]
    assert max(g["distinct"] for r in exact for g in r["groups"]) <= 2**12 // 16  # coupon mode
    assert hll == exact


# -- real and generated captures -------------------------------------------------------------------


def read_records_or_skip():
    try:
        return importlib.import_module("ingest").read_records
    except (ImportError, AttributeError):
        pytest.skip("the capture reader ingest.read_records is not available")


def rows_of(batches, columns) -> list[dict]:
    """Plain dicts (``ts`` as int ns) of the columns a query reads, for the brute force."""
    rows = []
    for b in batches:
        cols = {c: b.column(c).to_pylist() for c in columns if c != "ts"}
        cols["ts"] = pa.compute.cast(b.column("ts"), pa.int64()).to_pylist()
        rows += [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
    return rows


def with_window(q: DistinctQuery, window_s: float, sub_window_s: float) -> DistinctQuery:
    return DistinctQuery(
        name=q.name, count=q.count, group_by=q.group_by, window_s=window_s, sub_window_s=sub_window_s
    )


@pytest.fixture(scope="module")
def echo_batches(captures_dir):
    path = captures_dir / "echo-connections.pcap.gz"
    if not path.exists():
        pytest.skip(f"{path.name} not in the shared captures")
    return list(read_records_or_skip()(path))


@pytest.mark.parametrize("name", ["flows", "port-scan", "flows-per-proto"])
def test_real_capture_exact_mode_equals_brute_force(echo_batches, name):
    q = with_window(get_query(name), 2, 0.1)
    rows = rows_of(echo_batches, ("ts", *q.count, *q.group_by))
    want, late = brute_reports(rows, q, top=20)
    stats = OfflineStats()
    got = [r.to_json() for r in distinct_reports(echo_batches, q, exact=True, top=20, stats=stats)]
    assert got == want and stats.late == late
    assert stats.records == 82_582 and len(got) > 50


def test_real_capture_hll_accuracy(echo_batches):
    # echo-connections: ~800-1300 distinct 5-tuples per 2 s window, 66 windows.
    report = accuracy_report(echo_batches, with_window(get_query("flows"), 2, 0.1), lg_k=12)
    assert report["same_windows"] and report["pairs"] == report["reports"] > 50
    assert report["large"]["pairs"] > 40
    assert report["large"]["mean_rel_err"] <= 1.04 / 2**6
    assert report["large"]["within_bound"] >= 0.98
    assert report["small"]["exact_fraction"] in (None, 1.0)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    try:
        generate = importlib.import_module("ingest.generate").generate
    except (ImportError, AttributeError):
        pytest.skip("the sample generator ingest.generate is not available")
    read = read_records_or_skip()
    out = {}
    for scenario in ("ddos", "port-scan"):
        path = tmp_path_factory.mktemp("gen") / f"{scenario}.pcap"
        summary = generate(path, scenario=scenario, packets=60_000, seed=3, duration_s=30)
        out[scenario] = (summary.details, list(read(path)))
    return out


@pytest.mark.parametrize(
    ("scenario", "query", "who"), [("ddos", "ddos", "victim"), ("port-scan", "port-scan", "scanner")]
)
def test_generated_attacks_top_the_indicator_and_hll_is_accurate(scenarios, scenario, query, who):
    details, batches = scenarios[scenario]
    q = get_query(query)
    exact = [r.to_json() for r in distinct_reports(batches, q, exact=True, top=1)]
    peak = max(exact, key=lambda r: r["groups"][0]["distinct"])
    assert peak["groups"][0]["group"] == details[who]
    rep = accuracy_report(batches, q, lg_k=12)
    assert rep["same_windows"] and rep["large"]["pairs"] > 0
    assert rep["large"]["mean_rel_err"] <= 1.04 / 2**6
    assert rep["large"]["within_bound"] >= 0.98
    assert rep["small"]["exact_fraction"] == 1.0


def synthetic_attack(seed: int, kind: str) -> pa.Table:
    """Numpy-generated DDoS- or scan-like records (background plus one actor), 40 s, 30k rows."""
    rng = np.random.default_rng(seed)
    n = 30_000
    ts = np.sort(rng.integers(T0, T0 + 40 * S, n))
    src = np.array([f"10.1.{a}.{b}" for a, b in rng.integers(0, 64, (n, 2))], dtype=object)
    dst = np.array([f"203.0.113.{d % 40}" for d in rng.zipf(1.3, n)], dtype=object)
    port = rng.choice([53, 80, 443], n)
    attack = (ts >= T0 + 10 * S) & (ts < T0 + 30 * S) & (rng.random(n) < 0.5)
    k = int(attack.sum())
    if kind == "ddos":  # spoofed random sources to one victim
        src[attack] = [f"{a}.{b}.{c}.{d}" for a, b, c, d in rng.integers(1, 255, (k, 4))]
        dst[attack] = "198.51.100.7"
    else:  # one scanner sweeping ports of many hosts
        src[attack] = "198.51.100.200"
        dst[attack] = [f"10.9.{d // 256}.{d % 256}" for d in rng.integers(0, 8192, k)]
        port[attack] = rng.integers(1, 65536, k)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")),
            "src_ip": pa.array(src, pa.string()),
            "dst_ip": pa.array(dst, pa.string()),
            "dst_port": pa.array(port, pa.int32()),
        }
    )


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize(("kind", "query"), [("ddos", "ddos"), ("scan", "port-scan"), ("scan", "host-scan")])
def test_hll_accuracy_on_generated_attacks_several_seeds(seed, kind, query):
    t = synthetic_attack(seed, kind)
    rep = accuracy_report(t.to_batches(max_chunksize=8_000), get_query(query), lg_k=12)
    assert rep["same_windows"] and rep["counted"] == t.num_rows
    assert rep["large"]["pairs"] >= 10
    assert rep["large"]["mean_rel_err"] <= 1.04 / 2**6
    assert rep["large"]["within_bound"] >= 0.98
    assert rep["small"]["pairs"] > 100 and rep["small"]["exact_fraction"] == 1.0
    assert rep["bound"] == hll_bound(12) == 3 * 1.04 / 64
    assert rep["hll_updates_per_s"] > 0 and rep["exact_updates_per_s"] > 0


# -- the command ----------------------------------------------------------------------------------------


@pytest.fixture
def cli_rows(monkeypatch, tmp_path):
    """A fake capture file whose records come from :func:`random_rows` through a patched reader."""
    import ingest

    rows = random_rows(5, 800)
    monkeypatch.setattr(
        ingest, "read_records", lambda path, **kw: iter(table(rows).to_batches(100)), raising=False
    )
    path = tmp_path / "fake.pcap"
    path.write_bytes(b"not read")
    return rows, str(path)


def invoke(*args):
    from cli.main import cli

    return CliRunner().invoke(cli, ["analyze", "distinct", *args], env={"NETMON_CONFIG": None})


def test_cli_jsonl_equals_brute_force(cli_rows):
    rows, path = cli_rows
    res = invoke(
        path,
        "--count",
        "src_ip",
        "--group-by",
        "dst_ip",
        "--window",
        "2s",
        "--sub-window",
        "500ms",
        "--exact",
        "--top",
        "2",
    )
    assert res.exit_code == 0, res.output
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5)
    # By default the command closes what the pipeline closes at the end of a demo replay: its
    # watermark ends [pipeline] traffic_window_s (1 s) past the last record, as a keyless record
    # then would make it (brute force, watermark 0).
    last = max(r["ts"] for r in rows if r.get("ts") is not None)
    want, _ = brute_reports([*rows, {"ts": last + S}], q, top=2)
    assert res.stdout.splitlines() == [json.dumps(r) for r in want]
    kept = invoke(
        path, "--count", "src_ip", "--group-by", "dst_ip", "--window", "2s", "--sub-window", "500ms",
        "--exact", "--top", "2", "--keep-open",
    )  # fmt: skip
    want, _ = brute_reports(rows, q, top=2)
    assert kept.stdout.splitlines() == [json.dumps(r) for r in want]
    assert len(kept.stdout.splitlines()) < len(res.stdout.splitlines())


def test_cli_query_hll_table_and_global_count(cli_rows):
    rows, path = cli_rows
    res = invoke(
        path, "--query", "ddos", "--window", "2s", "--sub-window", "0.5s", "--format", "table", "--top", "0",
        "--keep-open",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["end", "rank", "distinct", "group"]
    want, _ = brute_reports(rows, with_window(get_query("ddos"), 2, 0.5))  # small counts: HLL is exact
    assert [ln.split() for ln in lines[1:]] == [
        [r["end"], str(rank), str(g["distinct"]), g["group"]]
        for r in want
        for rank, g in enumerate(r["groups"], 1)
    ]
    res = invoke(
        path, "--count", "src_ip", "--window", "1s", "--sub-window", "1s", "--lg-k", "10", "--keep-open"
    )
    want, _ = brute_reports(rows, DistinctQuery(name="g", count="src_ip", window_s=1, sub_window_s=1))
    assert [json.loads(ln) for ln in res.stdout.splitlines()] == want
    assert all(r["groups"][0]["group"] == "" for r in want)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--query", "ddos", "--count", "src_ip"], 2, "either --query NAME or --count KEY"),
        ([], 2, "either --query NAME or --count KEY"),
        (["--query", "ddos", "--group-by", "dst_ip"], 2, "--group-by goes with --count"),
        (["--count", "src_ip", "--exact", "--lg-k", "12"], 2, "--exact and --lg-k exclude each other"),
        (["--count", "src_ip", "--window", "ten"], 2, "window: cannot parse duration 'ten'"),
        (["--query", "nope"], 2, "--query: unknown query 'nope' (configured [[queries.distinct]]: "),
        (["--count", "src_ip", "--window", "3s", "--sub-window", "2s"], 1, "window_s: 3 is not a multiple"),
        (["--count", "src_ip", "--lg-k", "30"], 1, "lg_k: expected an integer in 4..21"),
        (["--count", "bogus"], 1, "key: unknown field 'bogus'"),
    ],
)
def test_cli_errors_are_one_line_and_name_the_option(cli_rows, args, code, message):
    _, path = cli_rows
    res = invoke(path, *args)
    assert res.exit_code == code
    assert message in res.output


def test_cli_reader_errors_and_missing_reader(monkeypatch, tmp_path):
    import sys
    import types

    import ingest

    path = tmp_path / "bad.pcap"
    path.write_bytes(b"x")

    def broken(p, **kw):
        raise ingest.CaptureError(f"{p}: byte 0: not a capture file")

    monkeypatch.setattr(ingest, "read_records", broken, raising=False)
    res = invoke(str(path), "--query", "ddos")
    assert res.exit_code == 1 and "byte 0: not a capture file" in res.output
    monkeypatch.setitem(sys.modules, "ingest", types.ModuleType("ingest"))
    res = invoke(str(path), "--query", "ddos")
    assert res.exit_code == 1 and "ingest.read_records) is not available" in res.output


def test_cli_on_the_real_capture_equals_the_library(echo_batches, captures_dir):
    res = invoke(
        str(captures_dir / "echo-connections.pcap.gz"),
        "--query",
        "flows",
        "--window",
        "2s",
        "--sub-window",
        "100ms",
    )
    assert res.exit_code == 0, res.output
    want = [
        json.dumps(r.to_json())
        for r in distinct_reports(
            echo_batches, with_window(get_query("flows"), 2, 0.1), top=20, close_after_ns=S
        )  # the command's default: closing 1 s ([pipeline] traffic_window_s) past the last record
    ]
    assert res.stdout.splitlines() == want


# -- helpers and validation --------------------------------------------------------------------------------


def test_parse_duration_and_seconds():
    assert [parse_duration_ns(x) for x in ("10s", "1.5m", "2h", "250ms", "40us", "7ns", "0.1", " 3 s")] == [
        10 * S,
        90 * S,
        7200 * S,
        S // 4,
        40_000,
        7,
        S // 10,
        3 * S,
    ]
    for bad in ("", "s", "-1s", "0s", "1.5ns", "10 sec", "1e3s"):
        with pytest.raises(ValueError, match="^window: "):
            parse_duration_ns(bad, name="window")
    assert seconds_to_ns(0.1) == S // 10 and seconds_to_ns(60) == 60 * S
    with pytest.raises(ValueError, match="^sub_window_s: "):
        seconds_to_ns(1e-10, name="sub_window_s")


def test_iso_utc_agrees_with_datetime():
    rng = random.Random(0)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for _ in range(200):
        us = rng.randrange(0, 2 * 10**15)
        if rng.random() < 0.3:
            us -= us % rng.choice([1000, 10**6])
        want = (epoch + timedelta(microseconds=us)).isoformat().replace("+00:00", "Z")
        if us % 10**6 and us % 1000 == 0:  # whole milliseconds: 3 digits, as analytics.topk writes
            want = want[:-4] + "Z"
        assert iso_utc(us * 1000) == want
    assert iso_utc(T0 + 1) == "2023-11-14T22:13:20.000000001Z"


def test_query_definitions_and_errors():
    assert set(QUERIES) == {"ddos", "port-scan", "host-scan", "flows", "flows-per-proto"}
    assert (get_query("ddos").count, get_query("ddos").group_by) == (("src_ip",), ("dst_ip",))
    assert (get_query("port-scan").count, get_query("port-scan").group_by) == (("dst_port",), ("src_ip",))
    assert (get_query("host-scan").count, get_query("host-scan").group_by) == (("dst_ip",), ("src_ip",))
    five = ("src_ip", "dst_ip", "proto", "src_port", "dst_port")
    assert (get_query("flows").count, get_query("flows").group_by) == (five, ())
    assert (get_query("flows-per-proto").count, get_query("flows-per-proto").group_by) == (five, ("proto",))
    with pytest.raises(ValueError, match=r"^query: unknown query 'x' \(one of: ddos, "):
        get_query("x")
    with pytest.raises(ValueError, match="^window_s: 2.5 is not a multiple of sub_window_s=1"):
        DistinctQuery(name="q", count="src_ip", window_s=2.5, sub_window_s=1)
    with pytest.raises(ValueError, match="^sub_window_s: expected a positive number"):
        DistinctQuery(name="q", count="src_ip", sub_window_s=0)
    with pytest.raises(ValueError, match="^key: unknown field 'ts'"):
        DistinctQuery(name="q", count="ts")
    with pytest.raises(ValueError, match="^name: empty"):
        DistinctQuery(name="", count="src_ip")


def test_run_option_errors():
    t = table([{"ts": T0, "src_ip": "a", "dst_ip": "b"}])
    with pytest.raises(ValueError, match="^top: expected a positive integer"):
        distinct_reports([t], Q, top=0)
    with pytest.raises(ValueError, match="^watermark_ns: expected a non-negative integer"):
        distinct_reports([t], Q, watermark_ns=-1)
    with pytest.raises(ValueError, match="^lg_k: "):
        distinct_reports([t], Q, lg_k=2)
    with pytest.raises(ValueError, match=r"^batches: missing column\(s\) dst_ip for query 't'"):
        list(distinct_reports([t.drop_columns(["dst_ip"])], Q))
