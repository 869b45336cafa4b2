"""``bench.coverage``: the exact answers of what a ladder run read, and each row checked against them.

The numpy oracles are compared with brute force (a Python loop per record, keys by
``analytics.keys.key_text``) on random small tables, and with analytics' exact twins
(``ExactSlidingTopK``, ``ExactSlidingDistinct``) on a generated capture; the late rule with the
pipeline's own decoder; the row checks on rows just inside and just outside their intervals; and a
short managed ladder on a real broker and Spark reports coverage figures that hold.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analytics.distinct import ExactSlidingDistinct
from analytics.keys import key_text
from analytics.topk import ExactSlidingTopK
from bench.coverage import (
    _combine,
    check_distinct,
    check_topk,
    check_traffic,
    consumed_offsets,
    distinct_truth,
    format_coverage,
    records_of_table,
    topk_truth,
    traffic_truth,
)
from ingest.wire import encode_messages
from netmon.config import DistinctQuery, TopKQuery
from netmon.records import ARROW_SCHEMA
from pipeline.partials import decode_messages

FIELDS = ["proto", "wire_len", "src_ip", "dst_ip", "src_port", "dst_port"]
BASE_NS = 1_700_000_000 * 10**9
S_US = 1_000_000

_IPS = ["10.0.0.1", "10.0.0.2", "192.0.2.7", "2001:db8::1", ""]


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    """Up to 80 records over 12 s: a few hosts (an empty one, IPv6), ports and protocols, nulls."""
    n = draw(st.integers(0, 80))

    def column(values: list[object]) -> list[object]:
        return [draw(st.sampled_from(values)) for _ in range(n)]

    return _table(
        ts=[BASE_NS + draw(st.integers(0, 12 * 10**9 - 1)) for _ in range(n)],
        proto=column([0, 6, 17, 1, None]),  # 0 (HOPOPT) beside no protocol
        wire_len=column([60, 1500, 9000, None]),
        src_ip=column([*_IPS, None]),
        dst_ip=column([*_IPS[:3], None]),
        src_port=column([1024, 5353, None]),
        dst_port=column([0, 80, 443, None]),
    )


def _table(**columns: list[object]) -> pa.Table:
    types = {f.name: f.type for f in ARROW_SCHEMA}
    types["ts"] = pa.int64()
    return pa.table({name: pa.array(values, types[name]) for name, values in columns.items()})


def _us(table: pa.Table) -> list[int]:
    return [t // 1000 for t in table.column("ts").cast(pa.int64()).to_pylist()]


# ---------------------------------------------------------------------------------------------
# the oracles against brute force


@settings(max_examples=150, deadline=None)
@given(tables(), st.sampled_from([S_US, 2 * S_US, 3_000_000]))
def test_traffic_truth_is_the_count_per_window_and_protocol(table: pa.Table, window_us: int) -> None:
    consumed = records_of_table(table, FIELDS)
    ts, protos = _us(table), table.column("proto").to_pylist()
    brute = Counter((t // window_us * window_us, p) for t, p in zip(ts, protos, strict=True))
    asked = [*brute, (BASE_NS // 1000, 99), (BASE_NS // 1000 + 60 * S_US, 6)]  # and two no record has
    got = traffic_truth(consumed, window_us, np.array([s for s, _ in asked], np.int64), [p for _, p in asked])
    assert got.tolist() == [brute[a] for a in asked]


@settings(max_examples=150, deadline=None)
@given(
    tables(),
    st.sampled_from(["src_ip", "src_ip,dst_ip", "proto,dst_port", "dst_ip,src_port,proto"]),
    st.sampled_from(["packets", "bytes"]),
    st.sampled_from([(S_US, 1), (S_US, 3), (2 * S_US, 2)]),
)
def test_topk_truth_is_the_keys_count_over_the_window_it_held(
    table: pa.Table, key: str, weight: str, window: tuple[int, int]
) -> None:
    b_us, n_sub = window
    consumed = records_of_table(table, FIELDS)
    ts = _us(table)
    keys = key_text(table, key.split(",")).to_pylist()
    sizes = table.column("wire_len").to_pylist()
    ends = sorted({t // b_us * b_us + b_us for t in ts} | {BASE_NS // 1000 + 20 * S_US})
    asked = [(end, k, held) for end in ends for k in {*keys, "10.9.9.9", "6,1"} for held in (n_sub, 1)]

    def brute(end: int, k: str | None, held: int) -> int:
        inside = [
            i for i, t in enumerate(ts) if end - held * b_us <= t < end and keys[i] == k and k is not None
        ]
        return sum(1 if weight == "packets" else (sizes[i] or 0) for i in inside)

    got = topk_truth(
        consumed,
        key,
        weight,
        b_us,
        np.array([e for e, _, _ in asked], np.int64),
        np.array([h * b_us for _, _, h in asked], np.int64),
        [k for _, k, _ in asked],
    )
    assert got.tolist() == [brute(*a) for a in asked]


@settings(max_examples=150, deadline=None)
@given(
    tables(),
    st.sampled_from(
        [
            ("src_ip", "dst_ip"),
            ("dst_port", "src_ip"),
            ("src_ip,dst_ip,src_port,dst_port,proto", "proto"),
            ("dst_ip", ""),
        ]
    ),
    st.sampled_from([(S_US, 1), (S_US, 4), (2 * S_US, 3)]),
)
def test_distinct_truth_is_the_groups_distinct_items_over_the_window(
    table: pa.Table, query: tuple[str, str], window: tuple[int, int]
) -> None:
    count, group_by = query
    b_us, width = window
    consumed = records_of_table(table, FIELDS)
    ts = _us(table)
    items = key_text(table, count.split(",")).to_pylist()
    groups = key_text(table, group_by.split(",")).to_pylist() if group_by else [""] * table.num_rows
    ends = sorted({t // b_us * b_us + b_us for t in ts} | {BASE_NS // 1000 + 30 * S_US})
    asked = [(end, g) for end in ends for g in {*groups, "10.9.9.9"} if g is not None]

    def brute(end: int, g: str) -> int:
        return len(
            {
                items[i]
                for i, t in enumerate(ts)
                if end - width * b_us <= t < end and groups[i] == g and items[i]  # null and "" count nothing
            }
        )

    got = distinct_truth(
        consumed,
        count,
        group_by,
        b_us,
        width,
        np.array([e for e, _ in asked], np.int64),
        [g for _, g in asked],
    )
    assert got.tolist() == [brute(*a) for a in asked]


def test_the_oracles_agree_with_analytics_exact_twins(tmp_path: Path) -> None:
    """On a generated ddos capture, sub-window by sub-window: ``ExactSlidingTopK.estimate`` and
    ``ExactSlidingDistinct.estimate`` over the same records give the numpy oracles' answers."""
    from ingest import read_records
    from ingest.generate import generate

    generate(tmp_path / "c.pcap", scenario="ddos", packets=6000, duration_s=20.0)
    table = pa.Table.from_batches(list(read_records(tmp_path / "c.pcap")), schema=ARROW_SCHEMA)
    consumed = records_of_table(table, FIELDS)
    ts = _us(table)
    pairs = key_text(table, ("src_ip", "dst_ip")).to_pylist()
    sources, victims = key_text(table, ("src_ip",)).to_pylist(), key_text(table, ("dst_ip",)).to_pylist()
    subs = sorted({t // S_US for t in ts})
    topk = ExactSlidingTopK(10 * S_US * 1000, S_US * 1000, 3, time_based=True)
    distinct = ExactSlidingDistinct(N=5, b=1)
    heavy = [k for k, _ in Counter(pairs).most_common(4)]
    groups = [g for g, _ in Counter(victims).most_common(3)]
    want_topk, want_distinct = [], []
    for sw in range(subs[0], subs[-1] + 1):
        mine = [i for i, t in enumerate(ts) if t // S_US == sw]
        topk.add_subwindow(Counter(pairs[i] for i in mine if pairs[i] is not None), sw)
        want_topk += [(sw, k, topk.estimate(k)) for k in heavy]
        for i in mine:
            if victims[i] is not None and sources[i] is not None:
                distinct.update(sources[i], group=victims[i])
        counts = distinct.slide().estimate()
        want_distinct += [(sw, g, counts.get(g, 0)) for g in groups]
    ends = np.array([(sw + 1) * S_US for sw, _, _ in want_topk], np.int64)
    got = topk_truth(
        consumed,
        "src_ip,dst_ip",
        "packets",
        S_US,
        ends,
        np.full(len(ends), 10 * S_US),
        [k for _, k, _ in want_topk],
    )
    assert got.tolist() == [c for _, _, c in want_topk]
    assert max(got) > 50  # the attack's pairs are there
    ends = np.array([(sw + 1) * S_US for sw, _, _ in want_distinct], np.int64)
    got = distinct_truth(consumed, "src_ip", "dst_ip", S_US, 5, ends, [g for _, g, _ in want_distinct])
    assert got.tolist() == [c for _, _, c in want_distinct]
    assert max(got) > 100  # the victim's many sources


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20 * 10**9), min_size=1, max_size=60), st.integers(1, 25))
@example(
    [10 * 10**9, 5 * 10**9, 5 * 10**9 - 1, 10**9], 2
)  # the delay exactly behind: not late; 1 ns more: late
def test_the_late_rule_is_the_pipeline_decoders(offsets_ns: list[int], per_message: int) -> None:
    """Records out of order in one partition: the read-back drops as late exactly the records
    ``pipeline.partials.decode_messages`` drops, whatever the messages' sizes."""
    n = len(offsets_ns)
    table = _table(
        ts=[BASE_NS + x for x in offsets_ns],
        proto=[6] * n,
        wire_len=[60] * n,
        src_ip=["10.0.0.1"] * n,
        dst_ip=["10.0.0.2"] * n,
        src_port=[1] * n,
        dst_port=[2] * n,
    )
    delay = 5 * 10**9
    consumed = records_of_table(table, FIELDS, delay_ns=delay)
    full = pa.table(
        {
            f.name: table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
            for f in ARROW_SCHEMA
        }
    )
    values = [v for batch in full.to_batches() for v, _ in encode_messages(batch, per_message)]
    messages = pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "known": pa.array([True] * len(values)),
            "control": pa.array([None] * len(values), pa.string()),
            "horizon_ns": pa.array([None] * len(values), pa.int64()),
        }
    )
    rows, totals, _ = decode_messages(messages, delay_ns=delay)
    assert consumed.late == totals["late"]
    if offsets_ns == [10 * 10**9, 5 * 10**9, 5 * 10**9 - 1, 10**9]:
        assert consumed.late == 2
    assert consumed.records == n
    got = sorted(consumed.ts_us.tolist())
    assert got == sorted(rows.column("ts").cast(pa.int64()).to_pylist())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 3)), min_size=1, max_size=40
    )
)
def test_combine_codes_are_equal_exactly_when_the_tuples_are(rows: list[tuple[int, int, int]]) -> None:
    """Past 62 bits (2^40 · 2^40) the code so far is renumbered, never wrapped."""
    columns = [np.array([r[i] for r in rows], np.int64) for i in range(3)]
    codes = _combine(columns).tolist()
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j])


# ---------------------------------------------------------------------------------------------
# the row checks


def _small() -> tuple[pa.Table, object]:
    """Six packets of one key in one second, three of another, and a UDP one."""
    ts = [BASE_NS + i * 10**8 for i in range(10)]
    table = _table(
        ts=ts,
        proto=[6] * 9 + [17],
        wire_len=[100] * 10,
        src_ip=["10.0.0.1"] * 6 + ["10.0.0.2"] * 4,
        dst_ip=["192.0.2.7"] * 10,
        src_port=[1024 + i for i in range(10)],
        dst_port=[80] * 10,
    )
    return table, records_of_table(table, FIELDS)


def _ts(us: list[int]) -> pa.Array:
    return pa.array(us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def test_traffic_rows_just_outside_their_interval_or_off_by_one_are_misses() -> None:
    _, consumed = _small()
    start = BASE_NS // 1000
    rows = pa.table(
        {
            "window_start": _ts([start] * 6),
            "proto": pa.array([6, 6, 6, 6, 17, 17], pa.int16()),
            "packets": [9, 9, 9, 9, 1, 2],
            "keep": [0.5, 0.5, 0.5, 0.5, 1.0, 1.0],
            # truth 9: inside at both ends, then just above, just below
            "packets_low": [9, 2, 10, 2, 1, 2],
            "packets_high": [20, 9, 20, 8, 1, 2],
        }
    )
    got = check_traffic(rows, consumed, 1.0)
    assert got["approximate"] == {"rows": 4, "covered": 2, "share": 0.5}
    assert got["exact"] == {"rows": 2, "covered": 1, "share": 0.5, "equal": 1}  # 2 packets claimed, 1 true
    assert got["rows"] == 6 and got["covered"] == 3 and got["share"] == 0.5
    assert {(m["low"], m["high"], m["truth"]) for m in got["miss_examples"]} == {
        (10, 20, 9),
        (2, 8, 9),
        (2, 2, 1),
    }


def test_topk_rows_sampled_by_their_interval_exact_by_algorithm_6s_bound() -> None:
    _, consumed = _small()
    end = BASE_NS // 1000 + S_US
    queries = [
        TopKQuery(name="src", key="src_ip", window_s=1.0),
        TopKQuery(name="b", key="dst_ip", weight="bytes"),
    ]
    rows = pa.table(
        {
            "query": ["src"] * 7 + ["b", "src"],
            "window_end": _ts([end] * 9),
            "delta": [2, 2, 2, 2, 2, 2, 2, 0, 2],
            "rank": [1] * 9,
            "key": ["10.0.0.1"] * 6 + ["10.0.0.2", "192.0.2.7", None],
            "count": [6, 7, 4, 3, 6, 6, 4, 1000, None],
            "keep": [1.0, 1.0, 1.0, 1.0, 0.25, 0.25, 0.25, 0.5, 1.0],
            "count_low": [6, 7, 4, 3, 6, 7, 1, None, None],
            "count_high": [6, 7, 4, 3, 6, 9, 3, None, None],
            "window_s": [1.0] * 9,
        }
    )
    got = check_topk(rows, consumed, queries)
    # exact (truth 6, delta 2): 6 and 4 are within [count, count + delta]; 7 is above the
    # truth (a false count), 3 is more than delta below it
    assert got["exact"] == {"rows": 4, "covered": 2, "share": 0.5, "equal": 1}
    # sampled: [6, 6] holds 6, [7, 9] misses it by one, [1, 3] misses the other key's 4
    assert got["approximate"] == {"rows": 3, "covered": 1, "share": round(1 / 3, 4)}
    assert got["unchecked"] == 1  # the bytes query's sampled row has no interval; rank-0 rows no value
    assert {(m["key"], m["value"], m["truth"]) for m in got["miss_examples"]} == {
        ("10.0.0.1", 7, 6),
        ("10.0.0.1", 3, 6),
        ("10.0.0.2", 4, 4),
        ("10.0.0.1", 6, 6),
    }


def test_distinct_rows_approximate_by_their_interval_exact_by_their_count() -> None:
    _, consumed = _small()
    end = BASE_NS // 1000 + S_US
    queries = [
        DistinctQuery(name="ports", count="src_port", group_by="src_ip", window_s=1.0, sub_window_s=1.0)
    ]
    rows = pa.table(
        {
            "query": ["ports"] * 5,
            "window_end": _ts([end] * 5),
            "group": ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.1"],
            "distinct": [6, 7, 4, 4, 6],
            "rank": [1, 1, 2, 2, 1],
            "keep": [1.0, 1.0, 1.0, 0.5, 0.5],
            # truths 6 and 4: exact 6 (covered), exact 7 (off by one), the HLL's interval
            # [3, 5] (covered), sampled [5, 9] just above 4, sampled [6, 9] holding 6
            "distinct_low": [6, 7, 3, 5, 6],
            "distinct_high": [6, 7, 5, 9, 9],
        }
    )
    got = check_distinct(rows, consumed, queries)
    assert got["exact"] == {"rows": 2, "covered": 1, "share": 0.5, "equal": 1}
    assert got["approximate"] == {"rows": 3, "covered": 2, "share": round(2 / 3, 4)}
    assert [(m["value"], m["truth"]) for m in got["miss_examples"]] == [(7, 6), (4, 4)]


def test_the_report_says_each_kinds_share_and_whether_it_holds() -> None:
    def kind(covered: int, rows: int) -> dict[str, object]:
        return {
            "rows": rows,
            "covered": covered,
            "share": covered / rows,
            "approximate": {"rows": rows, "covered": covered, "share": covered / rows},
            "exact": {"rows": 0, "covered": 0, "share": None, "equal": 0},
            "unchecked": 0,
            "miss_examples": [],
        }

    result = {
        "target": 0.95,
        "records": 2_400_000,
        "messages": 2_400,
        "read_s": 12.0,
        "check_s": 3.0,
        "late": 0,
        "pipeline": {"records": 2_400_000, "late": {"decode": 0, "traffic": 0}},
        "kinds": {"traffic": kind(1234, 1250), "topk": kind(90, 100)},
    }
    lines = format_coverage(result)
    assert "2,400,000 records read back" in lines[0] and "the pipeline read 2,400,000" in lines[0]
    assert lines[1].strip().startswith("coverage traffic 1,234/1,250 (98.7 %), >= 95 %: yes")
    assert lines[2].strip().startswith("coverage topk 90/100 (90.0 %), >= 95 %: NO")


def test_consumed_offsets_are_the_last_batchs_end_offsets() -> None:
    progress = {"sources": [{"endOffset": '{"t": {"0": 120, "1": 98}, "other": {"0": 5}}'}]}
    assert consumed_offsets(SimpleNamespace(lastProgress=progress), "t") == {0: 120, 1: 98}
    assert consumed_offsets(SimpleNamespace(lastProgress=None), "t") is None
    assert consumed_offsets(SimpleNamespace(lastProgress=progress), "absent") is None


# ---------------------------------------------------------------------------------------------
# a short managed ladder, real broker and Spark


@pytest.mark.spark
@pytest.mark.kafka
def test_a_managed_rate_checks_its_rows_against_what_it_read(spark) -> None:
    """A ddos rate under a budget no batch meets, the floors at ½ (the query boxes and the intake
    box: ¼ together for top-k): every record produced is read back, the pipeline read as many,
    and most rows of every kind are covered. The bounds leave room for the binomial spread of
    ~100 rows under 95 % intervals (one run measured 97 % traffic, 90 % top-k, 100 % distinct);
    top-k's is lower, as docs/overload.md says why (a sampled list's winners are the lucky keys)."""
    from bench.pipeline import bench_pipeline, format_report

    result = bench_pipeline(
        scenarios=("ddos",),
        packets=2000,
        duration_s=10.0,
        rates=(2500,),
        seconds=30.0,
        spark=spark,
        warmup=False,
        baseline=False,
        manage=True,
        cpu_budget=0.001,
        resources={"keep_min": 0.5, "intake_min": 0.5},
    )
    (run,) = result["scenarios"]["ddos"]["rates"]
    assert run["intake_min"] == 0.5 and run["sample_keep_min"] == 0.5
    cov = run["coverage"]
    assert cov["records"] == run["produced"] == cov["pipeline"]["records"]
    assert cov["late"] == 0 and cov["malformed"] == 0
    kinds = cov["kinds"]
    assert kinds["traffic"]["approximate"]["rows"] >= 20
    assert kinds["topk"]["approximate"]["rows"] >= 20
    assert kinds["distinct"]["rows"] >= 100
    for name, bound in (("traffic", 0.85), ("topk", 0.8), ("distinct", 0.9)):
        assert kinds[name]["share"] >= bound, (name, kinds[name])
    text = "\n".join(format_report(result))
    assert "coverage traffic " in text and "coverage topk " in text and "coverage distinct " in text
