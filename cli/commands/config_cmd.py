"""``netmon config show``: the effective configuration (file + environment + defaults)."""

from __future__ import annotations

import json

import click

from cli.main import pass_config
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

        def is_tables(v: object) -> bool:
            return isinstance(v, list) and all(isinstance(t, dict) for t in v) and bool(v)

        scalars = {k: v for k, v in values.items() if not is_tables(v)}
        if scalars:
            click.echo(f"\n[{section}]")
            for key, value in scalars.items():
                if value is not None:
                    click.echo(f"{key} = {json.dumps(value)}")
        for key, tables in values.items():
            if is_tables(tables):
                for table in tables:
                    click.echo(f"\n[[{section}.{key}]]")
                    for k, v in table.items():
                        if v is not None:  # TOML has no null: an unset optional key is left out
                            click.echo(f"{k} = {json.dumps(v)}")
