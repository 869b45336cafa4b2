"""Two partitions fed at different paces, through the real broker and the streaming pipeline.

Partition 0 receives its whole 40 s of traffic at once; partition 1 first only its first 10 s, and
the rest once the pipeline has read that. Spark's own watermark follows the newest event time of
any partition, so after the first batch it would sit at 40 s - 5 s and drop most of partition 1's
remaining records as late. The shared query takes the batch's event time as the smallest of its
partitions' newest (``pipeline.partials``): none of partition 1's records is late, and the traffic
rows are the brute-force counts of every record.
"""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka import KafkaProducer

from ingest import read_records
from ingest.generate import generate
from ingest.wire import encode_messages, watermark_message
from netmon.config import Config
from netmon.kafka_admin import recreate_topic
from netmon.records import ARROW_SCHEMA
from netmon.results import read_results, results_dir
from pipeline.job import start_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

S_NS = 10**9
LAG_S = 10


def _send(producer: KafkaProducer, topic: str, partition: int, table: pa.Table) -> None:
    for batch in table.to_batches(max_chunksize=1000):
        for value, headers in encode_messages(batch, 100):
            producer.send(topic, value, headers=headers, partition=partition)
    producer.flush()


def _brute_force(table: pa.Table) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(window_start_ns, proto): (packets, bytes)}`` of 1 s windows, one record at a time."""
    packets: Counter[tuple[int, int]] = Counter()
    volume: Counter[tuple[int, int]] = Counter()
    ts_ns = pc.cast(table["ts"], pa.int64()).to_pylist()
    for t, proto, wire_len in zip(
        ts_ns, table["proto"].to_pylist(), table["wire_len"].to_pylist(), strict=True
    ):
        key = (t // S_NS * S_NS, -1 if proto is None else int(proto))  # no protocol: a group too
        packets[key] += 1
        volume[key] += int(wire_len)
    return {k: (packets[k], volume[k]) for k in packets}


def _traffic(cfg: Config) -> dict[tuple[int, int], tuple[int, int]]:
    table = read_results(results_dir(cfg, "traffic"))
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for row in [] if table is None else table.to_pylist():
        proto = -1 if row["proto"] is None else int(row["proto"])
        key = (int(row["window_start"].timestamp() * 1_000_000) * 1000, proto)
        assert key not in out, f"window {key} written twice"
        out[key] = (int(row["packets"]), int(row["bytes"]))
    return out


def test_the_slower_partition_is_never_late(spark, kafka_bootstrap, netmon_config: Config, tmp_path) -> None:
    topic = "netmon.test.partition-skew"
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 2},
        pipeline={"publish_results": False, "trigger_s": 0.5},
    )
    delay_ns = round(cfg.pipeline.watermark_s * S_NS)
    capture = tmp_path / "capture.pcap"
    generate(capture, packets=4000, seed=5, duration_s=40.0)
    records = pa.Table.from_batches(list(read_records(capture)), schema=ARROW_SCHEMA)
    ts = pc.cast(records["ts"], pa.int64())
    first_ns = pc.min(ts).as_py()
    # Every other record to each partition: both cover the whole 40 s.
    fast = records.take(pa.array(range(0, records.num_rows, 2)))
    slow = records.take(pa.array(range(1, records.num_rows, 2)))
    slow_ts = pc.cast(slow["ts"], pa.int64())
    early = pc.less(slow_ts, first_ns + LAG_S * S_NS)
    slow_early, slow_rest = slow.filter(early), slow.filter(pc.invert(early))
    fast_newest = pc.max(pc.cast(fast["ts"], pa.int64())).as_py()
    # The records a watermark that followed the fast partition would drop: most of the rest.
    behind = pc.sum(pc.less(pc.cast(slow_rest["ts"], pa.int64()), fast_newest - delay_ns)).as_py()
    assert behind > 1000

    recreate_topic(cfg.kafka.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap, acks="all")
    try:
        _send(producer, topic, 0, fast)
        _send(producer, topic, 1, slow_early)
        pipeline = start_pipeline(spark, cfg, kinds=("traffic",))
        try:
            deadline = time.monotonic() + 180
            ahead = fast.num_rows + slow_early.num_rows
            while (pipeline.poll().get("traffic") is None) or pipeline.stats["traffic"].packets < ahead:
                assert pipeline.failed() is None, pipeline.failed()
                assert time.monotonic() < deadline, "the first records were not read"
                time.sleep(0.2)
            # Partition 1 catches up; then both partitions' streams end (as a replay ends them).
            _send(producer, topic, 1, slow_rest)
            end_ns = pc.max(ts).as_py() + delay_ns + S_NS
            for partition in (0, 1):
                value, headers = watermark_message(end_ns)
                producer.send(topic, value, headers=headers, partition=partition)
            producer.flush()
            pipeline.process_all_available()
            pipeline.poll()
            assert pipeline.failed() is None, pipeline.failed()
        finally:
            pipeline.stop()
    finally:
        producer.close()
    stats = pipeline.stats["traffic"]
    assert stats.late_dropped == 0
    assert stats.packets == records.num_rows
    expected = _brute_force(records)
    assert sum(p for p, _ in expected.values()) == records.num_rows
    assert _traffic(cfg) == expected
