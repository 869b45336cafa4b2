"""Shedding strategies (seed 003 §3.2.2, §3.3) on the join, and ``netmon eval shedding``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from analytics.join import ExactWindowJoin, SymmetricHashJoin, combine_stats
from analytics.join_eval import (
    EVAL_STRATEGIES,
    WindowSpec,
    evaluate_shedding,
    parse_budgets,
    synthetic_sides,
    theorem_checks,
    write_report,
)
from analytics.join_queries import JoinSide, run_join
from analytics.shedding import Decisions, LoadShedder, OnlineMaxSubset
from cli.main import cli

S = 1_000_000_000


def streams(seed=1, n=3000, span_s=30, n_keys=40, skew=0.0):
    rng = np.random.default_rng(seed)
    w = (np.arange(n_keys) + 1.0) ** -skew
    w /= w.sum()
    tl = np.sort(rng.integers(0, span_s * 10, n)) * (S // 10)
    tr = np.sort(rng.integers(0, span_s * 10, n)) * (S // 10)
    return tl, rng.choice(n_keys, n, p=w), tr, rng.choice(n_keys, n, p=w)


def run(shedder, tl, kl, tr, kr, t=(1.0, 0.5), span_s=30, step_s=1):
    j = SymmetricHashJoin(*t, shedder=shedder)
    outs, stats = [], []
    for b in range(0, span_s, step_s):
        ml = (tl >= b * S) & (tl < (b + step_s) * S)
        mr = (tr >= b * S) & (tr < (b + step_s) * S)
        outs.append(
            j.process_batch(
                tl[ml], kl[ml], tr[mr], kr[mr], left_ids=np.flatnonzero(ml), right_ids=np.flatnonzero(mr)
            )
        )
        stats.append(j.last_stats)
    return pd.concat(outs, ignore_index=True), combine_stats(stats)


def pairs(frame):
    return set(zip(frame["left_id"].tolist(), frame["right_id"].tolist(), strict=True))


@pytest.mark.parametrize("strategy", ["cf", "inp", "pni"])
def test_shed_output_is_exactly_the_pairs_the_decisions_allow(strategy):
    """Replay the seeded coins in processing order: a pair is kept iff its earlier tuple was
    inserted and its later tuple probed (and it is in the full output)."""
    tl, kl, tr, kr = streams()
    full, _ = run(None, tl, kl, tr, kr)
    shed, _ = run(LoadShedder(strategy, 0.6, 0.3, seed=42), tl, kl, tr, kr)
    # Processing order: timestamp, left before right at equal timestamps, input order within a side.
    order = np.argsort(np.concatenate([tl, tr]), kind="stable")
    is_left = order < len(tl)
    u = np.random.default_rng(42).random(len(order))
    x = np.where(is_left, 0.6, 0.3)
    coin = u < x
    insert = {"cf": coin, "inp": np.ones_like(coin), "pni": coin}[strategy]
    probe = {"cf": coin, "inp": coin, "pni": np.ones_like(coin)}[strategy]
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order))
    ins_o, prb_o = np.empty_like(insert), np.empty_like(probe)
    ins_o[order], prb_o[order] = insert, probe
    n = len(tl)
    expected = set()
    for a, b in pairs(full):
        ra, rb = rank[a], rank[n + b]
        earlier, later = (a, n + b) if ra < rb else (n + b, a)
        if ins_o[earlier] and prb_o[later]:
            expected.add((a, b))
    got = pairs(shed)
    assert got == expected
    assert got < pairs(full)


@pytest.mark.parametrize(
    ("strategy", "x_left", "x_right"),
    [("cf", 0.3, 0.8), ("inp", 0.25, 0.6), ("pni", 0.4, 0.1), ("none", 0.2, 0.2)],
)
def test_measured_fractions_match_x_within_sampling_error(strategy, x_left, x_right):
    tl, kl, tr, kr = streams(n=5000)
    _, st = run(LoadShedder(strategy, x_left, x_right, seed=3), tl, kl, tr, kr)
    expect = {
        "cf": ((x_left, x_right), (x_left, x_right)),
        "inp": ((1, 1), (x_left, x_right)),
        "pni": ((x_left, x_right), (1, 1)),
        "none": ((1, 1), (1, 1)),
    }[strategy]
    measured = (
        (st.insert_fraction_left, st.insert_fraction_right),
        (st.probe_fraction_left, st.probe_fraction_right),
    )
    for (p_l, p_r), (m_l, m_r) in zip(expect, measured, strict=True):
        for p, m, n in ((p_l, m_l, st.n_left), (p_r, m_r, st.n_right)):
            # Binomial: |p̂ - p| ≤ 4·sqrt(p(1-p)/n) (fails with probability < 1e-4 per check).
            assert abs(m - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12
    if strategy == "cf":  # one coin per tuple: insert and probe together
        assert (st.inserted_left, st.inserted_right) == (st.probed_left, st.probed_right)


def test_shedding_is_independent_of_batch_boundaries():
    tl, kl, tr, kr = streams()
    a, _ = run(LoadShedder("pni", 0.5, 0.5, seed=9), tl, kl, tr, kr, step_s=1)
    b, _ = run(LoadShedder("pni", 0.5, 0.5, seed=9), tl, kl, tr, kr, step_s=3)
    assert pairs(a) == pairs(b)


def test_horvitz_thompson_estimate_of_the_unshed_output():
    tl, kl, tr, kr = streams(n=6000, n_keys=20)
    full, _ = run(None, tl, kl, tr, kr)
    for strategy in ("cf", "inp", "pni"):
        shed, st = run(LoadShedder(strategy, 0.5, 0.5, seed=1), tl, kl, tr, kr)
        assert len(shed) < 0.8 * len(full)
        assert st.unshed_estimate == pytest.approx(len(full), rel=0.1), strategy


def test_pni_beats_cf_at_the_optimizers_fractions_on_generated_streams():
    """Theorem 3 on a realisation: the optimizer's PNI fractions produce more than its CF ones."""
    from analytics.join_cost import JoinCostModel

    tl, kl, tr, kr = streams(n=5000, n_keys=200)
    full, st = run(None, tl, kl, tr, kr)
    model = JoinCostModel(st.lambda_left, st.lambda_right, 1.0, 0.5, st.selectivity, 1e-6, 1e-6)
    budget = 0.3 * model.cost()
    out = {}
    for s in ("cf", "inp", "pni"):
        a = model.optimum(s, budget)
        shed, _ = run(LoadShedder(s, a.x_left, a.x_right, seed=5), tl, kl, tr, kr)
        out[s] = len(shed)
    assert out["pni"] > out["cf"] > out["inp"]


# -- Online Max-Subset -----------------------------------------------------------------------------
def test_max_subset_plan_follows_figure_2():
    """Hand-computed plan. History of 10 s; per-key rates (tuples/s) and eq. (5), (7), (8) with
    T_L + T_R = 2 s, C_u = C_p = 0.01 s:

    key 1: λ_L = 2, λ_R = 2 → out 2·2·2 = 8/s, C = 4·0.01 + 8·0.01 = 0.12, P = 66.7
    key 2: λ_L = 1, λ_R = 1 → out 2/s,        C = 2·0.01 + 2·0.01 = 0.04, P = 50
    key 3: λ_L = 1, λ_R = 0 → out 0,          C = 0.01,                  P = 0
    Budget 0.14: key 1 fits (0.12), key 2 does not (0.16 > 0.14): key 2 gets PNI with 0.02 left.
    PNI on key 2 (λ_L = λ_R = 1, f = 1, T_L = T_R = 1): output 1·1·1·(x_L + x_R), cost
    (x_L + x_R)·0.01 + (x_L + x_R)·0.01 ≤ 0.02 → x_L + x_R = 1, closest to the diagonal (0.5, 0.5),
    output 1/s. Expected plan output 8 + 1 = 9/s at cost 0.14. Key 3 (and unseen keys): dropped.
    """
    ms = OnlineMaxSubset(1.0, 1.0, cu_s=0.01, cp_s=0.01, budget=0.14, history_s=10, seed=0)
    # 10 s of arrivals, 0.1 s apart at the start and the end so the model spans exactly 10 s.
    side, codes = [], []
    for key, n_l, n_r in ((1, 20, 20), (2, 10, 10), (3, 10, 0)):
        side += [True] * n_l + [False] * n_r
        codes += [key] * (n_l + n_r)
    ts = np.linspace(0, 10 * S, len(codes)).astype(np.int64)
    assert ms.update(np.array(side), np.array(codes, dtype=np.uint64), ts) is ms
    plan = ms.plan()
    assert repr(ms.report()) == repr(plan)  # report() reads the current plan
    assert plan.keys.tolist() == [1, 2, 3]
    assert plan.full.tolist() == [1]
    assert plan.partial == 2
    assert (plan.x_left, plan.x_right) == pytest.approx((0.5, 0.5))
    assert plan.unseen == 0.0
    assert plan.expected_cost == pytest.approx(0.14)
    assert plan.expected_output_rate == pytest.approx(8 + 1 * 1 * 1 * (0.5 + 0.5))
    # Decisions for a batch: key 1 processed normally, key 3 and unseen keys dropped, key 2 PNI.
    ms_prior = OnlineMaxSubset(1.0, 1.0, 0.01, 0.01, 0.14, history_s=10, include_batch=False, seed=0)
    ms_prior.update(np.array(side), np.array(codes, dtype=np.uint64), ts)
    batch_codes = np.array([1, 1, 3, 9] + [2] * 400, dtype=np.uint64)
    batch_left = np.arange(len(batch_codes)) % 2 == 0
    d = ms_prior.decide(batch_left, batch_codes, np.full(len(batch_codes), 10 * S + 1))
    assert d.insert[:4].tolist() == [True, True, False, False]
    assert d.probe[:4].tolist() == [True, True, False, False]
    assert d.probe[4:].all()  # PNI: the partial key always probes
    assert abs(d.insert[4:].mean() - 0.5) < 4 * math.sqrt(0.25 / 400)
    assert d.p_insert[4:] == pytest.approx([0.5] * 400)


def test_max_subset_beats_pni_on_skewed_keys_and_stays_a_subset():
    """The Figure 2 strategy keeps the components with the most output per cost; on Zipf keys
    (update cost comparable to production) it produces more than PNI at the same budget."""
    left, right = synthetic_sides(
        n_keys=2000, skew=1.0, lambda_left=400, lambda_right=400, duration_s=20, seed=2
    )
    w = WindowSpec(1.0, 1.0)
    table, model = evaluate_shedding(
        left, right, w, budgets=[0.3], strategies=["pni", "max-subset"], cu_s=1e-6, cp_s=1e-6
    )
    by = table[~table["reference"]].set_index("strategy")
    assert by.loc["max-subset", "results"] > by.loc["pni", "results"]
    full = run_join(w, (left, right))  # type: ignore[arg-type]
    ms = OnlineMaxSubset(1.0, 1.0, 1e-6, 1e-6, 0.3 * model.cost(), seed=1)
    shed = run_join(w, (left, right), shedder=ms)  # type: ignore[arg-type]
    assert pairs(shed.results) < pairs(full.results)


def test_max_subset_validation():
    with pytest.raises(ValueError, match="budget"):
        OnlineMaxSubset(1, 1, 1e-6, 1e-6, -1)
    with pytest.raises(ValueError, match="history_s"):
        OnlineMaxSubset(1, 1, 1e-6, 1e-6, 1, history_s=0)
    ms = OnlineMaxSubset(1, 1, 1e-6, 1e-6, 1)
    assert ms.plan().unseen == 1.0  # no model yet: admit everything
    assert ms.strategy == "max-subset"


# -- LoadShedder ------------------------------------------------------------------------------------
def test_load_shedder_validation_and_state():
    with pytest.raises(ValueError, match="strategy"):
        LoadShedder("drop")
    with pytest.raises(ValueError, match="x_left"):
        LoadShedder("pni", x_left=1.2)
    with pytest.raises(ValueError, match="x_right"):
        LoadShedder("pni").set_fractions(0.5, -0.1)
    s = LoadShedder("cf", 0.5, 0.7, seed=11)
    s.decide(np.ones(10, bool), np.zeros(10, np.uint64), np.arange(10))
    t = LoadShedder.from_bytes(s.to_bytes())
    a = s.decide(np.ones(50, bool), np.zeros(50, np.uint64), np.arange(50))
    b = t.decide(np.ones(50, bool), np.zeros(50, np.uint64), np.arange(50))
    assert a.insert.tolist() == b.insert.tolist()
    assert repr(t) == "LoadShedder(strategy='cf', x_left=0.5, x_right=0.7, seed=11)"
    with pytest.raises(ValueError, match="version"):
        LoadShedder.from_bytes(b"\x07{}")
    keep = Decisions.keep_all(3)
    assert keep.insert.all() and keep.probe.all() and keep.p_insert.tolist() == [1.0, 1.0, 1.0]


# -- the evaluation ---------------------------------------------------------------------------------
def test_parse_budgets():
    assert parse_budgets("0.1..1.0") == [round(0.1 * i, 1) for i in range(1, 11)]
    assert parse_budgets("0.2..1:0.4") == [0.2, 0.6, 1.0]
    assert parse_budgets("0.5, 1") == [0.5, 1.0]
    for bad in ("", "0..1", "1..0.5", "a,b", "0.5..1:0"):
        with pytest.raises(ValueError, match="budgets"):
            parse_budgets(bad)


def test_evaluation_table_and_theorems_on_generated_streams(tmp_path):
    left, right = synthetic_sides(
        n_keys=3000, skew=0.0, lambda_left=300, lambda_right=300, duration_s=10, seed=4
    )
    table, model = evaluate_shedding(
        left, right, WindowSpec(1.0, 1.0), dataset="uniform", budgets=[0.2, 0.6, 1.0], cu_s=1e-6, cp_s=1e-6,
        seeds=(1, 2),
    )  # fmt: skip
    body = table[~table["reference"]]
    assert len(body) == 3 * len(EVAL_STRATEGIES)
    ref = table[table["reference"]].iloc[0]
    full = run_join(WindowSpec(1.0, 1.0), (left, right))  # type: ignore[arg-type]
    assert ref["results"] == len(full.results)
    assert ref["cost_used"] == pytest.approx(model.cost(), rel=1e-9)
    # Budget 100%: the random strategies keep everything at exactly the unshed cost.
    at_full = body[(body["budget_fraction"] == 1.0) & body["strategy"].isin(["cf", "inp", "pni"])]
    assert (at_full["results"] == ref["results"]).all()
    # Random strategies meet the budget on average (model cost from the counts), within 10%.
    random_rows = body[body["strategy"].isin(["cf", "pni"])]
    assert ((random_rows["cost_ratio"] > 0.9) & (random_rows["cost_ratio"] < 1.1)).all()
    checks = theorem_checks(table)
    assert checks["model_pni_ge_cf"].all() and checks["model_inp_le_both"].all()
    assert checks["measured_pni_ge_cf"].all() and checks["measured_inp_le_both"].all()
    paths = write_report(table, model, tmp_path, name="uniform", title="Uniform")
    assert pd.read_csv(paths["csv"]).shape[0] == len(table)
    md = paths["md"].read_text()
    assert "| budget | cf | inp | pni | max-subset | max-subset-prior |" in md
    assert "Theorem 3, PNI ≥ CF: model 3/3" in md
    assert "plotly" in paths["html"].read_text().lower()


def test_cli_eval_shedding_synthetic(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "eval", "shedding", "--synthetic", "--keys", "500", "--rate", "100", "--duration", "5",
            "--window", "1s", "--budgets", "0.5,1", "--seeds", "1", "--cu", "1e-6", "--cp", "1e-6",
            "--strategies", "cf,pni", "--out", str(tmp_path), "--name", "tiny",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| budget | cf | pni |" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.csv", "tiny.html", "tiny.md"]
    bad = CliRunner().invoke(cli, ["eval", "shedding", "--synthetic", "--strategies", "coin"])
    assert bad.exit_code != 0 and "coin" in bad.output
    neither = CliRunner().invoke(cli, ["eval", "shedding"])
    assert neither.exit_code != 0 and "FILE or --synthetic" in neither.output


def test_exact_oracle_agrees_with_unshed_run_join():
    left, right = synthetic_sides(n_keys=50, skew=1.0, lambda_left=50, lambda_right=50, duration_s=10, seed=8)
    got = run_join(WindowSpec(0.7, 0.2), (left, right))  # type: ignore[arg-type]
    exact = ExactWindowJoin(0.7, 0.2).process_batch(left.ts, left.keys, right.ts, right.keys)
    assert pairs(got.results) == pairs(exact)
    assert isinstance(left, JoinSide)
