"""``netmon explain`` and ``netmon bench calibrate`` through click, and the ``[resources]`` section.

The report's numbers are the cost model's (its own tests check them against counted events);
here: what the command prints and returns, where the constants come from (calibrated or the
defaults, said so), feasibility and admission against the budgets, the measured values read
from a pipeline status file, and one-line configuration errors.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from analytics.cost_model import CostConstants, CostModel, Workload, load_constants, save_constants
from analytics.explain import admission, explain, measured_from_status
from cli.main import cli
from netmon.config import Config, ConfigError, load_config


def _run(tmp_path: Path, *args: str, toml: str = "") -> tuple[int, str]:
    cfg = tmp_path / "netmon.toml"
    cfg.write_text(toml)
    env = {"NETMON_STATE_DIR": str(tmp_path / "state"), "NETMON_DATA_DIR": str(tmp_path / "data")}
    result = CliRunner().invoke(cli, ["--config", str(cfg), *args], env=env)
    return result.exit_code, result.output


def test_explain_table_with_default_constants_says_so(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "explain", "--rate", "20000")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == (
        "input 20000 packets/s; constants: defaults"
        " (built in: run `netmon bench calibrate` to measure this machine)"
    )
    assert (
        lines[1] == "budgets: CPU 1 s/s, memory 512.0 MiB, reserve 20% → bounds CPU 0.8 s/s, memory 409.6 MiB"
    )
    assert any(line.startswith("topk      top-sources ") for line in lines)
    assert "plan: FEASIBLE" in lines
    assert lines[-1] == (
        "measured: no results/sys rows and no pipeline status"
        " (start `netmon pipeline` to see measured values beside)"
    )


def test_explain_json_uses_the_calibration_and_sums(tmp_path: Path) -> None:
    save_constants(CostConstants(count_row_s=1e-7, source="calibrated-test"), tmp_path / "state")
    code, out = _run(tmp_path, "explain", "--rate", "5000", "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["constants"] == "calibrated-test" and report["calibrated"] is True
    queries = report["queries"]
    assert report["total"]["cpu"] == pytest.approx(sum(q["cpu"] for q in queries))
    cfg = Config()
    features = 1 if "features" in cfg.pipeline.kinds else 0  # the alert features: one estimate
    assert (
        len(queries)
        == 1 + len(cfg.queries.topk) + len(cfg.queries.distinct) + len(cfg.queries.join) + features
    )
    traffic = queries[0]
    assert traffic["ops"]["count_rows"] == 5000 and traffic["cpu"] == pytest.approx(5000 * 1e-7 + 4 * 2e-7)


def test_explain_refuses_what_does_not_fit_with_one_line_reasons(tmp_path: Path) -> None:
    toml = '[resources]\nmemory_budget = "2m"\nreserve = 0.0\n[pipeline]\nkinds = ["traffic", "topk"]\n'
    code, out = _run(tmp_path, "explain", "--rate", "50000", "--check", toml=toml)
    assert code == 3
    refusals = [line.strip() for line in out.splitlines() if "refused" in line]
    assert refusals and all(r.startswith("refused: estimated memory ") for r in refusals)
    assert refusals[0].endswith("admitted exceeds the budget 2.0 MiB")
    assert "plan: INFEASIBLE (memory over the bound)" in out
    code, _ = _run(tmp_path, "explain", "--rate", "50000", toml=toml)
    assert code == 0  # without --check a report is not a failure


def test_admission_in_order_and_the_sampling_proposal() -> None:
    model = CostModel()
    ests = [model.traffic(Workload(rate_pps=r), 1.0, name=f"q{r}") for r in (1000, 5000, 1000)]
    cpu = [e.cpu for e in ests]
    got = admission(ests, cpu_bound=cpu[0] + cpu[2] + 1e-12, memory_bound=1e9)
    assert got["q1000"] == "" and got["q5000"].startswith("refused: estimated CPU ")
    assert got["q5000"].endswith(f"exceeds the budget {cpu[0] + cpu[2]:.3g} s/s")
    cfg = Config().replace(resources={"cpu_budget": 0.05})
    report = explain(cfg, Workload(rate_pps=100_000), CostConstants())
    assert report["feasible"]["cpu"] is False
    sampling = report["sampling"]
    assert sampling["feasible"] == (sampling["cpu"] <= cfg.resources.cpu_bound * (1 + 1e-9))
    names = {q.name for q in cfg.queries.topk} | {q.name for q in cfg.queries.distinct}
    assert set(sampling["keep"]) == names
    assert all(cfg.resources.keep_min <= x <= 1 for x in report["sampling"]["keep"].values())


def test_measured_values_from_the_pipeline_status(tmp_path: Path) -> None:
    status = {
        "updated": time.time(),
        "queries": {"topk": {"kind_ms": 250, "last_batch_ms": 900, "state_rows": 1234, "batches": 7}},
    }
    data = tmp_path / "data" / "status"
    data.mkdir(parents=True)
    (data / "pipeline.json").write_text(json.dumps(status))
    code, out = _run(tmp_path, "explain", "--rate", "1000", toml="[pipeline]\ntrigger_s = 2.0\n")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("topk ") and "1234" in line)
    parts = row.split()  # part, estimated CPU, measured CPU, ratio, estimated rows, state rows
    assert parts[2] == "0.1250" and parts[5] == "1234"  # 250 ms of a 2 s trigger
    # like for like: the estimate beside it is the top-k queries' driver part, without stage 1
    code, out = _run(
        tmp_path, "explain", "--rate", "1000", "--format", "json", toml="[pipeline]\ntrigger_s = 2.0\n"
    )
    report = json.loads(out)
    driver = sum(q["cpu"] - q["stage1_cpu"] for q in report["queries"] if q["kind"] == "topk")
    assert 0 < driver < sum(q["cpu"] for q in report["queries"] if q["kind"] == "topk")
    assert report["parts"]["topk"]["cpu"] == pytest.approx(driver)
    assert parts[1] == f"{driver:.4f}" and parts[3] == f"{0.125 / driver:.2f}"
    stage1 = report["decode"]["cpu"] + sum(q["stage1_cpu"] for q in report["queries"])
    assert report["parts"]["stage1"]["cpu"] == pytest.approx(stage1) and report["decode"]["cpu"] > 0
    stale = measured_from_status({"updated": 0, "queries": {}}, 1.0, now=1000.0)
    assert stale["stale"] is True and stale["age_s"] == 1000.0
    assert measured_from_status(None, 1.0) == {"available": False, "kinds": {}}


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("cpu_budget = 0", "[resources] cpu_budget: expected a number > 0, got 0.0"),
        (
            'memory_budget = "lots"',
            "[resources] memory_budget: expected a size such as '512m' or '2g', got 'lots'",
        ),
        ("reserve = 1.0", "[resources] reserve: expected a fraction in [0, 1), got 1.0"),
        ("keep_min = 0.0", "[resources] keep_min: expected a fraction in (0, 1], got 0.0"),
        ("intake_min = 1.5", "[resources] intake_min: expected a fraction in (0, 1], got 1.5"),
        (
            "window_min_fraction = 2.0",
            "[resources] window_min_fraction: expected a fraction in (0, 1], got 2.0",
        ),
        ("sub_window_max_factor = 0.5", "[resources] sub_window_max_factor: expected a number >= 1, got 0.5"),
    ],
)
def test_resources_config_errors_are_one_line(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "netmon.toml"
    path.write_text(f"[resources]\n{toml}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value) == message
    code, out = _run(tmp_path, "explain", toml=f"[resources]\n{toml}\n")
    assert code == 1 and out.strip().splitlines() == [f"Error: {message}"]


def test_resources_config_loads() -> None:
    res = Config().replace(resources={"memory_budget": "1.5g", "reserve": 0.25, "cpu_budget": 2}).resources
    assert res.memory_bytes == int(1.5 * 1024**3) and res.cpu_bound == 1.5
    assert res.memory_bound == pytest.approx(0.75 * 1.5 * 1024**3)


def test_bench_calibrate_writes_the_constants(tmp_path: Path) -> None:
    # a smoke run at a tiny scale (not a timing test: the values are only checked to be measured)
    code, out = _run(tmp_path, "bench", "calibrate", "--scale", "0.05", "--repeats", "1")
    assert code == 0, out
    constants = load_constants(tmp_path / "state")
    assert constants.source.startswith("calibrated ")
    assert constants.join_update_s > 0 and constants.topk_key_s > 0 and constants.hll_header_bytes > 0
    assert "count_row_s" in out and "check:" in out
    code, _ = _run(tmp_path, "bench", "calibrate", "--scale", "0")
    assert code == 1


def test_explain_takes_the_traffic_mix_from_a_capture(tmp_path: Path) -> None:
    """``--capture``: each query's sub-windows are counted on the capture's own records (its
    occupancy curves), at ``--rate``; a bad file is one line naming it."""
    import pyarrow as pa

    from analytics.cost_model import workload_fields, workload_keys, workload_of
    from ingest import read_records
    from tests.conftest import REPO_ROOT

    sample = REPO_ROOT / "samples" / "mixed-small.pcap"
    code, out = _run(tmp_path, "explain", "--rate", "5000", "--capture", str(sample), "--format", "json")
    assert code == 0, out
    report = json.loads(out)
    curves = dict((k, v) for k, v in report["workload"]["key_curves"])
    cfg = load_config(None, env={})
    assert set(curves) >= {"src_ip", "dst_ip,src_ip", "proto,dst_port"}
    records = pa.Table.from_batches(list(read_records(sample)))
    w = workload_of(records, 5000.0, workload_fields(cfg), workload_keys(cfg))
    top = next(q for q in report["queries"] if q["query"] == "top-sources")
    assert top["ops"]["partial_rows"] == pytest.approx(w.distinct("src_ip", 5000.0))
    # the mix, not the default populations: a different estimate than --keys/--groups give
    _, plain = _run(tmp_path, "explain", "--rate", "5000", "--format", "json")
    uniform = next(q for q in json.loads(plain)["queries"] if q["query"] == "top-sources")
    assert uniform["ops"]["partial_rows"] > 2 * top["ops"]["partial_rows"]
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture")
    code, out = _run(tmp_path, "explain", "--capture", str(bad))
    assert code == 1 and out.count("\n") == 1 and str(bad) in out, out
