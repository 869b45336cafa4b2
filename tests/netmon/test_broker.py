"""The local broker's lifecycle, against the real Kafka broker."""

from __future__ import annotations

import socket

import pytest

from netmon.broker import BrokerError, LocalBroker, list_topics
from tests.conftest import free_port

pytestmark = pytest.mark.kafka


def test_start_twice_is_harmless(kafka_broker: LocalBroker) -> None:
    pid = kafka_broker.pid()
    status = kafka_broker.start()
    assert status.running and status.pid == pid
    assert list_topics(kafka_broker.bootstrap) == status.topics


def test_status_lists_topics(kafka_broker: LocalBroker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic("netmon.test-status", 1, 1)])
    admin.close()
    status = kafka_broker.status()
    assert status.running and "netmon.test-status" in status.topics
    assert f"127.0.0.1:{kafka_broker.cfg.kafka.port}" in status.line()


def test_port_in_use_is_a_clear_one_line_error(netmon_config, tmp_path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        cfg = netmon_config.replace(
            paths={"state_dir": tmp_path / "state"}, kafka={"port": port, "controller_port": free_port()}
        )
        with pytest.raises(BrokerError) as err:
            LocalBroker(cfg).start()
    message = str(err.value)
    assert "\n" not in message
    assert f"port {port} on 127.0.0.1 is already in use" in message


def test_stop_when_stopped_is_harmless(netmon_config, tmp_path) -> None:
    cfg = netmon_config.replace(paths={"state_dir": tmp_path / "state"})
    broker = LocalBroker(cfg)
    assert broker.stop() == "not running"
    assert broker.kill() is None  # (killing a running one: tests/faults)
    assert not broker.status().running


def test_stop_then_start_again_keeps_topics(netmon_config, tmp_path, monkeypatch) -> None:
    """A second broker of its own (its own dir and ports): stop is graceful, data survives a restart.

    Its cluster id begins with "-" (one random id in 64 does), which once failed the storage format.
    """
    import uuid

    from kafka.admin import KafkaAdminClient, NewTopic

    monkeypatch.setattr("netmon.broker.uuid.uuid4", lambda: uuid.UUID(bytes=b"\xfb" + bytes(15)))
    cfg = netmon_config.replace(
        paths={"state_dir": tmp_path / "state"}, kafka={"port": free_port(), "controller_port": free_port()}
    )
    broker = LocalBroker(cfg)
    broker.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("netmon.survives", 1, 1)])
        admin.close()
        assert broker.stop().startswith("stopped")
        assert not broker.status().running
        assert "netmon.survives" in broker.start().topics
    finally:
        broker.stop()
