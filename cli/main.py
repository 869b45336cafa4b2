"""The ``netmon`` command: one thin front end for every part of the system.

Subcommands live in ``cli/commands/<name>.py`` as a click object named ``command`` and are
imported only when run, so ``netmon broker status`` never imports pyspark or streamlit.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from netmon.config import Config, ConfigError, load_config
from netmon.logs import setup_logging
from netmon.orphans import parent_death_as_sigterm

__all__ = ["LazyGroup", "main"]


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attribute"`` strings, imported on use."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        # A subcommand whose module is not there (yet) is simply not offered.
        ready = {name for name, target in self.lazy.items() if _module_exists(target.partition(":")[0])}
        return sorted({*super().list_commands(ctx), *ready})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and _module_exists(self.lazy[name].partition(":")[0]):
            module, _, attr = self.lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr or "command")
        return super().get_command(ctx, name)


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


COMMANDS = {
    "alerts": "cli.commands.alerts:command",
    "analyze": "cli.commands.analyze:command",
    "bench": "cli.commands.bench:command",
    "broker": "cli.commands.broker:command",
    "capture": "cli.commands.capture:command",
    "cluster": "cli.commands.cluster:command",
    "config": "cli.commands.config_cmd:command",
    "dashboard": "cli.commands.dashboard:command",
    "demo": "cli.commands.demo:command",
    "eval": "cli.commands.evaluate:command",
    "explain": "cli.commands.explain:command",
    "maintain": "cli.commands.maintain:command",
    "parse": "cli.commands.parse:command",
    "pipeline": "cli.commands.pipeline:command",
    "replay": "cli.commands.replay:command",
    "reset": "cli.commands.reset:command",
    "samples": "cli.commands.samples:command",
    "setup": "cli.commands.setup:command",
    "status": "cli.commands.status:command",
    "tune": "cli.commands.tune:command",
    "up": "cli.commands.up:command",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="NETMON_CONFIG",
    help="netmon.toml to read (default: built-in defaults).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("--log-json", is_flag=True, help="Structured JSON log lines on stderr.")
@click.version_option(package_name="netmon")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: int, log_json: bool) -> None:
    """netmon: network-traffic monitoring on Kafka and Spark."""
    setup_logging(verbose, json_lines=log_json)
    try:
        ctx.obj = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


pass_config = click.make_pass_decorator(Config)


def main() -> None:
    # Started by `netmon up`: its death (however it dies) becomes one SIGTERM, a clean stop.
    parent_death_as_sigterm()
    try:
        cli(prog_name="netmon")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
