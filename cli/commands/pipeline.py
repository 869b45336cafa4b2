"""``netmon pipeline``: run the Spark Structured Streaming job, or reset a kind's results and state.

Exit codes: 0 stopped by Ctrl-C/SIGTERM, or every query done (``--available-now``), or a reset done;
1 a query failed (the others are stopped first; one line names the query and the cause), another
pipeline runs on the data directory, or a reset was declined; 2 no Kafka broker answers at the
bootstrap servers (checked before Spark starts, one line suggesting ``netmon broker start``).

Ctrl-C or SIGTERM stops the queries after the batch that runs (up to ``pipeline.job.STOP_GRACE_S``);
a second one stops them at once (the cut batch runs again at the next start). A query that died of
a broker outage is started again once the broker answers (docs/reliability.md, section 2).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import click

from cli.commands.produced import fail
from cli.main import pass_config
from netmon.config import RESULT_KINDS, Config, ConfigError

#: how long the broker may take to answer the check before Spark starts
BROKER_CHECK_S = 5.0
#: seconds between two status polls
POLL_S = 2.0

RESET_HELP = (
    "Remove KIND's results and state instead of running, then exit (repeatable; KIND one of "
    f"{', '.join(RESULT_KINDS)}, or all). Asks first unless --yes, and prints what it removes. "
    "traffic/topk/distinct/features/joins: their results and state only; the shared Kafka read keeps "
    "its offsets, so the other kinds are not replayed and KIND starts empty from the next batch on "
    "(windows open at the reset lose their earlier packets; packets read before are not read again "
    "for it); joins brings shedding. shedding: its rows and the controller's fractions go; it "
    "commits again from the next batch with join input. all: everything, from the earliest offsets. "
    "Refused while a pipeline runs on the data directory."
)


@click.command("pipeline")
@click.option("--master", help="Spark master URL (default [spark] master, e.g. local[*], spark://host:7077).")
@click.option("--available-now", is_flag=True, help="Process what Kafka holds now, then exit.")
@click.option("--quiet", is_flag=True, help="No status lines.")
@click.option(
    "--reset",
    "reset",
    multiple=True,
    metavar="KIND",
    type=click.Choice([*RESULT_KINDS, "all"]),
    help=RESET_HELP,
)
@click.option("--yes", is_flag=True, help="With --reset: remove without asking.")
@pass_config
def command(
    cfg: Config, master: str | None, available_now: bool, quiet: bool, reset: tuple[str, ...], yes: bool
) -> None:
    """Read packets from Kafka, compute the windowed results, write Parquet under the data dir.

    Runs until Ctrl-C or SIGTERM (the running batch finishes first; a second Ctrl-C stops at once).
    With --reset KIND it removes that kind's results and state and exits instead (see below and
    docs/reliability.md, "Resetting a kind").
    """
    if reset:
        _reset(cfg, reset, yes)
        return
    from netmon.results import results_dir

    _check_broker(cfg)
    from pipeline.job import PipelineRunning, start_pipeline
    from pipeline.session import build_session

    spark = build_session(cfg, "netmon-pipeline", master=master)
    try:
        pipeline = start_pipeline(spark, cfg, available_now=available_now)
    except PipelineRunning as exc:
        fail("pipeline", str(exc), 1)
    except Exception as exc:  # noqa: BLE001 - a query that cannot start: stop those that did, one line
        _stop_started(spark)
        fail("pipeline", f"the pipeline did not start: {_first_line(exc)}", 1)
    click.echo(
        f"pipeline running on {spark.sparkContext.master}; results in {results_dir(cfg, '').parent}", err=True
    )
    error: str | None = None
    stop_error: str | None = None
    stop = threading.Event()
    with _stop_on_signals(stop):
        try:
            while not stop.wait(POLL_S):
                stats = pipeline.poll()
                error = pipeline.failed()
                if error or not pipeline.active:
                    break
                if not quiet:
                    _status_line(pipeline, stats)
        finally:
            if stop.is_set():
                click.echo("stopping pipeline (after the running batch; Ctrl-C again: at once)...", err=True)
            stop_error = _stop(pipeline)
    if error:
        name, _, cause = error.partition(": ")
        others = "the other queries were stopped" if len(pipeline.queries) > 1 else "the pipeline stopped"
        fail("pipeline", f"query {name} failed: {cause}; {others}", 1)
    if stop_error and stop.is_set():
        click.echo(f"netmon pipeline: warning: stopping the queries: {stop_error}", err=True)
    elif stop_error:
        fail("pipeline", f"stopping the queries failed: {stop_error}", 1)


def _status_line(pipeline: Any, stats: dict[str, Any]) -> None:
    waiting = pipeline.waiting_for_broker
    if waiting:
        click.echo(
            f"waiting for the Kafka broker at {pipeline.cfg.kafka.bootstrap} to restart "
            f"{', '.join(waiting)} from the checkpoint",
            err=True,
        )
        return
    st = stats.get("traffic")
    if st:
        click.echo(
            f"batches {st.batches}  packets {st.packets}  malformed {st.malformed}  "
            f"late {st.late_dropped}  last batch {st.last_batch_ms} ms",
            err=True,
        )


def _stop(pipeline: Any) -> str | None:
    """Stop the pipeline (the running batch first); a second signal meanwhile stops it at once.

    Returns the first line of what went wrong, if anything (e.g. the JVM got SIGTERM too and
    stopped first).
    """
    try:
        try:
            pipeline.stop()
        except KeyboardInterrupt:
            click.echo(
                "stopping now: the running batch is cancelled (it runs again at the next start)", err=True
            )
            pipeline.stop(grace_s=0)
    except Exception as exc:  # noqa: BLE001 - reported in one line by the caller
        return _first_line(exc)
    return None


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set ``stop``; a second one raises ``KeyboardInterrupt``.

    The main loop only waits on ``stop``, so a signal never lands inside a py4j call (which would
    leave the gateway connection with an unread answer). It also replaces PySpark's own SIGINT
    handler, which cancels every Spark job at once: the running batch could not finish.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt(f"signal {signum}")
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _reset(cfg: Config, kinds: tuple[str, ...], yes: bool) -> None:
    """``--reset``: say what goes, ask (unless ``--yes``), remove, say what went."""
    from pipeline.job import PipelineRunning, reset_kinds, reset_plan

    plan = reset_plan(cfg, kinds)
    named = ", ".join(dict.fromkeys(kinds))
    if not plan:
        click.echo(f"netmon pipeline: reset {named}: nothing to remove under {cfg.paths.data_dir}", err=True)
        return
    click.echo(f"netmon pipeline: reset {named} removes:", err=True)
    for path in plan:
        click.echo(f"  {path}", err=True)
    if not yes and not click.confirm("Remove them?", default=False, err=True):
        fail("pipeline", "reset declined; nothing removed", 1)
    try:
        removed = reset_kinds(cfg, kinds)
    except PipelineRunning as exc:
        fail("pipeline", f"reset refused: {exc}", 1)
    for path in removed:
        click.echo(f"removed {path}", err=True)
    click.echo(f"netmon pipeline: reset {named}: done; start the pipeline to compute them again", err=True)


def _check_broker(cfg: Config) -> None:
    """Exit 2 with one line unless a broker answers at the bootstrap servers; create the topic."""
    from kafka.errors import KafkaError

    from netmon.kafka_admin import KafkaUnreachable, TopicReplicationError, check_reachable, ensure_topic
    from netmon.kafka_security import client_options

    bootstrap = cfg.kafka.bootstrap
    hint = (
        "start the local broker with `netmon broker start`, or point [kafka] bootstrap_servers "
        "(NETMON_BOOTSTRAP_SERVERS) at a running cluster"
    )
    try:
        security = client_options(cfg.kafka)
        check_reachable(bootstrap, timeout_s=BROKER_CHECK_S, security=security)
        ensure_topic(
            bootstrap,
            cfg.kafka.packets_topic,
            cfg.kafka.partitions,
            cfg.kafka.replication_factor,
            timeout_s=BROKER_CHECK_S * 2,
            security=security,
            min_insync_replicas=cfg.kafka.min_insync_replicas,
        )
    except ConfigError as exc:
        fail("pipeline", str(exc), 1)
    except TopicReplicationError as exc:
        fail("pipeline", str(exc), 2)
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
