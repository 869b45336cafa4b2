"""``netmon bench soak-up``: the command line of :mod:`bench.soak_up`.

``netmon up --replay`` of a generated capture, looped with event time compressed (``--speed``:
``--event-hours`` of event time in ``--event-hours × 60 / --speed`` minutes) from the run's start
less ``--event-hours``, with a temporary configuration (its own directories and free ports,
``[retention]`` shortened in event time); a sample every ``--sample-s`` (disk by directory,
resident memory of every service, Kafka lag, state rows) and the dashboard's render times in
Chromium every ``--browser-every-s``; then per series start, middle, end and a verdict (plateau or
growing). Exit 1 when the run failed or left a process behind.
"""

from __future__ import annotations

import json
import sys

import click

__all__ = ["command"]

_POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("soak-up")
@click.option("--event-hours", type=_POSITIVE, default=24.0, show_default=True, help="Event time replayed.")
@click.option(
    "--speed",
    type=_POSITIVE,
    default=48.0,
    show_default=True,
    help="Event time per wall-clock time (netmon up --speed): a run of event-hours x 60 / speed minutes.",
)
@click.option(
    "--pps", type=click.IntRange(min=1), default=1000, show_default=True, help="Wall-clock packets/s."
)
@click.option(
    "--loop-s",
    type=_POSITIVE,
    default=3600.0,
    show_default=True,
    help="Event-time span of the generated capture (one replay loop).",
)
@click.option(
    "--scenario",
    type=click.Choice(["baseline", "ddos", "port-scan", "syn-flood", "heavy-hitter-burst"]),
    default="baseline",
    show_default=True,
    help="Scenario of the generated capture.",
)
@click.option("--sample-s", type=_POSITIVE, default=10.0, show_default=True, help="Seconds between samples.")
@click.option(
    "--browser-every-s",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Seconds between two render measures in Chromium (0: no browser).",
)
@click.option(
    "--browser-timeout-s",
    type=_POSITIVE,
    default=180.0,
    show_default=True,
    help="Seconds a page may take to be drawn before that measure fails.",
)
@click.option(
    "--retention-hours",
    type=_POSITIVE,
    default=6.0,
    show_default=True,
    help="[retention] results_days in hours of event time.",
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
    help="[retention] kafka_retention_hours, in wall-clock seconds.",
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
@click.option(
    "--render-floor-s",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="A render time growing by at most this per 10 minutes is flat.",
)
@click.option("--kind", "kinds", multiple=True, help="[pipeline] kinds (repeatable; default: the config's).")
@click.option("--keep", type=click.Path(file_okay=False), help="Run in this directory and keep it.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line per sample.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure (and every sample) as JSON.")
def command(
    event_hours: float,
    speed: float,
    pps: int,
    loop_s: float,
    scenario: str,
    sample_s: float,
    browser_every_s: float,
    browser_timeout_s: float,
    retention_hours: float,
    compact_after_s: float,
    interval_s: float,
    kafka_retention_s: float,
    segment_s: float,
    threshold_pct: float,
    render_floor_s: float,
    kinds: tuple[str, ...],
    keep: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """A day of event time through netmon up, compressed: do disk, memory and render times stay flat?"""
    from pathlib import Path

    from bench.soak_up import SoakUpSettings, format_report, format_sample, soak_up

    try:
        settings = SoakUpSettings(
            event_hours=event_hours,
            speed=speed,
            pps=pps,
            loop_s=loop_s,
            scenario=scenario,
            sample_s=sample_s,
            browser_every_s=browser_every_s,
            browser_timeout_s=browser_timeout_s,
            retention_hours=retention_hours,
            compact_after_s=compact_after_s,
            interval_s=interval_s,
            kafka_retention_s=kafka_retention_s,
            segment_s=segment_s,
            threshold_pct=threshold_pct,
            render_floor_s=render_floor_s,
            kinds=kinds or None,
        )
    except ValueError as exc:
        click.echo(f"netmon bench soak-up: error: {exc}", err=True)
        sys.exit(2)
    try:
        result = soak_up(
            settings,
            say=lambda line: click.echo(line, err=True),
            progress=None if quiet else (lambda sample: click.echo(format_sample(sample), err=True)),
            work=Path(keep) if keep else None,
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (broker, netmon up, browser)
        click.echo(f"netmon bench soak-up: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2, default=str) if as_json else "\n".join(format_report(result)))
    if result.get("left_after_stop"):
        click.echo(f"netmon bench soak-up: error: left after the stop: {result['left_after_stop']}", err=True)
        sys.exit(1)
