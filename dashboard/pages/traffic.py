"""Traffic: packets/s and bytes/s per protocol over event time, in the selected time range."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboard import chartjs, charts, data, tables, time_range

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Traffic")
chosen = time_range.picker(data.newest(data_dir, "traffic"))


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    span = chosen.span(data.newest(data_dir, "traffic"))
    if span is None:
        st.info(f"No traffic results yet in {cfg.paths.data_dir}/results/traffic — is the pipeline running?")
        return
    st.caption(f"Windows ending {time_range.describe(span)} (event time)")
    df = data.traffic(data_dir, *span)
    if df.empty:
        st.info("No traffic window ends in this time range.")
        return
    total = df.groupby("window_start", as_index=False)[["packets", "bytes"]].sum()
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Packets", f"{int(df['packets'].sum()):,}")
    c2.metric("Bytes", f"{int(df['bytes'].sum()):,}")
    c3.metric("Windows", f"{total.shape[0]:,}")
    c4.metric("Peak packets/s", f"{df.groupby('window_start')['packets_per_s'].sum().max():,.0f}")
    rates = data.traffic_rates(df)
    x_title = "event time (UTC)"
    if rates.width is not None:
        x_title += f" — {rates.describe('the mean rate over each bucket')}"
    fig = charts.line(
        rates.frame,
        "window_start",
        "packets_per_s",
        color="protocol",
        markers=False,
        title="Packets per second by protocol",
        x_title=x_title,
        y_title="packets/s",
        legend_title="protocol",
    )
    chartjs.show(fig)
    fig = charts.line(
        rates.frame,
        "window_start",
        "bits_per_s",
        color="protocol",
        stacked=True,
        title="Bits per second by protocol",
        x_title=x_title,
        y_title="bits/s",
        legend_title="protocol",
    )
    chartjs.show(fig)
    by_proto = (
        df.groupby("protocol", as_index=False)[["packets", "bytes"]]
        .sum()
        .sort_values("packets", ascending=False)
    )
    tables.show(by_proto)


panel()
