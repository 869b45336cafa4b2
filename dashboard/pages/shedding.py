"""Load shedding: the join's utilisation against its CPU budget, x_L/x_R over time, output kept."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from dashboard import buckets, chartjs, charts, data, data_joins, tables, time_range

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

    out = df.assign(results_total=df["results"].cumsum(), unshed_total=df["unshed_estimate"].cumsum())
    series = buckets.downsample(
        out,
        "batch_time",
        {
            "utilisation": "max",
            "batch_utilisation": "max",
            "x_left": "mean",
            "x_right": "mean",
            "results_total": "last",
            "unshed_total": "last",
        },
    )

    def x_title(how: str) -> str:
        return "batch (UTC)" + (f" — {series.describe(how)}" if series.width is not None else "")

    fig = charts.line(
        series.frame,
        "batch_time",
        ["utilisation", "batch_utilisation"],
        title="Utilisation of the trigger interval: the join operator and the whole batch",
        x_title=x_title("the highest of each"),
        y_title="share of the trigger interval",
    )
    fig.add_hline(y=budget, line_dash="dash", annotation_text="budget")
    chartjs.show(fig)

    fig = charts.line(
        series.frame,
        "batch_time",
        ["x_left", "x_right"],
        shape="hv",
        title="Fractions applied per batch (PNI: insert probability; INP: probe; CF: keep)",
        x_title=x_title("the mean of each"),
        y_title="fraction",
    )
    fig.update_layout(yaxis_range=[-0.05, 1.05])
    chartjs.show(fig)

    fig = charts.line(
        series.frame,
        "batch_time",
        ["results_total", "unshed_total"],
        title="Results produced vs the estimated unshed output (cumulative, Horvitz-Thompson)",
        x_title=x_title("the total at the end of each"),
        y_title="results",
    )
    chartjs.show(fig)
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
    tables.show(df[[c for c in columns if c in df.columns]].tail(50))


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
    fig = charts.line(
        rows,
        "budget_fraction",
        "result_fraction",
        color="strategy",
        markers=True,
        title=f"{dataset}: results produced vs budget (fractions of the unshed run)",
        x_title="budget (fraction of the unshed cost)",
        y_title="fraction of the unshed output",
        legend_title="strategy",
    )
    fig.update_xaxes(tickformat=".0%")
    fig.update_yaxes(tickformat=".0%")
    chartjs.show(fig)
    table = rows.pivot_table(index="budget_fraction", columns="strategy", values="result_fraction")
    tables.show(table.reset_index(), dict.fromkeys(["budget_fraction", *map(str, table.columns)], "percent"))


panel()
comparison()
