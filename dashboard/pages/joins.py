"""Joins: handshake RTTs per server, half-open SYNs per destination, link-correlation matches."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboard import chartjs, charts, data, data_joins, tables, time_range

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Joins")
st.caption(
    "Symmetric hash joins over time windows in the Spark pipeline (`joins` results). The handshake "
    "query joins each SYN with its SYN-ACK (reversed 4-tuple, ack = seq + 1) within T: the delay is "
    "the handshake RTT; SYNs never answered within T count as half-open. A link query joins two "
    "filtered streams on a key within T both ways. Under load shedding these are a subset."
)
chosen = time_range.picker(data.newest(data_dir, "joins"))


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    span = chosen.span(data.newest(data_dir, "joins"))
    if span is None:
        st.info(
            f"No join results yet in {cfg.paths.data_dir}/results/joins — run the pipeline with the "
            "`joins` kind ([pipeline] kinds)."
        )
        return
    st.caption(f"Results whose left tuple (a handshake's SYN) is from {time_range.describe(span)}")
    results = data_joins.join_results(data_dir, *span)
    if results.empty:
        st.info("No join result in this time range.")
        return
    rtts = data_joins.handshake_rtts(results)
    syns = data_joins.half_open(results)
    links = data_joins.link_matches(results)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Handshakes", f"{len(rtts):,}")
    c2.metric("Median RTT", f"{rtts['rtt_s'].median() * 1000:,.1f} ms" if len(rtts) else "–")
    c3.metric("Half-open SYNs", f"{int(syns['syns'].sum()):,}")
    c4.metric("Link matches", f"{int(links['matches'].sum()):,}")
    handshakes(rtts, syns)
    link_correlation(links)


def handshakes(rtts, syns) -> None:  # noqa: ANN001 - DataFrames
    st.subheader("TCP handshakes")
    if rtts.empty:
        st.caption("No answered SYN yet.")
    else:
        shown = rtts.assign(rtt_ms=rtts["rtt_s"] * 1000)
        fig = charts.histogram(
            shown, "rtt_ms", color="query", nbins=60, title="Handshake RTT (SYN → SYN-ACK)"
        )
        fig.update_layout(xaxis_title="RTT (ms)", yaxis_title="handshakes", bargap=0.05)
        chartjs.show(fig)
        per_server = data_joins.rtt_per_server(rtts)
        per_server["server_port"] = per_server["server_port"].astype("Int64")
        top = per_server.head(20).assign(
            target=lambda d: d["server"].astype(str) + ":" + d["server_port"].astype(str),
            p50_ms=lambda d: d["rtt_p50_s"] * 1000,
            p90_ms=lambda d: d["rtt_p90_s"] * 1000,
        )
        fig = charts.bars(
            top,
            "target",
            ["p50_ms", "p90_ms"],
            title="RTT percentiles of the busiest servers",
            x_title="server:port",
            y_title="RTT (ms)",
            legend_title="percentile",
        )
        chartjs.show(fig)
        table = per_server.copy()
        for col in ("rtt_min_s", "rtt_p50_s", "rtt_p90_s", "rtt_max_s"):
            table[col.replace("_s", "_ms")] = table.pop(col) * 1000
        tables.show(table)
    st.subheader("Half-open SYNs per destination")
    if syns.empty:
        st.caption("No SYN left unanswered (reported once its window has passed).")
        return
    fig = charts.bars(syns.head(20), "server", "syns", color="query", title="SYNs without a SYN-ACK within T")
    fig.update_layout(xaxis_title="destination", yaxis_title="SYNs")
    chartjs.show(fig)


def link_correlation(links) -> None:  # noqa: ANN001 - a DataFrame
    st.subheader("Link correlation")
    if links.empty:
        st.caption('No link query results (configure one with query = "link" in [[queries.join]]).')
        return
    top = links.groupby("query", group_keys=False).head(20)
    fig = charts.bars(top, "key", "matches", color="query", title="Keys seen on both streams within T")
    fig.update_layout(xaxis_title="key", yaxis_title="matches")
    chartjs.show(fig)
    tables.show(links)


panel()
