"""``netmon alerts test|rules|list|retry`` against real receivers and a real outbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import cli.main
from alerts.delivery import routes
from alerts.outbox import Outbox, outbox_path
from alerts.rules import RuleEngine
from cli.commands.alerts import command
from netmon.config import AlertRule, AlertTarget, Config
from tests.alerts.helpers import SECRET, distinct_row
from tests.alerts.receiver import Receiver


def invoke(cfg: Config, *args: str) -> Result:
    """``netmon alerts ARGS`` with ``cfg`` as the loaded configuration."""

    @click.group()
    @click.pass_context
    def root(ctx: click.Context) -> None:
        ctx.obj = cfg

    root.add_command(command)
    return CliRunner().invoke(root, ["alerts", *args], catch_exceptions=False)


def alerts_toml(tmp_path: Path, hook: str, broken: str = "http://127.0.0.1:9/") -> str:
    path = tmp_path / "alerts.toml"
    path.write_text(
        "[alerts]\n"
        f'[[alerts.targets]]\nname = "hook"\nurl = "{hook}"\nsecret_env = "NETMON_TEST_HOOK_SECRET"\n'
        f'[[alerts.targets]]\nname = "broken"\nurl = "{broken}"\nsecret = "{SECRET}"\n'
        '[[alerts.rules]]\nname = "big-victim"\nsource = "distinct"\nfield = "distinct"\nthreshold = 5000\n'
        'subject = "group"\nseverity = "critical"\nlabels = { team = "noc" }\n'
    )
    return str(path)


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETMON_TEST_HOOK_SECRET", SECRET)


@pytest.mark.usefixtures("secret_env")
def test_test_command_delivers_a_signed_test_alert(
    state_cfg: Config, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    result = invoke(
        state_cfg, "--alerts-config", alerts_toml(tmp_path, receiver.url), "test", "--target", "hook"
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("delivered test alert test:") and "to hook (HTTP 200)" in result.output
    (request,) = receiver.requests
    assert request.verified and request.json["status"] == "test" and request.json["rule"] == "netmon-test"
    assert request.key == request.json["event_id"]
    assert SECRET not in result.output


@pytest.mark.usefixtures("secret_env")
def test_test_command_reports_failures(
    state_cfg: Config, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    failing = receivers(status=500)
    path = alerts_toml(tmp_path, failing.url)
    result = invoke(state_cfg, "--alerts-config", path, "test", "--target", "hook")
    assert result.exit_code == 1 and "test alert to hook failed: HTTP 500" in result.output
    result = invoke(state_cfg, "--alerts-config", path, "test", "--target", "nope")
    assert result.exit_code == 1 and "no target named 'nope' (targets: hook, broken)" in result.output
    result = invoke(state_cfg, "--alerts-config", path, "test", "--target", "broken")
    assert result.exit_code == 1 and "Connection refused" in result.output


def test_rules_lists_builtin_and_configured_rules(state_cfg: Config, tmp_path: Path) -> None:
    path = alerts_toml(tmp_path, "http://127.0.0.1:9/")
    result = invoke(state_cfg, "--alerts-config", path, "rules")
    assert result.exit_code == 0, result.output
    assert "ddos [critical]: distinct[ddos-sources-per-destination] distinct > 200 per group" in result.output
    assert (
        "heavy-hitter [warning]: topk[top-sources] share > 0.45 where total>=500 per key for 5s"
        in result.output
    )
    assert "big-victim [critical]: distinct distinct > 5000 per group" in result.output
    rows = [
        json.loads(line)
        for line in invoke(state_cfg, "--alerts-config", path, "rules", "--json").output.splitlines()
    ]
    assert [r["name"] for r in rows] == [
        "ddos",
        "port-scan",
        "syn-flood",
        "heavy-hitter",
        "pipeline-overload",
        "pipeline-lag",
        "link-rate",
        "big-victim",
    ]


def test_rules_lists_the_detection_rules_when_the_pipeline_publishes_features(
    state_cfg: Config, tmp_path: Path
) -> None:
    """`rules` lists what `alerts run` evaluates (``AlertService.rules``), not the threshold rules."""
    from alerts.defaults import DETECTION_RULES
    from alerts.service import AlertService
    from netmon.config import alerts_config

    kinds = ("traffic", "topk", "distinct", "features", "joins", "shedding", "sys")
    cfg = state_cfg.replace(pipeline={"kinds": kinds})
    path = alerts_toml(tmp_path, "http://127.0.0.1:9/")
    result = invoke(cfg, "--alerts-config", path, "rules")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "built-in rules: the detection rules (the pipeline publishes the features kind)"
    assert "ddos [critical]: distinct[ddos-sources-per-destination] distinct > 200 per group" not in lines
    for rule in DETECTION_RULES:
        assert f"{rule.name} [{rule.severity}]: {rule.condition()}" in lines
    rows = [
        json.loads(line)
        for line in invoke(cfg, "--alerts-config", path, "rules", "--json").output.splitlines()
    ]
    in_force = AlertService(cfg, alerts_config(cfg, path)).rules
    assert [(r["name"], r["source"], r["condition"]) for r in rows] == [
        (r.name, r.source, r.condition()) for r in in_force
    ]
    assert [r["name"] for r in rows] == [
        "port-scan",
        "host-scan",
        "ddos",
        "syn-flood",
        "heavy-hitter",
        "pipeline-overload",
        "pipeline-lag",
        "link-rate",
        "big-victim",
    ]
    assert next(r for r in rows if r["name"] == "ddos")["mode"] == "baseline"
    # without the features kind: the threshold rules, and the first line says so
    plain = invoke(state_cfg, "--alerts-config", path, "rules").output.splitlines()
    assert plain[0].startswith("built-in rules: the threshold rules")
    assert "ddos [critical]: distinct[ddos-sources-per-destination] distinct > 200 per group" in plain


def test_bad_alerts_config_is_a_clean_error(state_cfg: Config, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[alerts.rules]]\nname = "x"\nsource = "flows"\nfield = "n"\nthreshold = 1\n')
    result = invoke(state_cfg, "--alerts-config", str(path), "rules")
    assert result.exit_code == 1
    assert (
        "[[alerts.rules]] 'x' source: expected one of traffic, topk, distinct, joins, shedding"
        in result.output
    )


@pytest.mark.usefixtures("secret_env")
def test_list_shows_dead_letters_and_retry_resends_them(
    state_cfg: Config, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    path = alerts_toml(tmp_path, receiver.url)
    targets = (AlertTarget(name="hook", url=receiver.url, secret_env="NETMON_TEST_HOOK_SECRET"),)
    rule = AlertRule(name="ddos", source="distinct", field="distinct", threshold=200, subject="group")
    firing = RuleEngine([rule]).observe("distinct", distinct_row(1, "10.0.0.5", 300))
    engine = RuleEngine([rule])
    notes = engine.observe("distinct", distinct_row(1, "10.0.0.5", 300))
    with Outbox(outbox_path(state_cfg.paths.state_dir)) as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={n.event_id: routes(targets, n) for n in notes},
            records=engine.take_changes(),
            state=engine.snapshot(),
            offsets={},
        )
        outbox.record_attempt(notes[0].event_id, "hook", state="dead", now=1, error="HTTP 503 (gave up)")
    assert firing[0].event_id == notes[0].event_id  # ids are stable
    listing = invoke(state_cfg, "list").output
    assert (
        "firing   warning  ddos: group 10.0.0.5 first 2024-05-01T12:00:01Z" in listing
        and "hook=dead" in listing
    )
    dead = invoke(state_cfg, "list", "--dead").output
    assert dead == f"{notes[0].event_id} -> hook: 1 attempt(s), HTTP 503 (gave up)\n"
    result = invoke(state_cfg, "--alerts-config", path, "retry")
    assert result.output == "requeued 1: delivered 1, retrying 0, dead 0\n"
    assert [r.key for r in receiver.accepted()] == [notes[0].event_id] and receiver.requests[0].verified
    assert "hook=delivered" in invoke(state_cfg, "list", "--status", "firing").output
    assert json.loads(invoke(state_cfg, "list", "--json").output)["deliveries"] == {"hook": "delivered"}


def test_list_without_an_outbox(state_cfg: Config) -> None:
    result = invoke(state_cfg, "list")
    assert result.exit_code == 1 and "no alert outbox yet" in result.output


def test_registered_in_the_netmon_command() -> None:
    if "alerts" not in cli.main.COMMANDS:
        pytest.skip('netmon/cli.py does not register "alerts" yet (the lead adds it)')
    result = CliRunner().invoke(cli.main.cli, ["alerts", "--help"])
    assert result.exit_code == 0 and all(
        c in result.output for c in ("run", "rules", "list", "retry", "test")
    )


def test_alerts_section_through_the_one_loader(tmp_path: Path) -> None:
    """``[alerts]`` is read by netmon.config's loader like every section (no loader of its own)."""
    from netmon.config import load_alerts, load_config

    toml = tmp_path / "netmon.toml"
    toml.write_text(
        '[alerts]\ngroup_id = "g"\n'
        '[[alerts.rules]]\nname = "r"\nsource = "topk"\nfield = "share"\nthreshold = 1\n'
        'where = { total = ">= 5" }\n'
        '[[alerts.targets]]\nname = "t"\nurl = "https://x.example/h"\nsecret = "s"\nrules = ["r"]\n'
        'labels = { a = "b" }\n'
    )
    section = load_config(toml, env={}).alerts
    assert section == load_alerts(toml)
    assert section.group_id == "g" and section.rules[0].threshold == 1.0
    assert section.rules[0].where == {"total": ">= 5"}
    assert section.targets[0].rules == ("r",) and section.targets[0].labels == {"a": "b"}
