"""``bench.distinct`` (``netmon bench distinct``) end to end on a small capture.

Both Spark queries against the oracle.
"""

from __future__ import annotations

import pytest

from bench.distinct import bench_distinct, format_report

pytestmark = pytest.mark.spark


def test_bench_reports_every_oracle_pair_with_the_errors_it_measured(spark, netmon_config, tmp_path):
    # Two input partitions per micro-batch, as from a two-partition topic.
    r = bench_distinct(
        netmon_config.replace(paths={"data_dir": tmp_path / "data"}),
        packets=30_000,
        duration_s=90,
        files=4,
        files_per_batch=2,
        repeat=1,
    )
    assert r["rows"] == 30_000 and r["files_per_batch"] == 2 and r["n_over_b"] == 60
    ours, baseline = r["runs"]["sub-window-hll"], r["runs"]["approx-rsd-0.05"]
    for run in (ours, baseline):
        assert run["pairs"] == r["oracle_pairs"] > 1000
        assert run["error"]["missing"] == run["error"]["extra"] == 0
    # Ours: every small count exact and every answer within the HLL bound (the terms).
    assert ours["error"]["small_exact"] == 1.0
    assert ours["error"]["within_bound"] == 1.0
    assert ours["error"]["max_rel_err"] <= r["bound"]
    # 2 micro-batches of data (+ the closing one); ours keeps no Spark state, the baseline does.
    assert ours["batches"] == 3 and ours["state_rows"] == 0 < baseline["state_rows"]
    assert baseline["ours_speedup_wall"] == pytest.approx(baseline["wall_s"] / ours["wall_s"], rel=0.02)
    text = "\n".join(format_report(r))
    assert "2 per micro-batch" in text and "sub-window-hll" in text
