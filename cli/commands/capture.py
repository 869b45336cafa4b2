"""``netmon capture --iface IF``: live capture into the packets topic (:func:`ingest.capture.capture`).

Exit codes: 0 done; 1 broker unavailable or records not acknowledged; 2 cannot capture (no
root/CAP_NET_RAW, unknown interface, bad BPF or filter); 130 interrupted (after flushing).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from cli.commands.produced import fail, finish
from cli.main import pass_config
from netmon.config import Config
from netmon.kafka_security import client_options


@click.command("capture")
@click.option("--iface", help="Interface to capture on (see --list-ifaces).")
@click.option(
    "--bpf",
    metavar="EXPR",
    help='Kernel filter, tcpdump syntax: "tcp port 80" (needs libpcap; make setup installs it).',
)
@click.option("--filter", "filter_", metavar="EXPR", help='netmon field filter on records: "proto=udp".')
@click.option("--count", type=int, help="Stop after N packets.")
@click.option("--duration", "duration_s", type=float, help="Stop after S seconds.")
@click.option("--write-pcap", type=click.Path(dir_okay=False), help="Also write the frames to this pcap.")
@click.option("--topic", help="Topic to produce to (default [kafka] packets_topic).")
@click.option(
    "--bootstrap",
    help="Kafka bootstrap servers (default [kafka] bootstrap_servers; if empty, the local broker at "
    "[kafka] host:port).",
)
@click.option("--list-ifaces", is_flag=True, help="List the interfaces and exit.")
@click.option(
    "--timeout", "timeout_s", type=float, default=10.0, show_default=True, help="Broker answer bound, s."
)
@click.option("-q", "--quiet", is_flag=True, help="No status line and no summary text.")
@click.option(
    "--status-file",
    type=click.Path(dir_okay=False),
    help="Keep the running summary in this JSON file, about once a second, instead of the status "
    "line (netmon up, /metrics).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@pass_config
def command(
    cfg: Config,
    iface: str | None,
    bpf: str | None,
    filter_: str | None,
    count: int | None,
    duration_s: float | None,
    write_pcap: str | None,
    topic: str | None,
    bootstrap: str | None,
    list_ifaces: bool,
    timeout_s: float,
    quiet: bool,
    status_file: str | None,
    as_json: bool,
) -> None:
    """Capture packet headers live (Scapy raw socket, no dissection) and produce them to Kafka."""
    from ingest.capture import CaptureOptions, LiveCaptureError, capture, list_interfaces
    from ingest.producer import BrokerUnavailable
    from netmon.filters import FilterError

    if list_ifaces:
        for interface in list_interfaces():
            click.echo(interface.line())
        return
    if not iface:
        _fail("--iface is required (see --list-ifaces)", 2)
    try:
        options = CaptureOptions(
            iface=iface,
            bpf=bpf,
            filter=filter_,
            count=count,
            duration_s=duration_s,
            write_pcap=write_pcap,
            records_per_message=cfg.ingest.records_per_message,
            linger_ms=cfg.ingest.linger_ms,
            compression=cfg.ingest.compression,
        )
        summary = capture(
            bootstrap=bootstrap or cfg.kafka.bootstrap,
            topic=topic or cfg.kafka.packets_topic,
            options=options,
            partitions=cfg.kafka.partitions,
            replication=cfg.kafka.replication_factor,
            min_insync_replicas=cfg.kafka.min_insync_replicas,
            status=_status_writer(status_file) if status_file else not quiet,
            timeout_s=timeout_s,
            security=client_options(cfg.kafka),
        )
    except (LiveCaptureError, FilterError, ValueError) as exc:
        _fail(str(exc), 2)
    except BrokerUnavailable as exc:
        _fail(str(exc), 1)
    if status_file:
        _status_writer(status_file, every_s=0.0)(summary)  # the final summary
    finish("capture", summary, as_json=as_json, quiet=quiet)


def _status_writer(path: str, *, every_s: float = 1.0) -> Callable[[Any], None]:
    """A ``status`` callable for :func:`ingest.capture.capture` that keeps ``path`` current.

    Written whole (temp file, then rename) at most once every ``every_s``, so a reader
    (``netmon.metrics``) never sees half a file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    last = -float("inf")

    def write(summary: Any) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < every_s:
            return
        last = now
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(summary.to_dict()))
        tmp.replace(target)

    return write


def _fail(message: str, code: int) -> NoReturn:
    fail("capture", message, code)
