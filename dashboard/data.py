"""All the dashboard's reads: committed Parquet results under ``<data>/results`` via pyarrow.

Every results read is bounded to the page's time range (``dashboard.time_range``): it opens only
the files whose rows can lie in it (``dashboard.bounded``), so a page costs what its range holds,
not the history. :func:`newest` is where a relative range ends.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import streamlit as st

from dashboard import bounded, buckets
from netmon.config import Config, load_config
from netmon.results import results_dir, status_file

__all__ = [
    "PROTOCOLS",
    "cache_ttl",
    "cached",
    "config",
    "newest",
    "pipeline_status",
    "queries",
    "read_range",
    "read_table",
    "read_tables",
    "traffic",
    "traffic_rates",
]

P = ParamSpec("P")
R = TypeVar("R")

PROTOCOLS = {1: "ICMP", 6: "TCP", 17: "UDP", 47: "GRE", 50: "ESP", 58: "ICMPv6", 132: "SCTP"}


@st.cache_resource
def config() -> Config:
    """The configuration the dashboard was started with (``NETMON_CONFIG`` / env overrides)."""
    return load_config()


def cache_ttl() -> float:
    """Seconds a read stays cached: just under ``[dashboard] refresh_s`` (at least 1 s).

    The pages redraw every ``refresh_s``; a cached read expires before the next redraw, so each
    redraw reads the results committed since the last one.
    """
    return max(1.0, config().dashboard.refresh_s - 0.5)


def cached(*, max_entries: int = 4) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``st.cache_data`` with :func:`cache_ttl`, for the reads of committed results.

    The TTL comes from the configuration, which is only loaded at the first call (importing the
    module must not need it); a configuration reloaded with another ``refresh_s`` gets a new cache.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        current: tuple[float, Callable[P, R]] | None = None  # (ttl, fn cached with it)

        @functools.wraps(fn)
        def read(*args: P.args, **kwargs: P.kwargs) -> R:
            nonlocal current
            ttl = cache_ttl()
            now = current  # one read: the sessions' threads may replace it meanwhile
            if now is None or now[0] != ttl:
                now = current = (ttl, st.cache_data(ttl=ttl, max_entries=max_entries, show_spinner=False)(fn))
            return now[1](*args, **kwargs)

        return read

    return decorate


@cached(max_entries=16)
def newest(data_dir: str, kind: str) -> dt.datetime | None:
    """The newest time of ``kind``'s committed rows (its column of ``bounded.TIME_COLUMNS``), where
    a relative time range ends; None without rows."""
    cfg = config().replace(paths={"data_dir": Path(data_dir)})
    return bounded.newest(
        results_dir(cfg, kind),
        bounded.TIME_COLUMNS[kind],
        compacted_by=bounded.COMPACTION_COLUMNS[kind],
        disorder_s=bounded.batch_disorder_s(cfg, kind),
    )


def read_range(
    data_dir: str,
    kind: str,
    start: dt.datetime,
    end: dt.datetime,
    columns: list[str] | None = None,
    *,
    query: str | None = None,
) -> pd.DataFrame | None:
    """``kind``'s committed rows whose time lies in ``[start, end]`` (``bounded.read_range``), as a
    frame; None without any. The search over a kind's batches allows for as much disorder as the
    config says they may have (``bounded.batch_disorder_s``: the joins'). ``query``: only that
    query's rows, chosen in Arrow before the frame is made (a day of a kind's rows is millions:
    a page showing one query converts a quarter of them)."""
    table = read_table(data_dir, kind, start, end, columns, query=query)
    return None if table is None else table.to_pandas()


def read_table(
    data_dir: str,
    kind: str,
    start: dt.datetime,
    end: dt.datetime,
    columns: list[str] | None = None,
    *,
    query: str | None = None,
) -> pa.Table | None:
    """:func:`read_range`'s rows as an Arrow table (None without any): for a page that reduces a
    long range in Arrow before anything becomes a frame."""
    table = _table(data_dir, kind, start, end, columns)
    if table is not None and query is not None:
        table = bounded.where_equal(table, "query", query)  # by the dictionaries' indices
    return None if table is None or table.num_rows == 0 else bounded.decoded(table)


def read_tables(
    data_dir: str, kind: str, start: dt.datetime, end: dt.datetime, columns: list[str] | None = None
) -> dict[str, pa.Table]:
    """:func:`read_table`'s rows split by query (a page showing every query), from one read: each
    query's rows chosen by the dictionaries' indices before they are decoded."""
    table = _table(data_dir, kind, start, end, columns)
    if table is None:
        return {}
    return {name: bounded.decoded(bounded.where_equal(table, "query", name)) for name in _names(table)}


@cached(max_entries=16)
def queries(
    data_dir: str, kind: str, start: dt.datetime, end: dt.datetime, columns: list[str] | None = None
) -> list[str]:
    """The queries with rows of ``kind`` in ``[start, end]``, sorted: read with the columns the
    page reads (``columns``), whose files' rows the process keeps (``bounded.Rows``)."""
    table = _table(data_dir, kind, start, end, columns)
    if table is None or table.num_rows == 0:
        return []
    return _names(table)


def _names(table: pa.Table) -> list[str]:
    """The queries ``table``'s rows name, sorted (of a dictionary-encoded column: the values its
    rows hold, not every value of its dictionaries)."""
    return sorted(str(q) for q in pc.unique(table["query"]).to_pylist() if q is not None)


def _table(
    data_dir: str, kind: str, start: dt.datetime, end: dt.datetime, columns: list[str] | None
) -> pa.Table | None:
    cfg = config().replace(paths={"data_dir": Path(data_dir)})
    return bounded.read_range(
        results_dir(cfg, kind),
        bounded.TIME_COLUMNS[kind],
        start,
        end,
        columns,
        compacted_by=bounded.COMPACTION_COLUMNS[kind],
        disorder_s=bounded.batch_disorder_s(cfg, kind),
        encoded_text=True,  # as the cache keeps them: a query's rows chosen before decoding
    )


@cached()
def traffic(data_dir: str, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Per window and protocol, the windows ending in ``[start, end]``: packets, bytes, and their
    rates per second."""
    df = read_range(data_dir, "traffic", start, end)
    if df is None:
        return pd.DataFrame(columns=["window_start", "window_end", "proto", "protocol", "packets", "bytes"])
    seconds = (df["window_end"] - df["window_start"]).dt.total_seconds()
    df["protocol"] = df["proto"].map(lambda p: PROTOCOLS.get(int(p), str(int(p))) if pd.notna(p) else "?")
    df["packets_per_s"] = df["packets"] / seconds
    df["bits_per_s"] = df["bytes"] * 8 / seconds
    df["bytes_per_s"] = df["bytes"] / seconds
    return df.sort_values(["window_start", "protocol"]).reset_index(drop=True)


def traffic_rates(df: pd.DataFrame, max_points: int = buckets.MAX_POINTS) -> buckets.Downsampled:
    """:func:`traffic`'s rows as the Traffic page charts them: ``window_start, protocol,
    packets_per_s, bits_per_s``, a line per protocol of at most ``max_points`` points. A longer
    range is cut to buckets (``dashboard.buckets``): a bucket's rate is the packets (bits) of the
    windows starting in it over those windows' seconds, the mean rate over them.

    >>> t = pd.to_datetime(["2024-05-01 00:00:00", "2024-05-01 00:00:01"], utc=True)
    >>> df = pd.DataFrame({"window_start": t, "window_end": t + pd.Timedelta("1s"), "protocol": "TCP",
    ...                    "packets": [10, 30], "bytes": [1000, 3000]})
    >>> rates = traffic_rates(df, max_points=1)
    >>> str(rates.width), rates.frame[["packets_per_s", "bits_per_s"]].values.tolist()
    ('0 days 00:00:02', [[20.0, 16000.0]])
    """
    seconds = (df["window_end"] - df["window_start"]).dt.total_seconds()
    sums = buckets.downsample(
        df.assign(seconds=seconds),
        "window_start",
        {"packets": "sum", "bytes": "sum", "seconds": "sum"},
        by=["protocol"],
        max_points=max_points,
    )
    out = sums.frame
    rates = out[["window_start", "protocol"]].assign(
        packets_per_s=out["packets"] / out["seconds"], bits_per_s=out["bytes"] * 8 / out["seconds"]
    )
    return buckets.Downsampled(rates.reset_index(drop=True), sums.width)


def pipeline_status(data_dir: str) -> dict:
    cfg = config().replace(paths={"data_dir": Path(data_dir)})
    try:
        return json.loads(status_file(cfg).read_text())
    except (FileNotFoundError, ValueError):
        return {}
