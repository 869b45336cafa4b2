"""One meaning of late (faults issue, item 12): the pipeline and the offline commands agree.

A real capture, then the same capture again starting 45 s before the first one ends (a large
backward jump, as a capture whose traffic repeats after a clock step), replayed onto one topic and
read in small micro-batches. A packet is late when it is more than the watermark delay behind the
newest event time before it; the pipeline drops exactly the packets a brute-force loop over the
records finds late, and its top-k and distinct reports equal the offline commands' on the same
records, whatever the batch boundaries. Before the rule, the pipeline counted every record of the
jump that arrived in the same micro-batch as the newer ones, and `netmon analyze` did not.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka import KafkaProducer

from analytics.distinct_offline import distinct_reports
from analytics.topk_offline import OfflineTopK
from ingest import read_records
from ingest.wire import encode_messages, watermark_message
from netmon.config import Config, DistinctQuery
from netmon.kafka_admin import recreate_topic
from pipeline.distinct import offline_query
from pipeline.job import start_pipeline
from tests.pipeline.test_distinct_stream import _streamed as streamed_distinct
from tests.pipeline.test_event_time_gap import _shifted
from tests.pipeline.test_topk_stream import QUERIES as TOPK_QUERIES
from tests.pipeline.test_topk_stream import SAMPLE, stream_reports

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DISTINCT_QUERIES = (DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip"),)
JUMP_NS = 45 * 10**9


def _late_by_brute_force(ts: list[int], delay_ns: int) -> int:
    newest, late = None, 0
    for t in ts:
        if newest is not None and t < newest - delay_ns:
            late += 1
        newest = t if newest is None else max(newest, t)
    return late


def test_late_has_one_meaning_in_the_pipeline_and_offline(
    spark, kafka_bootstrap, netmon_config: Config, tmp_path
):
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={
            "packets_topic": "netmon.test.late",
            "results_topic_prefix": "netmon.test.late.",
            "partitions": 1,
        },
        queries={"topk": TOPK_QUERIES, "distinct": DISTINCT_QUERIES},
        # Micro-batches of a few messages: the jump falls inside and across them.
        pipeline={"max_batch_messages": 3},
    )
    delay_ns = round(cfg.pipeline.watermark_s * 1e9)
    capture = pa.Table.from_batches(list(read_records(SAMPLE)))
    ts = pc.cast(capture["ts"], pa.int64())
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    both = [capture, _shifted(capture, last - JUMP_NS)]
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, 1)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap, acks="all")
    for table in both:
        for batch in table.to_batches(max_chunksize=1000):
            for value, headers in encode_messages(batch, 700):
                producer.send(cfg.kafka.packets_topic, value, headers=headers)
    end_ns = max(pc.max(pc.cast(t["ts"], pa.int64())).as_py() for t in both) + delay_ns
    value, headers = watermark_message(end_ns)
    producer.send(cfg.kafka.packets_topic, value, headers=headers)
    producer.flush()
    producer.close()
    assert last - first > JUMP_NS  # the second copy starts before the first one ends

    pipeline = start_pipeline(spark, cfg, available_now=True, kinds=("topk", "distinct"))
    try:
        pipeline.await_termination(600)
        assert pipeline.failed() is None, pipeline.failed()
    finally:
        pipeline.stop()
    assert pipeline.stats["topk"].batches > 3

    all_ts = [t for table in both for t in pc.cast(table["ts"], pa.int64()).to_pylist()]
    late = _late_by_brute_force(all_ts, delay_ns)
    assert late > 1000
    assert pipeline.stats["topk"].late_dropped == late
    assert pipeline.stats["distinct"].late_dropped == late

    got = stream_reports(cfg)
    for q in TOPK_QUERIES:
        offline = OfflineTopK(
            q.key,
            N=round(q.window_s * 1e9),
            b=round(q.sub_window_s * 1e9),
            k=q.k,
            weight=q.weight,
            time_based=True,
            watermark=delay_ns,
        )
        assert got[q.name] == list(offline.run(both, close_after=0)), q.name
    control = {name: pa.nulls(1, capture.schema.field(name).type) for name in capture.schema.names}
    control["ts"] = pa.array([end_ns], capture.schema.field("ts").type)
    streamed = streamed_distinct(cfg)
    for q in DISTINCT_QUERIES:
        reports = distinct_reports(
            [*both, pa.table(control, schema=capture.schema)],
            offline_query(q),
            lg_k=q.lg_k,
            top=q.top or None,
            watermark_ns=delay_ns,
        )
        assert streamed[q.name] == {r.end_ns: list(r.groups) for r in reports}, q.name
