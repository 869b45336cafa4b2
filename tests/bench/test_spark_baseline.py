"""``bench.spark_baseline``: the plain-Spark baseline of ``netmon bench pipeline`` on a tiny replay.

Its traffic counts equal the brute-force counts, and all its queries drain the topic and end.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.spark_baseline import baseline_queries, drain_baseline, rsd_for
from ingest.replay import ReplayOptions, replay
from netmon.config import Config
from netmon.kafka_admin import recreate_topic
from tests.conftest import REPO_ROOT
from tests.pipeline.oracle import traffic_per_window

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"


def test_rsd_gives_spark_the_sketch_size_of_lg_k() -> None:
    for lg_k in range(4, 22):
        # Spark's HLL++: p = ceil(2 * log2(1.106 / rsd)).
        assert math.ceil(2 * math.log2(1.106 / rsd_for(lg_k))) == lg_k


@pytest.mark.spark
@pytest.mark.kafka
def test_baseline_traffic_equals_brute_force_and_every_query_drains(
    spark, kafka_bootstrap, netmon_config: Config, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    topic = "netmon.test.spark-baseline"
    cfg = netmon_config.replace(paths={"data_dir": tmp_path / "data"}, kafka={"packets_topic": topic})
    recreate_topic(cfg.kafka.bootstrap, topic, cfg.kafka.partitions)
    close = cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s
    summary = replay(
        SAMPLE,
        bootstrap=cfg.kafka.bootstrap,
        topic=topic,
        options=ReplayOptions(close_windows_s=close),
        partitions=cfg.kafka.partitions,
        progress=False,
    )
    expected = traffic_per_window(SAMPLE)
    assert summary.acknowledged == sum(p for p, _ in expected.values())

    queries = baseline_queries(spark, cfg)
    assert [q.name for q in queries] == [
        "baseline_traffic",
        *(f"baseline_topk_{q.name.replace('-', '_')}" for q in cfg.queries.topk),
        *(f"baseline_distinct_{q.name.replace('-', '_')}" for q in cfg.queries.distinct),
        "baseline_join_handshake",
    ]
    # The traffic question's rows, into a memory table instead of the bench's noop sink.
    traffic = (
        queries[0]
        .frame.writeStream.queryName("test_baseline_traffic")
        .format("memory")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "memory-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    traffic.awaitTermination(300)
    assert traffic.exception() is None
    rows = spark.table("test_baseline_traffic").select(
        F.unix_micros("window.start").alias("start_us"), "proto", "packets", "bytes"
    )
    got = {(r.start_us * 1000, r.proto): (r.packets, r.bytes) for r in rows.collect()}
    assert got == expected

    # The bench's path: every question at once, results discarded, each ends without error.
    wall_s = drain_baseline(baseline_queries(spark, cfg), tmp_path / "checkpoints", timeout_s=600)
    assert wall_s > 0
    for q in queries:
        assert (tmp_path / "checkpoints" / q.name / "commits" / "0").exists(), q.name
