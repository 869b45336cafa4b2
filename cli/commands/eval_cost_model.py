"""``netmon eval cost-model``: the cost-model seeds' numbers reproduced by netmon's own code.

[AN] Example 1 and Figure 7 (seed 000), [CKSV] E1 and E3 (seed 004), each figure beside the
paper's with a tolerance and a verdict (``analytics.cost_eval``; method: docs/evaluation.md,
"Cost models"). Exits 1 when a figure is outside its tolerance.
"""

from __future__ import annotations

import json
import sys

import click


@click.command("cost-model")
@click.option(
    "--seed", type=int, default=1, show_default=True, help="E3: seed of the generated streams and the coins."
)
@click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(min=11.0),
    default=120.0,
    show_default=True,
    help="E3: seconds of generated streams (the first 10 s warm the windows up).",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def command(seed: int, duration_s: float, fmt: str) -> None:
    """Example 1, Figure 7, E1 and E3 against the papers' figures."""
    from analytics.cost_eval import evaluate, format_table

    result = evaluate(seed=seed, duration_s=duration_s)
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo("\n".join(format_table(result.checks)))
        failed = [c for c in result.checks if not c.ok]
        click.echo(
            f"\n{len(result.checks) - len(failed)} of {len(result.checks)} figures within their tolerance"
            + ("" if not failed else ": FAIL " + "; ".join(f"{c.experiment} {c.figure}" for c in failed))
        )
    sys.exit(0 if result.ok else 1)
