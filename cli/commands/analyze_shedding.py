"""``netmon analyze shedding``: the optimal CF / INP / PNI fractions for a join under a CPU budget.

Prints ``{"none": {...}, "cf": {...}, "inp": {...}, "pni": {...}}``, each with ``x_l``, ``x_r``,
``output_rate`` (results/s) and ``cost`` (CPU seconds per second), from seed 003 eqs. (2), (9)-(15)
(:class:`analytics.join_cost.JoinCostModel`). The budget is CPU seconds per second: 1.0 is one
core fully busy, 0.5 half of it (the paper's constraint ``≤ 1`` is ``≤ budget`` here).
"""

from __future__ import annotations

import json

import click

from analytics.join_cost import STRATEGIES, JoinCostModel

_OPTIONS = {
    "lambda_left": "lambda-l",
    "lambda_right": "lambda-r",
    "window_left_s": "window-l",
    "window_right_s": "window-r",
    "selectivity": "selectivity",
    "cu_s": "cu",
    "cp_s": "cp",
    "budget": "budget",
}


@click.command("shedding")
@click.option("--lambda-l", "lambda_l", type=float, required=True, help="Left arrival rate λ_L (tuples/s).")
@click.option("--lambda-r", "lambda_r", type=float, required=True, help="Right arrival rate λ_R (tuples/s).")
@click.option("--window-l", "window_l", type=float, required=True, help="Left window T_L (seconds).")
@click.option("--window-r", "window_r", type=float, required=True, help="Right window T_R (seconds).")
@click.option("--selectivity", type=float, required=True, help="Join selectivity f, in [0, 1].")
@click.option("--cu", type=float, required=True, help="C_u: seconds to insert and expire one tuple.")
@click.option("--cp", type=float, required=True, help="C_p: seconds to probe for and produce one result.")
@click.option(
    "--budget", type=float, required=True, help="CPU seconds per second for the join (1.0 = one core)."
)
@click.option("--format", "fmt", type=click.Choice(["json", "table"]), default="json", show_default=True)
def command(
    lambda_l: float,
    lambda_r: float,
    window_l: float,
    window_r: float,
    selectivity: float,
    cu: float,
    cp: float,
    budget: float,
    fmt: str,
) -> None:
    """Optimal shedding fractions per strategy for a join with these rates, windows and costs."""
    try:
        model = JoinCostModel(lambda_l, lambda_r, window_l, window_r, selectivity, cu, cp)
        optima = model.optima(budget)
    except ValueError as exc:
        name, _, message = str(exc).partition(": ")
        raise click.BadParameter(message, param_hint=f"'--{_OPTIONS.get(name, name)}'") from None
    if fmt == "json":
        click.echo(json.dumps({s: optima[s].to_dict() for s in STRATEGIES}))
        return
    feasible = "feasible" if model.is_feasible(budget) else "infeasible"
    click.echo(f"unshed cost {model.cost():.6g} CPU s/s vs budget {budget:g}: {feasible}")
    click.echo(f"{'strategy':<9} {'x_l':>10} {'x_r':>10} {'output_rate':>14} {'cost':>12}")
    for s in STRATEGIES:
        a = optima[s]
        click.echo(f"{s:<9} {a.x_left:>10.6f} {a.x_right:>10.6f} {a.output_rate:>14.6g} {a.cost:>12.6g}")
