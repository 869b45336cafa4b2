"""The join's sorted-state machinery against brute force: the lexicographic pair search
(``analytics.join._Pairs``) and the window kept sorted by (code, ts, seq) as batches insert and
expire tuples (the merge that replaced a sort of the whole window per batch)."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.join import SymmetricHashJoin, _Pairs, _search_ranked
from analytics.shedding import LoadShedder

S = 1_000_000_000


def _sorted_pairs(rng: np.random.Generator, n: int, n_codes: int, span: int, base: int):
    codes = rng.integers(0, n_codes, n).astype(np.uint64) * np.uint64(2**40 + 7)
    vals = base + rng.integers(0, span, n)
    order = np.lexsort((vals, codes))
    return codes[order], vals[order].astype(np.int64)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 60),
    q=st.integers(0, 40),
    n_codes=st.integers(1, 8),
    span=st.sampled_from([1, 5, 1_000, 2**61]),
    side=st.sampled_from(["left", "right"]),
)
def test_pair_search_is_bisect_over_tuples(seed, n, q, n_codes, span, side):
    rng = np.random.default_rng(seed)
    base = 1_700_000_000 * S
    codes, vals = _sorted_pairs(rng, n, n_codes, span, base)
    # queries: known and unknown codes, values inside, below and above the stored ones
    q_codes = rng.integers(0, n_codes + 2, q).astype(np.uint64) * np.uint64(2**40 + 7)
    q_vals = (base + rng.integers(-span - 3, 2 * span + 3, q)).astype(np.int64)
    pairs = list(zip(codes.tolist(), vals.tolist(), strict=True))
    find = bisect.bisect_left if side == "left" else bisect.bisect_right
    expected = [find(pairs, (c, v)) for c, v in zip(q_codes.tolist(), q_vals.tolist(), strict=True)]
    got = _Pairs(codes, vals).search(q_codes, q_vals, side)
    assert got.tolist() == expected
    assert _search_ranked(codes, vals, q_codes, q_vals, side).tolist() == expected


def test_a_span_too_wide_for_one_int64_takes_the_ranked_search():
    codes = np.arange(4, dtype=np.uint64)
    vals = np.array([0, 2**62, 0, 2**62], np.int64)
    pairs = _Pairs(codes, vals)
    assert pairs.composite is None  # 4 codes × a span of 2^62 do not fit
    assert pairs.search(codes, vals, "right").tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("shed", [False, True])
def test_the_window_stays_sorted_through_inserts_late_tuples_and_expiry(shed):
    rng = np.random.default_rng(5)
    shedder = LoadShedder("pni", 0.6, 0.7, seed=3) if shed else None
    j = SymmetricHashJoin(2.0, 1.0, lateness_s=1.0, shedder=shedder, track_unmatched=True)
    t = 0
    for _ in range(40):
        n_l, n_r = rng.integers(0, 50, 2)
        # up to 1 s late against the clock, equal timestamps common (a 0.1 s grid)
        tl = (t + rng.integers(-10, 10, n_l)) * (S // 10)
        tr = (t + rng.integers(-10, 10, n_r)) * (S // 10)
        kl = np.array([f"k{k}" for k in rng.integers(0, 6, n_l)], dtype=object)
        kr = np.array([f"k{k}" for k in rng.integers(0, 6, n_r)], dtype=object)
        j.update(np.sort(tl), kl, np.sort(tr), kr)
        for side in ("left", "right"):
            s = j._state[side]
            order = np.lexsort((s["seq"], s["ts"], s["code"]))
            assert (order == np.arange(len(order))).all(), side
            assert len(np.unique(s["seq"])) == len(s["seq"])
        t += 10
