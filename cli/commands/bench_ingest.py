"""``netmon bench ingest``: the command line of :mod:`bench.ingest`.

Measures parse and replay rates on one capture: our reader against Scapy's full dissection, and
replay into a real Kafka broker against one message per packet. The options here, the measuring
in :mod:`bench.ingest` (imported on use: it pulls in the producer).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

__all__ = ["command"]


@click.command("ingest")
@click.option(
    "--packets", type=int, default=1_000_000, show_default=True, help="Size of the generated capture."
)
@click.option(
    "--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Use this capture instead."
)
@click.option("--bootstrap", help="Replay into this Kafka (default: a temporary local broker).")
@click.option("--scapy-packets", type=int, default=20_000, show_default=True, help="Packets Scapy dissects.")
@click.option(
    "--baseline-packets", type=int, default=20_000, show_default=True, help="Per-packet baseline size."
)
@click.option("--records-per-message", type=int, default=1000, show_default=True)
@click.option("--linger-ms", type=int, default=20, show_default=True)
@click.option(
    "--compression", type=click.Choice(["lz4", "zstd", "gzip", "none"]), default="lz4", show_default=True
)
@click.option("--tune", is_flag=True, help="Also replay over a grid of batching/compression settings.")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
def command(
    file_: str | None,
    records_per_message: int,
    linger_ms: int,
    compression: str,
    as_json: bool,
    **options: Any,
) -> None:
    """Parse packets/s vs Scapy's full dissection, and replay packets/s into a real broker."""
    from bench.ingest import ReplaySettings, bench_ingest, format_report

    try:
        result = bench_ingest(
            file=file_,
            settings=ReplaySettings(records_per_message, linger_ms, compression),
            say=lambda line: click.echo(line, err=True),
            **options,
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (broker, file, replay)
        click.echo(f"netmon bench ingest: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
