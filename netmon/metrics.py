"""Prometheus metrics on ``/metrics``, collected from the files the services already write.

:class:`NetmonCollector` reads, at each scrape:

- the pipeline's status file (``<data>/status/pipeline.json``, written by ``pipeline.job`` at
  each poll): per query kind, records in, packets decoded, malformed, future-dated and late rows,
  batches, the last batch's duration and the state rows;
- the pipeline's lag: the packets topic's end offsets (asked of Kafka, cached for a few seconds)
  minus the offsets of the last batch the shared query committed (its Spark checkpoint,
  ``<data>/checkpoints/packets/``);
- the supervisor's state file (``netmon up``; :mod:`netmon.supervisor`): each service's up/down
  state, uptime and restarts;
- each capture's status file ``<data>/status/capture-<iface>.json`` when there is one (the fields
  of ``ingest.capture.CaptureSummary``): frames captured, records produced, acknowledged and
  failed, and kernel drops per interface;
- the newest row of each query in the ``sys`` results (``<data>/results/sys/<query>/``, one row
  per micro-batch, ``pipeline.sys_stats``): how far the batch's trigger was behind the newest
  event time it read (``lag_s``) and the time the Kafka messages left behind would take at the
  batch's processing rate (``backlog_s``);
- optionally, alert counts given by a callable (the alert outbox is read above this floor).

A histogram of batch durations needs every batch: :meth:`NetmonCollector.observe` folds the newest
one in whenever the batch count moved, so batches that ran between two observations are missed
(``netmon up`` observes once per second; a trigger is 1 s by default). The end-to-end latency
histogram gets every batch: :meth:`NetmonCollector.observe` folds in each ``sys`` row committed
since the last call — per query, the batch's ``lag_s`` plus its duration, i.e. the time from the
newest packet it read (its event time: when a live capture saw it) to the end of the batch that
committed its results. The first call only sets the mark (history is not folded in); a query's
``sys`` sink that appears later is folded in from its first batch.

:func:`serve` starts prometheus_client's HTTP server on ``[metrics] host:port`` (127.0.0.1 by default).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from netmon.config import Config
from netmon.recent_results import newest_rows, newest_rows_by_sink
from netmon.results import SHARED_QUERY, checkpoint_dir, results_dir, status_file
from netmon.supervisor import read_state
from netmon.supervisor import state_file as supervisor_state_file

__all__ = [
    "BATCH_BUCKETS_S",
    "LATENCY_BUCKETS_S",
    "MetricsServer",
    "NetmonCollector",
    "checkpoint_offsets",
    "pipeline_lag",
    "serve",
]

log = logging.getLogger(__name__)

#: buckets of ``netmon_pipeline_batch_duration_seconds``
BATCH_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: buckets of ``netmon_pipeline_latency_seconds``
LATENCY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: the ``sys`` result kind (``pipeline.sys_stats``): one row per micro-batch of each query
_SYS_KIND = "sys"
#: a span longer than any history: a sink's every row
_ALL_S = 1e9
#: how far the driver's clock (``batch_time``) may be ahead of this one's
_CLOCK_SKEW_S = 5.0
#: counters of the pipeline's status file, per kind: status key -> (metric name, help)
_QUERY_COUNTERS = {
    "input_rows": ("netmon_query_input_rows", "Kafka records read by the query"),
    "packets": ("netmon_pipeline_packets", "Packet records decoded"),
    "malformed": ("netmon_pipeline_malformed", "Records that did not decode"),
    "future": ("netmon_pipeline_future", "Records dropped for an event time too far ahead"),
    "late_dropped": ("netmon_query_late_rows", "Rows dropped as later than the watermark"),
    "batches": ("netmon_query_batches", "Micro-batches run"),
    "restarts": ("netmon_query_restarts", "Restarts of the query after a broker outage"),
}
_CAPTURE_COUNTERS = {
    "packets": ("netmon_capture_packets", "Frames captured (after the kernel filter)"),
    "produced": ("netmon_capture_produced", "Records produced to Kafka"),
    "acknowledged": ("netmon_capture_acknowledged", "Records acknowledged by Kafka"),
    "failed": ("netmon_capture_failed", "Records Kafka did not acknowledge"),
    "filtered_out": ("netmon_capture_filtered_out", "Records left out by the field filter"),
    "kernel_drops": ("netmon_capture_kernel_drops", "Frames the kernel dropped (receive buffer full)"),
}


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def checkpoint_offsets(checkpoint: Path) -> dict[str, dict[int, int]] | None:
    """The Kafka offsets up to which the query of ``checkpoint`` committed: topic -> partition -> offset.

    Spark writes ``offsets/<batch>`` (``v1``, the batch metadata, then one JSON line per source)
    before a batch and ``commits/<batch>`` once it is done; the newest batch with both is read.
    None before the first commit.
    """
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    batches = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    for batch in batches:
        try:
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        except OSError:
            continue
        out: dict[str, dict[int, int]] = {}
        for line in lines[2:]:
            if line.strip().startswith("{"):
                for topic, parts in json.loads(line).items():
                    out[topic] = {int(p): int(o) for p, o in parts.items()}
        return out
    return None


def pipeline_lag(cfg: Config, *, timeout_s: float = 5.0) -> int | None:
    """Records of the packets topic the pipeline has not committed yet (None: unknown).

    Unknown before the first committed batch, or when Kafka does not answer within ``timeout_s``.
    """
    committed = checkpoint_offsets(checkpoint_dir(cfg, SHARED_QUERY))
    topic = cfg.kafka.packets_topic
    if committed is None or topic not in committed:
        return None
    from kafka import KafkaConsumer, TopicPartition

    from netmon.kafka_security import client_options

    try:
        consumer = KafkaConsumer(
            bootstrap_servers=cfg.kafka.bootstrap,
            client_id="netmon-metrics",
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=max(int(timeout_s * 1000), 5000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
            **client_options(cfg.kafka),
        )
    except Exception as exc:  # noqa: BLE001 - a scrape reports the lag as unknown, never fails
        log.debug("lag: no Kafka", extra={"error": repr(exc)})
        return None
    try:
        partitions = consumer.partitions_for_topic(topic) or set(committed[topic])
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        ends = consumer.end_offsets(tps)
        return sum(max(0, ends[tp] - committed[topic].get(tp.partition, 0)) for tp in tps)
    except Exception as exc:  # noqa: BLE001 - as above
        log.debug("lag: end offsets unknown", extra={"error": repr(exc)})
        return None
    finally:
        consumer.close()


class NetmonCollector(Collector):
    """Every netmon metric, read from the status files at each scrape (see the module's doc).

    Parameters
    ----------
    cfg
        The configuration whose data and state directories hold the status files.
    alert_counts
        Returns the alert outbox's counts (``alerts.outbox.Outbox.counts``), or None.
    lag_ttl_s
        How long a lag asked of Kafka is reused.
    """

    def __init__(
        self,
        cfg: Config,
        *,
        alert_counts: Callable[[], Mapping[str, int] | None] | None = None,
        lag_ttl_s: float = 5.0,
    ) -> None:
        self.cfg = cfg
        self.alert_counts = alert_counts
        self.lag_ttl_s = lag_ttl_s
        self._lag: tuple[float, int | None] = (float("-inf"), None)
        self._lag_lock = threading.Lock()
        self.batch_duration = Histogram(
            "netmon_pipeline_batch_duration_seconds",
            "Duration of the shared query's micro-batches (sampled at each observe())",
            registry=None,
            buckets=BATCH_BUCKETS_S,
        )
        self._seen_batches: int | None = None
        self.latency = Histogram(
            "netmon_pipeline_latency_seconds",
            "Per micro-batch: from the newest event time it read to the batch's end (lag_s + its duration)",
            labelnames=["query"],
            registry=None,
            buckets=LATENCY_BUCKETS_S,
        )
        #: per sys sink (query): the batch id and time of the newest row folded into ``latency``
        self._sys_seen: dict[str, tuple[int, dt.datetime]] | None = None

    # -- sampled observations ----------------------------------------------------------------------

    def observe(self) -> None:
        """Fold the newest batch's duration into its histogram if a batch ran since the last call,
        and each ``sys`` row committed since into the latency histogram."""
        self._observe_latency()
        status = _json(status_file(self.cfg)) or {}
        traffic = (status.get("queries") or {}).get("traffic") or next(
            iter((status.get("queries") or {}).values()), None
        )
        if not traffic:
            return
        batches = int(traffic.get("batches") or 0)
        if self._seen_batches is not None and batches > self._seen_batches:
            self.batch_duration.observe(int(traffic.get("last_batch_ms") or 0) / 1000)
        self._seen_batches = batches

    def _observe_latency(self) -> None:
        root = results_dir(self.cfg, _SYS_KIND)
        try:
            newest = newest_rows_by_sink(root, 0.0)
        except (OSError, ValueError) as exc:  # a sink being reset: the next call sees it again
            log.debug("latency: sys rows unreadable", extra={"error": repr(exc)})
            return
        first, seen = self._sys_seen is None, self._sys_seen or {}
        self._sys_seen = seen
        for query, rows in newest.items():
            top = max(rows, key=lambda r: int(r["batch_id"]))
            mark = seen.get(query)
            if first:
                seen[query] = (int(top["batch_id"]), top["batch_time"])
                continue
            if mark is not None and int(top["batch_id"]) == mark[0]:
                continue
            if mark is None or int(top["batch_id"]) < mark[0]:
                # a sink that appeared since the first call, or that started over (a reset)
                span_s, after = _ALL_S, -1
            else:
                # back to the mark from the newest row, which may be newer than ``top`` by now
                # (it is not after the wall clock, give or take the driver's clock)
                end = max(time.time(), top["batch_time"].timestamp())
                span_s, after = end - mark[1].timestamp() + _CLOCK_SKEW_S, mark[0]
            try:
                rows = newest_rows(root / query, span_s)
            except (OSError, ValueError) as exc:
                log.debug("latency: sys rows unreadable", extra={"error": repr(exc)})
                continue
            new = sorted((r for r in rows if int(r["batch_id"]) > after), key=lambda r: int(r["batch_id"]))
            for row in new:
                latency = _latency_s(row)
                if latency is not None:
                    self.latency.labels(query).observe(latency)
            if new:
                seen[query] = (int(new[-1]["batch_id"]), new[-1]["batch_time"])

    def lag(self) -> int | None:
        with self._lag_lock:
            at, value = self._lag
            if time.monotonic() - at >= self.lag_ttl_s:
                value = pipeline_lag(self.cfg)
                self._lag = (time.monotonic(), value)
            return value

    # -- collect -----------------------------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the files: collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        yield from self._pipeline()
        yield from self._services()
        yield from self._captures()
        yield from self._alerts()
        yield from self._sys()
        yield from self.batch_duration.collect()
        yield from self.latency.collect()

    def _pipeline(self) -> Iterator[Metric]:
        status = _json(status_file(self.cfg))
        queries: dict[str, Any] = (status or {}).get("queries") or {}
        counters = {
            key: CounterMetricFamily(name, text, labels=["query"])
            for key, (name, text) in _QUERY_COUNTERS.items()
        }
        active = GaugeMetricFamily("netmon_query_active", "1 while the query runs", labels=["query"])
        state = GaugeMetricFamily("netmon_query_state_rows", "Rows in the query's state", labels=["query"])
        last = GaugeMetricFamily(
            "netmon_query_last_batch_seconds", "Duration of the query's last batch", labels=["query"]
        )
        for name, st in sorted(queries.items()):
            for key, family in counters.items():
                family.add_metric([name], float(st.get(key) or 0))
            active.add_metric([name], 1.0 if st.get("active") else 0.0)
            state.add_metric([name], float(st.get("state_rows") or 0))
            last.add_metric([name], float(st.get("last_batch_ms") or 0) / 1000)
        yield from counters.values()
        yield from (active, state, last)
        if status is not None:
            yield GaugeMetricFamily(
                "netmon_pipeline_status_age_seconds",
                "Seconds since the pipeline last wrote its status",
                value=max(0.0, time.time() - float(status.get("updated") or 0)),
            )
        lag = self.lag()
        if lag is not None:
            yield GaugeMetricFamily(
                "netmon_pipeline_lag_records",
                "Records of the packets topic not yet committed by the pipeline",
                value=float(lag),
            )

    def _sys(self) -> Iterator[Metric]:
        """Each query's newest ``sys`` row: its lag and backlog in seconds (absent while unknown)."""
        try:
            newest = newest_rows_by_sink(results_dir(self.cfg, _SYS_KIND), 0.0)
        except (OSError, ValueError) as exc:  # a scrape never fails on the results
            log.debug("sys: rows unreadable", extra={"error": repr(exc)})
            return
        if not newest:
            return
        lag = GaugeMetricFamily(
            "netmon_pipeline_lag_seconds",
            "Newest micro-batch: its trigger time minus the newest event time it read",
            labels=["query"],
        )
        backlog = GaugeMetricFamily(
            "netmon_pipeline_backlog_seconds",
            "Newest micro-batch: the Kafka messages left behind over its processing rate",
            labels=["query"],
        )
        for query, rows in sorted(newest.items()):
            top = max(rows, key=lambda r: int(r["batch_id"]))
            if top.get("lag_s") is not None:
                lag.add_metric([query], float(top["lag_s"]))
            if top.get("backlog_s") is not None:
                backlog.add_metric([query], float(top["backlog_s"]))
        yield from (lag, backlog)

    def _services(self) -> Iterator[Metric]:
        state = read_state(supervisor_state_file(self.cfg))
        if state is None:
            return
        up = GaugeMetricFamily("netmon_service_up", "1 while the service's process runs", labels=["service"])
        restarts = CounterMetricFamily(
            "netmon_service_restarts", "Restarts of the service by netmon up", labels=["service"]
        )
        uptime = GaugeMetricFamily(
            "netmon_service_uptime_seconds", "Seconds since the service's process started", labels=["service"]
        )
        now = time.time()
        for s in state.get("services") or []:
            name = str(s.get("name"))
            running = s.get("state") in ("running", "reused")
            up.add_metric([name], 1.0 if running else 0.0)
            restarts.add_metric([name], float(s.get("restarts") or 0))
            started = s.get("started")
            uptime.add_metric([name], max(0.0, now - float(started)) if started else 0.0)
        yield from (up, restarts, uptime)

    def _captures(self) -> Iterator[Metric]:
        files = sorted((status_file(self.cfg).parent).glob("capture-*.json"))
        if not files:
            return
        families = {
            key: CounterMetricFamily(name, text, labels=["iface"])
            for key, (name, text) in _CAPTURE_COUNTERS.items()
        }
        for path in files:
            summary = _json(path)
            if summary is None:
                continue
            iface = str(summary.get("iface") or path.stem.removeprefix("capture-"))
            for key, family in families.items():
                family.add_metric([iface], float(summary.get(key) or 0))
        yield from families.values()

    def _alerts(self) -> Iterator[Metric]:
        if self.alert_counts is None:
            return
        try:
            counts = self.alert_counts()
        except Exception as exc:  # noqa: BLE001 - a scrape never fails on the outbox
            log.debug("alerts: no counts", extra={"error": str(exc)})
            return
        if not counts:
            return
        episodes = GaugeMetricFamily(
            "netmon_alerts", "Alert episodes in the outbox, by status", labels=["status"]
        )
        for status in ("firing", "resolved"):
            episodes.add_metric([status], float(counts.get(status, 0)))
        deliveries = GaugeMetricFamily(
            "netmon_alert_deliveries", "Webhook deliveries in the outbox, by state", labels=["state"]
        )
        for state in ("pending", "delivered", "dead"):
            deliveries.add_metric([state], float(counts.get(state, 0)))
        yield from (episodes, deliveries)


def _latency_s(row: Mapping[str, Any]) -> float | None:
    """A ``sys`` row's end-to-end latency: ``lag_s`` plus the batch's duration (None: unknown)."""
    if row.get("lag_s") is None or row.get("batch_ms") is None:
        return None
    return float(row["lag_s"]) + int(row["batch_ms"]) / 1000


class MetricsServer:
    """prometheus_client's HTTP server over one :class:`NetmonCollector`; :meth:`close` stops it."""

    def __init__(self, collector: NetmonCollector, host: str, port: int) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host, self.port = host, port
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


def serve(
    cfg: Config, *, alert_counts: Callable[[], Mapping[str, int] | None] | None = None
) -> MetricsServer:
    """Serve ``/metrics`` on ``[metrics] host:port`` in a background thread."""
    collector = NetmonCollector(cfg, alert_counts=alert_counts)
    return MetricsServer(collector, cfg.metrics.host, cfg.metrics.port)
