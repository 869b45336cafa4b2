"""``netmon analyze <query> FILE``: run an algorithm offline over a capture's records."""

from __future__ import annotations

import click

from cli.main import LazyGroup


@click.group(
    "analyze",
    cls=LazyGroup,
    lazy={
        "alerts": "cli.commands.analyze_alerts:command",
        "topk": "cli.commands.analyze_topk:command",
        "distinct": "cli.commands.analyze_distinct:command",
        "shedding": "cli.commands.analyze_shedding:command",
        "join": "cli.commands.analyze_join:command",
    },
)
def command() -> None:
    """Run netmon's algorithms offline over a capture file (no Kafka, no Spark)."""
