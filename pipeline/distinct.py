"""Sliding-window distinct counts in Spark: one HLL sketch per (sub-window, group), unioned per slide.

This is Golab's basic interval synopsis (thesis §2.3.4) in native Spark functions, the streaming
side of ``analytics.distinct.SubWindowDistinct`` (conventions: ``docs/distinct.md``):

1. ``items``: per packet and configured query, the group text and the counted key text
   (``concat_ws(",", cols cast to string)``, as ``analytics.keys.key_text``); rows with a null or
   empty key are dropped, as offline.
2. ``sketches``: ``hll_sketch_agg(item, lg_k)`` per tumbling sub-window ``window(ts, b)``, query
   and group. Each packet is touched once, in its own sub-window.
3. ``windows``: per slide, ``hll_union_agg`` over the group's sub-window sketches of the window
   that closes with that sub-window, ``window(window_time(sub_window), N, b)``, and
   ``hll_sketch_estimate(hll_union(sketch, sketch))``: the union *settled*, so its estimate
   depends on the registers only, not on the order Spark merged the sketches in.
4. ``ranked``: per slide and query, the groups ordered by distinct count descending, then group
   text ascending, cut to the query's ``top`` (``top <= 0``: all).

Append mode: each row is final when written; a restart from the checkpoint neither loses nor
repeats one. Queries that share (N, b, lg_k) share one chain of aggregations; each other
combination adds a chain, and the chains are unioned into one output.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from itertools import groupby

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from analytics import distinct_queries
from analytics.keys import parse_key
from netmon.config import Config, DistinctQuery

__all__ = [
    "COLUMNS",
    "build_distinct",
    "build_distinct_outputs",
    "key_text",
    "offline_query",
    "spark_interval",
    "sub_window_sketches",
    "windowed_counts",
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
    """``ts, query, group, item``: one row per packet and query whose keys are present."""
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
    # Null keys are skipped, and empty items ignored, as offline; filtering before
    # hll_sketch_agg keeps Spark from writing a group whose sketch is empty.
    return items.where(F.col("group").isNotNull() & F.col("item").isNotNull() & (F.col("item") != ""))


def sub_window_sketches(packets: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """Stage 1: ``sub_window, query, group, sketch`` per tumbling sub-window of b.

    All ``queries`` must share (N, b, lg_k). ``sketch`` is an HLL_8 updatable sketch holding the
    coupons (or registers) ``SubWindowDistinct.synopsis`` holds for the same items; Spark merges
    partial sketches, so the coupon order in the bytes can differ.
    """
    (_, sub_window_s, lg_k), *others = {_chain_key(q) for q in queries}
    if others:
        raise ValueError("queries: one chain needs one (window_s, sub_window_s, lg_k)")
    items = _items(packets, queries)
    return items.groupBy(
        F.window("ts", spark_interval(sub_window_s, "sub_window_s")).alias("sub_window"), "query", "group"
    ).agg(F.hll_sketch_agg("item", lg_k).alias("sketch"))


def windowed_counts(packets: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """Stages 1 and 2 for queries sharing (N, b, lg_k): ``window, query, group, distinct``.

    Every group of every closed slide, unranked: the two-stage algorithm itself.
    """
    window_s, sub_window_s, _ = _chain_key(queries[0])
    sketches = sub_window_sketches(packets, queries)
    # Each closed sub-window joins the N/b sliding windows that hold it (window_time = end - 1 µs).
    windows = sketches.groupBy(
        F.window(
            F.window_time("sub_window"),
            spark_interval(window_s, "window_s"),
            spark_interval(sub_window_s, "sub_window_s"),
        ).alias("window"),
        "query",
        "group",
    ).agg(F.hll_union_agg("sketch").alias("sketch"))
    # Settled union: the composite estimate of the registers, whatever the merge order was.
    return windows.select(
        "window",
        "query",
        "group",
        F.hll_sketch_estimate(F.hll_union("sketch", "sketch")).alias("distinct"),
    )


def build_distinct(packets: DataFrame, queries: Sequence[DistinctQuery]) -> DataFrame:
    """``query, window_end, group, distinct, rank``: each query's top groups per closed slide.

    ``packets`` is the decoded, watermarked stream (``pipeline.source.read_packets``).
    """
    if not queries:
        raise ValueError("queries: no distinct-count query configured")
    names = [q.name for q in queries]
    if len(set(names)) != len(names):
        raise ValueError(f"queries: duplicate query names in {names}")
    for q in queries:
        offline_query(q)
    chains = [
        windowed_counts(packets, list(group))
        for _, group in groupby(sorted(queries, key=_chain_key), key=_chain_key)
    ]
    counts = chains[0]
    for chain in chains[1:]:
        counts = counts.unionByName(chain)
    # Per slide and query: the groups by distinct count descending, then group text ascending.
    ranked = counts.groupBy("window", "query").agg(
        F.sort_array(F.collect_list(F.struct((-F.col("distinct")).alias("order"), "group"))).alias("ranked")
    )
    top = F.create_map(*[x for q in queries for x in (F.lit(q.name), F.lit(q.top))])[F.col("query")]
    keep = F.when(top > 0, F.least(top, F.size("ranked"))).otherwise(F.size("ranked"))
    # The top groups, one row each, with their rank from 1.
    best = ranked.select(
        "query",
        F.col("window.end").alias("window_end"),
        F.posexplode(F.slice("ranked", 1, keep)).alias("position", "entry"),
    )
    return best.select(
        "query",
        "window_end",
        F.col("entry.group").alias("group"),
        (-F.col("entry.order")).alias("distinct"),
        (F.col("position") + 1).cast("int").alias("rank"),
    )


def build_distinct_outputs(packets: DataFrame, cfg: Config) -> dict[str, DataFrame]:
    """All configured distinct-count queries as one streaming query (it reads Kafka once)."""
    return {"distinct": build_distinct(packets, cfg.queries.distinct)}
