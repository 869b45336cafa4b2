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

Departures: the coarse step is left out. No operator of netmon changes its granularity at run
time yet, so there is no granularity to fix. The other kinds' windows (traffic, the joins) are
not turned either, for the same reason: they are held at their configured sizes and count
against the budget as they are.
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
    model: CostModel, cfg: Config, w: Workload, windows: Mapping[str, float], keep: Mapping[str, float]
) -> tuple[float, float, float]:
    """The configuration's estimated state rows, memory bytes and CPU s/s with the windows
    ``windows`` (:func:`window_key` -> seconds; the others as configured) and the drop boxes
    ``keep`` (a top-k query's; a distinct query is estimated unsampled, as
    ``CostModel.estimates`` does, whatever its window)."""
    rows = memory = cpu = 0.0
    topk = {q.name: q for q in cfg.queries.topk}
    distinct = {q.name: q for q in cfg.queries.distinct}
    for e in model.estimates(cfg, w):
        if e.kind == "topk" and (e.query in windows or keep.get(e.query, 1.0) < 1):
            q = topk[e.query]
            e = model.topk(
                w, dataclasses.replace(q, window_s=windows.get(q.name, q.window_s)), keep.get(q.name, 1.0)
            )
        elif e.kind == "distinct" and window_key("distinct", e.query) in windows:
            d = distinct[e.query]
            window_s = windows[window_key("distinct", d.name)]
            e = model.distinct(w, dataclasses.replace(d, window_s=window_s))
        rows += e.state_rows
        memory += e.memory_bytes
        cpu += e.cpu
    return rows, memory, cpu


def _estimates(
    model: CostModel, cfg: Config, w: Workload, f: float, keep: Mapping[str, float]
) -> tuple[dict[str, float], float, float]:
    """The windows at ``f`` and the configuration's total (memory bytes, CPU s/s) with them."""
    windows = {key: window_at(q, f) for key, q in ranged_queries(cfg).items()}
    _, memory, cpu = estimated(model, cfg, w, windows, keep)
    return windows, memory, cpu


def plan_windows(
    model: CostModel,
    cfg: Config,
    w: Workload,
    memory_bound: float,
    *,
    keep: Mapping[str, float] | None = None,
    tolerance: float = 1e-4,
) -> WindowPlan:
    """The largest shared ``f`` (within ``tolerance``) whose estimated memory, with every ranged
    top-k and distinct query's window at :func:`window_at` ``(q, f)``, is at most
    ``memory_bound`` (bytes);
    ``keep``: the drop boxes' fractions in force (their state is estimated at them). At ``f = 1``
    when everything fits; at ``f = 0``, ``feasible`` False, when even the smallest windows do not.
    """
    keep = dict(keep or {})
    windows, memory, cpu = _estimates(model, cfg, w, 1.0, keep)
    if memory <= memory_bound:
        return WindowPlan(1.0, windows, memory, cpu, True)
    windows, memory, cpu = _estimates(model, cfg, w, 0.0, keep)
    if memory > memory_bound:
        return WindowPlan(0.0, windows, memory, cpu, False)
    lo, hi = 0.0, 1.0  # fits at lo, not at hi
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        if _estimates(model, cfg, w, mid, keep)[1] <= memory_bound:
            lo = mid
        else:
            hi = mid
    windows, memory, cpu = _estimates(model, cfg, w, lo, keep)
    return WindowPlan(lo, windows, memory, cpu, True)
