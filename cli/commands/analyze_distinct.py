"""``netmon analyze distinct FILE``: sliding-window distinct counts over a capture, offline.

One JSON line per slide, ``{"end": "<ISO-8601>", "groups": [{"group": ..., "distinct": ...}]}``,
or a table. The conventions are in ``docs/distinct.md``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from decimal import Decimal

import click

from analytics.distinct_offline import DistinctReport, OfflineStats, distinct_reports, parse_duration_ns
from analytics.distinct_queries import QUERIES, DistinctQuery

log = logging.getLogger(__name__)


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration_ns(value, name=param.name or "duration")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def build_query(
    name: str | None,
    count: str | None,
    group_by: str | None,
    window_ns: int | None,
    sub_window_ns: int | None,
) -> DistinctQuery:
    """The built-in query ``name`` or an ad-hoc one, with window options overriding."""
    if (name is None) == (count is None):
        raise click.UsageError("give either --query NAME or --count KEY (not both)")
    if name and group_by is not None:
        raise click.UsageError("--group-by goes with --count, not with --query")
    base = QUERIES[name] if name else DistinctQuery(name="adhoc", count=count or "", group_by=group_by or ())
    window = float(Decimal(window_ns) / 10**9) if window_ns else base.window_s
    sub = float(Decimal(sub_window_ns) / 10**9) if sub_window_ns else base.sub_window_s
    return DistinctQuery(
        name=base.name,
        count=base.count,
        group_by=base.group_by,
        window_s=window,
        sub_window_s=sub,
        description=base.description,
    )


TABLE_HEADER = f"{'end':<32} {'rank':>4} {'distinct':>10}  group"


def _table_lines(report: DistinctReport) -> list[str]:
    end = report.to_json()["end"]
    return [f"{end:<32} {rank:>4} {n:>10}  {g}" for rank, (g, n) in enumerate(report.groups, 1)]


def _emit(reports: Iterable[DistinctReport], fmt: str) -> None:
    if fmt == "table":
        click.echo(TABLE_HEADER)
    for report in reports:
        click.echo(json.dumps(report.to_json()) if fmt == "jsonl" else "\n".join(_table_lines(report)))


def _log_stats(query: DistinctQuery, stats: OfflineStats) -> None:
    if stats.late:
        log.warning(
            "%d records arrived after their sub-window closed (late) and were not counted", stats.late
        )
    log.info(
        "distinct %s: %d records, %d counted, %d skipped (null key), %d late, %d reports",
        *(query.name, stats.records, stats.counted, stats.skipped, stats.late, stats.reports),
        extra={"stats": stats.as_dict()},
    )


@click.command("distinct")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--query", "query_name", type=click.Choice(list(QUERIES)), help="A built-in query.")
@click.option("--count", help="Key whose distinct values are counted, e.g. src_ip or src_ip,dst_port.")
@click.option("--group-by", help='Group key, e.g. dst_ip (omit: one global count, group "").')
@click.option("--window", callback=_duration, help="Window N, e.g. 10s [query's, else 10s].")
@click.option("--sub-window", callback=_duration, help="Sub-window b, e.g. 1s [query's, else 1s].")
@click.option("--exact", is_flag=True, help="Exact sets instead of HLL sketches.")
@click.option("--lg-k", type=int, default=None, help="HLL lg_k, 4..21 [12].")
@click.option(
    "--top", type=click.IntRange(min=0), default=20, show_default=True, help="Groups per report; 0: all."
)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@click.option(
    "--watermark", callback=_duration, default=None, help="Lateness allowed before a sub-window closes [0]."
)
@click.option("--full-windows", is_flag=True, help="Report only once N/b sub-windows have elapsed.")
def command(
    file: str,
    query_name: str | None,
    count: str | None,
    group_by: str | None,
    window: int | None,
    sub_window: int | None,
    exact: bool,
    lg_k: int | None,
    top: int,
    fmt: str,
    watermark: int | None,
    full_windows: bool,
) -> None:
    """Distinct COUNT per GROUP-BY over a sliding window, one report per closed sub-window."""
    if exact and lg_k is not None:
        raise click.UsageError("--exact and --lg-k exclude each other")
    try:
        from ingest import read_records
    except ImportError:
        raise click.ClickException("the capture reader (ingest.read_records) is not available") from None
    stats = OfflineStats()
    try:
        query = build_query(query_name, count, group_by, window, sub_window)
        reports = distinct_reports(
            read_records(file),
            query,
            exact=exact,
            lg_k=12 if lg_k is None else lg_k,
            top=top or None,
            watermark_ns=watermark or 0,
            full_windows=full_windows,
            stats=stats,
        )
        _emit(reports, fmt)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _log_stats(query, stats)
