"""``netmon pipeline``: run the Spark Structured Streaming job.

Exit codes: 0 stopped by Ctrl-C/SIGTERM, or every query done (``--available-now``); 1 a query
failed (the others are stopped first; one line names the query and the cause); 2 no Kafka broker
answers at the bootstrap servers (checked before Spark starts, one line suggesting
``netmon broker start``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import click

from cli.commands.produced import fail
from cli.main import pass_config
from netmon.config import Config

#: how long the broker may take to answer the check before Spark starts
BROKER_CHECK_S = 5.0


@click.command("pipeline")
@click.option("--master", help="Spark master URL (default [spark] master, e.g. local[*], spark://host:7077).")
@click.option("--available-now", is_flag=True, help="Process what Kafka holds now, then exit.")
@click.option("--quiet", is_flag=True, help="No status lines.")
@pass_config
def command(cfg: Config, master: str | None, available_now: bool, quiet: bool) -> None:
    """Read packets from Kafka, compute the windowed results, write Parquet under the data dir."""
    from ingest.producer import sigterm_as_interrupt
    from netmon.results import results_dir

    _check_broker(cfg)
    from pipeline.job import start_pipeline
    from pipeline.session import build_session

    spark = build_session(cfg, "netmon-pipeline", master=master)
    try:
        pipeline = start_pipeline(spark, cfg, available_now=available_now)
    except Exception as exc:  # noqa: BLE001 - a query that cannot start: stop those that did, one line
        _stop_started(spark)
        fail("pipeline", f"the pipeline did not start: {_first_line(exc)}", 1)
    click.echo(
        f"pipeline running on {spark.sparkContext.master}; results in {results_dir(cfg, '').parent}", err=True
    )
    error: str | None = None
    stop_error: str | None = None
    interrupted = False
    try:
        with sigterm_as_interrupt():
            while True:
                time.sleep(2.0)
                stats = pipeline.poll()
                error = pipeline.failed()
                if error or not pipeline.active:
                    break
                if not quiet:
                    st = stats.get("traffic")
                    if st:
                        click.echo(
                            f"batches {st.batches}  packets {st.packets}  malformed {st.malformed}  "
                            f"late {st.late_dropped}  last batch {st.last_batch_ms} ms",
                            err=True,
                        )
    except KeyboardInterrupt:
        interrupted = True
        click.echo("stopping pipeline...", err=True)
    finally:
        try:
            pipeline.stop()
        except Exception as exc:  # noqa: BLE001 - e.g. the JVM got the signal too and stopped first
            stop_error = _first_line(exc)
    if error:
        name, _, cause = error.partition(": ")
        fail("pipeline", f"query {name} failed: {cause}; the other queries were stopped", 1)
    if stop_error and interrupted:
        click.echo(f"netmon pipeline: warning: stopping the queries: {stop_error}", err=True)
    elif stop_error:
        fail("pipeline", f"stopping the queries failed: {stop_error}", 1)


def _check_broker(cfg: Config) -> None:
    """Exit 2 with one line unless a broker answers at the bootstrap servers; create the topic."""
    from kafka.errors import KafkaError

    from netmon.kafka_admin import KafkaUnreachable, check_reachable, ensure_topic

    bootstrap = cfg.kafka.bootstrap
    hint = (
        "start the local broker with `netmon broker start`, or point [kafka] bootstrap_servers "
        "(NETMON_BOOTSTRAP_SERVERS) at a running cluster"
    )
    try:
        check_reachable(bootstrap, timeout_s=BROKER_CHECK_S)
        ensure_topic(bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions, timeout_s=BROKER_CHECK_S * 2)
    except KafkaUnreachable as exc:
        fail("pipeline", f"{exc}: {hint}", 2)
    except (KafkaError, OSError) as exc:
        fail("pipeline", f"Kafka at {bootstrap}: topic {cfg.kafka.packets_topic!r}: {exc}: {hint}", 2)


def _stop_started(spark: Any) -> None:
    for query in spark.streams.active:
        with contextlib.suppress(Exception):  # stopping on the way out: nothing more to do
            query.stop()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
