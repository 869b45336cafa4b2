"""Helpers for the alert tests: event times, result rows, producing rows to the real broker."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

from alerts.offline import Episode
from alerts.outbox import Outbox, outbox_path
from netmon.config import Config

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
SECRET = "test-secret-6f1d0c"
#: a Standard Webhooks secret: ``whsec_`` + base64 of the key bytes
WHSEC = "whsec_dGVzdC1zdGFuZGFyZC13ZWJob29rcy1rZXk="


def at(seconds: float) -> str:
    """The ISO-8601 time ``seconds`` after T0, as result rows carry it."""
    return (T0 + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def distinct_row(t: float, group: str, distinct: int, *, query: str = "ddos-sources-per-destination") -> dict:
    return {"query": query, "window_end": at(t), "group": group, "distinct": distinct, "rank": 1}


def produce(cfg: Config, kind: str, rows: list[dict], *, per_message: int = 3) -> None:
    """Publish result rows as ``pipeline.publish`` does (version 2: JSON Lines messages, key = the
    kind, headers); ``per_message`` rows per message so consumers meet rows across message
    boundaries."""
    from kafka import KafkaProducer

    from netmon.kafka_admin import ensure_topic

    topic = f"{cfg.kafka.results_topic_prefix}{kind}"
    ensure_topic(cfg.kafka.bootstrap, topic, cfg.kafka.partitions)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap, acks="all", linger_ms=5)
    try:
        for start in range(0, len(rows), per_message):
            chunk = rows[start : start + per_message]
            value = b"".join(
                json.dumps(r, separators=(",", ":"), sort_keys=True).encode() + b"\n" for r in chunk
            )
            headers = [
                ("netmon.kind", kind.encode()),
                ("netmon.result-version", b"2"),
                ("netmon.rows", str(len(chunk)).encode()),
            ]
            producer.send(topic, value, key=kind.encode(), headers=headers)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def produce_raw(cfg: Config, kind: str, records: list[tuple[bytes | None, list[tuple[str, bytes]]]]) -> None:
    """Publish records as given (value bytes, headers), all with one key: one partition, in order."""
    from kafka import KafkaProducer

    from netmon.kafka_admin import ensure_topic

    topic = f"{cfg.kafka.results_topic_prefix}{kind}"
    ensure_topic(cfg.kafka.bootstrap, topic, cfg.kafka.partitions)
    producer = KafkaProducer(bootstrap_servers=cfg.kafka.bootstrap, acks="all", linger_ms=5)
    try:
        for value, headers in records:
            producer.send(topic, value, key=b"crafted", headers=headers)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def assert_outbox_episodes(state_dir: Path, offline: Sequence[Episode]) -> None:
    """The alerts the service wrote to its outbox under ``state_dir`` are exactly the ``offline``
    episodes (rule, subject, first and last report, peak value)."""
    with Outbox(outbox_path(state_dir), readonly=True) as outbox:
        streamed = [
            Episode(a["rule"], a["severity"], a["subject"], a["first_seen"], a["last_seen"], a["peak"])
            for a in outbox.alerts()
        ]

    def key(e: Episode) -> tuple:
        return (e.rule, e.subject, e.first, e.last, e.value)

    assert sorted(map(key, streamed)) == sorted(map(key, offline))
