"""The Heavy hitters page's reads: the streaming top-k reports under ``<data>/results/topk``.

One row per reported item (``docs/topk.md``, "Top-k streaming"): ``query, window_end, delta, rank,
key, count, total``; a report with no item above delta is one row with rank 0 and no key.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd

from dashboard import buckets, data

__all__ = ["COLUMNS", "history", "topk"]

COLUMNS = ["query", "window_end", "delta", "rank", "key", "count", "total", "share"]


@data.cached(max_entries=16)
def topk(data_dir: str, start: dt.datetime, end: dt.datetime, query: str | None = None) -> pd.DataFrame:
    """The committed report rows of the windows ending in ``[start, end]`` (only the files that
    can hold them are read: ``dashboard.bounded``), of ``query`` only (None: every query's), with
    ``share`` = count / the window's total, by query and time."""
    df = data.read_range(data_dir, "topk", start, end, query=query)
    if df is None:
        return pd.DataFrame(columns=COLUMNS)
    df["share"] = (df["count"] / df["total"].where(df["total"] > 0)).astype("float64")
    return df.sort_values(["query", "window_end", "rank"]).reset_index(drop=True)[COLUMNS]


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
