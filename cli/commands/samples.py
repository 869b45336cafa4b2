"""``netmon samples generate``: deterministic synthetic captures (:func:`ingest.generate.generate`)."""

from __future__ import annotations

import json
import sys

import click

from ingest.generate import DEFAULT_START, SCENARIOS


@click.group("samples")
def command() -> None:
    """Synthetic sample captures."""


@command.command("generate")
@click.option("--scenario", type=click.Choice(SCENARIOS), default="baseline", show_default=True)
@click.option("--packets", type=int, default=10_000, show_default=True, help="Number of packets.")
@click.option("--seed", type=int, default=1, show_default=True, help="Same seed, same bytes.")
@click.option("--start", default=DEFAULT_START, show_default=True, help="Capture start, ISO 8601.")
@click.option(
    "--duration", "duration_s", type=float, default=60.0, show_default=True, help="Event-time span, s."
)
@click.option("--snaplen", type=int, default=128, show_default=True, help="Bytes captured per frame.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="pcap file to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def generate_command(
    scenario: str,
    packets: int,
    seed: int,
    start: str,
    duration_s: float,
    snaplen: int,
    out: str,
    as_json: bool,
) -> None:
    """Write a seeded synthetic capture: Zipf-skewed hosts, TCP handshakes, DNS, ICMP, attacks.

    --json prints the summary with the ground truth under details.truth: attackers (listed up to
    100), attackers_count, spoofed, victims, the attack's first and last packet (start, end; and
    start_s, end_s from --start), so evaluations can score detectors against it.
    """
    from ingest.generate import generate

    try:
        summary = generate(
            out,
            scenario=scenario,
            packets=packets,
            seed=seed,
            start=start,
            duration_s=duration_s,
            snaplen=snaplen,
        )
    except (ValueError, OSError) as exc:
        click.echo(f"netmon samples generate: error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
        return
    click.echo(
        f"{summary.path}: {summary.packets:,} packets ({summary.scenario}), {summary.bytes / 1e6:.2f} MB, "
        f"{summary.first_ts} .. {summary.last_ts}, {summary.rate_pps:,.0f} packets/s"
    )
    for key, value in summary.details.items():
        if key != "truth":
            click.echo(f"  {key}: {value}")
    truth = summary.details["truth"]
    if truth["start"] is not None:  # the ground truth (netmon eval alerts reads it from --json)
        attackers = ", ".join(truth["attackers"]) or f"{truth['attackers_count']:,} sources"
        spoofed = " (spoofed)" if truth["spoofed"] else ""
        click.echo(f"  attack: {attackers}{spoofed} -> {', '.join(truth['victims'])}")
        click.echo(f"  attack time: {truth['start']} .. {truth['end']}")
