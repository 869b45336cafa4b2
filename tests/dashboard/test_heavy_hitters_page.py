"""The Heavy hitters page over real streaming top-k results (replayed sample, real Kafka and Spark)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from netmon.config import Config
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames
from tests.pipeline.test_topk_stream import QUERIES, offline_reports, replayed_topk

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

APP = REPO_ROOT / "dashboard" / "app.py"
PAGE = REPO_ROOT / "dashboard" / "pages" / "heavy_hitters.py"


@pytest.fixture
def dashboard_env(
    spark, kafka_bootstrap, netmon_config, tmp_path_factory, tmp_path, monkeypatch
) -> Iterator[Config]:
    """The dashboard configured (``NETMON_CONFIG``) with the replayed run's data dir and queries."""
    from dashboard import data

    cfg = replayed_topk(spark, netmon_config, tmp_path_factory)
    lines = ["[paths]", f"data_dir = {json.dumps(str(cfg.paths.data_dir))}", ""]
    for q in QUERIES:
        lines += ["[[queries.topk]]", *(f"{f} = {json.dumps(getattr(q, f))}" for f in q.__dataclass_fields__)]
    toml = Path(tmp_path / "netmon.toml")
    toml.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("NETMON_CONFIG", str(toml))
    monkeypatch.delenv("NETMON_DATA_DIR", raising=False)
    data.config.clear()  # loaded once per process: reload with this environment
    yield cfg
    data.config.clear()


def _charts(at) -> list[dict]:
    return chart_frames.charts(at)


def _check_current_report(at, query: str) -> None:
    """The bar chart and metrics show the query's newest report, δ drawn as a line."""
    last = offline_reports(queries=tuple(q for q in QUERIES if q.name == query))[query][-1]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["δ (threshold)"] == f"{last['delta']:,}"
    assert metrics["Items above δ"] == f"{len(last['items']):,}"
    bars, history = _charts(at)
    assert chart_frames.lines(bars) == [last["delta"]]
    keys = [x for trace in bars["data"]["datasets"] for x in chart_frames.places(trace, bars)]
    assert keys == [item["key"] for item in last["items"]]
    counts = [y for trace in bars["data"]["datasets"] for y in chart_frames.values(trace, bars)]
    assert counts == [item["count"] for item in last["items"]]
    assert "δ" in chart_frames.names(history)
    # the table: the same items in rank order, their shares given as fractions (shown as percents)
    (table,) = chart_frames.tables(at)
    assert list(table["key"]) == [item["key"] for item in last["items"]]
    assert list(table["count"]) == [item["count"] for item in last["items"]]
    assert list(table["rank"]) == list(range(1, len(last["items"]) + 1))
    assert 0 < table["share"].min() <= table["share"].max() <= 1


def test_page_shows_each_query_current_report_and_history(dashboard_env) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(PAGE), default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.selectbox[0].options == [q.name for q in QUERIES]
    _check_current_report(at, QUERIES[0].name)
    at.selectbox[0].set_value("ports").run()
    assert not at.exception, at.exception
    _check_current_report(at, "ports")
    at.radio[0].set_value("last 5 min").run()  # the sidebar's time range
    assert not at.exception, at.exception
    assert len(_charts(at)) == 2


def test_app_navigates_to_the_page(dashboard_env) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, at.exception
    at.switch_page("pages/heavy_hitters.py").run()
    assert not at.exception, at.exception
    assert len(_charts(at)) == 2
    assert at.title[0].value == "Heavy hitters"
