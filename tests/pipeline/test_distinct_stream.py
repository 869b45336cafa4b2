"""Distinct counts on the real broker and real Spark: streaming results = the offline reference.

Both sides build the same sub-window sketches (same key text, same hash) and read each window's
union *settled* (``hll_union(sk, sk)`` in Spark, ``SubWindowDistinct._union`` offline), whose
estimate depends on the registers only, so the answers are equal exactly, HLL mode included
(``ddos.pcap`` has ~850 flows per protocol in a window, beyond coupon mode), and so are the
intervals of the sketch's own error each row and report carries (``distinct_low/high``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from analytics.distinct import hll_interval
from analytics.distinct_offline import distinct_reports
from cli.main import cli
from ingest import read_records
from ingest.replay import ReplayOptions, replay
from netmon.config import Config, DistinctQuery
from netmon.kafka_admin import recreate_topic
from netmon.results import message_rows, read_results, results_dir
from pipeline.distinct import COLUMNS, batch_sketches, chains_of, offline_query
from pipeline.job import start_pipeline
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

SAMPLE = REPO_ROOT / "samples" / "ddos.pcap"
#: The four built-in queries, a global count, and a second chain (other N, b and lg_k).
QUERIES = (
    DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip"),
    DistinctQuery(name="port-scan", count="dst_port", group_by="src_ip", top=5),
    DistinctQuery(name="host-scan", count="dst_ip", group_by="src_ip"),
    DistinctQuery(name="flows-per-proto", count="src_ip,dst_ip,src_port,dst_port,proto", group_by="proto"),
    DistinctQuery(name="flows", count="src_ip,dst_ip,proto,src_port,dst_port", group_by=""),
    DistinctQuery(name="ddos-short", count="src_ip", group_by="dst_ip", window_s=4, sub_window_s=0.5, lg_k=8),
)

#: window end (ns) -> [(group, distinct)] in rank order (other tests compare these too)
Report = dict[int, list[tuple[str, int]]]
#: window end (ns) -> [(group, distinct, distinct_low, distinct_high)] in rank order
Bounded = dict[int, list[tuple[str, int, int, int]]]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(t: datetime) -> int:
    return (t - EPOCH) // timedelta(microseconds=1) * 1000


def _config(base: Config, tmp_path: Path, topic: str, *, partitions: int = 2, **spark: object) -> Config:
    return base.replace(
        paths={"data_dir": tmp_path / "data"},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": partitions},
        spark=spark or {},
        queries={"distinct": QUERIES},
    )


def _replay(cfg: Config, close_windows_s: float, **options: object) -> int:
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    opts = ReplayOptions(close_windows_s=close_windows_s, **options)
    summary = replay(
        SAMPLE, bootstrap=cfg.kafka.bootstrap, topic=cfg.kafka.packets_topic, options=opts, progress=False
    )
    assert summary.produced == summary.acknowledged
    return int(summary.acknowledged)


def _streamed(cfg: Config) -> dict[str, Report]:
    """The committed results per query, each (query, window end, group) row exactly once."""
    return {
        query: {end: [(g, n) for g, n, _, _ in ranked] for end, ranked in by_end.items()}
        for query, by_end in _streamed_bounded(cfg).items()
    }


def _streamed_bounded(cfg: Config) -> dict[str, Bounded]:
    """:func:`_streamed` with each row's interval (``distinct_low``, ``distinct_high``)."""
    table = read_results(results_dir(cfg, "distinct"))
    rows = [] if table is None else table.to_pylist()
    if rows:
        # The answer's columns, then the precision columns (docs/distinct.md): no drop box here,
        # so every row's interval is the sketch's own error (coupon mode: the count itself).
        # ``window_s``: the span held, the configured window without a change at run time;
        # ``sub_window_s``: the configured sub-window without Γ
        precision = ("keep", "distinct_low", "distinct_high", "window_s", "sub_window_s")
        assert tuple(table.column_names) == (*COLUMNS, *precision)
        lg_k = {q.name: q.lg_k for q in cfg.queries.distinct}
        window = {q.name: q.window_s for q in cfg.queries.distinct}
        assert all(r["keep"] == 1.0 and r["window_s"] == window[r["query"]] for r in rows)
        for r in rows:
            low, high = hll_interval([r["distinct"]], lg_k[r["query"]])
            assert (r["distinct_low"], r["distinct_high"]) == (low[0], high[0]), r
    seen = Counter((r["query"], r["window_end"], r["group"]) for r in rows)
    assert not [k for k, n in seen.items() if n > 1], "rows written twice"
    out: dict[str, dict[int, list[tuple[int, str, int, int, int]]]] = {}
    for r in rows:
        end = _ns(r["window_end"])
        out.setdefault(r["query"], {}).setdefault(end, []).append(
            (r["rank"], r["group"], r["distinct"], r["distinct_low"], r["distinct_high"])
        )
    reports: dict[str, Bounded] = {}
    for query, by_end in out.items():
        reports[query] = {}
        for end, ranked in by_end.items():
            ranked.sort()
            assert [rank for rank, *_ in ranked] == list(range(1, len(ranked) + 1))
            reports[query][end] = [(g, n, low, high) for _, g, n, low, high in ranked]
    return reports


def _published(cfg: Config, count: int) -> list[dict]:
    """The first ``count`` JSON rows republished on the distinct results topic."""
    from kafka import KafkaConsumer

    topic = f"{cfg.kafka.results_topic_prefix}distinct"
    consumer = KafkaConsumer(
        topic, bootstrap_servers=cfg.kafka.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    rows = []
    for message in consumer:
        assert dict(message.headers)["netmon.kind"] == b"distinct"
        version = dict(message.headers).get("netmon.result-version")
        rows += [json.loads(text) for text in message_rows(message.value, version)]
        if len(rows) >= count:
            break
    consumer.close()
    return rows


def _offline(cfg: Config, close_windows_s: float, *, control_record: bool = True) -> dict[str, Bounded]:
    """``distinct_reports`` over the capture, closing at the end as the replay's control message does.

    Either a keyless record at the control message's event time is appended, or the run closes
    what the pipeline's final watermark (``close_windows_s - watermark_s`` past the last record)
    closes (``close_after_ns``, what ``netmon analyze distinct --close-at-end`` does).
    """
    batches = list(read_records(SAMPLE))
    watermark_ns = int(cfg.pipeline.watermark_s * 1e9)
    close_after_ns = None
    if control_record:
        table = pa.Table.from_batches(batches)
        control = {name: pa.nulls(1, table.schema.field(name).type) for name in table.schema.names}
        last_ns = max(t.value for t in table.column("ts") if t.is_valid)
        control["ts"] = pa.array([last_ns + int(close_windows_s * 1e9)], table.schema.field("ts").type)
        batches.append(pa.table(control, schema=table.schema))
    else:
        close_after_ns = int(close_windows_s * 1e9) - watermark_ns
    out: dict[str, Bounded] = {}
    for q in cfg.queries.distinct:
        reports = distinct_reports(
            batches,
            offline_query(q),
            lg_k=q.lg_k,
            top=q.top or None,
            watermark_ns=watermark_ns,
            close_after_ns=close_after_ns,
        )
        out[q.name] = {
            r.end_ns: [(g, n, low, high) for (g, n), (low, high) in zip(r.groups, r.bounds, strict=True)]
            for r in reports
        }
    return out


def _cli(q: DistinctQuery, watermark_s: float) -> Bounded:
    """``netmon analyze distinct SAMPLE ... --keep-open`` for one configured query, parsed.

    ``--keep-open``: the replay ends without extra event time (``close_windows_s = 0``).
    """
    args = ["analyze", "distinct", str(SAMPLE), "--count", q.count]
    args += ["--group-by", q.group_by] if q.group_by else []
    args += ["--window", f"{q.window_s}s", "--sub-window", f"{q.sub_window_s}s", "--lg-k", str(q.lg_k)]
    args += ["--top", str(q.top), "--watermark", f"{watermark_s}s", "--keep-open"]
    result = CliRunner().invoke(cli, args, env={"NETMON_CONFIG": None})
    assert result.exit_code == 0, result.output
    out: Bounded = {}
    for line in result.stdout.splitlines():
        report = json.loads(line)
        out[_ns(datetime.fromisoformat(report["end"]))] = [
            (g["group"], g["distinct"], g["distinct_low"], g["distinct_high"]) for g in report["groups"]
        ]
    return out


def test_sub_window_sketches_hold_what_the_offline_synopses_hold(spark):
    # A micro-batch through stage 1: IPv4 and IPv6 keys, an INT port in the key, null keys
    # (skipped), and one group past coupon mode. Spark splits it into partitions, so each sketch
    # is a union of partial sketches; coupons and registers must still equal the offline ones,
    # and so must the settled estimates.
    from pyspark.sql import functions as F

    from analytics.distinct import SubWindowDistinct
    from analytics.keys import key_text
    from tests.analytics.test_distinct import content

    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        (t0 + timedelta(milliseconds=i), f"10.0.{i // 250}.{i % 250}", "192.0.2.7", 80) for i in range(900)
    ]
    rows += [
        (t0 + timedelta(milliseconds=500 + i), f"2001:db8::{i:x}", "2001:db8::1", 443 + i % 3)
        for i in range(9)
    ]
    rows += [
        (t0 + timedelta(seconds=1), "10.0.0.1", None, 22),
        (t0 + timedelta(seconds=1), "10.0.0.2", "192.0.2.7", None),
    ]
    rows += [
        (t0 + timedelta(seconds=1, milliseconds=i), "10.9.9.9", "192.0.2.7", 1000 + i) for i in range(40)
    ]
    q = DistinctQuery(name="q", count="src_ip,dst_port", group_by="dst_ip", window_s=2, sub_window_s=1)
    df = spark.createDataFrame(rows, "ts timestamp, src_ip string, dst_ip string, dst_port int").repartition(
        2
    )
    chain = chains_of([q])[0]
    got = {
        (r.end, r.group): (bytes(r.sketch), r.settled)
        for r in batch_sketches(df, chain, lo=-1)
        .where("items > 0")
        .select(
            ((F.col("idx") + 1) * chain.sub_window_us).alias("end"),
            "group",
            "sketch",
            F.hll_sketch_estimate(F.hll_union("sketch", "sketch")).alias("settled"),
        )
        .collect()
    }
    table = pa.table(
        {
            "src_ip": [r[1] for r in rows],
            "dst_ip": [r[2] for r in rows],
            "dst_port": pa.array([r[3] for r in rows], pa.int32()),
        }
    )
    items, groups = key_text(table, ("src_ip", "dst_port")), key_text(table, ("dst_ip",))
    expected: dict[tuple[int, str], SubWindowDistinct] = {}
    for (ts, *_), item, group in zip(rows, items.to_pylist(), groups.to_pylist(), strict=True):
        if item is not None and group is not None:
            end_us = (_ns(ts) // 10**9 + 1) * 10**6  # the end of the record's 1 s sub-window
            expected.setdefault((end_us, group), SubWindowDistinct(1, 1)).update(item, group)
    assert set(got) == set(expected)
    for (end, group), (sketch, settled) in got.items():
        offline = expected[(end, group)]
        assert content(sketch) == content(offline.synopsis(group)), (end, group)
        assert settled == offline.slide().estimate()[group], (end, group)
    assert max(settled for _, settled in got.values()) > 2**12 // 8  # one sketch in HLL mode


def test_streaming_results_equal_netmon_analyze_distinct(spark, kafka_bootstrap, netmon_config, tmp_path):
    # No extra event time at the end: Spark's watermark stops at the last packet - 5 s, where
    # `netmon analyze distinct --watermark 5s` stops closing sub-windows too.
    cfg = _config(netmon_config, tmp_path, "netmon.test.distinct")
    _replay(cfg, close_windows_s=0)
    pipeline = start_pipeline(spark, cfg, kinds=("distinct",), available_now=True)
    try:
        pipeline.await_termination(timeout_s=600)
        assert pipeline.failed() is None, pipeline.failed()
    finally:
        pipeline.stop()
    got = _streamed_bounded(cfg)
    for q in cfg.queries.distinct:
        expected = _cli(q, cfg.pipeline.watermark_s)
        assert expected, f"{q.name}: no offline reports"
        assert got.get(q.name) == expected, q.name
    assert max(n for r in got["flows-per-proto"].values() for _, n, *_ in r) > 2**12 // 8  # HLL mode
    # ... whose rows state the sketch's error (equal to the command's, above)
    assert any(low < n < high for r in got["flows-per-proto"].values() for _, n, low, high in r)
    assert all(len(r) <= 5 for r in got["port-scan"].values())
    # The same rows, republished as JSON on the results topic.
    rows = read_results(results_dir(cfg, "distinct")).to_pylist()
    published = _published(cfg, len(rows))
    assert sorted(
        (r["query"], r["window_end"], r["group"], r["distinct"], r["rank"]) for r in published
    ) == sorted(
        (r["query"], r["window_end"].isoformat().replace("+00:00", "Z"), r["group"], r["distinct"], r["rank"])
        for r in rows
    )


def test_restart_from_checkpoint_gives_the_same_results(spark, kafka_bootstrap, netmon_config, tmp_path):
    # Small messages and a small per-batch limit: the first run stops after a few batches. The
    # control message is a window past the end, so every window closes, the tail ones included.
    close_s = max(q.window_s for q in QUERIES) + 1 + netmon_config.pipeline.watermark_s
    # One partition: with two, tiny batches can read one partition seconds ahead of the other and the
    # watermark then drops the slower one's records as late (as in the top-k restart test).
    topic = "netmon.test.distinct-restart"
    cfg = _config(netmon_config, tmp_path, topic, partitions=1, max_offsets_per_trigger=4)
    _replay(cfg, close_windows_s=close_s, records_per_message=100)
    expected = _offline(cfg, close_s)
    assert _offline(cfg, close_s, control_record=False) == expected

    first = start_pipeline(spark, cfg, kinds=("distinct",), available_now=True)
    try:
        deadline = time.monotonic() + 300
        while (st := first.poll().get("distinct")) is None or st.batches < 2:
            assert first.failed() is None, first.failed()
            assert first.active, "the first run finished before it could be stopped"
            assert time.monotonic() < deadline, "no batches"
            time.sleep(0.3)
    finally:
        first.stop()
    partial = _streamed_bounded(cfg)

    second = start_pipeline(spark, cfg, kinds=("distinct",), available_now=True)
    try:
        second.await_termination(timeout_s=600)
        assert second.failed() is None, second.failed()
    finally:
        second.stop()
    got = _streamed_bounded(cfg)
    assert sum(map(len, partial.values())) < sum(map(len, got.values())), "stopped too late"
    assert got == expected
    assert second.stats["distinct"].late_dropped == 0
