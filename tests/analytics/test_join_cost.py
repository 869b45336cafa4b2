"""The cost model and optimizer of seed 003 (eqs. 2, 9-15), Theorems 2-3, ``netmon analyze shedding``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.join_cost import STRATEGIES, Allocation, JoinCostModel
from cli.main import cli

# -- hand-computed cases ---------------------------------------------------------------------------
# λ_L = 100/s, λ_R = 200/s, T_L = 2 s, T_R = 1 s, f = 0.01, C_u = C_p = 1 ms.
#   full output (9): 0.01·100·200·(2 + 1) = 600/s; full cost (2): (100 + 200)·1e-3 + 600·1e-3 = 0.9.
# Budget B = 0.45:
#   PNI (14)-(15): objective 0.01·100·200·(2·x_L + 1·x_R) = 400·x_L + 200·x_R;
#     cost (100·x_L + 200·x_R)·1e-3 + (400·x_L + 200·x_R)·1e-3 = 0.5·x_L + 0.4·x_R ≤ 0.45.
#     Output per unit cost: x_L 400/0.5 = 800 > x_R 200/0.4 = 500, so x_L = 0.45/0.5 = 0.9, x_R = 0:
#     output 360/s.
#   INP (12)-(13): objective 200·(2·x_R + 1·x_L) = 200·x_L + 400·x_R; cost 0.3 + output·1e-3 ≤ 0.45
#     → output ≤ 150/s. Whole segment optimal; closest to x_L = x_R: 600·s = 150 → s = 0.25.
#   CF (10)-(11): objective 600·x_L·x_R; cost 0.1·x_L + 0.2·x_R + 0.6·x_L·x_R ≤ 0.45. On the tight curve
#     x_R = (0.45 - 0.1·x)/(0.2 + 0.6·x); d/dx [x·x_R] = 0 ⇔ 0.06·x² + 0.04·x - 0.09 = 0
#     → x_L = (-0.04 + sqrt(0.0016 + 0.0216))/0.12 = 0.935962..., x_R = 0.467981..., output 262.81/s.
HAND = dict(
    lambda_left=100.0,
    lambda_right=200.0,
    window_left_s=2.0,
    window_right_s=1.0,
    selectivity=0.01,
    cu_s=1e-3,
    cp_s=1e-3,
)


def test_hand_computed_rates_and_costs():
    m = JoinCostModel(**HAND)
    assert m.output_rate() == pytest.approx(600.0)
    assert m.cost() == pytest.approx(0.9)
    assert m.output_rate("cf", 0.5, 0.5) == pytest.approx(600 * 0.25)
    assert m.output_rate("inp", 1.0, 0.0) == pytest.approx(0.01 * 100 * 200 * 1.0)  # T_R·x_L
    assert m.output_rate("pni", 1.0, 0.0) == pytest.approx(0.01 * 100 * 200 * 2.0)  # T_L·x_L
    assert m.cost("inp", 0.0, 0.0) == pytest.approx(0.3)  # maintenance only
    assert m.cost("pni", 0.0, 0.0) == 0.0


def test_hand_computed_optima():
    opt = JoinCostModel(**HAND).optima(0.45)
    assert (opt["pni"].x_left, opt["pni"].x_right) == pytest.approx((0.9, 0.0))
    assert opt["pni"].output_rate == pytest.approx(360.0)
    assert (opt["inp"].x_left, opt["inp"].x_right) == pytest.approx((0.25, 0.25))
    assert opt["inp"].output_rate == pytest.approx(150.0)
    x_cf = (-0.04 + math.sqrt(0.0016 + 0.0216)) / 0.12
    assert opt["cf"].x_left == pytest.approx(x_cf, rel=1e-12)
    assert opt["cf"].x_right == pytest.approx((0.45 - 0.1 * x_cf) / (0.2 + 0.6 * x_cf), rel=1e-12)
    assert opt["cf"].output_rate == pytest.approx(600 * x_cf * opt["cf"].x_right, rel=1e-12)
    assert (opt["none"].x_left, opt["none"].output_rate, opt["none"].cost) == (1.0, 600.0, pytest.approx(0.9))
    for s in ("cf", "inp", "pni"):
        assert opt[s].cost == pytest.approx(0.45, rel=1e-12)


def test_feasible_join_keeps_everything():
    opt = JoinCostModel(**HAND).optima(1.0)  # full cost 0.9 ≤ 1
    for s in STRATEGIES:
        assert (opt[s].x_left, opt[s].x_right, opt[s].output_rate) == (1.0, 1.0, pytest.approx(600.0))


def test_inp_cannot_meet_a_budget_below_its_maintenance_cost():
    # INP inserts everything: (100 + 200)·1e-3 = 0.3 > 0.2, whatever x.
    a = JoinCostModel(**HAND).optimum("inp", 0.2)
    assert (a.x_left, a.x_right, a.output_rate) == (0.0, 0.0, 0.0)
    assert a.cost == pytest.approx(0.3)


def test_symmetric_inputs_get_symmetric_fractions():
    m = JoinCostModel(100, 100, 1.0, 1.0, 0.01, 1e-3, 1e-3)  # full cost 0.2 + 200·1e-3 = 0.4
    for s in ("cf", "inp", "pni"):
        a = m.optimum(s, 0.2)
        assert a.x_left == pytest.approx(a.x_right, abs=1e-12), s
    # PNI: 0.2·(x_L + x_R) ≤ 0.2 → x = 0.5 each, output 100·(0.5 + 0.5) = 100/s.
    assert m.optimum("pni", 0.2).x_left == pytest.approx(0.5)
    assert m.optimum("pni", 0.2).output_rate == pytest.approx(100.0)


def test_allocation_json_form():
    assert Allocation("pni", 0.5, 1.0, 3.0, 0.1).to_dict() == {
        "x_l": 0.5,
        "x_r": 1.0,
        "output_rate": 3.0,
        "cost": 0.1,
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lambda_left", -1.0, "lambda_left"),
        ("window_right_s", math.nan, "window_right_s"),
        ("selectivity", 1.5, "selectivity"),
        ("cp_s", -1e-3, "cp_s"),
    ],
)
def test_validation_names_the_parameter(field, value, message):
    with pytest.raises(ValueError, match=message):
        JoinCostModel(**{**HAND, field: value})


def test_bad_strategy_budget_and_fraction():
    m = JoinCostModel(**HAND)
    with pytest.raises(ValueError, match="strategy"):
        m.optimum("drop-all", 0.5)
    with pytest.raises(ValueError, match="budget"):
        m.optimum("pni", -1)
    with pytest.raises(ValueError, match="x_left"):
        m.output_rate("pni", 1.5, 0.5)


def test_repr_round_trips():
    m = JoinCostModel(**HAND)
    assert repr(m).startswith("JoinCostModel(lambda_left=100.0, lambda_right=200.0")
    assert repr(m.clone()) == repr(m)


# -- brute-force oracle ----------------------------------------------------------------------------
def _oracle(m: JoinCostModel, strategy: str, budget: float, n: int = 20_001) -> float:
    """Max output over a fine x_L grid, with the largest feasible x_R for each x_L computed from
    the budget constraint directly (every strategy's cost grows with x_R), then refined by a
    ternary search between the best grid point's neighbours."""
    grid = np.linspace(0.0, 1.0, n)
    vals = _grid_values(m, strategy, budget, grid)
    i = int(np.argmax(vals))
    lo, hi = grid[max(0, i - 1)], grid[min(n - 1, i + 1)]
    for _ in range(100):
        a, b = _grid_values(m, strategy, budget, np.array([lo + (hi - lo) / 3, hi - (hi - lo) / 3]))
        if a < b:
            lo = lo + (hi - lo) / 3
        else:
            hi = hi - (hi - lo) / 3
    return float(max(vals[i], _grid_values(m, strategy, budget, np.array([(lo + hi) / 2]))[0]))


def _grid_values(m: JoinCostModel, strategy: str, budget: float, xl: np.ndarray) -> np.ndarray:
    lam_l, lam_r, f = m.lambda_left, m.lambda_right, m.selectivity
    tl, tr, cu, cp = m.window_left_s, m.window_right_s, m.cu_s, m.cp_s
    pairs = f * lam_l * lam_r
    if strategy == "cf":
        num = budget - lam_l * cu * xl
        den = lam_r * cu + pairs * (tl + tr) * cp * xl
    elif strategy == "pni":
        num = budget - (lam_l * cu + pairs * tl * cp) * xl
        den = np.full_like(xl, lam_r * cu + pairs * tr * cp)
    else:
        num = budget - (lam_l + lam_r) * cu - pairs * tr * cp * xl
        den = np.full_like(xl, pairs * tl * cp)
    with np.errstate(divide="ignore", invalid="ignore"):
        xr = np.where(den > 0, num / den, np.where(num >= 0, 1.0, -1.0))
    xr = np.minimum(1.0, xr)
    ok = xr >= 0
    xr = np.maximum(0.0, xr)
    if strategy == "cf":
        out = pairs * xl * xr * (tl + tr)
    elif strategy == "pni":
        out = pairs * (tl * xl + tr * xr)
    else:
        out = pairs * (tl * xr + tr * xl)
    return np.where(ok, out, -np.inf)


positive = st.floats(min_value=1.0, max_value=1e4)
windows = st.floats(min_value=0.01, max_value=10.0)
costs = st.floats(min_value=1e-7, max_value=1e-3)
selectivities = st.floats(min_value=1e-4, max_value=1.0)


@st.composite
def infeasible_joins(draw):
    m = JoinCostModel(
        draw(positive),
        draw(positive),
        draw(windows),
        draw(windows),
        draw(selectivities),
        draw(costs),
        draw(costs),
    )
    return m, draw(st.floats(min_value=0.02, max_value=0.98)) * m.cost()


@settings(max_examples=40, deadline=None)
@given(infeasible_joins())
def test_optimizer_matches_brute_force(case):
    """CF to 1e-6 (the issue's tolerance), PNI and INP exactly up to float rounding."""
    m, budget = case
    for strategy in ("cf", "pni", "inp"):
        a = m.optimum(strategy, budget)
        best = _oracle(m, strategy, budget, n=20_001)
        if best == -np.inf:  # INP: maintenance alone exceeds the budget
            assert strategy == "inp" and a.output_rate == 0.0
            continue
        assert a.output_rate >= best * (1 - 1e-9) - 1e-12, strategy
        assert a.output_rate <= best * (1 + 1e-6) + 1e-12, strategy
        assert a.cost <= budget * (1 + 1e-9), strategy


@settings(max_examples=200, deadline=None)
@given(infeasible_joins())
def test_theorems_2_and_3_infeasible(case):
    """Infeasible join: PNI's optimum > CF's (Theorem 3); INP's < CF's and < PNI's (Theorem 2)."""
    m, budget = case
    assert not m.is_feasible(budget)
    cf, inp, pni = (m.optimum(s, budget).output_rate for s in ("cf", "inp", "pni"))
    assert pni > cf
    assert inp < cf
    assert inp < pni
    # Lemma 1: some fraction below 1 for every strategy.
    for s in ("cf", "inp", "pni"):
        a = m.optimum(s, budget)
        assert min(a.x_left, a.x_right) < 1


@settings(max_examples=100, deadline=None)
@given(positive, positive, windows, windows, selectivities, costs, costs, st.floats(1.0, 10.0))
def test_theorems_feasible_all_equal_full_output(lam_l, lam_r, t_l, t_r, f, cu, cp, slack):
    m = JoinCostModel(lam_l, lam_r, t_l, t_r, f, cu, cp)
    budget = m.cost() * slack
    rates = {s: m.optimum(s, budget).output_rate for s in STRATEGIES}
    assert rates == {s: m.output_rate() for s in STRATEGIES}


# -- netmon analyze shedding -----------------------------------------------------------------------
ARGS = [
    "analyze",
    "shedding",
    "--lambda-l",
    "100",
    "--lambda-r",
    "200",
    "--window-l",
    "2",
    "--window-r",
    "1",
    "--selectivity",
    "0.01",
    "--cu",
    "1e-3",
    "--cp",
    "1e-3",
    "--budget",
    "0.45",
]


def test_cli_prints_exactly_the_four_strategies():
    result = CliRunner().invoke(cli, [*ARGS, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == ["none", "cf", "inp", "pni"]
    for entry in data.values():
        assert set(entry) == {"x_l", "x_r", "output_rate", "cost"}
    assert data["pni"]["x_l"] == pytest.approx(0.9)
    assert data["pni"]["output_rate"] == pytest.approx(360.0)
    assert data["inp"]["output_rate"] == pytest.approx(150.0)
    assert data["none"]["cost"] == pytest.approx(0.9)


def test_cli_table_and_errors():
    result = CliRunner().invoke(cli, [*ARGS, "--format", "table"])
    assert result.exit_code == 0
    assert "infeasible" in result.output.splitlines()[0]
    bad = CliRunner().invoke(cli, [*ARGS[:-1], "-0.5"])
    assert bad.exit_code != 0
    assert "--budget" in bad.output
