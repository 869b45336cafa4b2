"""Distinct counts: per query, the top groups' distinct counts over event time, and suspects.

A group whose distinct count reaches the threshold is listed: a destination with many sources
(DDoS victim), a source probing many ports or hosts (scan).
"""

from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboard import chartjs, charts, data, tables, time_range
from dashboard import data_distinct as dd

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Distinct counts")

chosen = time_range.picker(data.newest(data_dir, "distinct"))
left, right = st.columns(2)
threshold = left.number_input("Suspect threshold (distinct)", min_value=1, value=100, step=10)
lines = right.number_input("Groups per chart", min_value=1, max_value=20, value=5)


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    span = chosen.span(data.newest(data_dir, "distinct"))
    if span is None:
        st.info(
            f"No distinct-count results yet in {cfg.paths.data_dir}/results/distinct — is the pipeline "
            "running with the `distinct` kind?"
        )
        return
    st.caption(f"Windows ending {time_range.describe(span)} (event time)")
    shown = dd.view(data_dir, *span, int(lines), int(threshold))  # reduced in Arrow, one read
    if not shown:
        st.info("No distinct-count window ends in this time range.")
        return
    configured = {q.name: q for q in cfg.queries.distinct}
    names = [n for n in configured if n in shown]
    names += [n for n in shown if n not in configured]
    for name in names:
        st.subheader(name)
        if name in configured:
            st.caption(dd.describe(configured[name]) + "; each slide keeps its top groups")
        series = shown[name].series
        x_title = "window end (event time, UTC)"
        if series.width is not None:
            x_title += f" — {series.describe('the highest of each')}"
        fig = charts.line(
            series.frame,
            "window_end",
            "distinct",
            color="group",
            markers=len(series.frame) < 200,
            x_title=x_title,
            y_title="distinct",
            legend_title="group",
        )
        chartjs.show(fig)
        flagged = shown[name].suspects
        if flagged.empty:
            st.caption(f"No group reached {int(threshold):,} in this range.")
        else:
            tables.show(flagged)


panel()
