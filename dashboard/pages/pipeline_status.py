"""Pipeline: is it keeping up? Per pipeline query, input vs processed rate, Kafka lag, batch time.

From the ``sys`` rows (one per micro-batch of each pipeline query, ``docs/results.md``) in the
selected range of batch time, and the status file's totals since the pipeline started.
"""

from __future__ import annotations

import datetime as dt
import time

import pandas as pd
import streamlit as st

from dashboard import buckets, chartjs, charts, data, data_resources, tables, time_range
from dashboard import data_pipeline as dp

cfg = data.config()
data_dir = str(cfg.paths.data_dir)
st.title("Pipeline")
st.caption(
    "Is it keeping up? Each micro-batch of each pipeline query (`packets`, the shared query of "
    "every kind; `joins` in an older netmon) records the Kafka messages it took in and processed, "
    "what it left waiting in Kafka and how long it took (the `sys` kind). A query keeps up while "
    "what waits after a batch takes less than a trigger interval to read."
)
chosen = time_range.picker(data.newest(data_dir, "sys"), "batch time")


#: What a point is when a long range is cut to buckets (``dashboard.buckets``), per aggregation.
WORDS = {"max": "the highest of each", "mean": "the mean of each", "sum": "the sum over each"}


def _chart(
    rows: pd.DataFrame,
    columns: dict[str, str],
    title: str,
    unit: str,
    how: buckets.Agg,
    line: float | None = None,
) -> None:
    """A line per query and measure over batch time (nothing when no column has values); a long
    range in buckets, each the ``how`` of its batches."""
    series = buckets.downsample(dp.long(rows, columns), "batch_time", {"value": how}, by=["query", "measure"])
    shown = series.frame
    if shown.empty:
        return
    several = shown["measure"].nunique() > 1
    fig = charts.line(
        shown,
        "batch_time",
        "value",
        color="query",
        dash="measure" if several else None,
        markers=len(shown) < 300,
        title=title,
        x_title="batch (UTC)" + (f" — {series.describe(WORDS[how])}" if series.width is not None else ""),
        y_title=unit,
    )
    if line is not None:
        fig.add_hline(y=line, line_dash="dot", line_color="crimson")
    chartjs.show(fig)


def _current(query: str, rows: pd.DataFrame) -> None:
    """The query's last batch: rates, lag (with its change over the range) and batch time."""
    last, first = rows.iloc[-1], rows.iloc[0]
    st.markdown(f"**{query}**: {dp.verdict(rows)} — last batch {last['batch_time']:%Y-%m-%d %H:%M:%S} UTC")
    c1, c2, c3, c4, c5, c6 = st.columns(6)
    number = pd.to_numeric(rows["input_messages_per_s"], errors="coerce")
    c1.metric("Input", "–" if pd.isna(number.iloc[-1]) else f"{number.iloc[-1]:,.0f} msg/s")
    number = pd.to_numeric(rows["processed_messages_per_s"], errors="coerce")
    c2.metric("Processed", "–" if pd.isna(number.iloc[-1]) else f"{number.iloc[-1]:,.0f} msg/s")
    lag, was = last["lag_messages"], first["lag_messages"]
    c3.metric(
        "Kafka lag",
        "–" if pd.isna(lag) else f"{int(lag):,} msg",
        delta=None if pd.isna(lag) or pd.isna(was) else f"{int(lag) - int(was):+,} over the range",
        delta_color="inverse",
    )
    backlog = last["backlog_s"]
    c4.metric("Backlog", "–" if pd.isna(backlog) else f"{float(backlog):,.1f} s")
    behind = last["lag_s"]
    c5.metric("Batch − event time", "–" if pd.isna(behind) else f"{float(behind):,.1f} s")
    share, ms = last["batch_utilisation"], last["batch_ms"]
    c6.metric(
        "Batch",
        "–" if pd.isna(ms) else f"{int(ms):,} ms",
        delta=None if pd.isna(share) else f"{float(share):.0%} of the trigger",
        delta_color="off",
    )


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    status = data.pipeline_status(data_dir)
    span = chosen.span(data.newest(data_dir, "sys"))
    df = data_resources.sys_in(data_dir, chosen.seconds, chosen.start, chosen.end) if span else None
    if span is None and not status:
        st.info("No pipeline statistics or status yet: start `netmon pipeline` (or `netmon demo`).")
        return
    if span is None or df is None or df.empty:
        st.info(
            f"No pipeline statistics in this time range (`{cfg.paths.data_dir}/results/sys`: the `sys` "
            "kind, a default of `[pipeline] kinds`)."
        )
    else:
        st.caption(f"Batches triggered {time_range.describe(span)}")
        df = df.sort_values(["query", "batch_time"], kind="stable")
        for query in dp.ordered_queries(df):
            _current(query, df[df["query"] == query])
        _chart(
            df,
            {"input_messages_per_s": "taken in", "processed_messages_per_s": "processed"},
            "Kafka messages per second: taken in (since the previous trigger) vs processed (in the batch)",
            "msg/s",
            "mean",
        )
        _chart(
            df, {"lag_messages": "waiting"}, "Kafka lag: messages waiting after each batch", "messages", "max"
        )
        _chart(
            df,
            {"backlog_s": "backlog (to read what waits)", "lag_s": "batch time − newest event time"},
            "Lag in seconds",
            "s",
            "max",
        )
        _chart(df, {"batch_ms": "batch"}, "Batch duration", "ms", "max")
        _chart(
            df,
            {"batch_utilisation": "share"},
            "Batch duration as a share of the trigger interval (over 1: the batch overran)",
            "share of trigger_s",
            "max",
            line=1.0,
        )
        counts = dp.counts_columns(df)
        if counts:
            _chart(
                df,
                {c: c for c in counts},
                "Late, malformed and far-future records per batch",
                "records",
                "sum",
            )
    if status:
        st.subheader("Since the pipeline started")
        age = time.time() - float(status.get("updated", 0))
        st.caption(
            f"The status file, updated {age:,.0f} s ago: totals per kind. The batch kinds (traffic, "
            "topk, distinct) share one decode, so their malformed and far-future records are the same "
            "ones; late rows are each kind's, dropped behind its watermark."
        )
        tables.show(dp.status_table(status))


panel()
