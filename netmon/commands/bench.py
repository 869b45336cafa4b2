"""``netmon bench <part>``: speed benchmarks that print ratios against a baseline run in-process."""

from __future__ import annotations

import click

from netmon.cli import LazyGroup


@click.group(
    "bench",
    cls=LazyGroup,
    lazy={
        "ingest": "netmon.commands.bench_ingest:command",
        "topk": "netmon.commands.bench_topk:command",
        "topk-offline": "netmon.commands.bench_topk:offline_command",
        "distinct": "netmon.commands.bench_distinct:command",
        "join": "netmon.commands.bench_join:command",
    },
)
def command() -> None:
    """Benchmarks: each prints its figures and the ratio to a baseline measured in the same run."""
