"""``bench.topk`` (``netmon bench topk`` / ``topk-offline``).

Equal-memory sizing, scoring, reports, the tshark run.
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.topk import (
    _accuracy,
    _ExactWindows,
    _reports,
    approx_memory,
    bench_topk_offline,
    format_offline_report,
    format_report,
    sketch_counters,
    window_score,
)
from netmon.config import TopKQuery

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def test_sketch_counters_follow_sparks_map_sizing() -> None:
    # next power of two >= ceil(m / 0.75), at least 8 slots, 3/4 of the slots are counters
    sizes = {1: 6, 6: 6, 7: 12, 12: 12, 13: 24, 600: 768, 768: 768, 769: 1536}
    assert {m: sketch_counters(m) for m in sizes} == sizes
    with pytest.raises(ValueError, match="maxItemsTracked"):
        sketch_counters(0)
    with pytest.raises(ValueError, match="maxItemsTracked"):
        sketch_counters(1_000_001)


def test_approx_memory_is_algorithm_6s_k_pairs_per_sub_window() -> None:
    assert approx_memory(3, 4) == {
        "sub_window": 3,
        "window": 12,
        "sub_window_counters": 6,
        "window_counters": 12,
    }
    assert approx_memory(10, 200_000)["window"] == 1_000_000  # Spark's limit


def test_window_score_counts_ties_and_unknown_keys() -> None:
    true = {"a": 9, "b": 5, "c": 5, "d": 1}
    # k = 2: the k-th count is 5, so b and c both belong to the top 2
    assert window_score([("a", 9), ("c", 5)], true, 2) == (1.0, 1.0, 0.0)
    # a key the window does not hold is a miss and has no relative error
    assert window_score([("a", 10), ("x", 3)], true, 2) == (0.5, 0.5, pytest.approx(1 / 9))
    # only the first k reported items are scored
    assert window_score([("d", 1), ("a", 9), ("b", 5)], true, 1) == (0.0, 0.0, 0.0)
    # fewer keys than k: recall over the keys there are
    assert window_score([("a", 9)], {"a": 9}, 5) == (1.0, 1.0, 0.0)
    assert window_score([], true, 3) == (0.0, None, None)


def test_reports_rank_items_and_keep_empty_windows() -> None:
    rows = [(20, 2, "b", 3), (10, None, None, None), (20, 1, "a", 4), (30, 0, None, None)]
    assert _reports(rows) == {10: [], 20: [("a", 4), ("b", 3)], 30: []}


def _inputs(tmp_path: Path) -> Path:
    """Records at seconds 0..5 (b = 1 s): a, a, b in each second, plus c in second 3."""
    ts, keys = [], []
    for second in range(6):
        for key in ("a", "a", "b") + (("c",) * 4 if second == 3 else ()):
            ts.append(second * 10**9 + len(ts))
            keys.append(key)
    keys[1] = None  # a record without the key is not counted
    table = pa.table({"ts_ns": pa.array(ts, pa.int64()), "src_ip": pa.array(keys, pa.string())})
    out = tmp_path / "input"
    out.mkdir()
    pq.write_table(table, out / "part-0000.parquet")
    return out


def test_exact_windows_and_accuracy(tmp_path: Path) -> None:
    exact = _ExactWindows(_inputs(tmp_path), "src_ip", 10**6, 2)
    assert exact.first_full_end_us == 2 * 10**6
    assert exact.counts(2 * 10**6) == {"a": 3, "b": 2}
    assert exact.counts(4 * 10**6) == {"a": 4, "b": 2, "c": 4}
    ends = [e * 10**6 for e in range(1, 7)]
    outputs = {
        "exact": {e: sorted(exact.counts(e).items(), key=lambda kv: (-kv[1], kv[0]))[:1] for e in ends},
        "empty": {e: [] for e in ends[:-1]},  # one window fewer: scored on the common ones
    }
    result = _accuracy(outputs, exact, 1)
    assert result["windows"] == 4  # ends 2..5 s: full and reported by both
    assert result["contenders"]["exact"] == {
        "recall_pct": 100.0,
        "precision_pct": 100.0,
        "rel_err_pct": 0.0,
        "empty_reports": 0,
    }
    assert result["contenders"]["empty"]["empty_reports"] == 4
    assert result["contenders"]["empty"]["precision_pct"] is None


def _run(name: str, outputs: str, n: int) -> dict[str, object]:
    return {
        "name": name,
        "wall_s": 10.0,
        "packets_per_s": 1000,
        "steady_packets_per_s": 2000,
        "mean_batch_ms": 500,
        "state_rows_max": 10,
        "state_bytes_max": 2_000_000,
        outputs: n,
        "state_final": [{"operator": "stateStoreSave", "rows": 1, "bytes": 100}],
    }


def test_format_report_lists_every_contender() -> None:
    sides = {
        "subwindow": _run("sub-window top-k (Alg. 6)", "reports", 5),
        "sliding": _run("exact sliding window", "windows", 6),
        "approx_combined": _run("approx_top_k sub-windows", "windows", 6),
    }
    score = {"recall_pct": 90.0, "precision_pct": None, "rel_err_pct": None, "empty_reports": 5}
    result = {
        "packets": 100,
        "duration_s": 10.0,
        "files": 2,
        "master": "local[2]",
        "shuffle_partitions": 2,
        "changelog_checkpointing": "true",
        "query": {"key": "src_ip", "weight": "packets", "N_s": 10.0, "b_s": 1.0, "k": 3},
        "approx_max_items_tracked": approx_memory(3, 10),
        **sides,
        "ratio_sliding": 1.0,
        "steady_ratio_sliding": 1.0,
        "ratio_approx_combined": 2.0,
        "steady_ratio_approx_combined": 3.0,
        "accuracy": {"windows": 5, "contenders": dict.fromkeys(sides, score)},
    }
    text = "\n".join(format_report(result))
    assert "maxItemsTracked 3 per sub-window (6 counters), 30 per window (48 counters)" in text
    assert "sub-window / approx_top_k sub-windows): 2.00x overall, 3.00x after the first batch" in text
    assert "approx_top_k sliding" not in text
    assert "(5 full windows every contender reported)" in text


def _fake_tshark(directory: Path) -> None:
    script = directory / "tshark"
    script.write_text("#!/bin/sh\necho 'IPv4 Endpoints'\necho '10.0.0.1 5'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_offline_bench_times_both_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tshark(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    capture = SAMPLES / "heavy-hitter-burst.pcap"
    result = bench_topk_offline(capture=str(capture), window="10s", sub_window="1s", k=3, repeat=1)
    ours = result["ours"]
    assert ours["command"].startswith("netmon analyze topk ")
    assert ours["output_lines"] > 0 and ours["max_rss_mb"] > 0 and len(ours["runs"]) == 1
    assert result["tshark"]["output_lines"] == 2
    assert result["speedup"] >= 0 and result["packets"] is None
    assert "faster than tshark" in "\n".join(format_offline_report(result))


def test_offline_bench_without_tshark_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no tshark there
    result = bench_topk_offline(capture=str(SAMPLES / "heavy-hitter-burst.pcap"), repeat=1)
    assert result["tshark"] is None and "speedup" not in result
    text = "\n".join(format_offline_report(result))
    assert "apt-get install --no-install-recommends tshark" in text


@pytest.mark.spark
def test_approx_top_k_contenders_rank_each_window(spark) -> None:
    from pyspark.sql import functions as F

    from bench.topk import build_approx_combined, build_approx_sliding

    t0 = 1_700_000_000
    rows = [
        (datetime.fromtimestamp(t0 + s, UTC), key)
        for s in range(4)
        for key in ("10.0.0.1",) * 3 + ("10.0.0.2",) * (s % 2 + 1)
    ]
    packets = spark.createDataFrame(rows, "ts timestamp, src_ip string")
    q = TopKQuery(name="t", key="src_ip", window_s=2.0, sub_window_s=1.0, k=2)
    for build in (build_approx_combined, build_approx_sliding):
        ranked = build(packets, q).select(F.unix_seconds("window_end").alias("end"), "rank", "key", "count")
        out = {(r.end - t0, r.rank): (r.key, r["count"]) for r in ranked.collect()}
        # the window [1 s, 3 s): 6 packets of .1, 3 of .2 (few keys: the sketches are exact)
        assert out[(3, 1)] == ("10.0.0.1", 6), build.__name__
        assert out[(3, 2)] == ("10.0.0.2", 3), build.__name__
        assert {end for end, _ in out} == {1, 2, 3, 4, 5}, build.__name__
