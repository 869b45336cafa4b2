"""The alert service on the project's real Kafka broker, with real webhook receivers.

Result rows shaped like ``docs/results.md`` are produced to the result topics as
``pipeline.publish`` does; the service consumes them in its consumer group.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.outbox import Outbox, outbox_path
from alerts.service import CRASH_ENV, CRASH_EXIT_CODE, AlertService, result_topic
from netmon.config import AlertRule, AlertsConfig, AlertTarget, Config
from tests.alerts.helpers import SECRET, at, distinct_row, produce, produce_raw
from tests.alerts.receiver import Receiver, free_port

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]
DDOS_Q, SCAN_Q = "ddos-sources-per-destination", "scan-ports-per-source"


def group(cfg: Config) -> str:
    """A consumer group of this test only (the topics are this test's too)."""
    return f"alerts-{cfg.kafka.results_topic_prefix.rstrip('.')}"


def settings(cfg: Config, url: str, **kw: object) -> AlertsConfig:
    target = AlertTarget(name="hook", url=url, secret=SECRET)
    base = {
        "retry_initial_s": 0.1,
        "retry_max_s": 0.5,
        "max_age_s": 60.0,
        "poll_s": 0.2,
        "group_id": group(cfg),
    }
    return AlertsConfig(targets=(target,), **(base | kw))  # type: ignore[arg-type]


def run_service(cfg: Config, alerts: AlertsConfig, idle_exit_s: float = 1.5, **kw: object) -> AlertService:
    service = AlertService(cfg, alerts, **kw)  # type: ignore[arg-type]
    done = threading.Event()
    thread = threading.Thread(target=lambda: (service.run(idle_exit_s=idle_exit_s), done.set()), daemon=True)
    thread.start()
    assert done.wait(60), "the alert service did not finish"
    return service


def test_builtin_rules_fire_and_resolve_on_real_result_rows(
    kafka_cfg: Config, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    victim, scanner, flooded, heavy = "34.22.41.40", "198.51.100.200", "132.219.96.91", "10.1.0.38"
    # distinct: the victim and the scanner above their thresholds in reports 1-3, gone from 4
    rows = [distinct_row(t, victim, 305) for t in (1, 2, 3)] + [
        distinct_row(t, "10.0.0.53", 92) for t in (4, 5)
    ]
    rows += [distinct_row(t, scanner, 500, query=SCAN_Q) for t in (1, 2, 3)]
    rows += [distinct_row(t, "10.0.0.53", 330, query=SCAN_Q) for t in (4, 5)]  # a resolver: below 400
    produce(kafka_cfg, "distinct", rows)
    # joins: one row per unanswered SYN (pipeline.joins); a spoofed flood, then normal refusals
    half_open = [unanswered(1 + i / 100, flooded, f"203.0.113.{i}") for i in range(120)]
    half_open += [unanswered(t, "10.0.0.10", "10.1.0.9") for t in (12, 26, 31)]
    produce(kafka_cfg, "joins", half_open)
    # topk: one source holds 79 % of the packets for 7 s (for = 5 s), then nothing is above delta
    top = [
        {
            "query": "top-sources",
            "window_end": at(t),
            "delta": 12,
            "rank": 1,
            "key": heavy,
            "count": 790,
            "total": 1000,
        }
        for t in range(1, 8)
    ]
    top += [
        {
            "query": "top-sources",
            "window_end": at(t),
            "delta": 12,
            "rank": 0,
            "key": None,
            "count": None,
            "total": 900,
        }
        for t in (8, 9)
    ]
    produce(kafka_cfg, "topk", top)
    # traffic at the samples' rates, and a pipeline that is busy but not overloaded: no alerts
    produce(
        kafka_cfg,
        "traffic",
        [
            {"window_start": at(t - 1), "window_end": at(t), "proto": 6, "packets": 170, "bytes": 99_000}
            for t in (1, 2)
        ],
    )
    shedding = [
        {"query": "handshake", "batch_id": t, "batch_time": at(t), "event_time": None} for t in range(40)
    ]
    produce(kafka_cfg, "shedding", [row | {"utilisation": 0.7} for row in shedding])

    service = run_service(kafka_cfg, settings(kafka_cfg, receiver.url))
    got = sorted(
        (r.json["rule"], r.json["subject_label"], r.json["subject"], r.json["status"])
        for r in receiver.accepted()
    )
    assert got == sorted(
        (rule, label, subject, status)
        for rule, label, subject in [
            ("ddos", "victim", victim),
            ("port-scan", "scanner", scanner),
            ("syn-flood", "destination", flooded),
            ("heavy-hitter", "source", heavy),
        ]
        for status in ("firing", "resolved")
    )
    assert all(r.verified for r in receiver.requests)
    assert service.totals.rows == len(rows) + len(half_open) + len(top) + 2 + 40
    with Outbox(outbox_path(kafka_cfg.paths.state_dir), readonly=True) as outbox:
        alerts = outbox.alerts()
        assert {a["status"] for a in alerts} == {"resolved"} and len(alerts) == 4
        assert all(a["deliveries"] == {"hook": "delivered"} for a in alerts)
        heavy_alert = next(a for a in alerts if a["rule"] == "heavy-hitter")
        assert heavy_alert["first_seen"] == pytest.approx(time_of(1)) and heavy_alert[
            "last_seen"
        ] == pytest.approx(time_of(7))
        assert outbox.problems() == {}


def unanswered(t: float, dst: str, src: str) -> dict:
    """A ``joins`` row for a SYN that expired unanswered (the columns pipeline.joins writes)."""
    row = {"query": "handshake", "kind": "handshake", "row": "unmatched", "key": f"{src},{dst},40000,80,1"}
    row |= {"left_ts": at(t), "right_ts": None, "delay_s": None, "left_src_ip": src, "left_dst_ip": dst}
    return row | {"left_src_port": 40000, "left_dst_port": 80, "left_iface": None}


def time_of(t: float) -> float:
    from alerts.rules import event_time

    return event_time({"window_end": at(t)})


def test_a_flapping_condition_does_not_flood(kafka_cfg: Config, receivers: Callable[..., Receiver]) -> None:
    receiver = receivers()
    rule = AlertRule(
        name="flappy",
        source="distinct",
        query=DDOS_Q,
        field="distinct",
        threshold=200,
        subject="group",
        max_notifications=2,
        cooldown_s=60,
    )
    # the victim is in every other report for 4 minutes: 240 reports, 239 state changes
    rows = [distinct_row(t, "10.0.0.5" if t % 2 else "10.0.0.53", 300 if t % 2 else 5) for t in range(1, 241)]
    produce(kafka_cfg, "distinct", rows)
    run_service(kafka_cfg, settings(kafka_cfg, receiver.url), rules=[rule])
    sent = sorted(time_of_iso(r.json["at"]) for r in receiver.accepted())
    assert 2 <= len(sent) <= 8  # 240 s of event time / 60 s cooldown × 2, against 239 changes unlimited
    for t in sent:
        assert sum(1 for u in sent if t - 60 < u <= t) <= 2
    assert sum(r.json["suppressed"] for r in receiver.accepted()) > 200


def time_of_iso(text: str) -> float:
    from alerts.rules import event_time

    return event_time({"window_end": text})


# --- crash and restart: real processes -------------------------------------------------------

BOOT = (
    "from cli.main import cli; cli.lazy.setdefault('alerts', 'cli.commands.alerts:command'); "
    "cli(prog_name='netmon')"
)


def _write_configs(cfg: Config, tmp: Path, url: str) -> dict[str, str]:
    netmon_toml = tmp / "netmon.toml"
    netmon_toml.write_text(
        f'[paths]\nstate_dir = "{cfg.paths.state_dir}"\ndata_dir = "{cfg.paths.data_dir}"\n'
        f'[kafka]\nbootstrap_servers = "{cfg.kafka.bootstrap}"\n'
        f'results_topic_prefix = "{cfg.kafka.results_topic_prefix}"\npartitions = {cfg.kafka.partitions}\n'
        f"[pipeline]\nkinds = {list(cfg.pipeline.kinds)}\n".replace("'", '"')
    )
    alerts_toml = tmp / "alerts.toml"
    alerts_toml.write_text(
        f'[alerts]\ngroup_id = "{group(cfg)}"\nretry_initial_s = 0.1\nretry_max_s = 0.5\nmax_age_s = 120\n'
        "poll_s = 0.2\n"
        f'[[alerts.targets]]\nname = "hook"\nurl = "{url}"\nsecret_env = "HOOK_SECRET"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMON_")}
    env.update(NETMON_CONFIG=str(netmon_toml), NETMON_ALERTS_CONFIG=str(alerts_toml), HOOK_SECRET=SECRET)
    return env


def _committed(cfg: Config, topic: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets on ``topic`` (an OffsetFetch; this consumer joins nothing)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=cfg.kafka.bootstrap, group_id=group(cfg), enable_auto_commit=False
    )
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        committed = {(tp.topic, tp.partition): consumer.committed(tp) for tp in tps}
        return {k: v for k, v in committed.items() if v is not None}
    finally:
        consumer.close()


def _end_offsets(cfg: Config, topic: str) -> dict[tuple[str, int], int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(tps).items() if o}
    finally:
        consumer.close()


def test_crash_between_outbox_and_commit_loses_and_duplicates_nothing(
    kafka_cfg: Config, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks/netmon"
    env = _write_configs(kafka_cfg, tmp_path, url)
    # batch A: a victim and a scanner start (two firings)
    rows = [distinct_row(t, "10.0.0.5", 305) for t in (1, 2)] + [
        distinct_row(t, "6.6.6.6", 500, query=SCAN_Q) for t in (1, 2)
    ]
    produce(kafka_cfg, "distinct", rows, per_message=1)  # one row per offset: offsets count rows
    log = tmp_path / "crashed.log"
    with log.open("w") as err:
        crashed = subprocess.Popen(
            [sys.executable, "-c", BOOT, "-vv", "alerts", "run"],
            env=env | {CRASH_ENV: "1"},
            cwd=REPO,
            stderr=err,
        )
        try:
            crashed.wait(timeout=90)
        except subprocess.TimeoutExpired:
            crashed.kill()
            raise AssertionError(
                f"the service did not crash within 90 s; its log ends:\n{log.read_text()[-4000:]}"
            ) from None
    assert crashed.returncode == CRASH_EXIT_CODE, log.read_text()[-4000:]
    path = outbox_path(kafka_cfg.paths.state_dir)
    with Outbox(path, readonly=True) as outbox:
        before = outbox.events()
        covered = sum(outbox.offsets().values())  # rows of batch A the outbox accounts for
    assert before and {e["status"] for e in before} == {"firing"}  # written durably ...
    topic = result_topic(kafka_cfg, "distinct")
    assert _committed(kafka_cfg, topic) == {}  # ... but the offsets never reached Kafka
    # batch B: both stop (resolutions), a second victim starts
    rows = [distinct_row(t, "10.0.0.7", 900) for t in (3, 4)] + [
        distinct_row(t, "10.0.0.53", 3, query=SCAN_Q) for t in (3, 4)
    ]
    produce(kafka_cfg, "distinct", rows, per_message=1)
    # netmon restarts while the receiver is still down; the receiver comes up 2 s later
    restarted = subprocess.Popen(
        [sys.executable, "-c", BOOT, "alerts", "run", "--idle-exit", "1.5"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)
    receiver = receivers(port=port)
    try:
        _, stderr = restarted.communicate(timeout=90)
    finally:
        restarted.kill()
    assert restarted.returncode == 0, stderr
    assert f"{8 - covered} result rows" in stderr  # rows already in the outbox are not evaluated again
    with Outbox(path, readonly=True) as outbox:
        events = outbox.events()
        deliveries = outbox.deliveries()
    expected = {
        ("ddos", "10.0.0.5", "firing"),
        ("ddos", "10.0.0.5", "resolved"),
        ("port-scan", "6.6.6.6", "firing"),
        ("port-scan", "6.6.6.6", "resolved"),
        ("ddos", "10.0.0.7", "firing"),
    }
    assert sorted((e["rule"], e["subject"], e["status"]) for e in events) == sorted(expected)  # none twice
    assert [e["event_id"] for e in events[: len(before)]] == [e["event_id"] for e in before]
    assert {d["state"] for d in deliveries} == {"delivered"}
    accepted = receiver.accepted()
    assert sorted(r.key for r in accepted) == sorted(e["event_id"] for e in events)  # every alert, once
    assert all(r.verified for r in receiver.requests)
    assert _committed(kafka_cfg, topic) == _end_offsets(kafka_cfg, topic)


def test_malformed_rows_on_the_broker_are_skipped_and_the_next_good_row_alerts(
    kafka_cfg: Config, receivers: Callable[..., Receiver]
) -> None:
    """Before: the non-UTF-8 header (or the window_start that is not a time) killed the service; a
    restart read the same row again and died again."""
    import json

    receiver = receivers()
    good = [("netmon.kind", b"distinct"), ("netmon.result-version", b"1")]

    def value(row: dict) -> bytes:
        return json.dumps(row).encode()

    victim = "10.0.0.5"
    produce_raw(
        kafka_cfg,
        "distinct",
        [
            (value(distinct_row(1, victim, 300) | {"window_start": "not a time"}), good),
            (value(distinct_row(1, victim, 300)), [("netmon.kind", b"\xc3\x28")]),  # not UTF-8
            (b"\x00\x01 not json", good),
            (value([distinct_row(1, victim, 300)]), good),  # JSON, not an object
            *[(value(distinct_row(t, victim, 305)), good) for t in (1, 2)],
            *[(value(distinct_row(t, "10.0.0.53", 3)), good) for t in (3, 4)],
        ],
    )
    service = AlertService(kafka_cfg, settings(kafka_cfg, receiver.url))
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            service.run(idle_exit_s=1.5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "the alert service did not finish"
    assert not failure, f"the alert service died: {failure[0]!r}"
    assert sorted((r.json["rule"], r.json["subject"], r.json["status"]) for r in receiver.accepted()) == [
        ("ddos", victim, "firing"),
        ("ddos", victim, "resolved"),
    ]
    assert (service.totals.rows, service.totals.bad) == (4, 4)
    with Outbox(outbox_path(kafka_cfg.paths.state_dir), readonly=True) as outbox:
        assert {k: v["count"] for k, v in outbox.skipped().items()} == {
            "column 'window_start' is not a time": 1,
            "netmon.kind header is not UTF-8": 1,
            "value is not JSON": 1,
            "value is not a JSON object": 1,
        }
    topic = result_topic(kafka_cfg, "distinct")
    assert _committed(kafka_cfg, topic) == _end_offsets(kafka_cfg, topic)  # the offsets moved past them
