"""``netmon analyze topk FILE``: Golab's Algorithm 6 over a capture's records, one report per line."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

#: Library parameter names -> the options that set them, for error messages.
_OPTION = {"N": "--window", "b": "--sub-window", "k": "-k", "key": "--key", "weight": "--weight"}


@click.command("topk")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--key", required=True, help="Record field(s): src_ip, dst_ip, 'src_ip,dst_ip', 'proto,dst_port'."
)
@click.option("--weight", type=click.Choice(["packets", "bytes"]), default="packets", show_default=True)
@click.option(
    "--window", "window", required=True, help="N: packets, or a duration (10s, 500ms, 1m) with --time-based."
)
@click.option(
    "--sub-window", "sub_window", required=True, help="b: packets, or a duration with --time-based."
)
@click.option("-k", "k", type=int, required=True, help="Length of each sub-window's top-k list.")
@click.option("--time-based", is_flag=True, help="Event-time windows; sub-windows aligned to multiples of b.")
@click.option("--exact", is_flag=True, help="Exact oracle: every item truly above delta, with true counts.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
def command(
    file: str,
    key: str,
    weight: str,
    window: str,
    sub_window: str,
    k: int,
    time_based: bool,
    exact: bool,
    fmt: str,
) -> None:
    """Sliding-window heavy hitters of FILE (pcap, pcapng, .gz): one report per closed sub-window.

    JSON lines {"end", "delta", "items": [{"key", "count"}]}; "end" is the number of records counted
    (count-based) or the window's end time in ISO-8601 UTC (time-based). See docs/topk.md.
    """
    from analytics.topk_offline import read_topk

    try:
        n = window if time_based else _count("--window", window)
        b = sub_window if time_based else _count("--sub-window", sub_window)
        query, reports = read_topk(
            file, key=key, N=n, b=b, k=k, weight=weight, time_based=time_based, exact=exact
        )
        write = sys.stdout.write
        for report in reports:
            write(json.dumps(report) + "\n" if fmt == "jsonl" else _table(report))
    except ImportError as exc:
        raise click.ClickException(f"the capture reader is not available: {exc}") from None
    except ValueError as exc:
        name, sep, rest = str(exc).partition(": ")
        raise click.ClickException(f"{_OPTION.get(name, name)}{sep}{rest}") from None
    if query.late:
        click.echo(
            f"netmon: {query.late} late records (timestamps before a closed sub-window) dropped", err=True
        )


def _count(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"a count-based window is a number of packets, got {text!r}", param_hint=option
        ) from None


def _table(report: dict[str, Any]) -> str:
    lines = [f"end {report['end']}  delta {report['delta']}  items {len(report['items'])}"]
    lines += [
        f"  {rank:>3}  {item['count']:>12}  {item['key']}" for rank, item in enumerate(report["items"], 1)
    ]
    return "\n".join(lines) + "\n"
