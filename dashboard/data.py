"""All the dashboard's reads: committed Parquet results under ``<data>/results`` via pyarrow."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import pandas as pd
import streamlit as st

from netmon.config import Config, load_config
from netmon.results import read_results, results_dir, status_file

__all__ = ["PROTOCOLS", "cache_ttl", "cached", "config", "pipeline_status", "traffic"]

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


@cached()
def traffic(data_dir: str) -> pd.DataFrame:
    """Per window and protocol: packets, bytes, and their rates per second."""
    cfg = config().replace(paths={"data_dir": Path(data_dir)})
    table = read_results(results_dir(cfg, "traffic"))
    if table is None or table.num_rows == 0:
        return pd.DataFrame(columns=["window_start", "window_end", "proto", "protocol", "packets", "bytes"])
    df = table.to_pandas()
    seconds = (df["window_end"] - df["window_start"]).dt.total_seconds()
    df["protocol"] = df["proto"].map(lambda p: PROTOCOLS.get(int(p), str(int(p))) if pd.notna(p) else "?")
    df["packets_per_s"] = df["packets"] / seconds
    df["bits_per_s"] = df["bytes"] * 8 / seconds
    df["bytes_per_s"] = df["bytes"] / seconds
    return df.sort_values(["window_start", "protocol"]).reset_index(drop=True)


def pipeline_status(data_dir: str) -> dict:
    cfg = config().replace(paths={"data_dir": Path(data_dir)})
    try:
        return json.loads(status_file(cfg).read_text())
    except (FileNotFoundError, ValueError):
        return {}
