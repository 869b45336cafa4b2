"""``netmon eval shedding [FILE]``: CF, INP, PNI and Online Max-Subset against CPU budgets.

Runs a built-in join over a capture (or ``--synthetic`` numpy streams with Zipf keys) unshed, then
at budgets from 10% to 100% of the unshed cost per strategy, and prints a Markdown table of
results produced and cost used vs budget with the Theorem 2/3 checks. ``--out DIR`` also writes
``<name>.csv``, ``<name>.md`` and a Plotly figure ``<name>.html``. Method: ``docs/eval/shedding.md``.
"""

from __future__ import annotations

from pathlib import Path

import click

from analytics.join_eval import (
    EVAL_STRATEGIES,
    WindowSpec,
    evaluate_shedding,
    markdown_report,
    parse_budgets,
    synthetic_sides,
    write_report,
)
from analytics.join_queries import QUERY_NAMES, HandshakeQuery, LinkQuery
from cli.commands.analyze_join import _seconds


def _budgets(ctx: click.Context, param: click.Parameter, value: str) -> list[float]:
    try:
        return parse_budgets(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).partition(": ")[2]) from None


def _strategies(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in EVAL_STRATEGIES]
    if bad or not names:
        raise click.BadParameter(f"unknown {bad} (known: {', '.join(EVAL_STRATEGIES)})")
    return names


@click.command("shedding")
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--query", "query_name", type=click.Choice(QUERY_NAMES), default="handshake", show_default=True)
@click.option("--window", callback=_seconds, default="3s", show_default=True, help="Window T, e.g. 3s.")
@click.option("--left", help="link: stream A filter.")
@click.option("--right", help="link: stream B filter.")
@click.option("--key", default="src_ip", show_default=True, help="link: join key columns.")
@click.option("--right-key", help="link: stream B's key columns if different.")
@click.option("--synthetic", is_flag=True, help="Generated streams instead of FILE (T_L = T_R = --window).")
@click.option(
    "--skew", type=click.FloatRange(min=0), default=1.2, show_default=True, help="synthetic: Zipf skew."
)
@click.option("--keys", "n_keys", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option(
    "--rate", type=click.FloatRange(min=0), default=500.0, show_default=True, help="synthetic: λ per side."
)
@click.option(
    "--duration", type=click.FloatRange(min=0), default=30.0, show_default=True, help="synthetic: s."
)
@click.option(
    "--correlation", type=click.Choice(["positive", "negative"]), default="positive", show_default=True
)
@click.option(
    "--budgets", callback=_budgets, default="0.1..1.0", show_default=True, help="Fractions of the cost."
)
@click.option("--strategies", callback=_strategies, default=",".join(EVAL_STRATEGIES), show_default=True)
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per point.")
@click.option("--cu", type=click.FloatRange(min=0), help="C_u seconds (default: measured on the unshed run).")
@click.option("--cp", type=click.FloatRange(min=0), help="C_p seconds (default: measured on the unshed run).")
@click.option(
    "--batch", callback=_seconds, default="1s", show_default=True, help="Micro-batch of event time."
)
@click.option("--out", type=click.Path(file_okay=False), help="Write <name>.csv/.md/.html here.")
@click.option("--name", help="Report name [file stem and query, or synthetic parameters].")
@click.option(
    "--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True
)
def command(
    file: str | None,
    query_name: str,
    window: float,
    left: str | None,
    right: str | None,
    key: str,
    right_key: str | None,
    synthetic: bool,
    skew: float,
    n_keys: int,
    rate: float,
    duration: float,
    correlation: str,
    budgets: list[float],
    strategies: list[str],
    seeds: int,
    cu: float | None,
    cp: float | None,
    batch: float,
    out: str | None,
    name: str | None,
    fmt: str,
) -> None:
    """Results produced and cost used vs CPU budget for each shedding strategy."""
    if synthetic == (file is not None):
        raise click.UsageError("give either FILE or --synthetic")
    try:
        if file is None:  # --synthetic
            left_side, right_side = synthetic_sides(
                n_keys=n_keys, skew=skew, lambda_left=rate, lambda_right=rate, duration_s=duration,
                correlation=correlation, seed=1,
            )  # fmt: skip
            windows = WindowSpec(window, window)
            label = name or f"synthetic-zipf{skew:g}-{correlation}-{n_keys}keys"
            title = (
                f"Synthetic: Zipf {skew:g} keys ({n_keys}, {correlation} correlation), "
                f"λ = {rate:g}/s per side, {duration:g} s, T = {window:g} s"
            )
        else:
            from ingest import read_records

            query: HandshakeQuery | LinkQuery
            if query_name == "handshake":
                query = HandshakeQuery(window)
            elif left and right:
                query = LinkQuery(left, right, window, key, right_key)
            else:
                raise click.UsageError("--query link needs --left and --right stream filters")
            left_side, right_side = query.sides(read_records(file))
            windows = WindowSpec(query.window_left_s, query.window_right_s)
            label = name or f"{Path(file).name.split('.')[0]}-{query_name}"
            title = f"{Path(file).name}: {query_name} query, T = {window:g} s"
        table, model = evaluate_shedding(
            left_side, right_side, windows, dataset=label, budgets=budgets, strategies=strategies,
            cu_s=cu, cp_s=cp, batch_s=batch, seeds=tuple(range(1, seeds + 1)),
        )  # fmt: skip
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if out:
        paths = write_report(table, model, out, name=label, title=title)
        click.echo("wrote " + ", ".join(str(p) for p in paths.values()), err=True)
    if fmt == "csv":
        click.echo(table.to_csv(index=False, float_format="%.6g").rstrip("\n"))
    else:
        click.echo(markdown_report(table, model, title=title).rstrip("\n"))
