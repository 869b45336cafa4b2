"""``netmon eval shedding``: results and cost of CF, INP, PNI and Online Max-Subset against a budget.

Seed 003 has no experiments (its §6 announces them); this evaluation supplies them on real and
generated traffic. For one join input (a capture through a built-in query, or numpy-generated
streams):

1. Run the join unshed, in event-time micro-batches, and measure the model's inputs: ``λ_L``,
   ``λ_R`` and ``f`` over the run, ``C_u`` and ``C_p`` from the join's own timings (or given, for
   reproducible numbers). The unshed cost per second is eq. (2) with these.
2. For each budget ``B = β·(unshed cost)``, β from 10% to 100%: CF, INP and PNI run with the
   optimizer's fractions (:meth:`analytics.join_cost.JoinCostModel.optimum`); Online Max-Subset
   runs with ``B``. Each run is repeated over ``seeds``.
3. Report per (β, strategy): results produced (and as a fraction of the unshed output), the
   model's prediction, the **cost used** — eq. (2) from the run's counts, ``(inserted·C_u +
   results·C_p)/span`` in CPU seconds per second — and its ratio to the budget, the 95th
   percentile of the same cost per micro-batch (bursts), plus the measured wall time of the join
   calls. Theorems 2 and 3 are checked on the measured results per β.

CF, INP and PNI get fixed fractions computed from the whole run's rates (an offline controller
that knows the averages); Online Max-Subset plans every batch from its recent history, so it
follows bursts, and an input burstier than its average sheds even at a 100% budget.

The cost used is a model cost: real traffic breaks the model's assumptions (steady Poisson
arrivals, one selectivity for all keys), so a strategy may over- or under-spend its budget; that
is part of what the table shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analytics.join_cost import JoinCostModel
from analytics.join_queries import JoinRun, JoinSide, make_shedder, measure_model, run_join_sides

__all__ = [
    "EVAL_STRATEGIES",
    "WindowSpec",
    "evaluate_shedding",
    "markdown_report",
    "parse_budgets",
    "synthetic_sides",
    "theorem_checks",
    "write_report",
]

#: The strategies compared (``none`` is the unshed reference run).
EVAL_STRATEGIES: tuple[str, ...] = ("cf", "inp", "pni", "max-subset", "max-subset-prior")

#: The budget fractions :func:`evaluate_shedding` tries by default: 0.1, 0.2, ..., 1.0.
DEFAULT_BUDGETS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 11))

_NS = 1_000_000_000


@dataclass(frozen=True)
class WindowSpec:
    """The two windows of a join given directly (for prepared or generated sides)."""

    window_left_s: float
    window_right_s: float


def parse_budgets(text: str) -> list[float]:
    """``"0.1..1.0"`` (step 0.1), ``"0.2..1:0.2"`` or ``"0.25,0.5,1"`` -> budget fractions.

    >>> parse_budgets("0.1..0.5"), parse_budgets("0.5,1")
    ([0.1, 0.2, 0.3, 0.4, 0.5], [0.5, 1.0])
    """
    text = text.strip()
    try:
        if ".." in text:
            rng, _, step_text = text.partition(":")
            lo_text, hi_text = rng.split("..")
            lo, hi, step = float(lo_text), float(hi_text), float(step_text) if step_text else 0.1
            if step <= 0 or hi < lo:
                raise ValueError
            n = int(math.floor((hi - lo) / step + 1e-9)) + 1
            values = [round(lo + i * step, 10) for i in range(n)]
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"budgets: cannot parse {text!r} (e.g. 0.1..1.0, 0.2..1:0.2, 0.25,0.5,1)") from None
    if not values or any(not (0 < v <= 10) for v in values):
        raise ValueError(f"budgets: fractions of the unshed cost must be in (0, 10], got {text!r}")
    return values


def synthetic_sides(
    *,
    n_keys: int = 5000,
    skew: float = 1.2,
    lambda_left: float = 500.0,
    lambda_right: float = 500.0,
    duration_s: float = 30.0,
    correlation: str = "positive",
    seed: int = 1,
) -> tuple[JoinSide, JoinSide]:
    """Two streams with Poisson arrivals and Zipf keys (``P(k) ∝ (k+1)^-skew``; 0 = uniform).

    ``correlation="positive"``: the same keys are frequent on both sides; ``"negative"``: the
    right side's ranking is reversed (a key frequent on the left is rare on the right).

    >>> left, right = synthetic_sides(n_keys=10, duration_s=1, lambda_left=20, lambda_right=20, seed=3)
    >>> len(left) > 0, bool(np.all(np.diff(left.ts) >= 0)), int(left.keys.max()) < 10
    (True, True, True)
    """
    if n_keys < 1:
        raise ValueError(f"n_keys: expected >= 1, got {n_keys!r}")
    if skew < 0:
        raise ValueError(f"skew: expected >= 0, got {skew!r}")
    if correlation not in ("positive", "negative"):
        raise ValueError(f"correlation: expected 'positive' or 'negative', got {correlation!r}")
    rng = np.random.default_rng(seed)
    weights = (np.arange(n_keys) + 1.0) ** -skew
    weights /= weights.sum()
    sides = []
    for i, lam in enumerate((lambda_left, lambda_right)):
        n = int(rng.poisson(lam * duration_s))
        ts = np.sort(rng.integers(0, round(duration_s * _NS), n))
        keys = rng.choice(n_keys, size=n, p=weights).astype(np.int64)
        if i == 1 and correlation == "negative":
            keys = n_keys - 1 - keys
        sides.append(JoinSide(ts.astype(np.int64), keys, np.arange(n, dtype=np.int64), {}))
    return sides[0], sides[1]


def _run_row(
    strategy: str,
    run: JoinRun,
    *,
    budget: float,
    cu: float,
    cp: float,
    predicted: float,
    x: tuple[float, float],
) -> dict[str, Any]:
    total = run.total
    span = run.span_s
    per_batch = np.array([s.cost(cu, cp) for s in run.stats if s.span_s > 0])
    return {
        "strategy": strategy,
        "x_left": x[0],
        "x_right": x[1],
        "predicted_results": predicted * span,
        "results": total.results,
        "cost_used": total.cost(cu, cp),
        "batch_cost_p95": float(np.percentile(per_batch, 95)) if len(per_batch) else math.nan,
        "insert_fraction_left": total.insert_fraction_left,
        "insert_fraction_right": total.insert_fraction_right,
        "probe_fraction_left": total.probe_fraction_left,
        "probe_fraction_right": total.probe_fraction_right,
        "wall_s": sum(s.total_s for s in run.stats),
    }


def evaluate_shedding(
    left: JoinSide,
    right: JoinSide,
    windows: WindowSpec,
    *,
    dataset: str = "data",
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    strategies: Sequence[str] = EVAL_STRATEGIES,
    cu_s: float | None = None,
    cp_s: float | None = None,
    batch_s: float = 1.0,
    seeds: Sequence[int] = (1,),
) -> tuple[pd.DataFrame, JoinCostModel]:
    """Run every strategy at every budget fraction; one row per (budget, strategy), means over seeds.

    Returns the table and the measured model (``λ``, ``f``, ``C_u``, ``C_p``) the budgets refer to.
    """
    unknown = sorted(set(strategies) - set(EVAL_STRATEGIES))
    if unknown:
        raise ValueError(f"strategies: unknown {unknown} (known: {', '.join(EVAL_STRATEGIES)})")
    base = run_join_sides(windows, (left, right), batch_s=batch_s)
    model = measure_model(base, cu_s=cu_s, cp_s=cp_s, window=(windows.window_left_s, windows.window_right_s))
    if not (math.isfinite(model.cu_s) and math.isfinite(model.cp_s)):
        raise ValueError("cu_s: could not measure C_u/C_p (no tuples or no results); give cu_s and cp_s")
    cu, cp = model.cu_s, model.cp_s
    full_cost = model.cost()
    full_results = base.total.results
    rows: list[dict[str, Any]] = []
    ref = _run_row("none", base, budget=full_cost, cu=cu, cp=cp, predicted=model.output_rate(), x=(1.0, 1.0))
    rows.append({"budget_fraction": 1.0, "budget_cpu": full_cost, "seeds": 1, **ref, "reference": True})
    for beta in budgets:
        budget = beta * full_cost
        for strategy in strategies:
            per_seed = []
            for seed in seeds:
                if strategy.startswith("max-subset"):
                    x, predicted = (math.nan, math.nan), math.nan
                else:
                    alloc = model.optimum(strategy, budget)
                    x, predicted = (alloc.x_left, alloc.x_right), alloc.output_rate
                xl, xr = (0.0, 0.0) if strategy.startswith("max-subset") else x
                shedder = make_shedder(
                    strategy, x_left=xl, x_right=xr, seed=seed, window_left_s=windows.window_left_s,
                    window_right_s=windows.window_right_s, cu_s=cu, cp_s=cp, budget=budget,
                )  # fmt: skip
                run = run_join_sides(windows, (left, right), shedder=shedder, batch_s=batch_s)
                per_seed.append(
                    _run_row(strategy, run, budget=budget, cu=cu, cp=cp, predicted=predicted, x=x)
                )
            frame = pd.DataFrame(per_seed)
            row = {"budget_fraction": beta, "budget_cpu": budget, "seeds": len(seeds)}
            row.update({k: frame[k].iloc[0] for k in ("strategy", "x_left", "x_right", "predicted_results")})
            for k in frame.columns.drop(["strategy", "x_left", "x_right", "predicted_results"]):
                row[k] = float(frame[k].mean())
            row["results_sd"] = float(frame["results"].std(ddof=1)) if len(frame) > 1 else 0.0
            row["reference"] = False
            rows.append(row)
    table = pd.DataFrame(rows)
    table.insert(0, "dataset", dataset)
    table["result_fraction"] = table["results"] / full_results if full_results else math.nan
    table["cost_ratio"] = table["cost_used"] / table["budget_cpu"]
    table["batch_cost_p95_ratio"] = table["batch_cost_p95"] / table["budget_cpu"]
    return table, model


def theorem_checks(table: pd.DataFrame) -> pd.DataFrame:
    """Per budget fraction: Theorem 3 (PNI ≥ CF) and Theorem 2 (INP ≤ CF and INP ≤ PNI), on the
    model's predicted output and on the measured results."""
    rows = []
    for (dataset, beta), g in table[~table["reference"]].groupby(["dataset", "budget_fraction"], sort=True):
        by = g.set_index("strategy")
        if not {"cf", "inp", "pni"} <= set(by.index):
            continue
        row: dict[str, Any] = {"dataset": dataset, "budget_fraction": beta}
        for what, col in (("model", "predicted_results"), ("measured", "results")):
            cf, inp, pni = (float(by.loc[s, col]) for s in ("cf", "inp", "pni"))
            row[f"{what}_pni_ge_cf"] = pni >= cf
            row[f"{what}_inp_le_both"] = inp <= min(cf, pni)
        for ms in ("max-subset", "max-subset-prior"):
            if ms in by.index:
                pni_results = max(1.0, float(by.loc["pni", "results"]))
                row[ms.replace("-", "_") + "_over_pni"] = float(by.loc[ms, "results"]) / pni_results
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_report(table: pd.DataFrame, model: JoinCostModel, *, title: str, command: str = "") -> str:
    """A Markdown section: the measured model, results and cost per budget and strategy, theorems."""
    strategies = [s for s in EVAL_STRATEGIES if s in set(table["strategy"])]
    ref = table[table["reference"]].iloc[0]
    lines = [f"### {title}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"Measured model: λ_L = {model.lambda_left:.1f}/s, λ_R = {model.lambda_right:.1f}/s, "
        f"T_L = {model.window_left_s:g} s, T_R = {model.window_right_s:g} s, f = {model.selectivity:.3g}, "
        f"C_u = {model.cu_s:.3g} s, C_p = {model.cp_s:.3g} s. Unshed: {int(ref['results'])} results, "
        f"cost {ref['cost_used']:.4g} CPU s/s.",
        "",
        "Results produced as % of the unshed output, and (in brackets) cost used as % of the budget:",
        "",
        "| budget | " + " | ".join(strategies) + " |",
        "|---:|" + "---:|" * len(strategies),
    ]
    body = table[~table["reference"]]
    for beta, g in body.groupby("budget_fraction", sort=True):
        by = g.set_index("strategy")
        cells = []
        for s in strategies:
            r = by.loc[s]
            cells.append(f"{100 * r['result_fraction']:.1f} ({100 * r['cost_ratio']:.0f})")
        lines.append(f"| {100 * beta:.0f}% | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Burstiness: the 95th percentile over micro-batches of the batch's cost, as % of the budget:",
        "",
        "| budget | " + " | ".join(strategies) + " |",
        "|---:|" + "---:|" * len(strategies),
    ]
    for beta, g in body.groupby("budget_fraction", sort=True):
        by = g.set_index("strategy")
        cells = [f"{100 * by.loc[s, 'batch_cost_p95_ratio']:.0f}" for s in strategies]
        lines.append(f"| {100 * beta:.0f}% | " + " | ".join(cells) + " |")
    checks = theorem_checks(table)
    if not checks.empty:
        lines += ["", "Theorems on this input (per budget; model = optimizer's expected output):", ""]
        t3m, t3 = int(checks["model_pni_ge_cf"].sum()), int(checks["measured_pni_ge_cf"].sum())
        t2m, t2 = int(checks["model_inp_le_both"].sum()), int(checks["measured_inp_le_both"].sum())
        n = len(checks)
        lines.append(f"- Theorem 3, PNI ≥ CF: model {t3m}/{n} budgets, measured {t3}/{n}.")
        lines.append(f"- Theorem 2, INP ≤ CF and INP ≤ PNI: model {t2m}/{n}, measured {t2}/{n}.")
        for ms in ("max-subset", "max-subset-prior"):
            col = ms.replace("-", "_") + "_over_pni"
            if col in checks:
                r = checks[col]
                lines.append(
                    f"- {ms} / PNI results: {r.min():.2f}x to {r.max():.2f}x (median {r.median():.2f}x)."
                )
    return "\n".join(lines) + "\n"


def write_report(
    table: pd.DataFrame,
    model: JoinCostModel,
    out_dir: str | Path,
    *,
    name: str,
    title: str,
    command: str = "",
) -> dict[str, Path]:
    """Write ``<name>.csv`` (every row), ``<name>.md`` and ``<name>.html`` (Plotly) to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / f"{name}.csv", "md": out / f"{name}.md", "html": out / f"{name}.html"}
    table.to_csv(paths["csv"], index=False, float_format="%.6g")
    paths["md"].write_text(markdown_report(table, model, title=title, command=command))
    _figure(table, title).write_html(paths["html"], include_plotlyjs="cdn", full_html=True)
    return paths


def _figure(table: pd.DataFrame, title: str) -> Any:
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Results produced (% of unshed)", "Cost used (% of budget)"),
    )
    body = table[~table["reference"]]
    for strategy, g in body.groupby("strategy", sort=False):
        g = g.sort_values("budget_fraction")
        x = 100 * g["budget_fraction"]
        fig.add_scatter(x=x, y=100 * g["result_fraction"], mode="lines+markers", name=strategy,
                        legendgroup=strategy, row=1, col=1)  # fmt: skip
        fig.add_scatter(x=x, y=100 * g["cost_ratio"], mode="lines+markers", name=strategy,
                        legendgroup=strategy, showlegend=False, row=1, col=2)  # fmt: skip
    fig.update_xaxes(title_text="budget (% of the unshed cost)")
    fig.update_layout(title=title, template="plotly_white", height=450, width=1000)
    return fig
