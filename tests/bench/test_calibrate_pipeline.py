"""``bench.calibrate_pipeline`` (``netmon bench calibrate --pipeline``): the per-batch and pipeline
terms of the cost model, fitted on the running pipeline's own ``sys`` rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from analytics.cost_model import CostConstants, load_constants
from analytics.explain import part_fits
from bench.calibrate_pipeline import PARTS, derive


def test_derive_recovers_the_fixed_cost_and_the_factor_of_known_lines() -> None:
    rng = np.random.default_rng(3)
    fixed = {"stage1": 0.12, "topk": 0.025, "distinct": 0.02, "features": 0.011, "joins": 0.026}
    slope = {"stage1": 2.5e-5, "topk": 9.7e-7, "distinct": 1.4e-6, "features": 6.4e-7, "joins": 1.3e-6}
    sizes = rng.integers(4_000, 80_000, 30)
    rows = [
        {"packets": int(n), **{f"{p}_s": fixed[p] + slope[p] * n + rng.normal(0, 1e-4) for p in fixed}}
        for n in sizes
    ]
    rate = 40_000.0
    formulas = {
        "stage1": {"cpu": 0.1},
        "topk": {"cpu": 0.06},
        "distinct": {"cpu": 0.8},
        "features": {"cpu": 0.02},
        "joins": {"cpu": 0.0},
    }
    found, notes = derive(part_fits(rows), formulas, rate)
    for p in ("stage1", "topk", "distinct", "features", "joins"):
        assert found[f"{p}_batch_s"] == pytest.approx(fixed[p], abs=2e-3)
    assert found["stage1_factor"] == pytest.approx(slope["stage1"] / (0.1 / rate), rel=0.01)
    assert found["topk_factor"] == pytest.approx(slope["topk"] / (0.06 / rate), rel=0.02)
    assert found["features_factor"] == pytest.approx(slope["features"] / (0.02 / rate), rel=0.02)
    assert found["features_row_s"] == 0.0  # an older calibration's per-packet term, replaced
    assert "joins_factor" not in found and "factor 1" in notes["joins"]  # no formula to scale
    assert "traffic" in notes and "traffic_batch_s" not in found  # no rows: defaults kept
    assert "other" in notes and "other_batch_s" not in found  # rows without batch_ms


def test_the_batch_time_outside_every_part_is_fitted_as_other() -> None:
    """A batch's ``batch_ms`` beyond its parts' seconds (Spark's offsets, commit, progress) is
    the ``other`` part: its fixed and per-packet terms set how long a batch runs."""
    rng = np.random.default_rng(5)
    rows = []
    for n in rng.integers(5_000, 90_000, 40):
        parts = {"stage1_s": 0.3 + 4e-6 * n, "topk_s": 0.03 + 1e-6 * n, "traffic_s": None}
        outside = 0.18 + 2e-7 * n + rng.normal(0, 5e-4)
        total = sum(v for v in parts.values() if v is not None) + outside
        rows.append({"packets": int(n), "batch_ms": total * 1000, **parts})
    fits = part_fits(rows)
    assert fits["other"]["fixed_s"] == pytest.approx(0.18, abs=2e-3)
    assert fits["other"]["per_packet_s"] == pytest.approx(2e-7, rel=0.05)
    found, _ = derive(fits, {"stage1": {"cpu": 0.1}}, 40_000.0)
    assert found["other_batch_s"] == pytest.approx(0.18, abs=2e-3)
    assert found["other_row_s"] == pytest.approx(2e-7, rel=0.05)
    assert "other_factor" not in found
    # every key derive returns is a constant the model knows
    assert set(found) <= {f.name for f in dataclasses.fields(CostConstants)}


def test_a_falling_line_costs_its_mean_per_batch() -> None:
    rows = [{"packets": n, "topk_s": 0.5 - 1e-6 * n} for n in (1_000, 10_000, 100_000)]
    found, notes = derive(part_fits(rows), {"topk": {"cpu": 0.01}}, 1_000.0)
    mean = sum(0.5 - 1e-6 * n for n in (1_000, 10_000, 100_000)) / 3
    assert found == {"topk_batch_s": pytest.approx(mean)} and "not positive" in notes["topk"]


@pytest.mark.spark
@pytest.mark.kafka
def test_a_small_calibration_fits_every_part_and_explain_uses_it(spark, tmp_path: Path) -> None:
    from analytics.cost_model import Workload
    from analytics.explain import explain
    from bench.calibrate import calibrate
    from netmon.config import load_config

    cfg = load_config(None, env={}).replace(paths={"state_dir": tmp_path / "state"})
    result = calibrate(
        cfg,
        scale=0.2,
        repeats=1,
        pipeline=True,
        spark=spark,
        pipeline_options={"packets": 16_000, "sizes": (2, 4, 8)},
    )
    measured = result["pipeline"]
    # three drains of 16 messages in batches of 2, 4 and 8 messages, each without its first batch
    assert measured["batches"] >= 7
    assert set(measured["fits"]) == set(PARTS)
    stored = load_constants(cfg.paths.state_dir)
    # every part is set from its own fit, or left at its defaults with the reason said (a few
    # small batches on a busy machine can make a line fall: that is a measurement, not a rule)
    for part in PARTS:
        fit = measured["fits"][part]
        if fit["per_packet_s"] > 0:
            assert getattr(stored, f"{part}_batch_s") == max(0.0, fit["fixed_s"])
            formula = measured["formulas_per_packet_s"].get(part, 0.0)
            if part == "features":
                assert stored.features_row_s == fit["per_packet_s"]
            elif formula > 0:  # the factor: the pipeline's slope over the formulas' per packet
                assert getattr(stored, f"{part}_factor") == pytest.approx(fit["per_packet_s"] / formula)
        else:  # no per-packet cost: the mean per batch is the fixed cost
            assert getattr(stored, f"{part}_batch_s") == max(0.0, fit["mean_s"])
            assert "not positive" in measured["notes"][part]
            assert getattr(stored, f"{part}_factor", 1.0) == 1.0
    # netmon explain's parts carry the per-batch costs at the configured trigger
    report = explain(cfg, Workload(rate_pps=10_000), stored)
    assert report["overheads"]["stage1"] == pytest.approx(stored.stage1_batch_s / cfg.pipeline.trigger_s)


@pytest.mark.spark
@pytest.mark.kafka
def test_a_paced_ladder_fits_over_the_steady_batches_of_every_rate(
    spark, kafka_bootstrap, tmp_path: Path
) -> None:
    """``--paced``: the pipeline runs live at each rate (the producer paced in its own process);
    the rows fitted are each run's steady batches, of what arrived while the one before ran."""
    import dataclasses

    from analytics.cost_model import fill_seconds
    from bench.calibrate_pipeline import PACED_TAIL, PACED_WARM, measure_paced
    from netmon.config import load_config
    from netmon.results import SHARED_QUERY, read_results, results_dir

    base = load_config(None, env={})
    # windows of at most 8 s: the steady batches begin once they (and the 5 s watermark) filled
    short = {
        kind: tuple(
            dataclasses.replace(q, window_s=min(q.window_s, 8.0)) for q in getattr(base.queries, kind)
        )
        for kind in ("topk", "distinct", "join")
    }
    cfg = base.replace(
        paths={"state_dir": tmp_path / "state", "data_dir": tmp_path / "data"},
        kafka={"bootstrap_servers": kafka_bootstrap, "packets_topic": "netmon.test.paced"},
        pipeline={"publish_results": False},
        resources={"manage": False},
        queries=short,
    )
    assert fill_seconds(cfg) == 13.0
    rates = (2_000, 6_000)
    rows, captures = measure_paced(cfg, spark, rates, 25.0, tmp_path)
    assert set(captures) == set(rates) and all(p.exists() for p in captures.values())
    per_rate = []
    for rate in rates:
        run = cfg.replace(paths={"data_dir": tmp_path / f"data-{rate}"})
        table = read_results(results_dir(run, "sys"))
        assert table is not None
        mine = sorted(
            (r for r in table.to_pylist() if r["query"] == SHARED_QUERY), key=lambda r: r["batch_id"]
        )
        start = mine[0]["batch_time"]
        steady = [
            r
            for r in mine[PACED_WARM : len(mine) - PACED_TAIL]
            if (r["batch_time"] - start).total_seconds() >= 13.0
        ]
        assert steady and len(steady) < len(mine) - PACED_WARM - PACED_TAIL, len(mine)
        per_rate.append(steady)
    assert rows == per_rate[0] + per_rate[1]  # each run's steady batches, in order, nothing else
    # the batches hold what arrived in a batch's time: the higher rate's are larger (not a drain's
    # fixed size; how large depends on how long batches take on the machine)
    medians = [float(np.median([r["packets"] for r in steady])) for steady in per_rate]
    assert medians[1] > medians[0], medians
    assert set(part_fits(rows)) >= {"stage1", "traffic", "topk", "distinct"}
