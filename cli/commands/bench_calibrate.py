"""``netmon bench calibrate``: the command line of :mod:`bench.calibrate`.

Measures the cost model's constants on this machine and writes them to the state directory
(``<state_dir>/calibration/cost-model.json``), where ``netmon explain`` reads them.
"""

from __future__ import annotations

import json
import sys

import click

from cli.main import pass_config
from netmon.config import Config

__all__ = ["command"]


@click.command("calibrate")
@click.option(
    "--scale", type=float, default=1.0, show_default=True, help="Size of the measured inputs (0 < s <= 10)."
)
@click.option(
    "--repeats", type=int, default=3, show_default=True, help="Timed runs per size (the median counts)."
)
@click.option(
    "--pipeline",
    is_flag=True,
    help="Also measure the per-batch and pipeline terms in a running pipeline (a temporary broker"
    " and Spark, about 2 minutes).",
)
@click.option(
    "--paced",
    metavar="RATES",
    help="With --pipeline: fit over paced runs at these packets/s (e.g. 10000,25000,40000) instead of"
    " drains: batches of what a trigger brings, as a live pipeline sees them.",
)
@click.option(
    "--paced-seconds",
    type=click.FloatRange(min=25),
    default=100.0,
    show_default=True,
    help="Each paced run: the longest window and the watermark fill first (65 s by default), then"
    " the steady batches the fit uses.",
)
@click.option("--dry-run", is_flag=True, help="Measure and print, write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@pass_config
def command(
    cfg: Config,
    scale: float,
    repeats: int,
    pipeline: bool,
    paced: str | None,
    paced_seconds: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Measure the cost model's per-operation constants on this machine (about 10 s at --scale 1)."""
    from bench.calibrate import calibrate, format_report

    options: dict[str, object] = {}
    if paced is not None:
        try:
            rates = tuple(int(r) for r in paced.split(",") if r.strip())
        except ValueError:
            rates = ()
        if not pipeline or not rates:
            click.echo(
                f"netmon bench calibrate: error: --paced takes --pipeline and rates such as"
                f" 10000,25000,40000, got {paced!r}",
                err=True,
            )
            sys.exit(2)
        options = {"paced": rates, "paced_seconds": paced_seconds}

    try:
        result = calibrate(
            cfg,
            scale=scale,
            repeats=max(1, repeats),
            write=not dry_run,
            pipeline=pipeline,
            pipeline_options=options,
            say=lambda s: click.echo(s, err=True),
        )
    except (ValueError, OSError, RuntimeError) as exc:
        click.echo(f"netmon bench calibrate: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
