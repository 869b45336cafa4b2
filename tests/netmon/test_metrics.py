"""``/metrics``: served over HTTP on 127.0.0.1, values read from the services' status files, the
pipeline's lag against the real broker's end offsets."""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from netmon.config import Config, ConfigError
from netmon.config.services import MetricsConfig
from netmon.metrics import NetmonCollector, checkpoint_offsets, pipeline_lag, serve
from netmon.results import checkpoint_dir, status_file
from netmon.supervisor import Service, Supervisor
from tests.conftest import free_port


def _cfg(base: Config, tmp_path: Path, **kafka: object) -> Config:
    return base.replace(
        paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"},
        metrics={"port": free_port()},
        kafka=kafka,
    )


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _write_status(cfg: Config, **traffic: Any) -> None:
    from pipeline.job import QueryStats  # the status file's own record

    stats = {"traffic": vars(QueryStats(**traffic)) | {"active": True}}
    path = status_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"updated": time.time() - 2, "queries": stats}))


def test_metrics_are_served_from_the_status_files(netmon_config: Config, tmp_path: Path) -> None:
    from ingest.capture import CaptureSummary

    cfg = _cfg(netmon_config, tmp_path)
    _write_status(cfg, input_rows=40, packets=1234, malformed=2, late_dropped=5, batches=7, state_rows=11)
    capture = CaptureSummary(
        iface="lo", topic="t", packets=900, produced=880, acknowledged=870, kernel_drops=3
    )
    status_file(cfg).with_name("capture-lo.json").write_text(json.dumps(capture.to_dict()))
    sleeper = Service("pipeline", (sys.executable, "-c", "import time; time.sleep(60)"))
    sup = Supervisor.from_config(cfg, [sleeper])
    sup.start()
    sup.children[0].state.restarts = 2  # as after two deaths
    sup.write_state()
    server = serve(cfg, alert_counts=lambda: {"firing": 1, "resolved": 4, "delivered": 6, "dead": 1})
    try:
        assert server.url == f"http://127.0.0.1:{cfg.metrics.port}/metrics"
        m = _scrape(server.url)
    finally:
        server.close()
        sup.stop()
    q = (("query", "traffic"),)
    assert m[("netmon_pipeline_packets_total", q)] == 1234
    assert m[("netmon_query_input_rows_total", q)] == 40
    assert m[("netmon_pipeline_malformed_total", q)] == 2
    assert m[("netmon_query_late_rows_total", q)] == 5
    assert m[("netmon_query_batches_total", q)] == 7
    assert m[("netmon_query_state_rows", q)] == 11
    assert m[("netmon_query_active", q)] == 1
    assert 2 <= m[("netmon_pipeline_status_age_seconds", ())] < 30
    s = (("service", "pipeline"),)
    assert m[("netmon_service_up", s)] == 1
    assert m[("netmon_service_restarts_total", s)] == 2
    assert 0 <= m[("netmon_service_uptime_seconds", s)] < 60
    i = (("iface", "lo"),)
    assert m[("netmon_capture_packets_total", i)] == 900
    assert m[("netmon_capture_acknowledged_total", i)] == 870
    assert m[("netmon_capture_kernel_drops_total", i)] == 3
    assert m[("netmon_alerts", (("status", "firing"),))] == 1
    assert m[("netmon_alert_deliveries", (("state", "dead"),))] == 1
    # no checkpoint yet: the lag is unknown, so absent rather than a made-up 0
    assert not any(name == "netmon_pipeline_lag_records" for name, _ in m)


def test_batch_durations_fold_into_the_histogram_when_a_batch_ran(
    netmon_config: Config, tmp_path: Path
) -> None:
    cfg = _cfg(netmon_config, tmp_path)
    collector = NetmonCollector(cfg)
    _write_status(cfg, batches=3, last_batch_ms=300)
    collector.observe()  # the first look only sets the mark
    collector.observe()  # no new batch
    _write_status(cfg, batches=4, last_batch_ms=700)
    collector.observe()
    _write_status(cfg, batches=6, last_batch_ms=30)
    collector.observe()
    samples = {
        (s.name, s.labels.get("le")): s.value for f in collector.batch_duration.collect() for s in f.samples
    }
    assert samples[("netmon_pipeline_batch_duration_seconds_count", None)] == 2
    assert samples[("netmon_pipeline_batch_duration_seconds_sum", None)] == pytest.approx(0.73)
    assert samples[("netmon_pipeline_batch_duration_seconds_bucket", "0.05")] == 1
    assert samples[("netmon_pipeline_batch_duration_seconds_bucket", "0.5")] == 1
    assert samples[("netmon_pipeline_batch_duration_seconds_bucket", "1.0")] == 2


@pytest.mark.kafka
def test_lag_is_the_topic_end_minus_the_last_committed_batch(
    netmon_config: Config, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from kafka import KafkaProducer

    from netmon.kafka_admin import ensure_topic

    topic = f"test.metrics.lag.{time.time_ns()}"
    cfg = _cfg(netmon_config, tmp_path, packets_topic=topic)
    ensure_topic(kafka_bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(10):
        producer.send(topic, b"x", partition=i % 2)
    producer.flush()
    producer.close()
    assert pipeline_lag(cfg) is None  # no checkpoint: unknown
    # Spark's checkpoint layout: offsets/<batch> = version, batch metadata, one line per source;
    # commits/<batch> once the batch is done. Batch 1 has offsets but did not commit.
    ckpt = checkpoint_dir(cfg, "packets")
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    (ckpt / "offsets" / "0").write_text(f"v1\n{meta}\n{json.dumps({topic: {'0': 3, '1': 2}})}")
    (ckpt / "offsets" / "1").write_text(f"v1\n{meta}\n{json.dumps({topic: {'0': 5, '1': 5}})}")
    (ckpt / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert checkpoint_offsets(ckpt) == {topic: {0: 3, 1: 2}}
    assert pipeline_lag(cfg) == 5
    (ckpt / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert pipeline_lag(cfg) == 0
    stopped = replace(cfg.kafka, port=free_port())
    assert pipeline_lag(replace(cfg, kafka=stopped), timeout_s=1.0) is None  # no broker: unknown


def test_metrics_config_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"^\[metrics\] port: expected a port in 1..65535, got 0$"):
        MetricsConfig(port=0)
    assert MetricsConfig().host == "127.0.0.1"


def test_lag_backlog_and_latency_are_those_of_the_sys_rows(netmon_config: Config, tmp_path: Path) -> None:
    """Brute force: the sys rows read back whole (``read_results``) against the scraped text — per
    query, the newest row's ``lag_s`` and ``backlog_s``, and a latency histogram of every batch
    committed after the first observation (``lag_s`` + the batch's duration)."""
    from netmon.metrics import LATENCY_BUCKETS_S
    from netmon.results import read_results, results_dir
    from pipeline.batch_sink import write_table
    from pipeline.sys_stats import sys_table

    cfg = _cfg(netmon_config, tmp_path)
    root = results_dir(cfg, "sys")
    rng = random.Random(21)
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
    batches = {"packets": 0, "joins": 0}

    def commit(query: str, n: int, *, last_lag: float | None = None) -> None:
        for i in range(n):
            batch = batches[query]
            batches[query] += 1
            batch_time = start + dt.timedelta(seconds=batch)
            lag = rng.choice([None, rng.uniform(0.0, 3.0), rng.uniform(3.0, 400.0)])
            if i == n - 1 and last_lag is not None:
                lag = last_lag
            row = {
                "query": query,
                "batch_id": batch,
                "batch_time": batch_time,
                "max_event_time": None if lag is None else batch_time - dt.timedelta(seconds=lag),
                "lag_s": lag,
                "backlog_s": rng.choice([None, round(rng.uniform(0, 90), 3)]),
                "batch_ms": rng.randint(3, 4000),
            }
            write_table(sys_table([row]), root / query, batch)

    commit("packets", 6)  # before the first observation: not folded in
    server = serve(cfg)
    try:
        server.collector.observe()
        commit("packets", 25)
        commit("joins", 7)  # a sink that appears after the first observation: folded in whole
        server.collector.observe()
        commit("packets", 9, last_lag=12.5)
        commit("joins", 4, last_lag=0.75)
        server.collector.observe()
        server.collector.observe()  # nothing new: nothing folded twice
        m = _scrape(server.url)
    finally:
        server.close()

    for query, first_folded in (("packets", 6), ("joins", 0)):
        table = read_results(root / query)
        assert table is not None
        rows = sorted(table.to_pylist(), key=lambda r: r["batch_id"])
        assert [r["batch_id"] for r in rows] == list(range(batches[query]))
        newest = rows[-1]
        q = (("query", query),)
        assert m[("netmon_pipeline_lag_seconds", q)] == newest["lag_s"]
        if newest["backlog_s"] is None:
            assert ("netmon_pipeline_backlog_seconds", q) not in m
        else:
            assert m[("netmon_pipeline_backlog_seconds", q)] == newest["backlog_s"]
        latencies = [
            r["lag_s"] + r["batch_ms"] / 1000
            for r in rows
            if r["batch_id"] >= first_folded and r["lag_s"] is not None
        ]
        assert latencies
        assert m[("netmon_pipeline_latency_seconds_count", q)] == len(latencies)
        assert m[("netmon_pipeline_latency_seconds_sum", q)] == pytest.approx(sum(latencies))
        for le in [*LATENCY_BUCKETS_S, float("inf")]:
            label = "+Inf" if le == float("inf") else str(le)
            bucket = (
                "netmon_pipeline_latency_seconds_bucket",
                tuple(sorted({"query": query, "le": label}.items())),
            )
            assert m[bucket] == sum(latency <= le for latency in latencies), (query, le)
