"""``netmon bench scaling``: the command line of :mod:`bench.scaling`.

A temporary local cluster (one Kafka node, ``--workers`` Spark workers of one core) and, per topic
of ``--partitions`` partitions, one drain of the shared query in a fresh driver on ``local[2]`` and
on the cluster with 1 … ``--workers`` executors: drain seconds, packets/s, the ratio to
``local[2]`` in the same round, the load average, and whether every packet was counted.
"""

from __future__ import annotations

import json
import sys

import click

from cli.main import pass_config
from netmon.config import Config

__all__ = ["command"]


def _partitions(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(p) for p in value.split(","))
    except ValueError:
        raise click.BadParameter(
            f"expected partition counts as integers, e.g. 1,2,4, got {value!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"expected partition counts >= 1, got {value!r}")
    return counts


@click.command("scaling")
@click.option(
    "--packets",
    type=click.IntRange(min=1),
    default=200_000,
    show_default=True,
    help="Packets of the capture.",
)
@click.option(
    "--partitions",
    default="1,2,4",
    show_default=True,
    callback=_partitions,
    help="Partition counts: one topic each.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Spark workers of 1 core; the cluster setups use 1 … this many.",
)
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True, help="Rounds of drains.")
@click.option("--keep", is_flag=True, help="Keep the temporary directory (logs, results) and print its path.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@pass_config
def command(
    cfg: Config,
    packets: int,
    partitions: tuple[int, ...],
    workers: int,
    rounds: int,
    keep: bool,
    as_json: bool,
) -> None:
    """Drain time of the shared query on local[2] and on a local standalone cluster of 1 … N workers."""
    from bench.scaling import bench_scaling, format_report

    try:
        result = bench_scaling(
            packets=packets,
            partitions=partitions,
            workers=workers,
            rounds=rounds,
            cache_dir=cfg.paths.cache_dir,  # the jars `netmon setup` fetched
            keep=keep,
            say=lambda line: click.echo(line, err=True),
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (cluster, Spark, replay)
        click.echo(f"netmon bench scaling: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else format_report(result))
