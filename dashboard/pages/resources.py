"""Resources: per pipeline query, measured CPU, rates, lag and state beside the cost model's estimates."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from dashboard import buckets, chartjs, charts, data, data_resources, tables, time_range

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Resources")
st.caption(
    "Every micro-batch of each pipeline query publishes its own statistics (the `sys` kind, "
    "`results/sys` and the topic `netmon.sys`): its share of the trigger interval, input rates, "
    "Kafka lag, state and the knobs in force. Beside them, the cost model's estimate at the "
    "measured input rate (`netmon explain`) and the `[resources]` budgets."
)

chosen = time_range.picker(data.newest(data_dir, "sys"), "batch time")
names = sorted(data_resources.sys_in(data_dir, chosen.seconds, chosen.start, chosen.end)["query"].unique())
query = st.selectbox("Query", names) if names else None
BUDGETS = data_resources.budgets(cfg)


#: How the charts' columns are cut to buckets over a long range (``dashboard.buckets``), and what
#: a bucket's point is then: peaks and lags the highest, per-batch rates and seconds the mean.
HOW: dict[str, buckets.Agg] = {
    "batch_utilisation": "max",
    "est_cpu": "max",
    **dict.fromkeys(("stage1_s", "traffic_s", "topk_s", "distinct_s", "features_s", "joins_s"), "mean"),
    **dict.fromkeys(
        ("input_messages_per_s", "processed_messages_per_s", "packets_per_s", "rate_pps"), "mean"
    ),
    **dict.fromkeys(("lag_messages", "backlog_s", "lag_s"), "max"),
    **dict.fromkeys(("state_rows", "join_state_rows", "est_state_rows", "est_memory_bytes"), "max"),
}
WORDS = {"max": "the highest of each", "mean": "the mean of each"}


def _x_title(series: buckets.Downsampled, columns: list[str]) -> str:
    """``batch (UTC)``, and what a point is when the series is in buckets."""
    if series.width is None:
        return "batch (UTC)"
    return f"batch (UTC) — {series.describe(WORDS[HOW[columns[0]]])}"


def _line(series: buckets.Downsampled, columns: list[str], title: str, unit: str) -> None:
    """A chart of ``columns`` over batch time (those with values only; none: no chart)."""
    df = series.frame
    shown = [c for c in columns if df[c].notna().any()]
    if not shown:
        return
    fig = charts.line(df, "batch_time", shown, title=title, x_title=_x_title(series, shown), y_title=unit)
    chartjs.show(fig)


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    span = chosen.span(data.newest(data_dir, "sys"))
    if span is None:
        st.info(
            f"No pipeline statistics yet in {cfg.paths.data_dir}/results/sys — run the pipeline with "
            "the `sys` kind (a default of `[pipeline] kinds`)."
        )
        return
    st.caption(f"Batches triggered {time_range.describe(span)}")
    df = data_resources.sys_in(data_dir, chosen.seconds, chosen.start, chosen.end)
    if df.empty or query is None:
        st.info("No batch in this time range.")
        return
    consts, problem = data_resources.constants(cfg)
    if problem:
        st.warning(f"{problem}; the built-in constants are used")
    rows = data_resources.with_estimates(df, cfg, consts)
    rows = rows[rows["query"] == query]
    if rows.empty:
        st.info(f"No batches of {query} in this time range.")
        return
    last = rows.iloc[-1]
    c1, c2, c3, c4, c5, c6 = st.columns(6)
    c1.metric("CPU share (last batch)", f"{float(last['batch_utilisation']):.0%}")
    c2.metric("Estimated CPU", "–" if pd.isna(last["est_cpu"]) else f"{float(last['est_cpu']):.0%}")
    c3.metric("CPU budget", f"{BUDGETS['cpu_bound']:.0%} of {BUDGETS['cpu']:g} s/s")
    c4.metric("Input", f"{float(last['input_messages_per_s'] or 0):,.0f} msg/s")
    lag = last["lag_messages"]
    c5.metric("Kafka lag", "–" if pd.isna(lag) else f"{int(lag):,} msg")
    c6.metric("Batches", f"{len(rows):,}")
    st.caption(
        f"cost model constants: {consts.source}"
        + ("" if consts.source != "defaults" else " (run `netmon bench calibrate` to measure this machine)")
    )

    series = buckets.downsample(rows, "batch_time", {c: h for c, h in HOW.items() if c in rows})

    # CPU: the batch's share of the trigger interval, the estimate at its input rate, the budgets.
    cpu = ["batch_utilisation", "est_cpu"]
    fig = charts.line(
        series.frame,
        "batch_time",
        cpu,
        title="CPU: measured share of the trigger interval vs the cost model's estimate",
        x_title=_x_title(series, cpu),
        y_title="CPU s per s",
    )
    fig.add_hline(y=BUDGETS["cpu_bound"], line_dash="dash", annotation_text="[resources] budget − reserve")
    if query != "packets" or cfg.queries.join:  # the joins run on the shared query
        fig.add_hline(y=BUDGETS["shedding_cpu"], line_dash="dot", annotation_text="[shedding] cpu_budget")
    chartjs.show(fig)
    parts = [
        c
        for c in ("stage1_s", "traffic_s", "topk_s", "distinct_s", "features_s", "joins_s")
        if c in rows and rows[c].notna().any()
    ]
    if parts:
        fig = charts.line(
            series.frame,
            "batch_time",
            parts,
            stacked=True,
            title="Seconds per batch: the shared pass and each kind",
            x_title=_x_title(series, parts),
            y_title="s",
        )
        chartjs.show(fig)

    _line(series, ["input_messages_per_s", "processed_messages_per_s"], "Kafka messages per second", "msg/s")
    _line(
        series, ["packets_per_s", "rate_pps"], "Packets per second (measured; the estimates' rate)", "pkt/s"
    )
    _line(series, ["lag_messages"], "Kafka lag: messages waiting after the batch", "messages")
    _line(
        series, ["backlog_s", "lag_s"], "Lag: time to read the backlog, batch time − newest event time", "s"
    )
    state = "join_state_rows" if rows["join_state_rows"].notna().any() else "state_rows"
    _line(series, [state, "est_state_rows"], "State rows: measured vs estimated", "rows")
    if rows["est_memory_bytes"].notna().any():
        memory = ["est_memory_bytes"]
        fig = charts.line(
            series.frame,
            "batch_time",
            memory,
            markers=False,
            title="Estimated state memory vs budget",
            x_title=_x_title(series, memory),
            y_title="bytes",
        )
        fig.add_hline(y=BUDGETS["memory_bound"], line_dash="dash", annotation_text="budget − reserve")
        chartjs.show(fig)

    knobs = data_resources.knobs_over_time(rows)
    fig = charts.rows(knobs, "batch_time", "value", "knob", shape="hv", title="Knobs in force over time")
    fig.update_layout(xaxis_title="batch (UTC)", height=150 + 120 * knobs["knob"].nunique())
    chartjs.show(fig)

    columns = [
        "batch_id",
        "batch_time",
        "input_messages",
        "packets",
        "batch_ms",
        "batch_utilisation",
        "est_cpu",
        "lag_messages",
        "lag_s",
        "state_rows",
        "join_state_rows",
        "shed_fractions",
    ]
    table = rows[[c for c in columns if rows[c].notna().any()]]
    tables.show(table.tail(50))


panel()
