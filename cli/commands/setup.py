"""``netmon setup``: fetch the JVM jars (Kafka broker, Spark's Kafka connector) into the cache."""

from __future__ import annotations

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("setup")
@pass_config
def command(cfg: Config) -> None:
    """Fetch the Kafka broker and Spark Kafka connector jars (idempotent; offline once done)."""
    from netmon.jvm_deps import PROFILES, JvmDepsError, ensure_jars

    for profile in PROFILES:
        try:
            jars = ensure_jars(cfg.paths.cache_dir, profile)
        except JvmDepsError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"{profile}: {len(jars.jars)} jars in {jars.directory}")
