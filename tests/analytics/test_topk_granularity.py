"""The granularity operator Γ (``SubWindowTopK.set_granularity``, ``analytics.granularity``;
seed 004's CKSV "granularity") against brute-force oracles.

Random fine streams (sub-windows of ``b``), a random starting granularity and random changes
asked at random fine instants; each change takes effect at the first index at or after the ask
that is a multiple of both granularities. The oracle, with no code shared with the classes under
test, groups the fine sub-windows into the coarse ones of the resulting schedule, walks them
contiguously and reports, at each coarse end ``E``, the whole sub-windows starting at or after
``E − N`` once the stream has closed ``N`` and one of them has data — in every mode of the
report, across a save and restore. The exact twin and Alg. 6's guarantees are checked against
an exact recount of the fine counts over the span each report says it holds. States written
before Γ existed (all sub-windows of ``b``) still load and go on.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.granularity import FROM_START, plan_change
from analytics.topk import ExactSlidingTopK, SubWindowTopK
from analytics.topk_merge import QueryParams, TopKMerge
from tests.analytics.test_topk_incremental import (
    B_NS,
    MODES,
    Counts,
    brute_top,
    pack_state,
    stream,
    sub_windows,
)

Coarse = tuple[int, int, Counts, int]  # start, size (in b), summed counts, summed total


def instants(fine: list[int], asks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``asks`` (position in ``fine``, m) as (fine instant, m), in the order they are made."""
    return sorted(((fine[j % len(fine)], m) for j, m in asks), key=lambda fm: fm[0])


def schedule_of(first_m: int, asked: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The schedule the asks make."""
    schedule = [(FROM_START, first_m)]
    for f, m in asked:
        schedule = plan_change(schedule, f, m)[1]
    return schedule


def m_at(schedule: list[tuple[int, int]], index: int) -> int:
    return [m for start, m in schedule if start <= index][-1]


def coarse(subs: dict[int, tuple[Counts, int]], schedule: list[tuple[int, int]]) -> list[Coarse]:
    """Every coarse sub-window from the first one with data to the last, contiguously (empty ones
    included), the fine counts summed in full."""
    first, last = min(subs), max(subs)
    m = m_at(schedule, first)
    start = first // m * m
    out = []
    while start <= last:
        m = m_at(schedule, start)
        counts: Counts = {}
        total = 0
        for i in range(start, start + m):
            c, t = subs.get(i, ({}, 0))
            total += t
            for key, x in c.items():
                counts[key] = counts.get(key, 0) + x
        out.append((start, m, counts, total))
        start += m
    return out


def brute_rows(subs: list[Coarse], n_sub: int, k: int) -> list[tuple]:
    """The merge rows: at each coarse end E, the sub-windows starting at or after E − N."""
    rows = []
    first = subs[0][0]
    for j, (start, size, _, _) in enumerate(subs):
        end = start + size
        if end - first < n_sub:
            continue
        window = [s for s in subs[: j + 1] if s[0] >= end - n_sub]
        if not any(x for s in window for x in s[2].values()):
            continue
        delta, total, summed = 0, 0, {}
        for _, _, counts, sub_total in window:
            top, kth = brute_top(counts, k)
            delta += kth
            total += sub_total
            for key, c in top:
                summed[key] = summed.get(key, 0) + c
        items = sorted(((key, c) for key, c in summed.items() if c > delta), key=lambda kv: (-kv[1], kv[0]))
        span = (end - window[0][0]) * B_NS
        rows += [(end * B_NS, delta, r, key, c, total, span) for r, (key, c) in enumerate(items, 1)]
        rows += [] if items else [(end * B_NS, delta, 0, None, None, total, span)]
    return rows


def feed(
    merge,
    subs: list[Coarse],
    present: set[int],
    first_m: int,
    asked: list[tuple[int, int]],
    saved_at: int,
    params,
):
    """Feed the coarse sub-windows in order; each ask is made while the coarse sub-window holding
    its fine instant is open (before it is added), as the pipeline asks at a batch boundary."""
    merge.set_granularity(first_m)
    schedule = [(FROM_START, first_m)]
    pending = list(asked)
    rows = []
    for j, (start, size, counts, total) in enumerate(subs):
        while pending and pending[0][0] < start + size:
            f, m = pending.pop(0)
            at, schedule = plan_change(schedule, f, m)
            if at is not None:
                merge.set_granularity(m, at)
        if j == saved_at:  # a restart: the pending changes and the mixed sizes are in the bytes
            merge = TopKMerge.from_bytes(merge.to_bytes(), params)
        if present.intersection(range(start, start + size)):  # not only a gap: the stream adds it
            rows += merge.add_subwindow(counts, start, total)
    return rows


asks = st.lists(st.tuples(st.integers(0, 59), st.integers(1, 4)), max_size=4)


@pytest.mark.parametrize("mode", sorted(MODES))
@settings(max_examples=150, deadline=None)
@given(
    spec=sub_windows,
    n_sub=st.integers(1, 13),
    k=st.integers(1, 4),
    first_m=st.integers(1, 4),
    asks=asks,
    saved_at=st.integers(0, 40),
)
def test_mixed_granularity_rows_equal_brute_force(mode, spec, n_sub, k, first_m, asks, saved_at) -> None:
    subs = stream(spec)
    asked = instants(sorted(subs), asks)
    schedule = schedule_of(first_m, asked)
    groups = coarse(subs, schedule)
    params = QueryParams(N=n_sub * B_NS, b=B_NS, k=k)
    merge = TopKMerge(params, MODES[mode](params.N, params.b, k, time_based=True))
    rows = feed(merge, groups, set(subs), first_m, asked, saved_at, params)
    assert rows == brute_rows(groups, n_sub, k)


@settings(max_examples=150, deadline=None)
@given(spec=sub_windows, n_units=st.integers(1, 3), k=st.integers(1, 4), first_m=st.integers(1, 4), asks=asks)
def test_reports_against_an_exact_recount_of_the_span_they_hold(spec, n_units, k, first_m, asks) -> None:
    """N a multiple of every granularity: the exact twin lists exactly the keys whose recounted
    fine counts over the held span exceed delta; Alg. 6 never over-counts, reports only keys
    truly above delta and misses none above ``2·delta`` (``unreported_bound``)."""
    subs = stream(spec)
    asked = instants(sorted(subs), asks)
    schedule = schedule_of(first_m, asked)
    groups = coarse(subs, schedule)
    n_sub = 12 * n_units
    exact = ExactSlidingTopK(n_sub * B_NS, B_NS, k, time_based=True).set_granularity(first_m)
    alg6 = SubWindowTopK(n_sub * B_NS, B_NS, k, time_based=True).set_granularity(first_m)
    plan = [(FROM_START, first_m)]
    pending = list(asked)
    for start, size, counts, _ in groups:
        while pending and pending[0][0] < start + size:
            f, m = pending.pop(0)
            at, plan = plan_change(plan, f, m)
            if at is not None:
                exact.set_granularity(m, at)
                alg6.set_granularity(m, at)
        got = exact.add_subwindow_held(counts, start)
        assert [r[:2] + r[3:] for r in alg6.add_subwindow_held(counts, start)] == [r[:2] + r[3:] for r in got]
        approx = dict(alg6.top()) if got else {}
        for _, delta, items, held, end in got[-1:]:  # the window both hold now
            lo, hi = (end - held) // B_NS, end // B_NS
            assert held == n_sub * B_NS or m_at(schedule, lo - 1) > 1  # less only after a finer change
            true: Counts = {}
            for i in range(lo, hi):
                for key, c in subs.get(i, ({}, 0))[0].items():
                    if c:
                        true[key] = true.get(key, 0) + c
            assert items == sorted(
                ((key, c) for key, c in true.items() if c > delta), key=lambda kv: (-kv[1], kv[0])
            )
            assert all(true[key] > delta and c <= true[key] for key, c in approx.items())
            assert {key for key, c in true.items() if c > 2 * delta} <= set(approx)


def test_old_state_bytes_load_and_take_a_granularity_change() -> None:
    """A version-1 state (every sub-window one b) packed by hand, loaded, then a change to m = 2
    and back: the rows after the load equal the brute force of the whole stream's schedule."""
    subs = {i: ({"a": i % 3, "b": 2, f"x{i % 5}": 3}, 9) for i in range(100, 134)}
    n_sub, k, last = 6, 2, 113
    params = QueryParams(N=n_sub * B_NS, b=B_NS, k=k)
    data = pack_state(subs, n_sub, k, last)
    assert data[5] == 1  # SubWindowTopK's version byte: the old layout
    merge = TopKMerge.from_bytes(data, params)
    schedule = [(FROM_START, 1)]
    at, schedule = plan_change(schedule, 117, 2)
    merge.set_granularity(2, at)
    back, schedule = plan_change(schedule, 129, 1)
    assert (at, back) == (118, 130)
    groups = coarse(subs, schedule)
    rows = []
    for start, _, counts, total in groups:
        if start > last:
            if start == back:
                merge.set_granularity(1, back)
            rows += merge.add_subwindow(counts, start, total)
    assert merge.to_bytes()[5] == 3  # the mixed sizes are still in the window
    assert rows == [r for r in brute_rows(groups, n_sub, k) if r[0] > (last + 1) * B_NS]
    # 6 s throughout, except at the odd ends after the change back to 1 s: the 2 s sub-window
    # straddling the window's start is left out (whole sub-windows in the last N)
    assert {r[6] for r in rows} == {5 * B_NS, 6 * B_NS}


def test_a_change_must_start_on_both_grids() -> None:
    topk = SubWindowTopK(4 * B_NS, B_NS, 2, time_based=True).set_granularity(2)
    topk.add_subwindow({"a": 1}, 10)
    with pytest.raises(ValueError, match="multiple of the granularities"):
        topk.set_granularity(3, 13)
    with pytest.raises(ValueError, match="before the open sub-window"):
        topk.set_granularity(1, 10)
    with pytest.raises(ValueError, match="does not start a sub-window of 2"):
        topk.add_subwindow({"a": 1}, 13)
    with pytest.raises(ValueError, match="time-based"):
        SubWindowTopK(4, 2, 1).set_granularity(2)
    assert topk.index == 12 and topk.set_granularity(3, 12).granularity == 3  # in force at once
