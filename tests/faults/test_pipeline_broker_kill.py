"""``kill -9`` of the broker under a running pipeline, while a replay fills its topic.

The broker (one of the test's own, ``tests/faults/conftest.py``) dies with SIGKILL and comes back
on the same state directory and ports. The pipeline, started with a processing-time trigger,
waits and continues: Spark's Kafka source retries a short outage by itself; a query that dies of a
long one is started again from its checkpoint by ``Pipeline.poll`` once the broker answers
(counted in ``restarts``, logged). Either way the traffic and top-k results equal the brute-force
count of the capture and an uninterrupted run over the same topic (docs/reliability.md, section 2).
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from netmon.broker import LocalBroker
from netmon.config import Config
from netmon.kafka_admin import recreate_topic
from netmon.results import read_results, results_dir
from pipeline.job import Pipeline, start_pipeline
from tests.conftest import REPO_ROOT
from tests.faults.conftest import NETMON, kill_broker, netmon_env
from tests.pipeline.oracle import traffic_per_window

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SAMPLE = REPO_ROOT / "samples" / "mixed-small.pcap"  # 10,000 packets over ~60 s of event time
PACKETS = 10_000
KINDS = ("traffic", "topk")


def _config(broker: LocalBroker, data: Path, topic: str) -> Config:
    return broker.cfg.replace(
        paths={"data_dir": data},
        kafka={"packets_topic": topic, "results_topic_prefix": f"{topic}.", "partitions": 1},
        pipeline={"trigger_s": 1.0, "publish_results": False},
    )


def _replay(cfg: Config, *args: str) -> subprocess.Popen[str]:
    """``netmon replay`` of the sample into the test's topic, paced (about 30 s)."""
    return subprocess.Popen(
        [str(NETMON), "replay", str(SAMPLE), "--topic", cfg.kafka.packets_topic, "--json", "-q"]
        + ["--pps", "330", "--records-per-message", "50", "--delivery-timeout", "90", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=netmon_env(cfg, cfg.kafka.bootstrap),
        text=True,
    )


def _finish_replay(cfg: Config, proc: subprocess.Popen[str]) -> None:
    """Wait for the replay; one the outage outlasted (exit 1) is completed with ``--resume``."""
    out, err = proc.communicate(timeout=300)
    if proc.returncode == 1:
        resumed = _replay(cfg, "--resume", json.loads(out)["run_id"])
        out, err = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, err
    else:
        assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["produced"] == summary["acknowledged"]


def _until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f}s"
        time.sleep(0.5)
    return value


def _polled(pipeline: Pipeline, kind: str = "traffic") -> Any:
    """The kind's statistics after a poll; the pipeline must not have failed."""
    stats = pipeline.poll().get(kind)
    assert pipeline.failed() is None, pipeline.failed()
    return stats


def _traffic(cfg: Config) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(window_start_ns, proto): (packets, bytes)}``, each window written once."""
    table = read_results(results_dir(cfg, "traffic"))
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for row in [] if table is None else table.to_pylist():
        key = (int(row["window_start"].timestamp() * 1_000_000) * 1000, int(row["proto"]))
        assert key not in out, f"window {key} written twice"
        out[key] = (int(row["packets"]), int(row["bytes"]))
    return out


def _rows(cfg: Config, kind: str) -> list[tuple[Any, ...]]:
    table = read_results(results_dir(cfg, kind))
    return [] if table is None else sorted(tuple(r.values()) for r in table.to_pylist())


def _uninterrupted(spark: Any, cfg: Config, data: Path) -> Config:
    """The same kinds over the same topic on a fresh data directory, start to end, no fault."""
    fresh = cfg.replace(paths={"data_dir": data})
    pipeline = start_pipeline(spark, fresh, available_now=True, kinds=KINDS)
    try:
        pipeline.await_termination(300)
        assert pipeline.failed() is None, pipeline.failed()
    finally:
        pipeline.stop()
    return fresh


def _run_with_outage(
    spark: Any, broker: LocalBroker, tmp_path: Path, topic: str, *, down: Callable[[Pipeline], None]
) -> tuple[Pipeline, Config]:
    """Start the pipeline, replay, kill the broker after the first batch with data, call ``down``
    while it is dead, restart it, and wait until every packet is in the traffic results."""
    cfg = _config(broker, tmp_path / "data", topic)
    recreate_topic(cfg.kafka.bootstrap, topic, 1)
    pipeline = start_pipeline(spark, cfg, kinds=KINDS)
    try:
        # The source is set up (its first, empty trigger) before the topic starts to fill.
        _until(lambda: pipeline.queries["packets"].lastProgress, 120, "no trigger")
        replay = _replay(cfg)
        try:
            _until(lambda: (s := _polled(pipeline)) and s.batches and s.packets, 120, "no batch with data")
            assert replay.poll() is None, "the replay ended before the broker was killed"
            before = _polled(pipeline)
            killed_at = (before.batches, before.packets)
            kill_broker(broker)
            down(pipeline)
            broker.start()  # same state directory, same ports
            _polled(pipeline)
            _finish_replay(cfg, replay)
        finally:
            replay.kill()
        # Polled as `netmon pipeline` does: a poll restarts a query that died of the outage.
        _until(
            lambda: _polled(pipeline) and sum(p for p, _ in _traffic(cfg).values()) >= PACKETS,
            240,
            "not every packet counted",
        )
        after = _polled(pipeline)
        assert after.batches > killed_at[0] and after.packets > killed_at[1], "no batch after the restart"
        assert pipeline.active
    finally:
        pipeline.stop()
    return pipeline, cfg


def _check_results(spark: Any, cfg: Config, tmp_path: Path) -> None:
    assert _traffic(cfg) == traffic_per_window(SAMPLE)
    reference = _uninterrupted(spark, cfg, tmp_path / "uninterrupted")
    for kind in KINDS:
        rows = _rows(cfg, kind)
        assert rows and rows == _rows(reference, kind), kind


def test_broker_killed_and_restarted_under_a_running_pipeline_loses_and_repeats_nothing(
    spark: Any, own_broker: LocalBroker, tmp_path: Path
) -> None:
    """A short outage (the broker's own restart, a few seconds): the Kafka source waits it out."""

    def short_outage(pipeline: Pipeline) -> None:
        time.sleep(3.0)
        _polled(pipeline)

    pipeline, cfg = _run_with_outage(spark, own_broker, tmp_path, "faults.pipeline.kill", down=short_outage)
    assert pipeline.restarts == {}  # Spark's retries covered it
    _check_results(spark, cfg, tmp_path)


@pytest.mark.slow
def test_a_query_that_dies_of_a_long_outage_is_restarted_from_its_checkpoint(
    spark: Any, own_broker: LocalBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker stays down until the shared query gives up (about three minutes of Spark's
    retries); the pipeline waits for the broker, then starts the query again from its checkpoint."""

    def until_the_query_dies(pipeline: Pipeline) -> None:
        _until(lambda: pipeline.poll() and pipeline.waiting_for_broker, 480, "the query did not give up")
        assert pipeline.waiting_for_broker == ("packets",)
        assert pipeline.failed() is None and pipeline.active  # waiting, not failed
        assert not pipeline.queries["packets"].isActive

    with caplog.at_level(logging.WARNING, logger="pipeline.job"):
        pipeline, cfg = _run_with_outage(
            spark, own_broker, tmp_path, "faults.pipeline.long", down=until_the_query_dies
        )
    assert pipeline.restarts == {"packets": 1}
    assert pipeline.stats["traffic"].restarts == pipeline.stats["topk"].restarts == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("query lost the Kafka broker") for m in messages), messages
    assert any(m == "query restarted from its checkpoint after a broker outage" for m in messages), messages
    _check_results(spark, cfg, tmp_path)


def test_a_query_dead_of_an_outage_waits_for_the_broker_then_restarts_and_gives_up_after_repeats(
    spark: Any, own_broker: LocalBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The short form of the test above: a query whose Kafka source gives up after seconds
    instead of minutes (short client timeouts), under ``Pipeline.poll``'s recovery. While the
    broker is down the query waits (not failed, the pipeline active); once it answers, the query
    is started again from its checkpoint and reads on. A query that cannot be started again is
    given up after ``MAX_OUTAGE_RESTARTS`` attempts: its error is then the pipeline's failure."""
    from pipeline.job import MAX_OUTAGE_RESTARTS

    cfg = _config(own_broker, tmp_path / "data", "faults.pipeline.probe")
    bootstrap, topic = cfg.kafka.bootstrap, cfg.kafka.packets_topic
    recreate_topic(bootstrap, topic, 1)
    out, checkpoint = tmp_path / "data" / "probe", tmp_path / "data" / "checkpoints" / "probe"

    def start() -> Any:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.default.api.timeout.ms", "3000")
            .option("kafka.request.timeout.ms", "2000")
            .option("fetchOffset.numRetries", "1")
            .load()
        )
        return (
            source.selectExpr("CAST(value AS STRING) AS value")
            .writeStream.queryName("probe")
            .format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def produce(value: bytes) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send(topic, value)
        producer.flush()
        producer.close()

    def rows() -> list[str]:
        table = read_results(out)
        return [] if table is None else sorted(table.column("value").to_pylist())

    produce(b"before")
    pipeline = Pipeline(spark, cfg, {"probe": start()}, starters={"probe": start})
    try:
        _until(lambda: pipeline.poll() and rows() == ["before"], 120, "the first message was not read")
        kill_broker(own_broker)
        with caplog.at_level(logging.WARNING, logger="pipeline.job"):
            _until(lambda: pipeline.poll() is not None and pipeline.waiting_for_broker, 120, "no outage seen")
            assert pipeline.failed() is None and pipeline.active and pipeline.restarts == {}
            assert not pipeline.queries["probe"].isActive
            own_broker.start()
            _until(lambda: pipeline.poll() is not None and pipeline.restarts, 60, "no restart")
        assert pipeline.restarts == {"probe": 1} and pipeline.stats["probe"].restarts == 1
        assert pipeline.waiting_for_broker == () and pipeline.queries["probe"].isActive
        produce(b"after")
        _until(lambda: pipeline.poll() is not None and rows() == ["after", "before"], 120, "not read on")
        messages = [r.getMessage() for r in caplog.records]
        assert "query restarted from its checkpoint after a broker outage" in messages, messages

        # A query that cannot be started again: given up after MAX_OUTAGE_RESTARTS attempts.
        def cannot_start() -> Any:
            raise RuntimeError("no start")

        pipeline.starters["probe"] = cannot_start
        kill_broker(own_broker)
        _until(lambda: pipeline.poll() is not None and pipeline.waiting_for_broker, 120, "no second outage")
        own_broker.start()
        for _ in range(MAX_OUTAGE_RESTARTS):
            pipeline.poll()
        assert pipeline.waiting_for_broker == () and pipeline.restarts == {"probe": 1}
        failed = pipeline.failed()
        assert failed is not None and failed.startswith("probe: ") and "Timeout" in failed, failed
    finally:
        pipeline.stop()
