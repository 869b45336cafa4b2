"""``netmon reset [--kind K ...] [--topics] [--yes]``: start the results over, instead of ``rm -rf``.

Removes the results and state (checkpoints) of the kinds asked (default: all of them) through
``pipeline.job.reset_kinds`` — the same as ``netmon pipeline --reset`` — and, with ``--topics``,
deletes their Kafka result topics (``netmon.<kind>``), plus the packets topic when every kind is
reset (a pipeline checkpoint that remains must not see its input topic start over). It prints what
it removes and asks first unless ``--yes``.

Exit codes: 0 done (or nothing to remove); 1 declined, refused while a pipeline runs on the data
directory, or Kafka did not answer for ``--topics``.
"""

from __future__ import annotations

import click

from cli.commands.produced import fail
from cli.main import pass_config
from netmon.config import RESULT_KINDS, Config


@click.command("reset")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice([*RESULT_KINDS, "all"]),
    help="A result kind to reset (repeatable; default: all). joins brings shedding and sys.",
)
@click.option("--topics", is_flag=True, help="Also delete the Kafka topics (see above).")
@click.option("--yes", is_flag=True, help="Remove without asking.")
@pass_config
def command(cfg: Config, kinds: tuple[str, ...], topics: bool, yes: bool) -> None:
    """Remove checkpoints and results (and with --topics the Kafka topics), after asking."""
    from netmon.results import result_topic
    from pipeline.job import PipelineRunning, reset_kinds, reset_plan, reset_set

    kinds = kinds or ("all",)
    everything = "all" in kinds
    paths = reset_plan(cfg, kinds)
    chosen = RESULT_KINDS if everything else reset_set(kinds)[0]
    names = [result_topic(cfg, k) for k in chosen] + ([cfg.kafka.packets_topic] if everything else [])
    present = _existing_topics(cfg, names) if topics else []
    if not paths and not present:
        click.echo(f"netmon reset: nothing to remove under {cfg.paths.data_dir}", err=True)
        return
    click.echo(f"netmon reset {', '.join(kinds)} removes:", err=True)
    for path in paths:
        click.echo(f"  {path}", err=True)
    for topic in present:
        click.echo(f"  Kafka topic {topic}", err=True)
    if not yes and not click.confirm("Remove them?", default=False, err=True):
        fail("reset", "declined; nothing removed", 1)
    try:
        removed = reset_kinds(cfg, kinds)
    except PipelineRunning as exc:
        fail("reset", f"refused: {exc}", 1)
    for path in removed:
        click.echo(f"removed {path}", err=True)
    if present:
        _delete_topics(cfg, present)
        for topic in present:
            click.echo(f"deleted Kafka topic {topic}", err=True)


def _admin(cfg: Config):  # noqa: ANN202 - kafka-python is imported lazily
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from netmon.kafka_security import client_options

    try:
        return KafkaAdminClient(
            bootstrap_servers=cfg.kafka.bootstrap,
            request_timeout_ms=10_000,
            bootstrap_timeout_ms=10_000,
            client_id="netmon-reset",
            **client_options(cfg.kafka),
        )
    except (KafkaError, OSError) as exc:
        fail("reset", f"Kafka at {cfg.kafka.bootstrap}: {exc} (is the broker running?)", 1)


def _existing_topics(cfg: Config, names: list[str]) -> list[str]:
    admin = _admin(cfg)
    try:
        existing = set(admin.list_topics())
    finally:
        admin.close()
    return [n for n in dict.fromkeys(names) if n in existing]


def _delete_topics(cfg: Config, names: list[str]) -> None:
    from kafka.errors import KafkaError

    admin = _admin(cfg)
    try:
        admin.delete_topics(names, timeout_ms=30_000)
    except KafkaError as exc:
        fail("reset", f"deleting topics {', '.join(names)}: {exc}", 1)
    finally:
        admin.close()
