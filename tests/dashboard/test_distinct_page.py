"""The Distinct counts page: helpers on small frames, and an AppTest smoke test on real results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard import data_distinct as dd
from ingest.replay import ReplayOptions, replay
from netmon.config import Config
from netmon.kafka_admin import recreate_topic
from netmon.results import committed_files, results_dir
from pipeline.job import start_pipeline
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames

APP = REPO_ROOT / "dashboard" / "app.py"
PAGE = "pages/distinct_counts.py"
SCAN = REPO_ROOT / "samples" / "port-scan.pcap"
SCANNER = "198.51.100.200"  # samples/README.md: probes ~500 ports of 10.0.0.10
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _frame(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["second", "group", "distinct"])
    df["window_end"] = [T0 + timedelta(seconds=s) for s in df["second"]]
    df["query"], df["rank"] = "q", 1
    return df[dd.COLUMNS]


def test_suspects_lists_groups_that_reached_the_threshold():
    df = _frame([(1, "a", 5), (2, "a", 50), (3, "a", 20), (1, "b", 10), (2, "b", 9), (3, "c", 99)])
    got = dd.suspects(df, 10)
    assert got["group"].tolist() == ["c", "a", "b"]
    a = got.set_index("group").loc["a"]
    assert (a["peak"], a["peak_at"], a["latest"], a["latest_at"], a["slides_over"]) == (
        50,
        T0 + timedelta(seconds=2),
        20,
        T0 + timedelta(seconds=3),
        2,
    )
    assert dd.suspects(df, 1000).empty


def test_top_series_and_time_range():
    df = _frame([(1, "a", 5), (2, "a", 50), (1, "b", 10), (60, "b", 11), (61, "c", 7)])
    assert set(dd.top_series(df, 2)["group"]) == {"a", "b"}
    assert dd.in_range(df, 1)["group"].tolist() == ["b", "c"]
    assert dd.in_range(df, None) is df


def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> AppTest:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(data_dir))
    data.config.clear()  # the dashboard's configuration is cached per process
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at.switch_page(PAGE).run()


def test_page_without_results_says_so(monkeypatch, tmp_path):
    at = _app(monkeypatch, tmp_path / "empty")
    assert not at.exception
    assert at.title[0].value == "Distinct counts"
    assert "No distinct-count results yet" in at.info[0].value


@pytest.fixture(scope="module")
def scan_results(spark, kafka_bootstrap, netmon_config: Config, tmp_path_factory) -> Config:
    """The default distinct queries run by the real pipeline over ``port-scan.pcap``."""
    cfg = netmon_config.replace(
        paths={"data_dir": tmp_path_factory.mktemp("distinct-page") / "data"},
        kafka={
            "packets_topic": "netmon.test.distinct-page",
            "results_topic_prefix": "netmon.test.distinct-page.",
        },
    )
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    close_s = max(q.window_s for q in cfg.queries.distinct) + 1 + cfg.pipeline.watermark_s
    replay(
        SCAN,
        bootstrap=cfg.kafka.bootstrap,
        topic=cfg.kafka.packets_topic,
        options=ReplayOptions(close_windows_s=close_s),
        progress=False,
    )
    pipeline = start_pipeline(spark, cfg, kinds=("distinct",), available_now=True)
    try:
        pipeline.await_termination(timeout_s=600)
        assert pipeline.failed() is None, pipeline.failed()
    finally:
        pipeline.stop()
    assert committed_files(results_dir(cfg, "distinct")), "the pipeline committed no distinct rows"
    return cfg


@pytest.mark.spark
@pytest.mark.kafka
def test_page_charts_each_query_and_lists_the_scanner(monkeypatch, scan_results):
    at = _app(monkeypatch, Path(scan_results.paths.data_dir))
    assert not at.exception
    assert at.title[0].value == "Distinct counts"
    names = [q.name for q in scan_results.queries.distinct]
    assert [h.value for h in at.subheader] == names
    assert len(chart_frames.charts(at)) == len(names)
    # Suspects at the default threshold (100): the scanner, by its ports and by nothing else.
    tables = chart_frames.tables(at)
    assert tables and all(list(t.columns[:2]) == ["group", "peak"] for t in tables)
    assert any(SCANNER in t["group"].tolist() for t in tables)
