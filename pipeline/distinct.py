"""Sliding-window distinct counts in Spark: one HLL sketch per (sub-window, group), unioned per slide.

This is Golab's basic interval synopsis (thesis §2.3.4), the streaming side of
``analytics.distinct.SubWindowDistinct`` (conventions: ``docs/distinct.md``). ``SlidingDistinct``
runs the stages on each micro-batch of the shared query (``pipeline.job``):

1. ``items`` and 2. ``sketches``, in the shared pass over the raw batch
   (``pipeline.partials``, :class:`pipeline.partials.DistinctSpec`): per packet and query the
   group text and the counted key text (``analytics.keys.key_text``; rows with a null or empty key
   count nothing, as offline), and per sub-window ``idx = ts div b``, query and group one
   DataSketches ``HLL_8`` sketch of the items, built with pyarrow and the Python DataSketches
   library in the tasks — the bytes Spark's ``hll_sketch_agg(item, lg_k)`` gives for the same
   items (:func:`batch_sketches` is that Spark form, kept as the tests' reference). The sketches
   go to a store beside the checkpoint; a sub-window spanning tasks or micro-batches gets one
   partial sketch from each.
3. ``windows`` (:meth:`SlidingDistinct._segments`, on the driver): the batch moves the watermark
   to its largest event time − the delay, and each window it closes is the union of its group's
   last N/b sub-window sketches, read *settled* (``hll_sketch_estimate(hll_union(sketch,
   sketch))``, whose estimate depends on the registers only). A group's count is the same over a
   *segment* of window ends (until one of its sketches enters or leaves): one row per segment.
   :func:`analytics.sketch_windows.window_segments` computes them: groups whose windows stay in
   DataSketches' coupon mode are counted from their coupons, vectorized (most groups of real
   traffic: a few items per window); the others with two running unions per window. Between
   batches :class:`analytics.sketch_carry.SlidingCoupons` carries what later windows need of the
   closed sub-windows, so a batch reads only the sketches of the sub-windows it closes.
4. ``ranked`` (:func:`rank_segments`, on the driver): per slide and query, the groups ordered by
   distinct count descending, then group text ascending, cut to the query's ``top`` (``top <= 0``:
   all), taken from the segments in rank order without a row per (group, window end).

Why not Spark's streaming aggregations (the first version: ``window(ts, b)`` sketches, then
``hll_union_agg`` over ``window(window_time(sub_window), N, b)``): that copies every sub-window
sketch into the N/b windows holding it, N/b union updates per (sub-window, group), and puts every
sketch and union buffer through the state store; it measured 1.8–2.3× Spark's own sliding
``approx_count_distinct`` on the attack queries, short of the issue's 5× (``docs/performance.md``).
Counting coupons costs one sort of the window's coupons, and the running unions about two
unions per sketch, whatever N/b is; the store holds only the sketches an open window can still
hold. Departure from the thesis, which probes the N/b synopses per window: the same synopses,
counted as coupon sets or united in another grouping, give the same estimates.

A query's window can change at run time (seed 004's window knob, issue 18 item 4: ``netmon tune
--window distinct/NAME=SECONDS`` or the resource manager's window reduction,
``pipeline.window_knobs``): each batch's windows are decided (and saved) before it runs, and the
change is in force from the first window end the batch closes, as
``analytics.distinct.SubWindowDistinct.resize`` offline: a shorter window at once, a longer one
growing by a sub-window per window end from the sketches still held (the expired ones are gone),
complete ``max(w, w')`` after the old window began. Each row's ``window_s`` is the span its window
held. The queries of a chain whose windows (or spans held) differ get a carry each, rebuilt from
the store when they part or meet again; the store is the chain's, as before.

A query's sub-window can change at run time too (seed 004's granularity operator Γ, CKSV
granularity; ``netmon tune --granularity distinct/NAME=SECONDS`` or the resource manager's coarse
step, ``pipeline.window_knobs.GranularityKnobs``), with the top-k kind's schedule and change
instant (``analytics.granularity``; the first instant at or after the batch's first open
sub-window on both grids, saved in the store marker). Stage 1 keeps sketching the finest
sub-window ``b``; directly upstream of the sliding union, stage 3 files every fine sketch of a
coarse sub-window of ``m·b`` (aligned to multiples of ``m·b``) under the coarse sub-window's last
fine one (``_labelled``), so the carry unites them into the coarse sub-window's sketch (exact: a
union of HLL coupons and registers), keeps them pending until it closes, and a window is reported
only where a coarse sub-window closes. The rows say the closing sub-window's length
(``sub_window_s``). Departure from the top-k kind's Γ, which drops at once a coarse sub-window
straddling a window's start: here a window holds the coarse sub-windows that *end* in its last
N, so just after a change to a finer sub-window a window holds up to ``(m_old − 1)·b`` more than
N until the straddling one ends out of it (``window_s`` says so). Filing under the last fine
sub-window lets the carry (``SlidingCoupons``) keep an open coarse sub-window's sketches pending
with the fine late bound; filing under the first would need its own pending store. The stored
sketches stay fine (the store is stage 1's): a rebuilt carry reads them ``max m − 1`` further
back and unites them again.

The sub-window sketches stay in a small store beside the checkpoint (``<checkpoint>/sketches``,
one directory per batch, dropped once no open window needs it) and results are committed per
batch (``pipeline.batch_sink``): a batch that Spark runs again after a crash rewrites the same
rows, so a restart from the checkpoint neither loses nor repeats one. Queries that share (N, b,
lg_k) share one chain (one pass of stage 3); each other combination adds a chain.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from decimal import Decimal
from itertools import groupby
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analytics import distinct_queries
from analytics.distinct import hll_interval
from analytics.granularity import FROM_START, coarse_starts, plan_change, pruned
from analytics.keys import parse_key
from analytics.sampling import count_interval
from analytics.sketch_carry import GroupIds, SlidingCoupons
from netmon.config import Config, DistinctQuery
from pipeline.batch_sink import BatchOutput, commit_batch, write_table
from pipeline.partials import INTAKE, DistinctSpec, merge_partials, partial_counts
from pipeline.window_knobs import GranularityKnobs, WindowKnobs, granularity_file, window_file

__all__ = [
    "COLUMNS",
    "Chain",
    "SlidingDistinct",
    "build_distinct",
    "build_distinct_batch",
    "build_distinct_outputs",
    "batch_sketches",
    "chains_of",
    "key_text",
    "offline_query",
    "ranked",
    "rank_segments",
    "spark_interval",
]

#: The output columns, in order.
COLUMNS = ("query", "window_end", "group", "distinct", "rank")


def key_text(fields: Sequence[str]) -> Column:
    """The canonical key text (``analytics.keys.key_text``): null if any field is null."""
    parts = [F.col(f).cast("string") for f in fields]
    # concat is null when any part is: the same text as when(all present, concat_ws(",", ...)),
    # in one expression (about 30 % cheaper for the 5-tuple).
    joined = [x for i, part in enumerate(parts) for x in ((F.lit(","), part) if i else (part,))]
    return joined[0] if len(joined) == 1 else F.concat(*joined)


def offline_query(q: DistinctQuery) -> distinct_queries.DistinctQuery:
    """The offline form of a configured query (validated: known fields, N a multiple of b)."""
    return distinct_queries.DistinctQuery(
        name=q.name,
        count=q.count,
        group_by=q.group_by or (),
        window_s=q.window_s,
        sub_window_s=q.sub_window_s,
    )


def _micros(seconds: float, name: str) -> int:
    """A duration in whole microseconds (refused otherwise): ``0.5`` -> ``500000``."""
    micros = Decimal(str(seconds)) * 10**6
    if micros != micros.to_integral_value() or micros <= 0:
        raise ValueError(f"{name}: {seconds!r} s is not a positive whole number of microseconds")
    return int(micros)


def spark_interval(seconds: float, name: str = "seconds") -> str:
    """A duration as Spark interval text in whole microseconds: ``0.5`` -> ``"500000 microseconds"``."""
    return f"{_micros(seconds, name)} microseconds"


def _chain_key(q: DistinctQuery) -> tuple[float, float, int]:
    return (q.window_s, q.sub_window_s, q.lg_k)


def _items(packets: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """``ts, query, group, item, counted``: one row per row of ``packets`` and query.

    ``counted`` is false where the group or the item is null or the item empty: such rows (and
    control rows) move event time but count nothing.
    """
    columns = [
        [
            F.lit(q.name).alias("query"),
            (key_text(parse_key(q.group_by)) if q.group_by else F.lit("")).alias("group"),
            key_text(parse_key(q.count)).alias("item"),
        ]
        for q in queries
    ]
    if len(columns) == 1:
        items = packets.select("ts", *columns[0])
    else:
        # One packet becomes one row per query (a Generate).
        items = packets.select("ts", F.inline(F.array(*[F.struct(*c) for c in columns])))
    # Null keys are skipped, and empty items ignored, as offline.
    return items.withColumn(
        "counted", F.col("group").isNotNull() & F.coalesce(F.col("item") != "", F.lit(False))
    )


class Chain(NamedTuple):
    """Queries sharing (N, b, lg_k): one stage-1 aggregation, one set of sliding unions."""

    label: str
    window_us: int
    sub_window_us: int
    lg_k: int
    queries: tuple[DistinctQuery, ...]

    @property
    def k(self) -> int:
        """N/b: sub-windows per window."""
        return self.window_us // self.sub_window_us

    def last_index(self, watermark_ms: int) -> int:
        """The last sub-window index closed by ``watermark_ms`` (its end <= the watermark, as Spark)."""
        return (watermark_ms * 1000) // self.sub_window_us - 1


def chains_of(queries: Sequence[DistinctQuery]) -> list[Chain]:
    """The queries grouped by (N, b, lg_k), each group validated and labelled."""
    if not queries:
        raise ValueError("queries: no distinct-count query configured")
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise ValueError(f"queries: duplicate query names in {names}")
    for q in queries:
        offline_query(q)
    out = []
    for (window_s, sub_window_s, lg_k), group in groupby(sorted(queries, key=_chain_key), key=_chain_key):
        window_us, sub_us = _micros(window_s, "window_s"), _micros(sub_window_s, "sub_window_s")
        label = f"n{window_us}-b{sub_us}-k{lg_k}"
        out.append(Chain(label, window_us, sub_us, lg_k, tuple(group)))
    return out


def batch_sketches(packets: DataFrame, c: Chain, lo: int) -> DataFrame:
    """Stage 1 on a micro-batch: ``chain, query, group, idx, sketch, items, late, max_us``.

    ``hll_sketch_agg(item, lg_k)`` per sub-window and group of each of the chain's queries;
    ``idx`` = the sub-window's start / b, and ``sketch`` an HLL_8 updatable sketch holding the
    coupons (or registers) ``SubWindowDistinct.synopsis`` holds for the same items. A sub-window
    that spans micro-batches gets a partial sketch from each, which stage 3 unites (union is
    associative), so each packet is still touched once. Items of a sub-window ``<= lo`` (already
    reported) are late: counted in ``late``, not sketched. ``items`` counts what the sketch took;
    rows with ``items = 0`` only carry event time (``max_us``, µs since the epoch: rows that count
    nothing, control rows, late rows all move it).
    """
    idx = F.floor(F.unix_micros("ts") / F.lit(c.sub_window_us)).cast("long")
    rows = _items(packets, c.queries).withColumn("idx", idx)
    fresh = F.col("counted") & (F.col("idx") > F.lit(lo))
    return (
        rows.groupBy("query", "group", "idx")
        .agg(
            F.hll_sketch_agg(F.when(fresh, F.col("item")), c.lg_k).alias("sketch"),
            F.count_if(fresh).alias("items"),
            F.count_if(F.col("counted") & ~fresh).alias("late"),
            F.max(F.unix_micros("ts")).alias("max_us"),
        )
        .select(F.lit(c.label).alias("chain"), "query", "group", "idx", "sketch", "items", "late", "max_us")
    )


def _find(nxt: dict[int, int], j: int) -> int:
    """The first window end at or after ``j`` with room (path halving over the full ones)."""
    while j in nxt:
        after = nxt[j]
        if after in nxt:
            nxt[j] = nxt[after]
        j = after
    return j


def _fill(starts: list[int], stops: list[int], top: int) -> tuple[list[int], list[int], list[int]]:
    """Segments in rank order -> the (segment, window end, rank) they take; ``top <= 0``: all.

    Sparse: window ends are only kept once a segment reaches them (a batch may span years of
    event time, most of it without a window).
    """
    filled: dict[int, int] = {}
    nxt: dict[int, int] = {}  # a full window end -> a later candidate
    rows: list[int] = []
    ends: list[int] = []
    ranks: list[int] = []
    for row, (start, stop) in enumerate(zip(starts, stops, strict=True)):
        j = _find(nxt, start)
        while j <= stop:
            rank = filled[j] = filled.get(j, 0) + 1
            rows.append(row)
            ends.append(j)
            ranks.append(rank)
            if 0 < top <= rank:
                nxt[j] = j + 1
            j = _find(nxt, j + 1)
    return rows, ends, ranks


def rank_segments(segments: pa.Table, tops: dict[str, int]) -> pa.Table:
    """Stage 4 on the driver: ``query, i, group, distinct, rank`` from stage 3's segments.

    Per query and window end ``i``, the groups by distinct count descending, then group text
    ascending, cut to the query's top (``<= 0``: all) — what :func:`ranked` computes, without a row
    per (group, window end) first: a group's count is constant over its segment ``[start, stop]``,
    so the segments are taken in rank order and each fills the window ends it covers that still
    have room (a window end with ``top`` groups is skipped whole). Ties are broken as in
    :func:`ranked` (the sort is stable on the group).
    """
    out: list[pa.Table] = []
    for query in pc.unique(segments["query"]).to_pylist() if segments.num_rows else []:
        mine = segments.filter(pc.equal(segments["query"], query))
        order = pc.sort_indices(mine, sort_keys=[("distinct", "descending"), ("group", "ascending")])
        mine = mine.take(order)
        starts = mine["start"].to_numpy()
        stops = mine["stop"].to_numpy()
        picked_rows, picked_ends, picked_ranks = _fill(starts.tolist(), stops.tolist(), tops.get(query, 0))
        rows = mine.take(pa.array(picked_rows, pa.int64()))
        out.append(
            pa.table(
                {
                    "query": rows["query"],
                    "i": pa.array(picked_ends, pa.int64()),
                    "group": rows["group"],
                    "distinct": rows["distinct"],
                    "rank": pa.array(picked_ranks, pa.int32()),
                }
            )
        )
    if not out:
        return pa.table(
            {
                "query": pa.array([], pa.string()),
                "i": pa.array([], pa.int64()),
                "group": pa.array([], pa.string()),
                "distinct": pa.array([], pa.int64()),
                "rank": pa.array([], pa.int32()),
            }
        )
    return pa.concat_tables(out)


def ranked(counts: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """Stage 4 on a batch: ``query, window_end, group, distinct, rank``, each query's ``top`` per slide."""
    order = Window.partitionBy("query", "window_end").orderBy(F.desc("distinct"), F.asc("group"))
    top = F.create_map(*[x for q in queries for x in (F.lit(q.name), F.lit(q.top))])[F.col("query")]
    with_rank = counts.withColumn("rank", F.row_number().over(order).cast("int"))
    return with_rank.where((top <= 0) | (F.col("rank") <= top)).select(*COLUMNS)


log = logging.getLogger(__name__)

_STORE_ARROW = pa.schema(
    [
        ("chain", pa.string()),
        ("query", pa.string()),
        ("group", pa.string()),
        ("idx", pa.int64()),
        ("sketch", pa.binary()),
    ]
)
#: Stage-1 spec names of the distinct queries: ``distinct/<query name>``.
SPEC_PREFIX = "distinct/"


def spec_name(query: str) -> str:
    """The stage-1 spec name of a distinct-count query."""
    return SPEC_PREFIX + query


class SlidingDistinct:
    """The ``foreachBatch`` function of the distinct-count query: stages 1, 3 and 4 on each micro-batch.

    Per batch: sketch the batch's items per (sub-window, group) into the store, advance the
    watermark to the batch's largest event time − ``watermark_ms`` (never back), compute every
    window it closes (ends after the previous batch's watermark, up to this one's), commit them,
    and drop the store's batches no later window needs. A row whose sub-window an earlier batch
    already closed is late: counted in ``late_rows`` and left out, as offline. ``rank = False``
    writes every group of every slide unranked (``query, window_end, group, distinct``).

    Everything a batch computes follows from its input and the store's state *before* it, so a
    batch that Spark runs again after a crash writes the same store entry and the same rows.
    """

    def __init__(
        self,
        chains: Sequence[Chain],
        results: Path,
        checkpoint: Path,
        *,
        watermark_ms: int,
        rank: bool = True,
        windows: Path | None = None,
        granularity: Path | None = None,
        max_factor: float = 4.0,
    ) -> None:
        self.chains = list(chains)
        self._whole = {c.label: c for c in self.chains}
        #: each batch's windows: the configured ones, or those ``netmon tune --window`` asks for
        #: (``distinct/<name>`` entries of the control file ``windows``), at most the manager's
        queries = [q for c in self.chains for q in c.queries]
        self.knobs = WindowKnobs(queries, windows, Path(checkpoint) / "windows", kind="distinct")
        #: each batch's sub-window factors (Γ): 1, or what ``netmon tune --granularity
        #: distinct/NAME`` (the control file ``granularity``) or the manager's coarse step asks for
        self.grains = GranularityKnobs(
            queries, granularity, Path(checkpoint) / "granularity", max_factor=max_factor, kind="distinct"
        )
        #: each query's Γ schedule in the batch being run (``analytics.granularity``)
        self._grain: dict[str, list[tuple[int, int]]] = {}
        self.results = Path(results)
        self.store = Path(checkpoint) / "sketches"
        self.delay_ms = watermark_ms
        self.rank = rank
        #: late rows skipped by this process's batches
        self.late_rows = 0
        #: sketches held after the last batch, one per (group, sub-window) row of the store's
        #: batches still kept (the ``sys`` rows' ``distinct_state_rows``); None before the first
        self.state_rows: int | None = None
        self._store_rows: dict[int, int] = {}  # a kept store batch's rows (its Parquet footer)
        #: seconds (and sketch rows) of stage 3's parts over this process's batches
        self.timings: dict[str, float] = {}
        # Set by prepare(), before each batch.
        self._prepared = False
        self._before: dict[int, dict] = {}
        self._watermark_ms: int | None = None
        self._lows: dict[str, int] = {c.label: _BEFORE_ALL for c in self.chains}
        #: per chain and set of its queries with one window and span held (all of them unless
        #: their windows changed apart), stage 3's state after the last committed batch (rebuilt
        #: when it is not)
        self._carries: dict[tuple[str, tuple[str, ...]], _Carry] = {}
        #: the drop-box fraction per query in force for the next batch (:meth:`sample`)
        self.keep: dict[str, float] = {}
        #: the intake drop box's fraction in force for the next batch (records, before the decode)
        self.intake = 1.0

    def limit_windows(self, windows: dict[str, float]) -> None:
        """The resource manager's window reduction for the next batch (``distinct/<query>`` ->
        seconds, ``analytics.window_plan.window_key``; the top-k entries are top-k's): each query's
        window is at most this (``WindowKnobs.decide``)."""
        self.knobs.limit(windows)

    def coarsen(self, factors: dict[str, int]) -> None:
        """The resource manager's coarse step for the next batch (``distinct/<query>`` -> m, as
        :meth:`limit_windows`; the top-k entries are top-k's): each query's sub-window is at least
        this coarse (``GranularityKnobs.decide``)."""
        self.grains.floor(factors)

    def sample(self, keep: dict[str, float]) -> None:
        """The fraction of items each query's drop box keeps in the next batch (absent: 1), and
        the intake box's (``INTAKE``).

        Clamped to the smallest fraction the query's ``lg_k`` allows (``pipeline.partials.item_kept``).
        """
        self.intake = float(keep.get(INTAKE, 1.0))
        floors = {q.name: 2.0 ** -(_ADDRESS_BITS - c.lg_k) for c in self.chains for q in c.queries}
        self.keep = {
            name: max(float(x), floors[name]) for name, x in keep.items() if x < 1 and name in floors
        }

    def _stored(self, upto: int) -> dict[int, dict]:
        """Store batches ``<= upto`` that completed: batch id -> their marker."""
        out = {}
        for marker in self.store.glob("batch-*.json"):
            batch = int(marker.stem.removeprefix("batch-"))
            if batch <= upto:
                out[batch] = json.loads(marker.read_text())
        return out

    def prepare(self, batch_id: int, spark: SparkSession) -> None:
        """Read the store's state before ``batch_id``: the late bound of each chain (``specs``).

        ``spark`` is the batch kinds' common hook signature (``pipeline.job``); stage 3 needs none.
        """
        self._prepared = True
        self._before = self._stored(batch_id - 1)
        previous = self._before[max(self._before)] if self._before else {"watermark_ms": None}
        self._watermark_ms = previous["watermark_ms"]
        self._lows = {c.label: _last(c, self._watermark_ms) for c in self.chains}

    @property
    def specs(self) -> tuple[DistinctSpec, ...]:
        """Stage 1 of every query (``pipeline.partials``), late bounds as of the last :meth:`prepare`."""
        return tuple(
            DistinctSpec(
                name=spec_name(q.name),
                group=tuple(parse_key(q.group_by)) if q.group_by else (),
                item=tuple(parse_key(q.count)),
                b_us=c.sub_window_us,
                lg_k=c.lg_k,
                lo=self._lows[c.label],
                keep=self.keep.get(q.name, 1.0),
            )
            for c in self.chains
            for q in c.queries
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """The kind on its own query: ``df`` holds decoded rows, control rows kept (``build_distinct``)."""
        self.prepare(batch_id, df.sparkSession)
        partials, max_us = merge_partials(partial_counts(df, self.specs))
        self.apply(partials, max_us, batch_id)

    def apply(self, partials: pa.Table, max_us: int | None, batch_id: int) -> None:
        """Stages 2-4 of one batch from its stage-1 partials (``pipeline.partials``, merged).

        The sketches go to the store (one Parquet file per batch), the watermark moves to the
        batch's largest event time − the delay (never back), and every window it closes is
        computed from the store and committed.
        """
        lows = self._lows
        if not self._prepared:
            raise RuntimeError("SlidingDistinct.apply before prepare()")
        # Saved before the batch: a batch run again applies the same windows,
        windows = self.knobs.decide(batch_id)
        spans = self._spans(windows, batch_id)
        # and the same sub-windows (Γ), from the same instants.
        self._grain = self._schedules(self.grains.decide(batch_id, windows), batch_id)
        started = time.perf_counter()
        chain_of = {spec_name(q.name): c.label for c in self.chains for q in c.queries}
        names = pc.replace_substring(partials["query"], SPEC_PREFIX, "", max_replacements=1)
        held = pc.is_valid(partials["sketch"])
        sketches = partials.filter(held)
        store = pa.table(
            {
                "chain": pa.array([chain_of[q] for q in sketches["query"].to_pylist()], pa.string()),
                "query": names.filter(held),
                "group": sketches["key"],
                "idx": sketches["sw"],
                "sketch": sketches["sketch"],
            },
            schema=_STORE_ARROW,
        )
        self.store.mkdir(parents=True, exist_ok=True)
        target = self.store / f"batch-{batch_id:06d}"
        tmp = self.store / f".batch-{batch_id:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        pq.write_table(store, tmp / "part-0.parquet")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        stored_s = time.perf_counter() - started
        first = {spec_name(q.name) for q in self.chains[0].queries}
        late_rows = sum(
            int(r["weight"] or 0)
            for r in partials.filter(pc.invert(held)).to_pylist()
            if r["sw"] is None and r["query"] in first
        )
        max_idx: dict[str, int | None] = {}
        for c in self.chains:
            mine = store.filter(pc.equal(store["chain"], c.label))["idx"]
            max_idx[c.label] = pc.max(mine).as_py() if len(mine) else None
        sketched = time.perf_counter()
        watermark_ms = self._watermark_ms
        if max_us is not None:
            # Spark's rule: the largest event time in whole milliseconds, minus the delay.
            moved = max_us // 1000 - self.delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
        marker: dict[str, Any] = {"watermark_ms": watermark_ms, "max_idx": max_idx, "late": late_rows}
        # Each query's span held and window (sub-windows) after the batch, and its chain: the
        # next batch's start (a chain of another configured window starts afresh).
        marker["windows"] = {
            q.name: [
                min(spans[q.name].held + max(_last(c, watermark_ms) - lows[c.label], 0), spans[q.name].k),
                spans[q.name].k,
                c.label,
            ]
            for c in self.chains
            for q in c.queries
        }
        # Each query's Γ schedule: the next batch's start (what maps the sub-windows still needed)
        marker["schedules"] = self._kept_schedules(watermark_ms, marker["windows"])
        live = any(
            mark[2] < 1
            for m in self._before.values()
            for marks in m.get("keeps", {}).values()
            for mark in marks
        )
        if (self.keep or self.intake < 1 or live) and max_us is not None:
            # The sub-windows this batch's records could reach, from the first one still open to
            # that of its newest event time, and its fraction (1: none), for every query while a
            # drop box is in use or its marks are live: a window's fractions come from its marks.
            marks: dict[str, list[list[float]]] = {}
            for c in self.chains:
                hi = max_us // c.sub_window_us
                # Sampling starts: the open sub-windows earlier batches reached hold unsampled items.
                before = [m["max_idx"].get(c.label) for m in self._before.values()]
                reached = max([i for i in before if i is not None], default=None)
                for q in c.queries:
                    # [first, last, x, x_hi]: an item is kept with a probability between x (its
                    # box's fraction times the intake's, for an item seen once) and x_hi (its
                    # box's: an item seen many times all but surely passes the intake)
                    x_hi = self.keep.get(q.name, 1.0)
                    marks[q.name] = [[lows[c.label] + 1, hi, x_hi * self.intake, x_hi]]
                    if not live and reached is not None and reached > lows[c.label]:
                        marks[q.name].append([lows[c.label] + 1, reached, 1.0])
            marker["keeps"] = marks
        # Written whole or not at all: a crash here leaves the batch to be run again.
        tmp_marker = self.store / f".batch-{batch_id:06d}.json.tmp"
        tmp_marker.write_text(json.dumps(marker))
        tmp_marker.replace(self.store / f"batch-{batch_id:06d}.json")
        self.late_rows += late_rows
        stored = self._before | {batch_id: marker}
        segments = []
        carries: dict[tuple[str, tuple[str, ...]], _Carry] = {}
        for part in self._parts(spans):
            c = part.chain
            key = (c.label, tuple(q.name for q in c.queries))
            lo, hi = lows[c.label], _last(c, watermark_ms)
            carry = self._carries.pop(key, None)
            if carry is not None and (carry.coupons.lo, carry.coupons.held, carry.coupons.k) != (
                lo,
                part.before.held,
                part.before.k,
            ):
                carry = None
            if carry is not None:
                carry.coupons.resize(c.k)  # the batch's window, from window end lo + 1 on
            if hi <= lo:
                if carry is not None:
                    carries[key] = carry
                continue
            if carry is None:
                carry = self._rebuilt(c, stored, lo, part.held)
            found = self._segments(c, carry, self._paths(c, stored, lo), lo, hi)
            carries[key] = carry
            sub_us = pa.array(np.full(found.num_rows, c.sub_window_us, np.int64))
            segments.append(found.append_column("sub_us", sub_us))
        found_all = pa.concat_tables(segments) if segments else None
        rows = None
        if found_all is not None and found_all.num_rows:
            queries = [q for c in self.chains for q in c.queries]
            tops = {q.name: (q.top if self.rank else 0) for q in queries}
            ranking = time.perf_counter()
            rows = rank_segments(found_all.drop_columns(["sub_us"]), tops)
            self.timings["rank_s"] = self.timings.get("rank_s", 0.0) + time.perf_counter() - ranking
            self.timings["segments"] = self.timings.get("segments", 0) + found_all.num_rows
            if any(s != [(FROM_START, 1)] for s in self._grain.values()):
                # Γ: a window is reported where a coarse sub-window closes, not at every fine end
                rows = rows.filter(pa.array(_coarse_ends(rows, self._grain)))
        if rows is not None and rows.num_rows:
            sub_of = {q.name: c.sub_window_us for c in self.chains for q in c.queries}
            ends_us = pc.multiply(
                pc.add(rows["i"], 1), pa.array([sub_of[q] for q in rows["query"].to_pylist()])
            )
            held = _held_of(rows, spans, {q.name: lows[c.label] for c in self.chains for q in c.queries})
            # Γ: from the start of the coarse sub-window holding the window's first fine one
            held, m = _coarse_held(rows, held, self._grain)
            lg_k = {q.name: c.lg_k for c in self.chains for q in c.queries}
            distinct, keep, low, high = _precision(rows, stored, held, lg_k)
            window_s = pa.array(held * _column(rows, sub_of) / 1e6, pa.float64())
            table = pa.table(
                {
                    "query": rows["query"],
                    "window_end": pc.cast(ends_us, pa.timestamp("us", tz="UTC")),
                    "group": rows["group"],
                    "distinct": distinct,
                    **({"rank": rows["rank"]} if self.rank else {}),
                    "keep": keep,
                    "distinct_low": low,
                    "distinct_high": high,
                    # the span the window held (issue 18 item 4): window_s, less while a window
                    # changed at run time grows
                    "window_s": window_s,
                    # the report's closing sub-window (seed 004's granularity knob): sub_window_s,
                    # or a multiple after netmon tune --granularity distinct/NAME
                    "sub_window_s": pa.array(m * _column(rows, sub_of) / 1e6, pa.float64()),
                }
            )
            write_table(table, self.results, batch_id)
        else:
            commit_batch(self.results, batch_id, [])
        # Kept only once the batch committed: a batch that fails, or runs again, rebuilds them.
        self._carries = carries
        self._drop_unneeded(self._before, lows, spans)
        self.state_rows = self._held_rows(batch_id, store.num_rows)
        log.debug(
            "distinct batch",
            extra={
                "batch": batch_id,
                **{k: round(v, 3) for k, v in self.timings.items()},
                "store_write_s": round(stored_s, 3),
                "windows_s": round(time.perf_counter() - sketched, 3),
                "store_batches": len(stored),
                "watermark_ms": watermark_ms,
                "late": late_rows,
            },
        )

    def _spans(self, windows: dict[str, int], batch_id: int) -> dict[str, _Span]:
        """Each query's window in this batch (``windows``: ns, ``WindowKnobs.decide``), from its
        state after the previous batch (its store marker; the configured window before any)."""
        previous = self._before[max(self._before)] if self._before else {}
        saved = previous.get("windows", {})
        out = {}
        for c in self.chains:
            for q in c.queries:
                held, k, label = saved.get(q.name, (c.k, c.k, c.label))
                if label != c.label:  # the configuration changed the chain: its store is new
                    held, k = c.k, c.k
                new = windows[q.name] // (c.sub_window_us * 1000)
                if new != k:
                    # Seed 004's window knob at the batch boundary: in force from the first window
                    # end this batch closes (a shorter window at once, a longer one growing).
                    log.info(
                        "window change",
                        extra={
                            "query": q.name,
                            "batch": batch_id,
                            "from_s": k * c.sub_window_us / 1e6,
                            "to_s": new * c.sub_window_us / 1e6,
                            "from_sub_window": self._lows[c.label] + 1,
                        },
                    )
                out[q.name] = _Span(_Window(int(held), int(k)), min(int(held), new), new)
        return out

    def _schedules(self, factors: dict[str, int], batch_id: int) -> dict[str, list[tuple[int, int]]]:
        """Each query's Γ schedule in this batch (``analytics.granularity``), from its state
        after the previous batch (its store marker) and the batch's factors (``GranularityKnobs``).

        As the top-k kind's (``SlidingTopK._schedules``): a query with nothing closed yet takes
        its factor from the start; otherwise a change takes effect at the first fine index at or
        after the first fine sub-window not yet closed that is a multiple of both sub-windows
        (``plan_change``). A marker written before Γ: every sub-window so far one ``b``.
        """
        previous = self._before[max(self._before)] if self._before else {}
        saved = previous.get("schedules", {})
        known = previous.get("windows", {})
        out: dict[str, list[tuple[int, int]]] = {}
        for c in self.chains:
            first_open = self._lows[c.label] + 1
            for q in c.queries:
                m = factors.get(q.name, 1)
                fresh = self._watermark_ms is None or known.get(q.name, (0, 0, None))[2] != c.label
                old = [(int(s), int(x)) for s, x in saved.get(q.name, [])] or [(FROM_START, 1)]
                if fresh:  # nothing of its chain closed yet: from the start
                    at = None if old == [(FROM_START, m)] else FROM_START
                    schedule = [(FROM_START, m)]
                else:
                    at, schedule = plan_change(old, first_open, m)
                if at is not None:
                    # Γ (seed 004's granularity knob): in force from `at`, the first instant at
                    # or after this batch's first open sub-window on both the old and the new grid.
                    log.info(
                        "granularity change",
                        extra={
                            "query": q.name,
                            "batch": batch_id,
                            "to_s": m * c.sub_window_us / 1e6,
                            "at_sub_window": at,
                        },
                    )
                out[q.name] = schedule
        return out

    def _kept_schedules(
        self, watermark_ms: int | None, windows: dict[str, list[Any]]
    ) -> dict[str, list[list[int]]]:
        """The schedules to save: what maps the fine sub-windows a later batch may still read
        (from the first one a rebuilt carry reads, ``_rebuilt``, on)."""
        out = {}
        for c in self.chains:
            last = _last(c, watermark_ms)
            for q in c.queries:
                schedule = self._grain[q.name]
                if last > _BEFORE_ALL and len(schedule) > 1:
                    schedule = pruned(schedule, last - int(windows[q.name][0]) - self._slack(c))
                out[q.name] = [[s, m] for s, m in schedule]
        return out

    def _slack(self, c: Chain) -> int:
        """How much further back than a window's span a rebuilt carry reads: ``max m − 1`` over the
        chain's schedules (the fine sub-windows of a coarse one straddling the span's start)."""
        return (
            max((m for q in c.queries for _, m in self._grain.get(q.name, [(FROM_START, 1)])), default=1) - 1
        )

    def _labelled(self, sketches: pa.Table) -> np.ndarray:
        """Each store row's sub-window for stage 3: its own, or under Γ the last fine sub-window
        of the coarse one holding it (the coarse sub-window's sketches are united there; the
        carry keeps them pending until it closes, and a window holds it while it ends in it)."""
        idx = np.asarray(sketches["idx"].to_numpy(), np.int64).copy()
        for name, schedule in self._grain.items():
            if schedule == [(FROM_START, 1)] or not len(idx):
                continue
            mine = np.asarray(pc.equal(sketches["query"], name).to_numpy(zero_copy_only=False), bool)
            if mine.any():
                start, m = coarse_starts(schedule, idx[mine])
                idx[mine] = start + m - 1
        return idx

    def _parts(self, spans: dict[str, _Span]) -> list[_Part]:
        """The chains cut where their queries' windows or spans held differ (one part each
        otherwise: the configured chains)."""
        out = []
        for c in self.chains:
            by_span: dict[tuple[int, int, _Window], list[DistinctQuery]] = {}
            for q in c.queries:
                span = spans[q.name]
                by_span.setdefault((span.held, span.k, span.before), []).append(q)
            for (held, k, before), queries in by_span.items():
                part = c._replace(window_us=k * c.sub_window_us, queries=tuple(queries))
                out.append(_Part(part, before, held))
        return out

    def _paths(self, c: Chain, stored: dict[int, dict], after: int) -> list[str]:
        """The store batches holding one of ``c``'s sub-windows after ``after``."""
        return [
            str(self.store / f"batch-{b:06d}")
            for b, m in sorted(stored.items())
            if m["max_idx"].get(c.label) is not None and m["max_idx"][c.label] > after
        ]

    def _read(self, c: Chain, paths: list[str], lo: int, hi: int) -> pa.Table:
        """``c``'s stored sketches of sub-windows ``lo < idx <= hi``."""
        if not paths:
            return _STORE_ARROW.empty_table()
        stored = pa.concat_tables([pq.read_table(p, schema=_STORE_ARROW) for p in paths])
        keep = pc.and_(
            pc.equal(stored["chain"], c.label),
            pc.and_(pc.greater(stored["idx"], lo), pc.less_equal(stored["idx"], hi)),
        )
        if len(c.queries) < len(self._whole[c.label].queries):  # a part of the chain (_parts)
            names = pa.array([q.name for q in c.queries], pa.string())
            keep = pc.and_(keep, pc.is_in(stored["query"], value_set=names))
        return stored.filter(keep)

    def _feed(self, c: Chain, carry: _Carry, sketches: pa.Table, after: int | None = None) -> None:
        """Give ``sketches`` (store rows) to the carry, their (query, group) as stable ids, each
        under its sub-window for stage 3 (:meth:`_labelled`); ``after``: only those filed after it."""
        idx = self._labelled(sketches)
        if after is not None and len(idx) and not (idx > after).all():
            sketches = sketches.filter(pa.array(idx > after))
            idx = idx[idx > after]
        if not sketches.num_rows:
            return
        names = pa.array([q.name for q in c.queries], pa.string())
        # "<query's position>\0<group>": the digits hold no NUL, so the key names one pair.
        position = pc.cast(pc.index_in(sketches["query"], value_set=names), pa.string())
        key = pc.binary_join_element_wise(position, sketches["group"], "\x00")
        ids = carry.ids.ids(key, sketches.select(["query", "group"]))
        carry.coupons.update(ids, idx, sketches["sketch"].combine_chunks())

    def _rebuilt(self, c: Chain, stored: dict[int, dict], lo: int, held: int) -> _Carry:
        """The carry at ``lo`` from the store: the sketches of the ``held`` sub-windows window
        ``lo`` holds, ``lo - held < idx <= lo`` (``held = k`` unless a window grows).

        On a process's first batch, after a batch that failed or runs again, and when a chain's
        queries part or meet (their windows changed): whatever the carry held, it is a function of
        those sketches, which no later batch changes. Under Γ the sketches are filed under their
        coarse sub-window's last fine one (:meth:`_labelled`): read from ``max m − 1`` further
        back, those filed in the span are held and those filed after ``lo`` wait (the coarse
        sub-window still open), as in the carry that went on.
        """
        started = time.perf_counter()
        carry = _Carry(SlidingCoupons(c.k, c.lg_k, lo - held, held=held), GroupIds())
        if lo > _BEFORE_ALL:
            first = lo - held - self._slack(c)
            self._feed(c, carry, self._read(c, self._paths(c, stored, first), first, lo), after=lo - held)
            carry.coupons.seek(lo, answers=False)
        carry.coupons.lo = lo
        carry.coupons.held = held
        self.timings["rebuild_s"] = self.timings.get("rebuild_s", 0.0) + time.perf_counter() - started
        return carry

    def _segments(self, c: Chain, carry: _Carry, paths: list[str], lo: int, hi: int) -> pa.Table:
        """Stage 3 of one chain: ``query, group, start, stop, distinct`` for window ends ``lo < i <= hi``.

        On the driver, from the batch's closed sub-windows' sketches and what the carry kept of the
        earlier ones (:class:`analytics.sketch_carry.SlidingCoupons`): groups whose windows stay in
        coupon mode are counted from their coupons, vectorized; the others are united with two
        running unions. No Spark job, and a batch's cost follows the sub-windows it closes, not the
        window's length.
        """
        started = time.perf_counter()
        new = self._read(c, paths, lo, hi)
        self._feed(c, carry, new)
        group, start, stop, distinct = carry.coupons.seek(hi)
        labels = (
            carry.ids.labels_of(group)
            if len(group)
            else _STORE_ARROW.empty_table().select(["query", "group"])
        )
        live = carry.coupons.groups
        if len(carry.ids) > 2 * len(live) + 4096:  # drop the groups no window holds any more
            carry.coupons.renumber(live)
            carry.ids.keep(live)
        self.timings["windows_s"] = self.timings.get("windows_s", 0.0) + time.perf_counter() - started
        self.timings["sketches"] = self.timings.get("sketches", 0) + new.num_rows
        self.timings["carried"] = len(carry.coupons.keys)
        return pa.table(
            {
                "query": labels["query"],
                "group": labels["group"],
                "start": pa.array(start, pa.int64()),
                "stop": pa.array(stop, pa.int64()),
                "distinct": pa.array(distinct, pa.int64()),
            }
        )

    def _held_rows(self, batch_id: int, rows: int) -> int:
        """The sketch rows of every store batch still on disk, this one's ``rows`` included."""
        self._store_rows[batch_id] = rows
        held = 0
        for b in sorted(self._before) + [batch_id]:
            path = self.store / f"batch-{b:06d}" / "part-0.parquet"
            if b not in self._store_rows:
                try:  # written by an earlier process: its footer says
                    self._store_rows[b] = pq.read_metadata(path).num_rows
                except OSError:
                    continue
            if path.exists():
                held += self._store_rows[b]
        self._store_rows = {b: n for b, n in self._store_rows.items() if b in self._before or b == batch_id}
        return held

    def _drop_unneeded(self, before: dict[int, dict], lows: dict[str, int], spans: dict[str, _Span]) -> None:
        """Delete store batches older than the previous one whose sketches no window can still hold.

        This batch read sub-windows ``> lo - held`` (``held``: what window ``lo`` held, ``k``
        unless a window grows); later batches read from further on, whatever their windows (a
        window's start never moves back). The previous batch's marker stays: a rerun of this
        batch starts from its watermark.
        """
        if not before:
            return
        latest = max(before)
        k = {name: span.before.held for name, span in spans.items()}
        # (under Γ a rebuilt carry reads max m − 1 further back: _rebuilt)
        reach = {c.label: max(k[q.name] for q in c.queries) + self._slack(c) for c in self.chains}
        low = {q.name: lows[c.label] for c in self.chains for q in c.queries}
        for b, marker in before.items():
            top = marker["max_idx"]
            needed = any(
                top.get(c.label) is not None and top[c.label] > lows[c.label] - reach[c.label]
                for c in self.chains
            ) or any(  # its drop-box marks still reach a window to come
                name in k and hi > low[name] - k[name]
                for name, ranges in marker.get("keeps", {}).items()
                for _, hi, *_ in ranges
            )
            if b < latest and not needed:
                shutil.rmtree(self.store / f"batch-{b:06d}", ignore_errors=True)
                (self.store / f"batch-{b:06d}.json").unlink(missing_ok=True)


_BEFORE_ALL = -(2**62)
#: a coupon's address bits (``pipeline.partials.item_kept``)
_ADDRESS_BITS = 26


def _sketch_bounds(
    queries: pa.ChunkedArray, counts: np.ndarray, lg_k: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's interval of its sketch's count (``analytics.distinct.hll_interval``), vectorized."""
    low = np.empty(len(counts), np.int64)
    high = np.empty(len(counts), np.int64)
    names = list(lg_k)
    at = np.asarray(pc.index_in(queries, value_set=pa.array(names, pa.string())).to_numpy())
    lgs = np.asarray([lg_k[name] for name in names], np.int64)[at]
    for lg in np.unique(lgs):
        mine = lgs == lg
        low[mine], high[mine] = hll_interval(counts[mine], int(lg))
    return low, high


def _precision(
    rows: pa.Table, stored: dict[int, dict], held: np.ndarray, lg_k: dict[str, int]
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """Each row's count scaled for its window's drop boxes, the fraction, and the interval.

    The interval states two errors, the sketch's own and the drop boxes':

    * The sketch's: its count n of the (kept) items estimates their number m within
      ``analytics.distinct.hll_interval(n, lg_k)`` = [m_low, m_high] (DataSketches' own bounds
      at 2 standard deviations; a count in coupon mode is its own interval below ~10^4). Without
      a drop box that is the row's interval: the same as the offline report's.
    * The drop boxes': the kept items of a sub-window sampled at x are a Bernoulli(x) sample of
      its items (nested: an item kept at ¼ is kept at ½). Every batch marks the sub-windows it
      could reach with its fraction while sampling is in use (``keeps`` in its store marker). A
      window whose marks range from x_min to x_max — x_max = 1 where a sub-window has no mark
      (its items came before) — holds each of its D items with a probability between them, so m
      lies around D·x with x in that range.
    * The intake drop box's (records, before the decode, at fraction r): an item passes it with a
      probability between r (seen once) and 1 (seen often), independently of its item box, so a
      mark is [first, last, x·r, x] — x_min takes the low end, x_max the high end. The interval
      stays valid (m dominates a Binomial(D, x_min) and is dominated by a Binomial(D, x_max));
      the point estimate between n/x_max and n/x_min is a compromise, not unbiased.

    ``distinct_low`` is the 95 % score interval's low end at x_max for m = m_low, and
    ``distinct_high`` its high end at x_min for m = m_high: the score interval's ends grow with m,
    so the interval holds D whenever m is in [m_low, m_high] and D is in the score interval of m,
    with probability at least 1 − 0.05 − 0.046 (union bound; the two errors are independent, so
    in practice more). Departure: no paper gives this combination; it is the conservative one.
    ``distinct`` is the mean of n/x_max and n/x_min (n/x when one fraction holds the whole window:
    seed 004's adaptation delay, a change is fully in force one window later). ``keep`` is x_min.
    Unsampled rows: ``keep = 1``, ``distinct = n`` and the interval is [m_low, m_high].
    """
    raw = pc.cast(rows["distinct"], pa.int64())
    counts = np.asarray(raw.to_numpy(), np.int64)
    kept_low, kept_high = _sketch_bounds(rows["query"], counts, lg_k)
    marks: dict[str, list[tuple[int, int, float, float]]] = {}
    for marker in stored.values():
        for name, ranges in marker.get("keeps", {}).items():
            # [first, last, x] before the intake box: x_hi = x
            marks.setdefault(name, []).extend(
                (int(r[0]), int(r[1]), float(r[2]), float(r[-1])) for r in ranges
            )
    n = rows.num_rows
    if not any(x < 1 for ranges in marks.values() for _, _, x, _ in ranges):
        return raw, pa.array(np.ones(n)), pa.array(kept_low, pa.int64()), pa.array(kept_high, pa.int64())
    out, keep, low, high = [], [], [], []
    queries, ends = rows["query"].to_pylist(), rows["i"].to_pylist()
    for name, i, width, count, m_low, m_high in zip(
        queries, ends, held.tolist(), counts.tolist(), kept_low.tolist(), kept_high.tolist(), strict=True
    ):
        first = i - width + 1  # the window's first sub-window: it holds `width` (row's window_s)
        hits = sorted(mark for mark in marks.get(name, ()) if mark[0] <= i and mark[1] >= first)
        x_min = min((x for _, _, x, _ in hits), default=1.0)
        x_max = max((x_hi for *_, x_hi in hits), default=1.0)
        covered = first
        for lo, hi, *_ in hits:  # a sub-window no mark reaches holds unsampled items
            if lo > covered:
                break
            covered = max(covered, hi + 1)
        if covered <= i:
            x_max = 1.0
        if x_min >= 1:
            out.append(count)
            keep.append(1.0)
            low.append(m_low)
            high.append(m_high)
            continue
        out.append(round((count / x_max + count / x_min) / 2))
        keep.append(x_min)
        low.append(math.floor(count_interval(m_low / x_max, x_max)[0]))
        high.append(math.ceil(count_interval(m_high / x_min, x_min)[1]))
    return (
        pa.array(out, pa.int64()),
        pa.array(keep, pa.float64()),
        pa.array(low, pa.int64()),
        pa.array(high, pa.int64()),
    )


class _Carry(NamedTuple):
    """One chain's carried stage-3 state and the ids of its (query, group) pairs."""

    coupons: SlidingCoupons
    ids: GroupIds


class _Window(NamedTuple):
    """A query's window state at a window end: the sub-windows it holds and its window."""

    held: int
    k: int


class _Span(NamedTuple):
    """A query's window in a batch: after the previous batch (``before``), and at the batch's
    boundary, resized to the batch's window ``k`` (``held``: what window ``lo`` holds then)."""

    before: _Window
    held: int
    k: int


class _Part(NamedTuple):
    """The queries of a chain that share a window and a span held in a batch: one carry."""

    chain: Chain
    before: _Window
    held: int


def _column(rows: pa.Table, by_query: dict[str, int]) -> np.ndarray:
    """``by_query`` of each row's query."""
    names = list(by_query)
    at = np.asarray(pc.index_in(rows["query"], value_set=pa.array(names, pa.string())).to_numpy())
    return np.asarray([by_query[name] for name in names], np.int64)[at]


def _held_of(rows: pa.Table, spans: dict[str, _Span], lows: dict[str, int]) -> np.ndarray:
    """The sub-windows each row's window holds: ``min(held + i - lo, k)`` (a growth fills one
    sub-window per window end; ``k`` otherwise)."""
    ends = np.asarray(rows["i"].to_numpy(), np.int64)
    held = _column(rows, {name: span.held for name, span in spans.items()})
    k = _column(rows, {name: span.k for name, span in spans.items()})
    lo = _column(rows, lows)
    return np.minimum(held + (ends - lo), k)


def _coarse_ends(rows: pa.Table, schedules: dict[str, list[tuple[int, int]]]) -> np.ndarray:
    """Γ: whether each row's window end ``i`` closes a sub-window of its query's schedule (``i + 1``
    starts one): the only window ends reported."""
    ends = np.asarray(rows["i"].to_numpy(), np.int64) + 1
    out = np.ones(len(ends), bool)
    for name, schedule in schedules.items():
        if schedule == [(FROM_START, 1)]:
            continue
        mine = np.asarray(pc.equal(rows["query"], name).to_numpy(zero_copy_only=False), bool)
        if mine.any():
            out[mine] = coarse_starts(schedule, ends[mine])[0] == ends[mine]
    return out


def _coarse_held(
    rows: pa.Table, held: np.ndarray, schedules: dict[str, list[tuple[int, int]]]
) -> tuple[np.ndarray, np.ndarray]:
    """Γ: each row's span (in b) and the length (in b) of its closing sub-window. A window holds
    the coarse sub-windows that end in its last ``held``: from the start of the one holding its
    first fine sub-window ``i + 1 − held``, a little more than ``held`` just after a change to
    a finer sub-window (departure from the top-k kind: module docstring)."""
    ends = np.asarray(rows["i"].to_numpy(), np.int64)
    span = np.asarray(held, np.int64).copy()
    m = np.ones(len(ends), np.int64)
    for name, schedule in schedules.items():
        if schedule == [(FROM_START, 1)]:
            continue
        mine = np.asarray(pc.equal(rows["query"], name).to_numpy(zero_copy_only=False), bool)
        if mine.any():
            first = ends[mine] + 1 - span[mine]
            span[mine] = ends[mine] + 1 - coarse_starts(schedule, first)[0]
            m[mine] = coarse_starts(schedule, ends[mine])[1]
    return span, m


def _last(c: Chain, watermark_ms: int | None) -> int:
    return _BEFORE_ALL if watermark_ms is None else c.last_index(watermark_ms)


def build_distinct(
    packets: DataFrame,
    queries: Sequence[DistinctQuery],
    *,
    watermark_s: float,
    rank: bool = True,
    windows: Path | None = None,
) -> BatchOutput:
    """All ``queries`` as one streaming query whose micro-batches ``SlidingDistinct`` processes.

    ``packets`` is the decoded stream, control rows kept (``pipeline.source.read_packets``
    with ``keep_control=True``): they move event time forward.
    """
    chains = chains_of(queries)
    delay_ms = int(round(watermark_s * 1000))
    return BatchOutput(
        packets,
        lambda results, checkpoint: SlidingDistinct(
            chains, results, checkpoint, watermark_ms=delay_ms, rank=rank, windows=windows
        ),
    )


def build_distinct_batch(cfg: Config, results: Path, checkpoint: Path) -> SlidingDistinct:
    """The distinct-count kind's function on the shared micro-batch (``pipeline.job``)."""
    return SlidingDistinct(
        chains_of(cfg.queries.distinct),
        results,
        checkpoint,
        watermark_ms=int(round(cfg.pipeline.watermark_s * 1000)),
        windows=window_file(cfg),
        granularity=granularity_file(cfg),
        max_factor=cfg.resources.sub_window_max_factor,
    )


def build_distinct_outputs(packets: DataFrame, cfg: Config) -> dict[str, BatchOutput]:
    """All configured distinct-count queries as one streaming query (it reads Kafka once).

    ``packets`` must keep its control rows (as :func:`build_distinct`).
    """
    return {
        "distinct": build_distinct(
            packets, cfg.queries.distinct, watermark_s=cfg.pipeline.watermark_s, windows=window_file(cfg)
        )
    }
