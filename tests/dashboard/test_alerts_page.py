"""The Alerts page: a firing alert's value against what it was compared with — the threshold, or
in baseline mode the top of its learned band (issue 20 item 2). AppTest over a real outbox written
by the real rule engine; an outbox of an older netmon gains the columns."""

from __future__ import annotations

import base64
import datetime as dt
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from alerts.outbox import Outbox, outbox_path
from alerts.rules import RuleEngine
from dashboard import data, data_alerts
from netmon.config.alerts import AlertRule
from tests.conftest import REPO_ROOT
from tests.dashboard import chart_frames

APP = REPO_ROOT / "dashboard" / "app.py"
PAGE = "pages/alerts.py"
T0 = dt.datetime(2025, 11, 1, 8, 0, 0, tzinfo=dt.UTC)
BASELINE = AlertRule(
    name="fan-in", source="distinct", field="distinct", subject="group", subject_label="victim",
    mode="baseline", warmup=5, min_value=10,
)  # fmt: skip
THRESHOLD = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", subject_label="victim"
)


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    data.config.clear()
    yield
    st.cache_data.clear()
    data.config.clear()


def _row(minute: int, group: str, distinct: int) -> dict:
    t = T0 + dt.timedelta(minutes=minute)
    return {
        "query": "ddos-sources-per-destination",
        "window_end": t.isoformat().replace("+00:00", "Z"),
        "group": group,
        "distinct": distinct,
        "rank": 1,
    }


def _outbox(state_dir: Path) -> list:
    """Normal fan-in for a while, then a rise: both rules fire on 192.0.2.9; return the records."""
    engine = RuleEngine([BASELINE, THRESHOLD])
    notes = []
    for minute in range(30):
        notes += engine.observe("distinct", _row(minute, "192.0.2.9", 40 + (minute % 3)))
    for minute in range(30, 33):
        notes += engine.observe("distinct", _row(minute, "192.0.2.9", 900))
    records = engine.take_changes()
    with Outbox(outbox_path(state_dir)) as outbox:
        outbox.commit_batch(
            notifications=notes, routes={}, records=records, state=engine.snapshot(), offsets={}
        )
    return records


def test_a_firing_alert_is_drawn_against_its_band_or_threshold(monkeypatch, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    records = {r.rule: r for r in _outbox(state_dir)}
    assert set(records) == {"fan-in", "ddos"} and all(r.status == "firing" for r in records.values())
    band = records["fan-in"].threshold
    # the learned band of a subject whose normal is 40-42 distinct sources: above it, below the rise
    assert band is not None and 42 < band < 900 and records["fan-in"].mode == "baseline"
    assert records["ddos"].threshold == 200 and records["ddos"].mode == "threshold"
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("NETMON_STATE_DIR", str(state_dir))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at = at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    specs = {chart_frames.title(c): c for c in chart_frames.charts(at)}
    chart = specs["Firing alerts: the value against what it was compared with"]
    value, mark = chart["data"]["datasets"]
    drawn = dict(
        zip(chart_frames.places(mark, chart), _numbers(chart_frames.values(mark, chart)), strict=True)
    )
    assert drawn == {"fan-in 192.0.2.9": pytest.approx(band), "ddos 192.0.2.9": 200}
    values = dict(
        zip(chart_frames.places(value, chart), _numbers(chart_frames.values(value, chart)), strict=True)
    )
    assert values == {"fan-in 192.0.2.9": 900, "ddos 192.0.2.9": 900}


def _numbers(x: Any) -> list[float]:
    """A plotly figure's numbers: a list, or a typed array (``{"dtype", "bdata"}``, base64)."""
    if isinstance(x, dict):
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]).tolist()
    return [float(v) for v in x]


def test_an_older_outbox_gains_the_columns_and_its_rows_have_none(tmp_path: Path) -> None:
    path = outbox_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE alerts (episode_id TEXT PRIMARY KEY, alert_id TEXT NOT NULL, rule TEXT NOT NULL,"
        " source TEXT NOT NULL, query TEXT NOT NULL, subject TEXT NOT NULL, subject_label TEXT NOT NULL,"
        " severity TEXT NOT NULL, status TEXT NOT NULL, first_seen REAL, last_seen REAL, resolved_at REAL,"
        " value REAL, peak REAL, suppressed INTEGER NOT NULL DEFAULT 0, labels TEXT NOT NULL,"
        " updated REAL NOT NULL)"
    )
    old.execute(
        "INSERT INTO alerts VALUES ('e1', 'a1', 'ddos', 'distinct', 'q', '10.0.0.1', 'victim', 'critical',"
        " 'firing', 1.0, 2.0, NULL, 300, 300, 0, '{}', 2.0)"
    )
    old.commit()
    old.close()
    with Outbox(path):
        pass
    df = data_alerts.alerts(str(tmp_path))
    assert list(df["rule"]) == ["ddos"] and df["threshold"].isna().all() and df["mode"].isna().all()
    assert data_alerts.value_against_threshold(df).empty  # nothing to compare with: no chart
