"""``bench.join`` (``netmon bench join``): runs of one or several strategies, their configuration
and summaries.

The benchmark itself (broker, Spark, minutes of replay) is run by hand and recorded in
``docs/performance.md``; these check what it is built from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.join import _config, _summary, format_report, query_name, run_strategies
from netmon.config import load_config


def test_run_strategies_splits_a_paired_run() -> None:
    assert run_strategies("pni") == ("pni",)
    assert run_strategies("pni+cf") == ("pni", "cf")
    assert run_strategies(" pni + cf ") == ("pni", "cf")
    with pytest.raises(ValueError, match="'pni\\+pni'.*distinct"):
        run_strategies("pni+pni")
    with pytest.raises(ValueError, match="got 'max-subset'"):
        run_strategies("pni+max-subset")
    with pytest.raises(ValueError, match="distinct"):
        run_strategies("+")


def test_paired_config_has_one_query_per_strategy_and_the_budget_scope(tmp_path: Path) -> None:
    base = load_config(None, env={})
    cfg = _config(
        base,
        tmp_path,
        "t",
        ("pni", "cf"),
        budget=0.6,
        trigger_s=2.0,
        window_s=30.0,
        bootstrap="127.0.0.1:1",
        smoothing=0.5,
        max_step=0.25,
        budget_scope="operator",
    )
    queries = cfg.queries.join
    assert [(q.name, q.strategy) for q in queries] == [("web_pni", "pni"), ("web_cf", "cf")]
    # the same join twice: only the strategy differs
    assert {(q.query, q.left, q.right, q.key, q.window_s) for q in queries} == {
        ("link", "dst_port=443", "dst_port=80", "src_ip", 30.0)
    }
    assert cfg.shedding.cpu_budget == 0.6
    assert cfg.shedding.budget_scope == "operator"
    assert cfg.pipeline.trigger_s == 2.0


def _row(query: str, batch: int, results: int, busy: float, x: float) -> dict:
    return {
        "query": query,
        "batch_id": batch,
        "utilisation": busy / 5,
        "busy_s": busy,
        "batch_utilisation": 0.7,
        "batch_factor": 3.0,
        "x_left": x,
        "x_right": 1.0,
        "next_x_left": x,
        "next_x_right": 1.0,
        "results": results,
        "unshed_estimate": float(results),
        "n_left": 10,
        "n_right": 20,
    }


def test_summary_takes_its_own_querys_rows_of_a_paired_run() -> None:
    stats = []
    for b in range(4):
        stats.append(_row(query_name("pni"), b, 100 + b, 1.0, 0.5))
        stats.append(_row(query_name("cf"), b, 50 + b, 0.5, 0.25))
    run = {
        "samples": [{"t_s": 5.0 * b, "batch": b, "ms": 3000 + b, "packets": 30} for b in range(4)],
        "lag": [(1.0, 5), (2.0, 7)],
        "results": {query_name("pni"): 406, query_name("cf"): 206},
        "produced": 120,
    }
    pni = _summary("pni", "pni+cf", run, stats, 0.8)
    cf = _summary("cf", "pni+cf", run, stats, 0.8)
    assert (pni["results"], cf["results"]) == (406, 206)
    # the second half: batches 2 and 3
    assert (pni["results_second_half"], cf["results_second_half"]) == (102 + 103, 52 + 53)
    assert pni["packets_second_half"] == cf["packets_second_half"] == 60
    assert (pni["operator_s"], cf["operator_s"]) == (4.0, 2.0)
    assert (pni["x_last"], cf["x_last"]) == ([0.5, 1.0], [0.25, 1.0])
    # shared by the pipeline: batches, packets, lag
    assert pni["batches"] == cf["batches"] == 4
    assert pni["packets_processed"] == 120
    assert pni["run"] == cf["run"] == "pni+cf"
    lines = format_report(
        {
            "capture": "x.pcap",
            "pps": 10.0,
            "seconds": 1.0,
            "trigger_s": 5.0,
            "budget": 0.8,
            "window_s": 30.0,
            "runs": [pni, cf],
        }
    )
    assert lines[2].startswith("pni (pni+cf)") and "406" in lines[2] and "205" in lines[2]
    assert lines[3].startswith("cf (pni+cf)") and "0.250/1.000" in lines[3]
