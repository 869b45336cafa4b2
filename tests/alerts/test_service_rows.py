"""The alert service's batch loop on crafted records (no broker): malformed rows, target checks.

A consumer stand-in hands ``poll_once`` records exactly as kafka-python does (offset, value,
headers); the outbox, the engine and the CLI are the real ones. The same through the real broker:
``tests/alerts/test_service.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from alerts.outbox import Outbox, outbox_path
from alerts.service import AlertService, result_topic
from netmon.config import AlertRule, AlertsConfig, AlertTarget, Config, ConfigError
from tests.alerts.helpers import SECRET, distinct_row
from tests.alerts.receiver import Receiver
from tests.alerts.test_cli import invoke

DDOS = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", cooldown_s=0
)
GOOD_HEADERS = [("netmon.kind", b"distinct"), ("netmon.result-version", b"1")]


@dataclass
class Record:
    """The fields of a kafka-python ConsumerRecord the service reads."""

    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=lambda: list(GOOD_HEADERS))


def row(value: dict | list, headers: list[tuple[str, bytes]] | None = None) -> tuple[bytes, list]:
    return json.dumps(value).encode(), list(GOOD_HEADERS) if headers is None else headers


class FakeConsumer:
    """Hands out prepared batches, one per poll; records commits."""

    def __init__(self) -> None:
        self.batches: list[dict[TopicPartition, list[Record]]] = []
        self.commits: list[dict[Any, Any]] = []

    def add(self, topic: str, first_offset: int, items: list[tuple[bytes | None, list]]) -> None:
        records = [Record(first_offset + i, value, headers) for i, (value, headers) in enumerate(items)]
        self.batches.append({TopicPartition(topic, 0): records})

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Record]]:
        return self.batches.pop(0) if self.batches else {}

    def commit(self, offsets: dict[Any, Any]) -> None:
        self.commits.append({(tp.topic, tp.partition): m.offset for tp, m in offsets.items()})

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition("x", 0)}

    def close(self) -> None:
        pass


def service_with(cfg: Config, consumer: FakeConsumer, targets: tuple[AlertTarget, ...] = ()) -> AlertService:
    alerts = AlertsConfig(targets=targets, retry_initial_s=0.05, retry_max_s=0.2, poll_s=0.05)
    return AlertService(cfg, alerts, rules=[DDOS]).open(consumer=consumer)


def skips(caplog: pytest.LogCaptureFixture) -> list[str]:
    records = [r for r in caplog.records if r.getMessage().startswith("malformed result row skipped")]
    return [r.__dict__["reason"] for r in records]  # a structured field (logging's extra)


def test_malformed_rows_are_counted_logged_once_and_skipped_and_alerting_goes_on(
    state_cfg: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a non-UTF-8 netmon.kind header (or a window_start that is not a time) raised out of
    poll_once; the service died, restarted at the same offset and died again."""
    caplog.set_level(logging.DEBUG)
    topic = result_topic(state_cfg, "distinct")
    consumer = FakeConsumer()
    consumer.add(
        topic,
        0,
        [
            row(distinct_row(1, "10.0.0.5", 300) | {"window_end": "yesterday"}),  # bad time
            row(distinct_row(1, "10.0.0.5", 300), [("netmon.kind", b"\xff\xfedistinct")]),  # not UTF-8
            (b"{not json", list(GOOD_HEADERS)),
            (None, list(GOOD_HEADERS)),  # a tombstone: no value
            row([distinct_row(1, "10.0.0.5", 300)]),  # JSON, not an object
            row(distinct_row(1, "10.0.0.5", 300) | {"window_start": "07:00"}),  # bad time, another column
            row(distinct_row(1, "10.0.0.5", 300) | {"window_end": "tomorrow"}),  # the first reason again
            row(distinct_row(1, "10.0.0.5", 300)),  # a good row: fires
        ],
    )
    service = service_with(state_cfg, consumer)
    try:
        batch = service.poll_once(0)
        assert (batch.rows, batch.bad, batch.notifications) == (1, 7, 1)
        assert consumer.commits == [{(topic, 0): 8}]  # past every row: a restart does not read them again
        with Outbox(outbox_path(state_cfg.paths.state_dir), readonly=True) as outbox:
            assert [(e["rule"], e["subject"], e["status"]) for e in outbox.events()] == [
                ("ddos", "10.0.0.5", "firing")
            ]
            assert outbox.offsets() == {(topic, 0): 8}
            assert {k: v["count"] for k, v in outbox.skipped().items()} == {
                "column 'window_end' is not a time": 2,
                "column 'window_start' is not a time": 1,
                "netmon.kind header is not UTF-8": 1,
                "value is not JSON": 2,
                "value is not a JSON object": 1,
            }
            assert outbox.skipped()["column 'window_end' is not a time"]["last_where"] == f"{topic}[0]@6"
        assert sorted(skips(caplog)) == sorted(
            [
                "column 'window_end' is not a time",
                "column 'window_start' is not a time",
                "netmon.kind header is not UTF-8",
                "value is not JSON",
                "value is not a JSON object",
            ]
        )  # once per reason, not per row
        consumer.add(topic, 8, [(b"[]", list(GOOD_HEADERS)), row(distinct_row(2, "10.0.0.9", 1))])
        batch = service.poll_once(0)
        assert (batch.rows, batch.bad, batch.notifications) == (1, 1, 0)
        assert len(skips(caplog)) == 5  # a known reason is not logged again
        assert service.totals.bad == 8 and service.totals.rows == 2
    finally:
        service.close()
    # the counts are in the outbox: they survive a restart and show in the CLI
    status = invoke(state_cfg, "status")
    assert status.exit_code == 0, status.output
    lines = status.output.splitlines()
    assert lines[0] == (
        "alerts: 1 firing, 0 resolved; deliveries: 0 pending, 0 delivered, 0 dead;"
        " malformed result rows skipped: 8"
    )
    assert "    skipped 2: value is not a JSON object (first " in status.output
    assert f"at {topic}[0]@8)" in status.output
    as_json = json.loads(invoke(state_cfg, "status", "--json").output)
    assert (
        as_json["counts"]["skipped_rows"] == 8 and as_json["skipped_rows"]["value is not JSON"]["count"] == 2
    )
    assert invoke(state_cfg, "list").output.splitlines()[-1].endswith("malformed result rows skipped: 8")


def test_a_message_of_several_rows_evaluates_each_and_skips_only_its_bad_lines(state_cfg: Config) -> None:
    topic = result_topic(state_cfg, "distinct")
    consumer = FakeConsumer()
    lines = [
        json.dumps(distinct_row(1, "10.0.0.5", 300)),
        "{not json",
        json.dumps(["a list"]),
        json.dumps(distinct_row(2, "10.0.0.6", 250)),
    ]
    v2 = [("netmon.kind", b"distinct"), ("netmon.result-version", b"2"), ("netmon.rows", b"4")]
    consumer.add(topic, 0, [("\n".join(lines).encode() + b"\n", v2)])
    service = service_with(state_cfg, consumer)
    try:
        batch = service.poll_once(0)
    finally:
        service.close()
    assert (batch.rows, batch.bad, batch.notifications) == (2, 2, 2)  # both good rows fire
    assert consumer.commits == [{(topic, 0): 1}]  # the one message is done
    with Outbox(outbox_path(state_cfg.paths.state_dir), readonly=True) as outbox:
        skipped = {k: v["count"] for k, v in outbox.skipped().items()}
    assert skipped == {"value is not JSON": 1, "value is not a JSON object": 1}


def test_rows_of_queries_no_rule_reads_are_skipped_unparsed_and_the_rest_alert_as_before(
    state_cfg: Config,
) -> None:
    topic = result_topic(state_cfg, "distinct")
    only = dataclasses.replace(DDOS, query="ddos-sources-per-destination")
    rows = [
        distinct_row(1, "10.0.0.5", 300),  # read: fires
        distinct_row(1, "10.0.0.9", 900, query="scan-ports-per-source"),  # no rule reads it
        distinct_row(2, "10.0.0.6", 250, query='odd "name" é'),
        distinct_row(2, "10.0.0.7", 260, query="ddos-sources-per-destination-2"),  # a longer name
    ]
    lines = [json.dumps(r, separators=(",", ":"), sort_keys=True) for r in rows] + ["{not json"]
    v2 = [("netmon.kind", b"distinct"), ("netmon.result-version", b"2"), ("netmon.rows", b"5")]
    outcomes = []
    for rule in (only, DDOS):
        consumer = FakeConsumer()
        consumer.add(topic, 0, [("\n".join(lines).encode() + b"\n", v2)])
        alerts = AlertsConfig(retry_initial_s=0.05, retry_max_s=0.2, poll_s=0.05)
        shutil.rmtree(state_cfg.paths.state_dir, ignore_errors=True)
        service = AlertService(state_cfg, alerts, rules=[rule]).open(consumer=consumer)
        try:
            batch = service.poll_once(0)
            outcomes.append((batch.rows, batch.bad, batch.notifications, service.totals.unread))
        finally:
            service.close()
    # Only the rule's query is read: the longer name holds it as a prefix, not as a JSON string;
    # the bad line names no query a rule reads, so it cannot matter (skipped unparsed).
    assert outcomes[0] == (1, 0, 1, 4)
    assert outcomes[1] == (4, 1, 4, 0)  # a rule over every query: every line parsed


def test_an_unknown_result_version_is_skipped_and_counted(state_cfg: Config) -> None:
    topic = result_topic(state_cfg, "distinct")
    consumer = FakeConsumer()
    newer = [("netmon.kind", b"distinct"), ("netmon.result-version", b"3")]
    consumer.add(
        topic, 0, [row(distinct_row(1, "10.0.0.5", 300), newer), row(distinct_row(1, "10.0.0.5", 300))]
    )
    service = service_with(state_cfg, consumer)
    try:
        batch = service.poll_once(0)
    finally:
        service.close()
    assert (batch.rows, batch.bad, batch.notifications) == (1, 1, 1)
    with Outbox(outbox_path(state_cfg.paths.state_dir), readonly=True) as outbox:
        assert {k: v["count"] for k, v in outbox.skipped().items()} == {"unknown result version b'3'": 1}


# --- targets checked at start -------------------------------------------------------------------


def test_unsigned_targets_are_warned_about_at_start(
    state_cfg: Config, caplog: pytest.LogCaptureFixture, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    caplog.set_level(logging.WARNING)
    targets = (
        AlertTarget(name="open-hook", url=receiver.url),
        AlertTarget(name="signed-hook", url=receiver.url, secret=SECRET),
        AlertTarget(name="off-hook", url=receiver.url, enabled=False),
    )
    service_with(state_cfg, FakeConsumer(), targets).close()
    warned = [r for r in caplog.records if "sent unsigned" in r.getMessage()]
    assert [r.__dict__["target"] for r in warned] == ["open-hook"]


def test_an_unset_secret_env_is_an_error_at_start(
    state_cfg: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: the target was silently sent unsigned."""
    monkeypatch.delenv("NETMON_TEST_UNSET_SECRET", raising=False)
    target = AlertTarget(name="hook", url="http://127.0.0.1:9/", secret_env="NETMON_TEST_UNSET_SECRET")
    with pytest.raises(ConfigError) as caught:
        service_with(state_cfg, FakeConsumer(), (target,))
    assert str(caught.value) == (
        "[[alerts.targets]] 'hook' secret_env: environment variable NETMON_TEST_UNSET_SECRET"
        " is not set (or empty)"
    )
    path = tmp_path / "alerts.toml"
    path.write_text(
        '[alerts]\n[[alerts.targets]]\nname = "hook"\nurl = "http://127.0.0.1:9/"\n'
        'secret_env = "NETMON_TEST_UNSET_SECRET"\n'
    )
    result = invoke(state_cfg, "--alerts-config", str(path), "run", "--idle-exit", "0.5")
    assert result.exit_code == 2
    assert result.output == (
        "netmon alerts run: error: [[alerts.targets]] 'hook' secret_env: environment variable"
        " NETMON_TEST_UNSET_SECRET is not set (or empty)\n"
    )
    monkeypatch.setenv("NETMON_TEST_UNSET_SECRET", "whsec_***not-base64***")
    result = invoke(state_cfg, "--alerts-config", str(path), "test", "--target", "hook")
    assert result.exit_code == 2 and "holds a whsec_ value that is not base64" in result.output
    assert "not-base64" not in result.output  # never the value


def test_a_literal_secret_must_be_valid_whsec_for_the_standard_scheme() -> None:
    with pytest.raises(
        ConfigError, match=r"secret: expected whsec_<base64 of at least one byte>, got <hidden>"
    ):
        AlertTarget(name="x", url="http://127.0.0.1:9/", secret="whsec_!!!")
    AlertTarget(name="x", url="http://127.0.0.1:9/", secret="whsec_!!!", signature="netmon-v1")  # its own key
    with pytest.raises(ConfigError, match="signature: expected one of standard, netmon-v1, got 'v2'"):
        AlertTarget(name="x", url="http://127.0.0.1:9/", signature="v2")
    with pytest.raises(ConfigError, match=r"\[alerts\] keep_days: expected a number >= 0, got -1"):
        AlertsConfig(keep_days=-1)
    assert AlertsConfig().keep_days == 7 and AlertsConfig(keep_days=0).keep_days == 0


def test_the_service_prunes_at_start(state_cfg: Config) -> None:
    from tests.alerts.test_outbox import backlog

    path = outbox_path(state_cfg.paths.state_dir)
    notes = backlog(path, 4, targets=("hook",), now=0.0)
    with Outbox(path) as outbox:
        for n in notes[:3]:
            outbox.record_attempt(n.event_id, "hook", state="delivered", now=1.0, status=200)
    service = service_with(state_cfg, FakeConsumer())
    service.close()
    with Outbox(path, readonly=True) as outbox:  # written in 1970: far older than 7 days
        assert [(d["event_id"], d["state"]) for d in outbox.deliveries()] == [(notes[3].event_id, "pending")]
    result = invoke(state_cfg, "prune", "--keep-days", "0")
    assert result.output == "pruned 0 deliveries, 0 events, 0 resolved alerts older than 0 days\n"
