"""Sliding-window distinct counts in Spark: one HLL sketch per (sub-window, group), unioned per slide.

This is Golab's basic interval synopsis (thesis §2.3.4) in native Spark functions, the streaming
side of ``analytics.distinct.SubWindowDistinct`` (conventions: ``docs/distinct.md``):

1. ``items``: per packet and configured query, the group text and the counted key text
   (``concat_ws(",", cols cast to string)``, as ``analytics.keys.key_text``); rows with a null or
   empty key are dropped, as offline.
2. ``sketches`` (the streaming query): ``hll_sketch_agg(item, lg_k)`` per tumbling sub-window
   ``window(ts, b)``, query and group, in append mode: each packet is touched once, in its own
   sub-window, and a sub-window's sketch is emitted once, when the watermark passes its end.
3. ``windows`` (per micro-batch, ``foreachBatch``): each window closed by the batch's watermark
   is the ``hll_union_agg`` of its group's last N/b sub-window sketches, computed as the union of
   at most two running unions (:func:`sliding_unions`), and read *settled*:
   ``hll_sketch_estimate(hll_union(sketch, sketch))``, whose estimate depends on the registers
   only, not on the order Spark merged the sketches in.
4. ``ranked``: per slide and query, the groups ordered by distinct count descending, then group
   text ascending, cut to the query's ``top`` (``top <= 0``: all).

Why stage 3 is not a third streaming aggregation over ``window(window_time(sub_window), N, b)``:
that copies every sub-window sketch into the N/b windows holding it, N/b union updates per
(sub-window, group) through the state store, and was measured at 1.8–2.3× Spark's own sliding
``approx_count_distinct`` on the attack queries (``docs/performance.md``). The running unions
touch each sketch about twice per window length, whatever N/b is.

The sub-window sketches stay in a small store beside the checkpoint (``<checkpoint>/sketches``,
one directory per batch, dropped once no open window needs it) and results are committed per
batch (``pipeline.batch_sink``): a batch that Spark runs again after a crash rewrites the same
rows, so a restart from the checkpoint neither loses nor repeats one. Queries that share (N, b,
lg_k) share one chain (one stage-1 aggregation); each other combination adds a chain.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Sequence
from decimal import Decimal
from itertools import groupby
from pathlib import Path
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics import distinct_queries
from analytics.keys import parse_key
from netmon.config import Config, DistinctQuery
from pipeline.batch_sink import BatchOutput, commit_batch, write_batch

__all__ = [
    "COLUMNS",
    "STORE_SCHEMA",
    "Chain",
    "SlidingDistinct",
    "build_distinct",
    "build_distinct_outputs",
    "batch_sketches",
    "chains_of",
    "key_text",
    "offline_query",
    "ranked",
    "sliding_unions",
    "spark_interval",
]

#: The output columns, in order.
COLUMNS = ("query", "window_end", "group", "distinct", "rank")


def key_text(fields: Sequence[str]) -> Column:
    """The canonical key text (``analytics.keys.key_text``): null if any field is null."""
    parts = [F.col(f).cast("string") for f in fields]
    present = F.lit(True)
    for part in parts:
        present = present & part.isNotNull()
    return F.when(present, F.concat_ws(",", *parts))


def offline_query(q: DistinctQuery) -> distinct_queries.DistinctQuery:
    """The offline form of a configured query (validated: known fields, N a multiple of b)."""
    return distinct_queries.DistinctQuery(
        name=q.name,
        count=q.count,
        group_by=q.group_by or (),
        window_s=q.window_s,
        sub_window_s=q.sub_window_s,
    )


def spark_interval(seconds: float, name: str = "seconds") -> str:
    """A duration as Spark interval text in whole microseconds: ``0.5`` -> ``"500000 microseconds"``."""
    micros = Decimal(str(seconds)) * 10**6
    if micros != micros.to_integral_value() or micros <= 0:
        raise ValueError(f"{name}: {seconds!r} s is not a positive whole number of microseconds")
    return f"{int(micros)} microseconds"


def _chain_key(q: DistinctQuery) -> tuple[float, float, int]:
    return (q.window_s, q.sub_window_s, q.lg_k)


def _items(packets: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """``ts, query, group, item, counted``: one row per row of ``packets`` and query.

    ``counted`` is false where the group or the item is null or the item empty: such rows (and
    control rows) move event time but count nothing.
    """
    per_query = F.array(
        *[
            F.struct(
                F.lit(q.name).alias("query"),
                (key_text(parse_key(q.group_by)) if q.group_by else F.lit("")).alias("group"),
                key_text(parse_key(q.count)).alias("item"),
            )
            for q in queries
        ]
    )
    # One packet becomes one row per query (a Generate: ts keeps its watermark).
    items = packets.select("ts", F.inline(per_query))
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


def _micros(seconds: float, name: str) -> int:
    return int(spark_interval(seconds, name).split()[0])


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
    """Stage 1 on a micro-batch: ``chain, query, group, idx, sketch, items, late, max_ts``.

    ``hll_sketch_agg(item, lg_k)`` per sub-window and group of each of the chain's queries;
    ``idx`` = the sub-window's start / b, and ``sketch`` an HLL_8 updatable sketch holding the
    coupons (or registers) ``SubWindowDistinct.synopsis`` holds for the same items. A sub-window
    that spans micro-batches gets a partial sketch from each, which stage 3 unites (union is
    associative), so each packet is still touched once. Items of a sub-window ``<= lo`` (already
    reported) are late: counted in ``late``, not sketched. ``items`` counts what the sketch took;
    rows with ``items = 0`` only carry event time (``max_ts``: rows that count nothing, control
    rows, late rows all move it).
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
            F.max("ts").alias("max_ts"),
        )
        .select(F.lit(c.label).alias("chain"), "query", "group", "idx", "sketch", "items", "late", "max_ts")
    )


def sliding_unions(sketches: DataFrame, k: int, lo: int, hi: int) -> DataFrame:
    """Stage 3 on a batch DataFrame: each group's window unions for window end indices ``lo < i <= hi``.

    ``sketches``: ``query, group, idx, sketch``, every sub-window sketch with ``idx > lo - k``
    (older ones are ignored). Returns ``query, group, i, distinct``: window ``i`` holds sub-windows
    ``i - k + 1 .. i``; ``distinct`` is the settled estimate of their union, a row for each window
    that holds one of the group's sketches.

    Each window is the union of at most two *running* unions over aligned chunks of ``k``
    sub-windows (``c = idx div k``): the suffix union of chunk ``c - 1`` from ``i - k + 1`` on,
    and the prefix union of chunk ``c`` up to ``i`` (the two-stacks idea of sliding-window
    aggregation; Tangwongsan et al., "Sliding-window aggregation algorithms", Encyclopedia of Big
    Data Technologies, 2019). Spark computes both with ``hll_union_agg`` over a growing window
    frame, one union per sketch, and a prefix (suffix) row serves every window end up to the
    group's next (from its previous) sketch. Union is associative and commutative and the result
    is read settled, so the answer is the estimate of the same registers as the union of the
    window's N/b sketches (thesis §2.3.4) — equal, not approximately equal (tested).
    """
    # Partial sketches of one sub-window (from several micro-batches) become one first.
    s = (
        sketches.where((F.col("idx") > F.lit(lo - k)) & (F.col("idx") <= F.lit(hi)))
        .groupBy("query", "group", "idx")
        .agg(F.hll_union_agg("sketch").alias("sketch"))
        .withColumn("c", F.floor(F.col("idx") / F.lit(k)).cast("long"))
    )
    chunk = Window.partitionBy("query", "group", "c")
    up, down = chunk.orderBy("idx"), chunk.orderBy(F.desc("idx"))
    grow = (Window.unboundedPreceding, Window.currentRow)
    s = s.select(
        "query",
        "group",
        "idx",
        "c",
        F.hll_union_agg("sketch").over(up.rowsBetween(*grow)).alias("prefix"),
        F.hll_union_agg("sketch").over(down.rowsBetween(*grow)).alias("suffix"),
        F.lead("idx").over(up).alias("next"),
        F.lag("idx").over(up).alias("prev"),
    )
    # The window ends each running union serves, cut to (lo, hi].
    first, last = F.lit(lo + 1), F.lit(hi)
    pre_from = F.greatest(F.col("idx"), first)
    pre_to = F.least(F.coalesce(F.col("next"), (F.col("c") + 1) * k) - 1, last)
    suf_from = F.greatest(F.coalesce(F.col("prev") + 1, F.col("c") * k + 1) + (k - 1), first)
    suf_to = F.least(F.col("idx") + (k - 1), last)
    served = (
        s.where(pre_from <= pre_to)
        .select(
            "query",
            "group",
            F.col("prefix").alias("sketch"),
            F.explode(F.sequence(pre_from, pre_to)).alias("i"),
        )
        .unionByName(
            s.where(suf_from <= suf_to).select(
                "query",
                "group",
                F.col("suffix").alias("sketch"),
                F.explode(F.sequence(suf_from, suf_to)).alias("i"),
            )
        )
    )
    windows = served.groupBy("query", "group", "i").agg(F.hll_union_agg("sketch").alias("sketch"))
    # Settled union: the composite estimate of the registers, whatever the merge order was.
    return windows.select(
        "query", "group", "i", F.hll_sketch_estimate(F.hll_union("sketch", "sketch")).alias("distinct")
    )


def ranked(counts: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """Stage 4 on a batch: ``query, window_end, group, distinct, rank``, each query's ``top`` per slide."""
    order = Window.partitionBy("query", "window_end").orderBy(F.desc("distinct"), F.asc("group"))
    top = F.create_map(*[x for q in queries for x in (F.lit(q.name), F.lit(q.top))])[F.col("query")]
    with_rank = counts.withColumn("rank", F.row_number().over(order).cast("int"))
    return with_rank.where((top <= 0) | (F.col("rank") <= top)).select(*COLUMNS)


STORE_SCHEMA = "chain string, query string, group string, idx long, sketch binary"
STORE_COLUMNS = ("chain", "query", "group", "idx", "sketch")


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
    ) -> None:
        self.chains = list(chains)
        self.results = Path(results)
        self.store = Path(checkpoint) / "sketches"
        self.delay_ms = watermark_ms
        self.rank = rank
        #: late rows skipped by this process's batches
        self.late_rows = 0

    def _stored(self, upto: int) -> dict[int, dict]:
        """Store batches ``<= upto`` that completed: batch id -> their marker."""
        out = {}
        for marker in self.store.glob("batch-*.json"):
            batch = int(marker.stem.removeprefix("batch-"))
            if batch <= upto:
                out[batch] = json.loads(marker.read_text())
        return out

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        before = self._stored(batch_id - 1)
        previous = before[max(before)] if before else {"watermark_ms": None}
        lows = {c.label: _last(c, previous["watermark_ms"]) for c in self.chains}
        # Control rows only move event time (their keys are null).
        parts = [batch_sketches(df, c, lows[c.label]) for c in self.chains]
        new = parts[0]
        for part in parts[1:]:
            new = new.unionByName(part)
        # Cached: the store and the batch's event time both come from it (one pass over the batch).
        new = new.persist()
        target = self.store / f"batch-{batch_id:06d}"
        new.where(F.col("items") > 0).select(*STORE_COLUMNS).write.mode("overwrite").parquet(str(target))
        seen = new.agg(
            F.max("max_ts").alias("max_ts"),
            # Late rows are counted on the first chain (other chains' sub-windows close elsewhere).
            F.sum(F.when(F.col("chain") == self.chains[0].label, F.col("late"))).alias("late"),
            *[
                F.max(F.when((F.col("chain") == c.label) & (F.col("items") > 0), F.col("idx"))).alias(c.label)
                for c in self.chains
            ],
        ).first()
        new.unpersist()
        max_ts, late_rows = seen["max_ts"], int(seen["late"] or 0)
        watermark_ms = previous["watermark_ms"]
        if max_ts is not None:
            moved = _epoch_ms(max_ts) - self.delay_ms
            watermark_ms = moved if watermark_ms is None else max(watermark_ms, moved)
        # max_idx bounds the sub-windows this batch stored, per chain (None: none).
        marker = {
            "watermark_ms": watermark_ms,
            "max_idx": {c.label: seen[c.label] for c in self.chains},
            "late": late_rows,
        }
        (self.store / f"batch-{batch_id:06d}.json").write_text(json.dumps(marker))
        self.late_rows += late_rows
        stored = before | {batch_id: marker}
        sketches = spark.read.schema(STORE_SCHEMA).parquet(
            *[str(self.store / f"batch-{b:06d}") for b in sorted(stored)]
        )
        counts = []
        for c in self.chains:
            lo, hi = lows[c.label], _last(c, watermark_ms)
            if hi <= lo:
                continue
            windows = sliding_unions(sketches.where(F.col("chain") == c.label), c.k, lo, hi)
            end = F.timestamp_micros((F.col("i") + 1) * F.lit(c.sub_window_us))
            counts.append(windows.select("query", end.alias("window_end"), "group", "distinct"))
        if counts:
            out = counts[0]
            for more in counts[1:]:
                out = out.unionByName(more)
            queries = [q for c in self.chains for q in c.queries]
            write_batch(ranked(out, queries) if self.rank else out, self.results, batch_id)
        else:
            commit_batch(self.results, batch_id, [])
        self._drop_unneeded(before, lows)

    def _drop_unneeded(self, before: dict[int, dict], lows: dict[str, int]) -> None:
        """Delete store batches older than the previous one whose sketches no window can still hold.

        This batch read sub-windows ``> lo - k``; later batches read from further on. The previous
        batch's marker stays: a rerun of this batch starts from its watermark.
        """
        if not before:
            return
        latest = max(before)
        for b, marker in before.items():
            top = marker["max_idx"]
            needed = any(
                top.get(c.label) is not None and top[c.label] > lows[c.label] - c.k for c in self.chains
            )
            if b < latest and not needed:
                shutil.rmtree(self.store / f"batch-{b:06d}", ignore_errors=True)
                (self.store / f"batch-{b:06d}.json").unlink(missing_ok=True)


_BEFORE_ALL = -(2**62)


def _last(c: Chain, watermark_ms: int | None) -> int:
    return _BEFORE_ALL if watermark_ms is None else c.last_index(watermark_ms)


def _epoch_ms(t: dt.datetime) -> int:
    """Milliseconds since the epoch, floored (Spark's watermark unit)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return (t - _EPOCH) // dt.timedelta(milliseconds=1)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def build_distinct(
    packets: DataFrame, queries: Sequence[DistinctQuery], *, watermark_s: float, rank: bool = True
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
            chains, results, checkpoint, watermark_ms=delay_ms, rank=rank
        ),
    )


def build_distinct_outputs(packets: DataFrame, cfg: Config) -> dict[str, BatchOutput]:
    """All configured distinct-count queries as one streaming query (it reads Kafka once)."""
    return {"distinct": build_distinct(packets, cfg.queries.distinct, watermark_s=cfg.pipeline.watermark_s)}


#: ``pipeline.job`` passes this builder the packet stream with its control rows.
build_distinct_outputs.keeps_control_rows = True  # type: ignore[attr-defined]
