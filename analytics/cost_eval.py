"""The cost-model seeds' numbers reproduced by netmon's own code: ``netmon eval cost-model``.

Four reproductions, each figure beside the paper's with a tolerance and a verdict (:class:`Check`):

- **[AN] Example 1** (seed 000, Ayad & Naughton, SIGMOD 2004; digest A.5): the three plans of
  Figure 3 for ``A ⋈ B ⋈ C`` built with :mod:`analytics.plan` (:func:`example1_plans`), their loads
  250 / 280 / 900 tuples/s (``plan_cost`` at c = 1) and memories 80 / 50 / 130 tuples
  (``plan_memory``), and which plans are feasible at c = 0.5, 4 and 5 ms per tuple
  (``is_feasible``). Exact.
- **[AN] Figure 7** (§5.2; digest A.8): the optimum throughput of each plan under drop boxes at a
  capacity of R tuples/s (``DropBoxPlacement``, the fractional knapsack) and where the curves meet,
  found by bisection on those throughputs (:func:`boundary`): plan (a) drops nothing down to
  R = 250, (b) = (c) at R = 47.5, (a) = (c) at R = 20, all three alike from R = 10 down. Exact.
- **[CKSV] E1** (seed 004, Cammert, Krämer, Seeger, Vaupel; §4.2 adaptation delays, §5 Fig. 7;
  digest B.6, B.7): a join window changed 60 → 30 → 60 s at t = 80 and 150 s. Its state shrinks
  from 110 s, is at the new size from 140 s, grows from 180 s and is whole again at 210 s.
  :func:`adaptation_timeline` derives these instants from the change schedule by following the
  arrival instants a time window holds (:func:`window_span`), not from the paper's formula.
  Exact.
- **[CKSV] E3** (§5, Figs. 9–11; digest B.7): window reduction against random load shedding,
  measured on :class:`analytics.join.SymmetricHashJoin`. An equi-join of two Poisson streams of
  uniform keys in [0, 49] at 100 tuples/s each, with 10 s windows, is run whole, with the windows
  halved to 5 s (WR), and with each tuple kept with probability ½ (LS: coin flipping,
  :class:`analytics.shedding.LoadShedder`). Both save half the memory (state tuples). WR keeps ½ of
  the results and LS ¼ (the paper's ratios, ±0.05). WR's results are exactly the full join's pairs
  with |Δt| ≤ 5 s. The full run's result rate is the digest's derived 4000/s (±5 %). The paper's
  CPU ratios (½ and ¼) are not checked: they hold only when the probe and result terms dominate
  (digest B.7), and a timing is not a reproducible figure.

References
----------
.. [AN] A. Ayad, J. F. Naughton, "Static Optimization of Conjunctive Queries with Sliding Windows
   over Unbounded Streaming Information Sources", SIGMOD 2004: Example 1, Figure 3, §5.2 and
   Figure 7.
.. [CKSV] M. Cammert, J. Krämer, B. Seeger, S. Vaupel, "A Cost Model for Adaptive Resource
   Management in Data Stream Systems": §4.2 (adaptation delays), §5 E1 (Fig. 7), E3 (Figs. 9–11).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from analytics.join import SymmetricHashJoin
from analytics.plan import DropBoxPlacement, Join, Node, Stream, is_feasible, plan_cost, plan_memory
from analytics.shedding import LoadShedder

__all__ = [
    "EXACT",
    "Check",
    "CostEvaluation",
    "E3Result",
    "E3Run",
    "WindowChange",
    "adaptation_timeline",
    "boundary",
    "e1_checks",
    "e3_checks",
    "e3_measure",
    "e3_streams",
    "evaluate",
    "example1_checks",
    "example1_plans",
    "figure7_checks",
    "format_table",
    "throughput",
    "window_span",
]

#: The tolerance of a figure reproduced exactly (floating point only).
EXACT = 1e-6
_NS = 1_000_000_000
#: E1's protocol: a 60 s window, 30 s from t = 80 s, 60 s again from t = 150 s ([CKSV] §5).
E1_INITIAL_S = 60.0
E1_CHANGES = ((80.0, 30.0), (150.0, 60.0))


@dataclass(frozen=True)
class Check:
    """One figure of a paper beside netmon's.

    ``paper`` and ``ours`` are numbers (``ok`` within ``tolerance``, absolute) or text (``ok`` when
    equal). ``source`` says where the paper's figure is (and when the figure is the digest's
    derivation rather than the paper's own).
    """

    experiment: str
    figure: str
    paper: float | str
    ours: float | str
    tolerance: float
    source: str

    @property
    def ok(self) -> bool:
        if isinstance(self.paper, str) or isinstance(self.ours, str):
            return self.paper == self.ours
        return math.isfinite(self.ours) and abs(self.ours - self.paper) <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


# -- [AN] Example 1 and Figure 7 -----------------------------------------------------------------


def example1_plans(cost_s: float) -> dict[str, Node]:
    """[AN] Example 1's plans (Figure 3; digest A.5): ``A ⋈ B ⋈ C`` with tuple windows of 10 on
    each stream, λ = 10, 20, 70 tuples/s, f(A⋈B) = 0.5, f(B⋈C) = 0.2 and no A–C predicate; each
    join spends ``cost_s`` per arriving tuple.

    (a) ``(A⋈B)⋈C``, (b) ``(B⋈C)⋈A``, (c) ``(A×C)⋈B``: a Cartesian product, then both predicates.

    >>> {name: plan_cost(p) for name, p in example1_plans(1.0).items()}
    {'a': 250.0, 'b': 280.0, 'c': 900.0}
    """
    a, b, c = Stream("A", 10, 10), Stream("B", 20, 10), Stream("C", 70, 10)
    return {
        "a": Join(Join(a, b, 0.5, cost_s), c, 0.2, cost_s),
        "b": Join(Join(b, c, 0.2, cost_s), a, 0.5, cost_s),
        "c": Join(Join(a, c, 1.0, cost_s), b, 0.1, cost_s),
    }


def _plans_text(names: Sequence[str]) -> str:
    return ", ".join(sorted(names)) if names else "none"


def example1_checks() -> list[Check]:
    """Example 1: loads and memories of the three plans, and feasibility at 0.5, 4 and 5 ms."""
    source = "[AN] Example 1, Figure 3 (digest A.5)"
    unit = example1_plans(1.0)  # c = 1: the cost is the load in tuples per second
    checks = [
        Check("[AN] Example 1", f"load of plan ({n}), tuples/s", load, plan_cost(unit[n]), EXACT, source)
        for n, load in (("a", 250.0), ("b", 280.0), ("c", 900.0))
    ]
    checks += [
        Check("[AN] Example 1", f"memory of plan ({n}), tuples", mem, plan_memory(unit[n]), EXACT, source)
        for n, mem in (("a", 80.0), ("b", 50.0), ("c", 130.0))
    ]
    for c_ms, feasible in ((0.5, ("a", "b", "c")), (4.0, ("a",)), (5.0, ())):
        plans = example1_plans(c_ms / 1000)
        ours = [n for n, p in plans.items() if is_feasible(p, 1.0)]
        checks.append(
            Check(
                "[AN] Example 1",
                f"feasible plans at c = {c_ms:g} ms",
                _plans_text(feasible),
                _plans_text(ours),
                0.0,
                source,
            )
        )
    return checks


def throughput(plan: str, capacity: float) -> float:
    """[AN] Figure 7: plan ``plan``'s (``"a"``, ``"b"``, ``"c"``) optimum output rate under drop
    boxes when the CPU processes ``capacity`` tuples per second (c = 1/R), by the knapsack.

    >>> round(throughput("a", 100), 6)
    750.0
    """
    return DropBoxPlacement(budget=1.0).place(example1_plans(1.0 / capacity)[plan]).output_rate


def boundary(
    h: Callable[[float], float], inside: float, outside: float, *, step: float = 0.5, eps: float = 1e-7
) -> float:
    """Where ``h`` leaves the sign it has at ``inside``, going from ``inside`` toward ``outside``.

    Scans in ``step`` s for the first point whose sign (0 within ``eps``) differs, bisects the
    bracket to 1e-12, then takes the zero of the linear piece just inside: for a continuous
    piecewise-linear ``h``, the point where it crosses zero or starts being 0. Raises
    ``ValueError`` when ``h(inside)`` is 0 or the sign never changes.

    >>> boundary(lambda x: x - 3.25, 10, 0)
    3.25
    """

    def sign(x: float) -> int:
        value = h(x)
        return 0 if abs(value) <= eps else (1 if value > 0 else -1)

    want = sign(inside)
    if want == 0:
        raise ValueError(f"boundary: h is 0 at inside = {inside!r}")
    direction = 1.0 if outside > inside else -1.0
    lo = inside
    while True:
        hi = lo + direction * step
        if (hi - outside) * direction > 0:
            hi = outside
        if sign(hi) != want:
            break
        if hi == outside:
            raise ValueError(f"boundary: h keeps its sign from {inside!r} to {outside!r}")
        lo = hi
    while abs(hi - lo) > 1e-12:
        mid = (lo + hi) / 2
        if sign(mid) == want:
            lo = mid
        else:
            hi = mid
    # The bisection stops where |h| reaches eps. On the linear piece just inside, the zero is exact:
    # extrapolate it from two points of that piece (kept when it agrees with the bisection).
    back = lo - direction * min(step, 1e-3)
    h_lo, h_back = h(lo), h(back)
    if h_lo != h_back:
        root = lo - h_lo * (lo - back) / (h_lo - h_back)
        if abs(root - hi) <= 1e-6:
            hi = root
    return round(hi, 9)


def figure7_checks() -> list[Check]:
    """Figure 7's turning points, found on the knapsack throughputs of the three plans."""
    source = "[AN] §5.2, Figure 7"

    def t(plan: str) -> Callable[[float], float]:
        return lambda r: throughput(plan, r)

    def spread(r: float) -> float:
        values = [throughput(p, r) for p in "abc"]
        return max(values) - min(values)

    return [
        Check(
            "[AN] Figure 7",
            "plan (a) drops nothing down to R, tuples/s",
            250.0,
            boundary(lambda r: 1000.0 - t("a")(r), 100.0, 1000.0),
            EXACT,
            f"{source}: c = 0.004 s/tuple",
        ),
        Check(
            "[AN] Figure 7",
            "(b) = (c) at R, tuples/s",
            47.5,
            boundary(lambda r: t("b")(r) - t("c")(r), 100.0, 1.0),
            EXACT,
            f"{source}: (b) worse than (c) for c in [0.022, 0.095]; R = 47.5 exactly (digest A.8)",
        ),
        Check(
            "[AN] Figure 7",
            "(a) = (c) at R, tuples/s",
            20.0,
            boundary(lambda r: t("a")(r) - t("c")(r), 100.0, 1.0),
            EXACT,
            f"{source}: c ≈ 0.05 s/tuple",
        ),
        Check(
            "[AN] Figure 7",
            "all three plans alike from R, tuples/s",
            10.0,
            boundary(spread, 45.0, 1.0),
            EXACT,
            f"{source}: c ≈ 0.097 s/tuple; R = 10 exactly (digest A.8)",
        ),
    ]


# -- [CKSV] E1: adaptation delays of a window change ---------------------------------------------


@dataclass(frozen=True)
class WindowChange:
    """One change of a join window at ``at_s``: from ``old_s`` to ``new_s`` seconds. Its effect on
    the state is ``visible_s`` (the state first departs from what it would hold without the change)
    and ``complete_s`` (from then on the window holds ``new_s`` of arrivals).

    [CKSV] §4.2: visible at ``t + min(w, w')``, complete at ``t + max(w, w')``.
    """

    at_s: float
    old_s: float
    new_s: float
    visible_s: float
    complete_s: float


def _pieces(initial_s: float, changes: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """The window in force for arrivals over time: (from, until, window) pieces."""
    starts = [-math.inf, *(t for t, _ in changes)]
    ends = [*(t for t, _ in changes), math.inf]
    windows = [initial_s, *(w for _, w in changes)]
    return list(zip(starts, ends, windows, strict=True))


def window_span(initial_s: float, changes: Sequence[tuple[float, float]], at_s: float) -> float:
    """The arrival time a time window holds at ``at_s`` (its state, at a constant rate, over the rate).

    The stream has run since long before; an element arriving at ``s`` is given the window in
    force at its arrival (the window operator ω gives it the validity ``[s, s + w(s))``; digest
    B.1), and the window holds it while ``s ≤ at_s < s + w(s)``. ``changes``: (instant, new
    window) in time order.

    >>> window_span(60, [(80, 30)], 125)  # arrivals of (65, 80) under 60 s, of (95, 125] under 30 s
    45.0
    """
    return float(
        sum(max(0.0, min(end, at_s) - max(start, at_s - w)) for start, end, w in _pieces(initial_s, changes))
    )


def _breakpoints(initial_s: float, changes: Sequence[tuple[float, float]]) -> set[float]:
    """The instants where :func:`window_span` may change slope: the pieces' ends, and a window later."""
    points: set[float] = set()
    for start, end, w in _pieces(initial_s, changes):
        for edge in (start, end):
            if math.isfinite(edge):
                points |= {edge, edge + w}
    return points


def adaptation_timeline(initial_s: float, changes: Sequence[tuple[float, float]]) -> list[WindowChange]:
    """The instants each window change of a schedule takes effect, derived from the windows' content.

    ``changes``: (instant, new window size) pairs, instants increasing. For each change, from
    :func:`window_span` with and without it (the schedule up to it): ``visible_s``, the first instant
    the two differ; ``complete_s``, the first instant from which the window holds ``new_s`` (for a
    change made before the previous one completed, as if no later change followed; a change that
    changes nothing: both at its instant). Exact: the span is piecewise linear, so comparing it at
    its breakpoints and between them suffices.

    >>> [(c.visible_s, c.complete_s) for c in adaptation_timeline(60, [(80, 30), (150, 60)])]
    [(110.0, 140.0), (180.0, 210.0)]
    """
    initial_s = float(initial_s)
    changes = [(float(t), float(w)) for t, w in changes]
    if not initial_s > 0 or any(not w > 0 for _, w in changes):
        raise ValueError("window sizes: expected numbers > 0")
    if any(b[0] <= a[0] for a, b in zip(changes, changes[1:], strict=False)):
        raise ValueError("changes: expected increasing instants")
    eps = 1e-9 * max(initial_s, *(w for _, w in changes)) if changes else 0.0
    out: list[WindowChange] = []
    for k, (at, new) in enumerate(changes):
        before, after = changes[:k], changes[: k + 1]
        points = sorted(
            p for p in _breakpoints(initial_s, after) | _breakpoints(initial_s, before) if p >= at
        )
        # Between breakpoints both spans are linear: a segment is tested at its midpoint; after the
        # last one both are constant.
        segments = [(p, (p + q) / 2) for p, q in zip(points, points[1:], strict=False)]
        segments.append((points[-1], points[-1] + 1.0))
        differs = [
            p
            for p, mid in segments
            if abs(window_span(initial_s, after, mid) - window_span(initial_s, before, mid)) > eps
        ]
        old = changes[k - 1][1] if k else initial_s
        if not differs:  # a change to the size in force: nothing to wait for
            out.append(WindowChange(at_s=at, old_s=old, new_s=new, visible_s=at, complete_s=at))
            continue
        visible = differs[0]
        complete = points[-1]
        for p, mid in reversed(segments[:-1]):
            if p < visible or any(abs(window_span(initial_s, after, x) - new) > eps for x in (p, mid)):
                break
            complete = p
        out.append(WindowChange(at_s=at, old_s=old, new_s=new, visible_s=visible, complete_s=complete))
    return out


def e1_checks(timeline: Sequence[WindowChange] | None = None) -> list[Check]:
    """E1: the instants of the 60 → 30 → 60 s protocol, from :func:`adaptation_timeline`."""
    got = list(timeline) if timeline is not None else adaptation_timeline(E1_INITIAL_S, E1_CHANGES)
    source = "[CKSV] §5 E1, Fig. 7 (digest B.7)"
    shrink, grow = got
    return [
        Check("[CKSV] E1", "60 → 30 s at 80 s: visible at, s", 110.0, shrink.visible_s, EXACT, source),
        Check("[CKSV] E1", "60 → 30 s at 80 s: complete at, s", 140.0, shrink.complete_s, EXACT, source),
        Check("[CKSV] E1", "30 → 60 s at 150 s: visible at, s", 180.0, grow.visible_s, EXACT, source),
        Check("[CKSV] E1", "30 → 60 s at 150 s: complete at, s", 210.0, grow.complete_s, EXACT, source),
    ]


# -- [CKSV] E3: window reduction vs random load shedding, on netmon's join -----------------------


@dataclass(frozen=True)
class E3Run:
    """One run of E3's join: results after the warm-up and the state it held.

    ``results``: the results of the batches that start after the warm-up; ``result_rate`` those
    per second; ``state``: the mean of the tuples stored (both sides) after each of those batches.
    """

    name: str
    window_s: float
    keep: float
    results: int
    result_rate: float
    state: float


@dataclass(frozen=True)
class E3Result:
    """E3 measured: the full run, window reduction (WR) and load shedding (LS), and how many of
    WR's pairs differ from the full join's pairs with |Δt| ≤ the reduced window (0: WR is exact
    there)."""

    rate: float
    keys: int
    window_s: float
    duration_s: float
    seed: int
    full: E3Run
    wr: E3Run
    ls: E3Run
    wr_mismatches: int

    def ratios(self) -> dict[str, float]:
        """Memory (state) and results of WR and LS over the full run's."""
        return {
            "wr_memory": self.wr.state / self.full.state,
            "ls_memory": self.ls.state / self.full.state,
            "wr_results": self.wr.results / self.full.results,
            "ls_results": self.ls.results / self.full.results,
        }


_Side = tuple[np.ndarray, np.ndarray]


def e3_streams(rate: float, keys: int, duration_s: float, seed: int) -> tuple[_Side, _Side]:
    """E3's input: per side, Poisson arrivals at ``rate`` over ``duration_s`` (integer ns, sorted)
    and uniform integer keys in ``[0, keys)``, from ``seed``."""
    rng = np.random.default_rng(seed)
    sides = []
    for _ in range(2):
        n = int(rng.poisson(rate * duration_s))
        ts = np.sort(rng.uniform(0.0, duration_s, n))
        sides.append(((ts * _NS).astype(np.int64), rng.integers(0, keys, n)))
    return sides[0], sides[1]


def _run(
    name: str,
    streams: tuple[_Side, _Side],
    window_s: float,
    keep: float,
    seed: int,
    duration_s: float,
    warmup_s: float,
    batch_s: float,
) -> tuple[E3Run, np.ndarray, np.ndarray]:
    """One join over the streams in event-time batches; the run and its result pairs (ids, |Δt| ns)."""
    (lt, lk), (rt, rk) = streams
    shedder = LoadShedder("cf", keep, keep, seed=seed) if keep < 1 else None
    join = SymmetricHashJoin(window_s, window_s, shedder=shedder)
    results, states = 0, []
    pairs, gaps = [], []
    step = round(batch_s * _NS)
    for start in range(0, round(duration_s * _NS), step):
        li = slice(*np.searchsorted(lt, [start, start + step]))
        ri = slice(*np.searchsorted(rt, [start, start + step]))
        out = join.update(lt[li], lk[li], rt[ri], rk[ri]).report()
        pairs.append(out["left_id"].to_numpy(np.int64) * (1 << 32) + out["right_id"].to_numpy(np.int64))
        gaps.append(
            np.abs(out["left_ts"].to_numpy("datetime64[ns]") - out["right_ts"].to_numpy("datetime64[ns]"))
        )
        if start >= warmup_s * _NS:
            results += len(out)
            states.append(sum(join.state_size()))
    measured = duration_s - warmup_s
    run = E3Run(name, window_s, keep, results, results / measured, float(np.mean(states)))
    return run, np.concatenate(pairs), np.concatenate(gaps).astype(np.int64)


def e3_measure(
    *,
    rate: float = 100.0,
    keys: int = 50,
    window_s: float = 10.0,
    duration_s: float = 120.0,
    seed: int = 1,
    batch_s: float = 1.0,
) -> E3Result:
    """E3 on :class:`~analytics.join.SymmetricHashJoin`: two Poisson streams at ``rate`` tuples/s
    with uniform keys in ``[0, keys)`` over ``duration_s`` seconds (seeded), joined on the key with
    windows of ``window_s`` (``|t_l − t_r| ≤ window_s``), in ``batch_s`` batches of event time:
    whole, with halved windows (WR), and keeping each tuple with probability ½ (LS, coin
    flipping). Results and state are counted after a warm-up of one window."""
    if not duration_s >= window_s + batch_s:
        raise ValueError(
            f"duration_s: expected at least a window and a batch ({window_s + batch_s:g} s), "
            f"got {duration_s!r}"
        )
    streams = e3_streams(rate, keys, duration_s, seed)

    def run(name: str, window: float, keep: float) -> tuple[E3Run, np.ndarray, np.ndarray]:
        return _run(name, streams, window, keep, seed, duration_s, window_s, batch_s)

    full, full_pairs, full_gaps = run("full", window_s, 1.0)
    wr, wr_pairs, _ = run("window reduction", window_s / 2, 1.0)
    ls, _, _ = run("load shedding", window_s, 0.5)
    near = full_pairs[full_gaps <= round(window_s / 2 * _NS)]
    mismatches = len(np.setxor1d(near, wr_pairs))
    return E3Result(rate, keys, window_s, duration_s, seed, full, wr, ls, int(mismatches))


def e3_checks(result: E3Result) -> list[Check]:
    """E3's ratios against the paper's, within ±0.05; WR's exactness; the full rate within 5 %."""
    source = "[CKSV] §5 E3"
    r = result.ratios()
    expected = 2 * result.rate**2 * result.window_s / result.keys
    return [
        Check("[CKSV] E3", "memory, WR / full", 0.5, r["wr_memory"], 0.05, f"{source}, Fig. 9"),
        Check("[CKSV] E3", "memory, LS / full", 0.5, r["ls_memory"], 0.05, f"{source}, Fig. 9"),
        Check("[CKSV] E3", "results, WR / full", 0.5, r["wr_results"], 0.05, f"{source}, Fig. 11"),
        Check("[CKSV] E3", "results, LS / full", 0.25, r["ls_results"], 0.05, f"{source}, Fig. 11"),
        Check(
            "[CKSV] E3",
            f"WR pairs unlike the full join's at Δt within ±{result.window_s / 2:g} s",
            0.0,
            float(result.wr_mismatches),
            0.0,
            f"{source}: WR is exact for close pairs",
        ),
        Check(
            "[CKSV] E3",
            "results/s of the full run",
            expected,
            result.full.result_rate,
            0.05 * expected,
            f"{source}: σ·(l1 + l2)/(d1·d2), derived (digest B.7)",
        ),
    ]


# -- all of it ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostEvaluation:
    """Every check, the E1 timeline and the E3 measurement."""

    checks: list[Check]
    timeline: list[WindowChange]
    e3: E3Result

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the ``--format json`` form."""
        return {
            "ok": self.ok,
            "checks": [c.to_dict() for c in self.checks],
            "e1": {
                "initial_s": E1_INITIAL_S,
                "changes": [list(c) for c in E1_CHANGES],
                "timeline": [asdict(c) for c in self.timeline],
            },
            "e3": {**asdict(self.e3), "ratios": self.e3.ratios()},
        }


def evaluate(*, seed: int = 1, duration_s: float = 120.0) -> CostEvaluation:
    """Example 1, Figure 7, E1 and E3 (``seed``, ``duration_s`` of generated streams)."""
    timeline = adaptation_timeline(E1_INITIAL_S, E1_CHANGES)
    e3 = e3_measure(duration_s=duration_s, seed=seed)
    checks = example1_checks() + figure7_checks() + e1_checks(timeline) + e3_checks(e3)
    return CostEvaluation(checks, timeline, e3)


def _text(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"


def _tolerance(c: Check) -> str:
    return "exact" if isinstance(c.paper, str) or c.tolerance <= EXACT else f"±{c.tolerance:g}"


def format_table(checks: Sequence[Check]) -> list[str]:
    """The checks as a Markdown table: experiment, figure, the paper's, netmon's, tolerance, verdict
    and where the paper's figure is."""
    lines = [
        "| experiment | figure | paper | netmon | tolerance | check | source |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c.experiment} | {c.figure} | {_text(c.paper)} | {_text(c.ours)} | {_tolerance(c)} | "
            f"{'ok' if c.ok else 'FAIL'} | {c.source} |"
        )
    return lines
