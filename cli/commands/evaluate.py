"""``netmon eval <experiment>``: reproduce the papers' evaluations on real and generated traffic."""

from __future__ import annotations

import click

from cli.main import LazyGroup


@click.group(
    "eval",
    cls=LazyGroup,
    lazy={
        "alerts": "cli.commands.eval_alerts:command",
        "cost-model": "cli.commands.eval_cost_model:command",
        "topk": "cli.commands.eval_topk:command",
        "distinct": "cli.commands.eval_distinct:command",
        "shedding": "cli.commands.eval_shedding:command",
        "join": "cli.commands.eval_join:command",
    },
)
def command() -> None:
    """Reproduce the research's evaluations (accuracy, cost) and print the tables."""
