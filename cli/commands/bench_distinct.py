"""``netmon bench distinct``: the command line of :mod:`bench.distinct`.

Measures throughput and error of the pipeline's streaming sub-window HLL sketches against
Spark's ``approx_count_distinct`` over ``window(ts, N, b)``, both scored against the exact oracle
on one generated capture. The options here, the measuring in :mod:`bench.distinct`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from bench.distinct import SCENARIO_QUERY, bench_distinct, format_report
from netmon.config import Config

__all__ = ["command"]


@click.command("distinct")
@click.option(
    "--packets", type=int, default=500_000, show_default=True, help="Size of the generated capture."
)
@click.option("--scenario", type=click.Choice(sorted(SCENARIO_QUERY)), default="ddos", show_default=True)
@click.option(
    "--duration", "duration_s", type=float, default=300.0, show_default=True, help="Event-time span, s."
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--query", "query_name", help="A configured distinct query [the scenario's].")
@click.option("--files", type=int, default=5, show_default=True, help="Input files (time-ordered slices).")
@click.option(
    "--files-per-batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Files per micro-batch: each is one input partition (like one Kafka partition).",
)
@click.option("--rsd", "rsds", type=float, multiple=True, help="approx_count_distinct rsd(s) [0.05].")
@click.option("--with-ranking", is_flag=True, help="Also time the pipeline's whole query (ranking).")
@click.option("--repeat", type=click.IntRange(min=1), default=2, show_default=True, help="Timed rounds.")
@click.option("--master", help="Spark master [the configured one].")
@click.option("--conf", "confs", multiple=True, help="A Spark SQL setting KEY=VALUE for this run.")
@click.option("--keep", type=click.Path(file_okay=False), help="Keep the work files in this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.pass_obj
def command(
    cfg: Config,
    rsds: tuple[float, ...],
    confs: tuple[str, ...],
    keep: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Throughput and error: sub-window HLL sketches vs approx_count_distinct over window(ts, N, b)."""
    bad = [c for c in confs if "=" not in c]
    if bad:
        raise click.BadParameter(f"expected KEY=VALUE, got {bad[0]!r}", param_hint="--conf")
    try:
        result = bench_distinct(
            cfg,
            rsds=rsds or (0.05,),
            spark_conf=dict(c.split("=", 1) for c in confs),
            keep=Path(keep) if keep else None,
            say=lambda line: click.echo(line, err=True),
            **options,
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (Spark, file, query)
        click.echo(f"netmon bench distinct: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
