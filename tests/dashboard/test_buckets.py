"""The charts' buckets (``dashboard.buckets``) against a brute-force oracle, on random series.

The oracle works on plain integers and lists: a time's bucket is ``t // width * width`` in
nanoseconds, a bucket's values are collected in time order and aggregated one by one. The values
are whole numbers (as floats) or missing, so sums and means are exact and compared with ``==``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import data, data_resources, data_topk
from dashboard.buckets import AGGREGATIONS, MAX_POINTS, WIDTHS, Agg, Downsampled, bucket_width, downsample

BASE_NS = pd.Timestamp("2024-05-01", tz="UTC").value
SECOND = 1_000_000_000
DAY = 86_400 * SECOND


def oracle_width(times_ns: list[int], max_points: int) -> int | None:
    """The narrowest width (ns) of WIDTHS, then 2, 4, 8... days, spanning at most max_points."""
    if len(set(times_ns)) <= max_points:
        return None
    first, last = min(times_ns), max(times_ns)
    candidates = [w.value for w in WIDTHS] + [DAY * 2**k for k in range(1, 40)]
    return next(w for w in candidates if last // w - first // w + 1 <= max_points)


def oracle_agg(values: list[float], how: str) -> float:
    present = [v for v in values if not math.isnan(v)]
    if not present:
        return math.nan
    if how == "sum":
        return float(math.fsum(present))
    if how == "mean":
        return math.fsum(present) / len(present)
    if how == "max":
        return max(present)
    if how == "min":
        return min(present)
    return present[0] if how == "first" else present[-1]


def oracle(
    rows: list[tuple[str, int, list[float]]], columns: list[str], how: dict[str, Agg], width: int
) -> list[tuple[Any, ...]]:
    """(group, bucket start ns, one value per column) per bucket of each group, sorted."""
    cells: dict[tuple[str, int], list[list[float]]] = defaultdict(list)
    for group, t, values in sorted(rows, key=lambda r: r[1]):  # stable: ties keep their order
        cells[(group, t // width * width)].append(values)
    return sorted(
        (group, start, *(oracle_agg([v[i] for v in vs], how[c]) for i, c in enumerate(columns)))
        for (group, start), vs in cells.items()
    )


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


values = st.one_of(st.integers(-1000, 1000).map(float), st.just(math.nan))


@st.composite
def series(draw: st.DrawFn) -> tuple[list[tuple[str, int, list[float]]], dict[str, Agg], int]:
    """Rows (group, time ns, values), an aggregation per column, a max_points."""
    columns = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    how: dict[str, Agg] = {c: draw(st.sampled_from(AGGREGATIONS)) for c in columns}
    scale = draw(st.sampled_from([SECOND // 10, SECOND, 60 * SECOND, 3600 * SECOND, DAY]))
    n = draw(st.integers(0, 60))
    rows = [
        (
            draw(st.sampled_from(["x", "y"])),
            BASE_NS + draw(st.integers(-500, 500)) * scale + draw(st.integers(0, SECOND)),
            [draw(values) for _ in columns],
        )
        for _ in range(n)
    ]
    return rows, how, draw(st.integers(1, 12))


def _frame(rows: list[tuple[str, int, list[float]]], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "g": [r[0] for r in rows],
            "t": pd.to_datetime([r[1] for r in rows], utc=True),
            **{c: [r[2][i] for r in rows] for i, c in enumerate(columns)},
        },
        columns=["g", "t", *columns],
    )


@settings(max_examples=300, deadline=None)
@given(series())
def test_downsample_matches_the_oracle(
    case: tuple[list[tuple[str, int, list[float]]], dict[str, Agg], int],
) -> None:
    rows, how, max_points = case
    columns = list(how)
    df = _frame(rows, columns)
    out = downsample(df, "t", how, by=["g"], max_points=max_points)
    width = oracle_width([r[1] for r in rows], max_points)
    assert (None if out.width is None else out.width.value) == width
    if width is None:  # few enough times: the rows as they were
        pd.testing.assert_frame_equal(out.frame, df[["g", "t", *columns]])
        return
    assert list(out.frame.columns) == ["g", "t", *columns]
    got = [(g, t.value, *vals) for g, t, *vals in out.frame.itertuples(index=False, name=None)]
    want = oracle(rows, columns, how, width)
    assert [r[:2] for r in got] == [r[:2] for r in want]
    for a, b in zip(got, want, strict=True):
        assert all(_same(x, y) for x, y in zip(a[2:], b[2:], strict=True)), (a, b)
    # at most max_points points per line, and the next narrower width would have had more
    assert out.frame.groupby("g")["t"].nunique().max() <= max_points
    narrower = [w.value for w in WIDTHS if w.value < width]
    if narrower:
        times = [r[1] for r in rows]
        assert max(times) // narrower[-1] - min(times) // narrower[-1] + 1 > max_points


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=80), st.integers(1, 20))
def test_bucket_width_is_the_narrowest_that_fits(seconds: list[int], max_points: int) -> None:
    times_ns = [BASE_NS + s * SECOND for s in seconds]
    width = bucket_width(pd.Series(pd.to_datetime(times_ns, utc=True)), max_points)
    assert (None if width is None else width.value) == oracle_width(times_ns, max_points)


def test_a_day_of_minutes_and_of_seconds() -> None:
    minutes = pd.Series(pd.date_range("2024-05-01", periods=1441, freq="min", tz="UTC"))
    assert bucket_width(minutes) == pd.Timedelta("2min")
    assert bucket_width(minutes[:901]) is None  # 15 h of minutes: as they are
    seconds = pd.Series(pd.date_range("2024-05-01", periods=86_401, freq="s", tz="UTC"))
    assert bucket_width(seconds) == pd.Timedelta("2min") and MAX_POINTS == 1000
    assert bucket_width(seconds[:901]) is None  # the default range (15 min) of one-second batches
    assert bucket_width(seconds[:3601]) == pd.Timedelta("5s")


def test_time_units_and_the_description() -> None:
    t = pd.Series(pd.date_range("2024-05-01", periods=4, freq="30s", tz="UTC")).astype("datetime64[us, UTC]")
    out = downsample(pd.DataFrame({"t": t, "v": [1, 2, 3, 4]}), "t", {"v": "sum"}, max_points=2)
    assert out.frame["v"].tolist() == [3.0, 7.0]
    assert out.frame["t"].tolist() == [t[0], t[2]]
    assert out.describe("the sum over each") == "1-min buckets, the sum over each"
    assert Downsampled(out.frame).describe("x") == ""
    median: Any = {"v": "median"}
    with pytest.raises(ValueError, match="unknown aggregation"):
        downsample(pd.DataFrame({"t": t, "v": 1}), "t", median, max_points=2)


def test_traffic_rates_are_the_windows_packets_over_their_seconds() -> None:
    """Each bucket's rate: its windows' packets (bytes × 8) over their seconds, per protocol."""
    rng = np.random.default_rng(7)
    starts = pd.date_range("2024-05-01", periods=3000, freq="s", tz="UTC")
    df = pd.DataFrame(
        {
            "window_start": np.repeat(starts, 2),
            "protocol": ["TCP", "UDP"] * len(starts),
            "packets": rng.integers(0, 100, 2 * len(starts)),
            "bytes": rng.integers(0, 10_000, 2 * len(starts)),
        }
    )
    df["window_end"] = df["window_start"] + pd.Timedelta("1s")
    rates = data.traffic_rates(df, max_points=100)
    assert rates.width == pd.Timedelta("30s")  # 3,000 s in 100 buckets
    for (proto, start), row in rates.frame.set_index(["protocol", "window_start"]).iterrows():
        inside = df[(df["protocol"] == proto) & (df["window_start"].dt.floor("30s") == start)]
        assert row["packets_per_s"] == inside["packets"].sum() / len(inside)
        assert row["bits_per_s"] == inside["bytes"].sum() * 8 / len(inside)
    short = data.traffic_rates(df.head(10))  # a short range: every window's own rate
    assert short.width is None
    assert short.frame["packets_per_s"].tolist() == df.head(10)["packets"].astype(float).tolist()


def test_topk_history_keeps_the_breaks_and_cuts_counts_and_delta_alike() -> None:
    ends = pd.date_range("2024-05-01", periods=120, freq="s", tz="UTC")
    rows = []
    for i, end in enumerate(ends):
        rows.append({"window_end": end, "delta": i, "rank": 1, "key": "a", "count": 100 + i})
        if i % 40 < 20:  # "b" above δ only in some windows
            rows.append({"window_end": end, "delta": i, "rank": 2, "key": "b", "count": 50 + i})
    df = pd.DataFrame(rows)
    counts, deltas = data_topk.history(df, top=8, max_points=12)
    assert counts.width == deltas.width == pd.Timedelta("10s")
    b = counts.frame[counts.frame["key"] == "b"].set_index("window_end")["count"]
    assert b.iloc[0] == 59 and math.isnan(b.iloc[2]) and b.iloc[4] == 99  # highest, or none
    assert deltas.frame["delta"].tolist() == [float(i * 10 + 9) for i in range(12)]


def test_knobs_keep_only_their_steps() -> None:
    """The knobs' rows: each change and the last batch, so the step chart is every batch's."""
    rng = np.random.default_rng(3)
    times = pd.date_range("2024-05-01", periods=500, freq="s", tz="UTC")
    trigger = np.repeat(rng.choice([1.0, 2.0, 5.0], 10), 50)
    df = pd.DataFrame({"batch_time": times, "trigger_s": trigger, "watermark_s": 10.0, "sample_keep": None})
    out = data_resources.knobs_over_time(df)
    assert list(dict.fromkeys(out["knob"])) == ["trigger_s", "watermark_s"]
    for knob in ("trigger_s", "watermark_s"):
        steps = out[out["knob"] == knob].set_index("batch_time")["value"]
        # the value in force at each batch: the last step at or before it
        in_force = steps.reindex(times, method="ffill")
        assert in_force.tolist() == df[knob].tolist()
        assert steps.index[-1] == times[-1]
    assert len(out[out["knob"] == "watermark_s"]) == 2
