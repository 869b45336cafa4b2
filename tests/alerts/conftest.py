"""Fixtures for the alert tests: real webhook receivers, per-test Kafka topics and state dirs."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netmon.config import Config
from tests.alerts.helpers import SECRET
from tests.alerts.receiver import Receiver


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    """Make started receivers (``receivers(fail_first=2)``); all are stopped at the end."""
    made: list[Receiver] = []

    def make(secret: str = SECRET, **kwargs: Any) -> Receiver:
        r = Receiver(secret, **kwargs)
        made.append(r)
        return r.start()

    yield make
    for r in made:
        r.stop()


#: The default kinds without ``features``: the service then runs the threshold rules
#: (``alerts.defaults.DEFAULT_RULES``), which most of these tests exercise on result rows; the
#: detection rules of the default pipeline have their own tests (test_service_features.py).
THRESHOLD_KINDS = ("traffic", "topk", "distinct", "joins", "shedding", "sys")


@pytest.fixture
def state_cfg(netmon_config: Config, tmp_path: Path) -> Config:
    """A configuration with a fresh state directory (no broker needed), threshold rules."""
    return netmon_config.replace(paths={"state_dir": tmp_path / "state"}, pipeline={"kinds": THRESHOLD_KINDS})


@pytest.fixture
def kafka_cfg(netmon_config: Config, kafka_bootstrap: str, tmp_path: Path) -> Config:
    """Fresh state directory and result topics of this test only (``t<hex>.<kind>``), real broker."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    return netmon_config.replace(
        paths={"state_dir": tmp_path / "state"},
        kafka={"bootstrap_servers": kafka_bootstrap, "results_topic_prefix": prefix, "partitions": 2},
        pipeline={"kinds": THRESHOLD_KINDS},
    )
