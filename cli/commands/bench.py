"""``netmon bench <part>``: speed benchmarks that print ratios against a baseline run in-process."""

from __future__ import annotations

import click

from cli.main import LazyGroup


@click.group(
    "bench",
    cls=LazyGroup,
    lazy={
        "ingest": "cli.commands.bench_ingest:command",
        "capture": "cli.commands.bench_capture:command",
        "topk": "cli.commands.bench_topk:command",
        "topk-offline": "cli.commands.bench_topk:offline_command",
        "distinct": "cli.commands.bench_distinct:command",
        "join": "cli.commands.bench_join:command",
        "pipeline": "cli.commands.bench_pipeline:command",
        "calibrate": "cli.commands.bench_calibrate:command",
        "dashboard": "cli.commands.bench_dashboard:command",
        "soak": "cli.commands.bench_soak:command",
        "soak-up": "cli.commands.bench_soak_up:command",
        "scaling": "cli.commands.bench_scaling:command",
    },
)
def command() -> None:
    """Benchmarks: each prints its figures and the ratio to a baseline measured in the same run."""
