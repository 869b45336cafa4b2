"""``netmon analyze join FILE``: a built-in window join over a capture, offline, with load shedding.

``--query handshake`` joins SYNs with SYN-ACKs (RTT per server, unanswered SYNs per destination);
``--query link`` joins stream ``--left`` with stream ``--right`` (filter expressions) on
``--key``. Shedding: ``--strategy`` with fractions ``--x-left/--x-right`` or a ``--budget`` (CPU
seconds per second; an unshed pass measures the rates, selectivity and costs first). JSON lines,
one per result (``--format jsonl``), or summary tables. Run statistics go to stderr as one JSON line.

``--lateness d`` (a configured query: ``[pipeline] watermark_s``, else 0) is the pipeline's watermark
delay, with its one meaning of late (``docs/reliability.md``): a record more than ``d`` behind the
newest timestamp before it in the file is late, dropped before the join and counted (a ``netmon:``
line on stderr, ``late_dropped`` in the statistics), as the pipeline's joins never see it; the join
takes the records it keeps up to ``d`` behind its clock exactly. Definitions: ``docs/joins.md``.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from typing import Any

import click
import pandas as pd

from analytics.join_queries import (
    QUERY_NAMES,
    STRATEGY_NAMES,
    HandshakeQuery,
    LinkQuery,
    analyze_join,
    handshake_rtts,
    link_matches,
    rtt_per_server,
    unanswered_syns,
)
from cli.commands.analyze_common import CONFIGURED_FIRST, find_query
from cli.main import pass_config
from netmon.config import Config

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s|m|h)?\s*$")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _default(cls: type, name: str) -> Any:
    """A constructor parameter's default, so that help texts state the one in the code."""
    return inspect.signature(cls).parameters[name].default


_WINDOW_S: dict[str, float] = {
    "handshake": _default(HandshakeQuery, "window_s"),
    "link": _default(LinkQuery, "window_s"),
}
_KEY: str = _default(LinkQuery, "key")


def _seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    m = _DURATION.match(value)
    if not m:
        raise click.BadParameter(f"cannot parse duration {value!r} (e.g. 3s, 500ms)")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


def _table(frame: pd.DataFrame, limit: int) -> str:
    if frame.empty:
        return "(none)"
    return frame.head(limit if limit else len(frame)).to_string(index=False)


@click.command("join")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--query",
    "query_name",
    metavar="NAME",
    required=True,
    help="A [[queries.join]] query of the configuration (netmon config show), with its kind, window, "
    "filters and keys and [pipeline] watermark_s as lateness (not its strategy: give --strategy); "
    f"or a built-in one: {', '.join(QUERY_NAMES)}. {CONFIGURED_FIRST} The options below override.",
)
@click.option(
    "--window",
    callback=_seconds,
    help=f"Window T, e.g. 3s [the query's, else {', '.join(f'{q} {t:g}s' for q, t in _WINDOW_S.items())}].",
)
@click.option("--left", help='link: stream A filter, e.g. "iface=eth0" or "dst_ip=10.1.0.0/16".')
@click.option("--right", help="link: stream B filter.")
@click.option("--key", help=f"link: join key columns [the query's, else {_KEY}].")
@click.option("--right-key", help="link: stream B's key columns if different.")
@click.option(
    "--lateness",
    callback=_seconds,
    help="Watermark delay: a record more than this behind the newest timestamp before it is late "
    "(dropped before the join and counted, as in the pipeline); one less late still joins "
    "[a configured query: [pipeline] watermark_s, else 0].",
)
@click.option("--strategy", type=click.Choice(STRATEGY_NAMES), default="none", show_default=True)
@click.option("--x-left", type=click.FloatRange(0, 1), help="Fraction x_L (cf/inp/pni).")
@click.option("--x-right", type=click.FloatRange(0, 1), help="Fraction x_R (cf/inp/pni).")
@click.option("--budget", type=click.FloatRange(min=0), help="CPU seconds per second for the join.")
@click.option("--cu", type=click.FloatRange(min=0), help="C_u seconds (default: measured).")
@click.option("--cp", type=click.FloatRange(min=0), help="C_p seconds (default: measured).")
@click.option(
    "--batch", callback=_seconds, default="1s", show_default=True, help="Micro-batch of event time."
)
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the shedding decisions.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@click.option("--top", type=click.IntRange(min=0), default=20, show_default=True, help="Table rows; 0: all.")
@pass_config
def command(
    cfg: Config,
    file: str,
    query_name: str,
    window: float | None,
    left: str | None,
    right: str | None,
    key: str | None,
    right_key: str | None,
    lateness: float | None,
    strategy: str,
    x_left: float | None,
    x_right: float | None,
    budget: float | None,
    cu: float | None,
    cp: float | None,
    batch: float,
    seed: int,
    fmt: str,
    top: int,
) -> None:
    """Run a window join over FILE (pcap, pcapng, optionally gzip-compressed).

    The join has no windows left open at the end of the file: every result is written when its
    second tuple arrives, and a SYN counts as unanswered once T has passed before the end. A record
    more than --lateness behind the newest timestamp before it is late: dropped before the join and
    counted, the pipeline's meaning of late.
    """
    from ingest import read_records

    kind, lateness_default = query_name, 0.0
    conf = find_query("join", query_name, cfg.queries.join, QUERY_NAMES)
    if conf is not None:
        kind, lateness_default = conf.query, cfg.pipeline.watermark_s
        window = conf.window_s if window is None else window
        left, right = left or conf.left or None, right or conf.right or None
        key, right_key = key or conf.key, right_key or conf.right_key or None
    window = _WINDOW_S[kind] if window is None else window
    lateness = lateness_default if lateness is None else lateness
    if kind == "link" and not (left and right):
        raise click.UsageError("--query link needs --left and --right stream filters")
    if budget is not None and (x_left is not None or x_right is not None):
        raise click.UsageError("give either --x-left/--x-right or --budget, not both")
    if budget is None and strategy.startswith("max-subset"):
        raise click.UsageError(f"--strategy {strategy} needs --budget")
    try:
        query = (
            HandshakeQuery(window)
            if kind == "handshake"
            else LinkQuery(left, right, window, key or _KEY, right_key)  # type: ignore[arg-type]
        )
        run, model = analyze_join(
            query, read_records(file), strategy=strategy, x_left=x_left, x_right=x_right, budget=budget,
            cu_s=cu, cp_s=cp, seed=seed, batch_s=batch, lateness_s=lateness, late_after_s=lateness,
        )  # fmt: skip
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    stats = {
        k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in run.total.as_dict().items()
    }
    stats["late_dropped"] = run.late_dropped
    if model is not None:
        stats["model"] = {k: getattr(model, k) for k in model._get_params()}
    if run.late_dropped:
        click.echo(
            f"netmon: {run.late_dropped} late records (more than the watermark delay behind the newest "
            "timestamp before them) dropped",
            err=True,
        )
    click.echo(json.dumps(stats), err=True)
    res = run.results
    if fmt == "jsonl":
        if kind == "handshake" and len(res):
            res = res.assign(rtt_s=(res["right_ts"] - res["left_ts"]).dt.total_seconds())
        if len(res):
            click.echo(
                res.to_json(orient="records", lines=True, date_format="iso", date_unit="ns").rstrip("\n")
            )
        return
    click.echo(f"{len(res)} results ({strategy}); {len(run.left)} left and {len(run.right)} right tuples")
    if kind == "handshake":
        click.echo("\nHandshake RTT per server (seconds):")
        click.echo(_table(rtt_per_server(handshake_rtts(res)), top))
        click.echo(f"\nSYNs unanswered after {window:g} s, per destination:")
        click.echo(_table(unanswered_syns(run, window), top))
    else:
        click.echo("\nMatches per key:")
        click.echo(_table(link_matches(res), top))
