"""``netmon eval alerts``: precision and recall of alert episodes against generated ground truth."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cli.main import pass_config
from ingest.generate import SCENARIOS
from netmon.config import Config


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None


@click.command("alerts")
@click.option("--rates", default="1000,10000,50000", show_default=True, help="Packets per second.")
@click.option("--seeds", default="1,2,3", show_default=True, help="Generator seeds per rate and scenario.")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(SCENARIOS),
    help="Only this generated scenario (repeatable; default: all).",
)
@click.option("--duration", "duration_s", type=float, default=60.0, show_default=True, help="Seconds.")
@click.option(
    "--capture",
    "captures",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A real capture with no attack in it (repeatable): every episode on it is false.",
)
@click.option(
    "--out",
    default="docs/eval/alerts",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for alerts.csv and alerts.md.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every run and the checks as one JSON object.")
@pass_config
def command(
    cfg: Config,
    rates: str,
    seeds: str,
    scenarios: tuple[str, ...],
    duration_s: float,
    captures: tuple[str, ...],
    out: str,
    as_json: bool,
) -> None:
    """Generate every scenario at each rate and seed, run `netmon analyze alerts` on it, and score
    the episodes against the generator's ground truth (docs/evaluation.md, "Alerts"). Exit 1 when a
    check fails: an episode on baseline traffic, an attack its rule missed, a false episode."""
    from alerts.defaults import DETECTION_RULES, effective_rules
    from alerts.evaluation import run_evaluation

    try:
        result = run_evaluation(
            rules=effective_rules(cfg.alerts, DETECTION_RULES),
            alerts=cfg.alerts,
            rates=_ints(rates),
            seeds=_ints(seeds),
            scenarios=scenarios or SCENARIOS,
            duration_s=duration_s,
            captures=captures,
            out=Path(out),
            log=lambda line: click.echo(line, err=True),
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        click.echo("\n".join(result.table()))
        for claim, holds, evidence in result.checks:
            click.echo(f"{'ok  ' if holds else 'FAIL'} {claim}: {evidence}")
        click.echo(f"wrote {', '.join(str(p) for p in result.files)}")
    sys.exit(0 if all(holds for _, holds, _ in result.checks) else 1)
