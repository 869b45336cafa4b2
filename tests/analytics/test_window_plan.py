"""Seed 004 §4.3's fine step (``analytics.window_plan``): the windows of the ranged top-k queries
at the largest shared f that fits a memory budget, against an enumeration of every f at which
a window changes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.cost_model import DEFAULT_CONSTANTS, CostModel, Workload
from analytics.window_plan import estimated, plan_windows, ranged_queries, window_at
from netmon.config import Config, DistinctQuery, TopKQuery

MODEL = CostModel(DEFAULT_CONSTANTS, watermark_s=5.0)


def _config(ranges: list[tuple[int, int, int]]) -> Config:
    """Top-k queries with ranges [lo, hi] in sub-windows of b seconds, and one without a range."""
    queries = [
        TopKQuery(
            name=f"q{i}",
            key="src_ip",
            k=20,
            window_s=float(hi * b),
            sub_window_s=float(b),
            window_range_s=(float(lo * b), float(hi * b)),
        )
        for i, (lo, hi, b) in enumerate(ranges)
    ]
    queries.append(TopKQuery(name="fixed", key="dst_ip", window_s=10.0))
    return Config().replace(queries={"topk": tuple(queries)}, pipeline={"kinds": ("traffic", "topk")})


def _memory(cfg: Config, w: Workload, windows: dict[str, float]) -> float:
    total = 0.0
    for e in MODEL.estimates(cfg, w):
        if e.kind == "topk" and e.query in windows:
            q = next(q for q in cfg.queries.topk if q.name == e.query)
            e = MODEL.topk(w, dataclasses.replace(q, window_s=windows[e.query]))
        total += e.memory_bytes
    return total


@settings(max_examples=60, deadline=None)
@given(
    ranges=st.lists(
        st.tuples(st.integers(1, 5), st.integers(6, 40), st.sampled_from([1, 2, 5])), min_size=1, max_size=3
    ),
    rate=st.sampled_from([500.0, 5_000.0, 50_000.0]),
    share=st.floats(-0.2, 1.2),
)
def test_the_plan_is_the_largest_f_that_fits(
    ranges: list[tuple[int, int, int]], rate: float, share: float
) -> None:
    cfg = _config(ranges)
    w = Workload(rate_pps=rate, key_cardinality=50_000)
    ranged = [q for q in cfg.queries.topk if q.window_range_s]
    # The oracle: every f at which some window steps (a window is constant between them).
    steps = {0.0, 1.0}
    for q in ranged:
        lo, hi = q.window_range_s
        n = round((hi - lo) / q.sub_window_s)
        steps |= {j / n for j in range(n + 1)}
    at = {f: {q.name: window_at(q, f) for q in ranged} for f in sorted(steps)}
    low, high = _memory(cfg, w, at[0.0]), _memory(cfg, w, at[1.0])
    bound = low + share * (high - low)
    fits = [f for f, windows in at.items() if _memory(cfg, w, windows) <= bound]
    plan = plan_windows(MODEL, cfg, w, bound)
    if not fits:
        assert not plan.feasible and plan.f == 0.0 and plan.windows == at[0.0]
        return
    best = max(fits)
    assert plan.feasible and plan.windows == at[best]
    assert plan.memory_bytes == pytest.approx(_memory(cfg, w, at[best])) and plan.memory_bytes <= bound
    # maximal: the next step up does not fit (or there is none)
    above = [f for f in at if f > best]
    if above:
        assert _memory(cfg, w, at[min(above)]) > bound
    # every window in its range, a multiple of its sub-window; the unranged query untouched
    for q in ranged:
        lo, hi = q.window_range_s
        got = plan.windows[q.name]
        assert lo <= got <= hi and round(got / q.sub_window_s, 9).is_integer()
    assert "fixed" not in plan.windows


def test_memory_is_monotone_in_f_and_the_window_follows_the_range() -> None:
    cfg = _config([(2, 30, 1), (1, 12, 5)])
    w = Workload(rate_pps=20_000, key_cardinality=100_000)
    grid = [i / 200 for i in range(201)]
    memories = [
        _memory(cfg, w, {q.name: window_at(q, f) for q in cfg.queries.topk if q.window_range_s}) for f in grid
    ]
    assert memories == sorted(memories) and memories[0] < memories[-1]
    q = cfg.queries.topk[1]  # [5, 60] s in 5-s sub-windows
    assert [window_at(q, f) for f in (0.0, 0.1, 0.5, 1.0)] == [5.0, 10.0, 30.0, 60.0]
    assert window_at(cfg.queries.topk[-1], 0.3) == 10.0  # no range: its window


def _mixed(topk: tuple[int, int, int], distinct: tuple[int, int, int]) -> Config:
    """A ranged top-k and a ranged distinct query ([lo, hi] in sub-windows of b s) of the same
    name, and a distinct query without a range."""
    (tlo, thi, tb), (dlo, dhi, db) = topk, distinct
    return Config().replace(
        queries={
            "topk": (
                TopKQuery(
                    name="x", k=20, window_s=thi * tb, sub_window_s=tb, window_range_s=(tlo * tb, thi * tb)
                ),
            ),
            "distinct": (
                DistinctQuery(
                    name="x", window_s=dhi * db, sub_window_s=db, window_range_s=(dlo * db, dhi * db)
                ),
                DistinctQuery(name="fixed", window_s=60.0),
            ),
        },
        pipeline={"kinds": ("traffic", "topk", "distinct")},
    )


def _mixed_memory(cfg: Config, w: Workload, windows: dict[str, float]) -> float:
    total = 0.0
    for e in MODEL.estimates(cfg, w):
        if e.kind == "topk" and e.query in windows:
            e = MODEL.topk(w, dataclasses.replace(cfg.queries.topk[0], window_s=windows[e.query]))
        if e.kind == "distinct" and f"distinct/{e.query}" in windows:
            d = next(q for q in cfg.queries.distinct if q.name == e.query)
            e = MODEL.distinct(w, dataclasses.replace(d, window_s=windows[f"distinct/{e.query}"]))
        total += e.memory_bytes
    return total


@settings(max_examples=40, deadline=None)
@given(
    topk=st.tuples(st.integers(1, 5), st.integers(6, 30), st.sampled_from([1, 2])),
    distinct=st.tuples(st.integers(1, 10), st.integers(11, 60), st.sampled_from([1, 5])),
    rate=st.sampled_from([500.0, 20_000.0]),
    share=st.floats(-0.2, 1.2),
)
def test_one_shared_f_over_top_k_and_distinct_windows(topk, distinct, rate, share) -> None:
    """Distinct queries with a ``window_range_s`` take part (issue 18 item 4): one f for both
    kinds, keyed as the control file (``distinct/<name>``), the largest that fits."""
    cfg = _mixed(topk, distinct)
    w = Workload(rate_pps=rate, key_cardinality=50_000, group_cardinality=2_000)
    ranged = ranged_queries(cfg)
    assert set(ranged) == {"x", "distinct/x"}
    steps = {0.0, 1.0}
    for q in ranged.values():
        lo, hi = q.window_range_s
        n = round((hi - lo) / q.sub_window_s)
        steps |= {j / n for j in range(n + 1)}
    at = {f: {key: window_at(q, f) for key, q in ranged.items()} for f in sorted(steps)}
    low, high = _mixed_memory(cfg, w, at[0.0]), _mixed_memory(cfg, w, at[1.0])
    assert low < high  # the distinct window moves the estimate too
    bound = low + share * (high - low)
    fits = [f for f, windows in at.items() if _mixed_memory(cfg, w, windows) <= bound]
    plan = plan_windows(MODEL, cfg, w, bound)
    if not fits:
        assert not plan.feasible and plan.windows == at[0.0]
        return
    best = max(fits)
    assert plan.feasible and plan.windows == at[best]
    above = [f for f in at if f > best]
    if above:
        assert _mixed_memory(cfg, w, at[min(above)]) > bound
    assert "distinct/fixed" not in plan.windows


def test_a_distinct_window_alone_moves_the_estimate() -> None:
    cfg = _mixed((1, 6, 1), (10, 60, 1))
    w = Workload(rate_pps=10_000, group_cardinality=5_000)
    memories = [_mixed_memory(cfg, w, {"distinct/x": float(s)}) for s in (10, 30, 60)]
    assert memories == sorted(memories) and memories[0] < memories[-1]
    assert estimated(MODEL, cfg, w, {"distinct/x": 30.0}, {})[1] == pytest.approx(memories[1])
