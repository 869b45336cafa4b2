"""Load shedding: the join's utilisation against its CPU budget, x_L/x_R over time, output kept."""

from __future__ import annotations

import datetime as dt

import plotly.express as px
import streamlit as st

from dashboard import data, data_joins, time_range

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Load shedding")
st.caption(
    "After every micro-batch the controller measures the join's rates, selectivity and costs "
    "(C_u per inserted tuple, C_p per result), re-solves the optimizer of seed 003 (eqs. 10-15) "
    "for the query's strategy under the CPU budget (a share of each trigger interval) and moves "
    "the insert/probe fractions x_L, x_R toward the optimum, smoothed. Probe-No-Insert keeps the "
    "most output for a given budget."
)

chosen = time_range.picker(data.newest(data_dir, "shedding"), "batch time")
span = chosen.span(data.newest(data_dir, "shedding"))
stats = data_joins.shedding_stats(data_dir, *span) if span else None
names = sorted(stats["query"].unique()) if stats is not None and len(stats) else []
query = st.selectbox("Join query", names) if names else None


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    span = chosen.span(data.newest(data_dir, "shedding"))
    if span is None:
        st.info(
            f"No shedding statistics yet in {cfg.paths.data_dir}/results/shedding — run the pipeline "
            "with the `joins` and `shedding` kinds."
        )
        return
    st.caption(f"Batches triggered {time_range.describe(span)}")
    df = data_joins.shedding_stats(data_dir, *span)
    df = df[df["query"] == query] if query else df.iloc[0:0]
    if df.empty:
        st.info("No shedding statistics in this time range.")
        return
    last = df.iloc[-1]
    budget = float(last["cpu_budget"])
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Strategy", str(last["strategy"]))
    c2.metric("CPU budget", f"{budget:.0%}")
    c3.metric("Utilisation (last batch)", f"{float(last['utilisation']):.0%}")
    c4.metric("x_L / x_R", f"{float(last['next_x_left']):.2f} / {float(last['next_x_right']):.2f}")
    unshed = float(df["unshed_estimate"].sum())
    c5.metric("Output kept", f"{df['results'].sum() / unshed:.0%}" if unshed > 0 else "–")

    fig = px.line(
        df,
        x="batch_time",
        y=["utilisation", "batch_utilisation"],
        markers=True,
        title="Utilisation of the trigger interval: the join operator and the whole batch",
    )
    fig.add_hline(y=budget, line_dash="dash", annotation_text="budget")
    fig.update_layout(xaxis_title="batch (UTC)", yaxis_title="share of the trigger interval", legend_title="")
    st.plotly_chart(fig, width="stretch")

    fig = px.line(
        df,
        x="batch_time",
        y=["x_left", "x_right"],
        markers=True,
        line_shape="hv",
        title="Fractions applied per batch (PNI: insert probability; INP: probe; CF: keep)",
    )
    fig.update_layout(
        xaxis_title="batch (UTC)", yaxis_title="fraction", yaxis_range=[-0.05, 1.05], legend_title=""
    )
    st.plotly_chart(fig, width="stretch")

    out = df.assign(results_total=df["results"].cumsum(), unshed_total=df["unshed_estimate"].cumsum())
    fig = px.line(
        out,
        x="batch_time",
        y=["results_total", "unshed_total"],
        markers=True,
        title="Results produced vs the estimated unshed output (cumulative, Horvitz-Thompson)",
    )
    fig.update_layout(xaxis_title="batch (UTC)", yaxis_title="results", legend_title="")
    st.plotly_chart(fig, width="stretch")
    columns = [
        "batch_id",
        "span_s",
        "lambda_left",
        "lambda_right",
        "selectivity",
        "cu_s",
        "cp_s",
        "x_left",
        "x_right",
        "next_x_left",
        "next_x_right",
        "utilisation",
        "results",
        "unshed_estimate",
    ]
    st.dataframe(df[[c for c in columns if c in df.columns]].tail(50), hide_index=True, width="stretch")


def comparison() -> None:
    """The offline evaluation (``netmon eval shedding``): output kept against the budget, per strategy."""
    st.subheader("Strategy comparison (offline evaluation)")
    ev = data_joins.shedding_eval()
    if ev.empty:
        st.caption("No evaluation tables in docs/eval/shedding (run `netmon eval shedding`).")
        return
    datasets = sorted(ev["dataset"].unique())
    dataset = st.selectbox("Dataset", datasets)
    rows = ev[(ev["dataset"] == dataset) & (ev["strategy"] != "none")].sort_values(
        ["strategy", "budget_fraction"]
    )
    fig = px.line(
        rows,
        x="budget_fraction",
        y="result_fraction",
        color="strategy",
        markers=True,
        title=f"{dataset}: results produced vs budget (fractions of the unshed run)",
    )
    fig.update_layout(
        xaxis_title="budget (fraction of the unshed cost)", yaxis_title="fraction of the unshed output"
    )
    fig.update_xaxes(tickformat=".0%")
    fig.update_yaxes(tickformat=".0%")
    st.plotly_chart(fig, width="stretch")
    table = rows.pivot_table(index="budget_fraction", columns="strategy", values="result_fraction")
    st.dataframe(table.style.format("{:.1%}"), width="stretch")


panel()
comparison()
