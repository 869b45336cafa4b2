"""Pipeline health: batches, packets decoded, malformed and far-future records, late rows, batch time."""

from __future__ import annotations

import datetime as dt
import time

import pandas as pd
import streamlit as st

from dashboard import data

cfg = data.config()
st.title("Pipeline")


@st.fragment(run_every=dt.timedelta(seconds=cfg.dashboard.refresh_s))
def panel() -> None:
    status = data.pipeline_status(str(cfg.paths.data_dir))
    if not status:
        st.info("No pipeline status yet: start `netmon pipeline` (or `netmon demo`).")
        return
    age = time.time() - float(status.get("updated", 0))
    st.caption(f"status updated {age:,.0f} s ago")
    rows = [{"query": name, **values} for name, values in status.get("queries", {}).items()]
    hidden = ["last_batch_id", "last_timestamp", "late_in_batches"]  # bookkeeping, not health
    st.dataframe(pd.DataFrame(rows).drop(columns=hidden, errors="ignore"), hide_index=True)


panel()
