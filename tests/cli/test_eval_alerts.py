"""``netmon eval alerts``: precision and recall of episodes against the generator's ground truth."""

from __future__ import annotations

import csv
from pathlib import Path

from click.testing import CliRunner, Result

from cli.main import cli


def evaluate(*args: str, config: list[str] | None = None) -> Result:
    return CliRunner().invoke(cli, [*(config or []), "eval", "alerts", *args], env={"NETMON_CONFIG": None})


def test_baseline_is_quiet_and_the_scan_is_caught_in_time(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    args = ["--rates", "1000", "--seeds", "1,2", "--scenario", "baseline", "--scenario", "port-scan"]
    result = evaluate(*args, "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "| generated | baseline | 1,000 | 2 | 0 | 0 | - | 0 | 0 | - | - |" in lines
    scan = next(line for line in lines if "| port-scan |" in line).split("|")
    assert [c.strip() for c in scan[4:11]] == ["2", "2", "0", "1.00", "2", "2", "1.00"]
    assert "ok   zero episodes on baseline traffic: 0 episodes over 2 baseline captures" in lines
    runs = list(csv.DictReader((out / "alerts.csv").open()))
    assert [(r["scenario"], r["seed"], r["episodes"], r["caught"]) for r in runs] == [
        ("baseline", "1", "0", "0"),
        ("baseline", "2", "0", "0"),
        ("port-scan", "1", "1", "1"),
        ("port-scan", "2", "1", "1"),
    ]
    assert "- ok: zero episodes on baseline traffic" in (out / "alerts.md").read_text()


def test_a_rule_that_fires_on_normal_traffic_fails_the_evaluation(tmp_path: Path) -> None:
    config = tmp_path / "netmon.toml"
    config.write_text(
        '[[alerts.rules]]\nname = "heavy-hitter"\nsource = "features"\nquery = "src"\nfield = "share"\n'
        'threshold = 0.05\nsubject = "subject"\n'
    )
    result = evaluate(
        "--rates", "1000", "--seeds", "1", "--scenario", "baseline", "--out", str(tmp_path / "e"),
        config=["--config", str(config)],
    )  # fmt: skip
    assert result.exit_code == 1
    fail = next(line for line in result.output.splitlines() if line.startswith("FAIL"))
    assert fail.startswith("FAIL zero episodes on baseline traffic: ") and not fail.endswith(
        ": 0 episodes over 1 baseline captures"
    )


def test_bad_rates_are_a_usage_error(tmp_path: Path) -> None:
    result = evaluate("--rates", "fast", "--out", str(tmp_path))
    assert result.exit_code == 2 and "expected comma-separated integers" in result.output
