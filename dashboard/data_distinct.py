"""The Distinct counts page's reads: committed rows of ``<data>/results/distinct`` via pyarrow.

The streaming job (``pipeline.distinct``) writes, per closed slide and query, the top groups by
distinct count: ``query, window_end, group, distinct, rank``. These helpers load them and shape
them for plotting; they compute no counts of their own.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd

from dashboard import data
from netmon.config import DistinctQuery

__all__ = ["COLUMNS", "describe", "distinct_counts", "in_range", "suspects", "top_series"]

COLUMNS = ["query", "window_end", "group", "distinct", "rank"]


@data.cached(max_entries=16)
def distinct_counts(
    data_dir: str, start: dt.datetime, end: dt.datetime, query: str | None = None
) -> pd.DataFrame:
    """The committed rows of the windows ending in ``[start, end]`` (only the files that can hold
    them are read: ``dashboard.bounded``), of ``query`` only (None: every query's)."""
    df = data.read_range(data_dir, "distinct", start, end, columns=COLUMNS, query=query)
    if df is None:
        return pd.DataFrame(columns=COLUMNS)
    df["group"] = df["group"].mask(df["group"] == "", "(all)")
    # In the files' order, which is the batches' (by window end): the chart's series are sorted
    # where they are cut (top_series), and sorting a day of rows here cost a third of the page.
    return df


def describe(q: DistinctQuery) -> str:
    """``"distinct src_ip per dst_ip, 60 s window sliding every 1 s"``."""
    per = f" per {q.group_by}" if q.group_by else " overall"
    return f"distinct {q.count}{per}, {q.window_s:g} s window sliding every {q.sub_window_s:g} s"


def in_range(df: pd.DataFrame, seconds: float | None) -> pd.DataFrame:
    """The rows of the last ``seconds`` of event time, up to the newest window end (all: None)."""
    if not seconds or df.empty:
        return df
    return df[df["window_end"] >= df["window_end"].max() - dt.timedelta(seconds=seconds)]


def top_series(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """One query's rows for the ``n`` groups with the highest distinct counts in ``df``."""
    peak = df.groupby("group")["distinct"].max().sort_values(ascending=False, kind="stable")
    return df[df["group"].isin(peak.index[:n])].sort_values(["window_end", "group"])


def suspects(df: pd.DataFrame, threshold: int) -> pd.DataFrame:
    """One query's groups whose distinct count reached ``threshold``: peak, when, latest, slides."""
    over = df[df["distinct"] >= threshold]
    if over.empty:
        return pd.DataFrame(columns=["group", "peak", "peak_at", "latest", "latest_at", "slides_over"])
    at_peak = over.loc[over.groupby("group")["distinct"].idxmax(), ["group", "distinct", "window_end"]]
    latest = over.sort_values("window_end").groupby("group").tail(1)[["group", "distinct", "window_end"]]
    slides = over.groupby("group").size().rename("slides_over").reset_index()
    table = (
        at_peak.rename(columns={"distinct": "peak", "window_end": "peak_at"})
        .merge(latest.rename(columns={"distinct": "latest", "window_end": "latest_at"}), on="group")
        .merge(slides, on="group")
    )
    return table.sort_values(["peak", "group"], ascending=[False, True]).reset_index(drop=True)
