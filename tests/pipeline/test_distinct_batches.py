"""``SlidingDistinct`` driven batch by batch, as ``foreachBatch`` calls it: answers, late rows, reruns.

Generated packets, cut into micro-batches, go through the batch function on real Spark (no
stream, so each call is one micro-batch under the test's control); the committed rows must equal
the offline engine's reports over the same records, every group of every slide.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from analytics.distinct_offline import distinct_reports
from netmon.config import DistinctQuery
from netmon.results import read_results
from pipeline.distinct import SlidingDistinct, chains_of, offline_query

pytestmark = pytest.mark.spark

T0 = datetime(2024, 3, 1, tzinfo=UTC)
WATERMARK_MS = 2000
QUERIES = [
    DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(name="flows", count="src_ip,dst_ip", group_by="", window_s=6, sub_window_s=1, top=0),
    DistinctQuery(
        name="short", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=0.5, lg_k=8, top=0
    ),
]
SCHEMA = "ts timestamp, src_ip string, dst_ip string, is_control boolean"


def _packets(seed: int, seconds: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for ms in sorted(rng.sample(range(seconds * 1000), 1500)):
        dst = "192.0.2.7" if rng.random() < 0.3 else f"198.51.100.{rng.randrange(30)}"
        src = f"10.{rng.randrange(4)}.{rng.randrange(256)}.{rng.randrange(256)}"
        rows.append((T0 + timedelta(milliseconds=ms), src, dst, False))
    return rows


def _offline(rows: list[tuple]) -> dict[tuple[str, datetime, str], int]:
    table = pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.timestamp("ns", tz="UTC")),
            "src_ip": [r[1] for r in rows],
            "dst_ip": [r[2] for r in rows],
        }
    )
    out = {}
    for q in QUERIES:
        for r in distinct_reports([table], offline_query(q), lg_k=q.lg_k, watermark_ns=WATERMARK_MS * 10**6):
            end = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=r.end_ns // 1000)
            for group, n in r.groups:
                out[(q.name, end, group)] = n
    return out


def _committed(results) -> dict[tuple[str, datetime, str], int]:
    table = read_results(results)
    rows = [] if table is None else table.to_pylist()
    got = {(r["query"], r["window_end"], r["group"]): r["distinct"] for r in rows}
    assert len(got) == len(rows), "a row committed twice"
    return got


def test_batches_give_the_offline_answers_and_a_rerun_changes_nothing(spark, tmp_path):
    rows = _packets(seed=3, seconds=30)
    # A control row past the end moves event time (it counts nothing); then a late packet, whose
    # sub-window an earlier batch closed, is left out and counted.
    closing = (rows[-1][0] + timedelta(seconds=10), None, None, True)
    late = (rows[-1][0] - timedelta(seconds=20), "10.9.9.9", "192.0.2.7", False)
    cuts = [0, 200, 201, 700, 1100, len(rows)]
    batches = [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)] + [[closing], [late], []]
    function = SlidingDistinct(
        chains_of(QUERIES), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS
    )
    for batch_id, batch in enumerate(batches):
        function(spark.createDataFrame(batch, SCHEMA), batch_id)
        if batch_id == 3:
            # Spark runs a batch again after a crash: same input, same rows, none twice.
            before = _committed(tmp_path / "results")
            function(spark.createDataFrame(batch, SCHEMA), batch_id)
            assert _committed(tmp_path / "results") == before
    expected = _offline([*rows, (closing[0], None, None)])
    got = _committed(tmp_path / "results")
    assert got == expected
    assert {q for q, _, _ in got} == {"ddos", "flows", "short"}
    # The late packet, once per query of the first chain (late rows are counted there).
    assert function.late_rows == len(chains_of(QUERIES)[0].queries) == 1
    # Once every window closed, no stored sketch is needed: only the markers of the last batch
    # before and of this one stay (a rerun of this batch starts from the one before).
    stored = sorted(p.name for p in (tmp_path / "checkpoint" / "sketches").glob("batch-*"))
    assert stored == ["batch-000006", "batch-000006.json", "batch-000007", "batch-000007.json"]


def test_ranking_keeps_each_querys_top(spark, tmp_path):
    rows = _packets(seed=5, seconds=12)
    queries = [dataclasses.replace(QUERIES[0], top=3)]
    function = SlidingDistinct(
        chains_of(queries), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS
    )
    function(spark.createDataFrame(rows, SCHEMA), 0)
    table = read_results(tmp_path / "results").to_pylist()
    by_end: dict[datetime, list[tuple[int, str, int]]] = {}
    for r in table:
        by_end.setdefault(r["window_end"], []).append((r["rank"], r["group"], r["distinct"]))
    full = _offline(rows)
    assert by_end
    for end, ranked in by_end.items():
        ranked.sort()
        every = sorted(((-n, g) for (q, e, g), n in full.items() if q == "ddos" and e == end))[:3]
        assert [(g, n) for _, g, n in ranked] == [(g, -n) for n, g in every]
        assert [rank for rank, _, _ in ranked] == list(range(1, len(ranked) + 1))


def test_a_new_process_rebuilds_stage_3_from_the_store(spark, tmp_path):
    # Stage 3 carries state between batches in memory; a restarted process (a new function on the
    # same checkpoint), and a batch run again, rebuild it from the store and give the same rows.
    rows = _packets(seed=7, seconds=30)
    closing = (rows[-1][0] + timedelta(seconds=10), None, None, True)
    cuts = [0, 150, 300, 450, 600, 900, 1200, len(rows)]
    batches = [rows[a:b] for a, b in zip(cuts, cuts[1:], strict=False)] + [[closing]]

    def function():
        return SlidingDistinct(
            chains_of(QUERIES), tmp_path / "results", tmp_path / "checkpoint", watermark_ms=WATERMARK_MS
        )

    current = function()
    rebuilt = []
    for batch_id, batch in enumerate(batches):
        if batch_id in (3, 6):
            current = function()  # a restart from the checkpoint
        for run in (1, 2) if batch_id == 4 else (1,):  # batch 4 runs again, as after a crash
            before = current.timings.get("rebuild_s")
            current(spark.createDataFrame(batch, SCHEMA), batch_id)
            if current.timings.get("rebuild_s") != before:
                rebuilt.append((batch_id, run))
    # Rebuilt on the first batch, after each restart and on the rerun; carried after a commit.
    assert (0, 1) in rebuilt and (4, 2) in rebuilt
    assert not {(1, 1), (2, 1), (4, 1), (5, 1), (7, 1)} & set(rebuilt)
    assert _committed(tmp_path / "results") == _offline([*rows, (closing[0], None, None)])
