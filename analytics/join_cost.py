"""The CPU cost model of a sliding-window join and the optimal random shedding fractions.

Seed 003 (Ayad, Naughton, Wright, Srivastava) §2.2 and §3.3. A join ``L[T_L] ⋈ R[T_R]`` with arrival
rates ``λ_L``, ``λ_R`` and selectivity ``f`` costs, per unit time, eq. (2)::

    cost = (λ_L + λ_R)·C_u + λ_out·C_p,      λ_out = f·λ_L·λ_R·(T_L + T_R)   (9)

where ``C_u`` is the time to insert a tuple into its window and later expire it and ``C_p`` the time to
probe for and produce one result. All costs are in seconds, so a cost per second is a CPU
utilisation: the **budget** ``B`` is CPU seconds per second (1.0 = one core fully busy). The paper
writes the budget constraint as ``≤ 1`` (100% utilisation); we use ``≤ B`` throughout.

When the join is infeasible (cost > B), a random strategy keeps fractions ``x_L``, ``x_R``:

- CF, coin flipping, eqs. (10)-(11): drop whole tuples. Output ``f·λ_L·x_L·λ_R·x_R·(T_L+T_R)``, update
  cost ``(λ_L·x_L + λ_R·x_R)·C_u``. Bilinear.
- INP, insert-no-probe, eqs. (12)-(13): insert all, probe with probability x. Output
  ``f·λ_L·λ_R·(T_L·x_R + T_R·x_L)``, update cost ``(λ_L + λ_R)·C_u``. Linear.
- PNI, probe-no-insert, eqs. (14)-(15): probe all, insert with probability x. Output
  ``f·λ_L·λ_R·(T_L·x_L + T_R·x_R)``, update cost ``(λ_L·x_L + λ_R·x_R)·C_u``. Linear.

PNI and INP are linear programs in two variables, solved exactly by enumerating the vertices of the
feasible polygon. CF is solved exactly too: on the tight budget curve the objective is unimodal in
``x_L`` with a closed-form stationary point (see :meth:`JoinCostModel.optimum`); the issue asked
for a numerical solution to 1e-6, and the tests check the closed form against a grid and a
golden-section search. Theorems 2 and 3: for an infeasible join, PNI's optimum > CF's, and INP's is
≤ both; for a feasible join all three keep everything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analytics._base import Base
from netmon.config import SHEDDING_STRATEGIES

__all__ = ["STRATEGIES", "Allocation", "JoinCostModel"]

#: The random strategies of seed 003 §3.3, plus ``none`` (no shedding), as ``[[queries.join]]
#: strategy`` names them: one list, in the configuration.
STRATEGIES: tuple[str, ...] = SHEDDING_STRATEGIES

_TOL = 1e-12


@dataclass(frozen=True)
class Allocation:
    """One strategy's operating point: fractions, expected output rate (results/s), cost (CPU s/s)."""

    strategy: str
    x_left: float
    x_right: float
    output_rate: float
    cost: float

    def to_dict(self) -> dict[str, float]:
        """The ``netmon analyze shedding`` JSON form: ``x_l``, ``x_r``, ``output_rate``, ``cost``."""
        return {"x_l": self.x_left, "x_r": self.x_right, "output_rate": self.output_rate, "cost": self.cost}


def _check_nonneg(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return value


def _check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return strategy


def _check_fraction(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: expected a fraction in [0, 1], got {value!r}")
    return value


class JoinCostModel(Base):
    """CPU cost and output rate of ``L[T_L] ⋈ R[T_R]`` under CF/INP/PNI shedding (seed 003 eqs. 2, 9-15).

    Parameters
    ----------
    lambda_left, lambda_right
        Arrival rates ``λ_L``, ``λ_R`` (tuples per second).
    window_left_s, window_right_s
        Window sizes ``T_L``, ``T_R`` (seconds). A left tuple stays ``T_L`` in the left window,
        where right arrivals probe it.
    selectivity
        ``f``: the fraction of (arrival, window tuple) pairs that match, in [0, 1].
    cu_s
        ``C_u``: seconds to insert one tuple and later expire it.
    cp_s
        ``C_p``: seconds to probe for and produce one result.

    Examples
    --------
    The hand-computed case of ``tests/analytics/test_join_cost.py`` (full cost 0.9, budget 0.45):

    >>> m = JoinCostModel(100, 200, 2.0, 1.0, selectivity=0.01, cu_s=1e-3, cp_s=1e-3)
    >>> m.output_rate(), m.cost()
    (600.0, 0.9)
    >>> {s: round(a.output_rate, 1) for s, a in m.optima(budget=0.45).items()}
    {'none': 600.0, 'cf': 262.8, 'inp': 150.0, 'pni': 360.0}

    References
    ----------
    .. [1] A. Ayad, J. Naughton, S. Wright, U. Srivastava. Approximating Streaming Window Joins
       Under CPU Limitations. Technical Report 1542, University of Wisconsin-Madison, 2005.
       §2.2 eq. (2), §3.3 eqs. (9)-(17), Appendix A.
    """

    def __init__(
        self,
        lambda_left: float,
        lambda_right: float,
        window_left_s: float,
        window_right_s: float,
        selectivity: float,
        cu_s: float,
        cp_s: float,
    ) -> None:
        self.lambda_left = _check_nonneg("lambda_left", lambda_left)
        self.lambda_right = _check_nonneg("lambda_right", lambda_right)
        self.window_left_s = _check_nonneg("window_left_s", window_left_s)
        self.window_right_s = _check_nonneg("window_right_s", window_right_s)
        self.selectivity = _check_fraction("selectivity", selectivity)
        self.cu_s = _check_nonneg("cu_s", cu_s)
        self.cp_s = _check_nonneg("cp_s", cp_s)

    # -- the model ------------------------------------------------------------------------------
    @property
    def _pairs(self) -> float:
        """``f·λ_L·λ_R``: matching (left, right) pairs per second² of window."""
        return self.selectivity * self.lambda_left * self.lambda_right

    def output_rate(self, strategy: str = "none", x_left: float = 1.0, x_right: float = 1.0) -> float:
        """Expected results per second, eqs. (9), (10), (12), (14)."""
        _check_strategy(strategy)
        xl, xr = _check_fraction("x_left", x_left), _check_fraction("x_right", x_right)
        tl, tr = self.window_left_s, self.window_right_s
        if strategy == "none":
            return self._pairs * (tl + tr)
        if strategy == "cf":
            return self._pairs * xl * xr * (tl + tr)
        if strategy == "inp":
            # A left tuple probes the right window (size T_R) with probability x_L.
            return self._pairs * (tl * xr + tr * xl)
        # pni: a left tuple sits in the left window (size T_L) with probability x_L.
        return self._pairs * (tl * xl + tr * xr)

    def cost(self, strategy: str = "none", x_left: float = 1.0, x_right: float = 1.0) -> float:
        """CPU seconds per second, eq. (2) with the strategy's update rate (eqs. 11, 13, 15)."""
        out = self.output_rate(strategy, x_left, x_right)
        if strategy in ("none", "inp"):
            updates = self.lambda_left + self.lambda_right
        else:
            updates = self.lambda_left * float(x_left) + self.lambda_right * float(x_right)
        return updates * self.cu_s + out * self.cp_s

    def is_feasible(self, budget: float) -> bool:
        """Whether the unshed join fits the budget (CPU seconds per second)."""
        return self.cost() <= _check_nonneg("budget", budget)

    # -- the optimizer --------------------------------------------------------------------------
    def optimum(self, strategy: str, budget: float) -> Allocation:
        """The strategy's best fractions under ``budget`` (CPU seconds per second).

        - ``none``: ``x = (1, 1)`` whatever the budget (its cost may exceed it).
        - Feasible join (full cost ≤ budget): every strategy keeps ``x = (1, 1)``.
        - ``pni``, ``inp``: exact LP by vertex enumeration. When a whole edge is optimal (INP always:
          its objective is parallel to its constraint), the point on it closest to ``x_L = x_R`` is
          returned, so symmetric inputs give symmetric fractions.
        - ``inp`` when maintenance alone exceeds the budget (``(λ_L+λ_R)·C_u > B``): no fractions meet
          it; ``x = (0, 0)``, output 0, and the reported cost ``(λ_L+λ_R)·C_u`` exceeds the budget.
        - ``cf``: on the tight curve ``x_R(x) = (B - a·x)/(c + K·x)`` (``a = λ_L·C_u``,
          ``c = λ_R·C_u``, ``K = f·λ_L·λ_R·(T_L+T_R)·C_p``) the objective ``x·x_R(x)`` has derivative
          sign ``B·c - 2·a·c·x - a·K·x²``, decreasing in ``x``: unimodal, maximal at the positive
          root clamped to the feasible interval.
        """
        _check_strategy(strategy)
        budget = _check_nonneg("budget", budget)
        if strategy == "none" or self.cost() <= budget:
            return self._allocation(strategy, 1.0, 1.0)
        if strategy == "cf":
            xl, xr = self._cf(budget)
        elif strategy == "pni":
            tl, tr, cu, cp = self.window_left_s, self.window_right_s, self.cu_s, self.cp_s
            gain = (self._pairs * tl, self._pairs * tr)
            weight = (self.lambda_left * cu + gain[0] * cp, self.lambda_right * cu + gain[1] * cp)
            xl, xr = _lp2(gain, weight, budget)
        else:
            tl, tr, cp = self.window_left_s, self.window_right_s, self.cp_s
            rest = budget - (self.lambda_left + self.lambda_right) * self.cu_s
            if rest < 0:
                xl, xr = 0.0, 0.0
            else:
                gain = (self._pairs * tr, self._pairs * tl)
                xl, xr = _lp2(gain, (gain[0] * cp, gain[1] * cp), rest)
        return self._allocation(strategy, xl, xr)

    def optima(self, budget: float) -> dict[str, Allocation]:
        """:meth:`optimum` of every strategy: ``{"none": ..., "cf": ..., "inp": ..., "pni": ...}``."""
        return {s: self.optimum(s, budget) for s in STRATEGIES}

    def _allocation(self, strategy: str, xl: float, xr: float) -> Allocation:
        xl, xr = min(1.0, max(0.0, xl)), min(1.0, max(0.0, xr))
        return Allocation(strategy, xl, xr, self.output_rate(strategy, xl, xr), self.cost(strategy, xl, xr))

    def _cf(self, budget: float) -> tuple[float, float]:
        a = self.lambda_left * self.cu_s
        c = self.lambda_right * self.cu_s
        k = self._pairs * (self.window_left_s + self.window_right_s) * self.cp_s

        def x_right(x: float) -> float:
            den = c + k * x
            return 1.0 if den <= 0 else min(1.0, max(0.0, (budget - a * x) / den))

        lo = 0.0 if a + k <= 0 else max(0.0, (budget - c) / (a + k))
        hi = 1.0 if a <= 0 else min(1.0, budget / a)
        lo = min(lo, hi)
        candidates = [lo, hi]
        disc = a * a * c * c + a * k * budget * c
        den = a * c + math.sqrt(disc)
        if den > 0:  # the positive root of a·K·x² + 2·a·c·x - B·c = 0, in a cancellation-free form
            candidates.append(min(hi, max(lo, budget * c / den)))
        # Objective ∝ x·x_R(x); ties go to the larger x_L, then the candidate order (deterministic).
        best = max(candidates, key=lambda x: (x * x_right(x), x))
        return best, x_right(best)


def _lp2(gain: tuple[float, float], weight: tuple[float, float], budget: float) -> tuple[float, float]:
    """max gain·x s.t. weight·x ≤ budget, 0 ≤ x ≤ 1 (gain, weight ≥ 0), by vertex enumeration.

    Among optimal points the one closest to the diagonal ``x_L = x_R`` wins, then the larger sum.
    """
    g1, g2 = gain
    w1, w2 = weight
    verts: list[tuple[float, float]] = []
    for p in ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)):
        if w1 * p[0] + w2 * p[1] <= budget * (1 + _TOL):
            verts.append(p)
    for fixed in (0.0, 1.0):  # the budget line w·x = budget crossing the box's edges
        if w2 > 0:
            y = (budget - w1 * fixed) / w2
            if 0.0 <= y <= 1.0:
                verts.append((fixed, y))
        if w1 > 0:
            x = (budget - w2 * fixed) / w1
            if 0.0 <= x <= 1.0:
                verts.append((x, fixed))
    values = [g1 * x + g2 * y for x, y in verts]
    best = max(values)
    optimal = [v for v, val in zip(verts, values, strict=True) if val >= best - _TOL * max(1.0, abs(best))]
    candidates = list(optimal)
    for i, (x1, y1) in enumerate(optimal):  # where each optimal segment crosses the diagonal
        for x2, y2 in optimal[i + 1 :]:
            d1, d2 = x1 - y1, x2 - y2
            if d1 * d2 < 0:
                s = d1 / (d1 - d2)
                xm = x1 + s * (x2 - x1)
                candidates.append((xm, xm))
    return min(candidates, key=lambda p: (round(abs(p[0] - p[1]), 12), -(p[0] + p[1])))
