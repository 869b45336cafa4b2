"""The Distinct counts page's reads: committed rows of ``<data>/results/distinct`` via pyarrow.

The streaming job (``pipeline.distinct``) writes, per closed slide and query, the top groups by
distinct count: ``query, window_end, group, distinct, rank``. These helpers load them and shape
them for plotting; they compute no counts of their own.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dashboard import buckets, data
from netmon.config import DistinctQuery

__all__ = [
    "COLUMNS",
    "View",
    "describe",
    "distinct_counts",
    "in_range",
    "suspects",
    "top_series",
    "view",
    "view_of",
]

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
    df["group"] = df["group"].mask(df["group"] == "", "(all)")  # a query without group_by
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


@dataclass(frozen=True)
class View:
    """What the Distinct counts page shows of one query over a range: the series of its top
    groups (``top_series`` cut to buckets: ``dashboard.buckets.downsample``, each bucket's
    highest) and its suspects (:func:`suspects`)."""

    series: buckets.Downsampled
    suspects: pd.DataFrame


@data.cached(max_entries=16)
def view(data_dir: str, start: dt.datetime, end: dt.datetime, lines: int, threshold: int) -> dict[str, View]:
    """:func:`view_of` each query's rows of the windows ending in ``[start, end]``, from one read
    (empty: no row). Only the page's answer is cached (``st.cache_data`` copies what it returns on
    every call: a day of a query's rows is millions)."""
    tables = data.read_tables(data_dir, "distinct", start, end, columns=COLUMNS)
    return {name: view_of(table, lines, threshold) for name, table in tables.items()}


def view_of(table: pa.Table, lines: int, threshold: int, max_points: int = buckets.MAX_POINTS) -> View:
    """One query's rows (an Arrow table of :data:`COLUMNS`) as the page shows them: the same as
    :func:`top_series` of their frame cut by ``buckets.downsample`` (by group, each bucket's
    highest) and :func:`suspects` of it, but computed in Arrow, so a long range never becomes a
    frame of its rows: the ``lines`` groups by their highest count (ties: by name, as
    :func:`top_series` picks them), their rows cut in Arrow to the same epoch-aligned buckets when
    they hold more than ``max_points`` window ends, and only the rows at or over ``threshold``
    made a frame for the suspects (tested equal to the frame's functions)."""
    group = table["group"]
    table = table.set_column(
        table.schema.get_field_index("group"), "group", pc.if_else(pc.equal(group, ""), "(all)", group)
    )
    flagged = suspects(table.filter(pc.greater_equal(table["distinct"], threshold)).to_pandas(), threshold)
    if table.num_rows == 0:
        return View(buckets.Downsampled(pd.DataFrame(columns=["group", "window_end", "distinct"])), flagged)
    peaks = table.group_by("group").aggregate([("distinct", "max")]).to_pandas()
    peak = peaks.set_index("group")["distinct_max"].sort_index().sort_values(ascending=False, kind="stable")
    chosen = table.filter(pc.is_in(table["group"], pa.array(list(peak.index[:lines]), table["group"].type)))
    if pc.count_distinct(chosen["window_end"]).as_py() <= max_points:
        frame = top_series(chosen.to_pandas(), lines)
        return View(buckets.downsample(frame, "window_end", {"distinct": "max"}, by=["group"]), flagged)
    times = pd.Series(pc.unique(chosen["window_end"]).to_pandas())
    width = buckets.bucket_width(times, max_points)
    assert width is not None  # more distinct times than max_points
    per = buckets.with_buckets(chosen, "window_end", width)
    per = per.group_by(["group", "bucket"]).aggregate([("distinct", "max")])
    out = per.to_pandas().sort_values(["group", "bucket"]).reset_index(drop=True)
    frame = pd.DataFrame(
        {
            "group": out["group"],
            "window_end": pd.DatetimeIndex(out["bucket"]).as_unit("ns"),
            "distinct": out["distinct_max"].astype("float64"),
        }
    )
    return View(buckets.Downsampled(frame, width), flagged)
