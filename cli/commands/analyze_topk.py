"""``netmon analyze topk FILE``: Golab's Algorithm 6 over a capture's records, one report per line."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click

from cli.commands.analyze_common import (
    close_after_ns,
    close_option,
    find_query,
    seconds_ns,
    watermark_ns,
    watermark_option,
)
from cli.main import pass_config
from netmon.config import Config, TopKQuery

#: Library parameter names -> the options that set them, for error messages.
_OPTION = {
    "N": "--window",
    "b": "--sub-window",
    "k": "-k",
    "key": "--key",
    "weight": "--weight",
    "watermark": "--watermark",
}

#: A number with a time unit: a duration, which makes the windows event-time ones.
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ns|us|µs|ms|s|m|h)\s*$")


@click.command("topk")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--query",
    "query_name",
    metavar="NAME",
    help="A [[queries.topk]] query of the configuration (netmon config show): its key, weight, "
    "window, sub-window and k, event-time windows, and [pipeline] watermark_s. The options below "
    "override them.",
)
@click.option("--key", help="Record field(s): src_ip, dst_ip, 'src_ip,dst_ip', 'proto,dst_port'.")
@click.option(
    "--weight", type=click.Choice(["packets", "bytes"]), help="What is summed [the query's, else packets]."
)
@click.option(
    "--window",
    "window",
    help="N: a number of packets, or a duration (10s, 500ms, 1m), which implies --time-based.",
)
@click.option("--sub-window", "sub_window", help="b: packets, or a duration (implies --time-based).")
@click.option("-k", "k", type=int, help="Length of each sub-window's top-k list.")
@click.option(
    "--time-based",
    is_flag=True,
    help="Event-time windows; sub-windows aligned to multiples of b (implied by --query or a duration).",
)
@click.option("--exact", is_flag=True, help="Exact oracle: every item truly above delta, with true counts.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@watermark_option
@close_option
@pass_config
def command(
    cfg: Config,
    file: str,
    query_name: str | None,
    key: str | None,
    weight: str | None,
    window: str | None,
    sub_window: str | None,
    k: int | None,
    time_based: bool,
    exact: bool,
    fmt: str,
    watermark: int | None,
    close_at_end: bool,
) -> None:
    """Sliding-window heavy hitters of FILE (pcap, pcapng, .gz): one report per closed sub-window.

    JSON lines {"end", "delta", "items": [{"key", "count"}]}; "end" is the number of records counted
    (count-based) or the window's end time in ISO-8601 UTC (time-based). Give --query NAME, or
    --key, --window, --sub-window and -k. --close-at-end applies to event-time windows (a
    count-based sub-window closes when it holds b packets); so does --watermark, the pipeline's
    meaning of late. See docs/topk.md.
    """
    from analytics.topk_offline import read_topk

    query = None
    if query_name is not None:
        query = find_query("topk", query_name, cfg.queries.topk)
        assert query is not None  # top-k has no built-in offline queries
        window, sub_window = _configured(query, window, sub_window)
        key, weight, k = key or query.key, weight or query.weight, query.k if k is None else k
    missing = [opt for opt, v in (("--key", key), ("--window", window), ("--sub-window", sub_window),
                                  ("-k", k)) if v is None]  # fmt: skip
    if missing:
        raise click.UsageError(f"give --query NAME, or {', '.join(missing)}")
    assert key is not None and window is not None and sub_window is not None and k is not None
    time_based = (
        time_based or query is not None or bool(_DURATION.match(window) or _DURATION.match(sub_window))
    )
    try:
        n = window if time_based else _count("--window", window)
        b = sub_window if time_based else _count("--sub-window", sub_window)
        close = close_after_ns(cfg) if close_at_end and time_based else None
        delay = watermark_ns(cfg, watermark, configured=query is not None)
        q, reports = read_topk(
            file, key=key, N=n, b=b, k=k, weight=weight or "packets", time_based=time_based, exact=exact,
            close_after=close, watermark=delay,
        )  # fmt: skip
        write = sys.stdout.write
        for report in reports:
            write(json.dumps(report) + "\n" if fmt == "jsonl" else _table(report))
    except ImportError as exc:
        raise click.ClickException(f"the capture reader is not available: {exc}") from None
    except ValueError as exc:
        name, sep, rest = str(exc).partition(": ")
        raise click.ClickException(f"{_OPTION.get(name, name)}{sep}{rest}") from None
    if q.late:
        click.echo(
            f"netmon: {q.late} late records (more than the watermark delay behind the newest timestamp "
            "before them) dropped",
            err=True,
        )


def _configured(query: TopKQuery, window: str | None, sub_window: str | None) -> tuple[str, str]:
    """The window and sub-window: the options given, else the query's (as nanosecond durations)."""
    n = window or f"{seconds_ns(query.window_s, 'window_s')}ns"
    b = sub_window or f"{seconds_ns(query.sub_window_s, 'sub_window_s')}ns"
    return n, b


def _count(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"expected a number of packets, or a duration such as 10s for event-time windows, got {text!r}",
            param_hint=option,
        ) from None


def _table(report: dict[str, Any]) -> str:
    lines = [f"end {report['end']}  delta {report['delta']}  items {len(report['items'])}"]
    lines += [
        f"  {rank:>3}  {item['count']:>12}  {item['key']}" for rank, item in enumerate(report["items"], 1)
    ]
    return "\n".join(lines) + "\n"
