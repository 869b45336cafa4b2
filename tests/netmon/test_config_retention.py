"""``[retention]``: defaults, TOML values, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from netmon.config import ConfigError, RetentionConfig, load_config


def _load(tmp_path: Path, text: str) -> RetentionConfig:
    toml = tmp_path / "netmon.toml"
    toml.write_text(text)
    return load_config(toml, env={}).retention


def test_defaults_keep_a_week_and_compact_after_two_hours() -> None:
    cfg = load_config(None, env={})
    assert cfg.retention == RetentionConfig()
    assert (cfg.retention.results_days, cfg.retention.compact_after_s) == (7.0, 7200.0)
    assert cfg.retention.results_s == 7 * 86400.0
    assert cfg.retention.kafka_retention_ms is None  # the broker's own setting
    assert cfg.to_dict()["retention"] == {
        "results_days": 7.0,
        "compact": True,
        "compact_after_s": 7200.0,
        "kafka_retention_hours": 0.0,
        "interval_s": 300.0,
    }


def test_values_from_the_file(tmp_path: Path) -> None:
    retention = _load(
        tmp_path,
        "[retention]\nresults_days = 0\ncompact = false\ncompact_after_s = 60\n"
        "kafka_retention_hours = 36\ninterval_s = 30\n",
    )
    assert retention.results_days == 0.0 and isinstance(retention.results_days, float)
    assert retention.results_s is None  # kept forever
    assert retention.compact is False and retention.compact_after_s == 60.0
    assert retention.kafka_retention_ms == 36 * 3_600_000
    assert retention.interval_s == 30.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("results_days = -1", "[retention] results_days: expected a number >= 0, got -1.0"),
        ("results_days = nan", "[retention] results_days: expected a number >= 0, got nan"),
        ("compact_after_s = -5", "[retention] compact_after_s: expected a number >= 0, got -5.0"),
        ("kafka_retention_hours = -1", "[retention] kafka_retention_hours: expected a number >= 0, got -1.0"),
        ("kafka_retention_hours = 1e20", "[retention] kafka_retention_hours: expected at most 2.5e12 hours"),
        ("interval_s = 0", "[retention] interval_s: expected a number > 0, got 0.0"),
        ("interval_s = inf", "[retention] interval_s: expected a number > 0, got inf"),
        ('results_days = "7"', "[retention].results_days: expected float, got str '7'"),
        ("compact = 1", "[retention].compact: expected bool, got int 1"),
        ("days = 7", "[retention]: unknown key 'days'"),
    ],
)
def test_errors_are_one_line_and_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"[retention]\n{text}\n")
    assert message in str(err.value)
    assert "\n" not in str(err.value)
