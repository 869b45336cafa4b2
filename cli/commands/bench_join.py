"""``netmon bench join``: the command line of :mod:`bench.join`.

Measures the pipeline's streaming join under a replay load, unshed and with CF / PNI load
shedding at a CPU budget: batch durations, Kafka lag, results and operator time per strategy.
The options here, the measuring in :mod:`bench.join`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from bench.join import bench_join, format_report

__all__ = ["command"]


@click.command("join")
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Capture to replay.")
@click.option("--bootstrap", help="Kafka to use (default: a temporary local broker).")
@click.option(
    "--strategies",
    default="none,pni,pni+cf",
    show_default=True,
    help="Comma-separated runs; 'pni+cf' runs both strategies as two queries of one pipeline.",
)
@click.option("--pps", type=float, default=3000.0, show_default=True, help="Replay rate, packets per second.")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="Length of each run.")
@click.option(
    "--budget", type=float, default=0.8, show_default=True, help="CPU budget (share of the trigger)."
)
@click.option(
    "--budget-scope",
    type=click.Choice(["batch", "operator"]),
    default="batch",
    show_default=True,
    help="What the budget bounds: the whole micro-batch or the join operator's own time.",
)
@click.option(
    "--trigger", "trigger_s", type=float, default=5.0, show_default=True, help="Trigger interval (s)."
)
@click.option("--window", "window_s", type=float, default=2.0, show_default=True, help="Join window T (s).")
@click.option("--records-per-message", type=int, default=200, show_default=True)
@click.option("--smoothing", type=float, default=0.5, show_default=True, help="Controller smoothing weight.")
@click.option(
    "--max-step", type=float, default=0.25, show_default=True, help="Largest fraction change per batch."
)
@click.option("--json", "as_json", is_flag=True, help="Print every figure (and per-batch samples) as JSON.")
def command(file_: str | None, strategies: str, as_json: bool, **options: Any) -> None:
    """The streaming join under load: unshed vs CF vs PNI at a CPU budget (batch time, lag, results)."""
    try:
        result = bench_join(
            capture=file_,  # None: the bundled samples/mixed-small.pcap
            strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()),
            say=lambda line: click.echo(line, err=True),
            **options,
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (broker, Spark, replay)
        click.echo(f"netmon bench join: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
