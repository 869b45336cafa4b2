"""Collection settings for the whole repository (doctests run from every package).

The Streamlit scripts run their page when imported, so pytest does not import them for doctests;
``AppTest`` runs them in tests/dashboard instead.
"""

collect_ignore = ["dashboard/app.py", "dashboard/pages"]
