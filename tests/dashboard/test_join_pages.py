"""The Joins and Load shedding pages over real streaming results (replayed sample, real Kafka and Spark).

The data is the restart scenario of ``tests/pipeline/test_join_stream.py``: the unshed handshake
query and a link query under the live PNI controller, with the controller's per-batch statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from netmon.config import Config
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames
from tests.pipeline.test_join_stream import restarted_joins

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

APP = REPO_ROOT / "dashboard" / "app.py"
PAGES = REPO_ROOT / "dashboard" / "pages"


@pytest.fixture
def dashboard_env(spark, kafka_bootstrap, netmon_config, tmp_path_factory, tmp_path, monkeypatch) -> Config:
    """The dashboard configured (``NETMON_CONFIG``) with the restart run's data dir."""
    from dashboard import data

    cfg = restarted_joins(spark, netmon_config, tmp_path_factory)["cfg"]
    toml = Path(tmp_path / "netmon.toml")
    toml.write_text(f"[paths]\ndata_dir = {json.dumps(str(cfg.paths.data_dir))}\n")
    monkeypatch.setenv("NETMON_CONFIG", str(toml))
    monkeypatch.delenv("NETMON_DATA_DIR", raising=False)
    data.config.clear()  # loaded once per process: reload with this environment
    yield cfg
    data.config.clear()


def _charts(at) -> list[dict]:
    return chart_frames.charts(at)


def _check_joins(at) -> None:
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Handshakes"].replace(",", "")) > 100
    assert metrics["Median RTT"].endswith(" ms")
    assert int(metrics["Link matches"].replace(",", "")) > 0
    titles = [chart_frames.title(c) for c in _charts(at)]
    assert titles[:2] == ["Handshake RTT (SYN → SYN-ACK)", "RTT percentiles of the busiest servers"]
    assert "Keys seen on both streams within T" in titles
    if int(metrics["Half-open SYNs"].replace(",", "")):
        assert "SYNs without a SYN-ACK within T" in titles


def _check_shedding(at) -> None:
    assert not at.exception, at.exception
    assert at.selectbox[0].options == ["handshake", "web-live"]
    charts = _charts(at)
    assert len(charts) == 4  # utilisation, fractions, output, strategy comparison
    assert chart_frames.lines(charts[0])[0] == pytest.approx(0.002)  # the budget line
    assert set(chart_frames.names(charts[1])) == {"x_left", "x_right"}
    assert "pni" in chart_frames.names(charts[3])


def test_joins_page(dashboard_env) -> None:
    from streamlit.testing.v1 import AppTest

    _check_joins(AppTest.from_file(str(PAGES / "joins.py"), default_timeout=60).run())


def test_shedding_page_follows_the_selected_query(dashboard_env) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(PAGES / "shedding.py"), default_timeout=60).run()
    _check_shedding(at)
    assert {m.label: m.value for m in at.metric}["Strategy"] == "none"  # the handshake query
    at.selectbox[0].select("web-live").run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Strategy"] == "pni" and metrics["CPU budget"] == "0%"
    x_left, x_right = (float(v) for v in metrics["x_L / x_R"].split(" / "))
    assert min(x_left, x_right) < 1


def test_pages_through_the_app(dashboard_env) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, at.exception
    at.switch_page("pages/joins.py").run()
    _check_joins(at)
    at.switch_page("pages/shedding.py").run()
    _check_shedding(at)
