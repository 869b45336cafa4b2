"""The baseline of ``netmon bench pipeline``: the default questions as a Spark user would write them.

Each configured question is its own streaming query, reading the packets topic itself through
:func:`pipeline.source.read_packets` (the Kafka source and the wire-format decode, watermark on
``ts`` declared), with only Spark's own operators after it:

- **traffic**: ``groupBy(window(ts, [pipeline] traffic_window_s), proto)`` with ``count`` and
  ``sum(wire_len)``, in append mode;
- **top-k** (each ``[[queries.topk]]``): packets (or bytes) per (sliding ``window(ts, N, b)``,
  key fields) as a streaming aggregation in append mode, then in ``foreachBatch`` the top ``k``
  per window with ``row_number()`` (count descending, key ascending);
- **distinct** (each ``[[queries.distinct]]``): ``approx_count_distinct(item, rsd)`` per
  (sliding window, group), ``rsd`` chosen so that Spark's HLL++ has ``2**lg_k`` registers like
  the query's sketch (:func:`rsd_for`), then in ``foreachBatch`` the ``top`` groups per window
  (0: every group, no ranking step);
- **join** (each handshake ``[[queries.join]]``): Spark's stream-stream left outer join of the SYN
  stream with the SYN-ACK stream on the reversed 4-tuple and ``ack = seq + 1`` (mod 2**32), the
  SYN-ACK at most ``window_s`` after its SYN (an event-time range condition), both sides carrying
  the watermark :func:`~pipeline.source.read_packets` declares on ``ts`` (Spark 4 refuses a
  second ``withWatermark`` in a plan that has one); unanswered SYNs come out as rows with null
  SYN-ACK columns, as netmon's ``unmatched`` rows. Link queries (none by default) are skipped.

Results are computed and discarded: the aggregations and the join write to Spark's ``noop`` sink;
the ranking steps run in ``foreachBatch`` and write their rows to ``noop``.
:func:`baseline_queries` builds the queries from a :class:`~netmon.config.Config`;
:func:`drain_baseline` starts them together with ``availableNow`` and waits until all have ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from netmon.columns import parse_key
from netmon.config import Config, DistinctQuery, JoinQuery, TopKQuery
from pipeline.source import read_packets

__all__ = ["BaselineQuery", "baseline_queries", "drain_baseline", "rsd_for"]

_SYN, _ACK = 0x02, 0x10
_SEQ_MOD = 2**32


@dataclass(frozen=True)
class BaselineQuery:
    """One question of the baseline: a streaming DataFrame and what each micro-batch does with it.

    ``frame``: the streaming aggregation or join, in append mode. ``per_batch``: the batch step run
    in ``foreachBatch`` on each micro-batch's closed windows (the ranking), or None when there is
    none and the rows go straight to the ``noop`` sink.
    """

    name: str
    frame: DataFrame
    per_batch: Callable[[DataFrame], DataFrame] | None = None

    def start(self, checkpoint: Path) -> StreamingQuery:
        """Start the query with ``availableNow``, its results discarded."""
        writer = (
            self.frame.writeStream.queryName(self.name)
            .outputMode("append")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )
        step = self.per_batch
        if step is None:
            return writer.format("noop").start()

        def discard(batch: DataFrame, batch_id: int) -> None:
            step(batch).write.format("noop").mode("overwrite").save()

        return writer.foreachBatch(discard).start()


def rsd_for(lg_k: int) -> float:
    """The ``rsd`` for which Spark's ``approx_count_distinct`` keeps ``2**lg_k`` HLL++ registers.

    Spark picks the precision ``p = ceil(2 * log2(1.106 / rsd))``; half a step below ``lg_k``
    rounds up to it whatever the floating-point error.

    >>> import math
    >>> [math.ceil(2 * math.log2(1.106 / rsd_for(lg_k))) for lg_k in (4, 12, 21)]
    [4, 12, 21]
    """
    return 1.106 / 2 ** ((lg_k - 0.5) / 2)


def _interval(seconds: float) -> str:
    return f"{round(seconds * 1_000_000)} microseconds"


def _present(fields: tuple[str, ...]) -> Column:
    """Records having every field; ``ts IS NULL`` (never true) keeps the filter above the watermark.

    Pushed below it, the filter would drop the watermark control rows before they move event time
    (``pipeline.source``): the last windows would never close.
    """
    every = F.lit(True)
    for name in fields:
        every = every & F.col(name).isNotNull()
    return every | F.col("ts").isNull()


def _item(fields: tuple[str, ...]) -> Column:
    """One value to count: the field itself, or the fields joined with ``,``."""
    if len(fields) == 1:
        return F.col(fields[0])
    return F.concat_ws(",", *(F.col(name).cast("string") for name in fields))


def _top_per_window(column: str, n: int, keys: tuple[str, ...]) -> Callable[[DataFrame], DataFrame]:
    """The batch step: each window's ``n`` rows with the largest ``column`` (ties by key)."""
    order = Window.partitionBy("window").orderBy(F.desc(column), *(F.asc(k) for k in keys))

    def top(batch: DataFrame) -> DataFrame:
        return batch.withColumn("rank", F.row_number().over(order)).where(F.col("rank") <= n)

    return top


def _traffic(packets: DataFrame, cfg: Config) -> BaselineQuery:
    # Packets and bytes per tumbling window and protocol.
    counts = packets.groupBy(F.window("ts", _interval(cfg.pipeline.traffic_window_s)), "proto").agg(
        F.count(F.lit(1)).alias("packets"), F.sum("wire_len").alias("bytes")
    )
    return BaselineQuery("baseline_traffic", counts)


def _topk(packets: DataFrame, q: TopKQuery) -> BaselineQuery:
    keys = parse_key(q.key)
    weight = F.lit(1) if q.weight == "packets" else F.col("wire_len")
    # Packets (or bytes) per sliding window and key, every record counted in N/b windows.
    counts = (
        packets.where(_present(keys))
        .groupBy(F.window("ts", _interval(q.window_s), _interval(q.sub_window_s)), *keys)
        .agg(F.sum(weight.cast("long")).alias("count"))
    )
    return BaselineQuery(_name("topk", q.name), counts, _top_per_window("count", q.k, keys))


def _distinct(packets: DataFrame, q: DistinctQuery) -> BaselineQuery:
    groups, items = parse_key(q.group_by) if q.group_by.strip() else (), parse_key(q.count)
    # Approximate distinct items per sliding window and group.
    counts = (
        packets.where(_present(groups + items))
        .groupBy(F.window("ts", _interval(q.window_s), _interval(q.sub_window_s)), *groups)
        .agg(F.approx_count_distinct(_item(items), rsd_for(q.lg_k)).alias("distinct"))
    )
    top = _top_per_window("distinct", q.top, groups) if q.top else None
    return BaselineQuery(_name("distinct", q.name), counts, top)


def _handshake(packets: DataFrame, q: JoinQuery) -> BaselineQuery:
    flags = F.coalesce(F.col("tcp_flags").cast("int"), F.lit(0))
    tcp = F.coalesce(F.col("proto") == 6, F.lit(False))
    is_syn = (flags.bitwiseAND(_SYN) != 0) & (flags.bitwiseAND(_ACK) == 0)
    is_syn_ack = (flags.bitwiseAND(_SYN) != 0) & (flags.bitwiseAND(_ACK) != 0)
    # SYNs: SYN set, ACK clear. Each side keeps the watermark declared on the decoded stream's `ts`
    # (renamed, the column keeps it; Spark 4 refuses to declare a second one in the same plan).
    syns = packets.where((tcp & is_syn) | F.col("ts").isNull()).select(
        F.col("ts").alias("syn_ts"),
        F.col("src_ip").alias("client"),
        F.col("dst_ip").alias("server"),
        F.col("src_port").alias("client_port"),
        F.col("dst_port").alias("server_port"),
        F.col("tcp_seq").alias("seq"),
    )
    # SYN-ACKs: SYN and ACK set, from the server back to the client.
    syn_acks = packets.where((tcp & is_syn_ack) | F.col("ts").isNull()).select(
        F.col("ts").alias("ack_ts"),
        F.col("dst_ip").alias("to_client"),
        F.col("src_ip").alias("from_server"),
        F.col("dst_port").alias("to_client_port"),
        F.col("src_port").alias("from_server_port"),
        F.col("tcp_ack").alias("ack"),
    )
    # The reversed 4-tuple, ack = seq + 1, and the SYN-ACK within window_s after its SYN.
    matches = (
        (F.col("client") == F.col("to_client"))
        & (F.col("server") == F.col("from_server"))
        & (F.col("client_port") == F.col("to_client_port"))
        & (F.col("server_port") == F.col("from_server_port"))
        & (F.col("ack") == F.pmod(F.col("seq") + 1, F.lit(_SEQ_MOD)))
        & (F.col("ack_ts") >= F.col("syn_ts"))
        & (F.col("ack_ts") <= F.col("syn_ts") + F.expr(f"INTERVAL {_interval(q.window_s)}"))
    )
    return BaselineQuery(_name("join", q.name), syns.join(syn_acks, matches, "leftOuter"))


def _name(kind: str, name: str) -> str:
    return f"baseline_{kind}_{name.replace('-', '_')}"


def baseline_queries(spark: SparkSession, cfg: Config) -> list[BaselineQuery]:
    """The configured questions as plain Spark queries, each over its own read of the packets topic."""
    queries = [_traffic(read_packets(spark, cfg), cfg)]
    queries += [_topk(read_packets(spark, cfg), q) for q in cfg.queries.topk]
    queries += [_distinct(read_packets(spark, cfg), q) for q in cfg.queries.distinct]
    queries += [_handshake(read_packets(spark, cfg), q) for q in cfg.queries.join if q.query == "handshake"]
    return queries


def drain_baseline(queries: list[BaselineQuery], checkpoints: Path, *, timeout_s: float = 3600.0) -> float:
    """Start every query at once (``availableNow``), wait until all have ended; wall seconds.

    ``checkpoints``: a directory for the queries' checkpoints (a fresh one reads the topic from its
    earliest offset). A failed query stops the others and raises ``RuntimeError`` naming it.
    """
    started = time.perf_counter()
    running: dict[str, StreamingQuery] = {}
    try:
        for q in queries:
            running[q.name] = q.start(checkpoints / q.name)
        deadline = time.monotonic() + timeout_s
        while True:
            for name, query in running.items():
                if not query.isActive and query.exception() is not None:
                    raise RuntimeError(f"baseline query {name} failed: {query.exception()}")
            active = [query for query in running.values() if query.isActive]
            if not active:
                return time.perf_counter() - started
            if time.monotonic() > deadline:
                raise TimeoutError(f"the baseline queries did not end within {timeout_s:g} s")
            try:
                active[0].awaitTermination(1)
            except Exception:  # noqa: BLE001 - a failure is reported from exception() above
                pass
    finally:
        for query in running.values():
            if query.isActive:
                query.stop()
