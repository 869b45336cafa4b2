"""The Resources page's reads: the pipeline's own statistics (``results/sys/``) beside the cost model.

The ``sys`` kind (``pipeline.sys_stats``, ``docs/results.md``) is one row per micro-batch of each
pipeline query (``packets``, the shared query of every kind; ``joins`` in an older netmon), one
commit per batch under ``results/sys/<query>/``. A day at a 1 s trigger is 86,400 commits per
query, so a read is bounded to the selected time range (:func:`read_recent`,
``netmon.results_range.read_rows``): the commits are named by batch id and written in batch
order, after their batch's trigger, so a binary search on their modification times finds the
first one the range can hold, and only the commits from there on are read (each once per
dashboard process: a ``netmon.results_range.CommitRows`` keeps the rows of the commits read,
:func:`commits`; the dashboard's warm-up, ``dashboard.warmup``, fills it with the last 24 h when
the server starts).

Results maintenance (``pipeline.retention``, ``[retention] compact_after_s``) rewrites a query's
older batches as one file per hour of batch time and removes their commits. A read also takes the
compacted hours its range overlaps (their manifests only, then only those files, filtered to the
range), and a batch a manifest covers only from its compacted file (:func:`read_between`).

Beside the measured values, :func:`with_estimates` puts the cost model's estimates
(``analytics.cost_model``, the constants ``netmon bench calibrate`` measured, as ``netmon
explain`` uses them) at each batch's measured input rate, and :func:`budgets` the ``[resources]``
budgets they are held against.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analytics.cost_model import DEFAULT_CONSTANTS, CostConstants, CostModel, Workload, load_constants
from dashboard import data
from netmon.config import Config
from netmon.results import SHARED_QUERY, results_dir
from netmon.results_range import CommitRows, from_micros, newest_committed_us, read_rows, rows_span, sinks

__all__ = [
    "BATCH_KINDS",
    "COLUMNS",
    "KNOBS",
    "RANGES",
    "SLACK_S",
    "budgets",
    "commits",
    "constants",
    "knobs_over_time",
    "read_between",
    "read_recent",
    "sys_between",
    "sys_in",
    "sys_stats",
    "with_estimates",
]

#: The page's time ranges (seconds of batch time, up to the newest batch).
RANGES: dict[str, float] = {"last 5 min": 300.0, "last 15 min": 900.0, "last 1 h": 3600.0}
#: How far from a batch's time its commit's file time may be: a row's batch time is its trigger's,
#: its commit comes after the batch (and its progress event); a read takes the commits written
#: this much either side of its range.
SLACK_S = 300.0
#: The ``sys`` rows' time column: the compaction of ``results/sys/`` (``pipeline.retention``) groups
#: and bounds its hours by it (the first of ``pipeline.publish.TIME_COLUMNS`` the rows have).
TIME_COLUMN = "batch_time"
#: The kinds the shared query runs (their estimates add up to its cost).
BATCH_KINDS = ("traffic", "topk", "distinct", "features", "joins")
#: The knobs a row records, as the page plots them over time.
KNOBS = ("trigger_s", "watermark_s", "max_batch_messages", "shed_x_left", "shed_x_right", "sample_keep")

#: a sink's newest commits tried for the newest batch time (one may be being replaced)
_NEWEST_TRIED = 3

COLUMNS = [
    "query",
    "batch_id",
    "batch_time",
    "max_event_time",
    "lag_s",
    "lag_messages",
    "backlog_s",
    "input_messages",
    "packets",
    "input_messages_per_s",
    "processed_messages_per_s",
    "packets_per_s",
    "batch_ms",
    "batch_utilisation",
    "stage1_s",
    "traffic_s",
    "topk_s",
    "distinct_s",
    "features_s",
    "joins_s",
    "state_rows",
    "state_bytes",
    "join_state_rows",
    "trigger_s",
    "watermark_s",
    "max_batch_messages",
    "shed_x_left",
    "shed_x_right",
    "shed_fractions",
    "sample_keep",
    "sample_fractions",
]


#: the cache of the commits' rows (``netmon.results_range.CommitRows``), as the tests name it
_Rows = CommitRows
_ROWS = CommitRows()


def commits() -> CommitRows:
    """The process's cache of the ``sys`` commits' rows, shared by the pages and the warm-up."""
    return _ROWS


def _newest(queries: list[Path], cache: CommitRows) -> dt.datetime | None:
    """The newest batch time of any sink: its newest commit's (a sink's newest commits are never
    compacted, ``pipeline.retention.KEEP_NEWEST``; one being replaced: the one before)."""
    found: list[int] = []
    for sink in queries:

        def newest(batch_id: int, sink: Path = sink) -> int | None:
            span = rows_span(cache.get(sink, batch_id), TIME_COLUMN)
            return None if span is None else span[1]

        us = newest_committed_us(sink, newest, tried=_NEWEST_TRIED)
        if us is not None:
            found.append(us)
    return from_micros(max(found)) if found else None


def read_between(
    directory: Path, start: dt.datetime, end: dt.datetime, *, cache: _Rows | None = None
) -> pd.DataFrame:
    """The ``sys`` rows of batch time [start, end] (tz-aware), by query and batch id.

    Per query (``netmon.results_range.read_rows``), from the commits written in the range (with
    :data:`SLACK_S` either side; found by binary search on their file times) and from the
    compacted hours (``pipeline.retention``) whose rows overlap the range
    (``netmon.results.compactions_between``), each batch once: one a manifest covers is read from
    its compacted file, never from its commit. The cost follows the range, not the history.
    """
    cache = _ROWS if cache is None else cache
    rows: list[dict[str, Any]] = []
    for sink in sinks(Path(directory)):
        rows += read_rows(sink, TIME_COLUMN, start, end, cache, slack_s=SLACK_S)
    return _frame(rows, start, end)


def read_recent(directory: Path, seconds: float, *, cache: _Rows | None = None) -> pd.DataFrame:
    """The ``sys`` rows of the last ``seconds`` of batch time, up to the newest batch of any query
    (:func:`read_between`; the commits from :data:`SLACK_S` before the range to the newest)."""
    cache = _ROWS if cache is None else cache
    found = sinks(Path(directory))
    end = _newest(found, cache)
    if end is None:
        return _empty()
    start = end - dt.timedelta(seconds=seconds)
    rows: list[dict[str, Any]] = []
    for sink in found:
        rows += read_rows(sink, TIME_COLUMN, start, end, cache, slack_s=SLACK_S, to_newest=True)
    return _frame(rows, start, end)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in COLUMNS})


def _frame(rows: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """The rows of batch time [start, end] as the page's frame, by query and batch id."""
    if not rows:
        return _empty()
    df = pd.DataFrame.from_records(rows)
    df = df.reindex(columns=[*COLUMNS, *(c for c in df.columns if c not in COLUMNS)])
    df["batch_time"] = pd.to_datetime(df["batch_time"], utc=True)
    df = df[(df["batch_time"] >= pd.Timestamp(start)) & (df["batch_time"] <= pd.Timestamp(end))]
    return df.sort_values(["query", "batch_id"], kind="stable").reset_index(drop=True)


@data.cached()
def sys_stats(data_dir: str, seconds: float) -> pd.DataFrame:
    """The ``sys`` rows of the last ``seconds`` of batch time (:func:`read_recent`)."""
    cfg = data.config().replace(paths={"data_dir": Path(data_dir)})
    return read_recent(results_dir(cfg, "sys"), seconds)


@data.cached()
def sys_between(data_dir: str, start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """The ``sys`` rows of batch time ``[start, end]`` (:func:`read_between`)."""
    cfg = data.config().replace(paths={"data_dir": Path(data_dir)})
    return read_between(results_dir(cfg, "sys"), start, end)


def sys_in(
    data_dir: str, seconds: float | None, start: dt.datetime | None, end: dt.datetime | None
) -> pd.DataFrame:
    """The ``sys`` rows of a page's time range (``dashboard.time_range.TimeRange``): the last
    ``seconds`` of batch time up to the newest batch (:func:`sys_stats`), or ``[start, end]``
    (:func:`sys_between`) when ``seconds`` is None."""
    if seconds is not None:
        return sys_stats(data_dir, seconds)
    if start is None or end is None:
        return _empty()
    return sys_between(data_dir, start, end)


def constants(cfg: Config) -> tuple[CostConstants, str]:
    """The cost model's constants (this machine's calibration, else the built-in defaults) and a
    problem to show (an unreadable calibration: the defaults are used)."""
    try:
        return load_constants(cfg.paths.state_dir), ""
    except ValueError as exc:
        return DEFAULT_CONSTANTS, str(exc)


def _query_of(kind: str) -> str:
    """The pipeline query that runs a kind's estimates: the batch kinds share ``packets``."""
    return SHARED_QUERY if kind in BATCH_KINDS else kind


def with_estimates(df: pd.DataFrame, cfg: Config, consts: CostConstants) -> pd.DataFrame:
    """``df`` with the cost model's estimates at each row's measured input rate.

    ``rate_pps``: the packets per second the query took in — the shared query's ``packets_per_s``;
    for an older netmon's joins query (which counted no packets) its messages per second times the
    packets per message the shared query read in the range. ``est_cpu`` (CPU seconds per second, comparable
    with ``batch_utilisation``), ``est_state_rows`` and ``est_memory_bytes``: the sums over the
    query's configured queries (``CostModel.estimates``, default key populations as ``netmon
    explain``), the shared query's CPU with the read and decode and the per-batch costs (the sum
    of ``netmon explain``'s parts, what ``batch_utilisation`` measures); NaN where the rate is
    unknown.
    """
    out = df.copy()
    shared = out[out["query"] == SHARED_QUERY]
    messages = pd.to_numeric(shared["input_messages"], errors="coerce").sum()
    per_message = pd.to_numeric(shared["packets"], errors="coerce").sum() / messages if messages else math.nan
    rate = pd.to_numeric(out["packets_per_s"], errors="coerce").astype("float64")
    by_messages = pd.to_numeric(out["input_messages_per_s"], errors="coerce").astype("float64") * per_message
    out["rate_pps"] = rate.where(out["query"] == SHARED_QUERY, by_messages)
    model = CostModel.for_config(cfg, consts)
    memo: dict[float, dict[str, tuple[float, float, float]]] = {}

    def at(pps: float) -> dict[str, tuple[float, float, float]]:
        key = float(f"{pps:.3g}")  # three significant digits: the estimates move smoothly
        if key not in memo:
            w = Workload(rate_pps=key)
            sums: dict[str, tuple[float, float, float]] = {}
            for e in model.estimates(cfg, w):
                q = _query_of(e.kind)
                cpu, rows, mem = sums.get(q, (0.0, 0.0, 0.0))
                sums[q] = (cpu + e.cpu, rows + e.state_rows, mem + e.memory_bytes)
            if SHARED_QUERY in sums:
                # the whole batch, as batch_utilisation measures it: the shared read and decode
                # and the per-batch costs besides the queries' own (``netmon explain``'s parts)
                cpu, rows, mem = sums[SHARED_QUERY]
                work = model.decode(w).cpu + sum(v[0] for v in sums.values())
                extra = model.decode(w).cpu + sum(model.overheads(cfg.pipeline.kinds, w, work).values())
                sums[SHARED_QUERY] = (cpu + extra, rows, mem)
            memo[key] = sums
        return memo[key]

    values = [
        at(pps).get(query, (math.nan,) * 3) if math.isfinite(pps) and pps >= 0 else (math.nan,) * 3
        for query, pps in zip(out["query"], out["rate_pps"].fillna(math.nan), strict=True)
    ]
    out["est_cpu"] = [v[0] for v in values]
    out["est_state_rows"] = [v[1] for v in values]
    out["est_memory_bytes"] = [v[2] for v in values]
    return out


def budgets(cfg: Config) -> dict[str, float]:
    """The ``[resources]`` budgets (CPU s/s, bytes) and their bounds after the reserve, and the
    joins' own ``[shedding] cpu_budget`` (a share of each trigger interval)."""
    res = cfg.resources
    return {
        "cpu": res.cpu_budget,
        "cpu_bound": res.cpu_bound,
        "memory_bytes": float(res.memory_bytes),
        "memory_bound": res.memory_bound,
        "shedding_cpu": cfg.shedding.cpu_budget,
    }


def knobs_over_time(df: pd.DataFrame) -> pd.DataFrame:
    """One query's knobs as long rows ``batch_time, knob, value`` (the knobs it records), by knob
    and time: for each knob the batches where its value changed (its first batch included) and its
    last batch, the points of its steps. A knob holds its value until the next change, so the
    step chart of these rows is the chart of every batch's, in a few points instead of one per
    batch (a day of one-second batches: 86,400).

    >>> t = pd.date_range("2024-05-01", periods=4, freq="s", tz="UTC")
    >>> df = pd.DataFrame({"batch_time": t, "trigger_s": [1.0, 1.0, 2.0, 2.0], "sample_keep": None})
    >>> knobs_over_time(df)[["knob", "value"]].values.tolist()
    [['trigger_s', 1.0], ['trigger_s', 2.0], ['trigger_s', 2.0]]
    """
    present = [k for k in KNOBS if k in df.columns and df[k].notna().any()]
    long = df.melt(id_vars=["batch_time"], value_vars=present, var_name="knob", value_name="value")
    long = long.dropna(subset=["value"]).sort_values(["knob", "batch_time"], kind="stable")
    long["knob"] = pd.Categorical(long["knob"], categories=present)  # in the order of KNOBS
    long = long.sort_values("knob", kind="stable")
    knob, value = long["knob"], long["value"]
    first = knob.ne(knob.shift())
    last = knob.ne(knob.shift(-1))
    changed = value.ne(value.shift())
    out = long[first | last | changed].reset_index(drop=True)
    out["knob"] = out["knob"].astype(str)
    return out
