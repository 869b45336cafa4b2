"""Fault tests: a Kafka broker of each test's own (killed with SIGKILL, restarted), and helpers.

The session broker of ``tests/conftest.py`` is shared by every other test, so these tests never
kill it: each starts a :class:`netmon.broker.LocalBroker` with its own state directory and ports.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netmon.broker import LocalBroker
from netmon.config import Config
from tests.conftest import free_port

NETMON = Path(sys.executable).with_name("netmon")


@pytest.fixture
def own_broker(netmon_config: Config, tmp_path: Path) -> Iterator[LocalBroker]:
    """A real broker of this test's own: its own state directory and free ports."""
    cfg = netmon_config.replace(
        paths={"state_dir": tmp_path / "state", "data_dir": tmp_path / "data"},
        kafka={"port": free_port(), "controller_port": free_port()},
    )
    broker = LocalBroker(cfg)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(timeout_s=15)


def kill_broker(broker: LocalBroker) -> int:
    """``kill -9`` the broker's JVM and wait until it is gone; return its pid."""
    pid = broker.kill()
    assert pid is not None, "the broker is not running"
    return pid


def netmon_env(cfg: Config, bootstrap: str) -> dict[str, str]:
    """The environment for a ``netmon`` subprocess: this test's dirs and broker, no user config."""
    env = {k: v for k, v in os.environ.items() if k != "NETMON_CONFIG"}
    env.update(
        NETMON_STATE_DIR=str(cfg.paths.state_dir),
        NETMON_DATA_DIR=str(cfg.paths.data_dir),
        NETMON_BOOTSTRAP_SERVERS=bootstrap,
    )
    return env


def topic_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` now (by the ``netmon.records`` header of every message up to the end)."""
    from tests.ingest.kafka_util import consume_all

    return sum(int(dict(m.headers).get("netmon.records", b"0")) for m in consume_all(bootstrap, topic))


def wait_for_message_count(bootstrap: str, topic: str, at_least: int, timeout_s: float = 60.0) -> None:
    """Wait until ``topic`` holds at least ``at_least`` messages (counted by end offsets)."""
    from tests.ingest.kafka_util import wait_for_messages

    deadline = time.monotonic() + timeout_s
    while wait_for_messages(bootstrap, topic, timeout_s=timeout_s) < at_least:
        assert time.monotonic() < deadline, f"{topic} did not reach {at_least} messages"
        time.sleep(0.1)
