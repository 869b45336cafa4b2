"""The dashboard's reads for the Joins and Load shedding pages: committed Parquet results via pyarrow.

- ``joins`` results (``results/joins/``): one row per join result (``row = "match"``) or SYN
  never answered (``row = "unmatched"``), per query, committed per batch (``pipeline.joins_batch``;
  an older netmon's: Spark's file sink);
- ``shedding`` results (``results/shedding/``): one row per join query and micro-batch, the
  controller's measurements and fractions (``pipeline.shedding_controller.SheddingRecord``);
- the offline strategy comparison of ``netmon eval shedding`` (``docs/eval/shedding/*.csv``).

Loaders shape the rows for plotting; the summaries reuse :mod:`analytics.join_queries`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import streamlit as st

from analytics.join_queries import rtt_per_server
from dashboard.data import cached, read_range

__all__ = [
    "EVAL_DIR",
    "JOIN_COLUMNS",
    "half_open",
    "handshake_rtts",
    "join_results",
    "link_matches",
    "rtt_per_server",
    "shedding_eval",
    "shedding_stats",
]

#: Where ``netmon eval shedding`` writes its tables (in the repository).
EVAL_DIR = Path(__file__).resolve().parents[1] / "docs" / "eval" / "shedding"

#: The joins' columns the pages read (``join_results``; the warm-up reads the same).
JOIN_COLUMNS = [
    "query",
    "kind",
    "row",
    "key",
    "left_ts",
    "right_ts",
    "delay_s",
    "left_src_ip",
    "left_dst_ip",
    "left_dst_port",
    "right_src_ip",
]


@cached()
def join_results(data_dir: str, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """The committed join rows whose left tuple's time (``left_ts``, the kind's time column) lies
    in ``[start, end]`` (the columns the pages use; only the files whose Parquet statistics
    overlap the range are read: ``dashboard.bounded``, its search over the batches allowing for
    their disorder, ``bounded.batch_disorder_s``), oldest result first."""
    df = read_range(data_dir, "joins", start, end, JOIN_COLUMNS)
    if df is None:
        return pd.DataFrame({c: [] for c in JOIN_COLUMNS})
    return df.sort_values(["query", "left_ts"], kind="stable").reset_index(drop=True)


def handshake_rtts(results: pd.DataFrame) -> pd.DataFrame:
    """One row per answered SYN-ACK of the handshake queries: ``query``, ``client``, ``server``,
    ``server_port``, ``ts`` and ``rtt_s`` (the smallest delay since a matching SYN: retransmitted
    SYNs share the key)."""
    cols = ["query", "client", "server", "server_port", "ts", "rtt_s"]
    hs = results[(results["kind"] == "handshake") & (results["row"] == "match")]
    if hs.empty:
        return pd.DataFrame({c: [] for c in cols})
    df = pd.DataFrame(
        {
            "query": hs["query"],
            "key": hs["key"],
            "client": hs["left_src_ip"],
            "server": hs["left_dst_ip"],
            "server_port": hs["left_dst_port"],
            "ts": hs["right_ts"],
            "rtt_s": hs["delay_s"],
        }
    )
    df = df.sort_values(["query", "key", "ts", "rtt_s"], kind="stable")
    return df.drop_duplicates(["query", "key", "ts"], keep="first").reset_index(drop=True)[cols]


def half_open(results: pd.DataFrame) -> pd.DataFrame:
    """SYNs never answered within the window, per handshake query and destination: ``syns``, most first."""
    syn = results[(results["kind"] == "handshake") & (results["row"] == "unmatched")]
    if syn.empty:
        return pd.DataFrame({"query": [], "server": [], "syns": []})
    out = syn.groupby(["query", "left_dst_ip"], as_index=False).size()
    out.columns = ["query", "server", "syns"]
    return out.sort_values(
        ["query", "syns", "server"], ascending=[True, False, True], kind="stable"
    ).reset_index(drop=True)


def link_matches(results: pd.DataFrame) -> pd.DataFrame:
    """Per link query and key: ``matches``, ``first`` and ``last`` result time, most matches first."""
    cols = ["query", "key", "matches", "first", "last"]
    link = results[(results["kind"] == "link") & (results["row"] == "match")]
    if link.empty:
        return pd.DataFrame({c: [] for c in cols})
    when = link[["left_ts", "right_ts"]].max(axis=1)
    g = link.assign(when=when).groupby(["query", "key"])
    out = pd.DataFrame({"matches": g.size(), "first": g["when"].min(), "last": g["when"].max()}).reset_index()
    order = ["query", "matches", "key"]
    return out.sort_values(order, ascending=[True, False, True], kind="stable").reset_index(drop=True)[cols]


@cached()
def shedding_stats(data_dir: str, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """The controller's rows of the batches triggered in ``[start, end]`` (``batch_time``), by
    query and batch, with ``unshed_estimate`` per batch."""
    df = read_range(data_dir, "shedding", start, end)
    if df is None:
        return pd.DataFrame(
            {
                c: []
                for c in ("query", "batch_id", "batch_time", "utilisation", "x_left", "x_right", "results")
            }
        )
    return df.sort_values(["query", "batch_id"], kind="stable").reset_index(drop=True)


# Not a live result: the tables change only when `netmon eval shedding` runs again, not every refresh.
@st.cache_data(ttl=60, max_entries=2, show_spinner=False)
def shedding_eval(directory: str = str(EVAL_DIR)) -> pd.DataFrame:
    """The ``netmon eval shedding`` tables (one per dataset), concatenated; empty if absent."""
    frames = [pd.read_csv(path) for path in sorted(Path(directory).glob("*.csv"))]
    if not frames:
        return pd.DataFrame({c: [] for c in ("dataset", "budget_fraction", "strategy", "result_fraction")})
    return pd.concat(frames, ignore_index=True)
