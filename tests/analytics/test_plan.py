"""Seed 000 (Ayad & Naughton) reproduced: Example 1, Figure 4, Figure 7, Observations 1–3, the knapsack.

Expected values are the paper's where it states them exactly and the digest's exact derivations
(``shared/research/seeds-cost-models.md`` A.5, A.6, A.7, A.8) otherwise; the knapsack and the DP
are checked against exhaustive searches written independently here.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.plan import (
    DropBoxPlacement,
    FractionalKnapsack,
    Join,
    JoinOrderOptimizer,
    Node,
    Select,
    Stream,
    is_feasible,
    join_trees,
    observation1,
    operators,
    plan_cost,
    plan_memory,
    rank_plans_to_approximate,
    scheduling_shares,
)


def example1(c: float) -> dict[str, Node]:
    """Example 1's plans (Figure 3): A ⋈ B ⋈ C, tuple windows of 10, f(AB)=0.5, f(BC)=0.2."""
    a, b, cc = Stream("A", 10, 10), Stream("B", 20, 10), Stream("C", 70, 10)
    return {
        "a": Join(Join(a, b, 0.5, c), cc, 0.2, c),
        "b": Join(Join(b, cc, 0.2, c), a, 0.5, c),
        "c": Join(Join(a, cc, 1.0, c), b, 0.1, c),
    }


# -- Example 1 (digest A.5) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "join1_in", "mid_rate", "mid_window", "join2_in", "load", "memory"),
    [("a", 30, 150, 50, 220, 250, 80), ("b", 90, 180, 20, 190, 280, 50), ("c", 80, 800, 100, 820, 900, 130)],
)
def test_example1_table(
    name: str,
    join1_in: float,
    mid_rate: float,
    mid_window: float,
    join2_in: float,
    load: float,
    memory: float,
) -> None:
    plan = example1(1.0)[name]
    assert isinstance(plan, Join)
    inner = plan.left
    assert isinstance(inner, Join)
    assert inner.left.rate + inner.right.rate == pytest.approx(join1_in)
    assert (inner.rate, inner.window) == pytest.approx((mid_rate, mid_window))
    assert plan.left.rate + plan.right.rate == pytest.approx(join2_in)
    assert plan_cost(plan) == pytest.approx(load)  # c = 1: the load in tuples per second
    assert plan_memory(plan) == pytest.approx(memory)
    # Observation 1's test vector: every plan outputs 1000 tuples/s with a window of 100
    assert (plan.rate, plan.window) == pytest.approx((1000.0, 100.0))


@pytest.mark.parametrize(("c_ms", "feasible"), [(0.5, {"a", "b", "c"}), (4.0, {"a"}), (5.0, set())])
def test_example1_feasibility(c_ms: float, feasible: set[str]) -> None:
    plans = example1(c_ms / 1000)
    assert {n for n, p in plans.items() if is_feasible(p, 1.0)} == feasible


def test_example1_utilization_and_memory_budget() -> None:
    plans = example1(0.0005)
    # The exact values; the paper prints 50 % for (c) (digest A.10-5)
    assert {n: plan_cost(p) for n, p in plans.items()} == pytest.approx({"a": 0.125, "b": 0.14, "c": 0.45})
    assert {n for n, p in plans.items() if is_feasible(p, 1.0, memory_budget=60)} == {"b"}


# -- Figure 4: two selections; scheduling shares -------------------------------------------------


def figure4(rate: float) -> dict[str, Node]:
    s = Stream("S", rate, 0)
    return {
        "A": Select(Select(s, 0.25, 0.0005), 0.5, 0.001),
        "B": Select(Select(s, 0.5, 0.001), 0.25, 0.0005),
    }


def test_figure4_costs_and_shares() -> None:
    plans = figure4(1000)
    assert plan_cost(plans["A"]) == pytest.approx(0.75)
    assert plan_cost(plans["B"]) == pytest.approx(1.25)
    assert [is_feasible(p) for p in plans.values()] == [True, False]
    shares = [s for _, s in scheduling_shares(plans["A"])]
    assert shares == pytest.approx([2 / 3, 1 / 3])  # σ1 : σ2 = 2 : 1
    assert sum(s for _, s in scheduling_shares(plans["B"])) == pytest.approx(1.0)


def test_selection_chain_drops_only_at_the_source() -> None:
    # Observation 2 / (AN-23) at λ = 2000 (digest A.7): x_1 = B / Σ c(i)
    plans = figure4(2000)
    a, b = (DropBoxPlacement(budget=1.0).place(plans[n]) for n in "AB")
    assert (a.keep["S"], a.output_rate) == pytest.approx((2 / 3, 500 / 3))
    assert (b.keep["S"], b.output_rate) == pytest.approx((0.4, 100.0))
    assert DropBoxPlacement(budget=1.0).place(figure4(1000)["A"]).keep["S"] == 1.0


# -- Figure 7 (digest A.8) ----------------------------------------------------------------------


def t_a(r: float) -> float:
    return 1000.0 if r >= 250 else 700 + 5 / 3 * (r - 70) if r >= 70 else 10 * r


def t_b(r: float) -> float:
    return 1000.0 if r >= 280 else 100 + 10 / 3 * (r - 10) if r >= 10 else 10 * r


def t_c(r: float) -> float:
    return 1000.0 if r >= 900 else 200 + 10 / 11 * (r - 20) if r >= 20 else 10 * r


TABLE = {
    250: (1000, 900, 409.09),
    200: (916.67, 733.33, 363.64),
    100: (750, 400, 272.73),
    70: (700, 300, 245.45),
    47.5: (475, 225, 225),
    45: (450, 216.67, 222.73),
    20: (200, 133.33, 200),
    10: (100, 100, 100),
}


def throughput(name: str, r: float) -> float:
    return DropBoxPlacement(budget=1.0).place(example1(1 / r)[name]).output_rate


@pytest.mark.parametrize("r", sorted(TABLE))
def test_figure7_table(r: float) -> None:
    got = [throughput(n, r) for n in "abc"]
    assert got == pytest.approx([t_a(r), t_b(r), t_c(r)], abs=1e-6)
    assert got == pytest.approx(TABLE[r], abs=0.006)  # the digest's two-decimal table


def test_figure7_curves_and_crossovers() -> None:
    for r in [5, 12.5, 33, 60, 90, 150, 260, 300, 1000]:
        assert [throughput(n, r) for n in "abc"] == pytest.approx([t_a(r), t_b(r), t_c(r)], abs=1e-6)
    assert throughput("b", 47.5) == pytest.approx(throughput("c", 47.5), abs=1e-9)
    assert throughput("a", 20) == pytest.approx(throughput("c", 20), abs=1e-9)
    assert throughput("b", 50) > throughput("c", 50) and throughput("b", 45) < throughput("c", 45)
    coeff = DropBoxPlacement.coefficients(example1(1.0)["a"])
    assert (
        coeff[0] == ["A", "B", "C"] and list(coeff[1]) == [100, 200, 700] and list(coeff[2]) == [60, 120, 70]
    )


def test_best_plan_to_approximate_is_not_the_cheapest() -> None:
    ranking = rank_plans_to_approximate(example1(1 / 45), budget=1.0)
    assert [n for n, _ in ranking] == ["a", "c", "b"]  # AN-F8: (b) is cheaper than (c) when feasible
    # at R = 70 plan (a) shuts A and B off (§5.2 issue 1): a lower bound keeps them on
    placed = DropBoxPlacement(budget=1.0).place(example1(1 / 70)["a"])
    assert placed.output_rate == pytest.approx(700) and placed.keep["C"] == 1.0
    bounded = DropBoxPlacement(budget=1.0, keep_min=0.1).place(example1(1 / 70)["a"])
    assert min(bounded.keep.values()) >= 0.1 and bounded.cost == pytest.approx(1.0)
    assert bounded.output_rate < placed.output_rate


# -- Observations 1 and 3 (properties) ----------------------------------------------------------

rates = st.floats(0.1, 100)
windows = st.floats(0.5, 50)
sels = st.floats(0.01, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(rates, windows), min_size=2, max_size=4), st.lists(sels, min_size=6, max_size=6))
def test_observation1_every_join_order_gives_the_same_output(
    specs: list[tuple[float, float]], fs: list[float]
) -> None:
    streams = [Stream(chr(65 + i), r, w) for i, (r, w) in enumerate(specs)]
    preds = {
        frozenset(p): f
        for p, f in zip(itertools.combinations([s.name for s in streams], 2), fs, strict=False)
    }
    big_f = math.prod(preds.values())
    want = observation1(streams, big_f)
    for tree in join_trees(streams, preds, 0.001):
        assert (tree.rate, tree.window) == pytest.approx(want, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(rates, rates, windows, windows, sels, st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_observation3_pushing_an_output_drop_to_the_inputs(
    la: float, lb: float, wa: float, wb: float, f: float, x1: float, x2: float, x3: float
) -> None:
    c = 0.001

    def run(y1: float, y2: float, y3: float) -> tuple[float, float]:
        # boxes before the join scale its input rates (tuple windows stay), a box after it the output
        join = Join(Stream("A", la * y1, wa), Stream("B", lb * y2, wb), f, c)
        return y3 * join.rate, plan_cost(join)

    rate, cost = run(x1, x2, x3)
    rate2, cost2 = run(x1 * x3, x2 * x3, 1.0)
    assert rate2 == pytest.approx(rate, rel=1e-9, abs=1e-12)  # (AN-25), (AN-26)
    assert cost2 <= cost + 1e-12


# -- the knapsack against exhaustive search -----------------------------------------------------


def vertex_optimum(b: list[float], a: list[float], lo: list[float], w: list[float], budget: float) -> float:
    """The LP optimum by enumerating its vertices: every x_k at a bound except at most one."""
    n, best = len(b), -math.inf
    for free in [None, *range(n)]:
        for bounds in itertools.product(*[(lo[k], 1.0) for k in range(n)]):
            x = list(bounds)
            if free is not None:
                rest = budget - sum(a[k] * x[k] for k in range(n) if k != free)
                if a[free] == 0:
                    continue
                x[free] = rest / a[free]
                if not lo[free] - 1e-12 <= x[free] <= 1 + 1e-12:
                    continue
            if sum(a[k] * x[k] for k in range(n)) <= budget + 1e-9:
                best = max(best, sum(w[k] * b[k] * x[k] for k in range(n)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_knapsack_equals_exhaustive_vertex_search(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    b = [rng.choice([0.0, rng.uniform(0, 10)]) for _ in range(n)]
    a = [rng.choice([0.0, rng.uniform(0, 5), rng.uniform(0, 5)]) for _ in range(n)]
    lo = [rng.choice([0.0, rng.uniform(0, 0.5)]) for _ in range(n)]
    w = [rng.choice([1.0, rng.uniform(0.1, 3)]) for _ in range(n)]
    budget = rng.uniform(0, sum(a) + 0.5)
    sol = FractionalKnapsack(budget).solve(b, a, lower=lo, weights=w)
    if sum(a[k] * lo[k] for k in range(n)) > budget:
        # the lower bounds, and boxes that cost nothing kept whole
        assert not sol.feasible and sol.x == pytest.approx([1.0 if a[k] == 0 else lo[k] for k in range(n)])
        return
    assert sol.feasible and sol.cost <= budget + 1e-9
    assert all(lo[k] - 1e-12 <= sol.x[k] <= 1 + 1e-12 for k in range(n))
    assert sol.value == pytest.approx(vertex_optimum(b, a, lo, w, budget), rel=1e-9, abs=1e-9)


def test_knapsack_and_placement_validate() -> None:
    with pytest.raises(ValueError, match="budget"):
        FractionalKnapsack(-1)
    with pytest.raises(ValueError, match="lower"):
        FractionalKnapsack(1).solve([1], [1], lower=[2])
    with pytest.raises(ValueError, match="keep_min"):
        DropBoxPlacement(1, keep_min=1.5)
    with pytest.raises(ValueError, match="selectivity"):
        Join(Stream("A", 1, 1), Stream("B", 1, 1), 2.0)


def test_weights_favour_the_important_stream() -> None:
    plan = Join(Stream("A", 10, 10), Stream("B", 10, 10), 0.1, 0.01)  # symmetric: a tie without weights
    placed = DropBoxPlacement(budget=0.1, weights={"B": 2.0}).place(plan)
    assert placed.keep == pytest.approx({"A": 0.0, "B": 1.0})


# -- the join order (AN-F4) ---------------------------------------------------------------------


def test_example1_optimizer_picks_a_for_cpu_and_b_for_memory() -> None:
    streams = [Stream("A", 10, 10), Stream("B", 20, 10), Stream("C", 70, 10)]
    preds = {frozenset("AB"): 0.5, frozenset("BC"): 0.2}
    assert plan_cost(JoinOrderOptimizer(0.004).best(streams, preds)) == pytest.approx(1.0)  # plan (a)
    best_m = JoinOrderOptimizer(0.004, objective="memory").best(streams, preds)
    assert plan_memory(best_m) == pytest.approx(50)  # plan (b)
    assert [op.label for op in operators(best_m) if isinstance(op, Join)] == ["(B ⋈ C)", "(A ⋈ (B ⋈ C))"]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("objective", ["cpu", "memory"])
def test_dp_equals_brute_force_over_bushy_trees(seed: int, objective: str) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    streams = [Stream(chr(65 + i), rng.uniform(1, 50), rng.uniform(1, 20)) for i in range(n)]
    preds = {
        frozenset(p): rng.uniform(0.01, 0.5)
        for p in itertools.combinations([s.name for s in streams], 2)
        if rng.random() < 0.6
    }
    measure = plan_cost if objective == "cpu" else plan_memory
    brute = min(measure(t) for t in join_trees(streams, preds, 0.001))
    best = JoinOrderOptimizer(0.001, objective=objective).best(streams, preds)
    assert measure(best) == pytest.approx(brute, rel=1e-9)
    assert sorted(best.sources) == [s.name for s in streams]
