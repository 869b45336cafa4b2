"""The Streamlit dashboard: ``app`` is the entrypoint, ``pages/`` one script per page.

The pages only draw: every read goes through ``data`` (traffic, shared helpers) and its
per-page siblings ``data_topk``, ``data_distinct``, ``data_joins``, ``data_resources``,
``data_pipeline`` and ``data_alerts``, which read committed results with pyarrow (and the alert
outbox with SQLite), never Spark. Results reads are bounded to the page's time range (the sidebar's
picker, ``time_range``, one for every page): ``bounded`` opens only the files whose rows can lie
in it. A long series is cut to a bounded number of points per line (``buckets``), described as a
Plotly figure built directly (``charts``) and drawn in the browser by Chart.js (``chartjs``: a
page in a new tab draws in about half the time Plotly's own library took); tables are HTML
built in the browser (``tables``), not Streamlit's data grid. ``server`` starts
Streamlit for ``netmon dashboard`` and ``netmon demo``, with ``warmup``, which reads the last 24 h
of every kind into the process's caches before a user asks for them.

``__all__`` lists the modules that import without running Streamlit (``app`` and the pages are
scripts Streamlit runs).

Floor 4 of the house (README, "Architecture"): it stands on ``alerts``, ``analytics`` and
``netmon``.
"""

__all__ = [
    "bounded",
    "buckets",
    "chartjs",
    "charts",
    "data",
    "data_alerts",
    "data_distinct",
    "data_joins",
    "data_pipeline",
    "data_resources",
    "data_topk",
    "server",
    "tables",
    "time_range",
    "warmup",
]
