"""The Heavy hitters and Distinct counts pages' answers reduced in Arrow (``data_topk.view_of``,
``data_distinct.view_of``) are the pandas functions' answers over the whole frame (the oracles:
``data_topk.history``, ``data_distinct.top_series`` cut by ``buckets.downsample``, ``suspects``),
on random reports short enough to be drawn as they are and long enough to be cut to buckets, in
any row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dashboard import buckets, data_topk
from dashboard import data_distinct as dd
from pipeline.topk import RESULT_SCHEMA

#: the top-k writer's types (pipeline.topk), of the columns the page reads
TOPK = pa.schema([RESULT_SCHEMA.field(name) for name in data_topk.READ])
DISTINCT = pa.schema(
    [
        ("query", pa.string()),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("group", pa.string()),
        ("distinct", pa.int64()),
        ("rank", pa.int32()),
    ]
)
#: (seed, reports): fewer than MAX_POINTS (drawn as they are), and more (cut to buckets)
CASES = [(1, 60), (2, 3000), (3, 20000)]


def _ends(rng: np.random.Generator, n: int) -> pd.DatetimeIndex:
    seconds = np.sort(rng.choice(86_400, n, replace=False))
    return pd.Timestamp("2026-11-27", tz="UTC") + pd.to_timedelta(seconds, unit="s")


def _reports(seed: int, n: int) -> pa.Table:
    """Top-k reports as the pipeline writes them: per window its δ on every row, its items by
    rank, or one row of rank 0 without a key when none is above δ; ties in count across keys."""
    rng = np.random.default_rng(seed)
    rows = []
    for end in _ends(rng, n):
        delta = int(rng.integers(10, 50))
        keys = rng.choice(30, int(rng.integers(0, 7)), replace=False)
        if len(keys) == 0:
            rows.append(
                {"query": "q", "window_end": end, "delta": delta, "rank": 0, "key": None, "count": None}
            )
        counts = sorted(rng.integers(delta, 120, len(keys)), reverse=True)
        for rank, (key, count) in enumerate(zip(keys, counts, strict=True), 1):
            rows.append(
                {
                    "query": "q",
                    "window_end": end,
                    "delta": delta,
                    "rank": rank,
                    "key": f"k{key}",
                    "count": int(count),
                }
            )
    df = pd.DataFrame(rows).assign(total=1000).sample(frac=1, random_state=seed)  # any order
    return pa.Table.from_pandas(df, preserve_index=False).cast(TOPK)


@pytest.mark.parametrize(("seed", "n"), CASES)
def test_topk_view_is_the_frames(seed: int, n: int) -> None:
    table = _reports(seed, n)
    got = data_topk.view_of(table, top=8)
    df = data_topk._frame(table.to_pandas())
    counts, deltas = data_topk.history(df, top=8)
    newest = df[df["window_end"] == df["window_end"].max()].reset_index(drop=True)
    pd.testing.assert_frame_equal(got.report.reset_index(drop=True), newest, check_dtype=False)
    assert got.counts.width == counts.width and got.deltas.width == deltas.width
    assert (counts.width is None) == (n <= buckets.MAX_POINTS)
    pd.testing.assert_frame_equal(
        got.counts.frame.reset_index(drop=True), counts.frame.reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(
        got.deltas.frame.reset_index(drop=True), deltas.frame.reset_index(drop=True)
    )


def _distinct(seed: int, n: int) -> pa.Table:
    """Distinct-count rows: per window a few groups ("" for a query without group_by)."""
    rng = np.random.default_rng(seed)
    rows = []
    for end in _ends(rng, n):
        groups = rng.choice(40, int(rng.integers(1, 8)), replace=False)
        for rank, g in enumerate(groups, 1):
            group = "" if g == 0 else f"10.0.0.{g}"
            rows.append(
                {
                    "query": "q",
                    "window_end": end,
                    "group": group,
                    "distinct": int(rng.integers(1, 300)),
                    "rank": rank,
                }
            )
    df = pd.DataFrame(rows).sample(frac=1, random_state=seed)
    return pa.Table.from_pandas(df, preserve_index=False).cast(DISTINCT)


@pytest.mark.parametrize(("seed", "n"), CASES)
@pytest.mark.parametrize("threshold", [1, 250, 10_000])
def test_distinct_view_is_the_frames(seed: int, n: int, threshold: int) -> None:
    table = _distinct(seed, n)
    got = dd.view_of(table, lines=5, threshold=threshold)
    df = table.to_pandas()
    df["group"] = df["group"].mask(df["group"] == "", "(all)")  # as distinct_counts reads it
    series = buckets.downsample(dd.top_series(df, 5), "window_end", {"distinct": "max"}, by=["group"])
    assert got.series.width == series.width
    assert (series.width is None) == (n <= buckets.MAX_POINTS)
    pd.testing.assert_frame_equal(
        got.series.frame.reset_index(drop=True), series.frame.reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(got.suspects, dd.suspects(df, threshold))
