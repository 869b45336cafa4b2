"""The ``sys`` kind on the real broker and real Spark: a row per batch of each query, republished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netmon.results import COMMITS, read_results, result_files, results_dir
from pipeline.job import start_pipeline
from tests.pipeline.test_pipeline_e2e import SAMPLE, _config, _replay, _wait_for

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_one_row_per_batch_of_each_query(spark, kafka_bootstrap, netmon_config, tmp_path: Path) -> None:
    # Small messages and batches: the shared query takes several batches over the capture.
    cfg = _config(netmon_config, tmp_path, "netmon.test.sys", partitions=2).replace(
        pipeline={"max_batch_messages": 10}
    )
    acked = _replay(cfg, SAMPLE, records_per_message=200)
    pipeline = start_pipeline(spark, cfg, kinds=("traffic", "joins", "shedding", "sys"))
    try:
        _wait_for(pipeline, cfg, acked)
        pipeline.process_all_available()
    finally:
        pipeline.stop()  # the listener handles every query's last progress before it goes
    # Two listener kinds side by side: shedding on the joins query, sys on both queries.
    assert {kind: names for kind, (names, _) in pipeline.listeners.items()} == {
        "shedding": ("joins",),
        "sys": ("packets", "joins"),
    }
    # The oracle: the batches each query reported as run (idle triggers have no addBatch).
    ran = {
        name: sorted(p["batchId"] for p in query.recentProgress if "addBatch" in (p["durationMs"] or {}))
        for name, query in pipeline.queries.items()
    }
    assert len(ran["packets"]) >= 3 and ran["joins"], ran
    table = read_results(results_dir(cfg, "sys"))
    assert table is not None
    rows = table.to_pylist()
    for query in ("packets", "joins"):
        mine = [r for r in rows if r["query"] == query]
        assert sorted(r["batch_id"] for r in mine) == ran[query], query
        commits = sorted(int(p.stem) for p in (results_dir(cfg, "sys") / query / COMMITS).glob("*.json"))
        assert commits == ran[query], query
        assert all(r["batch_ms"] > 0 and r["lag_messages"] is not None for r in mine), query
        assert all(r["trigger_s"] == cfg.pipeline.trigger_s for r in mine)
    shared = [r for r in rows if r["query"] == "packets"]
    assert sum(r["packets"] for r in shared) == acked
    assert sum(r["input_messages"] for r in shared) == sum(
        r["input_messages"] for r in rows if r["query"] == "joins"
    )
    assert all(r["max_batch_messages"] == 10 and r["input_messages"] <= 10 for r in shared)
    assert shared[-1]["lag_messages"] == 0  # caught up at the end
    assert all(
        r["stage1_s"] is not None and r["traffic_s"] is not None for r in shared if r["input_messages"]
    )
    # The fractions in force on a joins batch are those the shedding rows say it applied.
    shedding = read_results(results_dir(cfg, "shedding"))
    assert shedding is not None, "no shedding rows"
    applied = {r["batch_id"]: [r["x_left"], r["x_right"]] for r in shedding.to_pylist()}
    in_force = {r["batch_id"]: json.loads(r["shed_fractions"]) for r in rows if r["query"] == "joins"}
    assert set(applied) <= set(in_force)
    for batch_id, fractions in applied.items():
        assert in_force[batch_id]["handshake"] == pytest.approx(fractions), batch_id
    # The status line counts its commits; the republisher sent every file on netmon.sys.
    assert pipeline.stats["sys"].batches == len(rows)
    assert pipeline.publisher is not None
    sent = pipeline.publisher._done("sys")
    root = results_dir(cfg, "sys")
    assert sent == {f.relative_to(root).as_posix() for f in result_files(root)}
