"""The dashboard's figures (``dashboard.charts``) draw the series Plotly Express drew before them.

``plotly.express`` is the oracle: on random frames, each builder's traces are compared with those
of the Plotly Express call it replaced — the same traces in the same order, the same names, the
same x and y values, colours and dashes — and its margins hold what the dashboard's charts put
in them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.express as px
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import charts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _values(v: Any) -> list[Any]:
    if v is None:
        return []
    return [None if isinstance(x, float) and np.isnan(x) else x for x in np.asarray(v, dtype=object).tolist()]


def _same_traces(ours: Any, theirs: Any, *, colors: bool = True) -> None:
    assert [t.name for t in ours.data] == [t.name for t in theirs.data]
    for a, b in zip(ours.data, theirs.data, strict=True):
        assert _values(a.x) == _values(b.x), a.name
        assert _values(a.y) == _values(b.y), a.name
        if colors:
            assert a.line.color == b.line.color, a.name
            assert (a.line.dash or "solid") == (b.line.dash or "solid"), a.name


@st.composite
def frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(1, 30))
    return pd.DataFrame(
        {
            "t": pd.date_range("2024-05-01", periods=n, freq="min", tz="UTC")[
                draw(st.permutations(range(n)))
            ],
            "v": [draw(st.one_of(st.floats(-1e6, 1e6), st.just(np.nan))) for _ in range(n)],
            "w": [draw(st.floats(0, 1)) for _ in range(n)],
            "g": [draw(st.sampled_from(["TCP", "UDP", "ICMP"])) for _ in range(n)],
            "m": [draw(st.sampled_from(["taken in", "processed"])) for _ in range(n)],
        }
    )


@settings(max_examples=60, deadline=None)
@given(frames())
def test_lines_are_plotly_express_lines(df: pd.DataFrame) -> None:
    _same_traces(charts.line(df, "t", "v", color="g"), px.line(df, x="t", y="v", color="g"))
    _same_traces(
        charts.line(df, "t", "v", color="g", dash="m"), px.line(df, x="t", y="v", color="g", line_dash="m")
    )
    ours, theirs = charts.line(df, "t", ["v", "w"]), px.line(df, x="t", y=["v", "w"])
    _same_traces(ours, theirs)
    stacked = charts.line(df, "t", "w", color="g", stacked=True)
    _same_traces(stacked, px.area(df, x="t", y="w", color="g"))
    assert {t.stackgroup for t in stacked.data} == {"1"}


@settings(max_examples=40, deadline=None)
@given(frames())
def test_bars_histograms_and_timelines_are_plotly_express_ones(df: pd.DataFrame) -> None:
    keyed = df.assign(k=[f"10.0.0.{i}" for i in range(len(df))])
    for ours, theirs in [
        (charts.bars(keyed, "k", "w"), px.bar(keyed, x="k", y="w")),
        (charts.bars(keyed, "k", "w", color="g"), px.bar(keyed, x="k", y="w", color="g")),
        (charts.bars(keyed, "k", ["v", "w"]), px.bar(keyed, x="k", y=["v", "w"], barmode="group")),
        (charts.histogram(df, "w", color="g"), px.histogram(df, x="w", color="g", nbins=60)),
    ]:
        assert [t.name for t in ours.data] == [t.name for t in theirs.data]
        for a, b in zip(ours.data, theirs.data, strict=True):
            assert _values(a.x) == _values(b.x) and _values(a.y) == _values(b.y)
            assert a.marker.color == b.marker.color
        assert ours.layout.barmode == (theirs.layout.barmode or "group")
    spans = df.assign(end=df["t"] + pd.Timedelta("90s"), label="r " + df["g"])
    ours = charts.timeline(spans, "t", "end", "label", color="m")
    theirs = px.timeline(spans, x_start="t", x_end="end", y="label", color="m")
    assert [t.name for t in ours.data] == [t.name for t in theirs.data]
    for a, b in zip(ours.data, theirs.data, strict=True):
        assert _values(a.y) == _values(b.y)
        assert (
            pd.to_datetime(pd.Series(_values(a.base)), utc=True).tolist()
            == pd.to_datetime(pd.Series(_values(b.base)), utc=True).tolist()
        )
        assert np.allclose(np.asarray(a.x, dtype=float), np.asarray(b.x, dtype=float))


def test_rows_are_one_line_per_facet_on_its_own_axis() -> None:
    df = pd.DataFrame({"t": [1, 2, 3, 1, 2], "v": [1.0, 1.0, 2.0, 5.0, 5.0], "k": ["a", "a", "a", "b", "b"]})
    fig = charts.rows(df, "t", "v", "k", shape="hv")
    assert [(t.yaxis, t.y.tolist(), t.line.shape) for t in fig.data] == [
        ("y", [1.0, 1.0, 2.0], "hv"),
        ("y2", [5.0, 5.0], "hv"),
    ]
    top, bottom = fig.layout.yaxis.domain, fig.layout.yaxis2.domain
    assert top[0] > bottom[1] and top[1] == 1 and bottom[0] == 0
    assert [a.text for a in fig.layout.annotations] == ["a", "b"]


def test_markers_while_lines_are_short() -> None:
    short = pd.DataFrame({"t": range(charts.MARKERS_UP_TO), "v": 1.0})
    long = pd.DataFrame({"t": range(charts.MARKERS_UP_TO + 1), "v": 1.0})
    assert charts.line(short, "t", "v").data[0].mode == "lines+markers"
    assert charts.line(long, "t", "v").data[0].mode == "lines"
    assert charts.line(long, "t", "v", markers=True).data[0].mode == "lines+markers"


def test_margins_hold_the_legend_and_the_labels() -> None:
    """Wide enough for the widths measured in Chromium on the dashboard's charts (a legend of
    ``batch_utilisation``: 145 px; ``processed_messages_per_s``: 210; the category
    ``ddos 192.0.2.12`` on the left: 121; slanted ``198.51.100.10:443`` below: 110)."""
    assert charts.margins(["batch_utilisation", "est_cpu", ""])["r"] >= 145
    assert charts.margins(["input_messages_per_s", "processed_messages_per_s"])["r"] >= 210
    assert charts.margins(y_labels=["ddos 192.0.2.12"])["l"] >= 121
    assert charts.margins(x_labels=["198.51.100.10:443"])["b"] >= 110
    assert charts.margins() == {"t": 60, "l": 92, "r": 44, "b": 84}
    fig = charts.line(
        pd.DataFrame({"t": [1], "v": [2], "g": ["TCP"]}), "t", "v", color="g", legend_title="protocol"
    )
    assert fig.layout.margin.r == charts.margins(["TCP", "protocol"])["r"]
