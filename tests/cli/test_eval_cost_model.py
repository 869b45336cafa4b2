"""``netmon eval cost-model``: the seeds' figures beside netmon's, as a table and as JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from analytics.cost_eval import Check
from cli.main import cli


def evaluate(*args: str) -> Result:
    return CliRunner().invoke(cli, ["eval", "cost-model", *args], env={"NETMON_CONFIG": None})


def test_table_has_every_figure_beside_the_papers() -> None:
    result = evaluate("--duration", "60")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "| experiment | figure | paper | netmon | tolerance | check | source |"
    rows = [line.split(" | ") for line in lines[2:] if line.startswith("| ")]
    assert len(rows) == 23 and all(r[5] == "ok" for r in rows)
    by_figure = {r[1]: r for r in rows}
    for figure, paper in [
        ("load of plan (a), tuples/s", "250"),
        ("load of plan (b), tuples/s", "280"),
        ("load of plan (c), tuples/s", "900"),
        ("memory of plan (a), tuples", "80"),
        ("memory of plan (b), tuples", "50"),
        ("memory of plan (c), tuples", "130"),
        ("(b) = (c) at R, tuples/s", "47.5"),
        ("(a) = (c) at R, tuples/s", "20"),
        ("60 → 30 s at 80 s: visible at, s", "110"),
        ("60 → 30 s at 80 s: complete at, s", "140"),
        ("30 → 60 s at 150 s: visible at, s", "180"),
        ("30 → 60 s at 150 s: complete at, s", "210"),
    ]:
        assert by_figure[figure][2:5] == [paper, paper, "exact"], figure
    assert by_figure["feasible plans at c = 4 ms"][2:4] == ["a", "a"]
    assert by_figure["feasible plans at c = 5 ms"][2:4] == ["none", "none"]
    ls = by_figure["results, LS / full"]
    assert ls[2] == "0.25" and ls[4] == "±0.05" and abs(float(ls[3]) - 0.25) <= 0.05
    assert lines[-1] == "23 of 23 figures within their tolerance"


def test_json_is_the_same_evaluation() -> None:
    result = evaluate("--format", "json", "--duration", "40", "--seed", "5")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True and len(data["checks"]) == 23
    assert all(c["ok"] for c in data["checks"])
    e3 = data["e3"]
    assert (e3["seed"], e3["duration_s"], e3["wr_mismatches"]) == (5, 40.0, 0)
    assert e3["ratios"]["ls_results"] == e3["ls"]["results"] / e3["full"]["results"]
    figures = {c["figure"]: c for c in data["checks"]}
    assert figures["results, LS / full"]["ours"] == e3["ratios"]["ls_results"]
    assert figures["(b) = (c) at R, tuples/s"] == {
        "experiment": "[AN] Figure 7",
        "figure": "(b) = (c) at R, tuples/s",
        "paper": 47.5,
        "ours": 47.5,
        "tolerance": 1e-6,
        "source": (
            "[AN] §5.2, Figure 7: (b) worse than (c) for c in [0.022, 0.095]; R = 47.5 exactly (digest A.8)"
        ),
        "ok": True,
    }


def test_a_figure_outside_its_tolerance_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import analytics.cost_eval as cost_eval

    real = cost_eval.e3_checks

    def off(result: cost_eval.E3Result) -> list[Check]:
        checks = real(result)
        return [*checks[:-1], Check("[CKSV] E3", "made up", 1.0, 2.0, 0.5, "test")]

    monkeypatch.setattr(cost_eval, "e3_checks", off)
    result = evaluate("--duration", "20")
    assert result.exit_code == 1
    assert "| [CKSV] E3 | made up | 1 | 2 | ±0.5 | FAIL | test |" in result.output.splitlines()
    assert result.output.splitlines()[-1] == (
        "22 of 23 figures within their tolerance: FAIL [CKSV] E3 made up"
    )


def test_too_short_a_run_is_a_usage_error() -> None:
    result = evaluate("--duration", "5")
    assert result.exit_code == 2 and "--duration" in result.output
