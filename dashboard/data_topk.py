"""The Heavy hitters page's reads: the streaming top-k reports under ``<data>/results/topk``.

One row per reported item (``docs/topk.md``, "Top-k streaming"): ``query, window_end, delta, rank,
key, count, total``; a report with no item above delta is one row with rank 0 and no key.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dashboard import data
from netmon.results import read_results, results_dir

__all__ = ["COLUMNS", "topk"]

COLUMNS = ["query", "window_end", "delta", "rank", "key", "count", "total", "share"]


@data.cached()
def topk(data_dir: str) -> pd.DataFrame:
    """Every committed report row, with ``share`` = count / the window's total, by query and time."""
    cfg = data.config().replace(paths={"data_dir": Path(data_dir)})
    table = read_results(results_dir(cfg, "topk"))
    if table is None or table.num_rows == 0:
        return pd.DataFrame(columns=COLUMNS)
    df = table.to_pandas()
    df["share"] = (df["count"] / df["total"].where(df["total"] > 0)).astype("float64")
    return df.sort_values(["query", "window_end", "rank"]).reset_index(drop=True)[COLUMNS]
