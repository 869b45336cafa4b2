"""``netmon bench capture``: the command line of :mod:`bench.capture`.

Measures the highest packet rate ``netmon capture`` follows on a veth pair with zero kernel drops:
a sender in a private network namespace, the capture on the host's end into a real Kafka broker,
over a ladder of rates. Needs root. The options here, the measuring in :mod:`bench.capture`.
"""

from __future__ import annotations

import json
import sys

import click

from cli.main import pass_config
from netmon.config import Config

__all__ = ["command"]


@click.command("capture")
@click.option(
    "--rates",
    default="5000,10000,20000,40000,80000",
    show_default=True,
    help="The ladder: packets/s, comma-separated, ascending (20k = 20000).",
)
@click.option(
    "--seconds", type=float, default=10.0, show_default=True, help="How long the sender sends at each rate."
)
@click.option("--bootstrap", help="Capture into this Kafka (default: a temporary local broker).")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@pass_config
def command(cfg: Config, rates: str, seconds: float, bootstrap: str | None, as_json: bool) -> None:
    """The highest rate `netmon capture` sustains on a veth pair: no kernel drops, nothing lost."""
    from bench.capture import bench_capture, format_report, parse_rates

    try:
        ladder = parse_rates(rates)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rates") from None
    if not seconds > 0:
        raise click.BadParameter("must be > 0", param_hint="--seconds")
    try:
        result = bench_capture(
            rates=ladder,
            seconds=seconds,
            bootstrap=bootstrap,
            capture_options={
                "records_per_message": cfg.ingest.records_per_message,
                "linger_ms": cfg.ingest.linger_ms,
                "compression": cfg.ingest.compression,
            },
            say=lambda line: click.echo(line, err=True),
        )
    except KeyboardInterrupt:
        click.echo("netmon bench capture: interrupted (the namespace and veth pair are removed)", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (privilege, broker, sender)
        click.echo(f"netmon bench capture: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
