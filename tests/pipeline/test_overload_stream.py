"""The resource manager on the real broker and real Spark (issue 18 items 5–6): with a budget
the shared query cannot meet, the packet-weighted top-k and the distinct queries go behind drop
boxes, every row says the fraction it was computed at, and the intervals cover the true counts of
the capture. When even those boxes at their floor are not enough, the intake box samples the
records before the decode, and every kind's intervals still cover the truth."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from analytics.keys import key_text
from ingest import read_records
from netmon.records import ARROW_SCHEMA
from netmon.results import SHARED_QUERY, read_results, results_dir
from pipeline.job import start_pipeline
from pipeline.resource_manager import eligible_queries, quantize
from tests.pipeline.test_pipeline_e2e import SAMPLE, _config, _replay, _wait_for

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _true_counts(capture: pa.Table, key: str, window_ns: int, ends_ns: set[int]) -> Counter:
    """Brute force: packets per (window end, key text) over the whole capture."""
    ts = capture.column("ts").cast(pa.int64()).to_numpy()
    keys = key_text(capture, tuple(key.split(","))).to_pylist()
    out: Counter = Counter()
    order = np.argsort(ts)
    ts, keys = ts[order], [keys[i] for i in order]
    for end in ends_ns:
        lo, hi = np.searchsorted(ts, end - window_ns, "left"), np.searchsorted(ts, end, "left")
        for k in keys[lo:hi]:
            if k is not None:
                out[(end, k)] += 1
    return out


def test_drop_boxes_under_a_budget_the_query_cannot_meet(
    spark, kafka_bootstrap, netmon_config, tmp_path: Path
) -> None:
    cfg = _config(netmon_config, tmp_path, "netmon.test.overload", partitions=1).replace(
        pipeline={"max_batch_messages": 4},
        # the query boxes alone (the intake box: the next test)
        resources={"manage": True, "cpu_budget": 0.001, "keep_min": 0.2, "intake_min": 1.0},
    )
    acked = _replay(cfg, SAMPLE, records_per_message=100)
    pipeline = start_pipeline(spark, cfg, kinds=("traffic", "topk", "distinct", "sys"))
    try:
        _wait_for(pipeline, cfg, acked)
        pipeline.process_all_available()
    finally:
        pipeline.stop()
    floor = quantize(0.0, cfg.resources.keep_min)
    sampled = set(eligible_queries(cfg, ("topk", "distinct")))
    sys_rows = sorted(
        (r for r in read_results(results_dir(cfg, "sys")).to_pylist() if r["query"] == "packets"),
        key=lambda r: r["batch_id"],
    )
    assert sum(r["packets"] for r in sys_rows) == acked
    # The first batch has nothing measured before it; every batch after the first is over budget.
    assert sys_rows[0]["sample_keep"] == 1.0
    assert len(sys_rows) >= 4
    for r in sys_rows[2:]:
        assert r["sample_keep"] == floor
        assert json.loads(r["sample_fractions"]) == dict.fromkeys(sorted(sampled), floor)

    topk = read_results(results_dir(cfg, "topk")).to_pylist()
    capture = pa.Table.from_batches(list(read_records(SAMPLE)), schema=ARROW_SCHEMA)
    covered = total = 0
    for q in cfg.queries.topk:
        mine = [r for r in topk if r["query"] == q.name and r["count"] is not None]
        assert mine, q.name
        if q.name not in sampled:
            assert all(r["keep"] == 1.0 and r["count_low"] == r["count"] == r["count_high"] for r in mine)
            continue
        assert any(r["keep"] == floor for r in mine), q.name
        assert {r["keep"] for r in mine} <= {1.0, floor}
        assert all(r["count_low"] <= r["count"] <= r["count_high"] for r in mine)
        window_ns = round(q.window_s * 1e9)
        ends = {int(pc.cast(pa.scalar(r["window_end"]), pa.int64()).as_py()) * 1000 for r in mine}
        truth = _true_counts(capture, q.key, window_ns, ends)
        for r in mine:
            if r["keep"] < 1:
                end = int(pc.cast(pa.scalar(r["window_end"]), pa.int64()).as_py()) * 1000
                total += 1
                covered += r["count_low"] <= truth[(end, r["key"])] <= r["count_high"]
    assert total >= 20, total
    assert covered / total >= 0.9, (covered, total)

    # Distinct counts: sampled by item; each sampled row's interval around the exact count of the
    # capture (brute force), for most rows (the interval leaves out the sketch's own error).
    distinct = read_results(results_dir(cfg, "distinct")).to_pylist()
    covered = total = 0
    for q in cfg.queries.distinct:
        mine = [r for r in distinct if r["query"] == q.name]
        assert mine and any(r["keep"] < 1 for r in mine), q.name
        assert all(r["distinct_low"] <= r["distinct"] <= r["distinct_high"] for r in mine)
        truth = _true_distinct(capture, q.count, q.group_by, round(q.window_s * 1e9))
        for r in mine:
            if r["keep"] < 1:
                end = int(pc.cast(pa.scalar(r["window_end"]), pa.int64()).as_py()) * 1000
                total += 1
                covered += r["distinct_low"] <= truth(end, r["group"]) <= r["distinct_high"]
    assert total >= 20, total
    assert covered / total >= 0.85, (covered, total)


def _true_distinct(capture: pa.Table, count: str, group_by: str, window_ns: int):
    """Brute force: the exact distinct items of a group in the window ending at ``end``."""
    ts = capture.column("ts").cast(pa.int64()).to_numpy()
    items = key_text(capture, tuple(count.split(","))).to_pylist()
    groups = key_text(capture, tuple(group_by.split(","))).to_pylist() if group_by else [""] * len(items)

    def truth(end: int, group: str) -> int:
        inside = np.flatnonzero((ts >= end - window_ns) & (ts < end))
        return len({items[i] for i in inside if groups[i] == group and items[i]})

    return truth


def test_the_intake_box_when_the_query_boxes_are_not_enough(
    spark, kafka_bootstrap, netmon_config, tmp_path: Path
) -> None:
    cfg = _config(netmon_config, tmp_path, "netmon.test.intake", partitions=1).replace(
        pipeline={"max_batch_messages": 4},
        # the query boxes exempt (floor 1): the intake box is the only sampling, down to 1/4
        resources={"manage": True, "cpu_budget": 0.001, "keep_min": 1.0, "intake_min": 0.25},
    )
    acked = _replay(cfg, SAMPLE, records_per_message=100)
    pipeline = start_pipeline(spark, cfg, kinds=("traffic", "topk", "distinct", "sys"))
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:  # every record read, most of them not decoded
            pipeline.poll()
            assert pipeline.failed() is None, pipeline.failed()
            st = pipeline.stats.get("traffic")
            if st is not None and st.packets + st.sampled >= acked:
                break
            time.sleep(1.0)
        pipeline.process_all_available()
        # the manager was told the Kafka backlog from Spark's own progress (records: the lag in
        # messages times the batch's records per message); checked against the sys rows below
        told = dict(pipeline.batch_functions[SHARED_QUERY].manager._backlog)
    finally:
        pipeline.stop()
    sys_rows = sorted(
        (r for r in read_results(results_dir(cfg, "sys")).to_pylist() if r["query"] == "packets"),
        key=lambda r: r["batch_id"],
    )
    by_id = {r["batch_id"]: r for r in sys_rows}
    assert told and set(told) <= set(by_id), (told, sorted(by_id))
    for batch_id, (records, _at) in told.items():
        row = by_id[batch_id]
        assert records == pytest.approx(row["lag_messages"] * row["packets"] / row["input_messages"])
    # every record was read: decoded or skipped by the intake box, which fell to its floor
    assert sum(r["packets"] for r in sys_rows) == acked
    assert sum(r["sampled"] for r in sys_rows) > 0
    intakes = [r["intake"] for r in sys_rows]
    assert intakes[0] == 1.0 and 0.25 in intakes and set(intakes) <= {1.0, 0.5, 0.25}
    capture = pa.Table.from_batches(list(read_records(SAMPLE)), schema=ARROW_SCHEMA)

    # traffic: per (window, protocol), the interval around the brute-force count
    traffic = read_results(results_dir(cfg, "traffic")).to_pylist()
    window_ns = round(cfg.pipeline.traffic_window_s * 1e9)
    ts = capture.column("ts").cast(pa.int64()).to_numpy()
    protos = capture.column("proto").to_pylist()
    truth = Counter((int(t) // window_ns * window_ns, p) for t, p in zip(ts, protos, strict=True))
    sampled = [r for r in traffic if r["keep"] < 1]
    assert sampled and {r["keep"] for r in sampled} <= {0.5, 0.25}
    covered = sum(
        r["packets_low"] <= truth[(_ns(r["window_start"]), r["proto"])] <= r["packets_high"] for r in sampled
    )
    assert covered / len(sampled) >= 0.9, (covered, len(sampled))

    # top-k (packets): each sampled row's interval at its fraction (the box's times the intake's)
    topk = read_results(results_dir(cfg, "topk")).to_pylist()
    covered = total = 0
    for q in cfg.queries.topk:
        mine = [r for r in topk if r["query"] == q.name and r["count"] is not None and r["keep"] < 1]
        if q.weight != "packets":
            assert all(r["count_low"] is None for r in mine)  # a byte count has no interval
            continue
        counts = _true_counts(capture, q.key, round(q.window_s * 1e9), {_ns(r["window_end"]) for r in mine})
        for r in mine:
            total += 1
            covered += r["count_low"] <= counts[(_ns(r["window_end"]), r["key"])] <= r["count_high"]
    assert total >= 20, total
    assert covered / total >= 0.9, (covered, total)

    # distinct: the interval widened for a record sample, around the exact count
    distinct = read_results(results_dir(cfg, "distinct")).to_pylist()
    covered = total = 0
    for q in cfg.queries.distinct:
        exact = _true_distinct(capture, q.count, q.group_by, round(q.window_s * 1e9))
        for r in distinct:
            if r["query"] == q.name and r["keep"] < 1:
                total += 1
                covered += r["distinct_low"] <= exact(_ns(r["window_end"]), r["group"]) <= r["distinct_high"]
    assert total >= 20, total
    assert covered / total >= 0.85, (covered, total)


def _ns(timestamp: object) -> int:
    return int(pc.cast(pa.scalar(timestamp), pa.int64()).as_py()) * 1000


def test_window_reduction_when_the_state_is_over_the_memory_budget(
    spark, kafka_bootstrap, netmon_config, tmp_path: Path
) -> None:
    from netmon.config import TopKQuery

    ranged = TopKQuery(
        name="top-sources", key="src_ip", window_s=10.0, sub_window_s=1.0, k=50, window_range_s=(2.0, 10.0)
    )
    cfg = _config(netmon_config, tmp_path, "netmon.test.window-reduction", partitions=1).replace(
        pipeline={"max_batch_messages": 4},
        queries={"topk": (ranged,)},
        # CPU to spare (no drop box), state over any budget: the window goes to its minimum
        resources={
            "manage": True,
            "cpu_budget": 64.0,
            "memory_budget": "1k",
            "intake_min": 1.0,
            "granularity_steps": 0,
        },
    )
    acked = _replay(cfg, SAMPLE, records_per_message=100)
    pipeline = start_pipeline(spark, cfg, kinds=("traffic", "topk", "sys"))
    try:
        _wait_for(pipeline, cfg, acked)
        pipeline.process_all_available()
    finally:
        pipeline.stop()
    sys_rows = [r for r in read_results(results_dir(cfg, "sys")).to_pylist() if r["query"] == "packets"]
    assert all(r["sample_keep"] == 1.0 for r in sys_rows)  # no drop box: CPU was never short
    rows = [r for r in read_results(results_dir(cfg, "topk")).to_pylist() if r["count"] is not None]
    spans = {r["window_s"] for r in rows}
    # the first batch runs with the configured window (nothing measured before it), then the
    # manager's: the range's minimum
    assert 2.0 in spans and spans <= {2.0, 10.0}, spans
    capture = pa.Table.from_batches(list(read_records(SAMPLE)), schema=ARROW_SCHEMA)
    reduced = [r for r in rows if r["window_s"] == 2.0]
    ends = {_ns(r["window_end"]) for r in reduced}
    short = _true_counts(capture, "src_ip", 2_000_000_000, ends)
    full = _true_counts(capture, "src_ip", 10_000_000_000, ends)
    # Alg. 6's counts are lower bounds of the window's true counts: of the 2-s window, not the 10-s
    assert all(r["count"] <= short[(_ns(r["window_end"]), r["key"])] for r in reduced)
    assert sum(r["count"] for r in reduced) > 0.9 * sum(
        short[(_ns(r["window_end"]), r["key"])] for r in reduced
    )
    assert any(full[(_ns(r["window_end"]), r["key"])] > r["count"] for r in reduced)  # the windows differ
