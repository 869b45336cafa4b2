"""One meaning of late (faults issue, item 12): the pipeline and the offline commands agree.

A real capture, then the same capture again starting 45 s before the first one ends (a large
backward jump, as a capture whose traffic repeats after a clock step), replayed onto one topic and
read in small micro-batches. A packet is late when it is more than the watermark delay behind the
newest event time before it; the pipeline drops exactly the packets a brute-force loop over the
records finds late, and its top-k and distinct reports equal the offline commands' on the same
records, whatever the batch boundaries. Before the rule, the pipeline counted every record of the
jump that arrived in the same micro-batch as the newer ones, and `netmon analyze` did not.

The joins too: the joins kind (on the shared query, so it never sees a late record) gives the
match rows of the offline join over the same records with the rule (``run_join(late_after_s=d)``,
``netmon analyze join``); the offline join without it sorts the jump back into its event-time
batches and joins it, and differs. The rule of ``analytics.late`` is the shared decode's
(``pipeline.partials.decode_messages``), on random streams cut into batches anywhere.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from kafka import KafkaProducer

from analytics.distinct_offline import distinct_reports
from analytics.join_queries import HandshakeQuery, JoinRun, LinkQuery, run_join
from analytics.late import LateRule
from analytics.topk_offline import OfflineTopK
from ingest import read_records
from ingest.wire import encode_messages, watermark_message
from netmon.config import Config, DistinctQuery, JoinQuery
from netmon.kafka_admin import recreate_topic
from netmon.results import read_results, results_dir
from pipeline.distinct import offline_query
from pipeline.job import start_pipeline
from pipeline.partials import decode_messages
from tests.pipeline.test_distinct_stream import _streamed as streamed_distinct
from tests.pipeline.test_event_time_gap import _shifted
from tests.pipeline.test_join_stream import HANDSHAKE, LINK, rows
from tests.pipeline.test_python_decode import _line, _messages_table
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


def _config(netmon_config: Config, tmp_path: Any, topic: str, queries: dict[str, Any]) -> Config:
    """One partition, ``queries``, micro-batches of a few messages: the jump falls inside and across them."""
    return netmon_config.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 1},
        queries=queries,
        pipeline={"max_batch_messages": 3},
    )


def _produce_jump(cfg: Config) -> tuple[list[pa.Table], int]:
    """The capture, then again from 45 s before its end, onto the (one-partition) packets topic,
    then a watermark control message the delay past the last record; the two copies and its time."""
    delay_ns = round(cfg.pipeline.watermark_s * 1e9)
    capture = pa.Table.from_batches(list(read_records(SAMPLE)))
    ts = pc.cast(capture["ts"], pa.int64())
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    assert last - first > JUMP_NS  # the second copy starts before the first one ends
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
    return both, end_ns


def _run(spark: Any, cfg: Config, kinds: tuple[str, ...]) -> Any:
    pipeline = start_pipeline(spark, cfg, available_now=True, kinds=kinds)
    try:
        pipeline.await_termination(600)
        assert pipeline.failed() is None, pipeline.failed()
    finally:
        pipeline.stop()
    return pipeline


def _all_ts(tables: list[pa.Table]) -> list[int]:
    return [t for table in tables for t in pc.cast(table["ts"], pa.int64()).to_pylist()]


def test_the_offline_rule_is_the_shared_decodes_whatever_the_batches() -> None:
    """``analytics.late.LateRule`` flags the packets ``decode_messages`` drops as late: random
    streams with backward jumps and watermark control messages, batches cut anywhere."""
    rng = np.random.default_rng(12)
    for delay in (0, 50, 400):
        t, messages, control, times = 10**9, [], [], []
        for _ in range(120):  # messages: packets, now and then a watermark control message
            if rng.random() < 0.05:
                messages.append(f"{t + int(rng.integers(-200, 200))}\n".encode())
                control.append("watermark")
                continue
            lines = []
            for _ in range(int(rng.integers(1, 12))):
                t += -int(rng.integers(0, 3_000)) if rng.random() < 0.03 else int(rng.integers(-60, 80))
                lines.append(_line(t))
                times.append(t)
            messages.append(b"".join(lines))
            control.append(None)
        cuts = sorted({0, len(messages), *(int(c) for c in rng.integers(1, len(messages), 6))})
        newest, kept_by_decode, late_by_decode = None, [], 0
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            table = _messages_table(messages[lo:hi], control[lo:hi])
            rows_, totals, newest = decode_messages(table, newest_ns=newest, delay_ns=delay)
            packets = rows_.filter(pc.invert(rows_["is_control"]))
            kept_by_decode += pc.cast(packets["ts"], pa.int64()).to_pylist()  # microseconds
            late_by_decode += totals["late"]
        rule, kept, i = LateRule(delay), [], 0
        for message, kind in zip(messages, control, strict=True):  # one message at a time
            if kind is not None:
                rule.advance(int(message))
                continue
            n = message.count(b"\n")
            chunk = np.array(times[i : i + n], np.int64)
            kept += [int(x) // 1000 for x in chunk[~rule.late_mask(chunk)]]
            i += n
        assert late_by_decode == rule.late > 0, delay
        assert kept_by_decode == kept and rule.newest == newest


def test_late_has_one_meaning_in_the_pipeline_and_offline(
    spark, kafka_bootstrap, netmon_config: Config, tmp_path
):
    cfg = _config(
        netmon_config,
        tmp_path,
        "netmon.test.late",
        {"topk": TOPK_QUERIES, "distinct": DISTINCT_QUERIES},
    )
    delay_ns = round(cfg.pipeline.watermark_s * 1e9)
    both, end_ns = _produce_jump(cfg)
    capture = both[0]

    pipeline = _run(spark, cfg, ("topk", "distinct"))
    assert pipeline.stats["topk"].batches > 3

    late = _late_by_brute_force(_all_ts(both), delay_ns)
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


#: A handshake query and a link query (``dst_port=443`` ⋈ ``dst_port=80`` on ``src_ip``), as
#: ``tests/pipeline/test_join_stream.py`` runs them.
JOIN_QUERIES = (HANDSHAKE, LINK)


def _offline(q: JoinQuery) -> HandshakeQuery | LinkQuery:
    if q.query == "handshake":
        return HandshakeQuery(q.window_s)
    return LinkQuery(q.left, q.right, q.window_s, q.key, q.right_key or None)


def _triples(run: JoinRun) -> Counter[tuple[Any, ...]]:
    """``(key, left_ts µs, right_ts µs)`` of an offline run's matches."""
    out = run.results
    left = out["left_ts"].astype("int64") // 1000
    right = out["right_ts"].astype("int64") // 1000
    return Counter(zip(out["key"], left.tolist(), right.tolist(), strict=True))


def test_the_joins_drop_the_late_records_as_the_offline_join_does(
    spark, kafka_bootstrap, netmon_config: Config, tmp_path
):
    """The joins kind on the jump, in small micro-batches: its match rows are the offline join's
    over the same records with the rule, not without it (which sorts the jump back in)."""
    cfg = _config(netmon_config, tmp_path, "netmon.test.late.joins", {"join": JOIN_QUERIES})
    delay_ns = round(cfg.pipeline.watermark_s * 1e9)
    both, _ = _produce_jump(cfg)

    pipeline = _run(spark, cfg, ("joins",))
    assert pipeline.stats["joins"].batches > 3
    late = _late_by_brute_force(_all_ts(both), delay_ns)
    assert late > 1000
    assert pipeline.stats["joins"].late_dropped == late

    streamed = read_results(results_dir(cfg, "joins"))
    records = pa.concat_tables(both)
    for q in JOIN_QUERIES:
        got: Counter[tuple[Any, ...]] = Counter()
        for row, n in rows(streamed, q.name).items():
            got[row[:3]] += n
        ruled = run_join(_offline(q), records, late_after_s=cfg.pipeline.watermark_s)
        assert ruled.late_dropped == late, q.name
        assert sum(got.values()) > 20, q.name
        assert got == _triples(ruled), q.name
        # Without the rule the offline join reorders the jump instead of dropping it: more rows.
        assert got != _triples(run_join(_offline(q), records)), q.name
