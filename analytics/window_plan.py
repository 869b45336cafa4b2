"""Window reduction under a memory budget: seed 004's §4.3 strategy, its fine step.

Cammert et al. (§4.3, digest B.6) give every window and granularity knob a QoS range
``[min, max]`` and set each to the allowed value closest to ``min + f·(max − min)`` with one
shared ``f ∈ [0, 1]``: a coarse step over ``f = (p − j)/p`` fixes the granularities, then a
**bisection on f** sets the windows, the largest ``f`` whose estimates fit the budgets. The
strategy needs cost monotone in ``f``, which holds for the operators here (state grows with the
window; the estimates are non-decreasing in ``N``).

:func:`plan_windows` is that fine step for the top-k and distinct queries that have a QoS
range (``window_range_s``), one shared ``f`` over all of them: their window is the knob netmon
can turn at run time (``netmon tune --window``, ``pipeline.window_knobs``). A window must be a
multiple of its sub-window, so "the allowed value closest" is taken *below* ``min + f·(max −
min)`` (never above: the estimate stays monotone in ``f`` and a chosen plan never exceeds what
``f`` allows). Windows are keyed as in the control file (:func:`window_key`): a top-k query's
name, ``distinct/<name>`` for a distinct query (the two kinds' names may coincide).

The coarse step (``p`` > 0) comes first: for ``j = 0..p``, ``f = (p − j)/p``, every ranged top-k
and distinct query's sub-window is the allowed factor ``m`` (:func:`factors_allowed`) whose
``m·b`` is closest to ``coarsest + f·(finest − coarsest)`` (:func:`factor_at`; for granularity
min = coarsest) and every window is at ``f``; the first ``j`` whose estimated state fits fixes
the granularities, then the bisection sets the windows (multiples of the fixed sub-windows). The
kinds' granularity operators Γ take them (``pipeline.topk``, ``pipeline.distinct``, ``netmon
tune --granularity``; a distinct query's factor keyed ``distinct/<name>``).

Departures: the other kinds' granularity and windows (traffic, the joins) are not turned: they
are held at their configured sizes and count against the budget as they are. A coarser
sub-window is not always cheaper here: stage 1 keeps counting at the finest one, so the open
partial counts grow with ``m`` while the lists shrink (``CostModel.topk``); CKSV's strategy
assumes cost monotone in ``f`` and the coarse step simply takes the first ``j`` that fits. The
distinct estimate counts the ``N/(m·b)`` sketches per group Γ unites (``CostModel.distinct``),
not the fine sketches stage 1 stores for a restart (they were not counted before Γ either).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from analytics.cost_model import CostModel, Workload
from netmon.config import Config, DistinctQuery, TopKQuery

__all__ = [
    "DISTINCT_PREFIX",
    "WindowPlan",
    "estimated",
    "factor_at",
    "factors_allowed",
    "plan_windows",
    "ranged_queries",
    "window_at",
    "window_key",
]

#: A distinct query's key among the windows (the control file's, the plan's): ``distinct/<name>``.
DISTINCT_PREFIX = "distinct/"


def window_key(kind: str, name: str) -> str:
    """The key of query ``name`` of ``kind`` (``"topk"`` or ``"distinct"``) among the windows.

    >>> window_key("topk", "top-sources"), window_key("distinct", "ddos")
    ('top-sources', 'distinct/ddos')
    """
    if kind not in ("topk", "distinct"):
        raise ValueError(f"kind: expected 'topk' or 'distinct', got {kind!r}")
    return DISTINCT_PREFIX + name if kind == "distinct" else name


def ranged_queries(cfg: Config) -> dict[str, TopKQuery | DistinctQuery]:
    """The top-k and distinct queries with a QoS range (``window_range_s``), by :func:`window_key`."""
    out: dict[str, TopKQuery | DistinctQuery] = {}
    for kind, queries in (("topk", cfg.queries.topk), ("distinct", cfg.queries.distinct)):
        out.update({window_key(kind, q.name): q for q in queries if q.window_range_s})
    return out


@dataclass(frozen=True)
class WindowPlan:
    """The shared ``f``, the window chosen per ranged query (seconds, by :func:`window_key`), and
    the estimates."""

    f: float
    windows: dict[str, float]
    memory_bytes: float
    cpu: float
    #: False: even every window at its minimum is estimated over the budget
    feasible: bool
    #: the coarse step's sub-window factors (query -> m > 1; empty: every query at its finest)
    granularity: dict[str, int] = dataclasses.field(default_factory=dict)


def factors_allowed(q: TopKQuery | DistinctQuery, max_factor: float) -> tuple[int, ...]:
    """The whole factors ``m`` (1 up to ``max_factor``) a top-k or distinct query's sub-window may
    take at any window the plan may choose: ``m·b`` divides its ``window_s`` and its range's minimum.

    >>> q = TopKQuery(name="t", window_s=12.0, sub_window_s=1.0, window_range_s=(4.0, 12.0))
    >>> factors_allowed(q, 4.0), factors_allowed(q, 2.5)
    ((1, 2, 4), (1, 2))
    """
    b_us = round(q.sub_window_s * 1e6)
    sizes = [round(q.window_s * 1e6)] + ([round(q.window_range_s[0] * 1e6)] if q.window_range_s else [])
    return tuple(m for m in range(1, int(max_factor) + 1) if all(n % (m * b_us) == 0 for n in sizes))


def factor_at(q: TopKQuery | DistinctQuery, f: float, max_factor: float) -> int:
    """Query ``q``'s sub-window factor at the shared ``f``: the allowed one whose sub-window is
    closest to ``coarsest + f·(finest − coarsest)`` (CKSV's ``min + f·(max − min)`` with, for a
    granularity, min = coarsest: ``f = 1`` is the finest), the finer one on a tie.

    >>> q = TopKQuery(name="t", window_s=12.0, sub_window_s=1.0, window_range_s=(4.0, 12.0))
    >>> [factor_at(q, f, 4.0) for f in (1.0, 0.75, 0.5, 0.25, 0.0)]
    [1, 2, 2, 4, 4]
    """
    allowed = factors_allowed(q, max_factor)
    target = allowed[-1] + min(max(f, 0.0), 1.0) * (allowed[0] - allowed[-1])
    return min(allowed, key=lambda m: (abs(m - target), m))


def window_at(q: TopKQuery | DistinctQuery, f: float) -> float:
    """Query ``q``'s window at the shared fraction ``f``: the largest multiple of its sub-window
    at or below ``min + f·(max − min)`` of its ``window_range_s`` (its ``window_s`` without one).

    >>> q = TopKQuery(name="t", window_s=10.0, sub_window_s=1.0, window_range_s=(2.0, 10.0))
    >>> [window_at(q, f) for f in (0.0, 0.5, 0.99, 1.0)]
    [2.0, 6.0, 9.0, 10.0]
    """
    if not q.window_range_s:
        return q.window_s
    lo, hi = q.window_range_s
    target = lo + min(max(f, 0.0), 1.0) * (hi - lo)
    b_us = round(q.sub_window_s * 1e6)
    # whole microseconds, as the pipeline keeps them; lo is itself a multiple (the config checks)
    n_us = max(round(lo * 1e6), int(math.floor(target * 1e6 + 1e-6)) // b_us * b_us)
    return n_us / 1e6


def estimated(
    model: CostModel,
    cfg: Config,
    w: Workload,
    windows: Mapping[str, float],
    keep: Mapping[str, float],
    granularity: Mapping[str, int] | None = None,
) -> tuple[float, float, float]:
    """The configuration's estimated state rows, memory bytes and CPU s/s with the windows
    ``windows`` (:func:`window_key` -> seconds; the others as configured), the drop boxes
    ``keep`` (a top-k query's; a distinct query is estimated unsampled, as
    ``CostModel.estimates`` does, whatever its window) and the sub-window factors ``granularity``
    (:func:`window_key` -> m; absent: 1)."""
    rows = memory = cpu = 0.0
    grain = dict(granularity or {})
    topk = {q.name: q for q in cfg.queries.topk}
    distinct = {q.name: q for q in cfg.queries.distinct}
    for e in model.estimates(cfg, w):
        if e.kind == "topk" and (e.query in windows or keep.get(e.query, 1.0) < 1 or e.query in grain):
            q = topk[e.query]
            e = model.topk(
                w,
                dataclasses.replace(q, window_s=windows.get(q.name, q.window_s)),
                keep.get(q.name, 1.0),
                m=grain.get(q.name, 1),
            )
        elif e.kind == "distinct" and ((key := window_key("distinct", e.query)) in windows or key in grain):
            d = distinct[e.query]
            window_s = windows.get(key, d.window_s)
            e = model.distinct(w, dataclasses.replace(d, window_s=window_s), m=grain.get(key, 1))
        rows += e.state_rows
        memory += e.memory_bytes
        cpu += e.cpu
    return rows, memory, cpu


def _estimates(
    model: CostModel,
    cfg: Config,
    w: Workload,
    f: float,
    keep: Mapping[str, float],
    granularity: Mapping[str, int] | None = None,
) -> tuple[dict[str, float], float, float]:
    """The windows at ``f`` (multiples of the sub-windows ``granularity`` fixes) and the
    configuration's total (memory bytes, CPU s/s) with them."""
    grain = dict(granularity or {})
    windows = {}
    for key, q in ranged_queries(cfg).items():
        m = grain.get(key, 1)
        coarse = dataclasses.replace(q, sub_window_s=q.sub_window_s * m) if m > 1 else q
        windows[key] = window_at(coarse, f)
    _, memory, cpu = estimated(model, cfg, w, windows, keep, grain)
    return windows, memory, cpu


def _coarse_step(
    model: CostModel,
    cfg: Config,
    w: Workload,
    memory_bound: float,
    keep: Mapping[str, float],
    p: int,
    max_factor: float,
) -> dict[str, int]:
    """Seed 004 §4.3's coarse step: the granularities of the first ``j = 0..p`` (``f = (p − j)/p``)
    whose estimate, every knob at that ``f``, fits; the coarsest when none does."""
    ranged = ranged_queries(cfg)  # the top-k and the distinct queries: one shared f
    grain: dict[str, int] = {}
    for j in range(p + 1):
        f = (p - j) / p
        grain = {key: m for key, q in ranged.items() if (m := factor_at(q, f, max_factor)) > 1}
        if _estimates(model, cfg, w, f, keep, grain)[1] <= memory_bound:
            break
    return grain


def plan_windows(
    model: CostModel,
    cfg: Config,
    w: Workload,
    memory_bound: float,
    *,
    keep: Mapping[str, float] | None = None,
    tolerance: float = 1e-4,
    p: int = 0,
    max_factor: float = 1.0,
) -> WindowPlan:
    """The largest shared ``f`` (within ``tolerance``) whose estimated memory, with every ranged
    top-k and distinct query's window at :func:`window_at` ``(q, f)``, is at most
    ``memory_bound`` (bytes);
    ``keep``: the drop boxes' fractions in force (their state is estimated at them). At ``f = 1``
    when everything fits; at ``f = 0``, ``feasible`` False, when even the smallest windows do not.

    ``p > 0``: the coarse step first (module docstring): the ranged top-k and distinct queries'
    sub-window factors (up to ``max_factor``) of the first ``f = (p − j)/p`` that fits, then the bisection
    with them fixed (:attr:`WindowPlan.granularity`).
    """
    keep = dict(keep or {})
    windows, memory, cpu = _estimates(model, cfg, w, 1.0, keep)
    if memory <= memory_bound:
        return WindowPlan(1.0, windows, memory, cpu, True)
    grain = _coarse_step(model, cfg, w, memory_bound, keep, p, max_factor) if p > 0 else {}
    windows, memory, cpu = _estimates(model, cfg, w, 1.0, keep, grain)
    if memory <= memory_bound:
        return WindowPlan(1.0, windows, memory, cpu, True, grain)
    windows, memory, cpu = _estimates(model, cfg, w, 0.0, keep, grain)
    if memory > memory_bound:
        return WindowPlan(0.0, windows, memory, cpu, False, grain)
    lo, hi = 0.0, 1.0  # fits at lo, not at hi
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        if _estimates(model, cfg, w, mid, keep, grain)[1] <= memory_bound:
            lo = mid
        else:
            hi = mid
    windows, memory, cpu = _estimates(model, cfg, w, lo, keep, grain)
    return WindowPlan(lo, windows, memory, cpu, True, grain)
