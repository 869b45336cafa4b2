"""The Heavy hitters page's reads: the streaming top-k reports under ``<data>/results/topk``.

One row per reported item (``docs/topk.md``, "Top-k streaming"): ``query, window_end, delta, rank,
key, count, total``; a report with no item above delta is one row with rank 0 and no key.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dashboard import buckets, data

__all__ = ["COLUMNS", "READ", "View", "history", "topk", "view", "view_of"]

COLUMNS = ["query", "window_end", "delta", "rank", "key", "count", "total", "share"]
#: The columns read from the files (``share`` is computed): the warm-up reads the same.
READ = COLUMNS[:-1]


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    """Report rows with ``share`` = count / the window's total, by query, time and rank."""
    df["share"] = (df["count"] / df["total"].where(df["total"] > 0)).astype("float64")
    return df.sort_values(["query", "window_end", "rank"]).reset_index(drop=True)[COLUMNS]


@data.cached(max_entries=16)
def topk(data_dir: str, start: dt.datetime, end: dt.datetime, query: str | None = None) -> pd.DataFrame:
    """The committed report rows of the windows ending in ``[start, end]`` (only the files that
    can hold them are read: ``dashboard.bounded``), of ``query`` only (None: every query's), with
    ``share`` = count / the window's total, by query and time."""
    df = data.read_range(data_dir, "topk", start, end, columns=READ, query=query)
    if df is None:
        return pd.DataFrame(columns=COLUMNS)
    return _frame(df)


@dataclass(frozen=True)
class View:
    """What the Heavy hitters page shows of one query over a range: its newest report (rows of
    :data:`COLUMNS`, by rank) and its history (:func:`history`)."""

    report: pd.DataFrame
    counts: buckets.Downsampled
    deltas: buckets.Downsampled


@data.cached(max_entries=16)
def view(data_dir: str, start: dt.datetime, end: dt.datetime, query: str, top: int = 8) -> View | None:
    """:func:`view_of` one query's rows of the windows ending in ``[start, end]`` (None: no row).
    Only the page's answer is cached (``st.cache_data`` copies what it returns on every call: a
    day of a query's rows is millions)."""
    table = data.read_table(data_dir, "topk", start, end, columns=READ, query=query)
    return None if table is None else view_of(table, top)


def view_of(table: pa.Table, top: int = 8, max_points: int = buckets.MAX_POINTS) -> View:
    """One query's report rows (an Arrow table of :data:`READ`) as the page shows them: the
    same as ``topk``'s frame of them, its newest window's rows and :func:`history` of it, but
    computed in Arrow, so a long range never becomes a frame of its rows.

    The history of more than ``max_points`` reports is cut to buckets in Arrow: the ``top`` keys by
    their highest count (ties: by key, as :func:`history` picks them), each key's highest count per
    bucket (NaN where it was above δ in none of the bucket's reports), every bucket that holds a
    report, and δ per bucket its highest (every row of a report carries the report's δ). A
    shorter history is :func:`history` of the frame itself (tested equal either way)."""
    ends = table["window_end"]
    report = _frame(table.filter(pc.equal(ends, pc.max(ends))).to_pandas())
    windows = table.group_by("window_end").aggregate([("delta", "max")])
    items = table.filter(pc.greater(table["rank"], 0))
    if windows.num_rows <= max_points or items.num_rows == 0:
        counts, deltas = history(_frame(table.to_pandas()), top, max_points)
        return View(report, counts, deltas)
    peaks = items.group_by("key").aggregate([("count", "max")]).to_pandas()
    keys = peaks.set_index("key")["count_max"].sort_index().nlargest(top).index
    times = pd.Series(windows["window_end"].to_pandas())
    width = buckets.bucket_width(times, max_points)
    assert width is not None  # more distinct times than max_points
    chosen = items.filter(pc.is_in(items["key"], pa.array(list(keys), items["key"].type)))
    peak = buckets.with_buckets(chosen, "window_end", width)
    peak = peak.group_by(["key", "bucket"]).aggregate([("count", "max")]).to_pandas()
    per = (
        buckets.with_buckets(windows, "window_end", width)
        .group_by("bucket")
        .aggregate([("delta_max", "max")])
    )
    per = per.to_pandas().sort_values("bucket").reset_index(drop=True)
    at = pd.DatetimeIndex(per["bucket"]).as_unit("ns")
    grid = pd.MultiIndex.from_product([sorted(keys), per["bucket"]], names=["key", "bucket"])
    count = peak.set_index(["key", "bucket"])["count_max"].reindex(grid).astype("float64")
    counts = pd.DataFrame(
        {"key": grid.get_level_values("key"), "window_end": np.tile(at, len(keys)), "count": count.to_numpy()}
    )
    deltas = pd.DataFrame({"window_end": at, "delta": per["delta_max_max"].astype("float64")})
    return View(report, buckets.Downsampled(counts, width), buckets.Downsampled(deltas, width))


def history(
    df: pd.DataFrame, top: int = 8, max_points: int = buckets.MAX_POINTS
) -> tuple[buckets.Downsampled, buckets.Downsampled]:
    """One query's report rows as its history chart draws them: the counts of the ``top`` items
    with the highest counts, a row ``window_end, key, count`` per report and item (NaN where the
    item was not above δ: its line breaks there), keys in order; and δ per report
    (``window_end, delta``). A longer range than ``max_points`` reports is cut to buckets
    (``dashboard.buckets``), the same for both: the highest count and δ of each.

    >>> t = pd.to_datetime(["2024-05-01 00:00", "2024-05-01 00:01"], utc=True)
    >>> df = pd.DataFrame({"window_end": [t[0], t[0], t[1]], "delta": [5, 5, 6], "rank": [1, 2, 0],
    ...                    "key": ["a", "b", None], "count": [9, 7, None]})
    >>> counts, deltas = history(df, top=1)
    >>> counts.frame.values.tolist(), deltas.frame["delta"].tolist()
    ([['a', Timestamp('2024-05-01 00:00:00+0000', tz='UTC'), 9.0], \
['a', Timestamp('2024-05-01 00:01:00+0000', tz='UTC'), nan]], [5, 6])
    """
    items = df[df["rank"] > 0]
    keys = items.groupby("key")["count"].max().nlargest(top).index
    ends = df["window_end"].drop_duplicates()
    # One row per report and key, NaN where the key was not above δ (the line breaks there).
    wide = items[items["key"].isin(keys)].pivot(index="window_end", columns="key", values="count")
    long = wide.reindex(ends).reset_index().melt(id_vars="window_end", var_name="key", value_name="count")
    counts = buckets.downsample(long, "window_end", {"count": "max"}, by=["key"], max_points=max_points)
    thresholds = df.drop_duplicates("window_end")
    deltas = buckets.downsample(thresholds, "window_end", {"delta": "max"}, max_points=max_points)
    return counts, deltas
