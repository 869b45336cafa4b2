"""``netmon demo``: broker + pipeline + replay of a bundled capture + dashboard (``--cluster``: on
the local multi-process cluster of ``netmon cluster up``)."""

from __future__ import annotations

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("demo")
@click.option(
    "--until-done", is_flag=True, help="No dashboard: exit 0 once every replayed packet is in the results."
)
@click.option("--capture", help="Capture to replay (default [ingest] demo_capture).")
@click.option(
    "--speed",
    type=float,
    help="Replay at this multiple of the capture's own pacing (default: as fast as possible).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=600.0,
    show_default=True,
    help="--until-done limit, seconds.",
)
@click.option(
    "--cluster",
    is_flag=True,
    help="On the local cluster (3 Kafka nodes with replicated topics, a Spark master, 2 workers): "
    "reused when `netmon cluster up` runs, else started and stopped at the end.",
)
@pass_config
def command(
    cfg: Config, until_done: bool, capture: str | None, speed: float | None, timeout_s: float, cluster: bool
) -> None:
    """Run everything on this machine and watch a capture flow through it."""
    from cli.demo import run_demo

    try:
        run_demo(
            cfg, until_done=until_done, capture=capture, timeout_s=timeout_s, speed=speed, cluster=cluster
        )
    except (RuntimeError, FileNotFoundError) as exc:  # the cluster's errors are RuntimeErrors too
        raise click.ClickException(str(exc)) from None
