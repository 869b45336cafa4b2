"""The Pipeline page's reads and summaries: is each pipeline query keeping up?

The rows are the ``sys`` kind's (``docs/results.md``, "The ``sys`` kind"), one per micro-batch of
each pipeline query, read for the page's time range by ``dashboard.data_resources`` (bounded to
the range); the totals since the pipeline started (malformed and far-future records, late rows)
are the status file's (``dashboard.data.pipeline_status``). These helpers only shape them.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = [
    "COUNT_PREFIXES",
    "STATUS_COLUMNS",
    "counts_columns",
    "long",
    "ordered_queries",
    "status_table",
    "verdict",
]

#: Per-batch counts the page charts when the ``sys`` rows carry them (columns named so).
COUNT_PREFIXES = ("late", "malformed", "future")
#: The status file's bookkeeping, not health: not listed.
_HIDDEN = ("last_batch_id", "last_timestamp", "late_in_batches")
#: The status file's columns the page lists first, in this order (any others after them).
STATUS_COLUMNS = [
    "query",
    "active",
    "batches",
    "input_rows",
    "packets",
    "malformed",
    "future",
    "late_dropped",
    "last_batch_ms",
    "kind_ms",
    "state_rows",
    "restarts",
]


def ordered_queries(df: pd.DataFrame) -> list[str]:
    """The queries of ``df``: the shared query ``packets`` first, then by name.

    >>> ordered_queries(pd.DataFrame({"query": ["joins", "packets", "joins"]}))
    ['packets', 'joins']
    """
    names = sorted(set(df["query"]))
    return sorted(names, key=lambda n: (n != "packets", n))


def long(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """``df``'s ``columns`` (column -> the name shown) as long rows ``batch_time, query, measure,
    value`` for one chart: a line per query and measure; the columns without values left out.

    >>> df = pd.DataFrame({"batch_time": [1, 2], "query": ["p", "p"], "a": [1.0, 2.0], "b": [None, None]})
    >>> long(df, {"a": "in", "b": "out"})[["measure", "value"]].values.tolist()
    [['in', 1.0], ['in', 2.0]]
    """
    present = [c for c in columns if c in df.columns and df[c].notna().any()]
    if not present:
        return pd.DataFrame({c: [] for c in ("batch_time", "query", "measure", "value")})
    out = df.melt(id_vars=["batch_time", "query"], value_vars=present, var_name="measure", value_name="value")
    out["measure"] = out["measure"].map(columns)
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    return out.dropna(subset=["value"]).reset_index(drop=True)


def counts_columns(df: pd.DataFrame) -> list[str]:
    """The per-batch late, malformed and far-future counts the rows carry (:data:`COUNT_PREFIXES`;
    the ``sys`` rows of today carry none: the status file has the totals)."""
    return [c for c in df.columns if c.startswith(COUNT_PREFIXES) and df[c].notna().any()]


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def verdict(rows: pd.DataFrame) -> str:
    """Whether one query keeps up, from its rows in the range (by batch time):

    - ``keeping up``: after its last batch nothing waits in Kafka, or what waits takes less than
      one trigger interval to read at the pace it processed (``backlog_s <= trigger_s``);
    - ``catching up``: more waits, but less than after the range's first batch;
    - ``falling behind``: more waits, as much as or more than then;
    - ``lag unknown``: the rows carry no Kafka lag.

    >>> rows = pd.DataFrame({"lag_messages": [50, 10], "backlog_s": [5.0, 2.0], "trigger_s": [1.0, 1.0]})
    >>> verdict(rows), verdict(rows.iloc[::-1]), verdict(rows.assign(backlog_s=[5.0, 0.5]))
    ('catching up', 'falling behind', 'keeping up')
    """
    known = rows[pd.to_numeric(rows["lag_messages"], errors="coerce").notna()]
    if known.empty:
        return "lag unknown"
    last = known.iloc[-1]
    lag, backlog, trigger = (_number(last[c]) for c in ("lag_messages", "backlog_s", "trigger_s"))
    if lag == 0 or (math.isfinite(backlog) and math.isfinite(trigger) and backlog <= trigger):
        return "keeping up"
    return "catching up" if lag < _number(known.iloc[0]["lag_messages"]) else "falling behind"


def status_table(status: dict[str, Any]) -> pd.DataFrame:
    """The status file's queries (``pipeline.job``: totals since the pipeline started), one row
    per kind: the :data:`STATUS_COLUMNS` it has first, then any others but the bookkeeping.

    >>> status_table({"queries": {"traffic": {"batches": 3, "last_batch_id": 2, "new": 1}}})
      query  batches  new
    0  traffic        3    1
    """
    rows = [{"query": name, **values} for name, values in (status.get("queries") or {}).items()]
    if not rows:
        return pd.DataFrame({c: [] for c in STATUS_COLUMNS})
    df = pd.DataFrame(rows)
    first = [c for c in STATUS_COLUMNS if c in df.columns]
    return df[first + [c for c in df.columns if c not in first and c not in _HIDDEN]]
