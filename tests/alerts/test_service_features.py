"""Which built-in rules the streaming service runs: the detection rules once the pipeline publishes
the ``features`` kind, the first built-in rules otherwise (docs/alerts.md, "Streaming")."""

from __future__ import annotations

from pathlib import Path

from alerts.defaults import DEFAULT_RULES, DETECTION_RULES, service_builtin
from alerts.service import AlertService
from netmon.config import AlertRule, AlertsConfig, Config

WITH_FEATURES = ("traffic", "topk", "distinct", "features", "joins", "shedding", "sys")


def _names_sources(rules: tuple[AlertRule, ...]) -> list[tuple[str, str]]:
    return [(r.name, r.source) for r in rules]


def test_without_the_features_kind_the_service_runs_the_first_built_in_rules(
    netmon_config: Config, tmp_path: Path
) -> None:
    assert "features" in netmon_config.pipeline.kinds  # run by default (docs/alerts.md, "Streaming")
    assert service_builtin(netmon_config) != DEFAULT_RULES
    kinds = tuple(k for k in netmon_config.pipeline.kinds if k != "features")
    cfg = netmon_config.replace(paths={"state_dir": tmp_path / "state"}, pipeline={"kinds": kinds})
    assert service_builtin(cfg) == DEFAULT_RULES
    assert AlertService(cfg, AlertsConfig()).rules == DEFAULT_RULES
    # features computed but not republished to Kafka: nothing for the service to read
    quiet = cfg.replace(pipeline={"kinds": WITH_FEATURES, "publish_results": False})
    assert service_builtin(quiet) == DEFAULT_RULES


def test_with_the_features_kind_the_detection_rules_replace_those_of_the_same_name(
    netmon_config: Config, tmp_path: Path
) -> None:
    cfg = netmon_config.replace(paths={"state_dir": tmp_path / "state"}, pipeline={"kinds": WITH_FEATURES})
    rules = AlertService(cfg, AlertsConfig()).rules
    assert _names_sources(rules) == [
        ("port-scan", "features"),
        ("host-scan", "features"),
        ("ddos", "features"),
        ("syn-flood", "features"),
        ("heavy-hitter", "features"),
        ("pipeline-overload", "shedding"),
        ("pipeline-lag", "sys"),
        ("link-rate", "traffic"),
    ]
    assert rules[: len(DETECTION_RULES)] == DETECTION_RULES
    # a configured rule of the same name still replaces the built-in one; builtin_rules = false drops them
    mine = AlertRule(name="ddos", source="distinct", field="distinct", op=">", threshold=5, subject="group")
    assert AlertService(cfg, AlertsConfig(rules=(mine,))).rules[2] == mine
    assert AlertService(cfg, AlertsConfig(rules=(mine,), builtin_rules=False)).rules == (mine,)
