"""All the dashboard's reads: committed Parquet results under ``<data>/results`` via pyarrow."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from netmon.config import Config, load_config
from netmon.results import read_results, results_dir, status_file

__all__ = ["PROTOCOLS", "config", "pipeline_status", "traffic"]

PROTOCOLS = {1: "ICMP", 6: "TCP", 17: "UDP", 47: "GRE", 50: "ESP", 58: "ICMPv6", 132: "SCTP"}


@st.cache_resource
def config() -> Config:
    """The configuration the dashboard was started with (``NETMON_CONFIG`` / env overrides)."""
    return load_config()


def _ttl() -> float:
    return max(1.0, config().dashboard.refresh_s - 0.5)


@st.cache_data(ttl=2, max_entries=4, show_spinner=False)
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
