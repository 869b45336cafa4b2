"""The charts the browser draws (``dashboard.chartjs``) show exactly the frames the pages give.

The oracle is the frame itself, not the Plotly figure in between: on random frames, each chart
kind's Chart.js configuration is read back and compared with the frame's own groups — every
series, every point (times as epoch milliseconds), names, colours, dashes, stacking — and a
histogram's bars with ``numpy.histogram`` of the column. Then the frame's HTML: the configuration
survives the round trip, a name cannot end the script, and a figure that cannot be translated is
drawn by Plotly instead.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import chartjs, charts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

T0 = pd.Timestamp("2026-11-27 12:00:00", tz="UTC")


def _ms(t: Any) -> int:
    return int(pd.Timestamp(t).value // 1_000_000)


def _frame(seed: int, groups: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(groups):
        for i in sorted(rng.choice(n * 3, size=n, replace=False)):
            value = float(rng.integers(0, 1000)) if rng.random() > 0.1 else np.nan
            rows.append({"t": T0 + pd.Timedelta(seconds=int(i)), "v": value, "g": f"g{g}", "m": f"m{g % 2}"})
    return pd.DataFrame(rows).sample(frac=1, random_state=seed).reset_index(drop=True)


def _points(ds: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [(p["x"], p["y"]) for p in ds["data"]]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), groups=st.integers(1, 6), n=st.integers(1, 150))
def test_lines_carry_every_group_and_point(seed: int, groups: int, n: int) -> None:
    df = _frame(seed, groups, n)
    cfg = chartjs.config(charts.line(df, "t", "v", color="g", dash="m", title="v", legend_title="g"))
    sets = cfg["data"]["datasets"]
    expected = {
        f"{g}, {m}": [(_ms(t), None if np.isnan(v) else v) for t, v in zip(part["t"], part["v"], strict=True)]
        for (g, m), part in df.groupby(["g", "m"], sort=False)
    }
    assert {d["label"]: _points(d) for d in sets} == expected
    firsts = list(dict.fromkeys(df["g"]))
    for d in sets:
        g, m = d["label"].split(", ")
        assert d["borderColor"] == chartjs.THEME_COLORS[firsts.index(g) % 10]
        dash = list(dict.fromkeys(df["m"])).index(m)
        assert d["borderDash"] == chartjs._DASHES[charts.DASHES[dash]]
        assert d["pointRadius"] == (
            3 if max(len(p) for p in expected.values()) <= charts.MARKERS_UP_TO else 0
        )
    x = cfg["options"]["scales"]["x"]
    assert x["type"] == "linear" and x["netmonFormat"] == "time"
    assert cfg["options"]["plugins"]["title"]["text"] == "v"
    assert cfg["options"]["plugins"]["legend"]["title"]["text"] == "g"


def test_stacked_areas_and_steps() -> None:
    df = _frame(3, 3, 20)
    cfg = chartjs.config(charts.line(df, "t", "v", color="g", stacked=True))
    sets = cfg["data"]["datasets"]
    assert [d["fill"] for d in sets] == ["origin", "-1", "-1"]
    assert {d["stack"] for d in sets} == {"area"} and cfg["options"]["scales"]["y"]["stacked"] is True
    stepped = chartjs.config(charts.line(df, "t", "v", color="g", shape="hv"))
    assert {d["stepped"] for d in stepped["data"]["datasets"]} == {"before"}  # Plotly's hv
    plain = chartjs.config(charts.line(df, "t", "v", color="g"))
    assert not any("stepped" in d or "fill" in d for d in plain["data"]["datasets"])
    assert plain["options"]["scales"]["y"]["stacked"] is False


def test_several_columns_are_several_lines() -> None:
    df = pd.DataFrame({"t": [T0, T0 + pd.Timedelta(seconds=1)], "a": [1.0, 2.0], "b": [3.0, np.nan]})
    sets = chartjs.config(charts.line(df, "t", ["a", "b"]))["data"]["datasets"]
    assert [(d["label"], _points(d)) for d in sets] == [
        ("a", [(_ms(T0), 1.0), (_ms(T0) + 1000, 2.0)]),
        ("b", [(_ms(T0), 3.0), (_ms(T0) + 1000, None)]),
    ]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), colors=st.integers(0, 4))
def test_bars_stacked_by_colour_or_side_by_side(seed: int, n: int, colors: int) -> None:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "k": [f"10.0.0.{i}" for i in rng.integers(0, 50, n)],
            "n": rng.integers(0, 10_000, n),
            "p": rng.random(n),
            "c": [f"q{i}" for i in rng.integers(0, max(colors, 1), n)],
        }
    )
    cfg = chartjs.config(charts.bars(df, "k", "n", color="c" if colors else None))
    sets = cfg["data"]["datasets"]
    # categories in the order the series meet them, series by series (as Plotly orders them)
    by_series = [k for _, part in df.groupby("c", sort=False) for k in part["k"]] if colors else list(df["k"])
    assert cfg["options"]["scales"]["x"]["labels"] == list(dict.fromkeys(by_series))
    if colors:
        expected = {
            c: list(zip(part["k"], part["n"], strict=True)) for c, part in df.groupby("c", sort=False)
        }
        assert {d["label"]: _points(d) for d in sets} == expected
        assert {d["stack"] for d in sets} == {"bars"}
    else:
        assert [_points(d) for d in sets] == [list(zip(df["k"], df["n"], strict=True))]
    side = chartjs.config(charts.bars(df, "k", ["n", "p"]))
    assert [d["label"] for d in side["data"]["datasets"]] == ["n", "p"]
    assert not any("stack" in d for d in side["data"]["datasets"])
    assert [_points(d) for d in side["data"]["datasets"]] == [
        list(zip(df["k"], df[c].tolist(), strict=True)) for c in ("n", "p")
    ]


def test_horizontal_bars_and_their_tooltips() -> None:
    df = pd.DataFrame(
        {"label": ["a", "b", "c"], "value": [3, 1, 2], "rank": [1, 2, 3], "share": [0.5, 0.25, 0.25]}
    )
    fig = charts.bars(
        df, "value", "label", orientation="h", text=["x", "y", "z"], hover={"rank": "", "share": ":.2%"}
    )
    cfg = chartjs.config(fig)
    (ds,) = cfg["data"]["datasets"]
    assert cfg["options"]["indexAxis"] == "y" and cfg["options"]["scales"]["y"]["labels"] == ["a", "b", "c"]
    assert [(p["y"], p["x"]) for p in ds["data"]] == [("a", 3), ("b", 1), ("c", 2)]
    assert ds["netmonExtra"] == [
        "x; rank=1; share=50.00%",
        "y; rank=2; share=25.00%",
        "z; rank=3; share=25.00%",
    ]


def test_a_histogram_counts_as_numpy_does() -> None:
    rng = np.random.default_rng(7)
    df = pd.DataFrame({"rtt": rng.exponential(5.0, 2000), "q": rng.choice(["a", "b"], 2000)})
    cfg = chartjs.config(charts.histogram(df, "rtt", color="q", nbins=60))
    edges = np.histogram_bin_edges(df["rtt"], bins=60)
    centers = ((edges[:-1] + edges[1:]) / 2).tolist()
    for d in cfg["data"]["datasets"]:
        counts, _ = np.histogram(df.loc[df["q"] == d["label"], "rtt"], bins=edges)
        assert _points(d) == list(zip(centers, counts.tolist(), strict=True))
    assert sum(p["y"] for d in cfg["data"]["datasets"] for p in d["data"]) == len(df)
    assert cfg["options"]["scales"]["y"]["stacked"] is True


def test_a_timeline_is_floating_bars_from_start_to_end() -> None:
    start = [T0, T0 + pd.Timedelta(minutes=5)]
    end = [T0 + pd.Timedelta(seconds=90), T0 + pd.Timedelta(minutes=9)]
    df = pd.DataFrame({"s": start, "e": end, "label": ["r1 x", "r2 y"], "sev": ["page", "ticket"]})
    cfg = chartjs.config(charts.timeline(df, "s", "e", "label", color="sev"))
    got = {d["label"]: [(p["y"], p["x"]) for p in d["data"]] for d in cfg["data"]["datasets"]}
    assert got == {
        "page": [("r1 x", [_ms(start[0]), _ms(end[0])])],
        "ticket": [("r2 y", [_ms(start[1]), _ms(end[1])])],
    }
    assert cfg["options"]["scales"]["x"]["netmonFormat"] == "time"


def test_rows_get_an_axis_each_named_by_its_row() -> None:
    df = pd.DataFrame({"t": [T0, T0, T0 + pd.Timedelta(seconds=1)], "v": [1, 2, 3], "k": ["a", "b", "a"]})
    cfg = chartjs.config(charts.rows(df, "t", "v", "k", shape="hv"))
    sets = cfg["data"]["datasets"]
    assert [(d["label"], d.get("yAxisID", "y"), _points(d)) for d in sets] == [
        ("a", "y", [(_ms(T0), 1), (_ms(T0) + 1000, 3)]),
        ("b", "y2", [(_ms(T0), 2)]),
    ]
    scales = cfg["options"]["scales"]
    assert [scales[a]["title"]["text"] for a in ("y", "y2")] == ["a", "b"]
    assert {scales[a]["stack"] for a in ("y", "y2")} == {"rows"}


def test_horizontal_lines_ticks_and_ranges() -> None:
    df = pd.DataFrame({"t": [T0, T0 + pd.Timedelta(seconds=1)], "v": [0.2, 0.9]})
    fig = charts.line(df, "t", "v")
    fig.add_hline(y=0.8, line_dash="dash", annotation_text="budget")
    fig.add_hline(y=0.5, line_dash="dot", line_color="crimson")
    fig.update_layout(yaxis_range=[-0.05, 1.05])
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    cfg = chartjs.config(fig)
    lines = cfg["options"]["plugins"]["netmonLines"]["lines"]
    assert [(x["y"], x["dash"], x["text"]) for x in lines] == [(0.8, [7, 4], "budget"), (0.5, [2, 3], "")]
    assert lines[1]["color"] == "crimson"
    unranged = chartjs.config(charts.line(df, "t", "v").add_hline(y=3.0))["options"]["scales"]["y"]
    assert (unranged["suggestedMin"], unranged["suggestedMax"]) == (3.0, 3.0)  # the line is in view
    y = cfg["options"]["scales"]["y"]
    assert (y["min"], y["max"], y["netmonFormat"], y["beginAtZero"]) == (-0.05, 1.05, "percent", True)


def test_what_cannot_be_translated_is_refused() -> None:
    with pytest.raises(chartjs.Unsupported, match="pie"):
        chartjs.config(go.Figure(go.Pie(values=[1, 2])))
    fig = charts.line(pd.DataFrame({"t": [1, 2], "v": [1, 2]}), "t", "v")
    fig.update_yaxes(tickformat=".3s")
    with pytest.raises(chartjs.Unsupported, match="tick format"):
        chartjs.config(fig)


def test_the_html_holds_its_configuration_and_nothing_ends_its_script() -> None:
    df = pd.DataFrame({"k": ["</script><script>alert(1)</script>", "b"], "n": [1, 2]})
    cfg = chartjs.config(charts.bars(df, "k", "n", title="<b>t</b>"))
    page = chartjs.page(cfg, "/netmon", "ab12")
    assert page.count("</script>") == 2  # the configuration's and the loader's
    assert chartjs.embedded(page) == cfg
    assert 'id="netmon-chart-ab12"' in page and "netmonDraw('ab12')" in page
    assert '"/netmon/app/static"' in page and chartjs.CHART_JS in page
    assert 'id="netmon-chart-ximgsrcy"' in chartjs.page(cfg, "", 'x"><img src=y>')  # an id is a name
    with pytest.raises(ValueError, match="not a chart"):
        chartjs.embedded("<p>hi</p>")


def test_a_datetime_column_with_gaps_and_time_zones() -> None:
    stamps = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None, dt.datetime(2026, 1, 1, 0, 0, 2, tzinfo=dt.UTC)]
    df = pd.DataFrame({"t": pd.to_datetime(stamps, utc=True), "v": [1.0, 2.0, 3.0]})
    (ds,) = chartjs.config(charts.line(df, "t", "v"))["data"]["datasets"]
    base = _ms(stamps[0])
    assert _points(ds) == [(base, 1.0), (None, 2.0), (base + 2000, 3.0)]


def test_the_pages_fall_back_to_plotly_for_a_figure_it_cannot_draw(tmp_path) -> None:
    from streamlit.testing.v1 import AppTest

    script = tmp_path / "page.py"
    script.write_text(
        "import plotly.graph_objects as go\n"
        "import pandas as pd\n"
        "from dashboard import charts, chartjs\n"
        "chartjs.show(go.Figure(go.Pie(values=[1, 2])))\n"
        "chartjs.show(charts.line(pd.DataFrame({'t': [1, 2], 'v': [1, 2]}), 't', 'v'))\n"
    )
    at = AppTest.from_file(str(script), default_timeout=30).run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 1
    (html,) = at.get("html")
    assert html.proto.unsafe_allow_javascript
    assert chartjs.embedded(html.proto.body)["data"]["datasets"][0]["data"] == [
        {"x": 1, "y": 1},
        {"x": 2, "y": 2},
    ]
