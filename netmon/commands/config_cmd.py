"""``netmon config show``: the effective configuration (file + environment + defaults)."""

from __future__ import annotations

import json

import click

from netmon.cli import pass_config
from netmon.config import Config


@click.group("config")
def command() -> None:
    """Inspect the configuration."""


@command.command("show")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of TOML.")
@pass_config
def show(cfg: Config, as_json: bool) -> None:
    """Print the effective configuration."""
    data = cfg.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"# source: {cfg.source or 'built-in defaults'}")
    for section, values in data.items():
        click.echo(f"\n[{section}]")
        for key, value in values.items():
            click.echo(f"{key} = {json.dumps(value)}")
