"""``netmon replay FILE``: replay a capture into the packets topic (:func:`ingest.replay.replay`).

Exit codes: 0 done; 1 broker unavailable or records not acknowledged (one line with the count
acknowledged and the ``--resume RUN_ID`` that continues the replay); 2 bad input (not a capture,
damaged file, bad filter or option); 130 interrupted (after flushing and closing).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, NoReturn

import click

from cli.commands.produced import fail, finish
from cli.main import pass_config
from netmon.config import Config
from netmon.kafka_security import client_options

if TYPE_CHECKING:
    from ingest.replay import ReplaySummary


@click.command("replay")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--topic", help="Topic to produce to (default [kafka] packets_topic).")
@click.option(
    "--bootstrap",
    help="Kafka bootstrap servers (default [kafka] bootstrap_servers; if empty, the local broker at "
    "[kafka] host:port).",
)
@click.option("--speed", type=float, help="Original pacing scaled: 1 = as captured, 10 = ten times faster.")
@click.option("--pps", type=float, help="Fixed rate, packets per second.")
@click.option("--loop", type=int, default=1, show_default=True, help="Replay N times, event time increasing.")
@click.option("--rebase-time", is_flag=True, help="Shift timestamps so the first packet is now.")
@click.option(
    "--start-at",
    metavar="TIME",
    help="Shift timestamps so the first packet is at TIME (ISO-8601, e.g. 2024-05-01T12:00:00Z).",
)
@click.option("--limit", type=int, help="Stop after N records produced.")
@click.option(
    "--filter", "filter_", metavar="EXPR", help='Keep matching records: "proto=tcp and dst_port=80".'
)
@click.option("--iface", help="Value of the iface column (default: from the file).")
@click.option(
    "--records-per-message",
    type=int,
    help="Records per Kafka message (default [ingest] records_per_message).",
)
@click.option("--linger-ms", type=int, help="Producer linger (default [ingest] linger_ms).")
@click.option(
    "--compression",
    type=click.Choice(["lz4", "zstd", "gzip", "snappy", "none"]),
    help="Default [ingest] compression.",
)
@click.option(
    "--close-at-end/--keep-open",
    "close_at_end",
    default=True,
    show_default=True,
    help="--close-at-end (the default) ends with a watermark control message [pipeline] "
    "watermark_s + traffic_window_s past the last record, as netmon demo does: the pipeline then "
    "closes the windows that end by traffic_window_s after it, as netmon analyze does at the end of "
    "a file. --keep-open sends none, for a stream that continues (a later replay, live traffic).",
)
@click.option(
    "--resume",
    metavar="RUN_ID",
    help="Continue the replay with this run id (printed by a failed or interrupted replay): send "
    "only the records its messages in the topic lack. Give the same file and options.",
)
@click.option(
    "--timeout", "timeout_s", type=float, default=10.0, show_default=True, help="Broker answer bound, s."
)
@click.option(
    "--delivery-timeout",
    "delivery_timeout_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Bound on delivering one message, retries included, s; the first message not delivered "
    "ends the replay (exit 1).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary text.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@pass_config
def command(
    cfg: Config,
    file: str,
    topic: str | None,
    bootstrap: str | None,
    speed: float | None,
    pps: float | None,
    loop: int,
    rebase_time: bool,
    start_at: str | None,
    limit: int | None,
    filter_: str | None,
    iface: str | None,
    records_per_message: int | None,
    linger_ms: int | None,
    compression: str | None,
    close_at_end: bool,
    resume: str | None,
    timeout_s: float,
    delivery_timeout_s: float,
    quiet: bool,
    as_json: bool,
) -> None:
    """Replay a pcap/pcapng capture (optionally gzip-compressed) into Kafka."""
    from ingest.errors import CaptureError
    from ingest.generate import parse_start
    from ingest.producer import BrokerUnavailable
    from ingest.replay import ReplayOptions, replay
    from netmon.filters import FilterError

    try:
        options = ReplayOptions(
            speed=speed,
            pps=pps,
            loop=loop,
            rebase_time=rebase_time,
            start_ns=None if start_at is None else parse_start(start_at, "--start-at"),
            limit=limit,
            filter=filter_,
            iface=iface,
            records_per_message=records_per_message or cfg.ingest.records_per_message,
            linger_ms=cfg.ingest.linger_ms if linger_ms is None else linger_ms,
            compression=compression or cfg.ingest.compression,
            close_windows_s=cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s
            if close_at_end
            else None,
            resume=resume,
        )
        summary = replay(
            file,
            bootstrap=bootstrap or cfg.kafka.bootstrap,
            topic=topic or cfg.kafka.packets_topic,
            options=options,
            partitions=cfg.kafka.partitions,
            replication=cfg.kafka.replication_factor,
            min_insync_replicas=cfg.kafka.min_insync_replicas,
            progress=not quiet,
            timeout_s=timeout_s,
            delivery_timeout_s=delivery_timeout_s,
            security=client_options(cfg.kafka),
        )
    except (CaptureError, FilterError, ValueError) as exc:
        _fail(str(exc), 2)
    except BrokerUnavailable as exc:
        _fail(str(exc), 1)
    if summary.broker_error:
        finish_broker_error(summary, file, as_json=as_json, quiet=quiet)
    finish("replay", summary, as_json=as_json, quiet=quiet)


def finish_broker_error(summary: ReplaySummary, file: str, *, as_json: bool, quiet: bool) -> NoReturn:
    """The summary, then one line: the broker's failure, the records acknowledged, how to go on."""
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
    elif not quiet:
        click.echo("\n".join(summary.lines()))
    _fail(
        f"{summary.broker_error}; {summary.acknowledged:,} of {summary.produced:,} records sent were "
        f"acknowledged; continue with: netmon replay {shlex.quote(file)} --resume {summary.run_id} "
        "(and the same options)",
        1,
    )


def _fail(message: str, code: int) -> NoReturn:
    fail("replay", message, code)
