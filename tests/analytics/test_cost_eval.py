"""``analytics.cost_eval``: the seeds' numbers, against the papers' and against brute force.

Expected values are the papers' ([AN] Example 1, Figure 7; [CKSV] E1, E3) and the digest's exact
derivations (``shared/research/seeds-cost-models.md`` A.5, A.8, B.6, B.7). The brute forces are
written here independently of the module: (AN-3)/(AN-4) by hand for Example 1, the digest's
closed forms of Figure 7 scanned on a grid, a window's content simulated element by element for
E1, and E3's results and state counted pair by pair over the same generated streams.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from analytics.cost_eval import (
    EXACT,
    Check,
    adaptation_timeline,
    boundary,
    e1_checks,
    e3_checks,
    e3_measure,
    e3_streams,
    evaluate,
    example1_checks,
    example1_plans,
    figure7_checks,
    format_table,
    throughput,
    window_span,
)
from analytics.plan import Join

NS = 1_000_000_000

# -- [AN] Example 1 -----------------------------------------------------------------------------


def _by_hand(plan: str) -> tuple[float, float]:
    """(load at c = 1, memory) of a plan from (AN-3), (AN-4), (AN-9), (AN-11), written out."""
    rate = {"A": 10.0, "B": 20.0, "C": 70.0}
    window = {"A": 10.0, "B": 10.0, "C": 10.0}
    first, second, third, f1, f2 = {
        "a": ("A", "B", "C", 0.5, 0.2),
        "b": ("B", "C", "A", 0.2, 0.5),
        "c": ("A", "C", "B", 1.0, 0.1),
    }[plan]
    mid_rate = f1 * (window[second] * rate[first] + window[first] * rate[second])
    mid_window = f1 * window[first] * window[second]
    load = rate[first] + rate[second] + mid_rate + rate[third]
    memory = window[first] + window[second] + mid_window + window[third]
    return load, memory


def test_example1_against_the_paper_and_by_hand() -> None:
    checks = example1_checks()
    assert all(c.ok for c in checks) and len(checks) == 9
    got = {c.figure: c.ours for c in checks}
    for plan, (load, memory) in {"a": (250, 80), "b": (280, 50), "c": (900, 130)}.items():
        assert _by_hand(plan) == (load, memory)
        assert got[f"load of plan ({plan}), tuples/s"] == pytest.approx(load, abs=EXACT)
        assert got[f"memory of plan ({plan}), tuples"] == pytest.approx(memory, abs=EXACT)
    for c_ms, want in ((0.5, "a, b, c"), (4.0, "a"), (5.0, "none")):
        by_hand = [p for p in "abc" if _by_hand(p)[0] * c_ms / 1000 <= 1 + 1e-12]
        assert got[f"feasible plans at c = {c_ms:g} ms"] == want == (", ".join(by_hand) or "none")


def test_a_check_fails_outside_its_tolerance() -> None:
    assert Check("x", "y", 0.5, 0.54, 0.05, "s").ok
    assert not Check("x", "y", 0.5, 0.56, 0.05, "s").ok
    assert not Check("x", "y", 0.5, math.nan, 0.05, "s").ok
    assert not Check("x", "y", "a", "a, b", 0.0, "s").ok
    assert Check("x", "y", 1.0, 2.0, 0.0, "s").to_dict()["ok"] is False


# -- [AN] Figure 7 ------------------------------------------------------------------------------


def t_a(r: float) -> float:
    return 1000.0 if r >= 250 else 700 + 5 / 3 * (r - 70) if r >= 70 else 10 * r


def t_b(r: float) -> float:
    return 1000.0 if r >= 280 else 100 + 10 / 3 * (r - 10) if r >= 10 else 10 * r


def t_c(r: float) -> float:
    return 1000.0 if r >= 900 else 200 + 10 / 11 * (r - 20) if r >= 20 else 10 * r


def _last_change(h, grid: np.ndarray) -> float:
    """On a grid scanned downward from its top, the first point where h's sign differs from the top's."""
    top = np.sign(round(h(grid[-1]), 9))
    for x in grid[::-1]:
        if np.sign(round(h(x), 9)) != top:
            return float(x)
    raise AssertionError("no change")


def test_figure7_turning_points_against_the_closed_forms() -> None:
    checks = {c.figure: c for c in figure7_checks()}
    assert all(c.ok for c in checks.values())
    for r in (5, 10, 20, 33, 45, 47.5, 70, 100, 250, 280, 900):
        assert [throughput(p, r) for p in "abc"] == pytest.approx([t_a(r), t_b(r), t_c(r)], abs=1e-6)
    grid = np.round(np.arange(1.0, 100.0001, 0.01), 2)
    # The closed forms' crossings on a 0.01 grid, and the bisection on our knapsack's curves agree.
    assert _last_change(lambda r: t_b(r) - t_c(r), grid) == pytest.approx(47.5, abs=0.011)
    assert checks["(b) = (c) at R, tuples/s"].ours == pytest.approx(47.5, abs=1e-9)
    assert _last_change(lambda r: t_a(r) - t_c(r), grid) == pytest.approx(20, abs=0.011)
    assert checks["(a) = (c) at R, tuples/s"].ours == pytest.approx(20, abs=1e-9)
    spread = lambda r: max(t_a(r), t_b(r), t_c(r)) - min(t_a(r), t_b(r), t_c(r))  # noqa: E731
    assert _last_change(spread, np.round(np.arange(1.0, 45.0001, 0.01), 2)) == pytest.approx(10, abs=0.011)
    assert checks["all three plans alike from R, tuples/s"].ours == pytest.approx(10, abs=1e-9)
    assert checks["plan (a) drops nothing down to R, tuples/s"].ours == pytest.approx(250, abs=1e-9)
    assert t_a(249.99) < 1000 == t_a(250)


def test_boundary() -> None:
    assert boundary(lambda x: x - 3.25, 10, 0) == 3.25
    assert boundary(lambda x: max(0.0, x - 7), 10, 0, step=2) == 7  # where h starts being 0
    assert boundary(lambda x: 5 - x, 0, 100) == 5
    with pytest.raises(ValueError, match="is 0"):
        boundary(lambda x: 0.0, 1, 2)
    with pytest.raises(ValueError, match="keeps its sign"):
        boundary(lambda x: 1.0, 1, 2)


# -- [CKSV] E1 ----------------------------------------------------------------------------------


def _simulated_span(initial: float, changes: list[tuple[float, float]], at: float, dt: float) -> float:
    """Elements arriving every ``dt`` from long before, each valid for the window in force at its
    arrival: the count alive at ``at`` times ``dt``."""
    arrivals = np.arange(-4 * max(initial, *(w for _, w in changes)), at + dt / 2, dt)
    windows = np.full(len(arrivals), initial)
    for t, w in changes:
        windows[arrivals >= t] = w
    return float(np.count_nonzero((arrivals <= at) & (arrivals + windows > at))) * dt


def test_e1_timeline_is_the_papers() -> None:
    checks = e1_checks()
    assert [c.ours for c in checks] == [110.0, 140.0, 180.0, 210.0] and all(c.ok for c in checks)
    shrink, grow = adaptation_timeline(60, [(80, 30), (150, 60)])
    assert (shrink.old_s, shrink.new_s, grow.old_s, grow.new_s) == (60, 30, 30, 60)
    # The content: 60 s until 110, falling to 30 at 140, 30 until 180, rising to 60 at 210.
    for at, want in ((100, 60), (110, 60), (125, 45), (140, 30), (170, 30), (180, 30), (195, 45), (210, 60)):
        assert window_span(60, [(80, 30), (150, 60)], at) == want


def test_window_span_against_simulation() -> None:
    rng = random.Random(4)
    for _ in range(20):
        initial = rng.choice([10.0, 20.0, 30.0])
        changes = [(rng.choice([5.0, 15.0]), rng.choice([5.0, 25.0])), (rng.choice([40.0, 50.0]), 20.0)]
        for at in np.arange(0.0, 100.0, 3.5):
            sim = _simulated_span(initial, changes, float(at), dt=0.125)
            assert window_span(initial, changes, float(at)) == pytest.approx(sim, abs=0.125 + 1e-9)


def test_timeline_is_t_plus_min_and_t_plus_max_when_changes_do_not_overlap() -> None:
    rng = random.Random(7)
    for _ in range(50):
        windows = [float(rng.randint(1, 60)) for _ in range(5)]
        at, changes = float(rng.randint(0, 30)), []
        for k, new in enumerate(windows[1:]):
            if k:  # after the previous change completed: t + max(w, w') of that change
                at += max(windows[k - 1], windows[k]) + rng.randint(0, 30)
            changes.append((at, new))
        timeline = adaptation_timeline(windows[0], changes)
        for change, (t, new), old in zip(timeline, changes, windows[:-1], strict=True):
            want = (t, t) if new == old else (t + min(old, new), t + max(old, new))
            assert (change.visible_s, change.complete_s) == want
    with pytest.raises(ValueError, match="increasing"):
        adaptation_timeline(60, [(80, 30), (80, 60)])
    with pytest.raises(ValueError, match="> 0"):
        adaptation_timeline(60, [(80, 0)])


def test_a_change_before_the_last_one_completed() -> None:
    # 60 → 30 at 80, then 30 → 10 at 100 while the first is under way. The second is visible at
    # 110, when the arrivals of [80, 100) start to go under their 30 s, and complete only at 140,
    # when the last arrivals before 80 (under 60 s) are gone too: not at 100 + max(30, 10).
    first, second = adaptation_timeline(60, [(80, 30), (100, 10)])
    assert (first.visible_s, first.complete_s) == (110, 140)
    assert (second.visible_s, second.complete_s) == (110, 140)
    schedule = [(80.0, 30.0), (100.0, 10.0)]
    assert [window_span(60, schedule, at) for at in (105, 111, 130, 140, 200)] == [60, 58, 20, 10, 10]


# -- [CKSV] E3 ----------------------------------------------------------------------------------


def _brute_e3(duration_s: float, window_s: float, seed: int) -> dict[str, float]:
    """Results after the warm-up and the mean state, pair by pair, for the full and WR runs."""
    (lt, lk), (rt, rk) = e3_streams(100.0, 50, duration_s, seed)
    later = np.maximum(lt[:, None], rt[None, :])
    same = lk[:, None] == rk[None, :]
    gap = np.abs(lt[:, None] - rt[None, :])
    out: dict[str, float] = {}
    for name, w in (("full", window_s), ("wr", window_s / 2)):
        w_ns = round(w * NS)
        out[f"{name}_results"] = int(np.count_nonzero(same & (gap <= w_ns) & (later >= window_s * NS)))
        states = []
        for start in range(round(window_s), round(duration_s)):
            end = (start + 1) * NS
            seen = np.concatenate([lt[lt < end], rt[rt < end]])
            clock = seen.max()
            held = np.count_nonzero((lt < end) & (lt >= clock - w_ns)) + np.count_nonzero(
                (rt < end) & (rt >= clock - w_ns)
            )
            states.append(held)
        out[f"{name}_state"] = float(np.mean(states))
    return out


def test_e3_measured_on_the_join_equals_brute_force() -> None:
    result = e3_measure(duration_s=30.0, seed=3)
    want = _brute_e3(30.0, 10.0, seed=3)
    assert result.full.results == want["full_results"] and result.wr.results == want["wr_results"]
    assert result.full.state == pytest.approx(want["full_state"], rel=1e-12)
    assert result.wr.state == pytest.approx(want["wr_state"], rel=1e-12)
    assert result.wr_mismatches == 0
    assert result.full.result_rate == result.full.results / 20.0


@pytest.mark.parametrize("seed", [1, 2])
def test_e3_ratios_are_the_papers(seed: int) -> None:
    result = e3_measure(duration_s=120.0, seed=seed)
    checks = e3_checks(result)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    r = result.ratios()
    assert r["wr_memory"] == pytest.approx(0.5, abs=0.02) and r["ls_memory"] == pytest.approx(0.5, abs=0.03)
    assert r["wr_results"] == pytest.approx(0.5, abs=0.02) and r["ls_results"] == pytest.approx(
        0.25, abs=0.02
    )
    assert result.full.result_rate == pytest.approx(4000, rel=0.05)
    assert result.ls.keep == 0.5 and result.wr.window_s == 5.0
    with pytest.raises(ValueError, match="duration_s"):
        e3_measure(duration_s=10.5)


def test_evaluate_and_the_table() -> None:
    result = evaluate(seed=1, duration_s=60.0)
    assert result.ok and len(result.checks) == 9 + 4 + 4 + 6
    lines = format_table(result.checks)
    assert lines[0] == "| experiment | figure | paper | netmon | tolerance | check | source |"
    assert "| [AN] Figure 7 | (b) = (c) at R, tuples/s | 47.5 | 47.5 | exact | ok |" in "\n".join(lines)
    assert all(line.count("|") == 8 for line in lines)  # no figure breaks the Markdown table
    data = result.to_dict()
    assert data["ok"] is True and len(data["checks"]) == len(result.checks)
    assert [(c["visible_s"], c["complete_s"]) for c in data["e1"]["timeline"]] == [(110, 140), (180, 210)]
    assert data["e3"]["ratios"] == result.e3.ratios() and data["e3"]["full"]["window_s"] == 10.0
    plan_c = example1_plans(1.0)["c"]
    assert isinstance(plan_c, Join) and isinstance(plan_c.left, Join)
    assert plan_c.left.selectivity == 1.0  # (c) starts with a Cartesian product
