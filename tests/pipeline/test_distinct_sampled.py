"""The distinct kind behind drop boxes (issue 18 items 5–6), without Spark: a query samples its
*items* (every record of a kept item is kept), and each row says the fraction and its interval.

At one fraction x for the whole stream a window's count is the sketch of the kept items over x:
the rows must equal the offline engine run over the records of the kept items, times 1/x, and
the interval is the score interval at the ends of the sketch's own interval
(``analytics.distinct.hll_interval``). Unsampled, the rows carry the offline reports' intervals.
When the fraction changes, the windows spanning the change carry both fractions (seed 004's
adaptation delay) and their intervals still cover the exact answer.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from analytics.distinct import coupon_limit, hll_interval
from analytics.distinct_offline import distinct_reports
from analytics.hll_coupons import coupons
from analytics.sampling import count_interval
from netmon.config import DistinctQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query
from pipeline.partials import item_kept, merge_partials, partials_of

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NO_SPARK: Any = None  # stage 3 needs no session (SlidingDistinct.prepare)
WATERMARK_MS = 2000
QUERIES = [
    DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(name="flows", count="src_ip,dst_ip", group_by="", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(
        name="short", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5, lg_k=8, top=0
    ),
]
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us", tz="UTC")),
        ("is_control", pa.bool_()),
        ("src_ip", pa.string()),
        ("dst_ip", pa.string()),
    ]
)


def _packets(seed: int, seconds: int, n: int = 4000) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for ms in sorted(rng.sample(range(seconds * 1000), n)):
        dst = "192.0.2.7" if rng.random() < 0.4 else f"198.51.100.{rng.randrange(8)}"
        src = f"10.{rng.randrange(4)}.{rng.randrange(256)}.{rng.randrange(256)}"
        rows.append(
            {"ts": T0 + timedelta(milliseconds=ms), "is_control": False, "src_ip": src, "dst_ip": dst}
        )
    return rows


def _offline_rows(
    rows: list[dict], q: DistinctQuery, *, exact: bool = False
) -> dict[tuple[datetime, str], tuple[int, int, int]]:
    """``(distinct, distinct_low, distinct_high)`` per (window end, group), offline."""
    table = pa.table(
        {
            "ts": pa.array([r["ts"] for r in rows], pa.timestamp("ns", tz="UTC")),
            "src_ip": [r["src_ip"] for r in rows],
            "dst_ip": [r["dst_ip"] for r in rows],
        }
    )
    out = {}
    options = {"exact": True} if exact else {"lg_k": q.lg_k}
    for r in distinct_reports([table], offline_query(q), watermark_ns=WATERMARK_MS * 10**6, **options):
        end = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=r.end_ns // 1000)
        for (group, n), (low, high) in zip(r.groups, r.bounds, strict=True):
            out[(end, group)] = (n, low, high)
    return out


def _offline(rows: list[dict], q: DistinctQuery, *, exact: bool = False) -> dict[tuple[datetime, str], int]:
    return {key: n for key, (n, _, _) in _offline_rows(rows, q, exact=exact).items()}


def _item(r: dict, q: DistinctQuery) -> str:
    return ",".join(r[f] for f in q.count.split(","))


def _kept(rows: list[dict], q: DistinctQuery, keep: float) -> list[dict]:
    mask = item_kept(coupons(pa.array([_item(r, q) for r in rows])), keep, q.lg_k)
    return [r for r, m in zip(rows, mask, strict=True) if m]


def _run(tmp_path, batches: list[list[dict]], keep_of) -> dict[str, list[dict]]:
    kind = SlidingDistinct(
        chains_of(QUERIES), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS
    )
    for batch_id, rows in enumerate(batches):
        kind.prepare(batch_id, NO_SPARK)
        kind.sample(keep_of(batch_id))
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        parts = [
            partials_of(b, kind.specs) for b in table.to_batches(max_chunksize=max(1, len(rows) // 2 + 1))
        ]
        counts, max_us = merge_partials(pa.concat_tables(parts) if parts else partials_of(table, kind.specs))
        kind.apply(counts, max_us, batch_id)
    out: dict[str, list[dict]] = {}
    for r in read_results(tmp_path / "results").to_pylist():
        out.setdefault(r["query"], []).append(r)
    return out


def _batches(rows: list[dict]) -> list[list[dict]]:
    cuts = [0, 500, 1400, 2100, 2900, len(rows)]
    closing = {
        "ts": rows[-1]["ts"] + timedelta(seconds=10),
        "is_control": True,
        "src_ip": None,
        "dst_ip": None,
    }
    return [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)] + [[closing]]


def test_one_fraction_throughout_gives_the_kept_items_counts_scaled(tmp_path) -> None:
    rows = _packets(seed=3, seconds=30)
    got = _run(tmp_path, _batches(rows), lambda _: {"ddos": 0.25, "flows": 0.5})
    closing = [{**_batches(rows)[-1][0], "src_ip": None, "dst_ip": None}]
    for q, x in ((QUERIES[0], 0.25), (QUERIES[1], 0.5)):
        expected = _offline(_kept(rows, q, x) + closing, q)
        mine = {(r["window_end"], r["group"]): r for r in got[q.name]}
        assert set(mine) == set(expected), q.name
        for key, n in expected.items():
            r = mine[key]
            # the sketch's interval of the kept count, then the score interval at its ends
            kept_low, kept_high = (int(end[0]) for end in hll_interval([n], q.lg_k))
            low, high = count_interval(kept_low / x, x)[0], count_interval(kept_high / x, x)[1]
            assert (r["distinct"], r["keep"]) == (round(n / x), x), (q.name, key)
            assert (r["distinct_low"], r["distinct_high"]) == (int(np.floor(low)), int(np.ceil(high)))
    # the query without a drop box is unsampled and says so: the offline reports' intervals
    short = {(r["window_end"], r["group"]): r for r in got["short"]}
    assert {
        k: (r["distinct"], r["distinct_low"], r["distinct_high"]) for k, r in short.items()
    } == _offline_rows(rows + closing, QUERIES[2])
    assert all(r["keep"] == 1.0 for r in short.values())


@pytest.mark.parametrize("seed", [4, 5])
def test_a_fraction_set_mid_stream_is_marked_and_its_intervals_cover_the_exact_counts(
    tmp_path, seed: int
) -> None:
    rows = _packets(seed=seed, seconds=30, n=6000)
    batches = _batches(rows)
    start = 2  # batches 2.. sample ddos at 1/2
    got = _run(tmp_path, batches, lambda b: {"ddos": 0.5} if b >= start else {})
    exact = _offline(rows + [{**batches[-1][0]}], QUERIES[0])
    mine = {(r["window_end"], r["group"]): r for r in got["ddos"]}
    first_sampled = min(r["ts"] for r in batches[start])
    window = timedelta(seconds=QUERIES[0].window_s)
    inside = covered = 0
    for key, r in mine.items():
        end, _ = key
        if end <= first_sampled - timedelta(seconds=WATERMARK_MS / 1000) - timedelta(seconds=1):
            # closed before any sampled record: exact
            assert r["keep"] == 1.0 and r["distinct"] == exact[key], key
            continue
        if end - window >= first_sampled + timedelta(seconds=1):
            assert r["keep"] == 0.5, key  # every sub-window of the window was sampled
        if r["keep"] < 1:
            inside += 1
            covered += r["distinct_low"] <= exact.get(key, 0) <= r["distinct_high"]
            assert r["distinct_low"] <= r["distinct"] <= r["distinct_high"]
    assert inside > 50
    assert covered / inside >= 0.9, (covered, inside)


def test_unsampled_rows_carry_the_offline_intervals_and_they_cover_the_exact_counts(tmp_path) -> None:
    # No drop box: every row's interval is the sketch's own (the offline report's), and it holds
    # the exact count (brute force: the exact engine) where the HLL estimate alone mostly does not.
    rows = _packets(seed=6, seconds=30, n=6000)
    batches = _batches(rows)
    got = _run(tmp_path, batches, lambda _: {})
    closing = [{**batches[-1][0]}]
    inside = covered = hll = hll_covered = point = 0
    for q in QUERIES:
        mine = {(r["window_end"], r["group"]): r for r in got[q.name]}
        assert all(r["keep"] == 1.0 for r in mine.values())
        offline = _offline_rows(rows + closing, q)
        assert {k: (r["distinct"], r["distinct_low"], r["distinct_high"]) for k, r in mine.items()} == offline
        exact = _offline(rows + closing, q, exact=True)
        assert set(exact) == set(mine)
        for key, r in mine.items():
            holds = r["distinct_low"] <= exact[key] <= r["distinct_high"]
            inside += 1
            covered += holds
            if exact[key] <= coupon_limit(q.lg_k) // 2:  # coupon mode, far below the limit: exact
                assert r["distinct_low"] == r["distinct"] == r["distinct_high"] == exact[key], key
            elif exact[key] > coupon_limit(q.lg_k):  # HLL mode
                hll += 1
                hll_covered += holds
                point += r["distinct"] == exact[key]
    assert hll > 100
    assert covered / inside >= 0.9, (covered, inside)
    assert hll_covered / hll >= 0.9, (hll_covered, hll)
    assert point / hll <= 0.4, (point, hll)  # the point estimate alone (the old rows) mostly misses


def test_sampled_hll_mode_intervals_cover_the_exact_counts(tmp_path) -> None:
    # flows at ½: the kept items of a 6 s window (~500) pass the coupon limit (384), so the sketch's
    # own error and the sampling's both count.
    rows = _packets(seed=7, seconds=60, n=12000)
    batches = _batches(rows)
    got = _run(tmp_path, batches, lambda _: {"flows": 0.5})
    exact = _offline(rows + [{**batches[-1][0]}], QUERIES[1], exact=True)
    mine = [r for r in got["flows"] if r["keep"] == 0.5]
    assert len(mine) > 30
    assert sum(r["distinct"] * 0.5 > coupon_limit(12) for r in mine) > len(mine) // 2
    covered = sum(
        r["distinct_low"] <= exact[(r["window_end"], r["group"])] <= r["distinct_high"] for r in mine
    )
    assert covered / len(mine) >= 0.9, (covered, len(mine))


def test_a_fraction_must_be_a_power_of_two_the_sketch_has_bits_for() -> None:
    c = coupons(pa.array(["a", "b"]))
    with pytest.raises(ValueError, match="keep: expected 2"):
        item_kept(c, 0.3, 12)
    with pytest.raises(ValueError, match="keep: expected 2"):
        item_kept(c, 1 / 64, 21)
    assert item_kept(c, 1.0, 21).all()
