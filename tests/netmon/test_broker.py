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


#: starts a broker as `netmon up` does (``supervised``), prints its pid, and waits to be killed
_STARTER = """
import sys, time
from netmon.broker import LocalBroker
from netmon.config import load_config
state, cache, port, controller, tag = sys.argv[1:]
cfg = load_config(None, env={"NETMON_STATE_DIR": state, "NETMON_CACHE_DIR": cache})
cfg = cfg.replace(kafka={"port": int(port), "controller_port": int(controller)})
print(LocalBroker(cfg).start(supervised={"NETMON_UP_TAG": tag}).pid, flush=True)
time.sleep(600)
"""


def test_a_broker_started_for_netmon_up_stops_when_it_is_killed(netmon_config, tmp_path) -> None:
    """The JVM of a broker started with ``supervised`` carries the tag and shuts down (SIGHUP, the
    parent-death signal: the JVM's shutdown hooks run) when the process that started it is
    killed outright."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid
    from pathlib import Path

    from netmon.orphans import tagged

    tag = uuid.uuid4().hex
    cfg = netmon_config.replace(
        paths={"state_dir": tmp_path / "state"}, kafka={"port": free_port(), "controller_port": free_port()}
    )
    argv = [
        str(cfg.paths.state_dir),
        str(cfg.paths.cache_dir),
        str(cfg.kafka.port),
        str(cfg.kafka.controller_port),
    ]
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, *argv, tag],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    broker = LocalBroker(cfg)
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert tagged(tag) == [pid] and broker.pid() == pid
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 60
        while broker.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert broker.pid() is None, "the broker outlived the process that started it"
        server_log = (Path(cfg.paths.state_dir) / "kafka" / "logs" / "server.log").read_text()
        assert "Terminating process due to signal SIGHUP" in server_log  # a graceful shutdown
    finally:
        if starter.poll() is None:
            starter.kill()
        for left in tagged(tag):
            os.kill(left, signal.SIGKILL)
