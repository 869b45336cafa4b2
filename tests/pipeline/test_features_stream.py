"""The features kind through the real shared query: a port scan replayed into Kafka, Spark's stage 1,
the driver's buffer, the committed rows and their republished JSON — exactly ``feature_rows`` — and
the alert service reading that topic in its consumer group raises exactly the episodes of
``netmon analyze alerts`` on the capture (issue 20: streaming = offline on the same input)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from alerts.defaults import DETECTION_RULES
from alerts.offline import analyze_capture
from alerts.service import AlertService
from analytics.alert_features import feature_rows
from ingest.generate import generate
from ingest.readers import read_records
from ingest.replay import ReplayOptions, replay
from netmon.config import AlertsConfig, Config
from netmon.kafka_admin import recreate_topic
from netmon.results import message_rows, read_results, results_dir
from pipeline.job import start_pipeline
from tests.alerts.helpers import assert_outbox_episodes
from tests.pipeline.test_features_kind import as_feature_rows, order

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_the_features_rows_of_a_port_scan_equal_feature_rows(
    spark, kafka_bootstrap: str, netmon_config: Config, tmp_path: Path
) -> None:
    capture = tmp_path / "port-scan.pcap"
    generate(capture, scenario="port-scan", packets=8_000, seed=3, duration_s=30)
    topic = "netmon.test.features"
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 2},
        # small batches: the buffer carries windows and SYNs from batch to batch
        pipeline={"kinds": ("traffic", "features"), "max_batch_messages": 4},
    )
    recreate_topic(cfg.kafka.bootstrap, topic, cfg.kafka.partitions)
    # A watermark far past the last record closes every window (and decides every SYN's fate).
    options = ReplayOptions(records_per_message=500, close_windows_s=60.0)
    summary = replay(capture, bootstrap=cfg.kafka.bootstrap, topic=topic, options=options, progress=False)
    assert summary.produced == summary.acknowledged == 8_000

    pipeline = start_pipeline(spark, cfg, available_now=True)
    try:
        pipeline.await_termination(600)
        assert pipeline.failed() is None, pipeline.failed()
        pipeline.poll()  # publishes the committed rows
    finally:
        pipeline.stop()
    assert pipeline.stats["features"].late_dropped == 0
    assert pipeline.stats["features"].batches >= 4

    expected = feature_rows([pa.Table.from_batches(list(read_records(capture)))])
    scanner = [r for r in expected if r["query"] == "src" and r["vertical"] >= 15]
    assert scanner, "the capture holds the port scan"
    table = read_results(results_dir(cfg, "features"))
    got = as_feature_rows(table)
    assert sorted(got, key=order) == sorted(expected, key=order)

    # Republished on <prefix>features as JSON Lines: the same rows (times as ISO-8601 text).
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        f"{topic}.features", bootstrap_servers=cfg.kafka.bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )  # fmt: skip
    published = []
    for message in consumer:
        headers = dict(message.headers)
        assert headers["netmon.kind"] == b"features"
        published += [json.loads(t) for t in message_rows(message.value, headers["netmon.result-version"])]
        if len(published) >= len(expected):
            break
    consumer.close()
    keys = lambda r: (r["query"], r["window_end"], r["subject"])  # noqa: E731
    assert sorted(map(keys, published)) == sorted(map(keys, expected))
    src = next(r for r in published if r["query"] == "src" and r["vertical"] >= 15)
    assert src.pop("keep") == 1.0  # every record read
    assert {k: v for k, v in src.items() if v is not None} == next(
        r for r in expected if keys(r) == keys(src)
    )

    # The alert service on the real topic, in its own consumer group: the offline episodes.
    offline = analyze_capture([capture], DETECTION_RULES, AlertsConfig())
    assert any(e.rule == "port-scan" for e in offline), offline
    alerts = AlertsConfig(group_id=f"alerts-{topic}-{tmp_path.name}", poll_s=0.2)
    service = AlertService(cfg, alerts, rules=DETECTION_RULES)
    service.run(idle_exit_s=5.0)
    assert service.totals.bad == 0
    assert_outbox_episodes(cfg.paths.state_dir, offline)
