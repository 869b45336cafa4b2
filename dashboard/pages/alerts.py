"""Alerts: firing and resolved alerts, their delivery per target, and the dead letters."""

from __future__ import annotations

import datetime as dt

import plotly.graph_objects as go
import streamlit as st

from dashboard import chartjs, charts, data, data_alerts, tables

cfg = data.config()
state_dir = str(cfg.paths.state_dir)
st.title("Alerts")

everything = data_alerts.alerts(state_dir)
if everything.empty:
    st.info(
        f"No alerts yet in {data_alerts.outbox_file(state_dir)} — is `netmon alerts run` running? "
        "Rules: `netmon alerts rules`; a test delivery: `netmon alerts test --target NAME`."
    )

c1, c2, c3, c4 = st.columns(4)
statuses = c1.multiselect("Status", ["firing", "resolved"], default=["firing", "resolved"])
severities = c2.multiselect("Severity", ["critical", "error", "warning", "info"], placeholder="all")
rules = c3.multiselect("Rule", sorted(everything["rule"].unique()), placeholder="all")
subject = c4.text_input("Subject contains", placeholder="e.g. 10.0.0.")


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    counts = data_alerts.counts(state_dir)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Firing", counts.get("firing", 0))
    m2.metric("Resolved", counts.get("resolved", 0))
    m3.metric("Deliveries pending", counts.get("pending", 0))
    m4.metric("Dead letters", counts.get("dead", 0))
    df = data_alerts.alerts(state_dir)
    df = df[df["status"].isin(statuses or ["firing", "resolved"])]
    if severities:
        df = df[df["severity"].isin(severities)]
    if rules:
        df = df[df["rule"].isin(rules)]
    if subject:
        df = df[df["subject"].str.contains(subject, regex=False)]
    st.subheader(f"Alerts ({len(df)})")
    if df.empty:
        st.caption("No alert matches the filters.")
    else:
        shown = df.drop(columns=["alert_id", "episode_id"])
        tables.show(shown)
        spans = df.assign(
            end=df["last_seen"].fillna(df["first_seen"]), label=df["rule"] + " " + df["subject"]
        )
        spans = spans[spans["first_seen"].notna()]
        if not spans.empty:
            spans.loc[spans["end"] <= spans["first_seen"], "end"] = spans["first_seen"] + dt.timedelta(
                seconds=1
            )
            fig = charts.timeline(spans, "first_seen", "end", "label", color="severity")
            fig.update_layout(
                title="Alert episodes (event time)", xaxis_title="event time (UTC)", yaxis_title=""
            )
            chartjs.show(fig)
        against = data_alerts.value_against_threshold(df)
        if not against.empty:
            fig = go.Figure()
            fig.add_bar(y=against["label"], x=against["value"], orientation="h", name="value")
            fig.add_scatter(
                y=against["label"],
                x=against["threshold"],
                mode="markers",
                marker={"symbol": "line-ns-open", "size": 22, "line": {"width": 3}},
                name="threshold, or the top of the learned band",
            )
            fig.update_layout(
                title="Firing alerts: the value against what it was compared with",
                xaxis_title="value",
                yaxis_title="",
                margin=charts.margins(
                    ["value", "threshold, or the top of the learned band"], y_labels=against["label"].tolist()
                ),
            )
            chartjs.show(fig)
            st.caption(
                "A baseline-mode rule compares the value with the top of its subject's learned band "
                "(mean + sensitivity × deviation, docs/alerts.md); a threshold rule with its threshold."
            )
    dead = data_alerts.dead_letters(state_dir)
    st.subheader(f"Dead letters ({len(dead)})")
    if dead.empty:
        st.caption("None. Deliveries that give up appear here; `netmon alerts retry` re-sends them.")
    else:
        tables.show(dead)
        st.caption("Re-send with `netmon alerts retry [--target NAME]`.")


panel()
