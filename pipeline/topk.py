"""Sliding-window heavy hitters (Golab's Algorithm 6) for every configured top-k query, in one query.

Stage 1 is native Spark: each query's packets are counted exactly per tumbling event-time
sub-window of length ``b`` and key text (packets or bytes), in append mode, so a sub-window's rows
are emitted once, together, when the watermark passes its end. The queries' stage-1 outputs are
unioned with a ``query`` column and grouped by it into one ``transformWithStateInPandas`` operator
(``pipeline.topk_state``): per closed sub-window it keeps the top-k rows, merges them into the
query's ``SubWindowTopK`` (a ``ValueState`` of O(k·N/b) pairs in the RocksDB store, checkpointed
with the batch) and emits each report as rows::

    query, window_end, delta, rank, key, count, total

one per reported item (rank 1, 2, … by count descending then key), or a single row with rank 0
and a null key and count when no item is above delta. ``total`` is the window's traffic (packets
or bytes of the query's weight, records with the key only) for the items' shares.

Run it with ``netmon pipeline`` (kind ``topk``); the rows land in ``<data>/results/topk/``.
"""

from __future__ import annotations

from functools import reduce
from operator import and_

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics.keys import KEY_SEPARATOR, parse_key
from analytics.topk_merge import QueryParams
from netmon.config import Config, TopKQuery
from pipeline.topk_state import OUTPUT_SCHEMA, TopKMergeProcessor

__all__ = [
    "build_sliding_counts",
    "build_subwindow_counts",
    "build_topk",
    "build_topk_outputs",
    "key_column",
    "query_params",
    "top_k_per_window",
    "weight_column",
]

_NS_PER_US = 1_000


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
