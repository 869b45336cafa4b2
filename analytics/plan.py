"""Plans of selections and window joins: rates, windows, CPU and memory, drop boxes (seed 000).

Ayad & Naughton, *Static Optimization of Conjunctive Queries with Sliding Windows over Unbounded
Streaming Information Sources* (SIGMOD 2004), §3–§5; the digest is
``shared/research/seeds-cost-models.md`` Part A. A plan is a tree of :class:`Stream` leaves,
:class:`Select` (selection or projection) and :class:`Join` (symmetric window join, a Cartesian
product when ``selectivity = 1``). Every node knows, bottom-up:

- its output rate λ and window W: (AN-1) ``λ_o = σ·λ_i``, (AN-2) ``W_o = σ·W_i``,
  (AN-3) ``λ_o = f·(W_R·λ_L + W_L·λ_R)``, (AN-4) ``W_o = f·W_L·W_R``; a time window T becomes
  ``W = λ·T`` (§3.1);
- its cost per unit time c(i), a utilization: (AN-7) ``C_σ·λ_i`` and (AN-9)
  ``(λ_L + λ_R)·(C_I + C_V + C_P)``; and its least memory m(i) in tuples, (AN-11) ``W_L + W_R``.

A plan costs (AN-12) ``C(p) = Σ c(i)`` and holds (AN-13) ``M(p) = Σ m(i)``; it is feasible when
``C(p) ≤ B`` (AN-15, with the budget B, e.g. headroom or n processors) and ``M(p) ≤ 𝓜`` (AN-17).

Departures, each noted where it is made:

- feasibility is ``≤``, not the paper's strict ``<``: Example 1 calls plan (a) feasible at exactly
  100 % (digest A.10-4); a production budget keeps headroom below 1 (``[resources] reserve``);
- §5.2's drop-box LP assumes tuple-based windows, whose W does not shrink when tuples are
  dropped. With time windows W = x·λ·T shrinks too and the output is bilinear in x (seed 003's
  coin flipping; digest A.10-12): :class:`DropBoxPlacement` treats every window as a tuple window,
  as the paper does, and says so; netmon's sampled aggregates are single-stream, where the
  question does not arise.

The knapsack (:class:`FractionalKnapsack`) has the §5.2 extensions: a lower bound per box (a
stream is never shut off below ``keep_min``) and a weight per box (stream importance).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from analytics._base import Base

__all__ = [
    "DropBoxPlacement",
    "FractionalKnapsack",
    "Join",
    "JoinOrderOptimizer",
    "KnapsackSolution",
    "Node",
    "Placement",
    "Select",
    "Stream",
    "is_feasible",
    "join_trees",
    "observation1",
    "operators",
    "plan_cost",
    "plan_memory",
    "rank_plans_to_approximate",
    "scheduling_shares",
]


@dataclass(frozen=True)
class Stream:
    """A source stream: arrival rate λ (tuples per time unit) and a tuple window of W tuples (§3.1).

    >>> Stream("A", rate=10, window=10).rate, Stream.time_window("B", rate=100, seconds=2).window
    (10.0, 200.0)
    """

    name: str
    rate: float
    window: float

    def __post_init__(self) -> None:
        for key in ("rate", "window"):
            value = float(getattr(self, key))
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Stream {self.name!r} {key}: expected a finite number >= 0, got {value!r}")
            object.__setattr__(self, key, value)

    @classmethod
    def time_window(cls, name: str, rate: float, seconds: float) -> Stream:
        """A time window of T seconds, as the mean number of live tuples ``W = λ·T`` (§3.1)."""
        return cls(name, rate, rate * seconds)

    @property
    def children(self) -> tuple[Node, ...]:
        return ()

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def op_cost(self) -> float:
        """A source costs nothing: c(i) = 0."""
        return 0.0

    @property
    def op_memory(self) -> float:
        """A source keeps nothing of its own (the join above it holds its window)."""
        return 0.0

    @property
    def label(self) -> str:
        return self.name


@dataclass(frozen=True)
class Select:
    """A selection (or projection, ``selectivity = 1``) costing ``cost_s`` per tuple it reads (§3.2.1).

    Output (AN-1) ``λ_o = σ·λ_i``, (AN-2) ``W_o = σ·W_i``; cost (AN-7) ``C_σ·λ_i``; no memory.
    """

    child: Node
    selectivity: float
    cost_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.selectivity <= 1:
            raise ValueError(f"Select selectivity: expected a fraction in [0, 1], got {self.selectivity!r}")
        if not self.cost_s >= 0:
            raise ValueError(f"Select cost_s: expected a number >= 0, got {self.cost_s!r}")

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.child.sources

    @cached_property
    def rate(self) -> float:
        return self.selectivity * self.child.rate

    @cached_property
    def window(self) -> float:
        return self.selectivity * self.child.window

    @property
    def op_cost(self) -> float:
        return self.cost_s * self.child.rate

    @property
    def op_memory(self) -> float:
        return 0.0

    @property
    def label(self) -> str:
        return f"σ[{self.selectivity:g}]({self.child.label})"


@dataclass(frozen=True)
class Join:
    """A symmetric window join (§3.2.2): ``cost_s`` = C_I + C_V + C_P per arriving tuple, either side.

    Output (AN-3) ``λ_o = f·(W_R·λ_L + W_L·λ_R)``, (AN-4) ``W_o = f·W_L·W_R``; cost (AN-9)
    ``(λ_L + λ_R)·cost_s``; least memory (AN-11) ``W_L + W_R`` tuples. ``selectivity = 1`` is a
    Cartesian product.
    """

    left: Node
    right: Node
    selectivity: float
    cost_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.selectivity <= 1:
            raise ValueError(f"Join selectivity: expected a fraction in [0, 1], got {self.selectivity!r}")
        if not self.cost_s >= 0:
            raise ValueError(f"Join cost_s: expected a number >= 0, got {self.cost_s!r}")

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    @property
    def sources(self) -> tuple[str, ...]:
        return self.left.sources + self.right.sources

    @cached_property
    def rate(self) -> float:
        left, right = self.left, self.right
        return self.selectivity * (right.window * left.rate + left.window * right.rate)

    @cached_property
    def window(self) -> float:
        return self.selectivity * self.left.window * self.right.window

    @property
    def op_cost(self) -> float:
        return (self.left.rate + self.right.rate) * self.cost_s

    @property
    def op_memory(self) -> float:
        return self.left.window + self.right.window

    @property
    def label(self) -> str:
        op = "×" if self.selectivity == 1 else "⋈"
        return f"({self.left.label} {op} {self.right.label})"


Node = Stream | Select | Join


def operators(plan: Node) -> Iterator[Node]:
    """Every node of ``plan``, children before parents (Definition 1: a plan is a tree)."""
    for child in plan.children:
        yield from operators(child)
    yield plan


def plan_cost(plan: Node) -> float:
    """(AN-12) ``C(p) = Σ c(i)``: the plan's utilization (time spent per unit of time)."""
    return sum(op.op_cost for op in operators(plan))


def plan_memory(plan: Node) -> float:
    """(AN-13) ``M(p) = Σ m(i)``, in tuples: a lower bound (queues and hash overhead excluded, §3.3.3)."""
    return sum(op.op_memory for op in operators(plan))


def is_feasible(plan: Node, cpu_budget: float = 1.0, memory_budget: float = math.inf) -> bool:
    """(AN-15), (AN-17) with ``≤`` (the module docstring says why): ``C(p) ≤ B`` and ``M(p) ≤ 𝓜``."""
    return plan_cost(plan) <= cpu_budget * (1 + 1e-12) and plan_memory(plan) <= memory_budget


def scheduling_shares(plan: Node) -> list[tuple[str, float]]:
    """Each costed operator's CPU share ∝ c(i) (§4, scheduling hint); the shares sum to 1.

    Sharing a CPU dilates an operator's cost by 1/share (§3.3.3 a): run alone, a 1 ms selection
    given a 10 % share takes 10 ms of wall time per tuple.
    """
    ops = [op for op in operators(plan) if op.op_cost > 0]
    total = sum(op.op_cost for op in ops)
    return [(op.label, op.op_cost / total) for op in ops] if total else []


def observation1(streams: Sequence[Stream], F: float) -> tuple[float, float]:
    """Observation 1, (AN-5) and (AN-6): the output (λ, W) of any plan joining ``streams``.

    ``F`` is the product of every selectivity of the query. Neither value depends on the join
    order or the plan's shape.

    >>> observation1([Stream("A", 10, 10), Stream("B", 20, 10), Stream("C", 70, 10)], 0.1)
    (1000.0, 100.0)
    """
    windows = [s.window for s in streams]
    rate = sum(s.rate * math.prod(w for j, w in enumerate(windows) if j != k) for k, s in enumerate(streams))
    return F * rate, F * math.prod(windows)


# -- drop boxes (§5) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnapsackSolution:
    """The fractions ``x``, the objective ``Σ w·b·x`` and the cost ``Σ a·x`` of a knapsack solution."""

    x: tuple[float, ...]
    value: float
    cost: float
    #: False when even the lower bounds cost more than the budget (then x = the lower bounds)
    feasible: bool = True


class FractionalKnapsack(Base):
    """The continuous knapsack of seed 000 §5.2: maximize ``Σ w_k·b_k·x_k`` s.t. ``Σ a_k·x_k ≤ B``.

    With bounds ``ℓ_k ≤ x_k ≤ 1`` (§5.2 issue 1: never shut a stream off) and weights ``w_k``
    (issue 2: stream importance). Greedy: start every x at its lower bound, then raise them to 1
    in decreasing order of ``w_k·b_k / a_k`` while the budget lasts; the next gets the fractional
    remainder. Boxes that cost nothing are kept whole. If the lower bounds alone exceed the budget
    the problem is infeasible: the solution is the lower bounds (free boxes whole), marked
    ``feasible=False``.

    Parameters
    ----------
    budget
        B, the cost allowed (CPU seconds per second; 1.0 = (AN-29)'s ``C(p) = 1``, as ``≤``).

    Examples
    --------
    >>> FractionalKnapsack(budget=1.5).solve(values=[3, 2, 1], costs=[1, 1, 1]).x
    (1.0, 0.5, 0.0)

    References
    ----------
    .. [1] A. Ayad, J. F. Naughton, "Static Optimization of Conjunctive Queries with Sliding
       Windows over Unbounded Streaming Information Sources", SIGMOD 2004, §5.2, (27)–(29).
    """

    def __init__(self, budget: float) -> None:
        if not (math.isfinite(budget) and budget >= 0):
            raise ValueError(f"budget: expected a finite number >= 0, got {budget!r}")
        self.budget = float(budget)

    def solve(
        self,
        values: Sequence[float],
        costs: Sequence[float],
        lower: Sequence[float] | None = None,
        weights: Sequence[float] | None = None,
    ) -> KnapsackSolution:
        """The optimum x for objective coefficients ``values`` (b) and cost coefficients ``costs`` (a)."""
        b = np.asarray(values, float)
        a = np.asarray(costs, float)
        n = len(b)
        lo = np.zeros(n) if lower is None else np.asarray(lower, float)
        w = np.ones(n) if weights is None else np.asarray(weights, float)
        if not (len(a) == len(lo) == len(w) == n):
            raise ValueError("values, costs, lower and weights: expected sequences of one length")
        if (a < 0).any() or (b < 0).any() or (w < 0).any():
            raise ValueError("values, costs and weights: expected numbers >= 0")
        if ((lo < 0) | (lo > 1)).any():
            raise ValueError(f"lower: expected fractions in [0, 1], got {lo.tolist()}")
        gain = w * b
        x = lo.copy()
        x[a == 0] = 1.0  # free boxes: keep everything
        left = self.budget - float(a @ x)
        feasible = left >= -1e-12 * max(1.0, self.budget)
        if feasible:
            ratio = np.where(a > 0, gain / np.where(a > 0, a, 1.0), np.inf)
            for k in sorted(range(n), key=lambda i: (-ratio[i], i)):
                if a[k] == 0 or left <= 0:
                    continue
                if gain[k] == 0:
                    break  # raising it costs budget and gains nothing
                step = min(1.0 - x[k], left / a[k])
                x[k] += step
                left -= step * a[k]
        return KnapsackSolution(tuple(float(v) for v in x), float(gain @ x), float(a @ x), bool(feasible))


@dataclass(frozen=True)
class Placement:
    """Drop boxes at the sources: keep fraction per stream, the expected output rate and plan cost."""

    keep: dict[str, float]
    output_rate: float
    cost: float
    feasible: bool
    #: the knapsack's coefficients: output rate (b) and cost (a) per unit of each stream's x
    values: dict[str, float] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)


class DropBoxPlacement(Base):
    """Random drop boxes placed on a plan's source streams by the fractional knapsack (seed 000 §5.2).

    Observation 3: with tuple windows it suffices to drop at the sources. Then the output rate is
    linear in the keep fractions x (AN-27) and so is the cost (AN-28), whose coefficients a_k have
    no closed form: they are found here by propagating ∂λ/∂x_k bottom-up through the plan (windows
    stay fixed, so every node's rate is linear in its inputs' rates) and summing
    ``∂(operator cost)/∂x_k`` over the operators. A chain of selections over one stream gives
    Observation 2 back: ``x_1 = min(1, B / Σ c(i))`` (AN-23).

    Parameters
    ----------
    budget
        B, the CPU allowed (utilization; (AN-29) writes it ``C(p) = 1``).
    keep_min
        The lower bound ℓ on every stream's x (0: a stream may be shut off).
    weights
        Importance per stream name (default 1).

    Examples
    --------
    >>> plan = Join(Join(Stream("A", 10, 10), Stream("B", 20, 10), 0.5, 0.01), Stream("C", 70, 10), 0.2, 0.01)
    >>> round(DropBoxPlacement(budget=1.0).place(plan).output_rate, 6)  # Figure 7, plan (a) at R = 100
    750.0

    References
    ----------
    .. [1] A. Ayad, J. F. Naughton, SIGMOD 2004, §5.1 Observation 2, §5.2 Observation 3, (27)–(29),
       Figure 7.
    """

    def __init__(
        self, budget: float, keep_min: float = 0.0, weights: Mapping[str, float] | None = None
    ) -> None:
        if not 0 <= keep_min <= 1:
            raise ValueError(f"keep_min: expected a fraction in [0, 1], got {keep_min!r}")
        self.budget = float(budget)
        self.keep_min = float(keep_min)
        self.weights = dict(weights) if weights is not None else None
        self._knapsack = FractionalKnapsack(budget)

    @staticmethod
    def coefficients(plan: Node) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(stream names, b, a): output rate and plan cost per unit of each source's keep fraction."""
        names = sorted(set(plan.sources))
        if len(names) != len(plan.sources):
            raise ValueError(f"a plan reads each stream once, got {list(plan.sources)}")
        index = {name: i for i, name in enumerate(names)}
        cost = np.zeros(len(names))

        def rate(node: Node) -> np.ndarray:
            nonlocal cost
            if isinstance(node, Stream):
                vec = np.zeros(len(names))
                vec[index[node.name]] = node.rate
                return vec
            if isinstance(node, Select):
                inner = rate(node.child)
                cost = cost + node.cost_s * inner
                return node.selectivity * inner
            left, right = rate(node.left), rate(node.right)
            cost = cost + node.cost_s * (left + right)
            return node.selectivity * (node.right.window * left + node.left.window * right)

        out = rate(plan)
        return names, out, cost

    def place(self, plan: Node) -> Placement:
        """The keep fraction per source stream maximizing the (weighted) output rate within budget."""
        names, b, a = self.coefficients(plan)
        w = [1.0 if self.weights is None else float(self.weights.get(n, 1.0)) for n in names]
        sol = self._knapsack.solve(b.tolist(), a.tolist(), lower=[self.keep_min] * len(names), weights=w)
        x = np.asarray(sol.x)
        return Placement(
            keep=dict(zip(names, sol.x, strict=True)),
            output_rate=float(b @ x),
            cost=sol.cost,
            feasible=sol.feasible,
            values=dict(zip(names, b.tolist(), strict=True)),
            costs=dict(zip(names, a.tolist(), strict=True)),
        )


def rank_plans_to_approximate(
    plans: Mapping[str, Node], budget: float, keep_min: float = 0.0
) -> list[tuple[str, float]]:
    """Each plan's optimum output rate under drop boxes at ``budget``, best first (§5.2, Figure 7).

    "The cheapest feasible plan is not necessarily the best plan to approximate": evaluate the
    knapsack optimum of every candidate, not only of the cheapest.
    """
    placer = DropBoxPlacement(budget, keep_min=keep_min)
    scored = [(name, placer.place(plan).output_rate) for name, plan in plans.items()]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


# -- join order (§4) -------------------------------------------------------------------------------


def _selectivity(names: frozenset[str], predicates: Mapping[frozenset[str], float]) -> float:
    return math.prod(f for pair, f in predicates.items() if pair <= names)


def join_trees(
    streams: Sequence[Stream], predicates: Mapping[frozenset[str], float], cost_s: float
) -> Iterator[Node]:
    """Every bushy join tree over ``streams`` (each unordered split once), Cartesian products included.

    A join applies the predicates between its two sides (``predicates[{a, b}] = f``; none: ×).
    """
    if len(streams) == 1:
        yield streams[0]
        return
    first, rest = streams[0], list(streams[1:])
    for size in range(len(rest)):
        for picked in itertools.combinations(range(len(rest)), size):
            left = [first, *(rest[i] for i in picked)]
            right = [s for i, s in enumerate(rest) if i not in picked]
            ln, rn = frozenset(s.name for s in left), frozenset(s.name for s in right)
            f = _selectivity(ln | rn, predicates) / (
                _selectivity(ln, predicates) * _selectivity(rn, predicates)
            )
            for lt in join_trees(left, predicates, cost_s):
                for rt in join_trees(right, predicates, cost_s):
                    yield Join(lt, rt, f, cost_s)


class JoinOrderOptimizer(Base):
    """The least-CPU or least-memory join order by dynamic programming over subsets (seed 000 §4).

    By Observation 1 the rate and window of the join of a subset S of the streams depend only on
    S, so the cost of joining S1 and S2, ``(λ(S1) + λ(S2))·cost_s`` (AN-9), and its memory
    ``W(S1) + W(S2)`` (AN-11) do too: Selinger-style DP over subsets (bushy trees, Cartesian
    products allowed) is exact, in O(3^n). The paper asserts the problem is NP-complete in general
    and suggests DP plus heuristics; it states no algorithm (digest A.6).

    Parameters
    ----------
    cost_s
        Per-tuple join cost C_I + C_V + C_P, the same for every join (Example 1's ``c``).
    objective
        ``"cpu"`` (AN-14) or ``"memory"`` (AN-16).

    Examples
    --------
    >>> streams = [Stream("A", 10, 10), Stream("B", 20, 10), Stream("C", 70, 10)]
    >>> preds = {frozenset("AB"): 0.5, frozenset("BC"): 0.2}
    >>> JoinOrderOptimizer(cost_s=0.004).best(streams, preds).label
    '((A ⋈ B) ⋈ C)'

    References
    ----------
    .. [1] A. Ayad, J. F. Naughton, SIGMOD 2004, §4, (12)–(17), Observation 1, Example 1.
    """

    def __init__(self, cost_s: float, objective: str = "cpu") -> None:
        if objective not in ("cpu", "memory"):
            raise ValueError(f"objective: expected 'cpu' or 'memory', got {objective!r}")
        self.cost_s = float(cost_s)
        self.objective = objective

    def best(self, streams: Sequence[Stream], predicates: Mapping[frozenset[str], float]) -> Node:
        """The plan of least C(p) (or M(p)) joining every stream; ties go to the first split found."""
        by_name = {s.name: s for s in streams}
        names = sorted(by_name)

        def stats(subset: frozenset[str]) -> tuple[float, float]:
            return observation1([by_name[n] for n in sorted(subset)], _selectivity(subset, predicates))

        best: dict[frozenset[str], tuple[float, Node]] = {frozenset([n]): (0.0, by_name[n]) for n in names}
        for size in range(2, len(names) + 1):
            for combo in itertools.combinations(names, size):
                subset = frozenset(combo)
                anchor = combo[0]
                rest = combo[1:]
                found: tuple[float, Node] | None = None
                for k in range(len(rest)):
                    for picked in itertools.combinations(rest, k):
                        s1 = frozenset((anchor, *picked))
                        s2 = subset - s1
                        (c1, p1), (c2, p2) = best[s1], best[s2]
                        (r1, w1), (r2, w2) = stats(s1), stats(s2)
                        op = (r1 + r2) * self.cost_s if self.objective == "cpu" else w1 + w2
                        total = c1 + c2 + op
                        if found is None or total < found[0] - 1e-12:
                            f = _selectivity(subset, predicates) / (
                                _selectivity(s1, predicates) * _selectivity(s2, predicates)
                            )
                            found = (total, Join(p1, p2, f, self.cost_s))
                assert found is not None
                best[subset] = found
        return best[frozenset(names)][1]
