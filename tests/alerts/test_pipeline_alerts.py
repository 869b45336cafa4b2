"""End to end: sample captures → Kafka → the Spark pipeline → result topics → alerts → a webhook.

Nothing is simulated: the samples are replayed into the real broker one after another on one
event-time line (``replay --start-at``: each starts 200 s after the previous one, farther apart
than the longest window), the real pipeline (top-k, distinct, joins) computes and publishes its
results, the alert service evaluates the built-in rules on them in its consumer group, and a real
HTTP receiver verifies every signed POST. Each alert is attributed to the sample whose time span
holds its first-seen event time: ``ddos``, ``port-scan`` and ``syn-flood`` must raise exactly the
alerts of ``tests/alerts/test_samples.py`` (victim, scanner, destination; the heavy hitter too) and
resolve them, and the baseline (``mixed-small``) nothing. The baseline runs again at the end: the
``syn-flood`` rule's windows close when later unanswered SYNs arrive (docs/alerts.md), as traffic
after an attack brings them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.rules import event_time
from alerts.service import AlertService
from ingest.generate import parse_start
from ingest.replay import ReplayOptions, replay
from netmon.config import AlertsConfig, AlertTarget, Config
from netmon.kafka_admin import recreate_topic
from pipeline.job import start_pipeline
from tests.alerts.helpers import SECRET
from tests.alerts.receiver import Received, Receiver
from tests.alerts.test_samples import EXPECTED, SAMPLES

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

#: (label, sample) on the time line: the baseline first, so its windows close before any attack
ORDER = (
    ("baseline", "mixed-small"),
    ("ddos", "ddos"),
    ("port-scan", "port-scan"),
    ("heavy-hitter-burst", "heavy-hitter-burst"),
    ("syn-flood", "syn-flood"),
    ("baseline-after", "mixed-small"),
)
START = "2024-05-01T12:00:00Z"
GAP_S = 200  # > a sample's ~60 s + the longest window (60 s) + the watermark delay
KINDS = ("topk", "distinct", "joins")


def _config(base: Config, tmp_path: Path) -> Config:
    topic = f"t{uuid.uuid4().hex[:10]}.packets"
    return base.replace(
        paths={"data_dir": tmp_path / "data", "state_dir": tmp_path / "state"},
        # one partition: the samples' time line must reach Spark in order (see the restart tests)
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 1},
        pipeline={"kinds": KINDS},
    )


def _replay_timeline(cfg: Config) -> dict[str, float]:
    """Replay ORDER on one time line; return each label's first event time (epoch seconds)."""
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    starts: dict[str, float] = {}
    for i, (label, sample) in enumerate(ORDER):
        start_ns = parse_start(START) + i * GAP_S * 1_000_000_000
        last = i == len(ORDER) - 1
        opts = ReplayOptions(
            start_ns=start_ns,
            # the last sample's windows (60 s) must all close: move the watermark past them
            close_windows_s=(GAP_S if last else None),
        )
        summary = replay(
            SAMPLES / f"{sample}.pcap",
            bootstrap=cfg.kafka.bootstrap,
            topic=cfg.kafka.packets_topic,
            options=opts,
            progress=False,
        )
        assert summary.produced == summary.acknowledged > 0
        starts[label] = start_ns / 1e9
    return starts


def _sample_of(at: float, starts: dict[str, float]) -> str:
    return max((s for s in starts if starts[s] <= at), key=lambda s: starts[s])


def _by_sample(received: list[Received], starts: dict[str, float]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {label: [] for label, _ in ORDER}
    for r in received:
        body = r.json
        out[_sample_of(event_time({"t": body["first_seen"]}, "t"), starts)].append(body)
    return out


def test_sample_attacks_reach_the_webhook_through_the_pipeline(
    spark, kafka_bootstrap: str, netmon_config: Config, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    cfg = _config(netmon_config.replace(kafka={"bootstrap_servers": kafka_bootstrap}), tmp_path)
    alerts = AlertsConfig(
        targets=(AlertTarget(name="hook", url=receiver.url, secret=SECRET),),
        group_id=f"alerts-{cfg.kafka.packets_topic}",
        poll_s=0.2,
        retry_initial_s=0.1,
        retry_max_s=0.5,
    )
    starts = _replay_timeline(cfg)

    pipeline = start_pipeline(spark, cfg)
    try:
        # the replay is done: process everything Kafka holds, then the windows the final
        # watermark closed, and publish the results to their topics
        pipeline.process_all_available()
        assert pipeline.failed() is None, pipeline.failed()
        time.sleep(2 * cfg.pipeline.trigger_s)
        pipeline.process_all_available()
        pipeline.poll()
    finally:
        pipeline.stop()
    assert all(st.late_dropped == 0 for st in pipeline.stats.values()), pipeline.stats

    # the service reads the result topics in its consumer group until they stay quiet
    service = AlertService(cfg, alerts)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (service.run(idle_exit_s=5.0), done.set()), daemon=True)
    thread.start()
    assert done.wait(180), "the alert service did not finish"

    assert all(r.verified for r in receiver.requests), [r.error for r in receiver.requests]
    per_sample = _by_sample(receiver.accepted(), starts)
    for label, sample in ORDER:
        events = per_sample[label]
        fired = {(e["rule"], e["subject_label"], e["subject"]) for e in events if e["status"] == "firing"}
        assert fired == EXPECTED[sample], (label, events)
        # each alert fires once and resolves once the attack has left the window
        for rule, _, subject in fired:
            statuses = sorted(e["status"] for e in events if (e["rule"], e["subject"]) == (rule, subject))
            assert statuses == ["firing", "resolved"], (label, rule, subject, statuses)
    assert per_sample["baseline"] == per_sample["baseline-after"] == []
