"""Rules in ``mode = "baseline"``: each subject against its own learned normal; state survives a restart."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alerts.rules import RuleEngine
from analytics.alert_baseline import EwmaBaseline
from netmon.config import AlertRule, ConfigError
from tests.alerts.helpers import at

DDOS = AlertRule(
    name="ddos", source="features", query="dst", field="sources", mode="baseline", also=("packets",),
    min_value=100, sensitivity=4, min_ratio=3, warmup=3, alpha=0.1, subject="subject", cooldown_s=0,
)  # fmt: skip


def dst(t: float, subject: str, sources: int, packets: int) -> dict[str, Any]:
    return {"query": "dst", "window_start": at(t - 5), "window_end": at(t), "subject": subject,
            "sources": sources, "packets": packets}  # fmt: skip


def run(engine: RuleEngine, rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for row in rows:
        out += [(n.rule, n.subject, n.status) for n in engine.observe("features", row)]
    return out


def busy_server(reports: range) -> list[dict[str, Any]]:
    """A resolver with 2000 +- 50 sources and 9000 +- 300 packets per window, and a quiet host."""
    rows = []
    for i in reports:
        rows.append(dst(5 * i, "10.0.0.53", 2000 + (-50 if i % 2 else 50), 9000 + (300 if i % 3 else -300)))
        rows.append(dst(5 * i, "192.0.2.7", 10 + i % 3, 40))
    return rows


def test_ordinary_fan_in_is_learned_and_never_fires() -> None:
    engine = RuleEngine([DDOS])
    assert run(engine, busy_server(range(1, 40))) == []
    b = engine.baseline("ddos", "dst", "10.0.0.53")
    assert b is not None and b.mean == pytest.approx(2000, abs=60) and b.n == 39


def test_a_rise_in_sources_and_packets_above_the_band_fires_and_resolves() -> None:
    engine = RuleEngine([DDOS])
    run(engine, busy_server(range(1, 10)))
    assert run(engine, [dst(50, "192.0.2.7", 900, 5000)]) == [("ddos", "192.0.2.7", "firing")]
    assert run(engine, busy_server(range(11, 12))) == []  # closes the report at 50, in which it held
    assert run(engine, busy_server(range(12, 13))) == [("ddos", "192.0.2.7", "resolved")]
    learned = engine.baseline("ddos", "dst", "192.0.2.7")
    assert learned is not None and learned.mean < 20  # the attack was not learned as normal


def test_sources_alone_do_not_fire_packets_must_rise_too() -> None:
    engine = RuleEngine([DDOS])
    run(engine, busy_server(range(1, 10)))
    assert run(engine, [dst(50, "192.0.2.7", 900, 45), *busy_server(range(11, 13))]) == []


def test_min_value_and_the_ratio_floor_keep_small_rises_quiet() -> None:
    engine = RuleEngine([DDOS])
    run(engine, busy_server(range(1, 10)))
    # 4x the quiet host's sources but under min_value 100; the resolver +40 % (far over 4 sd, under 3x)
    rows = [dst(50, "192.0.2.7", 60, 500), dst(50, "10.0.0.53", 2800, 13000), *busy_server(range(11, 13))]
    assert run(engine, rows) == []


def test_nothing_fires_during_the_warm_up_and_a_new_subject_after_it_needs_only_min_value() -> None:
    engine = RuleEngine([DDOS])
    early = [dst(5, "203.0.113.9", 5000, 9000), dst(10, "203.0.113.9", 5000, 9000), dst(15, "x", 1, 1)]
    assert run(engine, early) == []  # reports 1-3 only learn
    engine = RuleEngine([DDOS])
    rows = [*busy_server(range(1, 5)), dst(25, "203.0.113.9", 150, 300), *busy_server(range(6, 7))]
    assert ("ddos", "203.0.113.9", "firing") in run(engine, rows)


def test_a_redelivered_row_is_learned_once() -> None:
    once, twice = RuleEngine([DDOS]), RuleEngine([DDOS])
    rows = busy_server(range(1, 6))
    run(once, rows)
    run(twice, [r for row in rows for r in (row, row)])
    a, b = once.baseline("ddos", "dst", "10.0.0.53"), twice.baseline("ddos", "dst", "10.0.0.53")
    assert a is not None and b is not None and a.state() == b.state()


def test_baselines_survive_a_restart_through_the_json_snapshot() -> None:
    rows = [*busy_server(range(1, 10)), dst(50, "192.0.2.7", 900, 5000), *busy_server(range(11, 14))]
    straight = RuleEngine([DDOS])
    expected = run(straight, rows)
    for cut in (3, 9, 19):  # within the warm-up, after it, mid-attack
        first = RuleEngine([DDOS])
        got = run(first, rows[:cut])
        snapshot = json.loads(json.dumps(first.snapshot()))
        second = RuleEngine.restore([DDOS], snapshot)
        got += run(second, rows[cut:])
        assert got == expected, cut
        a, b = straight.baseline("ddos", "dst", "10.0.0.53"), second.baseline("ddos", "dst", "10.0.0.53")
        assert a is not None and b is not None and a.state() == b.state()
    assert ("ddos", "192.0.2.7", "firing") in expected


def test_the_notification_shows_the_band_it_rose_above() -> None:
    engine = RuleEngine([DDOS])
    run(engine, busy_server(range(1, 10)))
    band = engine.baseline("ddos", "dst", "192.0.2.7")
    assert isinstance(band, EwmaBaseline)
    top = band.upper(4, 3)
    out = engine.observe("features", dst(50, "192.0.2.7", 900, 5000))
    firing = next(n for n in out if n.status == "firing")
    assert firing.threshold == pytest.approx(top) and firing.value == 900


def test_threshold_rules_take_min_value_as_a_floor() -> None:
    rule = AlertRule(name="hh", source="features", query="src", field="share", threshold=0.4, min_value=0.5,
                     subject="subject", cooldown_s=0)  # fmt: skip
    engine = RuleEngine([rule])
    rows = [
        {"query": "src", "window_end": at(t), "subject": "a", "share": s}
        for t, s in ((5, 0.45), (10, 0.6), (15, 0.1))
    ]
    assert run(engine, rows) == [("hh", "a", "firing")]


def test_flush_closes_the_last_report() -> None:
    engine = RuleEngine([DDOS])
    run(engine, [*busy_server(range(1, 10)), dst(50, "192.0.2.7", 900, 5000), *busy_server(range(11, 12))])
    # the report at 55 (without the attack) is the last: only flush closes it
    assert [(n.subject, n.status) for n in engine.flush("features")] == [("192.0.2.7", "resolved")]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mode": "learned"}, "mode: expected one of threshold, baseline"),
        ({"sensitivity": -1}, "sensitivity: must be a number >= 0"),
        ({"min_ratio": 0.5}, "min_ratio: must be a number >= 1"),
        ({"warmup": 0}, "warmup: must be an integer >= 1"),
        ({"alpha": 0}, "alpha: must be in"),
        ({"min_value": float("inf")}, "min_value: must be a finite number"),
        ({"op": "<"}, "op: mode 'baseline' alerts on a rise"),
        ({"window_s": 10, "aggregate": "count"}, "mode: 'baseline' reads report rows"),
        ({"also": ("",)}, "also: expected a list of column names"),
        ({"mode": "threshold", "threshold": 5}, "also: only with mode = 'baseline'"),
    ],
)
def test_baseline_settings_are_checked_with_one_line_naming_the_rule(change: dict, message: str) -> None:
    fields = {k: getattr(DDOS, k) for k in DDOS.__dataclass_fields__} | change
    with pytest.raises(ConfigError, match=r"\[\[alerts.rules\]\] 'ddos' " + message.replace("(", r"\(")):
        AlertRule(**fields)


def test_a_threshold_rule_still_needs_its_threshold() -> None:
    with pytest.raises(
        ConfigError, match="threshold: must be a finite number .required unless mode = 'baseline'"
    ):
        AlertRule(name="x", source="features", field="share")


def test_a_rise_below_min_value_is_learned_only_up_to_the_band() -> None:
    """The first, partial window of an attack (under min_value) must not lift the normal: before,
    the heavy-hitter burst of seed 11 went unnoticed because its 0.42 share had been learned."""
    engine = RuleEngine([DDOS])
    rows = [*busy_server(range(1, 3)), dst(15, "10.0.0.53", 2000, 9000), dst(15, "192.0.2.7", 60, 400)]
    run(engine, rows)
    learned = engine.baseline("ddos", "dst", "192.0.2.7")
    assert learned is not None and learned.n == 3
    # 11 and 12 learned (mean 11.5, sd 0.5); 60 learned as the band's top, max(11.5 + 4 * 0.5, 3 * 11.5)
    assert learned.mean == pytest.approx((11 + 12 + 34.5) / 3)
    out = run(engine, [*busy_server(range(4, 5)), dst(25, "192.0.2.7", 900, 5000)])
    assert ("ddos", "192.0.2.7", "firing") in out
