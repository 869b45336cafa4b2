"""``netmon demo``: the whole system on one machine, from a bundled capture to the dashboard.

Broker → topic → Spark pipeline → replay of the sample capture → dashboard. The demo keeps its own
topic (``cli.demo.packets``) and data directory (``<data>/demo``) and resets both at each start,
so a second run shows the same thing as the first.

With ``cluster`` the same runs on the local multi-process cluster (``netmon.cluster``: 3 Kafka
nodes, a Spark standalone master, 2 workers), started for the demo or reused when already up: the
topics get replication factor 3 and the brokers' ``min.insync.replicas`` of 2, and the pipeline's
executors run on the workers.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netmon.config import Config
from netmon.kafka_security import client_options

__all__ = ["DemoSummary", "cluster_config", "demo_config", "resolve_capture", "run_demo"]

#: the size of the cluster ``netmon demo --cluster`` starts when none is up
CLUSTER_BROKERS = 3
CLUSTER_WORKERS = 2

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class DemoSummary:
    packets_replayed: int
    packets_in_results: int
    windows: int
    elapsed_s: float
    dashboard_url: str | None = None

    def line(self) -> str:
        return (
            f"{self.packets_replayed:,} packets replayed, {self.packets_in_results:,} in results, "
            f"{self.windows:,} windows, {self.elapsed_s:.1f} s"
        )


def demo_config(cfg: Config) -> Config:
    return cfg.replace(
        paths={
            "data_dir": Path(cfg.paths.data_dir) / "demo",
            "state_dir": Path(cfg.paths.state_dir) / "demo",
        },
        kafka={"packets_topic": "cli.demo.packets", "results_topic_prefix": "cli.demo."},
    )


def cluster_config(cfg: Config, record: dict[str, Any]) -> Config:
    """``cfg`` pointed at the cluster of ``record`` (``netmon cluster up``): its brokers with
    replicated topics (up to 3 copies, writes on all but one) and its Spark master."""
    factor = min(int(record["brokers"]), 3)
    return cfg.replace(
        kafka={
            "bootstrap_servers": record["bootstrap_servers"],
            "replication_factor": factor,
            "min_insync_replicas": max(1, factor - 1),
        },
        spark={"master": record["master_url"]},
    )


def _start_cluster(cfg: Config) -> tuple[Config, Callable[[], None] | None]:
    """Start the local cluster (or reuse the one up); return the config pointing at it and, when
    the demo started it, how to stop it."""
    from netmon.cluster import LocalCluster

    cluster = LocalCluster(cfg)
    _say(
        f"cluster: starting {CLUSTER_BROKERS} Kafka nodes, a Spark master and {CLUSTER_WORKERS} "
        "workers, or reusing those up (about 40 s)..."
    )
    record, reused = cluster.up(CLUSTER_BROKERS, CLUSTER_WORKERS)
    _say(
        f"cluster: {'reused' if reused else 'up'}: Kafka {record['bootstrap_servers']}, "
        f"Spark {record['master_url']}"
    )

    def stop() -> None:
        _say("cluster: " + "; ".join(cluster.down()))

    return cluster_config(cfg, record), None if reused else stop


def resolve_capture(name: str) -> Path:
    """A capture path as given, else relative to the repository (the bundled samples)."""
    for candidate in (Path(name), REPO_ROOT / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"demo capture not found: {name} (looked in . and {REPO_ROOT})")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _results_totals(cfg: Config) -> tuple[int, int]:
    from netmon.results import read_results, results_dir

    table = read_results(results_dir(cfg, "traffic"), columns=["window_start", "packets"])
    if table is None:
        return 0, 0
    windows = len(set(table.column("window_start").to_pylist()))
    return int(sum(table.column("packets").to_pylist())), windows


def _start_alerts(dcfg: Config) -> Callable[[], None]:
    """The alert service over the demo's result topics, in a child process; returns its stop.

    A process, as ``netmon up`` runs it, not a thread: evaluating the rules is Python per result
    row (a replayed day makes millions of rows the default rules read), and in the demo's own
    interpreter it held the GIL the pipeline's batch functions need (a 2M-packet day took 135 s
    instead of ~80 s). The child runs at a lower CPU priority: on a small machine the pipeline
    comes first and the alerts catch up.
    """
    from netmon.kafka_admin import recreate_topic

    for kind in dcfg.pipeline.kinds:
        recreate_topic(
            dcfg.kafka.bootstrap,
            f"{dcfg.kafka.results_topic_prefix}{kind}",
            dcfg.kafka.partitions,
            dcfg.kafka.replication_factor,
            security=client_options(dcfg.kafka),
        )
    group = f"netmon-alerts-demo-{int(time.time())}"
    context = multiprocessing.get_context("spawn")  # no fork of a process that runs a JVM gateway
    stop = context.Event()
    child = context.Process(
        target=_run_alerts, args=(dcfg, group, stop), name="netmon-demo-alerts", daemon=True
    )
    child.start()

    def stop_alerts() -> None:
        stop.set()
        child.join(15)
        if child.is_alive():
            child.terminate()
            child.join(5)

    return stop_alerts


def _run_alerts(dcfg: Config, group: str, stop: Any) -> None:
    """The demo's alert service (in the child process)."""
    import os

    from alerts.service import AlertService
    from netmon.config import alerts_config

    os.nice(10)
    service = AlertService(dcfg, dataclasses.replace(alerts_config(dcfg), group_id=group))
    service.run(stop)


def _rows_per_kind(cfg: Config) -> dict[str, int]:
    from netmon.results import read_results, results_dir

    out = {}
    for kind in cfg.pipeline.kinds:
        table = read_results(results_dir(cfg, kind))
        out[kind] = 0 if table is None else table.num_rows
    return out


def run_demo(
    cfg: Config,
    *,
    until_done: bool,
    capture: str | None = None,
    dashboard: bool = True,
    timeout_s: float = 600.0,
    speed: float | None = None,
    cluster: bool = False,
) -> DemoSummary:
    """Run the demo; with ``until_done`` return once every replayed packet is in the results.

    With ``cluster`` on the local cluster (started, or reused when up; stopped at the end only if
    the demo started it) instead of the single broker and Spark in the driver's JVM.
    """
    from ingest.replay import ReplayOptions, replay
    from netmon.broker import LocalBroker
    from netmon.kafka_admin import recreate_topic
    from pipeline.job import start_pipeline
    from pipeline.session import build_session

    started = time.monotonic()
    capture_path = resolve_capture(capture or cfg.ingest.demo_capture)
    cluster_stop = None
    if cluster:
        cfg, cluster_stop = _start_cluster(cfg)
    dcfg = demo_config(cfg)
    broker = None
    if not cfg.kafka.bootstrap_servers:
        broker = LocalBroker(cfg)
        was_running = broker.status(with_topics=False).running
        _say(f"broker: {broker.start().line()}")
        if was_running:
            broker = None  # not ours to stop
    recreate_topic(
        dcfg.kafka.bootstrap,
        dcfg.kafka.packets_topic,
        dcfg.kafka.partitions,
        dcfg.kafka.replication_factor,
        security=client_options(dcfg.kafka),
    )
    shutil.rmtree(dcfg.paths.data_dir, ignore_errors=True)
    # The demo's own state (alert outbox, dashboard log); the broker stays in the main state dir.
    shutil.rmtree(dcfg.paths.state_dir, ignore_errors=True)
    alerts_stop = _start_alerts(dcfg) if cfg.alerts.enabled else None

    from pyspark.sql import SparkSession

    _say("pipeline: starting Spark (10-20 s)...")
    own_session = SparkSession.getActiveSession() is None  # e.g. tests share one session
    spark = build_session(dcfg, "netmon-demo")
    pipeline = start_pipeline(spark, dcfg)
    dash = None
    url = None
    try:
        if dashboard and not until_done:
            from dashboard.server import start_background, wait_healthy

            url = f"http://{cfg.dashboard.host}:{cfg.dashboard.port}"
            dash = start_background(dcfg, Path(dcfg.paths.state_dir) / "logs" / "dashboard.log")
            if wait_healthy(url):
                _say(f"dashboard: {url}")
            else:
                _say(f"dashboard did not answer at {url}; see {cfg.paths.state_dir}/logs/dashboard.log")

        _say(f"replay: {capture_path}")
        options = ReplayOptions(
            speed=speed,
            records_per_message=cfg.ingest.records_per_message,
            linger_ms=cfg.ingest.linger_ms,
            compression=cfg.ingest.compression,
            close_windows_s=cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s,
        )
        summary = replay(
            capture_path,
            bootstrap=dcfg.kafka.bootstrap,
            topic=dcfg.kafka.packets_topic,
            options=options,
            partitions=dcfg.kafka.partitions,
            progress=True,
            security=client_options(dcfg.kafka),
        )
        if summary.broker_error:
            # The replay stopped at the first unacknowledged message (netmon replay --resume continues).
            raise RuntimeError(
                f"replay: the broker failed after {summary.acknowledged:,} acknowledged packets: "
                f"{summary.broker_error}"
            )
        expected = int(summary.acknowledged)
        _say(f"replay: {expected:,} packets acknowledged by Kafka; waiting for the pipeline...")
        deadline = time.monotonic() + timeout_s
        packets, windows = 0, 0
        while time.monotonic() < deadline:
            pipeline.poll()
            error = pipeline.failed()
            if error:
                raise RuntimeError(f"pipeline failed: {error}")
            packets, windows = _results_totals(dcfg)
            if packets >= expected:
                break
            time.sleep(1.0)
        if packets != expected:
            raise RuntimeError(
                f"timed out after {timeout_s:.0f}s: {packets:,} of {expected:,} packets in the results"
            )
        # The other kinds read Kafka on their own: let each drain, then one more trigger so
        # windows closed by the final watermark are written.
        pipeline.process_all_available()
        time.sleep(2 * cfg.pipeline.trigger_s)
        pipeline.poll()
        result = DemoSummary(expected, packets, windows, time.monotonic() - started, url)
        _say(result.line())
        _say("results: " + ", ".join(f"{kind} {rows:,} rows" for kind, rows in _rows_per_kind(dcfg).items()))
        if until_done:
            return result
        _say("demo running: Ctrl-C stops everything")
        while True:
            time.sleep(2.0)
            pipeline.poll()
    except KeyboardInterrupt:
        _say("stopping...")
        return DemoSummary(0, *_results_totals(dcfg), time.monotonic() - started, url)
    finally:
        if alerts_stop is not None:
            alerts_stop()
        pipeline.stop()
        if own_session:
            # State-store maintenance threads log a stack trace when the context stops under them.
            spark.sparkContext.setLogLevel("OFF")
            spark.stop()
        if dash is not None:
            dash.terminate()
            dash.wait(10)
        if broker is not None:
            _say(f"broker: {broker.stop()}")
        if cluster_stop is not None:
            cluster_stop()
