"""The Heavy hitters page's reads: the streaming top-k reports under ``<data>/results/topk``.

One row per reported item (``docs/topk.md``, "Top-k streaming"): ``query, window_end, delta, rank,
key, count, total``; a report with no item above delta is one row with rank 0 and no key.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd

from dashboard import data

__all__ = ["COLUMNS", "topk"]

COLUMNS = ["query", "window_end", "delta", "rank", "key", "count", "total", "share"]


@data.cached()
def topk(data_dir: str, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """The committed report rows of the windows ending in ``[start, end]`` (only the files that
    can hold them are read: ``dashboard.bounded``), with ``share`` = count / the window's total,
    by query and time."""
    df = data.read_range(data_dir, "topk", start, end)
    if df is None:
        return pd.DataFrame(columns=COLUMNS)
    df["share"] = (df["count"] / df["total"].where(df["total"] > 0)).astype("float64")
    return df.sort_values(["query", "window_end", "rank"]).reset_index(drop=True)[COLUMNS]
