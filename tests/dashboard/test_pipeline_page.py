"""The Pipeline page: is each pipeline query keeping up? (AppTest over real-format rows; no Spark.)

The ``sys`` rows are made the pipeline's way: progress events through ``pipeline.sys_stats.sys_row``
committed per batch with ``pipeline.batch_sink.write_table`` under ``results/sys/<query>/``; the
status file is ``pipeline.job.QueryStats`` as ``Pipeline._write_status`` writes it. The shared
query ``packets`` is catching up with a backlog its batch cap bounds, the ``joins`` query reads all
there is.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard import data_pipeline as dp
from netmon.config import Config
from netmon.results import results_dir, status_file
from pipeline.batch_sink import write_table
from pipeline.job import QueryStats
from pipeline.sys_stats import BatchFigures, Knobs, sys_row, sys_table
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames

APP = REPO_ROOT / "dashboard" / "app.py"
PAGE = "pages/pipeline_status.py"
T0 = dt.datetime(2025, 11, 1, 8, 0, 0, tzinfo=dt.UTC)
BATCHES = 60  # a batch every 10 s: 10 minutes
CAP = 600  # [pipeline] max_batch_messages


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _progress(query: str, batch_id: int, t: dt.datetime, lag: int, messages: int) -> dict[str, Any]:
    """A progress event of ``query``'s batch at ``t``: ``messages`` read, ``lag`` left in Kafka."""
    end = 10_000 + CAP * batch_id
    return {
        "name": query,
        "batchId": batch_id,
        "timestamp": _iso(t),
        "numInputRows": messages,
        "inputRowsPerSecond": messages / 10,
        "processedRowsPerSecond": messages / 4.0,
        "durationMs": {"addBatch": 3_900, "triggerExecution": 4_000 + 100 * (batch_id % 3)},
        "stateOperators": [],
        "sources": [{"endOffset": {"p": {"0": end}}, "latestOffset": {"p": {"0": end + lag}}}],
        "observedMetrics": {},
    }


def _lags(query: str, falling: bool) -> list[int]:
    if query == "joins":
        return [0] * BATCHES
    if falling:
        return [1_000 + 500 * b for b in range(BATCHES)]
    return [60_000 - 500 * b for b in range(BATCHES)]


def _write(data_dir: Path, *, falling: bool = False) -> list[dict[str, Any]]:
    """Ten minutes of both queries' rows; the status file with late and malformed totals."""
    cfg = Config().replace(
        paths={"data_dir": data_dir}, pipeline={"trigger_s": 10.0, "max_batch_messages": CAP}
    )
    knobs = Knobs.of(cfg)
    rows = []
    for query in ("packets", "joins"):
        for b, lag in enumerate(_lags(query, falling)):
            t = T0 + dt.timedelta(seconds=10 * b)
            messages = CAP if query == "packets" else 40
            figures = BatchFigures(packets=messages * 1000, newest_ns=round((t.timestamp() - 3) * 1e9))
            row = sys_row(
                _progress(query, b, t, lag, messages), knobs, figures if query == "packets" else None
            )
            assert row is not None
            write_table(sys_table([row]), results_dir(cfg, "sys") / query, b)
            rows.append(row)
    status = {
        "updated": time.time(),
        "queries": {
            kind: {
                **vars(QueryStats(batches=BATCHES, malformed=3, future=1, late_dropped=late)),
                "active": True,
            }
            for kind, late in (("traffic", 7), ("topk", 9), ("joins", 2))
        },
    }
    path = status_file(cfg)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(status))
    return rows


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """No cached read or configuration of another test's data directory, before or after."""
    st.cache_data.clear()
    data.config.clear()
    yield
    st.cache_data.clear()
    data.config.clear()


def _app(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> AppTest:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(data_dir))
    monkeypatch.setenv("NETMON_STATE_DIR", str(data_dir.parent / "state"))
    data.config.clear()
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at = at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def _charts(at: AppTest) -> dict[str, dict[str, Any]]:
    return {chart_frames.title(c): c for c in chart_frames.charts(at)}


def test_catching_up_and_keeping_up(monkeypatch, tmp_path) -> None:
    rows = _write(tmp_path / "data")
    at = _app(monkeypatch, tmp_path / "data")
    assert at.title[0].value == "Pipeline"
    verdicts = [m.value for m in at.markdown if m.value.startswith("**")]
    assert verdicts[0].startswith("**packets**: catching up") and verdicts[1].startswith(
        "**joins**: keeping up"
    )
    metrics = [(m.label, m.value) for m in at.metric]
    last = {r["query"]: r for r in rows if r["batch_id"] == BATCHES - 1}
    packets, joins = metrics[:6], metrics[6:12]
    assert [label for label, _ in packets] == [
        "Input",
        "Processed",
        "Kafka lag",
        "Backlog",
        "Batch − event time",
        "Batch",
    ]
    assert dict(packets)["Input"] == f"{last['packets']['input_messages_per_s']:,.0f} msg/s"
    assert dict(packets)["Processed"] == f"{last['packets']['processed_messages_per_s']:,.0f} msg/s"
    assert dict(packets)["Kafka lag"] == f"{last['packets']['lag_messages']:,} msg"
    assert dict(packets)["Backlog"] == f"{last['packets']['backlog_s']:,.1f} s"
    assert dict(packets)["Batch − event time"] == "3.0 s"
    assert dict(packets)["Batch"] == f"{last['packets']['batch_ms']:,} ms"
    assert dict(joins)["Kafka lag"] == "0 msg" and dict(joins)["Backlog"] == "0.0 s"
    # The lag fell over the range (the default: the last 15 min, all ten minutes written).
    lag_metric = next(m for m in at.metric if m.label == "Kafka lag")
    assert lag_metric.delta == f"{-500 * (BATCHES - 1):+,} over the range"
    charts = _charts(at)
    assert list(charts) == [
        "Kafka messages per second: taken in (since the previous trigger) vs processed (in the batch)",
        "Kafka lag: messages waiting after each batch",
        "Lag in seconds",
        "Batch duration",
        "Batch duration as a share of the trigger interval (over 1: the batch overran)",
    ]
    rates = charts[
        "Kafka messages per second: taken in (since the previous trigger) vs processed (in the batch)"
    ]
    assert set(chart_frames.names(rates)) == {
        "packets, taken in",
        "packets, processed",
        "joins, taken in",
        "joins, processed",
    }
    lag = charts["Kafka lag: messages waiting after each batch"]
    packets_lag = chart_frames.series(lag, "packets")
    assert len(chart_frames.places(packets_lag, lag)) == BATCHES
    share = charts["Batch duration as a share of the trigger interval (over 1: the batch overran)"]
    assert chart_frames.lines(share)[0] == 1.0
    # The totals since the start: late and malformed per kind, no bookkeeping.
    table = chart_frames.tables(at)[0]
    assert list(table["query"]) == ["traffic", "topk", "joins"]
    assert list(table["late_dropped"]) == [7, 9, 2] and set(table["malformed"]) == {3}
    assert "last_batch_id" not in table.columns and "late_in_batches" not in table.columns


def test_falling_behind(monkeypatch, tmp_path) -> None:
    _write(tmp_path / "data", falling=True)
    at = _app(monkeypatch, tmp_path / "data")
    verdicts = [m.value for m in at.markdown if m.value.startswith("**")]
    assert verdicts[0].startswith("**packets**: falling behind")
    # a shorter range: the last 5 min, 31 batches of each query
    at.radio[0].set_value("last 5 min").run()
    assert not at.exception, at.exception
    lag = _charts(at)["Kafka lag: messages waiting after each batch"]
    assert len(chart_frames.series(lag, "packets")["data"]) == 300 // 10 + 1


def test_without_statistics_or_status(monkeypatch, tmp_path) -> None:
    at = _app(monkeypatch, tmp_path / "empty")
    assert "No pipeline statistics or status yet" in at.info[0].value
    # a status file but no sys rows (the sys kind not run): the totals still
    status = status_file(Config().replace(paths={"data_dir": tmp_path / "status-only"}))
    status.parent.mkdir(parents=True)
    status.write_text(
        json.dumps({"updated": time.time(), "queries": {"traffic": vars(QueryStats(batches=2))}})
    )
    at = _app(monkeypatch, tmp_path / "status-only")
    assert "No pipeline statistics in this time range" in at.info[0].value
    assert list(chart_frames.tables(at)[0]["query"]) == ["traffic"]


def test_verdicts_and_counts() -> None:
    rows = pd.DataFrame({"lag_messages": [None, None], "backlog_s": [None, None], "trigger_s": [1.0, 1.0]})
    assert dp.verdict(rows) == "lag unknown"
    rows = pd.DataFrame({"lag_messages": [9, 0], "backlog_s": [9.0, 0.0], "trigger_s": [1.0, 1.0]})
    assert dp.verdict(rows) == "keeping up"
    df = pd.DataFrame({"late_rows": [1, None], "malformed": [None, None], "packets": [1, 2]})
    assert dp.counts_columns(df) == ["late_rows"]
