"""``netmon parse FILE... --out OUT.parquet``: captures to Parquet header records.

Exit codes: 0 done; 2 bad input (not a capture, damaged file: the one-line error names the file,
byte offset and problem; the Parquet file keeps the records read before it).
"""

from __future__ import annotations

import sys

import click


@click.command("parse")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="Parquet file to write.")
@click.option("--iface", help="Value of the iface column for every record (default: from the file).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(files: tuple[str, ...], out: str, iface: str | None, as_json: bool) -> None:
    """Decode pcap/pcapng captures (optionally compressed) into one Parquet file of records."""
    from ingest.errors import CaptureError
    from ingest.readers.parquet import parse_to_parquet

    try:
        report = parse_to_parquet(list(files), out, iface=iface)
    except CaptureError as exc:
        click.echo(f"netmon parse: error: {exc}", err=True)
        sys.exit(2)
    click.echo(report.to_json() if as_json else "\n".join(report.lines()))
