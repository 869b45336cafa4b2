"""``netmon pipeline``: run the Spark Structured Streaming job."""

from __future__ import annotations

import time

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("pipeline")
@click.option("--master", help="Spark master URL (default [spark] master, e.g. local[*], spark://host:7077).")
@click.option("--available-now", is_flag=True, help="Process what Kafka holds now, then exit.")
@click.option("--quiet", is_flag=True, help="No status lines.")
@pass_config
def command(cfg: Config, master: str | None, available_now: bool, quiet: bool) -> None:
    """Read packets from Kafka, compute the windowed results, write Parquet under the data dir."""
    from netmon.kafka_admin import ensure_topic
    from netmon.results import results_dir
    from pipeline.job import start_pipeline
    from pipeline.session import build_session

    ensure_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    spark = build_session(cfg, "netmon-pipeline", master=master)
    pipeline = start_pipeline(spark, cfg, available_now=available_now)
    click.echo(
        f"pipeline running on {spark.sparkContext.master}; results in {results_dir(cfg, '').parent}", err=True
    )
    try:
        while pipeline.active:
            time.sleep(2.0)
            stats = pipeline.poll()
            if not quiet:
                st = stats.get("traffic")
                if st:
                    click.echo(
                        f"batches {st.batches}  packets {st.packets}  malformed {st.malformed}  "
                        f"late {st.late_dropped}  last batch {st.last_batch_ms} ms",
                        err=True,
                    )
        error = pipeline.failed()
        if error:
            raise click.ClickException(f"pipeline query failed: {error}")
    except KeyboardInterrupt:
        click.echo("stopping pipeline...", err=True)
    finally:
        pipeline.stop()
