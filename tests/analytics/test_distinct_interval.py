"""The interval every distinct count carries (``analytics.distinct.hll_interval``) against brute force.

Streams with known exact distinct counts (1 .. 10^5 items, several ``lg_k``) through DataSketches
sketches read settled, as the pipeline and the offline command read them: the interval must cover
the exact count for >= 90 % of the answers, and the point estimate alone must not (it covers
only the counts in coupon mode). Counts in coupon mode below the HLL reach are their own interval.
The constants are checked against the library itself.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from datasketches import hll_sketch, hll_union

from analytics.distinct import (
    COUPON_RSE,
    HLL_TYPE,
    NUM_STD_DEV,
    coupon_limit,
    hll_interval,
    java_round,
)
from analytics.distinct_offline import distinct_reports
from analytics.distinct_queries import DistinctQuery
from analytics.sketch_windows import coupons_of
from netmon.records import ARROW_SCHEMA

S = 10**9
T0 = 1_700_000_000 * S
#: checkpoints of each stream: 40 sizes spread evenly in log scale over 1 .. 10^5
SIZES = np.unique(np.round(np.logspace(0, 5, 40)).astype(int))
SEEDS = range(8)


def settled(sk: hll_sketch, lg_k: int) -> hll_union:
    """The sketch read as a window's union is read (``SubWindowDistinct._sketch_union``)."""
    u = hll_union(lg_k)
    u.update(sk)
    u.update(u.get_result(HLL_TYPE))
    return u


def answers(lg_k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(exact, estimate)`` at every checkpoint of one stream per seed (distinct items: exact = size)."""
    exact, estimate = [], []
    for seed in SEEDS:
        sk = hll_sketch(lg_k, HLL_TYPE)
        fed = 0
        for n in SIZES:
            for i in range(fed, n):
                sk.update(f"{seed}.{i}")
            fed = int(n)
            exact.append(int(n))
            estimate.append(java_round(settled(sk, lg_k).get_estimate()))
    return np.asarray(exact), np.asarray(estimate)


def in_hll_mode(n: int, lg_k: int) -> bool:
    return n > coupon_limit(lg_k)


@pytest.mark.parametrize("lg_k", [4, 6, 8, 10, 12, 14, 16])
def test_intervals_cover_the_exact_counts_and_the_point_estimate_does_not(lg_k: int) -> None:
    exact, estimate = answers(lg_k)
    low, high = hll_interval(estimate, lg_k)
    assert ((low <= estimate) & (estimate <= high)).all()
    covered = (low <= exact) & (exact <= high)
    hll = exact > coupon_limit(lg_k)
    assert hll.sum() >= 80  # answers in HLL mode at every lg_k (sizes past the coupon limit)
    assert covered.mean() >= 0.9, covered.mean()
    assert covered[hll].mean() >= 0.9, covered[hll].mean()
    # The mutation: the interval collapsed back to the point estimate (the old rows). In HLL mode
    # it almost never holds the exact count, and over all the answers far fewer than 90 %.
    point = estimate == exact
    assert point[hll].mean() <= 0.1, point[hll].mean()
    assert point.mean() <= 0.75, point.mean()


def test_large_lg_k_in_coupon_mode_states_the_collisions() -> None:
    # lg_k 21 keeps up to 196,608 coupons: 10^5 items are still coupons, but ~25 pairs of them
    # share a coupon. The estimate corrects for that, and the interval (DataSketches' coupon
    # bound) covers what remains; from ~10^4 up it is wider than the point.
    lg_k = 21
    exact, estimate = [], []
    for seed in range(3):
        sk = hll_sketch(lg_k, HLL_TYPE)
        for i in range(10**5):
            sk.update(f"{seed}.{i}")
            if i + 1 in (10**4, 3 * 10**4, 10**5):
                exact.append(i + 1)
                estimate.append(java_round(settled(sk, lg_k).get_estimate()))
        held = len(coupons_of(pa.array([sk.serialize_compact()], pa.binary()))[1])
        assert held < 10**5  # coupon collisions: fewer coupons than items
    exact_ = np.asarray(exact)
    low, high = hll_interval(np.asarray(estimate), lg_k)
    assert ((low <= exact_) & (exact_ <= high)).all()
    assert (high - low)[exact_ == 10**5].min() >= 10  # ±1e-4 of 10^5, both sides
    assert (np.asarray(estimate) != exact_).any()  # the point estimate alone misses some


@pytest.mark.parametrize("lg_k", [4, 8, 12, 16])
def test_exact_small_groups_are_their_own_interval(lg_k: int) -> None:
    # A union in coupon mode answers its distinct coupons; below the HLL reach (and below ~5,000,
    # where DataSketches' coupon bound reaches half a unit) the interval is that one count, and
    # it is the exact count (a coupon collision among 5,000 items has probability ~0.06).
    rel_high = -hll_sketch.get_rel_err(True, True, lg_k, NUM_STD_DEV)
    reach = math.ceil((coupon_limit(lg_k) + 1) * (1 - rel_high) - 0.5)  # the smallest HLL-mode reading
    top = min(reach, 5000)
    rng = np.random.default_rng(lg_k)
    sizes = sorted({1, 2, top - 1, *rng.integers(1, top, 30).tolist()})
    for n in sizes:
        sk = hll_sketch(lg_k, HLL_TYPE)
        for i in range(n):
            sk.update(f"small.{lg_k}.{i}")
        e = java_round(settled(sk, lg_k).get_estimate())
        low, high = hll_interval([e], lg_k)
        assert (int(low[0]), e, int(high[0])) == (n, n, n), (lg_k, n)
    # From the reach up a coupon-mode count may be an HLL estimate of more than the limit: the
    # upper end says so; the lower end stays the count.
    limit = coupon_limit(lg_k)
    counts = np.arange(reach, limit + 1)
    low, high = hll_interval(counts, lg_k)
    assert (high > limit).all() and (low == np.where(counts < 5000, counts, low)).all()
    assert (low >= counts - 1).all()
    low, high = hll_interval([reach - 1], lg_k)
    assert high[0] <= limit


@pytest.mark.parametrize("lg_k", [4, 7, 8, 10, 12, 13, 16])
def test_coupon_limit_is_where_the_library_turns_to_registers(lg_k: int) -> None:
    sk = hll_sketch(lg_k, HLL_TYPE)
    held, item = 0, 0
    while True:
        sk.update(f"limit.{item}")
        item += 1
        blob = sk.serialize_compact()
        if blob[7] & 3 == 2:  # HLL mode
            break
        held = len(coupons_of(pa.array([blob], pa.binary()))[1])
    assert held == coupon_limit(lg_k)


@pytest.mark.parametrize("lg_k", [4, 8, 12, 13, 16])
def test_the_bounds_are_the_librarys_own(lg_k: int) -> None:
    # Coupon mode: estimate / (1 ± 2 COUPON_RSE).
    sk = hll_sketch(lg_k, HLL_TYPE)
    for i in range(5):
        sk.update(f"c{i}")
    u = settled(sk, lg_k)
    assert u.get_upper_bound(NUM_STD_DEV) == pytest.approx(
        u.get_estimate() / (1 - NUM_STD_DEV * COUPON_RSE), rel=1e-12
    )
    # HLL mode, far past the coupon limit (the lower bound's floor at the non-zero registers does
    # not bind): the counts the library's bounds of the settled union allow, and at most the
    # rounding of the estimate (half a unit, scaled) more on either side.
    k = 2**lg_k
    for seed in range(3):
        sk = hll_sketch(lg_k, HLL_TYPE)
        for i in range(4 * k):
            sk.update(f"{seed}.{i}")
        u = settled(sk, lg_k)
        e = java_round(u.get_estimate())
        low, high = hll_interval([e], lg_k)
        lib_low = math.ceil(u.get_lower_bound(NUM_STD_DEV))
        lib_high = math.floor(u.get_upper_bound(NUM_STD_DEV))
        assert lib_low - 1 <= low[0] <= lib_low and lib_high <= high[0] <= lib_high + 2
    # Above lg_k 12 that is 2 x 1.03896 / sqrt(k) per side: DataSketches' non-HIP RSE, within
    # 2 % of the textbook 1.96 x 1.04 / sqrt(k).
    if lg_k > 12:
        assert e / low[0] - 1 == pytest.approx(2 * 1.03896 / math.sqrt(k), rel=1e-3)


def test_interval_edges() -> None:
    low, high = hll_interval(np.array([], np.int64), 12)
    assert low.dtype == high.dtype == np.int64 and not len(low)
    assert [tuple(map(int, x)) for x in zip(*hll_interval([0, 1], 4), strict=True)] == [(0, 0), (1, 1)]
    # Just past the limit: an HLL-mode union holds more than the limit, so the low end stays above.
    low, high = hll_interval([coupon_limit(8) + 3], 8)
    assert low[0] == coupon_limit(8) + 1 and high[0] > coupon_limit(8) + 3
    # Monotone in the estimate.
    e = np.arange(0, 20_000)
    for lg_k in (4, 12, 21):
        low, high = hll_interval(e, lg_k)
        assert (np.diff(low) >= 0).all() and (np.diff(high) >= 0).all()
        assert ((low <= e) & (e <= high)).all()


# -- the offline command's rows ----------------------------------------------------------------------------


def _stream(sizes: list[int], subs: int) -> tuple[pa.Table, dict[tuple[int, str], int]]:
    """Groups ``g<j>`` of ``sizes[j]`` items per 1 s sub-window, half of them new each sub-window, and
    the exact count of every (window end, group) of a 2 s window (brute force)."""
    rows: dict[str, list] = {"ts": [], "src_ip": [], "dst_ip": []}
    held: dict[tuple[int, str], set[str]] = {}
    for s in range(subs):
        for j, size in enumerate(sizes):
            group = f"g{j}"
            for i in range(size):
                item = f"{j}.{s * size // 2 + i}"
                for copy in range(1 + (i % 3 == 0)):  # some items twice
                    rows["ts"].append(T0 + s * S + (i * 7919 + copy) % S)
                    rows["src_ip"].append(item)
                    rows["dst_ip"].append(group)
                for end in (s + 1, s + 2):  # the windows ending after sub-window s and the next one
                    held.setdefault((end, group), set()).add(item)
    order = np.argsort(rows["ts"], kind="stable")
    cols = {f.name: pa.nulls(len(order), f.type) for f in ARROW_SCHEMA}
    cols["ts"] = pa.array(np.asarray(rows["ts"])[order], ARROW_SCHEMA.field("ts").type)
    cols["src_ip"] = pa.array(np.asarray(rows["src_ip"], object)[order], pa.string())
    cols["dst_ip"] = pa.array(np.asarray(rows["dst_ip"], object)[order], pa.string())
    return pa.table(cols, schema=ARROW_SCHEMA), {key: len(items) for key, items in held.items()}


@pytest.mark.parametrize("lg_k", [6, 10])
def test_offline_reports_carry_intervals_that_cover_brute_force(lg_k: int) -> None:
    sizes = np.unique(np.round(np.logspace(0, 3.5, 24)).astype(int)).tolist()
    table, exact = _stream(sizes, subs=6)
    q = DistinctQuery(name="t", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=1)
    reports = list(distinct_reports([table], q, lg_k=lg_k, close_after_ns=S))
    rows = [((r.end_ns - T0) // S, g) for r in reports for g in r.to_json()["groups"]]
    assert len(rows) == sum(end <= 6 for end, _ in exact)  # the window ending at 7 s stays open
    covered = point = hll = 0
    for end, g in rows:
        want = exact[(end, g["group"])]
        assert g["distinct_low"] <= g["distinct"] <= g["distinct_high"]
        covered += g["distinct_low"] <= want <= g["distinct_high"]
        if in_hll_mode(want, lg_k):
            hll += 1
            point += g["distinct"] == want
        elif (g["distinct_low"], g["distinct_high"]) != (want, want):
            # a coupon-mode count is its own interval unless an HLL estimate could read so
            assert g["distinct_high"] > coupon_limit(lg_k) >= want, (end, g, want)
    assert covered / len(rows) >= 0.9, (covered, len(rows))
    assert hll >= 40 and point / hll <= 0.2, (point, hll)
    # Exact mode: every count is its own interval.
    for r in distinct_reports([table], q, exact=True, close_after_ns=S):
        assert r.bounds == tuple((n, n) for _, n in r.groups)
