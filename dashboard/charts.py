"""The dashboard's charts: Plotly figures of the few kinds the pages draw, built from frames.

Plotly Express builds a figure through its general machinery (a subplot grid, then every
property validated again at each update): about 45 ms a chart on this 2-core machine, and a page
draws up to ten per script run, before its first chart reaches the browser. These build the same
traces with ``plotly.graph_objects`` directly (about 7 ms): one trace per column or per group, in
the order the groups first appear, coloured from the template's colorway as Plotly Express colours
them (Streamlit's theme recolours both alike), the same hover text (``group=value``, the x and y
columns') and titles. They shape nothing: a page hands them the frame to draw (a long series cut
to buckets first: ``dashboard.buckets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

__all__ = ["DASHES", "MARKERS_UP_TO", "bars", "histogram", "line", "margins", "rows", "timeline"]

#: A line shows a marker per point while it has at most this many points (more: a plain line).
MARKERS_UP_TO = 120
#: Plotly Express's dash styles, in its order (``line_dash``).
DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")


def _colors() -> tuple[str, ...]:
    """The default template's colorway (Streamlit's, once Streamlit is imported)."""
    template = pio.templates[pio.templates.default]
    return tuple(template.layout.colorway or ("#636efa",))


def _chars(texts: Iterable[Any]) -> int:
    """The length of the longest of ``texts``."""
    return max((len(str(t)) for t in texts), default=0)


def margins(
    legend: Sequence[Any] = (), *, x_labels: Sequence[Any] = (), y_labels: Sequence[Any] = ()
) -> dict[str, int]:
    """The figure's margins (px), wide enough for what usually stands in them: a legend of the
    entries ``legend`` (its title among them) on the right; numbers, or the categories
    ``y_labels``, on the left; dates, or the categories ``x_labels`` (slanted), below. Measured
    on the dashboard's charts in Chromium (12 px type: about 7 px a character).

    Streamlit's theme draws every axis with ``automargin`` from margins of 0, so Plotly draws each
    chart, measures its labels, widens the margins and draws it all again. From margins that
    already hold the labels it draws once: a page's charts draw in about half the time. A label
    wider than thought still gets its room, at the cost of that second drawing.

    >>> margins(["batch_utilisation", "est_cpu", ""])
    {'t': 60, 'l': 92, 'r': 183, 'b': 84}
    >>> margins(y_labels=["ddos 192.0.2.12"])["l"], margins(x_labels=["198.51.100.10:443"])["b"]
    (136, 117)
    """
    return {
        "t": 60,
        "l": max(92, round(24 + 7.5 * _chars(y_labels))),
        "r": 64 + 7 * _chars(legend) if legend else 44,
        "b": max(84, 66 + 3 * _chars(x_labels)),
    }


def _layout(
    title: str, x_title: str, y_title: str, legend_title: str, margin: dict[str, int]
) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}},
        "legend": {"title": {"text": legend_title}, "tracegroupgap": 0},
        "margin": margin,
    }


def _groups(df: pd.DataFrame, columns: list[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """``df`` split by ``columns``, the groups in the order they first appear (as Plotly Express)."""
    if not columns:
        return [((), df)]
    return [
        (key if isinstance(key, tuple) else (key,), part)
        for key, part in df.groupby(columns, sort=False, dropna=False)
    ]


def line(
    df: pd.DataFrame,
    x: str,
    y: str | Sequence[str],
    *,
    title: str = "",
    x_title: str | None = None,
    y_title: str | None = None,
    legend_title: str = "",
    color: str | None = None,
    dash: str | None = None,
    markers: bool | None = None,
    shape: str = "linear",
    stacked: bool = False,
) -> go.Figure:
    """Lines of ``y`` over ``x``: one per column when ``y`` names several (each named by its
    column), else one per value of ``color`` (and of ``dash``: a query's lines share a colour, a
    measure's a dash), as ``plotly.express.line`` draws them; ``stacked``: the lines stacked as
    filled areas (``plotly.express.area``). ``markers``: a marker per point; None: while the
    longest line has at most :data:`MARKERS_UP_TO` points. ``shape``: ``"hv"`` for steps.

    >>> df = pd.DataFrame({"t": [1, 2, 1, 2], "v": [1.0, 2.0, 3.0, 4.0], "g": ["a", "a", "b", "b"]})
    >>> fig = line(df, "t", "v", color="g", title="v by g")
    >>> [(t.name, t.y.tolist(), t.line.color == fig.data[0].line.color) for t in fig.data]
    [('a', [1.0, 2.0], True), ('b', [3.0, 4.0], False)]
    """
    colors = _colors()
    traces: list[tuple[str, str, int, int, pd.Series, pd.Series]] = []  # name, hover, colour, dash
    if not isinstance(y, str):
        for i, column in enumerate(y):
            traces.append((column, f"variable={column}", i, 0, df[x], df[column]))
        y_label = "value"
    else:
        keys = [c for c in (color, dash) if c is not None]
        firsts: dict[str, dict[Any, int]] = {c: {} for c in keys}
        for key, part in _groups(df, keys):
            labels = dict(zip(keys, key, strict=True))
            index = {c: firsts[c].setdefault(v, len(firsts[c])) for c, v in labels.items()}
            name = ", ".join(str(v) for v in key)
            hover = "<br>".join(f"{c}={v}" for c, v in labels.items())
            traces.append(
                (name, hover, index.get(color or "", 0), index.get(dash or "", 0), part[x], part[y])
            )
        traces.sort(key=lambda t: (t[2], t[3]))  # by colour, then dash: as Plotly Express orders them
        y_label = y
    longest = max((len(t[4]) for t in traces), default=0)
    mode = "lines+markers" if (markers if markers is not None else longest <= MARKERS_UP_TO) else "lines"
    scatters = [
        go.Scatter(
            x=xs,
            y=ys,
            name=name,
            legendgroup=name,
            showlegend=bool(name),
            mode="lines" if stacked else mode,
            line={"color": colors[c % len(colors)], "dash": DASHES[d % len(DASHES)], "shape": shape},
            stackgroup="1" if stacked else None,
            hovertemplate=(hover + "<br>" if hover else "")
            + f"{x}=%{{x}}<br>{y_label}=%{{y}}<extra></extra>",
        )
        for name, hover, c, d, xs, ys in traces
    ]
    named = [t[0] for t in traces if t[0]]
    legend = [*named, legend_title] if named else []
    x_label = x if x_title is None else x_title
    layout = _layout(title, x_label, y_title or y_label, legend_title, margins(legend))
    return go.Figure(data=scatters, layout=layout)


def rows(
    df: pd.DataFrame,
    x: str,
    y: str,
    row: str,
    *,
    title: str = "",
    x_title: str | None = None,
    shape: str = "linear",
    spacing: float = 0.03,
) -> go.Figure:
    """A line of ``y`` over ``x`` per value of ``row``, each in a row of its own (its own y axis,
    one x axis for all), top to bottom in the order the values first appear, each row named on its
    right: ``plotly.express.line(facet_row=row)`` with the facets' names only.

    >>> fig = rows(pd.DataFrame({"t": [1, 2, 1], "v": [1, 2, 3], "k": ["a", "a", "b"]}), "t", "v", "k")
    >>> [(t.yaxis, t.y.tolist()) for t in fig.data], [a.text for a in fig.layout.annotations]
    ([('y', [1, 2]), ('y2', [3])], ['a', 'b'])
    """
    color = _colors()[0]
    groups = _groups(df, [row])
    n = max(len(groups), 1)
    height = (1 - spacing * (n - 1)) / n
    layout = _layout(title, x if x_title is None else x_title, "", "", margins())
    layout["xaxis"].update(domain=[0.0, 0.98], anchor=f"y{n if n > 1 else ''}")
    annotations = []
    fig = go.Figure()
    for i, (key, part) in enumerate(groups):
        axis = f"y{i + 1 if i else ''}"
        top = 1 - i * (height + spacing)
        layout[f"yaxis{i + 1 if i else ''}"] = {
            "domain": [max(top - height, 0.0), top],
            "anchor": "x",
            "title": "",
        }
        annotations.append(
            {
                "text": str(key[0]),
                "x": 0.98,
                "xanchor": "left",
                "xref": "paper",
                "y": top - height / 2,
                "yanchor": "middle",
                "yref": "paper",
                "textangle": 90,
                "showarrow": False,
            }
        )
        fig.add_trace(
            go.Scatter(
                x=part[x],
                y=part[y],
                yaxis=axis,
                mode="lines",
                line={"color": color, "shape": shape},
                showlegend=False,
                name=str(key[0]),
                hovertemplate=f"{row}={key[0]}<br>{x}=%{{x}}<br>{y}=%{{y}}<extra></extra>",
            )
        )
    layout["annotations"] = annotations
    fig.update_layout(layout)
    return fig


def bars(
    df: pd.DataFrame,
    x: str,
    y: str | Sequence[str],
    *,
    title: str = "",
    x_title: str | None = None,
    y_title: str | None = None,
    legend_title: str = "",
    color: str | None = None,
    orientation: str = "v",
    text: Sequence[str] | None = None,
    hover: dict[str, str] | None = None,
) -> go.Figure:
    """Bars of ``y`` per ``x``, as ``plotly.express.bar``: one trace per column of ``y`` (side by
    side), or per value of ``color`` (stacked), or one. ``orientation="h"``: ``x`` holds the
    lengths, ``y`` the categories. ``text``: a label per bar (one trace only); ``hover``: more
    columns in the hover, each with its ``d3`` format (``""``: as it is).

    >>> fig = bars(pd.DataFrame({"k": ["a", "b"], "n": [3, 1]}), "k", "n")
    >>> fig.data[0].x.tolist(), fig.data[0].y.tolist()
    (['a', 'b'], [3, 1])
    """
    colors = _colors()
    groups = _groups(df, [color] if color else [])
    if not isinstance(y, str):
        legend = [*y, legend_title]
    else:
        legend = [*(str(k[0]) for k, _ in groups), legend_title] if color else []
    places = df[y if orientation == "h" else x]
    labels = places.tolist() if places.dtype == object else []
    margin = margins(legend, **({"y_labels": labels} if orientation == "h" else {"x_labels": labels}))
    fig = go.Figure(
        layout=_layout(title, x if x_title is None else x_title, y_title or str(y), legend_title, margin)
    )
    extra = list(hover or {})
    detail = "".join(f"<br>{c}=%{{customdata[{i}]{(hover or {})[c]}}}" for i, c in enumerate(extra))
    if not isinstance(y, str):
        fig.update_layout(barmode="group")
        for i, column in enumerate(y):
            fig.add_trace(
                go.Bar(
                    x=df[x],
                    y=df[column],
                    name=column,
                    marker={"color": colors[i % len(colors)]},
                    hovertemplate=f"variable={column}<br>{x}=%{{x}}<br>value=%{{y}}<extra></extra>",
                )
            )
        return fig
    fig.update_layout(barmode="relative")
    for i, (key, part) in enumerate(groups):
        name = str(key[0]) if key else ""
        lengths, places = (part[x], part[y]) if orientation == "h" else (part[y], part[x])
        fig.add_trace(
            go.Bar(
                x=lengths if orientation == "h" else places,
                y=places if orientation == "h" else lengths,
                orientation=orientation,
                name=name,
                showlegend=bool(name),
                marker={"color": colors[i % len(colors)]},
                text=None if text is None else list(text),
                customdata=part[extra].to_numpy() if extra else None,
                hovertemplate=(f"{color}={name}<br>" if color else "")
                + f"{x}=%{{x}}<br>{y}=%{{y}}{detail}<extra></extra>",
            )
        )
    return fig


def histogram(
    df: pd.DataFrame, x: str, *, color: str | None = None, nbins: int = 60, title: str = ""
) -> go.Figure:
    """A histogram of ``x`` in about ``nbins`` bins, one trace per value of ``color`` (overlaid
    stacked, as ``plotly.express.histogram``); the y axis counts."""
    colors = _colors()
    groups = _groups(df, [color] if color else [])
    legend = [*(str(k[0]) for k, _ in groups), color] if color else []
    fig = go.Figure(layout=_layout(title, x, "count", color or "", margins(legend)))
    fig.update_layout(barmode="relative")
    for i, (key, part) in enumerate(groups):
        name = str(key[0]) if key else ""
        fig.add_trace(
            go.Histogram(
                x=part[x],
                nbinsx=nbins,
                name=name,
                showlegend=bool(name),
                marker={"color": colors[i % len(colors)]},
                bingroup="x",
                hovertemplate=(f"{color}={name}<br>" if color else "")
                + f"{x}=%{{x}}<br>count=%{{y}}<extra></extra>",
            )
        )
    return fig


def timeline(
    df: pd.DataFrame, start: str, end: str, y: str, *, color: str | None = None, title: str = ""
) -> go.Figure:
    """A Gantt chart, as ``plotly.express.timeline``: a horizontal bar per row from ``start`` to
    ``end`` (datetimes) on the row of its ``y``, one trace per value of ``color``."""
    colors = _colors()
    groups = _groups(df, [color] if color else [])
    legend = [*(str(k[0]) for k, _ in groups), color] if color else []
    fig = go.Figure(layout=_layout(title, "", y, color or "", margins(legend, y_labels=df[y].tolist())))
    fig.update_layout(barmode="overlay", xaxis_type="date")
    for i, (key, part) in enumerate(groups):
        name = str(key[0]) if key else ""
        ms = (
            pd.to_datetime(part[end], utc=True) - pd.to_datetime(part[start], utc=True)
        ).dt.total_seconds() * 1000
        fig.add_trace(
            go.Bar(
                base=part[start],
                x=ms.to_numpy(),
                y=part[y],
                orientation="h",
                name=name,
                showlegend=bool(name),
                marker={"color": colors[i % len(colors)]},
                customdata=part[[end]].astype(str).to_numpy(),
                hovertemplate=(f"{color}={name}<br>" if color else "")
                + f"{start}=%{{base}}<br>{end}=%{{customdata[0]}}<br>{y}=%{{y}}<extra></extra>",
            )
        )
    return fig
