"""The granularity operator Γ for distinct counts (seed 004's CKSV granularity, ``analytics.granularity``):
``SubWindowDistinct.slide(m)``, ``distinct_reports(granularity=...)`` and the carried stage 3 fed
the pipeline's way (``SlidingCoupons``, each fine sketch filed under its coarse sub-window's last
fine one), against brute-force oracles that share no code with them.

Random fine streams (sub-windows of ``b``), a random starting granularity and random changes asked
at random fine instants, each in force at the first index at or after the ask that is a multiple
of both granularities (``plan_change``, the top-k kind's rule). The oracle walks the coarse
sub-windows of the resulting schedule contiguously and reports, at each coarse end ``E``, the
coarse sub-windows that *end* in ``[E − N, E)`` (the distinct kind's rule: a coarse sub-window
straddling the window's start stays until it ends out of it), the span they cover (``N`` when the
window reaches before the first sub-window: empty traffic there), and per group the exact
distinct count or the settled union of the fine sub-windows' own sketches built afresh: the
sketch of the union computed directly. Across a save and restore; old state bytes still load.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa
import pytest
from datasketches import hll_sketch, hll_union
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.distinct import HLL_TYPE, SubWindowDistinct, java_round
from analytics.distinct_offline import distinct_reports
from analytics.distinct_queries import DistinctQuery
from analytics.granularity import FROM_START, plan_change

B_NS = 10**9
#: fine sub-window -> [(group, item)], in arrival order
Stream = dict[int, list[tuple[str, str]]]

streams = st.dictionaries(
    st.integers(0, 40),
    st.lists(st.tuples(st.sampled_from("gh"), st.integers(0, 30).map(str)), min_size=1, max_size=12),
    min_size=1,
    max_size=25,
)
asks = st.lists(st.tuples(st.integers(-2, 44), st.integers(1, 4)), max_size=4)


def schedule_of(first_m: int, asked: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The schedule the asks (fine instant, m), made in order of their instants, give."""
    schedule = [(FROM_START, first_m)]
    for f, m in sorted(asked, key=lambda fm: fm[0]):
        schedule = plan_change(schedule, f, m)[1]
    return schedule


def m_at(schedule: list[tuple[int, int]], index: int) -> int:
    return [m for start, m in schedule if start <= index][-1]


def coarse_subs(first: int, upto: int, schedule: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, m)`` of every coarse sub-window from the one holding ``first`` to the last
    ending by ``upto`` (inclusive, fine), contiguously."""
    m = m_at(schedule, first)
    start = first // m * m
    out = []
    while start + m_at(schedule, start) - 1 <= upto:
        m = m_at(schedule, start)
        out.append((start, m))
        start += m
    return out


def brute(
    stream: Stream, n_sub: int, subs: list[tuple[int, int]], lg_k: int | None
) -> list[tuple[int, int, dict[str, int]]]:
    """``(end_ns, window_ns, {group: distinct})`` at every coarse end whose window holds an item."""
    rows = []
    for j, (start, m) in enumerate(subs):
        end = start + m
        kept = [(s, x) for s, x in subs[: j + 1] if s + x > end - n_sub]
        span = max(end - kept[0][0], n_sub)
        fine = [i for s, x in kept for i in range(s, s + x)]
        pairs = [(g, item) for i in fine for g, item in stream.get(i, [])]
        if not pairs:
            continue
        counts = {}
        for g in sorted({g for g, _ in pairs}):
            if lg_k is None:
                counts[g] = len({item for gg, item in pairs if gg == g})
                continue
            u = hll_union(lg_k)
            for i in fine:  # one sketch per fine sub-window, united afresh
                mine = [item for gg, item in stream.get(i, []) if gg == g]
                if mine:
                    sk = hll_sketch(lg_k, HLL_TYPE)
                    for item in mine:
                        sk.update(item)
                    u.update(sk)
            u.update(u.get_result(HLL_TYPE))  # settled
            counts[g] = java_round(u.get_estimate())
        rows.append((end * B_NS, span * B_NS, counts))
    return rows


@settings(max_examples=200, deadline=None)
@given(
    stream=streams,
    n_sub=st.integers(1, 8),
    first_m=st.integers(1, 3),
    asked=asks,
    exact=st.booleans(),
    saved_at=st.integers(0, 30),
)
def test_mixed_sub_windows_equal_brute_force(stream, n_sub, first_m, asked, exact, saved_at) -> None:
    """The engine slid through every coarse sub-window of the schedule, the fine items united into
    it, saved and restored before one of them (maybe in the middle of a change)."""
    lg_k = None if exact else 4  # HLL mode from 8 items: unions of registers, not only coupons
    schedule = schedule_of(first_m, asked)
    subs = coarse_subs(min(stream), max(stream) + 3, schedule)
    sw = SubWindowDistinct(n_sub * B_NS, B_NS, lg_k=lg_k or 12, exact=exact)
    rows = []
    for j, (start, m) in enumerate(subs):
        if j == saved_at:  # a restart
            sw = SubWindowDistinct.from_bytes(sw.to_bytes())
        for i in range(start, start + m):
            for g, item in stream.get(i, []):
                sw.update(item, g)
        sw.slide(m)
        if not sw.is_empty():
            rows.append(((start + m) * B_NS, sw.window_held, sw.report()))
    assert rows == brute(stream, n_sub, subs, lg_k)


@settings(max_examples=150, deadline=None)
@given(stream=streams, n_sub=st.integers(1, 8), first_m=st.integers(1, 3), asked=asks)
def test_the_offline_twin_takes_the_schedule(stream, n_sub, first_m, asked) -> None:
    """``distinct_reports(granularity=...)``: one report per closed coarse sub-window, its length
    (``sub_window_ns``) and the span held; the driver jumps over the gaps of the stream (the
    engine idles) only as far as the window's start cannot tell."""
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
    schedule = schedule_of(first_m, asked)
    reports = list(distinct_reports([batch], q, exact=True, close_after_ns=4 * B_NS, granularity=schedule))
    got = [(r.end_ns, r.window_ns, dict(r.groups)) for r in reports]
    subs = coarse_subs(min(stream), max(stream) + 3, schedule)
    assert got == brute(stream, n_sub, subs, None)
    assert [r.sub_window_ns for r in reports] == [
        m_at(schedule, r.end_ns // B_NS - 1) * B_NS for r in reports
    ]


def test_the_offline_twin_refuses_a_schedule_with_window_changes() -> None:
    q = DistinctQuery(name="d", count="src_ip", window_s=4, sub_window_s=1)
    with pytest.raises(ValueError, match="not with window changes"):
        distinct_reports([], q, changes={3: 2 * B_NS}, granularity=[(FROM_START, 1), (4, 2)])


def _filed(rows, schedule):
    """The pipeline's filing: each fine sketch under its coarse sub-window's last fine one."""
    out = []
    for g, idx, sk in rows:
        m = m_at(schedule, idx)
        out.append((g, idx // m * m + m - 1, sk))
    return out


@pytest.mark.parametrize(("k", "lg_k", "seed"), [(4, 8, 1), (6, 12, 2), (6, 4, 3), (12, 8, 4)])
def test_the_carried_stage_3_unites_coarse_sub_windows_as_their_union_computed_directly(
    k, lg_k, seed
) -> None:
    """``SlidingCoupons`` fed batch by batch as ``pipeline.distinct`` feeds it under Γ: the fine
    sketches of a sub-window closed so far filed under their coarse sub-window's last fine one (a
    coarse sub-window still open waits in the carry), the windows read at coarse ends only, a
    restart rebuilt from the fine sketches ``max m − 1`` further back. Each coarse end's count is
    the settled union, computed directly, of every fine sketch of the coarse sub-windows that end
    in the window."""
    from analytics.sketch_carry import SlidingCoupons
    from tests.analytics.test_sketch_carry import _arrays, _expand
    from tests.analytics.test_sketch_windows import _traffic

    span = 5 * k
    rows = _traffic(seed=seed, k=k, span=span, lg_k=lg_k)
    rng = random.Random(seed)
    # coarser (2, then 3 when k allows), then back to the finest: k a multiple of each m
    schedule = [(FROM_START, 1)]
    for f, m in ((k, 2), (2 * k + 1, 3 if k % 3 == 0 else 2), (4 * k - 1, 1)):
        schedule = plan_change(schedule, f, m)[1]
    slack = max(m for _, m in schedule) - 1
    lo, hi = -2 * k, span + k
    cuts = sorted({lo, hi, *rng.sample(range(lo + 1, hi), 9)})
    carry = SlidingCoupons(k, lg_k, lo)
    got: dict = {}
    for n, cut in enumerate(cuts[1:], start=1):
        if n == 5:  # a new process: rebuilt from the stored fine sketches
            first = carry.lo - k - slack
            fresh = SlidingCoupons(k, lg_k, carry.lo - k)
            again = [
                r
                for r in _filed([r for r in rows if first < r[1] <= carry.lo], schedule)
                if r[1] > carry.lo - k
            ]
            if again:
                fresh.update(*_arrays(again))
            fresh.seek(carry.lo, answers=False)
            np.testing.assert_array_equal(fresh.keys, carry.keys)
            np.testing.assert_array_equal(fresh.last, carry.last)
            carry = fresh
        batch = _filed([r for r in rows if carry.lo < r[1] <= cut], schedule)
        if batch:
            carry.update(*_arrays(batch))
        part = {key: x for key, x in _expand(carry.seek(cut)).items() if _closes(key[1], schedule)}
        assert not set(part) & set(got)
        got |= part
    expected = {}
    filed = _filed(rows, schedule)  # the coarse sub-window's end of each fine sketch (the oracle's
    # own arithmetic, as in _closes)
    for g in sorted({g for g, _, _ in rows}):
        own = [(end, sk) for gg, end, sk in filed if gg == g]
        for i in range(lo + 1, hi + 1):
            if not _closes(i, schedule):
                continue
            mine = [sk for end, sk in own if i - k < end <= i]
            if mine:
                u = hll_union(lg_k)
                for sk in mine:
                    u.update(hll_sketch.deserialize(sk))
                u.update(u.get_result(HLL_TYPE))
                expected[(g, i)] = java_round(u.get_estimate())
    assert got == expected
    assert {m_at(schedule, i) for _, i in got} == ({1, 2, 3} if k % 3 == 0 else {1, 2})


def _closes(i: int, schedule: list[tuple[int, int]]) -> bool:
    """Whether fine index ``i`` ends a coarse sub-window of the schedule."""
    m = m_at(schedule, i)
    return (i + 1) % m == 0 and m_at(schedule, i + 1 - m) == m


def test_old_state_bytes_load_and_go_on_with_coarse_sub_windows() -> None:
    """A state written before Γ (version 1: every sub-window one b, written by hand here as the
    old writer did) loads and goes on with coarse sub-windows; a state without a coarse one is
    still written in the old versions; a coarse one's lengths survive a save and restore."""
    head = struct.Struct("<4sBBBqqq")

    def syn(items: list[str]) -> bytes:
        return (
            b"NXS\x01"
            + struct.pack("<I", len(items))
            + b"".join(struct.pack("<I", len(x)) + x.encode() for x in sorted(items))
        )

    def sub(groups: dict[str, list[str]]) -> bytes:
        out = struct.pack("<I", len(groups))
        for g, items in groups.items():
            raw = syn(items)
            out += struct.pack("<I", len(g)) + g.encode() + struct.pack("<I", len(raw)) + raw
        return out

    subs = [{"g": ["a"]}, {"g": ["b"]}, {}, {"g": ["c"]}]  # three closed, the open one last
    old = head.pack(b"NSWD", 1, True, 12, 4, 1, 3) + struct.pack("<I", len(subs)) + b"".join(map(sub, subs))
    sw = SubWindowDistinct.from_bytes(old)
    assert sw.report() == {"g": 2} and sw.window_held == 4 and sw.to_bytes() == old
    sw.slide(2)  # the open one (c) closes as a sub-window of 2: a's ends out of the window
    assert sw.report() == {"g": 2} and sw.window_held == 4
    data = sw.to_bytes()
    assert data[4] == 3  # the version with sub-window lengths
    back = SubWindowDistinct.from_bytes(data)
    assert back._sizes == sw._sizes and back.to_bytes() == data
    back.update("d", "g").slide(2)  # b and the empty one leave: c, d
    assert back.report() == {"g": 2} and back.window_held == 4
    growing = SubWindowDistinct(4, 1, exact=True).resize(2).resize(4).update("x").slide()
    assert growing.to_bytes()[4] == 2  # growing, all of one b: version 2 as before
    with pytest.raises(ValueError, match="sub-window lengths"):
        SubWindowDistinct.from_bytes(data[:-4] + struct.pack("<I", 0))
