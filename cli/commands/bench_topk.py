"""``netmon bench topk`` / ``topk-offline``: the command line of :mod:`bench.topk`.

``topk`` measures packets/s, state and per-window accuracy of the sub-window top-k (Algorithm 6)
in Spark against Spark's exact sliding window and its ``approx_top_k`` at equal memory;
``topk-offline`` the wall time and peak memory of ``netmon analyze topk`` against
``tshark -z endpoints,ip`` on one capture. The options here, the measuring in :mod:`bench.topk`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from bench.topk import bench_topk, bench_topk_offline, format_offline_report, format_report
from netmon.config import Config

__all__ = ["command", "offline_command"]


@click.command("topk")
@click.option("--packets", type=int, default=4_000_000, show_default=True, help="Generated capture's size.")
@click.option("--duration", "duration_s", type=float, default=600.0, show_default=True, help="Its span, s.")
@click.option("--sub-window", "sub_window_s", type=float, default=5.0, show_default=True, help="b, seconds.")
@click.option("--ratio", type=int, default=60, show_default=True, help="N/b: sub-windows per window.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Top-k list length per sub-window.")
@click.option("--key", default="src_ip", show_default=True, help="Record field(s) of the key.")
@click.option("--files", type=int, default=4, show_default=True, help="Input files = micro-batches.")
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Use this capture.")
@click.option("--shuffle-partitions", type=int, help="Override [spark] shuffle_partitions.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark SQL option (repeatable).")
@click.option(
    "--approx/--no-approx", default=True, show_default=True, help="Also Spark's approx_top_k contenders."
)
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.pass_obj
def command(cfg: Config, as_json: bool, file_: str | None, conf: tuple[str, ...], **options: Any) -> None:
    """Packets/s and accuracy of the sub-window top-k in Spark vs Spark's exact and approximate top-k."""
    pairs = dict(item.partition("=")[::2] for item in conf)
    if any(not key or not value for key, value in pairs.items()):
        raise click.BadParameter("expected KEY=VALUE", param_hint="--conf")
    try:
        result = bench_topk(
            cfg, capture=file_, conf=pairs, say=lambda line: click.echo(line, err=True), **options
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (Spark, file)
        click.echo(f"netmon bench topk: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))


@click.command("topk-offline")
@click.option("--packets", type=int, default=1_000_000, show_default=True, help="Generated capture's size.")
@click.option("--duration", "duration_s", type=float, default=60.0, show_default=True, help="Its span, s.")
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Use this capture.")
@click.option("--key", default="src_ip", show_default=True, help="Key of netmon analyze topk.")
@click.option("--window", default="10s", show_default=True, help="N of netmon analyze topk (time-based).")
@click.option("--sub-window", "sub_window", default="1s", show_default=True, help="b (time-based).")
@click.option("-k", "k", type=int, default=10, show_default=True, help="k of netmon analyze topk.")
@click.option("--repeat", type=int, default=3, show_default=True, help="Runs of each, alternating.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
def offline_command(as_json: bool, file_: str | None, **options: Any) -> None:
    """Wall time and peak memory of `netmon analyze topk` vs `tshark -z endpoints,ip`, same capture."""
    try:
        result = bench_topk_offline(capture=file_, say=lambda line: click.echo(line, err=True), **options)
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (a child, the file)
        click.echo(f"netmon bench topk-offline: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_offline_report(result)))
