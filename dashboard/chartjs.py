"""The dashboard's charts drawn by Chart.js: a Plotly figure turned into a Chart.js configuration.

Why not Plotly in the browser: a page opened in a new tab pays for evaluating Plotly's 4.7 MB
module before its first chart is drawn. Measured in Chromium on this 2-core machine (new tabs of
one browser, the median of 3; docs/dashboard.md): an empty Streamlit page 1.05–1.3 s, one Plotly
chart 2.5 s, eight 3.0–3.3 s; Streamlit's Vega-Lite 1.6 s for one, 2.7–2.9 s for eight; Chart.js
(200 KB, a canvas per chart, served as a static file the browser keeps) 1.4 s for four charts and
1.8 s for eight, each in its own frame. Issue 21's budget is 2 s a page.

So the pages keep building their figures as before (``dashboard.charts``: Plotly's figure objects
are the description, checked against Plotly Express), and :func:`show` draws one with Chart.js:
:func:`config` translates the few kinds the pages use — lines (with markers, dashes, steps,
stacked areas, one row per y axis), bars (vertical, horizontal, stacked, side by side, floating
for a timeline), histograms (binned here, as ``numpy.histogram_bin_edges`` does; Plotly's own
bins may differ slightly), horizontal lines with their labels (``add_hline``), titles, axis
titles, categories, percent ticks, ranges — and anything else raises :class:`Unsupported`, on
which :func:`show` falls back to ``st.plotly_chart`` (the page still works, slower).

What is lost against Plotly: zoom and pan (a tooltip per point stays: every series' value at the
x under the pointer), bar labels (their text is in the tooltip), and Streamlit's dark theme.

Chart.js 3.9.1 is vendored in ``dashboard/static`` (MIT, its notice in the file; Debian's
``libjs-chart.js`` 3.9.1 is the same file) with ``netmon-chart.js``, the few callbacks a JSON
configuration cannot hold; the server serves them with Streamlit's static file serving
(``dashboard.server``). Each chart is an ``st.iframe`` of a few lines of HTML that loads both
(from the browser's cache after the first) and draws; it sets ``window.__netmonDrawn`` once drawn,
which the browser benchmark waits for.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

__all__ = [
    "CHART_JS",
    "STATIC",
    "Unsupported",
    "config",
    "embedded",
    "is_time",
    "json_values",
    "page",
    "show",
]

log = logging.getLogger(__name__)

#: The vendored Chart.js and our callbacks, under Streamlit's ``/app/static/``.
CHART_JS = "chart-3.9.1.min.js"
STATIC = "netmon-chart.js"
#: Plotly's default height (px): a figure without one is drawn this high.
DEFAULT_HEIGHT = 450
_MARK = "netmon-chart-config"
_CONFIG = re.compile(r'<script type="application/json" id="' + _MARK + r'-[\w-]*">(.*?)</script>', re.S)


class Unsupported(ValueError):
    """A figure uses something :func:`config` does not translate."""


def _plain(v: Any) -> Any:
    """A JSON value: numbers as numbers, NaN/NaT/None as null (a gap), datetimes as epoch ms."""
    if v is None:
        return None
    if isinstance(v, (np.datetime64, pd.Timestamp, dt.datetime)):
        t = pd.Timestamp(v)
        return None if pd.isna(t) else int(t.value // 1_000_000)  # .value: UTC ns, with or without a zone
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if math.isnan(v) or math.isinf(v) else float(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if v is pd.NA or v is pd.NaT:
        return None
    return str(v)


def json_values(seq: Any) -> list[Any]:
    """A sequence's values as JSON values: datetimes as epoch ms, NaN/NaT/None as null."""
    if seq is None:
        return []
    if isinstance(seq, np.ndarray) and np.issubdtype(seq.dtype, np.datetime64):
        ms = seq.astype("datetime64[ms]").astype("int64").tolist()
        return [None if m == np.iinfo(np.int64).min else m for m in ms]
    return [_plain(v) for v in seq]


def is_time(seq: Any) -> bool:
    """Whether a sequence holds datetimes (its first value that is not None)."""
    if seq is None or len(seq) == 0:
        return False
    if isinstance(seq, np.ndarray) and np.issubdtype(seq.dtype, np.datetime64):
        return True
    first = next((v for v in seq if v is not None), None)
    return isinstance(first, (np.datetime64, pd.Timestamp, dt.datetime))


def _is_text(seq: Any) -> bool:
    return seq is not None and any(isinstance(v, str) for v in seq)


_DASHES = {"solid": [], "dot": [2, 3], "dash": [7, 4], "longdash": [12, 5], "dashdot": [7, 3, 2, 3]}
_DASHES["longdashdot"] = [12, 4, 2, 4]


def _dash(name: Any) -> list[int]:
    if name is None:
        return []
    if name not in _DASHES:
        raise Unsupported(f"line dash {name!r}")
    return _DASHES[name]


#: Streamlit's light theme's categorical colours. Streamlit's Plotly template colours traces with
#: the placeholders ``#000001``…``#000010``, which its frontend replaces with these
#: (``streamlit.elements.lib.streamlit_plotly_theme``); a frame drawn by Chart.js gets them here.
THEME_COLORS = (
    "#0068c9",
    "#83c9ff",
    "#ff2b2b",
    "#ffabab",
    "#29b09d",
    "#7defa1",
    "#ff8700",
    "#ffd16a",
    "#6d3fc0",
    "#d5dae5",
)
_PLACEHOLDER = re.compile(r"#0000(0[1-9]|10)")


def _color(c: str) -> str:
    """``c``, a placeholder of Streamlit's template replaced by its colour."""
    found = _PLACEHOLDER.fullmatch(c)
    return THEME_COLORS[int(found.group(1)) - 1] if found else c


def _colorway(fig: go.Figure) -> tuple[str, ...]:
    import plotly.io as pio

    way = fig.layout.colorway or pio.templates[pio.templates.default].layout.colorway
    return tuple(way or ("#636efa",))


def _axis_format(axis: Any) -> str | None:
    fmt = axis.tickformat
    if fmt in (None, ""):
        return None
    if fmt == ".0%":
        return "percent"
    raise Unsupported(f"tick format {fmt!r}")


def _title(obj: Any) -> str:
    title = obj.title
    return "" if title is None or title.text is None else str(title.text)


def _extra(trace: Any, n: int) -> list[str] | None:
    """Per point, what the tooltip says beyond the value: the bar's text and its custom data,
    named as the figure's hover template names them."""
    parts: list[list[str]] = [[] for _ in range(n)]
    if getattr(trace, "text", None) is not None and not isinstance(trace.text, str):
        for i, t in enumerate(list(trace.text)[:n]):
            parts[i].append(str(t))
    custom = getattr(trace, "customdata", None)
    if custom is not None:
        names = re.findall(r"(\w+)=%\{customdata\[(\d+)\]([^}]*)\}", trace.hovertemplate or "")
        for i, row in enumerate(list(custom)[:n]):
            for name, j, fmt in names:
                v = row[int(j)]
                if fmt == ":.2%":
                    text = f"{float(v):.2%}"
                elif fmt in ("", None):
                    # custom data of mixed columns arrives as floats: a rank 1.0 is shown as 1
                    plain = _plain(v)
                    text = str(int(plain)) if isinstance(plain, float) and plain.is_integer() else str(plain)
                else:
                    raise Unsupported(f"hover format {fmt!r}")
                parts[i].append(f"{name}={text}")
    return ["; ".join(p) for p in parts] if any(parts) else None


def _lines(fig: go.Figure) -> list[dict[str, Any]]:
    """``add_hline``'s shapes (a horizontal line across the plot) with their labels."""
    out = []
    labels = {
        (a.yref or "y", a.y): str(a.text)
        for a in fig.layout.annotations or ()
        if a.xref == "x domain" and a.text is not None
    }
    for s in fig.layout.shapes or ():
        if s.type != "line" or s.xref != "x domain" or s.y0 != s.y1:
            raise Unsupported("a shape other than a horizontal line across the plot")
        out.append(
            {
                "y": _plain(s.y0),
                "scale": (s.yref or "y").replace(" domain", ""),
                "color": _color(s.line.color or "#444"),
                "dash": _dash(s.line.dash),
                "text": labels.get((s.yref or "y", s.y0), ""),
            }
        )
    return out


def _histogram(traces: Sequence[Any], colors: tuple[str, ...]) -> list[dict[str, Any]]:
    """Histogram traces as stacked bars over shared bins (``bingroup``): one dataset a trace,
    the count of its values in each bin."""
    values = [np.asarray([v for v in json_values(t.x) if v is not None], float) for t in traces]
    every = np.concatenate(values) if values else np.zeros(0)
    nbins = max(int(t.nbinsx or 0) for t in traces) or 10
    edges = np.histogram_bin_edges(every, bins=nbins) if len(every) else np.array([0.0, 1.0])
    centers = ((edges[:-1] + edges[1:]) / 2).tolist()
    sets = []
    for i, (t, v) in enumerate(zip(traces, values, strict=True)):
        counts, _ = np.histogram(v, bins=edges)
        sets.append(
            {
                "type": "bar",
                "label": t.name or "",
                "netmonLegend": bool(t.name) and t.showlegend is not False,
                "data": [{"x": c, "y": int(n)} for c, n in zip(centers, counts, strict=True)],
                "backgroundColor": _color(
                    t.marker.color if t.marker and t.marker.color else colors[i % len(colors)]
                ),
            }
        )
    return sets


def config(fig: go.Figure) -> dict[str, Any]:
    """Chart.js's configuration of ``fig`` (see the module's doc for what is translated);
    :class:`Unsupported` for anything else."""
    colors = _colorway(fig)
    layout = fig.layout
    kinds = {t.type for t in fig.data}
    if not kinds <= {"scatter", "bar", "histogram"}:
        raise Unsupported(f"trace types {sorted(kinds - {'scatter', 'bar', 'histogram'})}")
    horizontal = any(t.type == "bar" and t.orientation == "h" for t in fig.data)
    if horizontal and any(t.orientation != "h" for t in fig.data if t.type == "bar"):
        raise Unsupported("horizontal and vertical bars together")
    # The index axis holds places (x, or y for horizontal bars); the value axis lengths.
    place_of = (lambda t: t.y) if horizontal else (lambda t: t.x)
    value_of = (lambda t: t.x) if horizontal else (lambda t: t.y)
    place_axis = layout.yaxis if horizontal else layout.xaxis
    places = [place_of(t) for t in fig.data if t.type != "histogram"]
    categorical = place_axis.type == "category" or any(_is_text(p) for p in places)
    timed = place_axis.type == "date" or (not categorical and any(is_time(p) for p in places))
    floating = any(t.type == "bar" and t.base is not None for t in fig.data)
    if floating and not horizontal:
        raise Unsupported("floating vertical bars")
    labels: list[str] = []
    if categorical:
        seen: dict[str, None] = {}
        for p in places:
            for v in json_values(p):
                seen.setdefault(str(v), None)
        labels = list(seen)
    barmode = layout.barmode or "group"
    datasets: list[dict[str, Any]] = []
    histograms = [t for t in fig.data if t.type == "histogram"]
    if histograms:
        if len(histograms) != len(fig.data):
            raise Unsupported("a histogram with other traces")
        datasets = _histogram(histograms, colors)
    axes: list[str] = []
    for i, t in enumerate(fig.data if not histograms else ()):
        color = (t.line.color if t.type == "scatter" else None) or (t.marker.color if t.marker else None)
        color = _color(color if isinstance(color, str) else colors[i % len(colors)])
        xs, ys = json_values(place_of(t)), json_values(value_of(t))
        if categorical:
            xs = [None if x is None else str(x) for x in xs]
        if t.type == "bar" and t.base is not None:
            bases = json_values(t.base)
            lengths = json_values(t.x)
            ys = [None if b is None or n is None else [b, b + n] for b, n in zip(bases, lengths, strict=True)]
        key = "y" if not horizontal else "x"
        other = "x" if not horizontal else "y"
        points = [{other: x, key: y} for x, y in zip(xs, ys, strict=True)]
        ds: dict[str, Any] = {
            "label": t.name or "",
            "netmonLegend": bool(t.name) and t.showlegend is not False,
            "data": points,
        }
        extra = _extra(t, len(points))
        if extra:
            ds["netmonExtra"] = extra
        axis = t.yaxis or "y"
        if axis != "y":
            if horizontal:
                raise Unsupported("horizontal bars on several axes")
            ds["yAxisID"] = axis
        if axis not in axes:
            axes.append(axis)
        if t.type == "scatter":
            mode = t.mode or "lines"
            ds.update(
                type="line",
                borderColor=color,
                backgroundColor=color,
                borderWidth=2,
                borderDash=_dash(t.line.dash),
                pointRadius=3 if "markers" in mode else 0,
                showLine="lines" in mode,
                spanGaps=False,
            )
            if horizontal:
                if "lines" in mode:
                    raise Unsupported("lines beside horizontal bars")
                ds["indexAxis"] = "y"  # marks beside horizontal bars: a value per category
            if t.line.shape == "hv":
                ds["stepped"] = "before"
            elif t.line.shape not in (None, "linear"):
                raise Unsupported(f"line shape {t.line.shape!r}")
            if t.stackgroup is not None:
                ds.update(fill="-1" if any("stack" in d for d in datasets) else "origin", stack="area")
                ds["backgroundColor"] = color + "99" if color.startswith("#") and len(color) == 7 else color
            if "markers" in mode and t.marker and t.marker.symbol == "line-ns-open":
                ds.update(pointStyle="line", rotation=90, pointRadius=(t.marker.size or 12) / 2)
                ds["pointBorderWidth"] = (t.marker.line.width if t.marker.line else None) or 2
        else:
            ds.update(type="bar", backgroundColor=color, borderWidth=0)
            if t.base is not None:
                ds["minBarLength"] = 3  # a one-second episode on a day's axis still shows
            if barmode in ("relative", "stack"):
                ds["stack"] = "bars"
        datasets.append(ds)
    place_id, value_id = ("y", "x") if horizontal else ("x", "y")
    place_scale: dict[str, Any] = {"title": {"display": bool(_title(place_axis)), "text": _title(place_axis)}}
    if categorical:
        place_scale.update(type="category", labels=labels)
    else:
        place_scale.update(type="linear", netmonFormat="time" if timed else _axis_format(place_axis))
    if histograms:
        place_scale.update(offset=False, grid={"offset": False})
    value_axis = layout.xaxis if horizontal else layout.yaxis
    scales: dict[str, Any] = {place_id: place_scale}
    stacked_lines = any(d.get("stack") == "area" for d in datasets)
    stacked_bars = histograms or any(d.get("stack") == "bars" for d in datasets)
    for n, axis in enumerate(axes or ["y"]):
        src = value_axis if axis in ("y", "x") else layout[axis.replace("y", "yaxis")]
        scale: dict[str, Any] = {
            "type": "linear",
            "title": {"display": bool(_title(src)), "text": _title(src)},
            "netmonFormat": "time" if floating else _axis_format(src),
            "beginAtZero": src.rangemode == "tozero" or bool(stacked_bars),
            "stacked": bool(stacked_lines or stacked_bars),
        }
        if src.range is not None:
            scale.update(min=_plain(src.range[0]), max=_plain(src.range[1]))
        if len(axes) > 1:
            # one row per axis (``charts.rows``), the first at the top; its name on the axis
            scale.update(stack="rows", stackWeight=1, offset=True, weight=len(axes) - n)
            scale["title"] = {"display": True, "text": _row_name(fig, axis)}
        scales[value_id if axis == "y" else axis] = scale
    lines = _lines(fig)
    for line in lines:
        # Plotly's autorange takes in a line drawn on the axis: so do the scale's bounds
        drawn_on = scales.get(line["scale"] if not horizontal else value_id)
        if drawn_on is not None and line["y"] is not None and "min" not in drawn_on:
            drawn_on["suggestedMin"] = min(drawn_on.get("suggestedMin", line["y"]), line["y"])
            drawn_on["suggestedMax"] = max(drawn_on.get("suggestedMax", line["y"]), line["y"])
    legend_title = _title(layout.legend) if layout.legend else ""
    height = int(layout.height or DEFAULT_HEIGHT)
    return {
        "type": "bar" if any(d.get("type") == "bar" for d in datasets) else "line",
        "data": {"datasets": datasets},
        "options": {
            "animation": False,
            "responsive": True,
            "maintainAspectRatio": False,
            "indexAxis": place_id,
            "interaction": {"mode": "index" if not floating else "nearest", "intersect": bool(floating)},
            "scales": scales,
            "plugins": {
                "title": {"display": bool(_title(layout)), "text": _title(layout), "align": "start"},
                "legend": {
                    "display": any(d["netmonLegend"] for d in datasets),
                    "position": "right",
                    "title": {"display": bool(legend_title), "text": legend_title},
                },
                "netmonLines": {"lines": lines},
            },
            "netmonHeight": height,
            "netmonGap": layout.bargap,
        },
    }


def _row_name(fig: go.Figure, axis: str) -> str:
    """The name a ``charts.rows`` figure writes beside the row of ``axis``: its trace's name."""
    return next((str(t.name) for t in fig.data if (t.yaxis or "y") == axis and t.name), "")


def _loader(base: str) -> str:
    """The script that starts loading Chart.js and our callbacks from ``base/app/static``, once per
    tab: a promise kept on ``window`` (``__netmonChartJs``) that a page switch or a refresh reuses."""
    static = json.dumps(f"{base.rstrip('/')}/app/static")
    return (
        "(() => {const at = " + static + ";"
        "const load = (src) => new Promise((ok, no) => {const s = document.createElement('script');"
        "s.src = at + '/' + src; s.onload = ok; s.onerror = no; document.head.appendChild(s);});"
        "window.__netmonChartJs = window.__netmonChartJs"
        f" || load('{CHART_JS}').then(() => load('{STATIC}'));}})();"
    )


def page(cfg: dict[str, Any], base: str = "", chart_id: str = "0") -> str:
    """The chart's HTML, put in the page itself (``st.html``): a canvas, the configuration as JSON
    (``<`` escaped: no text in it can end the script element), and a script that loads Chart.js
    and our callbacks from ``base/app/static`` once per tab (a promise kept on ``window``: a page
    switch or a refresh reuses them) and draws the chart in the canvas ``chart_id`` names."""
    text = json.dumps(cfg, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    height = cfg["options"]["netmonHeight"]
    ident = re.sub(r"[^A-Za-z0-9_-]", "", chart_id)
    return (
        f'<div style="position:relative;height:{height}px">'
        f'<canvas id="netmon-chart-{ident}" data-netmon-chart="{ident}"></canvas></div>'
        f'<script type="application/json" id="{_MARK}-{ident}">{text}</script>'
        f"<script>{_loader(base)}window.__netmonChartJs.then(() => netmonDraw('{ident}'));</script>"
    )


def embedded(body: str) -> dict[str, Any]:
    """The configuration a chart's HTML (:func:`page`) draws: for tests and checks."""
    found = _CONFIG.search(body)
    if found is None:
        raise ValueError("not a chart: no configuration in it")
    return dict(json.loads(found.group(1)))


def _base() -> str:
    """The server's base URL path (``server.baseUrlPath``), as ``/path`` or empty."""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}" if base else ""


def preload() -> None:
    """Start loading Chart.js in this tab now (``dashboard/app.py``, before the page's script
    runs): its load then overlaps the page's reads instead of following its first chart."""
    st.sidebar.html(f"<script>{_loader(_base())}</script>", unsafe_allow_javascript=True)


def show(fig: go.Figure) -> None:
    """Draw ``fig`` on the page with Chart.js (``st.plotly_chart`` if it cannot be translated)."""
    try:
        cfg = config(fig)
    except Unsupported as e:
        log.warning("chart drawn with Plotly", extra={"reason": str(e)})
        st.plotly_chart(fig, width="stretch")
        return
    # Our own HTML and data (JSON, escaped), so the page may run its script: Chart.js is then
    # loaded once per tab, not once per chart as in a frame of its own (0.1-0.4 s less a page).
    st.html(page(cfg, _base(), uuid.uuid4().hex[:12]), unsafe_allow_javascript=True)
