"""A distinct query's window changed at run time (``SubWindowDistinct.resize``, ``distinct_reports(
changes=...)``; seed 004 §4.2, issue 18 item 4) against a brute-force oracle: random streams with
gaps, resized to random sizes at random instants, exact sets and HLL sketches, across a save and
restore in the middle of the adaptation.

The rule the oracle spells out, sub-window by sub-window (the one ``tests/analytics/
test_topk_resize.py`` states for top-k): after a change to ``n'`` sub-windows a window holds
``min(n', what it held)`` at once (a shorter window is in force at the change) and grows by one
sub-window per closing up to ``n'`` (a longer one is complete ``n' − n`` sub-windows later). Before
the stream the past is empty traffic, so the first window holds the configured ``n``. Each report
is then the brute-force count over the records of exactly the span it held: the distinct items
(exact mode), or the settled union of the span's sub-window sketches built afresh (HLL mode).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from datasketches import hll_sketch, hll_union
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.distinct import HLL_TYPE, SubWindowDistinct, java_round
from analytics.distinct_offline import distinct_reports
from analytics.distinct_queries import DistinctQuery

B_NS = 10**9
#: sub-window -> [(group, item)], in arrival order
Stream = dict[int, list[tuple[str, str]]]

streams = st.dictionaries(
    st.integers(0, 40),
    st.lists(st.tuples(st.sampled_from("gh"), st.integers(0, 30).map(str)), min_size=1, max_size=12),
    min_size=1,
    max_size=25,
)


def held_spans(first: int, last: int, n_sub: int, changes: dict[int, int]) -> dict[int, int]:
    """Window end (sub-window index) -> the sub-windows it holds, for every end first..last."""
    held, out = n_sub, {}
    for e in range(min([first, *changes]), last + 1):
        if e in changes:
            n_sub = changes[e]
            held = min(held, n_sub)
        held = min(held + 1, n_sub)
        out[e] = held
    return {e: h for e, h in out.items() if e >= first}


def brute(stream: Stream, n_sub: int, changes: dict[int, int], lg_k: int | None) -> list[tuple]:
    """``(end_ns, window_ns, {group: distinct})`` of every window end holding an item."""
    rows = []
    for e, held in held_spans(min(stream), max(stream), n_sub, changes).items():
        span = [(g, item) for i in range(e - held + 1, e + 1) for g, item in stream.get(i, [])]
        if not span:
            continue
        counts = {}
        for g in sorted({g for g, _ in span}):
            if lg_k is None:
                counts[g] = len({item for gg, item in span if gg == g})
                continue
            u = hll_union(lg_k)
            for i in range(e - held + 1, e + 1):  # one sketch per sub-window, united afresh
                mine = [item for gg, item in stream.get(i, []) if gg == g]
                if mine:
                    sk = hll_sketch(lg_k, HLL_TYPE)
                    for item in mine:
                        sk.update(item)
                    u.update(sk)
            u.update(u.get_result(HLL_TYPE))  # settled
            counts[g] = java_round(u.get_estimate())
        rows.append(((e + 1) * B_NS, held * B_NS, counts))
    return rows


@settings(max_examples=200, deadline=None)
@given(
    stream=streams,
    n_sub=st.integers(1, 6),
    resizes=st.dictionaries(st.integers(-3, 42), st.integers(1, 8), max_size=4),
    exact=st.booleans(),
    saved_at=st.integers(0, 45),
)
def test_resized_windows_equal_brute_force(stream, n_sub, resizes, exact, saved_at) -> None:
    """The engine slid through every sub-window, resized before the one each change names."""
    lg_k = None if exact else 4  # HLL mode from 8 items: unions of registers, not only coupons
    sw = SubWindowDistinct(n_sub * B_NS, B_NS, lg_k=lg_k or 12, exact=exact)
    rows = []
    for i in range(min([min(stream), *resizes]), max(stream) + 1):
        if i == saved_at:  # a restart, maybe in the middle of a growth
            sw = SubWindowDistinct.from_bytes(sw.to_bytes())
        if i in resizes:
            sw.resize(resizes[i] * B_NS)
        for g, item in stream.get(i, []):
            sw.update(item, g)
        sw.slide()
        if i >= min(stream) and not sw.is_empty():
            rows.append(((i + 1) * B_NS, sw.window_held, sw.report()))
    assert rows == brute(stream, n_sub, resizes, lg_k)


@settings(max_examples=150, deadline=None)
@given(
    stream=streams,
    n_sub=st.integers(1, 6),
    resizes=st.dictionaries(st.integers(-3, 42), st.integers(1, 8), max_size=4),
)
def test_the_offline_query_changes_its_window_at_the_instant_given(stream, n_sub, resizes) -> None:
    """``distinct_reports(changes=...)``: the driver jumps over the gaps of the stream (the engine
    idles), and each report states the span it held."""
    records = sorted(
        (i * B_NS + j, g, item) for i, pairs in stream.items() for j, (g, item) in enumerate(pairs)
    )
    batch = pa.table(
        {
            "ts": pa.array([t for t, _, _ in records], pa.timestamp("ns", tz="UTC")),
            "src_ip": [item for _, _, item in records],
            "dst_ip": [g for _, g, _ in records],
        }
    )
    q = DistinctQuery(name="d", count="src_ip", group_by="dst_ip", window_s=n_sub, sub_window_s=1)
    changes = {i: n * B_NS for i, n in resizes.items()}
    got = [
        (r.end_ns, r.window_ns, dict(r.groups))
        for r in distinct_reports([batch], q, exact=True, close_after_ns=B_NS, changes=changes)
    ]
    # the stream's records are in arrival order within a sub-window: exact counts need no order
    assert got == brute(stream, n_sub, resizes, None)


def test_seed_004s_protocol_shrinks_at_once_and_grows_until_max_w_w() -> None:
    """Seed 004's E1 protocol on our operator, sub-windows of 1 s: 60 s, 30 s from t = 80 s, 60 s
    again from t = 150 s. The window holds 30 s from 80 s on; after 150 s it grows a second per
    second and holds 60 s again at 180 s (150 + max(60, 30) − 30 held ago)."""
    sw = SubWindowDistinct(60 * B_NS, B_NS, exact=True)
    held, counts = {}, {}
    for second in range(240):
        if second == 80:
            sw.resize(30 * B_NS)
        if second == 150:
            sw.resize(60 * B_NS)
        sw.update(f"x{second}").slide()
        held[second + 1] = sw.window_held // B_NS  # at the window's end
        counts[second + 1] = sw.report()[""]
    assert held[60] == held[80] == 60 and held[81] == 30 and held[150] == 30
    assert [held[t] for t in (151, 165, 179, 180, 181, 240)] == [31, 45, 59, 60, 60, 60]
    # one new item per second: once the stream is a window old, the count is the span held
    assert {t: n for t, n in counts.items() if t >= 60} == {t: h for t, h in held.items() if t >= 60}


def test_a_resize_must_be_a_multiple_of_the_sub_window_and_merge_needs_the_same_span() -> None:
    sw = SubWindowDistinct(4 * B_NS, B_NS)
    with pytest.raises(ValueError, match="not a multiple"):
        sw.resize(B_NS * 5 // 2)
    other = SubWindowDistinct(4 * B_NS, B_NS).resize(2 * B_NS).resize(4 * B_NS)
    with pytest.raises(ValueError, match="holds 2 sub-windows, this one 4"):
        sw.merge(other)


def _expected_resized(rows, k: int, lo: int, hi: int, lg_k: int, changes: dict[int, int]) -> dict:
    """``(group, window end) -> count``: the settled union of the sketches of the span each window
    end holds (``held_spans``), united afresh."""
    spans = held_spans(lo + 1, hi, k, changes)
    out = {}
    for g in sorted({g for g, _, _ in rows}):
        for i, held in spans.items():
            mine = [sk for gg, idx, sk in rows if gg == g and i - held < idx <= i]
            if mine:
                u = hll_union(lg_k)
                for sk in mine:
                    u.update(hll_sketch.deserialize(sk))
                u.update(u.get_result(HLL_TYPE))
                out[(g, i)] = java_round(u.get_estimate())
    return out


@pytest.mark.parametrize(("k", "lg_k", "seed"), [(4, 8, 1), (6, 12, 2), (3, 4, 3), (5, 8, 4)])
def test_the_carried_stage_3_resized_at_batch_boundaries_equals_the_unions_of_the_spans_held(k, lg_k, seed):
    """``SlidingCoupons.resize`` between batches (the pipeline's batch boundary), with a restart
    rebuilt from the sketches of the span held (``held``) in the middle of a growth."""
    import random

    import numpy as np

    from analytics.sketch_carry import SlidingCoupons
    from tests.analytics.test_sketch_carry import _arrays, _expand
    from tests.analytics.test_sketch_windows import _traffic

    span = 5 * k
    rows = _traffic(seed=seed, k=k, span=span, lg_k=lg_k)
    rng = random.Random(seed)
    lo, hi = -2 * k, span + k  # no sketch at or before lo
    cuts = sorted({lo, hi, *rng.sample(range(lo + 1, hi), 9)})
    changes: dict[int, int] = {}
    carry = SlidingCoupons(k, lg_k, lo)
    got: dict = {}
    for n, cut in enumerate(cuts[1:], start=1):
        if n in (2, 4, 5, 7):  # shrinks and growths, one of them to the same size
            size = rng.choice([1, 2, k, 2 * k, 3 * k])
            changes[carry.lo + 1] = size
            carry.resize(size)
        if n == 6:  # a new process: the state from the sketches of the span window `lo` held
            fresh = SlidingCoupons(carry.k, lg_k, carry.lo - carry.held, held=carry.held)
            closed = [r for r in rows if carry.lo - carry.held < r[1] <= carry.lo]
            if closed:
                fresh.update(*_arrays(closed))
            fresh.seek(carry.lo, answers=False)
            fresh.held = carry.held
            np.testing.assert_array_equal(fresh.keys, carry.keys)
            np.testing.assert_array_equal(fresh.last, carry.last)
            carry = fresh
        batch = [r for r in rows if carry.lo < r[1] <= cut]
        if batch:
            carry.update(*_arrays(batch))
        part = _expand(carry.seek(cut))
        assert not set(part) & set(got)
        got |= part
    assert got == _expected_resized(rows, k, lo, hi, lg_k, changes)
    assert carry.held_at(np.array([hi + 1])).tolist() == [min(carry.held + 1, carry.k)]
