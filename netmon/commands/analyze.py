"""``netmon analyze <query> FILE``: run an algorithm offline over a capture's records."""

from __future__ import annotations

import click

from netmon.cli import LazyGroup


@click.group(
    "analyze",
    cls=LazyGroup,
    lazy={
        "topk": "netmon.commands.analyze_topk:command",
        "distinct": "netmon.commands.analyze_distinct:command",
        "shedding": "netmon.commands.analyze_shedding:command",
        "join": "netmon.commands.analyze_join:command",
    },
)
def command() -> None:
    """Run netmon's algorithms offline over a capture file (no Kafka, no Spark)."""
