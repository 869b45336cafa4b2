"""Seed 004 §4.3's fine step (``analytics.window_plan``): the windows of the ranged top-k queries
at the largest shared f that fits a memory budget, against an enumeration of every f at which
a window changes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.cost_model import DEFAULT_CONSTANTS, CostModel, Workload
from analytics.window_plan import plan_windows, window_at
from netmon.config import Config, TopKQuery

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
