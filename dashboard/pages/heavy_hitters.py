"""Heavy hitters: each top-k query's current report (items above delta) and its history."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import chartjs, charts, data, data_topk, tables, time_range

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
configured = {q.name: q for q in cfg.queries.topk}
st.title("Heavy hitters")
st.caption(
    "Sliding-window top-k (Golab's Algorithm 6): each sub-window keeps only its exact top-k list; "
    "δ is the sum of the lists' k-th counts. Every item shown is truly above δ in the window and its "
    "count never exceeds the true count; items near δ may be missed."
)

chosen = time_range.picker(data.newest(data_dir, "topk"))
span = chosen.span(data.newest(data_dir, "topk"))
in_range = data.queries(data_dir, "topk", *span, data_topk.READ) if span else []
names: list[str] = list(configured) + [n for n in in_range if n not in configured]
if not names:
    st.info("No top-k queries configured ([[queries.topk]] in netmon.toml).")
    st.stop()
query = st.selectbox("Query", names)


def describe(name: str) -> tuple[str, str]:
    """A query's one-line description and the unit of its counts."""
    q = configured.get(name)
    if q is None:
        return "not in the current configuration", "count"
    text = (
        f"top `{q.key}` by {q.weight} over {q.window_s:g} s windows of {q.sub_window_s:g} s "
        f"sub-windows, k = {q.k}"
    )
    return text, q.weight


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    text, unit = describe(query)
    st.caption(f"**{query}**: {text}")
    span = chosen.span(data.newest(data_dir, "topk"))
    if span is None:
        st.info(f"No reports yet in {cfg.paths.data_dir}/results/topk — is the pipeline running?")
        return
    st.caption(f"Windows ending {time_range.describe(span)} (event time)")
    shown = data_topk.view(data_dir, *span, query)  # this query's rows, reduced in Arrow
    if shown is None:
        st.info(f"No report of {query} in this time range.")
        return
    current(shown.report, unit)
    history(shown, unit)


def current(report: pd.DataFrame, unit: str) -> None:
    """The newest report: metrics, the items as bars with δ drawn, and their shares."""
    delta, total = int(report["delta"].iloc[0]), int(report["total"].iloc[0])
    items = report[report["rank"] > 0]
    c1, c2, c3, c4 = st.columns(4)
    end = report["window_end"].iloc[0]
    c1.metric("Window end (UTC)", f"{end:%Y-%m-%d %H:%M:%S}" + (f".{end:%f}"[:4] if end.microsecond else ""))
    c2.metric("δ (threshold)", f"{delta:,}")
    c3.metric("Items above δ", f"{len(items):,}")
    c4.metric(f"Window traffic ({unit})", f"{total:,}")
    fig = charts.bars(
        items,
        "key",
        "count",
        text=items["share"].map("{:.1%}".format).tolist(),
        hover={"rank": "", "share": ":.2%"},
        title="Current heavy hitters (label: share of the window's traffic)",
    )
    fig.add_hline(y=delta, line_dash="dash", line_color="crimson", annotation_text=f"δ = {delta:,}")
    fig.update_layout(xaxis_title="key", yaxis_title=unit, xaxis_type="category")
    fig.update_yaxes(rangemode="tozero")
    chartjs.show(fig)
    if items.empty:
        st.info("No item is above δ in this window.")
        return
    table = items[["rank", "key", "count", "share"]].assign(count=items["count"].astype("int64"))
    tables.show(table, {"share": "percent"})


def history(shown: data_topk.View, unit: str) -> None:
    """Counts of the most reported items per window over the range, with δ; a gap: not reported."""
    counts, deltas = shown.counts, shown.deltas
    fig = charts.line(
        counts.frame,
        "window_end",
        "count",
        color="key",
        title=f"History of the top {counts.frame['key'].nunique()} items",
        legend_title="key",
    )
    fig.add_trace(
        go.Scatter(
            x=deltas.frame["window_end"],
            y=deltas.frame["delta"],
            name="δ",
            mode="lines",
            line={"dash": "dash", "color": "crimson"},
        )
    )
    x_title = "window end (event time, UTC)"
    if counts.width is not None:
        x_title += f" — {counts.describe('the highest count and δ of each')}"
    fig.update_layout(xaxis_title=x_title, yaxis_title=unit)
    chartjs.show(fig)


panel()
