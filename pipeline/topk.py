"""Sliding-window heavy hitters (Golab's Algorithm 6) for every configured top-k query.

:class:`SlidingTopK` runs on the shared micro-batch (``pipeline.job``). Per batch:

1. stage 1 in Spark, all queries in one aggregation: exact counts per (query, sub-window
   ``sw = ts div b``, key text) of the batch's packets (or bytes), united with the partial counts
   of the sub-windows earlier batches left open (a Parquet store beside the checkpoint);
2. the watermark moves to the batch's largest event time (ms) − the delay, never back (Spark's
   rule); a sub-window closes when the watermark reaches its end, and a row whose sub-window had
   closed before the batch is late (counted, left out) — what Spark's streaming aggregation
   ``groupBy(window(ts, b), key)`` in append mode does, which the first version used;
3. of each closed sub-window only its top-k rows (count descending, key text ascending —
   ``docs/topk.md`` convention 1) and its total reach the driver, where each query's
   :class:`analytics.topk_merge.TopKMerge` merges them in sub-window order and makes the reports;
   With a granularity change (``netmon tune --granularity``, the resource manager's coarse
   step: seed 004's operator Γ, ``analytics.granularity``), the closed fine sub-windows' full
   counts are first summed into the coarse sub-window of the query's schedule, and a coarse
   sub-window closes (or a row is late) by the coarse sub-window's end;
4. the reports are written as rows and committed per batch (``pipeline.batch_sink``); the merge
   states, the watermark and the open counts are the batch's state version
   (``pipeline.batch_state``), so a batch that Spark runs again starts from the state before it.

Each report is written as rows::

    query, window_end, delta, rank, key, count, total

one per reported item (rank 1, 2, … by count descending then key), or a single row with rank 0
and a null key and count when no item is above delta. ``total`` is the window's traffic (packets
or bytes of the query's weight, records with the key only) for the items' shares.

``build_topk`` (stage 1 as a streaming aggregation, stage 2 in ``transformWithStateInPandas``)
is the first version, kept for ``netmon bench topk``.
"""

from __future__ import annotations

import base64
import logging
import math
import shutil
from collections.abc import Iterator, Mapping
from functools import reduce
from operator import and_, itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics.granularity import FROM_START, coarse_starts, plan_change, pruned
from analytics.keys import KEY_SEPARATOR, parse_key
from analytics.sampling import count_interval
from analytics.topk_merge import QueryParams, TopKMerge
from netmon.config import Config, TopKQuery
from pipeline.batch_sink import write_table
from pipeline.batch_state import BatchState
from pipeline.partials import INTAKE, CountSpec
from pipeline.topk_state import OUTPUT_SCHEMA, TopKMergeProcessor
from pipeline.window_knobs import GranularityKnobs, WindowKnobs, granularity_file, window_file

__all__ = [
    "RESULT_SCHEMA",
    "SlidingTopK",
    "build_sliding_counts",
    "build_subwindow_counts",
    "build_topk",
    "build_topk_batch",
    "build_topk_outputs",
    "key_column",
    "query_params",
    "top_k_per_window",
    "weight_column",
]

_NS_PER_US = 1_000

log = logging.getLogger(__name__)

#: The stage-1 query names of the top-k kind (``pipeline.partials``): this prefix + the query name.
SPEC = "topk/"
#: The open sub-windows' partial counts kept between batches.
_OPEN_ARROW = pa.schema(
    [("query", pa.string()), ("sw", pa.int64()), ("key", pa.string()), ("count", pa.int64())]
)

#: The rows of ``results/topk/`` (the same columns and types as the first version's sink wrote).
RESULT_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("delta", pa.int64()),
        ("rank", pa.int32()),
        ("key", pa.string()),
        ("count", pa.int64()),
        ("total", pa.int64()),
        # Precision (issue 18 item 6): the smallest drop-box fraction over the window's
        # sub-windows (1.0: exact) and the 95 % interval of ``count`` (analytics.sampling)
        ("keep", pa.float64()),
        ("count_low", pa.int64()),
        ("count_high", pa.int64()),
        # The span the window held (issue 18 item 4): window_s, except after a window change at
        # run time while a longer window fills (pipeline.window_knobs); null in older rows
        ("window_s", pa.float64()),
        # The sub-window of the report's closing sub-window (seed 004's granularity knob):
        # sub_window_s, or a multiple after netmon tune --granularity; null in older rows
        ("sub_window_s", pa.float64()),
    ]
)


def query_params(q: TopKQuery) -> QueryParams:
    """``N`` and ``b`` in nanoseconds (whole microseconds, Spark's precision) and ``k``; validated."""
    where = f"[[queries.topk]] {q.name!r}"
    b_ns, n_ns = round(q.sub_window_s * 1e9), round(q.window_s * 1e9)
    if b_ns < _NS_PER_US or b_ns % _NS_PER_US:
        raise ValueError(
            f"{where} sub_window_s: must be a positive whole number of microseconds, got {q.sub_window_s}"
        )
    if n_ns < b_ns or n_ns % b_ns:
        raise ValueError(
            f"{where} window_s: must be a multiple of sub_window_s={q.sub_window_s}, got {q.window_s}"
        )
    if q.k < 1:
        raise ValueError(f"{where} k: must be >= 1, got {q.k}")
    return QueryParams(N=n_ns, b=b_ns, k=q.k)


def key_column(key: str) -> Column:
    """The canonical key text (``analytics.keys``): fields as strings joined by ``,``; null if any is null."""
    fields = parse_key(key)
    text = F.concat_ws(KEY_SEPARATOR, *(F.col(f).cast("string") for f in fields))
    # concat_ws skips nulls; the canonical key of a record missing a field is null instead.
    return F.when(reduce(and_, (F.col(f).isNotNull() for f in fields)), text)


def weight_column(weight: str) -> Column:
    """What a record adds to its key's count: 1 (``packets``) or its ``wire_len`` (``bytes``)."""
    if weight == "packets":
        return F.lit(1).cast("long")
    if weight == "bytes":
        return F.col("wire_len").cast("long")
    raise ValueError(f"weight: expected 'packets' or 'bytes', got {weight!r}")


def _keyed(packets: DataFrame, q: TopKQuery) -> DataFrame:
    """``ts, key, weight`` of the records that have the query's key fields."""
    keyed = packets.select("ts", key_column(q.key).alias("key"), weight_column(q.weight).alias("weight"))
    # The filter names `ts` so the optimizer keeps it above the watermark (as in pipeline.source):
    # pushed below, it would drop the watermark control rows (null key) before they count.
    return keyed.where(F.col("key").isNotNull() | F.col("ts").isNull())


def build_subwindow_counts(packets: DataFrame, q: TopKQuery) -> DataFrame:
    """Stage 1: ``query, sw, key, count`` — exact counts per closed sub-window ``sw = start // b``."""
    b_us = query_params(q).b // _NS_PER_US
    # Keyed records: the query's key text and weight; records without the key's fields are skipped.
    keyed = _keyed(packets, q)
    # Exact counts per tumbling sub-window and key, emitted once the watermark passes the end.
    counts = keyed.groupBy(F.window("ts", f"{b_us} microseconds"), "key").agg(F.sum("weight").alias("count"))
    # The sub-window's index, as analytics.topk numbers them (exact: start is a multiple of b).
    return counts.select(
        F.lit(q.name).alias("query"),
        F.floor(F.unix_micros(F.col("window.start")) / b_us).alias("sw"),
        "key",
        "count",
    )


def build_sliding_counts(packets: DataFrame, q: TopKQuery) -> DataFrame:
    """The baseline (``netmon bench topk``): Spark's exact sliding window ``window(ts, N, b)``.

    ``query, window_end, key, count`` per closed window: every record is counted in the ``N/b``
    windows that contain it, and the state holds every key of every open window.
    """
    params = query_params(q)
    n_us, b_us = params.N // _NS_PER_US, params.b // _NS_PER_US
    # Exact counts per sliding window and key.
    counts = (
        _keyed(packets, q)
        .groupBy(F.window("ts", f"{n_us} microseconds", f"{b_us} microseconds"), "key")
        .agg(F.sum("weight").alias("count"))
    )
    return counts.select(
        F.lit(q.name).alias("query"), F.col("window.end").alias("window_end"), "key", "count"
    )


def top_k_per_window(counts: DataFrame, k: int) -> DataFrame:
    """A batch step over closed windows' counts: each window's top-k rows, ranked as convention 1."""
    by_count = Window.partitionBy("query", "window_end").orderBy(F.desc("count"), F.asc("key"))
    return counts.withColumn("rank", F.row_number().over(by_count)).where(F.col("rank") <= k)


def build_topk(packets: DataFrame, queries: tuple[TopKQuery, ...]) -> DataFrame:
    """All queries' reports as rows ``query, window_end, delta, rank, key, count, total``."""
    params = {q.name: query_params(q) for q in queries}
    # Closed sub-windows of every query, one stream: only their rows reach the stateful merge.
    subwindows = reduce(DataFrame.unionByName, (build_subwindow_counts(packets, q) for q in queries))
    # Stage 2: per query, Algorithm 6's merge over the sub-windows' top-k lists, in Spark state.
    return subwindows.groupBy("query").transformWithStateInPandas(
        statefulProcessor=TopKMergeProcessor(params),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="None",
    )


def build_topk_outputs(packets: DataFrame, cfg: Config) -> dict[str, DataFrame]:
    """The ``topk`` result kind: one DataFrame (one streaming query) for every configured query."""
    if not cfg.queries.topk:
        return {}
    return {"topk": build_topk(packets, cfg.queries.topk)}


class SlidingTopK:
    """The top-k kind on each micro-batch: stage-1 counts in, reports out (module docstring).

    Parameters
    ----------
    queries
        The configured ``[[queries.topk]]``.
    results, checkpoint
        ``results/topk/`` and the kind's checkpoint directory (state in ``state/``, the open
        sub-windows' partial counts in ``open-<batch>.parquet``).
    watermark_ms
        The watermark delay, ``[pipeline] watermark_s`` in milliseconds.
    """

    def __init__(
        self,
        queries: tuple[TopKQuery, ...],
        results: Path,
        checkpoint: Path,
        *,
        watermark_ms: int,
        windows: Path | None = None,
        granularity: Path | None = None,
        max_factor: float = 4.0,
    ) -> None:
        self.queries = tuple(queries)
        #: each batch's windows: the configured ones, or those ``netmon tune --window`` asks for
        self.knobs = WindowKnobs(self.queries, windows, Path(checkpoint) / "windows")
        #: each batch's sub-window factors (Γ): 1, or what ``netmon tune --granularity`` asks for
        self.grains = GranularityKnobs(
            self.queries, granularity, Path(checkpoint) / "granularity", max_factor=max_factor
        )
        self.params = {q.name: query_params(q) for q in self.queries}
        self.results = Path(results)
        self.store = Path(checkpoint)
        self.state = BatchState(self.store / "state")
        self.delay_ms = watermark_ms
        #: late rows (over all queries) skipped by this process's batches
        self.late_rows = 0
        #: rows of state after the last batch (the ``sys`` rows' ``topk_state_rows``); None before
        self.state_rows: int | None = None
        # Rows carry their query as a code: its position among the stage-1 names sorted as the
        # reports are written (query name ascending). Grouping millions of rows by the name's
        # text took 2.7 times as long as by an integer (measured), and b and k become numpy takes.
        self._names = sorted(SPEC + q.name for q in self.queries)
        params = [self.params[name.removeprefix(SPEC)] for name in self._names]
        self._b_us = np.array([p.b // _NS_PER_US for p in params], np.int64)
        self._ks = np.array([p.k for p in params], np.int64)
        #: the drop-box fraction per query in force for the next batch (:meth:`sample`)
        self.keep: dict[str, float] = {}
        #: the intake drop box's fraction in force for the next batch (before the decode)
        self.intake = 1.0
        self._bytes = {q.name for q in self.queries if q.weight == "bytes"}

    def coarsen(self, factors: Mapping[str, int]) -> None:
        """The resource manager's coarse step for the next batch (query -> m): each query's
        sub-window is at least this coarse (``GranularityKnobs.decide``)."""
        self.grains.floors = {name: int(m) for name, m in factors.items()}

    def limit_windows(self, windows: Mapping[str, float]) -> None:
        """The resource manager's window reduction for the next batch (query -> seconds): each
        query's window is at most this (``WindowKnobs.decide``)."""
        self.knobs.limits = dict(windows)

    def sample(self, keep: dict[str, float]) -> None:
        """The fraction of records each query's drop box keeps in the next batch (absent: 1), and
        the intake box's (``INTAKE``): a record reaches a query with their product."""
        self.intake = float(keep.get(INTAKE, 1.0))
        self.keep = {name: float(x) for name, x in keep.items() if x < 1 and name != INTAKE}

    @property
    def specs(self) -> tuple[CountSpec, ...]:
        """Stage 1: per query, its weight per (sub-window, key text)."""
        return tuple(
            CountSpec(
                SPEC + q.name,
                parse_key(q.key),
                q.weight,
                self.params[q.name].b // _NS_PER_US,
                keep=self.keep.get(q.name, 1.0),
                intake=self.intake,
            )
            for q in self.queries
        )

    def apply(self, counts: pa.Table, max_us: int | None, batch_id: int) -> None:
        """Merge the batch's counts (``pipeline.partials``); report every sub-window that closes."""
        windows = self.knobs.decide(batch_id)  # saved before the batch: a rerun resizes alike
        factors = self.grains.decide(batch_id, windows)  # and coarsens alike
        before = self.state.load(batch_id) or {"watermark_ms": None, "merges": {}, "open": None}
        wm_before = before["watermark_ms"]
        watermark_ms = wm_before
        if max_us is not None:
            moved = max_us // 1000 - self.delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
        schedules, changes = self._schedules(before, factors, wm_before)
        code = self._codes(counts["query"])
        sw = counts["sw"].to_numpy()
        ends = self._coarse(code, sw, schedules)[1] * self._b_us[code]
        # Late: the sub-window had closed before this batch (its end at or before the watermark).
        late_mask = ends <= wm_before * 1000 if wm_before is not None else np.zeros(len(sw), bool)
        late = int(counts["records"].to_numpy()[late_mask].sum()) if late_mask.any() else 0
        columns = {"code": code, "sw": counts["sw"], "key": counts["key"], "count": counts["weight"]}
        fresh = pa.table(columns).filter(pa.array(~late_mask))
        keeps = self._kept(before.get("keeps", {}), fresh, wm_before, max_us)
        if before["open"]:
            held = pq.read_table(self.store / before["open"], schema=_OPEN_ARROW)
            columns = {
                "code": self._codes(held["query"]),
                "sw": held["sw"],
                "key": held["key"],
                "count": held["count"],
            }
            fresh = pa.concat_tables([fresh, pa.table(columns)])
        merged = fresh.group_by(["code", "sw", "key"], use_threads=False).aggregate([("count", "sum")])
        merged = merged.select(["code", "sw", "key", "count_sum"]).rename_columns(
            ["code", "sw", "key", "count"]
        )
        code = merged["code"].to_numpy()
        sw = merged["sw"].to_numpy()
        starts, coarse_ends = self._coarse(code, sw, schedules)
        ends = coarse_ends * self._b_us[code]
        closed = ends <= watermark_ms * 1000 if watermark_ms is not None else np.zeros(len(sw), bool)
        # The open sub-windows' partial counts: the next batch's start.
        open_name = f"open-{batch_id:06d}.parquet"
        held = merged.filter(pa.array(~closed))
        names = pc.take(pa.array(self._names, pa.string()), held["code"])
        held = pa.table([names, held["sw"], held["key"], held["count"]], schema=_OPEN_ARROW)
        _write_parquet(held, self.store / open_name)
        merges = {
            q.name: (
                TopKMerge.from_bytes(base64.b64decode(before["merges"][q.name]), self.params[q.name])
                if q.name in before["merges"]
                else TopKMerge(self.params[q.name])
            )
            for q in self.queries
        }
        for name, merge in merges.items():
            if windows[name] != merge.params.N:
                # Seed 004's window knob at the batch boundary: in force from the first
                # sub-window this batch closes (a shorter window at once, a longer one filling).
                log.info(
                    "window change",
                    extra={
                        "query": name,
                        "batch": batch_id,
                        "from_s": merge.params.N / 1e9,
                        "to_s": windows[name] / 1e9,
                        "from_sub_window": merge.algorithm.index,
                    },
                )
                merge.resize(windows[name])
            if name in changes and changes[name] != (FROM_START, 1):
                at, m = changes[name]
                # Γ (seed 004's granularity knob): in force from `at`, the first instant at or
                # after this batch's first open sub-window on both the old and the new grid.
                log.info(
                    "granularity change",
                    extra={
                        "query": name,
                        "batch": batch_id,
                        "to_s": m * merge.params.b / 1e9,
                        "at_sub_window": at,
                    },
                )
                merge.set_granularity(m, None if at == FROM_START else at)
        by_code = [(name.removeprefix(SPEC), merges[name.removeprefix(SPEC)]) for name in self._names]
        # All rows in one list, cut into columns at the end by itemgetter (C loops): a day of
        # one-second slides is millions of rows, and zip(*rows) per report or once cost more.
        out_names: list[str] = []
        rows: list[tuple[Any, ...]] = []
        sub_ns: list[int] = []
        # Γ: the closed fine sub-windows' full counts summed into their coarse sub-windows (the
        # schedule's), before each one's top-k is taken.
        shut = merged.filter(pa.array(closed))
        if any(len(x) > 1 or x[0][1] > 1 for x in schedules.values()):
            shut = shut.set_column(1, "sw", pa.array(starts[closed], pa.int64()))
            shut = shut.group_by(["code", "sw", "key"], use_threads=False).aggregate([("count", "sum")])
            shut = shut.select(["code", "sw", "key", "count_sum"]).rename_columns(
                ["code", "sw", "key", "count"]
            )
        for c, index, top, total in _closed_top_k(shut, self._ks):
            name, merge = by_code[c]
            made = merge.add_subwindow(top, index, total)
            if made:
                out_names.extend([name] * len(made))
                rows += _with_precision(
                    made, keeps.get(name, []), self.params[name], interval=name not in self._bytes
                )
                sub_ns += _sub_window_ns(made, schedules[name], self.params[name].b)
        if watermark_ms is not None:
            for name, by_sw in keeps.items():
                # A sub-window's fraction matters until the last window holding it is reported:
                # windows up to the last closed sub-window are, the next ones start after it - N/b.
                p = merges[name].params  # the window in force (a growing one: its target)
                last_closed = (watermark_ms * 1000 * _NS_PER_US) // p.b - 1
                keeps[name] = [r for r in by_sw if r[1] > last_closed - p.N // p.b]
        out_columns = [list(map(itemgetter(i), rows)) for i in range(len(RESULT_SCHEMA.names) - 2)]
        out_columns.append(sub_ns)
        write_table(_result_table(out_names, out_columns), self.results, batch_id)
        self.state.save(
            batch_id,
            {
                "watermark_ms": watermark_ms,
                "merges": {name: base64.b64encode(m.to_bytes()).decode() for name, m in merges.items()},
                "open": open_name,
                "keeps": {name: [list(r) for r in ranges] for name, ranges in keeps.items() if ranges},
                "schedules": self._pruned(schedules, watermark_ms),
            },
        )
        self._drop_open(keep={open_name, before["open"]})
        self.late_rows += late
        # The state it holds after the batch, as the cost model counts it (Golab §6.2.2): every
        # query's list pairs and global counters, and the open sub-windows' partial counts.
        self.state_rows = held.num_rows + sum(m.algorithm.space for m in merges.values())
        log.debug("topk batch", extra={"batch": batch_id, "rows": len(out_names), "late": late})

    def _schedules(
        self, before: Mapping[str, Any], factors: Mapping[str, int], wm_before: int | None
    ) -> tuple[dict[str, list[tuple[int, int]]], dict[str, tuple[int, int]]]:
        """Each query's Γ schedule for this batch (``analytics.granularity``) and the changes it
        makes, query -> ``(at, m)``.

        A query without one yet (the first batch, before any watermark) takes its factor from
        the start. A change asked at this batch's boundary takes effect at the first index at or
        after the first fine sub-window not yet closed (``watermark // b``) that is a multiple of
        both sub-windows (CKSV: coarser to finer only at instants of the coarser one; we ask the
        same both ways). Saved with the batch's state, so a rerun changes at the same instant.
        """
        saved = before.get("schedules", {})
        schedules: dict[str, list[tuple[int, int]]] = {}
        changes: dict[str, tuple[int, int]] = {}
        for q in self.queries:
            m = factors.get(q.name, 1)
            if q.name not in saved:
                # States written before Γ: every sub-window so far one b.
                first = 1 if q.name in before["merges"] else m
                schedule = [(FROM_START, first)]
            else:
                schedule = [(int(s), int(x)) for s, x in saved[q.name]]
            if q.name not in before["merges"]:  # a fresh merge (a new query): m from its start
                schedule = [(FROM_START, m)]
                changes[q.name] = (FROM_START, m)
            elif m != schedule[-1][1]:
                if wm_before is None:  # nothing closed yet: from the start
                    at, schedule = FROM_START, [(FROM_START, m)]
                else:
                    b_us = self.params[q.name].b // _NS_PER_US
                    planned, schedule = plan_change(schedule, (wm_before * 1000) // b_us, m)
                    assert planned is not None
                    at = planned
                changes[q.name] = (at, m)
            schedules[q.name] = schedule
        return schedules, changes

    def _coarse(
        self, code: np.ndarray, sw: np.ndarray, schedules: Mapping[str, list[tuple[int, int]]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each fine row's coarse sub-window under its query's schedule: start and end (in b)."""
        starts = sw.astype(np.int64, copy=True)
        ends = starts + 1
        for c, prefixed in enumerate(self._names):
            schedule = schedules[prefixed.removeprefix(SPEC)]
            if schedule == [(FROM_START, 1)]:
                continue
            mine = code == c
            start, m = coarse_starts(schedule, sw[mine])
            starts[mine] = start
            ends[mine] = start + m
        return starts, ends

    def _pruned(
        self, schedules: Mapping[str, list[tuple[int, int]]], watermark_ms: int | None
    ) -> dict[str, list[list[int]]]:
        """The schedules to save: what maps the fine sub-windows not yet closed. Every fine
        index before the first open coarse sub-window is in a closed one (late) under the pruned
        schedule too, its first entry's factor dividing that sub-window's start."""
        out = {}
        for name, schedule in schedules.items():
            if watermark_ms is not None and len(schedule) > 1:
                b_us = self.params[name].b // _NS_PER_US
                first_open = (watermark_ms * 1000) // b_us
                oldest = int(coarse_starts(schedule, np.array([first_open]))[0][0])
                schedule = pruned(schedule, oldest)
            out[name] = [[s, m] for s, m in schedule]
        return out

    def _kept(
        self, saved: dict[str, list[list[float]]], fresh: pa.Table, wm_before: int | None, max_us: int | None
    ) -> dict[str, list[tuple[int, int, float]]]:
        """Per query, the sub-window ranges sampled so far and their fractions, with this batch's.

        A batch at fraction x marks every sub-window its records could reach — from the first
        one open before it (its end past the watermark) to the one of its newest event time —
        not only those with a kept record: a sub-window whose few records were all dropped is
        sampled too. Without a watermark yet (the first batch), from the oldest kept record's.
        Ranges, not sub-windows: a batch after a gap in event time spans millions of them.
        """
        keeps = {
            name: [(int(lo), int(hi), float(x)) for lo, hi, x in ranges] for name, ranges in saved.items()
        }
        if (not self.keep and self.intake >= 1) or max_us is None:
            return keeps
        code = fresh["code"].to_numpy()
        sw = fresh["sw"].to_numpy()
        for c, prefixed in enumerate(self._names):
            name = prefixed.removeprefix(SPEC)
            x = self.keep.get(name, 1.0) * self.intake
            if x >= 1:
                continue
            b_us = int(self._b_us[c])
            hi = max_us // b_us
            if wm_before is not None:
                lo = (wm_before * 1000) // b_us
            else:
                mine = sw[code == c]
                lo = int(mine.min()) if len(mine) else hi
            keeps.setdefault(name, []).append((lo, hi, x))
        return keeps

    def _codes(self, query: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Each row's query code (its stage-1 name's position in ``_names``), as int64."""
        codes = pc.index_in(query, value_set=pa.array(self._names, pa.string()))
        if codes.null_count:
            raise ValueError(f"counts: rows of queries other than {self._names}")
        return np.asarray(codes.to_numpy(zero_copy_only=False), np.int64)

    def _drop_open(self, keep: set[str | None]) -> None:
        """Delete the open-count stores no kept state version names."""
        for path in self.store.glob("open-*"):
            if path.name not in keep:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def _closed_top_k(closed: pa.Table, k: np.ndarray) -> Iterator[tuple[int, int, dict[str, int], int]]:
    """Per closed (query code, sub-window), in order: its top-k counts (convention 1) and total.

    ``closed`` has columns ``code, sw, key, count``; ``k[code]`` is the query's k. Sub-windows,
    ranks and totals are found in numpy and only the top-k rows become Python objects: a day of
    one-second sub-windows is millions of rows, of which ~k per sub-window are used.
    """
    if not closed.num_rows:
        return
    ordered = closed.sort_by(
        [("code", "ascending"), ("sw", "ascending"), ("count", "descending"), ("key", "ascending")]
    )
    code = ordered["code"].to_numpy()
    sw = ordered["sw"].to_numpy()
    count = ordered["count"].to_numpy()
    n = len(sw)
    first = np.ones(n, bool)  # the first (largest) row of each (query, sub-window)
    first[1:] = (sw[1:] != sw[:-1]) | (code[1:] != code[:-1])
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    top = np.arange(n) - starts[group] < k[code]  # the row's rank in its sub-window is below k
    keys = ordered["key"].filter(pa.array(top)).to_pylist()
    counts = count[top].tolist()
    # Where each sub-window's top rows end in keys/counts.
    ends = np.cumsum(np.bincount(group[top], minlength=len(starts))).tolist()
    totals = np.add.reduceat(count, starts).tolist()
    lo = 0
    for c, index, total, hi in zip(code[starts].tolist(), sw[starts].tolist(), totals, ends, strict=True):
        yield c, index, dict(zip(keys[lo:hi], counts[lo:hi], strict=True)), total
        lo = hi


def _sub_window_ns(made: list[tuple[Any, ...]], schedule: list[tuple[int, int]], b: int) -> list[int]:
    """The length (ns) of each report's closing sub-window: the one ending at the row's end."""
    if len(schedule) == 1:
        return [schedule[0][1] * b] * len(made)
    last = np.array([row[0] // b - 1 for row in made], np.int64)
    return (coarse_starts(schedule, last)[1] * b).tolist()


def _with_precision(
    made: list[tuple[Any, ...]],
    keeps: list[tuple[int, int, float]],
    params: QueryParams,
    *,
    interval: bool = True,
) -> list[tuple[Any, ...]]:
    """Report rows with ``keep, count_low, count_high``: the window's smallest sub-window fraction
    and the count's interval (``analytics.sampling.count_interval``; itself when exact). A row's
    window is the span it held (its last element, ``TopKMerge``). ``interval=False`` (a query
    weighted by bytes, sampled only by the intake box): no interval — a byte count's needs the
    packets' sizes, which the sub-window lists do not keep."""
    out = []
    for row in made:
        closing = row[0] // params.b - 1
        first = closing - row[6] // params.b + 1
        x = min((r[2] for r in keeps if r[0] <= closing and r[1] >= first), default=1.0)
        count = row[4]
        if count is None:
            out.append((*row, x, None, None))
        elif x >= 1:
            out.append((*row, x, count, count))
        elif not interval:
            out.append((*row, x, None, None))
        else:
            # Alg. 6's own error, beside the sample's: the count sums the key's sub-window counts
            # where it made the top-k list; where it did not, its count was at most that list's
            # k-th, so the window's (sampled, scaled) count lies in [count, count + delta]
            # (Golab §6.2.2); the interval is the sample's around that range.
            low = count_interval(count, x)[0]
            high = count_interval(count + (row[1] or 0), x)[1]
            out.append((*row, x, math.floor(low), math.ceil(high)))
    return out


def _result_table(names: list[str], columns: list[list[Any]]) -> pa.Table:
    """Query names and the ``(window_end_ns, delta, rank, key, count, total, window_ns, keep,
    count_low, count_high, sub_window_ns)`` columns: ``RESULT_SCHEMA``."""
    ends_us = np.asarray(columns[0], np.int64) // _NS_PER_US
    n = len(names)
    window_s = np.asarray(columns[6], np.float64) / 1e9 if n else np.zeros(0)
    keep = columns[7] if len(columns) > 7 else [1.0] * n
    low = columns[8] if len(columns) > 8 else columns[4]
    high = columns[9] if len(columns) > 9 else columns[4]
    sub_s = np.asarray(columns[10], np.float64) / 1e9 if len(columns) > 10 and n else np.full(n, np.nan)
    return pa.table(
        [
            pa.array(names, pa.string()),
            pa.array(ends_us, pa.timestamp("us", tz="UTC")),
            pa.array(columns[1], pa.int64()),
            pa.array(columns[2], pa.int32()),
            pa.array(columns[3], pa.string()),
            pa.array(columns[4], pa.int64()),
            pa.array(columns[5], pa.int64()),
            pa.array(keep, pa.float64()),
            pa.array(low, pa.int64()),
            pa.array(high, pa.int64()),
            pa.array(window_s, pa.float64()),
            pa.array(sub_s, pa.float64(), from_pandas=True),
        ],
        schema=RESULT_SCHEMA,
    )


def build_topk_batch(cfg: Config, results: Path, checkpoint: Path) -> SlidingTopK:
    """The top-k kind's function on the shared micro-batch."""
    return SlidingTopK(
        cfg.queries.topk,
        results,
        checkpoint,
        watermark_ms=round(cfg.pipeline.watermark_s * 1000),
        windows=window_file(cfg),
        granularity=granularity_file(cfg),
        max_factor=cfg.resources.sub_window_max_factor,
    )
