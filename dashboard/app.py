"""netmon's dashboard: the Streamlit entrypoint (``netmon dashboard`` runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

# `streamlit run dashboard/app.py` puts only this file's folder on sys.path; the pages import the
# `dashboard` package, so make its parent importable when netmon is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard import data  # noqa: E402

st.set_page_config(page_title="netmon", page_icon="📡", layout="wide")
pages = [
    st.Page("pages/traffic.py", title="Traffic", icon="📈", default=True),
    st.Page("pages/pipeline_status.py", title="Pipeline", icon="⚙️"),
]
nav = st.navigation(pages)
st.sidebar.caption(f"data: {data.config().paths.data_dir}")
nav.run()
