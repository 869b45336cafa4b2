"""``netmon bench pipeline``: the command line of :mod:`bench.pipeline`.

The whole pipeline with every configured kind, through a temporary real broker: drain throughput
per scenario, where a batch's time goes, and (``--rates``) lag, catch-up and latency at fixed
replay rates; beside the drain, the same questions as plain Spark queries (``--no-baseline`` skips
them) and the ratio of the two rates. With ``--manage`` (or ``--coverage``) each rate's result rows
are checked against the exact answers of the records read back from Kafka (``bench.coverage``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cli.main import pass_config
from netmon.config import Config


def _rates(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(r) for r in value.split(",")) if value else ()
    except ValueError:
        raise click.BadParameter(f"expected packets/s as integers, e.g. 25000,50000, got {value!r}") from None


@click.command("pipeline")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(["baseline", "ddos", "port-scan", "syn-flood", "heavy-hitter-burst"]),
    help="Scenario(s) to generate [baseline and ddos].",
)
@click.option(
    "--packets", type=int, default=1_000_000, show_default=True, help="Packets of the drain capture."
)
@click.option(
    "--duration", "duration_s", type=float, default=300.0, show_default=True, help="Its event-time span, s."
)
@click.option("--rates", callback=_rates, help="Replay rates to hold, packets/s, e.g. 50000,100000.")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="Length of each rate's replay.")
@click.option(
    "--no-baseline", is_flag=True, help="Skip the plain-Spark baseline drain (and the ratio to it)."
)
@click.option(
    "--manage", is_flag=True, help="Run the resource manager ([resources] manage): drop boxes under load."
)
@click.option(
    "--cpu-budget", type=click.FloatRange(min=0, min_open=True), help="[resources] cpu_budget for the run."
)
@click.option(
    "--coverage/--no-coverage",
    default=None,
    help="After each rate, read back from Kafka what the pipeline consumed and check every traffic, "
    "top-k and distinct row against its exact answer: the share of rows whose interval covers it "
    "(exact rows: equal to it; top-k's within Algorithm 6's delta). On by default with --manage; "
    "about a minute per 10M records.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    help="Run in this directory and keep it: the captures and each rate's sys rows"
    " (sys-<scenario>-<rate>/), to compare the cost model with the run again later.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@pass_config
def command(
    cfg: Config,
    scenarios: tuple[str, ...],
    packets: int,
    duration_s: float,
    rates: tuple[int, ...],
    seconds: float,
    no_baseline: bool,
    manage: bool,
    cpu_budget: float | None,
    coverage: bool | None,
    keep: str | None,
    as_json: bool,
) -> None:
    """Throughput, batch-time shares, lag and latency of the whole pipeline (all default queries)."""
    from analytics.cost_model import load_constants
    from bench.pipeline import bench_pipeline, format_report

    try:
        result = bench_pipeline(
            constants=load_constants(cfg.paths.state_dir),  # `netmon bench calibrate`'s, if run
            scenarios=scenarios or ("baseline", "ddos"),
            packets=packets,
            duration_s=duration_s,
            rates=rates,
            seconds=seconds,
            baseline=not no_baseline,
            manage=manage,
            cpu_budget=cpu_budget,
            coverage=coverage,
            keep=Path(keep) if keep else None,
            say=lambda line: click.echo(line, err=True),
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (broker, Spark, replay)
        click.echo(f"netmon bench pipeline: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
