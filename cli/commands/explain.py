"""``netmon explain``: per query the plan, the cost model's estimates, feasibility, measured values.

The estimates use the constants ``netmon bench calibrate`` measured (the built-in defaults, said
so, when it never ran). The measured values come from the pipeline's statistics: the ``sys`` rows
of each query's batches of the last ``--span`` seconds (``results/sys/<query>/``, read from the
newest commit back by ``netmon.recent_results``), or, when there are none, the pipeline's status
file; the report says which. The report is built by :mod:`analytics.explain`.
"""

from __future__ import annotations

import json
import sys

import click

from cli.main import pass_config
from netmon.config import Config

__all__ = ["command"]


@click.command("explain")
@click.option(
    "--rate",
    "rate_pps",
    type=click.FloatRange(min=0),
    default=10_000.0,
    show_default=True,
    help="Input rate, packets/s.",
)
@click.option(
    "--keys",
    type=click.FloatRange(min=1),
    default=10_000.0,
    show_default=True,
    help="Distinct values of a query key.",
)
@click.option(
    "--groups",
    type=click.FloatRange(min=1),
    default=1_000.0,
    show_default=True,
    help="Distinct groups of a distinct query.",
)
@click.option(
    "--span",
    "span_s",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Measured values: aggregate each query's results/sys rows of this many seconds of batches.",
)
@click.option(
    "--capture",
    type=click.Path(exists=True, dir_okay=False),
    help="Take the traffic's mix from this pcap/pcapng (its keys' sub-window counts, the handshake"
    " shares) at --rate, instead of --keys and --groups.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--check", is_flag=True, help="Exit 3 when the queries do not fit the budgets.")
@pass_config
def command(
    cfg: Config,
    rate_pps: float,
    keys: float,
    groups: float,
    span_s: float,
    capture: str | None,
    fmt: str,
    check: bool,
) -> None:
    """Estimated CPU and memory of every configured query, against [resources] budgets."""
    import pyarrow as pa

    from analytics.cost_model import Workload, load_constants, workload_fields, workload_keys, workload_of
    from analytics.explain import explain, format_table
    from netmon.recent_results import newest_rows_by_sink
    from netmon.results import results_dir, status_file

    try:
        constants = load_constants(cfg.paths.state_dir)
        sys_rows = newest_rows_by_sink(results_dir(cfg, "sys"), span_s)
        path = status_file(cfg)
        status = json.loads(path.read_text()) if not sys_rows and path.exists() else None
    except (ValueError, OSError, pa.ArrowException) as exc:
        click.echo(f"netmon explain: error: {exc}", err=True)
        sys.exit(1)
    workload = Workload(rate_pps=rate_pps, key_cardinality=keys, group_cardinality=groups)
    if capture is not None:
        from ingest import read_records

        try:
            records = pa.Table.from_batches(list(read_records(capture)))
        except (ValueError, OSError, pa.ArrowException) as exc:
            click.echo(f"netmon explain: error: {capture}: {exc}", err=True)
            sys.exit(1)
        workload = workload_of(records, rate_pps, workload_fields(cfg), workload_keys(cfg))
    report = explain(
        cfg,
        workload,
        constants,
        status,
        sys_rows=sys_rows,
        span_s=span_s,
    )
    click.echo(json.dumps(report, indent=2) if fmt == "json" else "\n".join(format_table(report)))
    if check and not all(report["feasible"].values()):
        sys.exit(3)
