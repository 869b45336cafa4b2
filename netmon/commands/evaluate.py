"""``netmon eval <experiment>``: reproduce the papers' evaluations on real and generated traffic."""

from __future__ import annotations

import click

from netmon.cli import LazyGroup


@click.group(
    "eval",
    cls=LazyGroup,
    lazy={
        "topk": "netmon.commands.eval_topk:command",
        "distinct": "netmon.commands.eval_distinct:command",
        "shedding": "netmon.commands.eval_shedding:command",
        "join": "netmon.commands.eval_join:command",
    },
)
def command() -> None:
    """Reproduce the research's evaluations (accuracy, cost) and print the tables."""
