"""``netmon analyze alerts FILE...``: the alert episodes the detection rules raise over captures."""

from __future__ import annotations

import json

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("alerts")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@pass_config
def command(cfg: Config, files: tuple[str, ...], fmt: str) -> None:
    """Run the detection rules (built in, or [[alerts.rules]] of kind features) over the captures,
    exactly, and print each episode: rule, severity, subject, first, last, value (docs/alerts.md)."""
    from alerts.defaults import DETECTION_RULES, effective_rules
    from alerts.offline import analyze_capture
    from ingest.errors import CaptureError

    try:
        episodes = analyze_capture(files, effective_rules(cfg.alerts, DETECTION_RULES), cfg.alerts)
    except (CaptureError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "jsonl":
        for e in episodes:
            click.echo(json.dumps(e.to_dict()))
        return
    click.echo(f"{'rule':<13} {'severity':<9} {'subject':<40} {'first':<24} {'last':<24} value")
    for e in episodes:
        d = e.to_dict()
        click.echo(
            f"{e.rule:<13} {e.severity:<9} {e.subject:<40} {d['first']:<24} {d['last']:<24} {e.value:g}"
        )
    click.echo(f"{len(episodes)} episode{'s' * (len(episodes) != 1)}")
