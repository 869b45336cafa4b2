"""Offline alert episodes (``netmon analyze alerts``) on generated captures, and the same rows streamed.

The streaming service is fed the very ``features`` rows the offline run computes, through its real
batch loop and outbox (a consumer stand-in, no broker), with a restart in the middle: its episodes
must be the offline ones, so the baselines it learned before the restart must have survived.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alerts.defaults import DETECTION_RULES
from alerts.evaluation import score
from alerts.offline import FEATURES, analyze_capture, episodes_from_rows, read_frame
from alerts.rules import _parse_time
from alerts.service import AlertService, result_topic
from analytics.alert_features import feature_rows
from ingest.generate import generate
from netmon.config import AlertsConfig, Config
from tests.alerts.helpers import assert_outbox_episodes
from tests.alerts.test_service_rows import FakeConsumer

ALERTS = AlertsConfig()
HEADERS = [("netmon.kind", b"features"), ("netmon.result-version", b"1")]


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    out = {}
    for scenario in ("baseline", "syn-flood", "port-scan", "heavy-hitter-burst", "ddos"):
        path = tmp_path_factory.mktemp("offline") / f"{scenario}.pcap"
        summary = generate(path, scenario=scenario, packets=60_000, seed=11, duration_s=60)
        out[scenario] = (path, summary.details["truth"])
    return out


EXPECTED = {  # rule -> which truth list names its subject
    "syn-flood": {("syn-flood", "victims"), ("ddos", "victims")},  # a spoofed flood: new sources too
    "port-scan": {("port-scan", "attackers")},
    "heavy-hitter-burst": {("heavy-hitter", "attackers")},
    "ddos": {("ddos", "victims"), ("syn-flood", "victims")},  # half the DDoS packets are bare SYNs
}


@pytest.mark.parametrize("scenario", ["baseline", *EXPECTED])
def test_each_scenario_raises_exactly_its_attack_in_time(
    captures: dict[str, tuple[Path, dict[str, Any]]], scenario: str
) -> None:
    path, truth = captures[scenario]
    episodes = analyze_capture([path], DETECTION_RULES, ALERTS)
    got = {(e.rule, e.subject) for e in episodes}
    want = {(rule, who) for rule, side in EXPECTED.get(scenario, ()) for who in truth[side]}
    assert got == want
    true, caught, delay = score(episodes, truth, ALERTS.features_window_s)
    assert true == len(episodes)
    if scenario != "baseline":
        assert caught == 1 and delay is not None and 0 <= delay <= 2 * ALERTS.features_window_s
        start, end = _parse_time(truth["start"]), _parse_time(truth["end"])
        for e in episodes:  # the episode spans the attack: it neither starts early nor lingers
            assert start < e.first <= start + 2 * ALERTS.features_window_s
            assert end - ALERTS.features_window_s <= e.last <= end + ALERTS.features_window_s


def test_the_episode_value_is_the_peak_of_the_feature_while_it_fired(
    captures: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    path, truth = captures["port-scan"]
    rows = feature_rows(read_frame([path]))
    [episode] = analyze_capture([path], DETECTION_RULES, ALERTS)
    scanner = [r for r in rows if r["query"] == "src" and r["subject"] == truth["attackers"][0]]
    assert episode.value == max(r["vertical"] for r in scanner)
    assert episode.to_dict()["first"] == min(r["window_end"] for r in scanner if r["vertical"] >= 15)


def _records(rows: list[dict[str, Any]]) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [(json.dumps(r).encode(), list(HEADERS)) for r in rows]


@pytest.mark.parametrize("scenario", ["ddos", "syn-flood"])
def test_the_streaming_service_gives_the_offline_episodes_across_a_restart(
    captures: dict[str, tuple[Path, dict[str, Any]]], state_cfg: Config, scenario: str
) -> None:
    path, _ = captures[scenario]
    rows = feature_rows(read_frame([path]))
    offline = episodes_from_rows(DETECTION_RULES, FEATURES, rows)
    assert any(e.rule == "ddos" for e in offline)  # a baseline-mode rule is part of the comparison
    topic = result_topic(state_cfg, FEATURES)
    # the restart falls after the warm-up and before the attack: the baselines must survive it
    cut = next(i for i, r in enumerate(rows) if r["window_end"] >= "2024-01-01T00:00:16")
    for part, first in ((rows[:cut], 0), (rows[cut:], cut)):
        consumer = FakeConsumer()
        for i in range(0, len(part), 500):
            consumer.add(topic, first + i, _records(part[i : i + 500]))
        service = AlertService(state_cfg, ALERTS, rules=DETECTION_RULES).open(consumer=consumer)
        try:
            while consumer.batches:
                service.poll_once(0)
        finally:
            service.close()
    assert_outbox_episodes(state_cfg.paths.state_dir, offline)


def test_a_horizontal_scan_raises_host_scan_and_a_busy_client_does_not() -> None:
    """No generated scenario scans hosts, so: 40 unanswered SYNs to port 22 of 40 hosts in 2 s, beside
    a client whose 300 connections to 300 servers on port 443 fail one time in ten: 30 hosts on one
    port, above Zeek's 25, but with fail_ratio 0.1 (what the busiest generated client reaches)."""
    import pyarrow as pa

    s, rows = 10**9, []
    for i in range(40):  # the scanner: SYNs nobody answers
        rows.append((10 * s + i * s // 20, "203.0.113.66", f"10.9.0.{i + 1}", 40000, 22, 0x02))
    for i in range(300):  # the busy client: 270 answered, 30 refused
        t, server = 10 * s + i * s // 100, f"198.51.{100 + i // 200}.{i % 200 + 1}"
        rows.append((t, "10.1.0.5", server, 30000 + i, 443, 0x02))
        rows.append((t + s // 100, server, "10.1.0.5", 443, 30000 + i, 0x14 if i % 10 == 0 else 0x12))
    rows.append((20 * s, "10.1.0.5", "198.51.100.1", 60000, 443, 0x10))  # later: every fate is known
    rows.sort()
    ts, src, dst, sport, dport, flags = zip(*rows, strict=True)
    table = pa.table({
        "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")), "src_ip": list(src), "dst_ip": list(dst),
        "proto": pa.array([6] * len(ts), pa.int16()), "src_port": pa.array(sport, pa.int32()),
        "dst_port": pa.array(dport, pa.int32()), "tcp_flags": pa.array(flags, pa.int16()),
        "icmp_type": pa.array([None] * len(ts), pa.int16()),
    })  # fmt: skip
    features = feature_rows([table])
    client = next(r for r in features if r["query"] == "src" and r["subject"] == "10.1.0.5")
    assert (client["horizontal"], client["fail_ratio"]) == (30, 0.1)
    episodes = episodes_from_rows(DETECTION_RULES, FEATURES, features)
    assert [(e.rule, e.subject, e.value) for e in episodes] == [("host-scan", "203.0.113.66", 40.0)]
