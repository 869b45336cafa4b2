"""``netmon bench soak``: the command line of :mod:`bench.soak`.

The whole pipeline with its default kinds, through a temporary real broker, fed at a fixed rate
for ``--minutes`` with retention shortened so that disk use can reach a plateau within the run;
a sample every ``--sample-s`` (disk by directory, resident memory of the driver, Spark and the
broker, open descriptors, Kafka lag), then per series the end value, its growth over the second
half and a verdict (plateau or growing).
"""

from __future__ import annotations

import json
import sys

import click

__all__ = ["command"]

_POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("soak")
@click.option("--minutes", type=_POSITIVE, default=30.0, show_default=True, help="Length of the run.")
@click.option("--pps", type=click.IntRange(min=1), default=20_000, show_default=True, help="Packets/s.")
@click.option("--sample-s", type=_POSITIVE, default=10.0, show_default=True, help="Seconds between samples.")
@click.option(
    "--scenario",
    type=click.Choice(["baseline", "ddos", "port-scan", "syn-flood", "heavy-hitter-burst"]),
    default="baseline",
    show_default=True,
    help="Scenario of the generated capture.",
)
@click.option(
    "--loop-s", type=_POSITIVE, default=30.0, show_default=True, help="Event-time span of one replay round."
)
@click.option(
    "--retention-s",
    type=_POSITIVE,
    default=300.0,
    show_default=True,
    help="[retention] results_days, in seconds (results_days = this / 86400).",
)
@click.option(
    "--compact-after-s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="[retention] compact_after_s.",
)
@click.option("--interval-s", type=_POSITIVE, default=30.0, show_default=True, help="[retention] interval_s.")
@click.option(
    "--kafka-retention-s",
    type=_POSITIVE,
    default=300.0,
    show_default=True,
    help="[retention] kafka_retention_hours, in seconds (hours = this / 3600).",
)
@click.option(
    "--segment-s",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="The topics' segment.ms, in seconds (Kafka deletes closed segments only).",
)
@click.option(
    "--threshold-pct",
    type=_POSITIVE,
    default=1.0,
    show_default=True,
    help="Plateau: growth over the second half at most this % of the end value per 10 minutes.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress line per sample.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure (and every sample) as JSON.")
def command(
    minutes: float,
    pps: int,
    sample_s: float,
    scenario: str,
    loop_s: float,
    retention_s: float,
    compact_after_s: float,
    interval_s: float,
    kafka_retention_s: float,
    segment_s: float,
    threshold_pct: float,
    quiet: bool,
    as_json: bool,
) -> None:
    """Disk and memory of the whole pipeline over a long run, retention on: do they plateau?"""
    from bench.soak import SoakSettings, format_report, format_sample, soak

    settings = SoakSettings(
        minutes=minutes,
        pps=pps,
        sample_s=sample_s,
        scenario=scenario,
        loop_s=loop_s,
        retention_s=retention_s,
        compact_after_s=compact_after_s,
        interval_s=interval_s,
        kafka_retention_s=kafka_retention_s,
        segment_s=segment_s,
        threshold_pct=threshold_pct,
    )
    try:
        result = soak(
            settings,
            say=lambda line: click.echo(line, err=True),
            progress=None if quiet else (lambda sample: click.echo(format_sample(sample), err=True)),
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (broker, Spark, replay)
        click.echo(f"netmon bench soak: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
