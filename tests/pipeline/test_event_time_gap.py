"""A gap of years in event time, on the real broker and real Spark (faults issue, item 9).

A capture from 2014 is replayed, then the same capture at today's time onto the same topic (what
live capture after a replay of an old capture looks like to the pipeline). Before the fix the
top-k merge closed every empty 1 s sub-window of the gap one by one (~3.8×10⁸ per query): the
batch never committed. Now every windowed kind finishes and equals the offline commands on the
same two captures, and the gap's windows, which hold no data, are not reported.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analytics.distinct_offline import distinct_reports
from analytics.topk_offline import OfflineTopK
from ingest import read_records
from ingest.replay import ReplayOptions, replay
from netmon.config import Config, DistinctQuery
from netmon.kafka_admin import recreate_topic
from pipeline.distinct import offline_query
from pipeline.job import start_pipeline
from tests.pipeline.test_distinct_stream import _streamed as streamed_distinct
from tests.pipeline.test_topk_stream import QUERIES as TOPK_QUERIES
from tests.pipeline.test_topk_stream import SAMPLE, stream_reports

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

DISTINCT_QUERIES = (
    DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip"),
    DistinctQuery(name="ports-short", count="dst_port", group_by="src_ip", window_s=4, sub_window_s=0.5),
)
START_2014 = int(datetime(2014, 3, 1, tzinfo=UTC).timestamp()) * 10**9


def _shifted(table: pa.Table, start_ns: int) -> pa.Table:
    """The capture with its first record at ``start_ns`` (as ``ReplayOptions.start_ns`` shifts it)."""
    ts = pc.cast(table["ts"], pa.int64())
    moved = pc.add(ts, start_ns - pc.min(ts).as_py())
    return table.set_column(table.schema.get_field_index("ts"), "ts", pc.cast(moved, table["ts"].type))


def test_a_capture_replayed_years_after_another_finishes_and_equals_offline(
    spark, kafka_bootstrap, netmon_config: Config, tmp_path
) -> None:
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={
            "packets_topic": "netmon.test.gap",
            "results_topic_prefix": "netmon.test.gap.",
            "partitions": 1,
        },
        queries={"topk": TOPK_QUERIES, "distinct": DISTINCT_QUERIES},
    )
    now_ns = time.time_ns() // 10**9 * 10**9
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    # The old capture, left open; then the same traffic today, closed at its last record's time.
    for start_ns, close in ((START_2014, None), (now_ns, cfg.pipeline.watermark_s)):
        summary = replay(
            SAMPLE,
            bootstrap=cfg.kafka.bootstrap,
            topic=cfg.kafka.packets_topic,
            options=ReplayOptions(start_ns=start_ns, close_windows_s=close),
            progress=False,
        )
        assert summary.produced == summary.acknowledged > 0
    pipeline = start_pipeline(spark, cfg, available_now=True, kinds=("topk", "distinct"))
    try:
        pipeline.await_termination(600)
        assert pipeline.failed() is None, pipeline.failed()
        assert not pipeline.active, "the pipeline did not get across the gap in 600 s"
    finally:
        pipeline.stop()

    capture = pa.Table.from_batches(list(read_records(SAMPLE)))
    both = [_shifted(capture, START_2014), _shifted(capture, now_ns)]
    # Top-k: the offline reports over both captures, with the pipeline's watermark delay; event
    # time ends watermark_s past the last record, as the second replay's control message.
    got = stream_reports(cfg)
    for q in TOPK_QUERIES:
        offline = OfflineTopK(
            q.key,
            N=round(q.window_s * 1e9),
            b=round(q.sub_window_s * 1e9),
            k=q.k,
            weight=q.weight,
            time_based=True,
            watermark=round(cfg.pipeline.watermark_s * 1e9),
        )
        expected = list(offline.run(both, close_after=0))
        assert got[q.name] == expected, q.name
        # Reports on both sides of the gap, none inside it.
        years = Counter(r["end"][:4] for r in expected)
        assert set(years) == {"2014", datetime.fromtimestamp(now_ns / 1e9, UTC).strftime("%Y")}, years
    # Distinct counts: the offline reports with the replay's closing control record.
    control = {name: pa.nulls(1, capture.schema.field(name).type) for name in capture.schema.names}
    last = pc.max(pc.cast(both[1]["ts"], pa.int64())).as_py()
    control["ts"] = pa.array([last + int(cfg.pipeline.watermark_s * 1e9)], capture.schema.field("ts").type)
    batches = [*both, pa.table(control, schema=capture.schema)]
    streamed = streamed_distinct(cfg)
    for q in DISTINCT_QUERIES:
        reports = distinct_reports(
            batches,
            offline_query(q),
            lg_k=q.lg_k,
            top=q.top or None,
            watermark_ns=int(cfg.pipeline.watermark_s * 1e9),
        )
        expected_distinct = {r.end_ns: list(r.groups) for r in reports}
        assert streamed[q.name] == expected_distinct, q.name
        assert len({datetime.fromtimestamp(end / 1e9, UTC).year for end in expected_distinct}) == 2
