"""Session fixtures: the project's own Kafka broker and one shared SparkSession.

Both are real: the broker is :class:`netmon.broker.LocalBroker` (Apache Kafka from Maven Central)
on free ports in a temporary state directory; Spark is a local session with the Kafka connector
jars. The jar cache is the user's (``NETMON_CACHE_DIR`` or ``~/.cache/netmon``) so it is fetched once.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from netmon.config import Config, load_config

REPO_ROOT = Path(__file__).resolve().parents[1]
CAPTURES = REPO_ROOT.parent / "shared" / "captures"


def free_port() -> int:
    """A free port for a listening service, outside the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` can be handed out again — to Spark's driver, or to
    an outgoing connection — before the broker binds it; ports below the ephemeral range are not.
    """
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, min(low, 32768))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


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
