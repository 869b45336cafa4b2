"""``netmon analyze alerts FILE...``: the episodes of the detection rules (or configured ones), offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from alerts.defaults import DETECTION_RULES
from alerts.offline import analyze_capture
from cli.main import cli
from ingest.generate import generate
from netmon.config import AlertsConfig


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict]]:
    out = {}
    for scenario in ("port-scan", "ddos"):
        path = tmp_path_factory.mktemp("cli-alerts") / f"{scenario}.pcap"
        truth = generate(path, scenario=scenario, packets=60_000, seed=3, duration_s=60).details["truth"]
        out[scenario] = (str(path), truth)
    return out


def analyze(*args: str, config: list[str] | None = None) -> Result:
    return CliRunner().invoke(cli, [*(config or []), "analyze", "alerts", *args], env={"NETMON_CONFIG": None})


def write_config(tmp_path: Path, toml: str) -> list[str]:
    path = tmp_path / "netmon.toml"
    path.write_text(toml)
    return ["--config", str(path)]


def test_jsonl_prints_one_episode_per_line_with_the_six_fields(captures: dict) -> None:
    path, truth = captures["ddos"]
    result = analyze("--format", "jsonl", path)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines == [e.to_dict() for e in analyze_capture([path], DETECTION_RULES, AlertsConfig())]
    assert {(d["rule"], d["subject"]) for d in lines} == {
        ("ddos", truth["victims"][0]),
        ("syn-flood", truth["victims"][0]),
    }
    assert all(list(d) == ["rule", "severity", "subject", "first", "last", "value"] for d in lines)
    assert all(d["first"].endswith("Z") and d["first"] <= d["last"] for d in lines)


def test_the_table_lists_the_same_episodes_and_counts_them(captures: dict) -> None:
    path, truth = captures["port-scan"]
    result = analyze(path)
    assert result.exit_code == 0, result.output
    header, *rows, footer = result.output.splitlines()
    assert header.split() == ["rule", "severity", "subject", "first", "last", "value"]
    assert [r.split()[:3] for r in rows] == [["port-scan", "warning", truth["attackers"][0]]]
    assert footer == "1 episode"


def test_configured_rules_replace_the_built_in_ones(captures: dict, tmp_path: Path) -> None:
    path, _ = captures["port-scan"]
    config = write_config(
        tmp_path,
        '[[alerts.rules]]\nname = "port-scan"\nsource = "features"\nquery = "src"\nfield = "vertical"\n'
        'threshold = 1000000\nsubject = "subject"\n',
    )
    assert analyze(path, config=config).output.splitlines()[-1] == "0 episodes"
    off = write_config(tmp_path, "[alerts]\nbuiltin_rules = false\n")
    assert analyze(captures["ddos"][0], config=off).output.splitlines()[-1] == "0 episodes"


def test_a_bad_baseline_setting_is_a_one_line_error_naming_the_rule(captures: dict, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        '[[alerts.rules]]\nname = "ddos"\nsource = "features"\nquery = "dst"\nfield = "sources"\n'
        'mode = "baseline"\nmin_ratio = 0.5\nsubject = "subject"\n',
    )
    result = analyze(captures["ddos"][0], config=config)
    assert result.exit_code != 0
    assert "[[alerts.rules]] 'ddos' min_ratio: must be a number >= 1, got 0.5" in result.output


def test_a_file_that_is_not_a_capture_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    result = analyze(str(junk))
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and len(result.output.strip().splitlines()) == 1
