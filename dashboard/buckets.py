"""Long time series cut to a bounded number of points per line: fixed time buckets, aggregated.

A page's chart draws one point per window or batch of its time range: 15 points for the last
15 minutes of one-minute batches, but 86,400 per line for a day of one-second batches, more than a
browser draws in the time a page has (Plotly's SVG). :func:`downsample` leaves a series of at most
``max_points`` distinct times as it is; a longer one becomes one row per bucket of time (and
group), the buckets of one fixed width: the narrowest of :data:`WIDTHS` (1 s to 1 day, then
whole days) for which the series' first to last time spans at most ``max_points`` buckets. The
buckets are aligned on the Unix epoch, so they stay put while a relative range slides. A bucket's
row is at its start, and each column is aggregated the way its chart means it (:data:`Agg`):
counts summed, peaks and lags the bucket's highest, levels its mean, a cumulative total its last
value. A chart of buckets says so (``Downsampled.describe``).

This module only shapes frames; it draws nothing (``dashboard.charts`` draws).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "AGGREGATIONS",
    "MAX_POINTS",
    "WIDTHS",
    "Agg",
    "Downsampled",
    "bucket_width",
    "downsample",
    "with_buckets",
]

#: How a column's values in one bucket become one: ``sum`` (of the values there; a count per
#: bucket), ``mean``, ``max``, ``min``, ``first`` and ``last`` (the earliest and the latest value
#: by time). Missing values (NaN) are left out; a bucket without a value in the column gets NaN
#: (a ``sum`` too: no value is not 0).
Agg = Literal["sum", "mean", "max", "min", "first", "last"]
AGGREGATIONS: tuple[Agg, ...] = ("sum", "mean", "max", "min", "first", "last")
#: Points per line a chart draws at most (a day of one-second batches: two-minute buckets).
MAX_POINTS = 1000
#: The bucket widths tried, narrowest first; past the last, whole days.
WIDTHS: tuple[pd.Timedelta, ...] = tuple(
    pd.Timedelta(w)
    for w in (
        "1s",
        "2s",
        "5s",
        "10s",
        "15s",
        "30s",
        "1min",
        "2min",
        "5min",
        "10min",
        "15min",
        "30min",
        "1h",
        "2h",
        "3h",
        "6h",
        "12h",
        "1D",
    )
)
_DAY_NS = pd.Timedelta("1D").value


@dataclass(frozen=True)
class Downsampled:
    """A series as a chart draws it: ``frame``, and ``width`` its buckets' (None: not bucketed,
    the rows as they were)."""

    frame: pd.DataFrame
    width: pd.Timedelta | None = None

    def describe(self, how: str) -> str:
        """What a point is, for a chart's axis title: ``""`` when not bucketed, else e.g.
        ``"2-min buckets, the highest of each"`` for ``how="the highest of each"``.

        >>> Downsampled(pd.DataFrame(), pd.Timedelta("2min")).describe("the highest of each")
        '2-min buckets, the highest of each'
        >>> Downsampled(pd.DataFrame()).describe("the highest of each")
        ''
        """
        if self.width is None:
            return ""
        return f"{_label(self.width)} buckets, {how}" if how else f"{_label(self.width)} buckets"


def _label(width: pd.Timedelta) -> str:
    """``"30-s"``, ``"2-min"``, ``"1-h"``, ``"1-day"``."""
    seconds = int(width.total_seconds())
    for unit, size in (("day", 86_400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size}-{unit}"
    return f"{seconds}-s"


def _buckets_spanned(first_ns: int, last_ns: int, width_ns: int) -> int:
    return last_ns // width_ns - first_ns // width_ns + 1


def bucket_width(times: pd.Series, max_points: int = MAX_POINTS) -> pd.Timedelta | None:
    """The width of buckets that cut ``times`` (datetimes) to at most ``max_points`` points: None
    when they hold no more than ``max_points`` distinct times (nothing to cut); else the narrowest
    of :data:`WIDTHS`, or whole days past them, whose epoch-aligned buckets from the first time to
    the last number at most ``max_points``.

    >>> t = pd.Series(pd.date_range("2024-05-01", periods=1441, freq="min", tz="UTC"))
    >>> bucket_width(t), bucket_width(t, 2000)
    (Timedelta('0 days 00:02:00'), None)
    """
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, not {max_points}")
    ns = _nanoseconds(times)
    if len(np.unique(ns)) <= max_points:
        return None
    first, last = int(ns.min()), int(ns.max())
    for width in WIDTHS:
        if _buckets_spanned(first, last, width.value) <= max_points:
            return width
    days = 1
    while _buckets_spanned(first, last, days * _DAY_NS) > max_points:
        days *= 2
    return pd.Timedelta(days=days)


def _nanoseconds(times: pd.Series) -> np.ndarray:
    """The non-missing times as int64 nanoseconds since the epoch (UTC)."""
    values = pd.to_datetime(pd.Series(times), utc=True).dropna()
    return values.dt.as_unit("ns").astype("int64").to_numpy()


def downsample(
    df: pd.DataFrame,
    time: str,
    how: Mapping[str, Agg],
    *,
    by: Sequence[str] = (),
    max_points: int = MAX_POINTS,
) -> Downsampled:
    """``df``'s ``time``, ``by`` and ``how`` columns with at most ``max_points`` points per group.

    ``how`` maps each numeric column to its aggregation (:data:`Agg`); ``by`` names the columns
    that tell the lines apart (a protocol, a query): each line is cut on its own, in the same
    buckets. When ``df`` holds no more than ``max_points`` distinct times (over all its groups),
    its rows come back as they were (``width`` None). Otherwise the width is
    :func:`bucket_width`'s, each row goes to the bucket its time falls in (``floor(time / width)``,
    from the epoch), and each bucket of each group is one row, at the bucket's start, its values
    aggregated as ``how`` says (as floats); the rows by group and time. Rows without a time are
    left out.

    >>> t = pd.date_range("2024-05-01", periods=4, freq="30s", tz="UTC")
    >>> df = pd.DataFrame({"t": t, "n": [1, 2, 3, None], "p": [5.0, 9.0, 1.0, 2.0]})
    >>> out = downsample(df, "t", {"n": "sum", "p": "max"}, max_points=2)
    >>> out.width, out.frame.values.tolist()
    (Timedelta('0 days 00:01:00'), [[Timestamp('2024-05-01 00:00:00+0000', tz='UTC'), 3.0, 9.0], \
[Timestamp('2024-05-01 00:01:00+0000', tz='UTC'), 3.0, 2.0]])
    """
    unknown = {a for a in how.values() if a not in AGGREGATIONS}
    if unknown:
        raise ValueError(f"unknown aggregation {sorted(unknown)}; one of {AGGREGATIONS}")
    columns = [*by, time, *how]
    width = bucket_width(df[time], max_points) if len(df) else None
    if width is None:
        return Downsampled(df[columns])
    rows = df[df[time].notna()]
    ns = _nanoseconds(rows[time])
    order = np.argsort(ns, kind="stable")  # first and last: by time
    frame = pd.DataFrame(
        {
            **{c: rows[c].to_numpy()[order] for c in by},
            time: (ns // width.value * width.value)[order],  # the bucket's start, in ns
            **{c: pd.to_numeric(rows[c], errors="coerce").astype("float64").to_numpy()[order] for c in how},
        }
    )
    groups = frame.groupby([*by, time], sort=True, dropna=False)
    parts = []
    for agg in AGGREGATIONS:
        cols = [c for c, a in how.items() if a == agg]
        if not cols:
            continue
        g = groups[cols]
        if agg == "sum":
            parts.append(g.sum(min_count=1))
        else:
            parts.append(getattr(g, agg)())
    if parts:
        out = pd.concat(parts, axis=1)[list(how)].reset_index()
    else:
        out = groups.size().reset_index()[[*by, time]]
    out[time] = pd.to_datetime(out[time], utc=True)
    return Downsampled(out[columns].reset_index(drop=True), width)


def with_buckets(table: pa.Table, time: str, width: pd.Timedelta) -> pa.Table:
    """``table`` (Arrow) with a column ``bucket``: the start of the epoch-aligned bucket of
    ``width`` its ``time`` falls in, of ``time``'s type: the buckets :func:`downsample` cuts, for a
    reader that aggregates a long range in Arrow before anything becomes a frame.

    >>> t = pa.table({"t": pa.array([0, 59_000_000, 61_000_000], pa.timestamp("us", tz="UTC"))})
    >>> [str(b) for b in with_buckets(t, "t", pd.Timedelta("1min"))["bucket"].to_pylist()]
    ['1970-01-01 00:00:00+00:00', '1970-01-01 00:00:00+00:00', '1970-01-01 00:01:00+00:00']
    """
    times = table[time]
    step = width.value // pd.Timedelta(1, unit=times.type.unit).value  # WIDTHS: whole seconds
    ticks = pc.multiply(pc.divide(times.cast(pa.int64()), step), step)
    return table.append_column("bucket", ticks.cast(times.type))
