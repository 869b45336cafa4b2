"""``netmon eval topk``: reproduce Golab's Figure 6.3 (Algorithm 6 vs. exact counts and DataSketches)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("topk")
@click.option(
    "--trace",
    "traces",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A capture to evaluate too, by --key (repeatable). Generated Zipf traces are always used.",
)
@click.option(
    "--key", default="src_ip", show_default=True, help="Key of the --trace captures (e.g. 'src_ip,src_port')."
)
@click.option("--packets", default=500_000, show_default=True, help="Packets per generated trace.")
@click.option("--starts", default=100, show_default=True, help="Random starting points per configuration.")
@click.option(
    "--window",
    "window",
    default=100_000,
    show_default=True,
    help="N, packets (scaled down for short traces).",
)
@click.option(
    "--seed", default=0, show_default=True, help="Seed of the generated traces and the starting points."
)
@click.option(
    "--out",
    "out",
    default="docs/eval/topk",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for topk.csv, topk.md and the figures.",
)
def command(
    traces: tuple[str, ...], key: str, packets: int, starts: int, window: int, seed: int, out: str
) -> None:
    """Average delta, items above delta, reported, recall, space and relative error per (b, k)."""
    from analytics.topk_eval import run_evaluation

    try:
        result = run_evaluation(
            traces=traces,
            key=key,
            packets=packets,
            starts=starts,
            N=window,
            seed=seed,
            out=Path(out),
            log=click.echo,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for claim, holds, evidence in result.checks:
        click.echo(f"{'ok  ' if holds else 'FAIL'} {claim}: {evidence}")
    click.echo(f"wrote {', '.join(str(p) for p in result.files)}")
