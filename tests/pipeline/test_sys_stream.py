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
    # Two listener kinds side by side, both on the one query that runs every kind (the joins too).
    assert {kind: names for kind, (names, _) in pipeline.listeners.items()} == {
        "shedding": ("packets",),
        "sys": ("packets",),
    }
    assert set(pipeline.queries) == {"packets"}
    # The oracle: the batches the query reported as run (idle triggers have no addBatch).
    query = pipeline.queries["packets"]
    ran = sorted(p["batchId"] for p in query.recentProgress if "addBatch" in (p["durationMs"] or {}))
    assert len(ran) >= 3, ran
    table = read_results(results_dir(cfg, "sys"))
    assert table is not None
    rows = table.to_pylist()
    assert {r["query"] for r in rows} == {"packets"}
    assert sorted(r["batch_id"] for r in rows) == ran
    commits = sorted(int(p.stem) for p in (results_dir(cfg, "sys") / "packets" / COMMITS).glob("*.json"))
    assert commits == ran
    assert all(r["batch_ms"] > 0 and r["lag_messages"] is not None for r in rows)
    assert all(r["trigger_s"] == cfg.pipeline.trigger_s for r in rows)
    assert sum(r["packets"] for r in rows) == acked
    assert all(r["max_batch_messages"] == 10 and r["input_messages"] <= 10 for r in rows)
    assert rows[-1]["lag_messages"] == 0  # caught up at the end
    assert all(
        r["stage1_s"] is not None and r["traffic_s"] is not None and r["joins_s"] is not None
        for r in rows
        if r["input_messages"]
    )
    # The joins' held windows and the fractions in force are on every batch's row; those of a
    # batch with join input are the ones the shedding rows say it applied.
    assert all(r["shed_fractions"] is not None for r in rows if r["input_messages"])
    assert any(r["join_state_rows"] for r in rows)
    shedding = read_results(results_dir(cfg, "shedding"))
    assert shedding is not None, "no shedding rows"
    applied = {r["batch_id"]: [r["x_left"], r["x_right"]] for r in shedding.to_pylist()}
    in_force = {r["batch_id"]: json.loads(r["shed_fractions"]) for r in rows if r["shed_fractions"]}
    assert applied and set(applied) <= set(in_force)
    for batch_id, fractions in applied.items():
        assert in_force[batch_id]["handshake"] == pytest.approx(fractions), batch_id
    # The status line counts its commits; the republisher sent every file on netmon.sys.
    assert pipeline.stats["sys"].batches == len(rows)
    assert pipeline.publisher is not None
    sent = pipeline.publisher._done("sys")
    root = results_dir(cfg, "sys")
    assert sent == {f.relative_to(root).as_posix() for f in result_files(root)}


def test_the_state_columns_are_what_each_kind_holds_on_disk(
    spark, kafka_bootstrap, netmon_config, tmp_path: Path
) -> None:
    import base64

    import pyarrow.parquet as pq

    from analytics.topk_merge import TopKMerge
    from netmon.results import SHARED_QUERY

    cfg = _config(netmon_config, tmp_path, "netmon.test.sys-state", partitions=2).replace(
        pipeline={"max_batch_messages": 10}
    )
    acked = _replay(cfg, SAMPLE, records_per_message=200)
    pipeline = start_pipeline(spark, cfg, kinds=("traffic", "topk", "distinct", "sys"))
    try:
        _wait_for(pipeline, cfg, acked)
        pipeline.process_all_available()
    finally:
        pipeline.stop()
    table = read_results(results_dir(cfg, "sys"))
    assert table is not None
    rows = sorted(table.to_pylist(), key=lambda r: r["batch_id"])
    last = rows[-1]["batch_id"]
    kinds = pipeline.batch_functions[SHARED_QUERY].functions
    # The oracles: the state each kind saved after its last batch, read back from its files.
    traffic = kinds["traffic"].state.load(last + 1)
    assert rows[-1]["traffic_state_rows"] == len(traffic["open"])
    topk = kinds["topk"]
    saved = topk.state.load(last + 1)
    merges = [
        TopKMerge.from_bytes(base64.b64decode(blob), topk.params[name])
        for name, blob in saved["merges"].items()
    ]
    open_rows = pq.read_metadata(topk.store / saved["open"]).num_rows
    assert rows[-1]["topk_state_rows"] == open_rows + sum(m.algorithm.space for m in merges) > 0
    distinct = kinds["distinct"]
    held = sum(pq.read_metadata(p).num_rows for p in distinct.store.glob("batch-*/part-0.parquet"))
    assert rows[-1]["distinct_state_rows"] == held > 0
    # every batch that ran the kinds says its state
    assert all(r[f"{k}_state_rows"] is not None for r in rows for k in ("traffic", "topk", "distinct"))
