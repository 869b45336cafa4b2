"""The rule engine on hand-made result rows: firing, resolution, for, dedup, rearm, state, errors."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from alerts.defaults import DEFAULT_RULES, DETECTION_RULES
from alerts.rules import RuleEngine, alert_id, event_time
from netmon.config import AlertRule
from tests.alerts.helpers import T0, at, distinct_row

DDOS = AlertRule(
    name="ddos",
    source="distinct",
    query="ddos-sources-per-destination",
    field="distinct",
    threshold=200,
    subject="group",
    subject_label="victim",
    cooldown_s=0,
)


def feed(engine: RuleEngine, kind: str, rows: list[dict]) -> list:
    out = []
    for row in rows:
        out += engine.observe(kind, row)
    return out


def test_fires_once_while_holding_and_resolves_when_it_stops() -> None:
    engine = RuleEngine([DDOS])
    rows = [distinct_row(t, "10.0.0.5", 300 + t) for t in range(1, 6)]  # five reports holding
    rows += [distinct_row(6, "10.0.0.9", 5), distinct_row(7, "10.0.0.9", 5)]  # 10.0.0.5 gone at 6
    out = feed(engine, "distinct", rows)
    assert [(n.status, n.subject) for n in out] == [("firing", "10.0.0.5"), ("resolved", "10.0.0.5")]
    firing, resolved = out
    assert firing.subject_label == "victim" and firing.severity == "warning"
    assert firing.first_seen == event_time({"window_end": at(1)})
    assert resolved.last_seen == event_time({"window_end": at(5)})
    assert resolved.at == event_time({"window_end": at(6)})  # the first report without it
    assert (
        firing.alert_id == resolved.alert_id == alert_id("ddos", "ddos-sources-per-destination", "10.0.0.5")
    )
    assert firing.event_id != resolved.event_id and firing.episode_id == resolved.episode_id
    assert resolved.peak == 305


def test_subjects_are_independent_and_other_queries_ignored() -> None:
    engine = RuleEngine([DDOS])
    rows = [
        distinct_row(1, "10.0.0.5", 300),
        distinct_row(1, "10.0.0.6", 250),
        distinct_row(1, "10.0.0.7", 999, query="scan-ports-per-source"),
    ]
    out = feed(engine, "distinct", rows)
    assert sorted(n.subject for n in out) == ["10.0.0.5", "10.0.0.6"]


def test_for_duration_must_hold_in_every_report() -> None:
    rule = AlertRule(**{**_kwargs(DDOS), "for_s": 3})
    engine = RuleEngine([rule])
    # holds at 1, 2; absent at 3 (streak broken); holds 4..7 -> fires at 7 (7 - 4 >= 3)
    rows = [distinct_row(t, "v", 300) for t in (1, 2)] + [distinct_row(3, "x", 1)]
    rows += [distinct_row(t, "v", 300) for t in (4, 5, 6, 7)]
    out = feed(engine, "distinct", rows)
    assert [(n.status, n.at) for n in out] == [("firing", event_time({"window_end": at(7)}))]
    assert out[0].first_seen == event_time({"window_end": at(4)})


def test_duplicate_and_late_rows_change_nothing() -> None:
    engine = RuleEngine([DDOS])
    rows = [distinct_row(1, "v", 300), distinct_row(1, "v", 300), distinct_row(2, "v", 300)]
    rows += [distinct_row(1, "v", 300), distinct_row(1, "w", 900)]  # late: report 1 is closed
    out = feed(engine, "distinct", rows)
    assert [n.status for n in out] == ["firing"]
    assert engine.stale_rows == 2


def _kwargs(rule: AlertRule) -> dict:
    return {f: getattr(rule, f) for f in rule.__dataclass_fields__}


def _flap_rows(pattern: list[bool], subject: str = "v") -> list[dict]:
    """One report per second; the subject holds where ``pattern`` is True."""
    rows = []
    for t, holds in enumerate(pattern, start=1):
        rows.append(distinct_row(t, subject if holds else "other", 300 if holds else 1))
    return rows


def test_flapping_is_limited_by_the_rearm_bucket() -> None:
    rule = AlertRule(**{**_kwargs(DDOS), "max_notifications": 2, "cooldown_s": 60})
    engine = RuleEngine([rule])
    pattern = [True, False] * 60  # flaps every second for two minutes
    out = feed(engine, "distinct", _flap_rows(pattern))
    times = [n.at for n in out]
    assert len(out) <= 2 * 2 + 1
    for t in times:  # never more than 2 in any 60 s
        assert sum(1 for u in times if t - 60 < u <= t) <= 2
    assert [n.status for n in out] == ["firing", "resolved"] * (len(out) // 2) + ["firing"] * (len(out) % 2)
    assert sum(n.suppressed for n in out) > 50  # the swallowed changes are reported
    unlimited = RuleEngine([AlertRule(**{**_kwargs(DDOS), "cooldown_s": 0})])
    assert len(feed(unlimited, "distinct", _flap_rows(pattern))) == 119


@settings(max_examples=150, deadline=None)
@given(
    pattern=st.lists(st.booleans(), min_size=1, max_size=80),
    max_n=st.integers(1, 4),
    cooldown=st.sampled_from([0, 3, 10, 30]),
    for_s=st.sampled_from([0, 2]),
)
def test_rearm_bound_alternation_and_convergence(
    pattern: list[bool], max_n: int, cooldown: int, for_s: int
) -> None:
    rule = AlertRule(
        **{**_kwargs(DDOS), "max_notifications": max_n, "cooldown_s": float(cooldown), "for_s": float(for_s)}
    )
    engine = RuleEngine([rule])
    quiet = [False] * (cooldown + 3)  # then the condition stays off long enough to settle
    out = feed(engine, "distinct", _flap_rows(pattern + quiet))
    times = [n.at for n in out]
    for t in times:
        assert sum(1 for u in times if t - cooldown < u <= t) <= max_n
    statuses = [n.status for n in out]
    assert all(a != b for a, b in zip(statuses, statuses[1:], strict=False))  # firing/resolved alternate
    assert not statuses or statuses[0] == "firing"
    assert not statuses or statuses[-1] == "resolved"  # receivers end up told the truth
    assert len({n.event_id for n in out}) == len(out)


@settings(max_examples=100, deadline=None)
@given(pattern=st.lists(st.booleans(), min_size=2, max_size=60), cut=st.integers(0, 60))
@example(
    pattern=[True, True, False, False] * 2 + [True, True], cut=4
)  # pruning once depended on unsaved state
def test_snapshot_restore_continues_exactly(pattern: list[bool], cut: int) -> None:
    """Stopping anywhere and restoring from the snapshot gives the same notifications and ids."""
    rule = AlertRule(**{**_kwargs(DDOS), "max_notifications": 2, "cooldown_s": 5, "for_s": 1})
    rows = _flap_rows(pattern + [False, False])
    cut = min(cut, len(rows))
    whole = feed(RuleEngine([rule]), "distinct", rows)
    first = RuleEngine([rule])
    part = feed(first, "distinct", rows[:cut])
    state = json.loads(json.dumps(first.snapshot()))  # through JSON, as in the outbox
    part += feed(RuleEngine.restore([rule], state), "distinct", rows[cut:])
    assert [n.event_id for n in part] == [n.event_id for n in whole]
    assert part == whole


def test_sum_aggregate_over_rows_counts_duplicates_once() -> None:
    rule = AlertRule(name="rate", source="traffic", field="packets_per_s", aggregate="sum", threshold=1000)
    engine = RuleEngine([rule])

    def traffic(t: int, proto: int, packets: int) -> dict:
        return {
            "window_start": at(t - 1),
            "window_end": at(t),
            "proto": proto,
            "packets": packets,
            "bytes": 1,
        }

    rows = [traffic(1, 6, 600), traffic(1, 6, 600), traffic(1, 17, 300)]  # 900/s with the duplicate once
    assert feed(engine, "traffic", rows) == []
    out = feed(engine, "traffic", [traffic(2, 6, 600), traffic(2, 17, 500)])  # 1100/s
    assert [(n.status, n.subject, n.value) for n in out] == [("firing", "traffic", 1100.0)]


def test_topk_share_and_where_comparison() -> None:
    rule = next(r for r in DEFAULT_RULES if r.name == "heavy-hitter")
    engine = RuleEngine([AlertRule(**{**_kwargs(rule), "for_s": 0})])

    def topk(t: int, key: str | None, count: int | None, total: int, rank: int = 1) -> dict:
        row = {"query": "top-sources", "window_end": at(t), "delta": 3, "rank": rank, "key": key}
        return row | {"count": count, "total": total}

    rows = [topk(1, "10.1.0.38", 400, 450), topk(2, None, None, 900, rank=0), topk(3, "10.1.0.38", 800, 1000)]
    out = feed(engine, "topk", rows)
    # report 1: share 0.89 but total < 500 (ignored); report 2: nothing above delta; report 3: 0.8
    assert [(n.status, n.subject, n.value, n.subject_label) for n in out] == [
        ("firing", "10.1.0.38", 0.8, "source")
    ]
    assert "10.1.0.38 sends 0.8 of all packets" in out[0].summary


def test_unknown_fields_are_a_per_rule_problem_not_a_crash() -> None:
    broken = AlertRule(name="broken", source="joins", field="half_open", threshold=1, subject="dst_ip")
    no_time = AlertRule(name="needs-share", source="topk", field="share", threshold=0.1, subject="key")
    engine = RuleEngine([broken, no_time, DDOS])
    feed(engine, "joins", [{"query": "handshake", "window_end": at(1), "server": "x", "rtt_p50": 0.1}])
    feed(engine, "topk", [{"query": "q", "window_end": at(1), "key": "a", "count": 3}])  # no total
    out = feed(engine, "distinct", [distinct_row(1, "v", 300)])
    assert [n.rule for n in out] == ["ddos"]  # the good rule still works
    assert "no column 'half_open'" in engine.problems["broken"].message
    assert "needs a 'total' column" in engine.problems["needs-share"].message
    feed(engine, "joins", [{"query": "handshake", "dst_ip": "10.0.0.1", "half_open": 5}])
    assert "no time column" in engine.problems["broken"].message


def test_ignore_list_and_disabled_rules() -> None:
    engine = RuleEngine([AlertRule(**{**_kwargs(DDOS), "ignore": ("10.0.0.53",)})])
    assert feed(engine, "distinct", [distinct_row(1, "10.0.0.53", 900)]) == []
    assert RuleEngine([AlertRule(**{**_kwargs(DDOS), "enabled": False})]).kinds == ()


def test_take_changes_tracks_the_episode() -> None:
    engine = RuleEngine([DDOS])
    feed(engine, "distinct", [distinct_row(1, "v", 300)])
    (rec,) = engine.take_changes()
    assert (rec.status, rec.subject, rec.first_seen, rec.last_seen) == (
        "firing",
        "v",
        T0.timestamp() + 1,
        rec.first_seen,
    )
    feed(engine, "distinct", [distinct_row(2, "v", 400), distinct_row(3, "x", 1), distinct_row(4, "x", 1)])
    (rec,) = engine.take_changes()
    assert (rec.status, rec.peak, rec.last_seen, rec.resolved_at) == (
        "resolved",
        400,
        T0.timestamp() + 2,
        T0.timestamp() + 3,
    )


@pytest.mark.parametrize(
    "value", ["2024-05-01T12:00:01Z", "2024-05-01T12:00:01+00:00", 1714564801, 1714564801000]
)
def test_event_time_forms(value: object) -> None:
    assert event_time({"window_end": value}) == T0.timestamp() + 1


def unmatched(t: float, dst: str, src: str, kind: str = "handshake") -> dict:
    """A joins row as pipeline.joins writes it: one unanswered SYN (abridged to the columns used)."""
    row = {"query": "handshake", "kind": kind, "row": "unmatched", "key": f"{src},{dst},1,80,2"}
    return row | {"left_ts": at(t), "right_ts": None, "left_src_ip": src, "left_dst_ip": dst}


def syn_flood() -> AlertRule:
    return next(r for r in DEFAULT_RULES if r.name == "syn-flood")


def test_syn_flood_counts_distinct_sources_of_unanswered_syns_per_window() -> None:
    engine = RuleEngine([syn_flood()])
    rows = [unmatched(10 + i / 100, "132.219.96.91", f"203.0.113.{i % 80}") for i in range(600)]  # 80 sources
    rows += [unmatched(12 + i / 100, "10.0.0.10", "198.51.100.200") for i in range(300)]  # a scan: 1 source
    rows += [unmatched(11, "9.9.9.9", f"1.1.1.{i}", kind="link") for i in range(90)]  # not the handshake
    out = feed(engine, "joins", sorted(rows, key=lambda r: r["left_ts"]))
    assert out == []  # the window [10, 20) is not evaluated before a row 5 s past its end
    out = feed(engine, "joins", [unmatched(24.9, "x", "y")])
    assert out == []
    out = feed(engine, "joins", [unmatched(25, "x", "y")])
    assert [(n.status, n.subject, n.value, n.field) for n in out] == [
        ("firing", "132.219.96.91", 51.0, "distinct left_src_ip")  # capped at threshold + 1
    ]
    assert out[0].at == event_time({"window_end": at(20)}) and out[0].subject_label == "destination"
    # [20, 30) has no flood rows: it resolves when that window is evaluated (a row at 35)
    assert feed(engine, "joins", [unmatched(35, "x", "y")])[0].status == "resolved"
    assert not engine.problems


def test_syn_flood_skips_unanswered_syns_read_from_a_sample() -> None:
    """Under the intake drop box half the SYN-ACKs of normal traffic go unread and their SYNs are
    reported unanswered, with the box's fraction (``keep``); such rows must not page. The same
    rows read whole (keep 1, or no column: an older pipeline's) fire."""
    for keep, fires in ((0.5, False), (1.0, True), (None, True)):
        engine = RuleEngine([syn_flood()])
        rows = [unmatched(10 + i / 100, "132.219.96.91", f"203.0.113.{i % 80}") for i in range(600)]
        rows = [r if keep is None else r | {"keep": keep} for r in rows]
        out = feed(engine, "joins", [*rows, unmatched(25, "x", "y")])
        assert [n.status for n in out] == (["firing"] if fires else []), keep


def test_matched_rows_running_ahead_do_not_make_unanswered_syns_late() -> None:
    """The pipeline writes a matched handshake at once and an unanswered SYN a micro-batch later,
    once the watermark has passed it: a fast replay can put minutes of event time in between."""
    engine = RuleEngine([syn_flood()])
    matched = [unmatched(10 + t, "10.0.0.1", "10.1.0.7") | {"row": "matched"} for t in range(0, 200, 5)]
    flood = [unmatched(10 + i / 100, "132.219.96.91", f"203.0.113.{i % 80}") for i in range(600)]
    out = feed(engine, "joins", matched + flood + [unmatched(25, "x", "y")])
    assert [(n.status, n.subject) for n in out] == [("firing", "132.219.96.91")]
    assert engine.stale_rows == 0


def test_event_windows_accept_late_rows_within_lateness_only() -> None:
    rule = AlertRule(
        name="c",
        source="joins",
        aggregate="count",
        window_s=10,
        lateness_s=5,
        threshold=2,
        subject="left_dst_ip",
    )
    rule = AlertRule(**{**_kwargs(rule), "time_field": "left_ts", "cooldown_s": 0})
    engine = RuleEngine([rule])
    feed(
        engine, "joins", [unmatched(1, "v", "a"), unmatched(12, "v", "b"), unmatched(2, "v", "c")]
    )  # 2: late, kept
    out = feed(engine, "joins", [unmatched(15, "v", "d")])  # [0, 10) closes with 2 rows for v: not > 2
    assert out == [] and engine.stale_rows == 0
    feed(engine, "joins", [unmatched(3, "v", "e")])  # [0, 10) was evaluated: late beyond lateness
    assert engine.stale_rows == 1
    out = feed(engine, "joins", [unmatched(t, "v", "f") for t in (13, 14, 26)])  # [10, 20): 4 rows for v
    assert [(n.status, n.value) for n in out] == [("firing", 4.0)]


@settings(max_examples=80, deadline=None)
@given(
    times=st.lists(st.integers(0, 120), min_size=1, max_size=60),
    subjects=st.lists(st.sampled_from(["a", "b", "c"]), min_size=60, max_size=60),
    cut=st.integers(0, 60),
)
def test_event_rule_snapshot_restore_continues_exactly(
    times: list[int], subjects: list[str], cut: int
) -> None:
    rule = AlertRule(
        name="c",
        source="joins",
        aggregate="distinct",
        field="left_src_ip",
        window_s=10,
        lateness_s=5,
        time_field="left_ts",
        threshold=1,
        subject="left_dst_ip",
        max_notifications=2,
        cooldown_s=20,
    )
    rows = [unmatched(t, subjects[i], f"s{t % 3}") for i, t in enumerate(times)]
    cut = min(cut, len(rows))
    whole = feed(RuleEngine([rule]), "joins", rows)
    first = RuleEngine([rule])
    part = feed(first, "joins", rows[:cut])
    part += feed(RuleEngine.restore([rule], json.loads(json.dumps(first.snapshot()))), "joins", rows[cut:])
    assert part == whole


def test_pipeline_overload_uses_batch_time() -> None:
    rule = next(r for r in DEFAULT_RULES if r.name == "pipeline-overload")
    engine = RuleEngine([rule])

    def shedding(t: int, utilisation: float) -> dict:
        return {"query": "handshake", "batch_id": t, "batch_time": at(t), "event_time": None} | {
            "utilisation": utilisation
        }

    out = feed(engine, "shedding", [shedding(t, 0.97) for t in range(31)])
    assert [(n.status, n.subject, n.first_seen) for n in out] == [("firing", "handshake", T0.timestamp())]
    out = feed(engine, "shedding", [shedding(31, 0.5), shedding(32, 0.5)])
    assert [n.status for n in out] == ["resolved"]


def _sys_rows(backlogs: list[tuple[int, int, float]]) -> list[dict]:
    """``sys`` rows of the shared query as the pipeline makes and publishes them: per (second,
    messages waiting, messages processed per second) a progress through ``pipeline.sys_stats``,
    encoded by the republisher's JSON Lines (``pipeline.result_json``) and decoded as the alert
    service does. The events are 1970-era: a replay's timestamps never enter the rule."""
    from pipeline.result_json import json_lines
    from pipeline.sys_stats import BatchFigures, Knobs, sys_row, sys_table

    knobs = Knobs(trigger_s=1.0, watermark_s=5.0, shared_batch_messages=600)
    rows = []
    for t, waiting, rate in backlogs:
        progress = {
            "name": "packets",
            "batchId": t,
            "timestamp": at(t),
            "durationMs": {"addBatch": 900, "triggerExecution": 950},
            "numInputRows": 600,
            "processedRowsPerSecond": rate,
            "sources": [
                {"endOffset": {"p": {"0": 1000 * t}}, "latestOffset": {"p": {"0": 1000 * t + waiting}}}
            ],
        }
        row = sys_row(progress, knobs, BatchFigures(packets=600_000, newest_ns=86_400 * 10**9))  # 1970-01-02
        assert row is not None
        rows.append(row)
    return [json.loads(line) for line in json_lines(sys_table(rows)).to_pylist()]


def test_pipeline_lag_fires_on_a_sustained_backlog_of_the_sys_rows() -> None:
    rule = next(r for r in DEFAULT_RULES if r.name == "pipeline-lag")
    engine = RuleEngine(DEFAULT_RULES)
    # Normal operation: a batch's worth waits now and then (600 messages at 630/s: under 1 s);
    # lag_s is decades (the capture's own timestamps), which the rule does not read.
    normal = _sys_rows([(t, 600 if t % 7 == 0 else 0, 630.0) for t in range(120)])
    assert normal[0]["lag_s"] > 1e9 and max(r["backlog_s"] for r in normal) < 1
    assert feed(engine, "sys", normal) == [] and not engine.problems
    # Behind: 40,000 messages at 1,000/s is 40 s of reading (> 30 s), for the rule's 60 s.
    behind = _sys_rows([(t, 40_000, 1000.0) for t in range(120, 181)])
    assert {r["backlog_s"] for r in behind} == {40.0}
    out = feed(engine, "sys", behind)
    assert [(n.rule, n.status, n.subject, n.first_seen, n.value) for n in out] == [
        ("pipeline-lag", "firing", "packets", (T0 + dt.timedelta(seconds=120)).timestamp(), 40.0)
    ]
    assert rule.for_s == 60 and out[0].at == (T0 + dt.timedelta(seconds=180)).timestamp()
    # A backlog over the threshold for less than for_s does not fire; caught up, it resolves.
    out = feed(engine, "sys", _sys_rows([(181, 0, 1000.0), (182, 0, 1000.0)]))
    assert [n.status for n in out] == ["resolved"]
    short = _sys_rows([(t, 40_000, 1000.0) for t in range(183, 230)] + [(230, 0, 1000.0), (231, 0, 1.0)])
    assert feed(engine, "sys", short) == []


# --- malformed rows ---------------------------------------------------------------------------

LINK = next(r for r in DEFAULT_RULES if r.name == "link-rate")


def traffic_row(t: float, packets: int, start: object = None) -> dict:
    return {"window_start": at(t - 1) if start is None else start, "window_end": at(t), "proto": 6} | {
        "packets": packets,
        "bytes": 1000,
    }


@pytest.mark.parametrize(
    ("kind", "row", "reason"),
    [
        ("traffic", traffic_row(1, 200_000, start="not a time"), "column 'window_start' is not a time"),
        ("traffic", traffic_row(1, 200_000, start=[1, 2]), "column 'window_start' is not a time"),
        ("traffic", traffic_row(1, 200_000, start=10**30), "column 'window_start' is not a time"),
        ("traffic", traffic_row(1, 200_000, start=float("nan")), "column 'window_start' is not a time"),
        (
            "distinct",
            distinct_row(1, "v", 300) | {"window_end": "2024-13-45T99:00:00Z"},
            "column 'window_end' is not a time",
        ),
        (
            "distinct",
            distinct_row(1, "v", 300) | {"window_end": float("inf")},
            "column 'window_end' is not a time",
        ),
        ("distinct", distinct_row(1, "v", 300) | {"window_end": True}, "column 'window_end' is not a time"),
        ("distinct", ["not", "a", "mapping"], "row is not a JSON object"),
    ],
)
def test_a_malformed_row_raises_row_error_and_changes_nothing(kind: str, row: Any, reason: str) -> None:
    """Before: ``window_start`` garbage raised a raw ValueError from _derived; the service died on it."""
    from alerts.rules import RowError

    engine = RuleEngine([LINK, DDOS])
    feed(engine, "traffic", [traffic_row(1, 10)])
    before = json.dumps(engine.snapshot(), sort_keys=True)
    with pytest.raises(RowError) as caught:
        engine.observe(kind, row)
    assert caught.value.reason == reason
    assert json.dumps(engine.snapshot(), sort_keys=True) == before and not engine.problems
    # the next good rows still alert
    out = feed(engine, "traffic", [traffic_row(2, 200_000), traffic_row(3, 10)])
    assert [(n.rule, n.status) for n in out] == [("link-rate", "firing")]
    assert [(n.rule, n.status) for n in feed(engine, "distinct", [distinct_row(4, "v", 300)])] == [
        ("ddos", "firing")
    ]


def test_non_finite_values_never_hold_and_payloads_stay_json() -> None:
    engine = RuleEngine([DDOS])
    rows = [
        distinct_row(1, "v", 300) | {"distinct": float("inf")},
        distinct_row(1, "w", 300) | {"distinct": float("nan")},
        distinct_row(1, "x", 300) | {"distinct": 10**400},  # beyond float range
    ]
    assert feed(engine, "distinct", rows) == [] and not engine.problems  # before: fired with inf
    (n,) = feed(engine, "distinct", [distinct_row(2, "v", 300)])
    assert n.value == 300 and json.loads(json.dumps(n.to_dict(), allow_nan=False))["value"] == 300


def test_an_unexpected_error_in_one_rule_is_that_rules_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    import alerts.rules

    boom = AlertRule(name="boom", source="distinct", field="distinct", threshold=1, subject="group")
    real = alerts.rules._passes

    def passes(rule: AlertRule, row: dict) -> bool:
        if rule.name == "boom":
            raise ZeroDivisionError("a bug")
        return real(rule, row)

    monkeypatch.setattr(alerts.rules, "_passes", passes)
    engine = RuleEngine([boom, DDOS])
    out = feed(engine, "distinct", [distinct_row(1, "v", 300)])
    assert [n.rule for n in out] == ["ddos"]
    assert engine.problems["boom"].message == "unexpected ZeroDivisionError: a bug"
    assert engine.problems["boom"].count == 1


def test_an_exact_only_rule_skips_rows_computed_from_a_sample() -> None:
    syn = next(r for r in DETECTION_RULES if r.name == "syn-flood")
    assert syn.exact_only and next(r for r in DETECTION_RULES if r.name == "ddos").exact_only is False

    def dst(t: int, half_open: int, keep: float | None) -> dict:
        row = {"query": "dst", "window_end": at(t), "subject": "10.0.0.5", "half_open": half_open}
        row |= {"half_open_ratio": 0.9}
        return row if keep is None else row | {"keep": keep}

    # Sampled windows (keep 1/4: answers dropped, half-open inflated) are skipped; exact ones and
    # rows without the column (an older pipeline's, the offline command's) are read.
    for keep_of in ({1: 0.25, 2: 0.25}, {1: 1.0, 2: 1.0}, {1: None, 2: None}):
        engine = RuleEngine([AlertRule(**{**_kwargs(syn), "cooldown_s": 0})])
        out = feed(engine, "features", [dst(t, 500, keep_of[t]) for t in (1, 2)])
        fired = [(n.status, n.subject) for n in out]
        assert fired == ([] if keep_of[1] == 0.25 else [("firing", "10.0.0.5")])
    with pytest.raises(ValueError, match="exact_only: expected true or false"):
        AlertRule(**{**_kwargs(syn), "exact_only": "yes"})
