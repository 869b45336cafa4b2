"""The charts and tables a page drew, read back from their HTML (``dashboard.chartjs``,
``dashboard.tables``) in ``AppTest``: what the browser is given, not the frame it was made from."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dashboard import tables as html_tables
from dashboard.chartjs import embedded


def charts(at: Any) -> list[dict[str, Any]]:
    """Each chart's Chart.js configuration, in the page's order; none drawn by Plotly (a
    figure ``dashboard.chartjs`` could not translate falls back to it)."""
    assert not at.get("plotly_chart"), "a chart fell back to Plotly: dashboard.chartjs.Unsupported"
    return [embedded(html.proto.body) for html in at.get("html") if "data-netmon-chart" in html.proto.body]


def tables(at: Any) -> list[pd.DataFrame]:
    """Each table's frame (``dashboard.tables``), in the page's order: what the browser is given.
    None is an ``st.dataframe`` (the pages draw every table with ``dashboard.tables``)."""
    assert not at.dataframe, "a table drawn by st.dataframe, not dashboard.tables"
    return [html_tables.embedded(h.proto.body) for h in at.get("html") if "data-netmon-table" in h.proto.body]


def title(chart: dict[str, Any]) -> str:
    return str(chart["options"]["plugins"]["title"]["text"])


def names(chart: dict[str, Any]) -> list[str]:
    """The series' names (Plotly's trace names), in order."""
    return [d["label"] for d in chart["data"]["datasets"]]


def series(chart: dict[str, Any], name: str) -> dict[str, Any]:
    return next(d for d in chart["data"]["datasets"] if d["label"] == name)


def lines(chart: dict[str, Any]) -> list[float]:
    """The horizontal lines' heights (``add_hline``), in order."""
    return [line["y"] for line in chart["options"]["plugins"]["netmonLines"]["lines"]]


def places(dataset: dict[str, Any], chart: dict[str, Any]) -> list[Any]:
    """A series' positions along the chart's index axis (x; y for horizontal bars)."""
    axis = chart["options"]["indexAxis"]
    return [point[axis] for point in dataset["data"]]


def values(dataset: dict[str, Any], chart: dict[str, Any]) -> list[Any]:
    """A series' values (y; x for horizontal bars)."""
    axis = "y" if chart["options"]["indexAxis"] == "x" else "x"
    return [point[axis] for point in dataset["data"]]
