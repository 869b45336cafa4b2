"""netmon's dashboard: the Streamlit entrypoint (``netmon dashboard`` runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

# `streamlit run dashboard/app.py` puts only this file's folder on sys.path; the pages import the
# `dashboard` package, so make its parent importable when netmon is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard import chartjs, data  # noqa: E402

st.set_page_config(page_title="netmon", page_icon="📡", layout="wide")
# One page per capability; a page whose module is not installed is simply not offered.
PAGES = [
    ("pages/traffic.py", "Traffic", "📈"),
    ("pages/heavy_hitters.py", "Heavy hitters", "🏋️"),
    ("pages/distinct_counts.py", "Distinct counts", "🔢"),
    ("pages/joins.py", "Joins", "🔗"),
    ("pages/shedding.py", "Load shedding", "⚖️"),
    ("pages/alerts.py", "Alerts", "🚨"),
    ("pages/resources.py", "Resources", "📊"),
    ("pages/pipeline_status.py", "Pipeline", "⚙️"),
]
here = Path(__file__).parent
pages = [
    st.Page(path, title=title, icon=icon, default=(i == 0))
    for i, (path, title, icon) in enumerate(PAGES)
    if (here / path).is_file()
]
nav = st.navigation(pages)
st.sidebar.caption(f"data: {data.config().paths.data_dir}")
chartjs.preload()  # Chart.js loads while the page's script reads its results
nav.run()
