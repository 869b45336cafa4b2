"""The Alerts dashboard page, run with Streamlit's AppTest over a real outbox."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from alerts.outbox import Outbox, outbox_path
from alerts.rules import RuleEngine
from netmon.config import AlertRule
from tests.alerts.helpers import distinct_row
from tests.dashboard import chart_frames

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
RULE = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", subject_label="victim"
)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An outbox with one resolved alert, one firing alert and one dead letter."""
    state = tmp_path / "state"
    engine = RuleEngine([RULE])
    notes = engine.observe("distinct", distinct_row(1, "34.22.41.40", 305))
    notes += engine.observe("distinct", distinct_row(2, "10.0.0.7", 900))
    notes += engine.observe("distinct", distinct_row(3, "10.0.0.7", 900))  # 34.22.41.40 resolves
    with Outbox(outbox_path(state)) as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={n.event_id: ["chat", "pager"] for n in notes},
            records=engine.take_changes(),
            state=engine.snapshot(),
            offsets={},
        )
        outbox.record_attempt(notes[0].event_id, "chat", state="delivered", now=1, status=200)
        outbox.record_attempt(notes[0].event_id, "pager", state="dead", now=2, error="HTTP 401 Unauthorized")
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_STATE_DIR", str(state))
    st.cache_resource.clear()  # dashboard.data.config() is cached per process
    st.cache_data.clear()
    yield state
    st.cache_resource.clear()
    st.cache_data.clear()


def _check(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Alerts"]
    table = chart_frames.tables(at)[0]
    assert sorted(zip(table["subject"], table["status"], strict=True)) == [
        ("10.0.0.7", "firing"),
        ("34.22.41.40", "resolved"),
    ]
    assert set(table["→ pager"]) == {"dead", "pending"} and set(table["subject_label"]) == {"victim"}
    dead = chart_frames.tables(at)[1]
    assert list(dead["target"]) == ["pager"] and "401" in dead["last_error"].iloc[0]
    assert [m.value for m in at.metric] == ["1", "1", "4", "1"]  # firing, resolved, pending, dead


@pytest.mark.usefixtures("state_dir")
def test_alerts_page_in_the_app() -> None:
    assert '"pages/alerts.py"' in (DASHBOARD / "app.py").read_text()
    at = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=30)
    at.switch_page("pages/alerts.py").run()
    _check(at)


@pytest.mark.usefixtures("state_dir")
def test_alerts_page_alone_and_its_filters() -> None:
    at = AppTest.from_file(str(DASHBOARD / "pages" / "alerts.py"), default_timeout=30).run()
    _check(at)
    at.multiselect[0].set_value(["firing"]).run()
    assert list(chart_frames.tables(at)[0]["subject"]) == ["10.0.0.7"]
    at.multiselect[0].set_value(["firing", "resolved"]).run()
    at.text_input[0].input("34.22").run()
    assert list(chart_frames.tables(at)[0]["subject"]) == ["34.22.41.40"]


def test_alerts_page_without_an_outbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETMON_CONFIG", raising=False)
    monkeypatch.setenv("NETMON_STATE_DIR", str(tmp_path / "empty"))
    st.cache_resource.clear()
    st.cache_data.clear()
    at = AppTest.from_file(str(DASHBOARD / "pages" / "alerts.py"), default_timeout=30).run()
    assert not at.exception and "No alerts yet" in at.info[0].value
    st.cache_resource.clear()
