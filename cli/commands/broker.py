"""``netmon broker start [--secure]|stop|status``: the local single-node Kafka broker."""

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
@click.option(
    "--secure",
    is_flag=True,
    help="Listen with SASL_SSL instead of PLAINTEXT: TLS with a self-signed certificate made in the "
    "state directory, and one SASL user whose password is read from an environment variable "
    "([kafka] sasl_username and sasl_password_env if [kafka] uses SASL, else netmon and "
    "NETMON_KAFKA_PASSWORD). Prints the [kafka] keys clients need (docs/security.md).",
)
@pass_config
def start(cfg: Config, secure: bool) -> None:
    """Start the broker; returns once it answers a metadata request."""
    from netmon.broker import BrokerError
    from netmon.jvm_deps import JvmDepsError

    broker = _broker(cfg)
    try:
        click.echo(broker.start(secure=secure).line())
    except (BrokerError, JvmDepsError) as exc:
        raise click.ClickException(str(exc)) from None
    if secure:
        k = broker.client_kafka()
        keys = {
            "security_protocol": k.security_protocol,
            "sasl_mechanism": k.sasl_mechanism,
            "sasl_username": k.sasl_username,
            "sasl_password_env": k.sasl_password_env,
            "ssl_cafile": k.ssl_cafile,
        }
        click.echo("clients need these [kafka] keys in netmon.toml (the password stays in the variable):")
        click.echo("[kafka]")
        for key, value in keys.items():
            click.echo(f"{key} = {json.dumps(value)}")


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
