"""A restart in the middle of a ddos replay at a fixed rate gives the results of an uninterrupted run.

The throughput issue's check: the pipeline is stopped while a paced replay of a generated ddos
capture is still producing, started again from its checkpoints, and every kind's committed rows
(traffic, top-k, distinct counts, joins) equal those of one uninterrupted run over the same topic.
"""

from __future__ import annotations

import threading
import time

import pytest

from ingest.generate import generate
from ingest.replay import ReplayOptions, replay
from netmon.config import Config
from netmon.kafka_admin import recreate_topic
from netmon.results import read_results, results_dir
from pipeline.job import start_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

KINDS = ("traffic", "topk", "distinct", "joins")
RATE_PPS = 3_000
PACKETS = 60_000


def _rows(cfg: Config, kind: str) -> list[tuple]:
    table = read_results(results_dir(cfg, kind))
    return [] if table is None else sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_a_restart_mid_replay_gives_the_uninterrupted_results(
    spark, kafka_bootstrap, netmon_config, tmp_path
):
    capture = tmp_path / "ddos.pcap"
    generate(capture, scenario="ddos", packets=PACKETS, duration_s=30.0, seed=3)
    topic = "netmon.test.restart-ddos"
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path / "restarted"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 2},
        # Small batches: the stop falls between batches of a replay still in progress.
        pipeline={"max_batch_messages": 6, "trigger_s": 0.5, "publish_results": False},
    )
    recreate_topic(cfg.kafka.bootstrap, topic, 2)
    options = ReplayOptions(
        pps=RATE_PPS, close_windows_s=cfg.pipeline.watermark_s + 60, records_per_message=500
    )
    done: dict[str, int] = {}

    def produce() -> None:
        summary = replay(
            capture,
            bootstrap=cfg.kafka.bootstrap,
            topic=topic,
            options=options,
            partitions=2,
            progress=False,
        )
        done["acked"] = int(summary.acknowledged)

    first = start_pipeline(spark, cfg, kinds=KINDS)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        deadline = time.monotonic() + 120
        while (first.poll().get("traffic") is None) or first.stats["traffic"].packets < 2 * RATE_PPS:
            assert first.failed() is None, first.failed()
            assert time.monotonic() < deadline, "no batches"
            time.sleep(0.2)
    finally:
        first.stop()
    assert producer.is_alive(), "the replay should still be producing when the pipeline stops"
    second = start_pipeline(spark, cfg, kinds=KINDS)
    try:
        producer.join(120)
        assert done.get("acked") == PACKETS
        second.process_all_available()
        second.poll()
    finally:
        second.stop()
    assert first.failed() is None and second.failed() is None

    # The uninterrupted run: the same topic, a fresh data directory, one pipeline.
    whole_cfg = cfg.replace(paths={"data_dir": tmp_path / "whole"})
    whole = start_pipeline(spark, whole_cfg, available_now=True, kinds=KINDS)
    whole.await_termination(600)
    assert whole.failed() is None, whole.failed()
    whole.stop()
    for kind in KINDS:
        rows = _rows(cfg, kind)
        assert rows, kind
        assert rows == _rows(whole_cfg, kind), kind
    counted = first.stats["traffic"].packets + second.stats["traffic"].packets
    assert counted >= PACKETS  # a batch Spark ran again after the stop is counted twice
