"""``netmon analyze distinct FILE``: sliding-window distinct counts over a capture, offline.

One JSON line per slide, ``{"end": "<ISO-8601>", "groups": [{"group": ..., "distinct": ...,
"distinct_low": ..., "distinct_high": ...}]}`` (the 95 % interval of the HLL estimate, equal to the
count where it is exact), or a table of the counts. The conventions are in ``docs/distinct.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

import click

from analytics.distinct_offline import DistinctReport, OfflineStats, distinct_reports, parse_duration_ns
from analytics.distinct_queries import QUERIES, DistinctQuery
from cli.commands.analyze_common import (
    CONFIGURED_FIRST,
    close_after_ns,
    close_option,
    find_query,
    seconds_ns,
    watermark_option,
)
from cli.main import pass_config
from netmon.config import Config
from netmon.config import DistinctQuery as ConfiguredDistinct

log = logging.getLogger(__name__)


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration_ns(value, name=param.name or "duration")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@dataclass(frozen=True)
class Resolved:
    """A query and the run options it brings: the configured query's, or the CLI defaults."""

    query: DistinctQuery
    lg_k: int = 12
    top: int = 20
    watermark_ns: int = 0


def build_query(
    name: str | None,
    count: str | None,
    group_by: str | None,
    window_ns: int | None,
    sub_window_ns: int | None,
    configured: Sequence[ConfiguredDistinct] = (),
    watermark_s: float = 0.0,
) -> Resolved:
    """The query ``name`` (configured first, then built-in) or an ad-hoc one, windows overriding.

    A configured query (``[[queries.distinct]]``) brings its ``lg_k``, ``top`` and the pipeline's
    ``watermark_s``; a built-in or ad-hoc one the defaults of :class:`Resolved`.
    """
    if (name is None) == (count is None):
        raise click.UsageError("give either --query NAME or --count KEY (not both)")
    if name and group_by is not None:
        raise click.UsageError("--group-by goes with --count, not with --query")
    if not name:
        resolved = Resolved(DistinctQuery(name="adhoc", count=count or "", group_by=group_by or ()))
    elif (conf := find_query("distinct", name, configured, QUERIES)) is None:
        resolved = Resolved(QUERIES[name])
    else:
        base = DistinctQuery(
            name=conf.name,
            count=conf.count,
            group_by=conf.group_by,
            window_s=conf.window_s,
            sub_window_s=conf.sub_window_s,
        )
        resolved = Resolved(base, conf.lg_k, conf.top, seconds_ns(watermark_s, "[pipeline] watermark_s"))
    base = resolved.query
    window = float(Decimal(window_ns) / 10**9) if window_ns else base.window_s
    sub = float(Decimal(sub_window_ns) / 10**9) if sub_window_ns else base.sub_window_s
    query = DistinctQuery(
        name=base.name,
        count=base.count,
        group_by=base.group_by,
        window_s=window,
        sub_window_s=sub,
        description=base.description,
    )
    return dataclasses.replace(resolved, query=query)


def _default(cls: type, name: str) -> object:
    """A dataclass field's default, so that help texts state the one in the code."""
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


_WINDOW, _SUB = _default(DistinctQuery, "window_s"), _default(DistinctQuery, "sub_window_s")


def _builtin_help() -> str:
    """The built-in queries and their windows, e.g. ``ddos, port-scan (10 s / 1 s windows)``."""
    spans = [f"{q.window_s:g} s / {q.sub_window_s:g} s" for q in QUERIES.values()]
    if len(set(spans)) == 1:
        return f"{', '.join(QUERIES)} ({spans[0]} windows)"
    return ", ".join(f"{name} ({span})" for name, span in zip(QUERIES, spans, strict=True))


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
            "%d records were more than the watermark delay behind the newest timestamp before them "
            "(late) and were not counted",
            stats.late,
        )
    log.info(
        "distinct %s: %d records, %d counted, %d skipped (null key), %d late, %d reports",
        *(query.name, stats.records, stats.counted, stats.skipped, stats.late, stats.reports),
        extra={"stats": stats.as_dict()},
    )


@click.command("distinct")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--query",
    "query_name",
    metavar="NAME",
    help="A [[queries.distinct]] query of the configuration (netmon config show), with its count, "
    "group_by, window, sub-window, lg_k and top and [pipeline] watermark_s; or a built-in one: "
    f"{_builtin_help()}. {CONFIGURED_FIRST} The options below override.",
)
@click.option("--count", help="Key whose distinct values are counted, e.g. src_ip or src_ip,dst_port.")
@click.option("--group-by", help='Group key, e.g. dst_ip (omit: one global count, group "").')
@click.option("--window", callback=_duration, help=f"Window N, e.g. 10s [the query's, else {_WINDOW:g}s].")
@click.option(
    "--sub-window", callback=_duration, help=f"Sub-window b, e.g. 1s [the query's, else {_SUB:g}s]."
)
@click.option("--exact", is_flag=True, help="Exact sets instead of HLL sketches.")
@click.option(
    "--lg-k",
    type=int,
    default=None,
    help=f"HLL lg_k, 4..21 [the configured query's, else {_default(Resolved, 'lg_k')}].",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=None,
    help=f"Groups per report; 0: all [the configured query's, else {_default(Resolved, 'top')}].",
)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@watermark_option
@click.option("--full-windows", is_flag=True, help="Report only once N/b sub-windows have elapsed.")
@close_option
@pass_config
def command(
    cfg: Config,
    file: str,
    query_name: str | None,
    count: str | None,
    group_by: str | None,
    window: int | None,
    sub_window: int | None,
    exact: bool,
    lg_k: int | None,
    top: int | None,
    fmt: str,
    watermark: int | None,
    full_windows: bool,
    close_at_end: bool,
) -> None:
    """Distinct COUNT per GROUP-BY over a sliding window, one report per closed sub-window.

    Give --query NAME, or --count KEY [--group-by KEY]. See docs/distinct.md.
    """
    if exact and lg_k is not None:
        raise click.UsageError("--exact and --lg-k exclude each other")
    try:
        from ingest import read_records
    except ImportError:
        raise click.ClickException("the capture reader (ingest.read_records) is not available") from None
    stats = OfflineStats()
    try:
        resolved = build_query(
            query_name, count, group_by, window, sub_window, cfg.queries.distinct, cfg.pipeline.watermark_s
        )
        query = resolved.query
        top = resolved.top if top is None else top
        reports = distinct_reports(
            read_records(file),
            query,
            exact=exact,
            lg_k=resolved.lg_k if lg_k is None else lg_k,
            top=top or None,
            watermark_ns=resolved.watermark_ns if watermark is None else watermark,
            full_windows=full_windows,
            stats=stats,
            close_after_ns=close_after_ns(cfg) if close_at_end else None,
        )
        _emit(reports, fmt)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _log_stats(query, stats)
