"""``netmon broker start|stop|status``: the local single-node Kafka broker."""

from __future__ import annotations

import json

import click

from cli.main import pass_config
from netmon.config import Config


@click.group("broker")
def command() -> None:
    """Run the project's local Apache Kafka broker (KRaft, 127.0.0.1)."""


def _broker(cfg: Config):  # noqa: ANN202 - imported lazily
    from netmon.broker import LocalBroker

    return LocalBroker(cfg)


@command.command("start")
@pass_config
def start(cfg: Config) -> None:
    """Start the broker; returns once it answers a metadata request."""
    from netmon.broker import BrokerError
    from netmon.jvm_deps import JvmDepsError

    try:
        click.echo(_broker(cfg).start().line())
    except (BrokerError, JvmDepsError) as exc:
        raise click.ClickException(str(exc)) from None


@command.command("stop")
@pass_config
def stop(cfg: Config) -> None:
    """Stop the broker gracefully (SIGTERM, wait, then report)."""
    click.echo(_broker(cfg).stop())


@command.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_config
def status(cfg: Config, as_json: bool) -> None:
    """Running or stopped, port, pid, topics."""
    st = _broker(cfg).status()
    click.echo(json.dumps(st.__dict__) if as_json else st.line())
