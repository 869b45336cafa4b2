"""Session fixtures: the project's own Kafka broker and one shared SparkSession.

Both are real: the broker is :class:`netmon.broker.LocalBroker` (Apache Kafka from Maven Central)
on free ports in a temporary state directory; Spark is a local session with the Kafka connector
jars. The jar cache is the user's (``NETMON_CACHE_DIR`` or ``~/.cache/netmon``) so it is fetched once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from netmon.config import Config, load_config

REPO_ROOT = Path(__file__).resolve().parents[1]
CAPTURES = REPO_ROOT.parent / "shared" / "captures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def captures_dir() -> Path:
    """The shared real third-party captures (``../shared/captures``); skip when absent."""
    if not CAPTURES.is_dir():
        pytest.skip(f"real captures not found at {CAPTURES}")
    return CAPTURES


@pytest.fixture(scope="session")
def netmon_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A configuration with temporary state/data dirs and free broker ports."""
    base = tmp_path_factory.mktemp("netmon")
    env = {k: v for k, v in os.environ.items() if k != "NETMON_CONFIG"}
    env.update({"NETMON_STATE_DIR": str(base / "state"), "NETMON_DATA_DIR": str(base / "data")})
    env.pop("NETMON_BOOTSTRAP_SERVERS", None)
    cfg = load_config(None, env=env)
    return cfg.replace(kafka={"port": free_port(), "controller_port": free_port()})


@pytest.fixture(scope="session")
def kafka_broker(netmon_config: Config) -> Iterator[object]:
    """The project's real Kafka broker, started once per test session."""
    from netmon.broker import LocalBroker

    broker = LocalBroker(netmon_config)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: object) -> str:
    """``"127.0.0.1:PORT"`` of the session's real broker."""
    return kafka_broker.bootstrap  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def spark(netmon_config: Config) -> Iterator[object]:
    """The one SparkSession of the test session (JVM start-up is slow), with the Kafka connector."""
    from pipeline.session import build_session

    session = build_session(netmon_config, "netmon-tests", master="local[2]", ui=False)
    yield session
    session.stop()
