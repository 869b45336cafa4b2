"""Vectorized window counts from sub-window sketches = the union of each window's sketches.

``analytics.sketch_windows.window_segments`` counts coupon-mode groups from their coupons and
unites the rest with two running unions. The oracle: per group and window end, unite the group's
sketches of the last ``k`` sub-windows the plain way (Python DataSketches) and read it settled.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from datasketches import hll_sketch, hll_union

from analytics.distinct import HLL_TYPE, java_round
from analytics.sketch_windows import coupon_estimates, coupon_sketches, coupons_of, window_segments


def _sketch(items: list[str], lg_k: int, compact: bool) -> bytes:
    sk = hll_sketch(lg_k, HLL_TYPE)
    for item in items:
        sk.update(item)
    return sk.serialize_compact() if compact else sk.serialize_updatable()


def _traffic(seed: int, k: int, span: int, lg_k: int) -> list[tuple[int, int, bytes]]:
    """``(group, idx, sketch)``: sparse, bursty and dense groups, gaps, partial sketches."""
    rng = random.Random(seed)
    rows = []
    for g in range(45):
        density = rng.choice([0.01, 0.03, 0.1, 0.5, 0.95])
        size = rng.choice([1, 3, 20, 120, 700]) if density > 0.4 else rng.choice([1, 2, 5])
        for idx in range(-k, span):
            if rng.random() < density:
                for _ in range(rng.choice([1, 1, 1, 2])):  # sometimes two partial sketches
                    items = [f"10.{g}.{rng.randrange(8)}.{rng.randrange(size * 4)}" for _ in range(size)]
                    rows.append((g, idx, _sketch(items, lg_k, compact=rng.random() < 0.5)))
    rows.append((100, span // 2, _sketch(["x"], lg_k, True)))  # one sketch in the whole stream
    rows.append((101, 3 * k - 1, _sketch(["y", "z"], lg_k, True)))  # the last sub-window of a chunk
    rows.append((101, 3 * k, _sketch(["z"], lg_k, False)))  # the first of the next
    rng.shuffle(rows)
    return rows


def _expected(rows: list[tuple[int, int, bytes]], k: int, lo: int, hi: int, lg_k: int) -> dict:
    by_group: dict[int, dict[int, list[bytes]]] = {}
    for g, idx, sk in rows:
        by_group.setdefault(g, {}).setdefault(idx, []).append(sk)
    out = {}
    for g, sketches in by_group.items():
        for i in range(lo + 1, hi + 1):
            held = [sk for j in range(i - k + 1, i + 1) for sk in sketches.get(j, [])]
            if held:
                u = hll_union(lg_k)
                for sk in held:
                    u.update(hll_sketch.deserialize(sk))
                u.update(u.get_result(HLL_TYPE))
                out[(g, i)] = java_round(u.get_estimate())
    return out


def _got(rows, k, lo, hi, lg_k) -> dict:
    g = np.array([r[0] for r in rows], np.int64)
    idx = np.array([r[1] for r in rows], np.int64)
    blobs = pa.array([r[2] for r in rows], pa.binary())
    out = {}
    for grp, start, stop, n in zip(
        *window_segments(g, idx, blobs, k=k, lo=lo, hi=hi, lg_k=lg_k), strict=True
    ):
        assert start <= stop
        for i in range(start, stop + 1):
            assert (grp, i) not in out, "two segments of one group cover a window end"
            out[(int(grp), i)] = int(n)
    return out


@pytest.mark.parametrize(("k", "lg_k"), [(1, 12), (4, 12), (60, 12), (7, 8), (5, 4)])
def test_window_counts_equal_the_union_of_each_windows_sketches(k, lg_k):
    span = 4 * k + 7
    rows = _traffic(seed=k * 100 + lg_k, k=k, span=span, lg_k=lg_k)
    lo, hi = -2 * k, span + k
    expected = _expected(rows, k, lo, hi, lg_k)
    limit = len(coupon_estimates(lg_k)) - 1
    assert any(n > limit for n in expected.values())  # some unions in HLL mode
    assert sum(n <= limit for n in expected.values()) > len(expected) // 4  # and many in coupon mode
    assert _got(rows, k, lo, hi, lg_k) == expected
    # A batch's range need not start at a chunk: slices cut anywhere give the same counts.
    cuts = sorted({lo, hi, *random.Random(k).sample(range(lo + 1, hi), 3)})
    sliced: dict = {}
    for a, b in zip(cuts, cuts[1:], strict=False):
        part = _got(rows, k, a, b, lg_k)
        assert not set(part) & set(sliced)
        sliced |= part
    assert sliced == expected


def test_coupons_are_read_from_compact_and_updatable_sketches():
    items = [f"i{n}" for n in range(300)]
    for size in (1, 7, 8, 300):
        compact = _sketch(items[:size], 12, True)
        updatable = _sketch(items[:size], 12, False)
        row, coupon, hll = coupons_of(pa.array([compact, updatable], pa.binary()))
        assert not hll.any()
        assert sorted(coupon[row == 0]) == sorted(coupon[row == 1])
        # The estimate of a coupon-mode sketch is the table's entry for its coupon count.
        assert coupon_estimates(12)[int((row == 0).sum())] == java_round(
            hll_sketch.deserialize(compact).get_estimate()
        )
    row, coupon, hll = coupons_of(
        pa.array([_sketch(items + [f"j{n}" for n in range(500)], 12, True)], pa.binary())
    )
    assert hll.tolist() == [True] and len(coupon) == 0


def test_the_estimate_table_ends_where_datasketches_leaves_coupon_mode():
    # 7 coupons below lg_k 8 (LIST straight to HLL), then 3/4 of 2^(lg_k - 3).
    assert [len(coupon_estimates(lg_k)) - 1 for lg_k in (4, 7, 8, 10, 12)] == [7, 7, 24, 96, 384]


def test_a_group_past_the_table_in_one_window_only_is_still_exact():
    # 300 + 300 distinct items in neighbouring sub-windows: each sketch in coupon mode, their
    # union (600 coupons) not.
    k = 3
    rows = [
        (0, 0, _sketch([f"a{n}" for n in range(300)], 12, True)),
        (0, 1, _sketch([f"b{n}" for n in range(300)], 12, True)),
        (0, 5, _sketch(["b1"], 12, True)),
    ]
    assert _got(rows, k, -5, 10, 12) == _expected(rows, k, -5, 10, 12)


@pytest.mark.parametrize("lg_k", [4, 7, 8, 12])
def test_sketches_built_from_coupons_are_the_librarys(lg_k):
    # Every coupon count DataSketches keeps as coupons: the built bytes deserialize to a sketch
    # with the same coupons and estimate, and unite as the library's own sketch does.
    rng = random.Random(lg_k)
    limit = len(coupon_estimates(lg_k)) - 1
    candidates = (1, 2, 7, 8, limit, *rng.sample(range(1, limit + 1), min(limit, 6)))
    sizes = sorted({n for n in candidates if n <= limit})
    real = []
    for n in sizes:
        sk = hll_sketch(lg_k, HLL_TYPE)
        items = iter(range(10**9))
        while sk.get_estimate() < 0.5 or len(coupons_of(pa.array([sk.serialize_compact()]))[1]) < n:
            sk.update(f"s{n}-{next(items)}")
        real.append(sk.serialize_compact())
    row, values, hll = coupons_of(pa.array(real, pa.binary()))
    assert not hll.any()
    counts = np.bincount(row, minlength=len(real))
    built = coupon_sketches(counts, values, lg_k)
    for blob, mine in zip(real, built.to_pylist(), strict=True):
        theirs = hll_sketch.deserialize(blob)
        ours = hll_sketch.deserialize(mine)
        assert mine[:12] == blob[:12] if blob[7] & 3 == 1 else mine[:8] == blob[:8]
        assert ours.get_estimate() == theirs.get_estimate()
        assert sorted(coupons_of(pa.array([mine]))[1]) == sorted(coupons_of(pa.array([blob]))[1])
        u, v = hll_union(lg_k), hll_union(lg_k)
        u.update(ours)
        u.update(hll_sketch.deserialize(real[-1]))
        v.update(theirs)
        v.update(hll_sketch.deserialize(real[-1]))
        assert u.get_result(HLL_TYPE).get_estimate() == v.get_result(HLL_TYPE).get_estimate()


@pytest.mark.parametrize("minor_span", [1, 70, 2**20, 2**40])
def test_order_by_sorts_rows_as_lexsort_does_with_one_key_or_two(minor_span: int) -> None:
    from analytics.sketch_windows import _order_by

    rng = np.random.default_rng(minor_span)
    n = 5_000
    major = (rng.integers(0, 300, n).astype(np.uint64) << np.uint64(32)) | rng.integers(0, 2**32, n).astype(
        np.uint64
    )
    major[: n // 4] = major[n // 4 : n // 2]  # equal majors: the minor decides
    minor = rng.integers(-5, minor_span, n)
    got = _order_by(major, minor)
    want = np.lexsort((minor, major))
    # the same sequence of (major, minor) rows (rows equal in both may come in any order)
    assert np.array_equal(major[got], major[want]) and np.array_equal(minor[got], minor[want])
    assert sorted(got.tolist()) == list(range(n))
