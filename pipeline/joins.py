"""Window joins of packet streams under a CPU budget: staging, settings and the shedding listener.

The join queries (``docs/joins.md`` §4) run on the shared query as the ``joins`` batch kind
(``pipeline.joins_batch``). This module holds what that kind and the references around it share:

- **Staging**: per query, two filters select the left and right tuples, each with its key text
  (``analytics.keys``: fields as strings joined by ``,``), the event time ``ts`` and a payload
  (``src_ip``, ``dst_ip``, ``src_port``, ``dst_port``, ``iface``); a packet becomes one row per
  (query, side) it belongs to. :func:`stage_rows` does it in pyarrow (the pipeline's path);
  :func:`build_staged` with Spark's functions (the reference the pyarrow staging is tested
  against), and :func:`build_spark_join` is Spark's own stream-stream join of the same sides,
  the reference of the equality test and of the benchmark.
- **Settings**: :func:`join_specs` (the operator's view of ``[[queries.join]]`` and
  ``[shedding]``), :func:`filter_column` (a filter as a Spark condition).
- **The shedding controller** (the ``shedding`` kind, no query of its own): a
  ``StreamingQueryListener`` on the driver (:class:`SheddingListener`) feeds the join statistics
  of each batch to :class:`pipeline.shedding_controller.SheddingController`, writes the fractions
  it chooses to the control file ``<data>/control/joins/fractions.json``, which the joins kind
  reads at its next batch, and commits the batch's :class:`SheddingRecord` rows into
  ``results/shedding/`` itself, one commit per batch named by its batch id
  (``pipeline.batch_sink``; through the result publisher they also reach the Kafka topic
  ``netmon.shedding``).

The ``joins`` result kind is one row per join result (``row = "match"``) or unanswered left
tuple (``row = "unmatched"``, the handshake query's SYNs that expired without a SYN-ACK):

    query, kind, row, key, left_ts, right_ts, delay_s, left_src_ip, left_dst_ip, left_src_port,
    left_dst_port, left_iface, right_src_ip, ..., right_iface

Why a file for the fractions: the listener runs asynchronously, after the batch it judged; the
file is replaced atomically (readers see the old or the new version, never a partial one), its
values are clamped to [0, 1], and a missing or unreadable file means the static fractions. A
batch that Spark re-executes after a failure may read newer fractions than its first attempt:
shedding decisions are not part of the exactly-once contract, but every applied fraction is
recorded in the batch's statistics. Without shedding (``strategy = "none"``) the file is never
read and the output is exact.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Mapping
from functools import reduce
from operator import and_
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics.keys import parse_key
from netmon.config import JOIN_QUERY_KINDS, Config, JoinQuery, SheddingConfig
from netmon.results import results_dir
from pipeline.batch_sink import CommittingListener, write_table
from pipeline.join_state import PAIR_COLUMNS, PAYLOAD, JoinSpec
from pipeline.shedding_controller import (
    ControlledQuery,
    SheddingController,
    SheddingRecord,
    read_control_state,
    records_table,
    write_control,
)

__all__ = [
    "JOIN_QUERY_KINDS",
    "RESULT_COLUMNS",
    "JoinQuery",
    "SheddingConfig",
    "SheddingListener",
    "build_join_sides",
    "build_spark_join",
    "build_staged",
    "control_file",
    "filter_column",
    "join_specs",
    "side_conditions",
    "start_shedding",
]

log = logging.getLogger(__name__)

#: The columns of the ``joins`` result kind.
RESULT_COLUMNS = tuple(c for c in PAIR_COLUMNS if c != "bucket")

_SYN, _ACK = 0x02, 0x10
_SEQ_MOD = 2**32


# -- settings: [[queries.join]] and [shedding] (netmon.config, checked when the config is built) ---
def _windows(q: JoinQuery) -> tuple[float, float]:
    """``(T_L, T_R)`` of a query."""
    return (q.window_s, 0.0) if q.query == "handshake" else (q.window_s, q.window_s)


def join_specs(
    queries: tuple[JoinQuery, ...], shedding: SheddingConfig, *, lateness_s: float
) -> dict[str, JoinSpec]:
    """The operator's view of the queries (windows, strategy, static fractions, seed)."""
    return {
        q.name: JoinSpec(
            name=q.name,
            kind=q.query,
            window_left_s=_windows(q)[0],
            window_right_s=_windows(q)[1],
            lateness_s=lateness_s,
            strategy=q.strategy,
            x_left=shedding.x_left,
            x_right=shedding.x_right,
            seed=shedding.seed,
            track_unmatched=q.query == "handshake",
        )
        for q in queries
    }


def control_file(cfg: Config) -> Path:
    """The controller's fractions, read by the operator at every batch."""
    return Path(cfg.paths.data_dir) / "control" / "joins" / "fractions.json"


# -- stage 1: native filters and keys ------------------------------------------------------------
def _text(*parts: Column) -> Column:
    """Canonical key text (``analytics.keys``): parts as strings joined by ``,``; null if any is null."""
    return F.when(
        reduce(and_, (p.isNotNull() for p in parts)), F.concat_ws(",", *(p.cast("string") for p in parts))
    )


def _stage(rows: DataFrame, key: Column) -> DataFrame:
    return rows.select("ts", key.alias("key"), *PAYLOAD).where(F.col("key").isNotNull())


def filter_column(text: str) -> Column:
    """A filter expression (``netmon.filters``) as a Spark condition with the same semantics.

    Comparisons with a null field are false and ``!=`` is ``not =``; addresses compare on the
    canonical text, IPv4 networks with integer arithmetic on the dotted quad. IPv6 networks have
    no Spark built-in: a vectorised pandas UDF tests them with ``ipaddress``.
    """
    from netmon.filters import parse_filter

    return _node_column(parse_filter(text)._node)  # the parsed expression tree


def _node_column(node: Any) -> Column:
    from netmon import filters as fl

    if isinstance(node, fl._Bool):
        left, right = _node_column(node.left), _node_column(node.right)
        return (left & right) if node.op == "and" else (left | right)
    if isinstance(node, fl._Not):
        return ~_node_column(node.inner)
    if isinstance(node, fl._Compare):
        col = F.col(node.field)
        if node.op == "!=":
            return ~F.coalesce(col == F.lit(node.value), F.lit(False))
        ops = {
            "=": col.__eq__,
            "==": col.__eq__,
            "<": col.__lt__,
            "<=": col.__le__,
            ">": col.__gt__,
            ">=": col.__ge__,
        }
        return F.coalesce(ops[node.op](F.lit(node.value)), F.lit(False))
    if isinstance(node, fl._InNetwork):
        hit = F.coalesce(_in_network(F.col(node.field), node.network), F.lit(False))
        return ~hit if node.negate else hit
    raise TypeError(f"unsupported filter node {node!r}")


def _in_network(col: Column, net: Any) -> Column:
    if net.num_addresses == 1:
        return col == F.lit(str(net.network_address))
    if net.version == 4:
        # The dotted quad as an integer; only well-formed quads (IPv6 text never matches).
        octets = F.split(col, r"\.")
        value = reduce(
            lambda acc, i: acc * 256 + F.try_element_at(octets, F.lit(i + 1)).try_cast("long"),
            range(1, 4),
            F.try_element_at(octets, F.lit(1)).try_cast("long"),
        )
        shift = 32 - net.prefixlen
        quad = col.rlike(r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$")
        prefix = int(net.network_address) >> shift
        return F.when(quad, F.shiftright(value, shift) == F.lit(prefix)).otherwise(F.lit(False))
    return _ipv6_in(str(net))(col)


def _ipv6_in(network: str) -> Any:
    net = ipaddress.ip_network(network)

    @F.pandas_udf("boolean")  # type: ignore[call-overload]
    def in_network(addresses: pd.Series) -> pd.Series:
        def one(text: Any) -> bool:
            try:
                return text is not None and ipaddress.ip_address(text) in net
            except ValueError:
                return False

        return addresses.map(one).astype(bool)

    return in_network


def side_conditions(q: JoinQuery) -> tuple[tuple[Column, Column], tuple[Column, Column]]:
    """``((left filter, left key), (right filter, right key))`` of a query, over the record columns."""
    if q.query == "handshake":
        # SYNs: SYN set, ACK clear; SYN-ACKs: both set. TCP only.
        flags = F.coalesce(F.col("tcp_flags").cast("int"), F.lit(0))
        tcp = F.coalesce(F.col("proto") == 6, F.lit(False))
        syn = tcp & (flags.bitwiseAND(_SYN) != 0) & (flags.bitwiseAND(_ACK) == 0)
        syn_ack = tcp & (flags.bitwiseAND(_SYN) != 0) & (flags.bitwiseAND(_ACK) != 0)
        # Keys: the SYN's 4-tuple with seq + 1 (mod 2^32); the SYN-ACK's reversed 4-tuple with its ack.
        seq_next = F.pmod(F.col("tcp_seq") + 1, F.lit(_SEQ_MOD))
        fwd = [F.col(c) for c in ("src_ip", "dst_ip", "src_port", "dst_port")]
        rev = [F.col(c) for c in ("dst_ip", "src_ip", "dst_port", "src_port")]
        return (syn, _text(*fwd, seq_next)), (syn_ack, _text(*rev, F.col("tcp_ack")))
    # Link correlation: two filtered streams, each keyed on its key columns.
    left_key = _text(*(F.col(c) for c in parse_key(q.key)))
    right_key = _text(*(F.col(c) for c in parse_key(q.right_key or q.key)))
    return (filter_column(q.left), left_key), (filter_column(q.right), right_key)


def build_join_sides(packets: DataFrame, q: JoinQuery) -> tuple[DataFrame, DataFrame]:
    """Stage 1 of one query as two streams: the left and right tuples, ``ts, key, src_ip, ..., iface``."""
    (left_cond, left_key), (right_cond, right_key) = side_conditions(q)
    return _stage(packets.where(left_cond), left_key), _stage(packets.where(right_cond), right_key)


def build_staged(packets: DataFrame, queries: tuple[JoinQuery, ...], buckets: int) -> DataFrame:
    """Stage 1 of every query in one pass over the packets: ``query, is_left, ts, key, payload, bucket``.

    Each packet becomes one row per (query, side) whose filter it passes and whose key it has, by
    ``explode`` over an array of tags: the packet stream is read and decoded once, however many
    queries and sides (a union of filtered branches would scan the Kafka source once per branch).
    """
    tags = [
        F.struct(
            cond.alias("hit"), F.lit(q.name).alias("query"), F.lit(is_left).alias("is_left"), key.alias("key")
        )
        for q in queries
        for (cond, key), is_left in zip(side_conditions(q), (True, False), strict=True)
    ]
    matching = F.filter(F.array(*tags), lambda t: t["hit"] & t["key"].isNotNull())
    tagged = packets.select("ts", *PAYLOAD, F.explode(matching).alias("tag"))
    return tagged.select(
        F.col("tag.query").alias("query"),
        F.col("tag.is_left").alias("is_left"),
        "ts",
        F.col("tag.key").alias("key"),
        *PAYLOAD,
        F.pmod(F.xxhash64("tag.key"), F.lit(buckets)).cast("int").alias("bucket"),
    )


#: The staged rows' Spark schema as the pyarrow staging (:func:`stage_rows`) yields them.
STAGED_SCHEMA = "query STRING, is_left BOOLEAN, ts TIMESTAMP, key STRING, " + ", ".join(
    f"{name} {kind}" for name, kind in PAYLOAD.items()
)


def _key_text(columns: list[pa.Array]) -> pa.Array:
    """:func:`_text` in pyarrow: the parts as strings joined by ``,``; null if any is null."""
    parts = [pc.cast(c, pa.string()) for c in columns]
    return pc.binary_join_element_wise(*parts, ",", null_handling="emit_null")


def _side_masks(rows: pa.Table, q: JoinQuery) -> tuple[tuple[pa.Array, pa.Array], tuple[pa.Array, pa.Array]]:
    """:func:`side_conditions` in pyarrow: ``((left mask, left key), (right mask, right key))``."""
    if q.query == "handshake":
        flags = pc.fill_null(pc.cast(rows["tcp_flags"], pa.int32()), 0)
        tcp = pc.fill_null(pc.equal(rows["proto"], 6), False)
        has_syn = pc.not_equal(pc.bit_wise_and(flags, _SYN), 0)
        has_ack = pc.not_equal(pc.bit_wise_and(flags, _ACK), 0)
        syn = pc.and_(pc.and_(tcp, has_syn), pc.invert(has_ack))
        syn_ack = pc.and_(pc.and_(tcp, has_syn), has_ack)
        # seq + 1 (mod 2^32): tcp_seq is 0 .. 2^32 - 1
        seq_next = pc.bit_wise_and(pc.add(rows["tcp_seq"], 1), _SEQ_MOD - 1)
        fwd = [rows[c] for c in ("src_ip", "dst_ip", "src_port", "dst_port")]
        rev = [rows[c] for c in ("dst_ip", "src_ip", "dst_port", "src_port")]
        return (syn, _key_text([*fwd, seq_next])), (syn_ack, _key_text([*rev, rows["tcp_ack"]]))
    from netmon.filters import parse_filter

    left_key = _key_text([rows[c] for c in parse_key(q.key)])
    right_key = _key_text([rows[c] for c in parse_key(q.right_key or q.key)])
    return (parse_filter(q.left).mask(rows), left_key), (parse_filter(q.right).mask(rows), right_key)


def stage_rows(rows: pa.Table, queries: tuple[JoinQuery, ...]) -> pa.Table:
    """Stage 1 of every query over decoded rows in pyarrow: ``query, is_left, ts, key, payload``.

    The rows :func:`build_staged` makes with Spark's functions, for the pipeline's join query,
    whose tasks decode the raw Kafka messages themselves (``pipeline.partials.decode_messages``).
    """
    parts = []
    for q in queries:
        for (mask, key), is_left in zip(_side_masks(rows, q), (True, False), strict=True):
            keep = pc.and_(pc.fill_null(mask, False), pc.is_valid(key))
            picked = rows.filter(keep)
            n = picked.num_rows
            parts.append(
                pa.table(
                    {
                        "query": pa.array([q.name] * n, pa.string()),
                        "is_left": pa.array([is_left] * n, pa.bool_()),
                        "ts": picked["ts"],
                        "key": key.filter(keep),
                        **{name: picked[name] for name in PAYLOAD},
                    }
                )
            )
    return pa.concat_tables(parts) if parts else pa.table({})


# -- Spark's own join, the reference of the equality test and the benchmark -----------------------
def build_spark_join(packets: DataFrame, q: JoinQuery) -> DataFrame:
    """Spark's stream-stream inner join of the query's two sides with the same time-range condition.

    ``l.key = r.key AND r.ts BETWEEN l.ts - T_R AND l.ts + T_L`` (inclusive, as the operator):
    without shedding both produce exactly the same rows (``RESULT_COLUMNS`` with ``row = "match"``).
    """
    left, right = build_join_sides(packets, q)
    t_left, t_right = (round(t * 1_000_000) for t in _windows(q))
    lhs = left.select(*(F.col(c).alias(f"left_{c}") for c in left.columns))
    rhs = right.select(*(F.col(c).alias(f"right_{c}") for c in right.columns))
    condition = (F.col("left_key") == F.col("right_key")) & F.col("right_ts").between(
        F.col("left_ts") - F.expr(f"INTERVAL {t_right} MICROSECONDS"),
        F.col("left_ts") + F.expr(f"INTERVAL {t_left} MICROSECONDS"),
    )
    joined = lhs.join(rhs, condition, "inner")
    return joined.select(
        F.lit(q.name).alias("query"),
        F.lit(q.query).alias("kind"),
        F.lit("match").alias("row"),
        F.col("left_key").alias("key"),
        "left_ts",
        "right_ts",
        ((F.unix_micros("right_ts") - F.unix_micros("left_ts")) / 1e6).alias("delay_s"),
        *(f"left_{c}" for c in PAYLOAD),
        *(f"right_{c}" for c in PAYLOAD),
    )


# -- the controller on the driver: the ``shedding`` kind ------------------------------------------
class SheddingListener(CommittingListener):
    """The ``shedding`` kind: the controller after each batch of the joins, and its rows.

    The joins run on the shared query (``pipeline.joins_batch``). At each progress of a query it
    follows (:meth:`follow`, told before the query starts, with its batch function) it reads the
    join queries' statistics of that batch (``BatchFigures.observed``) and calls
    :meth:`SheddingController.update` with them in the shape of Spark's progress (the batch's
    ``observedMetrics``, and as the batch's duration the joins kind's own seconds of it: the
    shared batch's other kinds are not the join's cost), replaces the control file ``control``
    with the new fractions and commits the batch's :class:`SheddingRecord` rows into ``results``
    (``pipeline.batch_sink.write_table``: ``batch-<id>/part-00000.parquet``, then
    ``_commits/<id>.json``, ``id`` the shared batch id). One commit per batch with join input:

    - a progress handed over twice is ignored the second time: the controller only takes batch
      ids newer than the last it saw;
    - a batch id committed before and handled again (by a new controller, say) rewrites that
      commit whole, never adds to it;
    - Spark reports a batch once, after the query committed it; a restarted query goes on with
      its checkpoint's batch ids, so its commits follow the earlier ones. A driver that dies
      between the batch's commit and this listener's loses that batch's row (the statistics are
      not part of the exactly-once contract; the join's output is).

    A progress of a query followed without a batch function (an older netmon's joins query, in
    tests) is read as Spark wrote it: its own observed metrics and duration.

    It counts what it committed since its controller was (re)started (``commits``, ``rows``,
    ``last_batch_id``, the time of the last commit ``seconds``) for the pipeline's status, and
    records the queries that ended: events arrive in order, so once a query run's end has been
    seen every progress of it has been handled (:meth:`drained`).
    """

    name = "shedding listener"

    def __init__(self, control: Path, results: Path, controller: SheddingController) -> None:
        super().__init__()
        self.control = control
        self.results = results
        self.controller = controller
        self._following: dict[str, Any] = {}

    def handle(self, progress: Mapping[str, Any]) -> list[SheddingRecord]:
        """Fold one progress (``json.loads`` of Spark's progress JSON) in; the records committed.

        None (an empty list) for another query's progress, a batch without join input, or a
        batch the controller has seen.
        """
        name = progress.get("name")
        if name not in self._following:
            return []
        source = self._following[name]
        if source is not None:
            figures = source.figures(int(progress.get("batchId", -1)))
            if figures is None or not figures.observed:
                return []
            progress = {
                "batchId": progress.get("batchId"),
                "timestamp": progress.get("timestamp"),
                "observedMetrics": figures.observed,
                "durationMs": {"triggerExecution": round(1000 * figures.seconds.get("joins", 0.0))},
                # the whole shared batch: the interval the join's budget is a share of
                "sharedBatchMs": (progress.get("durationMs") or {}).get("triggerExecution"),
            }
        with self._lock:
            started = time.perf_counter()
            records = self.controller.update(progress)
            if not records:
                return []
            batch_id = int(progress["batchId"])
            write_control(self.control, self.controller.state(), batch_id=batch_id)
            write_table(records_table(records), self.results, batch_id)
            self.commits += 1
            self.rows += len(records)
            self.last_batch_id = batch_id
            self.seconds = time.perf_counter() - started
            return records

    def follow(self, query: str, batch: Any = None) -> None:
        """Handle the progress of ``query`` from now on; ``batch``: its batch function (the shared
        query's, whose figures hold the joins kind's statistics), None to read the progress's own."""
        with self._lock:
            self._following[query] = batch

    def renew(self, controller: SheddingController) -> None:
        """Use ``controller`` from now on; the counts start again."""
        with self._lock:
            self.controller = controller
            self.commits, self.rows, self.last_batch_id, self.seconds = 0, 0, -1, 0.0

    def close(self) -> None:
        """Unregister from the session: the pipeline that started the ``shedding`` kind stops."""
        for key in [k for k, v in _LISTENERS.items() if v is self]:
            del _LISTENERS[key]
        super().close()

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's API
        try:
            self.handle(json.loads(event.progress.json))
        except Exception:  # a listener must never take the query down
            log.exception("shedding controller: progress not processed")


#: One listener per (session, data directory): restarting a pipeline renews its controller.
_LISTENERS: dict[tuple[int, str], SheddingListener] = {}


def start_shedding(spark: SparkSession, cfg: Config) -> SheddingListener:
    """Register (or renew) the listener that runs the shedding controller of ``cfg``'s joins query
    and commits its rows into ``results/shedding/``: the ``shedding`` result kind.

    The controller resumes from the control file's state (fractions, costs, clock).
    """
    queries, shedding = cfg.queries.join, cfg.shedding
    control = control_file(cfg)
    controller = SheddingController(
        [ControlledQuery(q.name, *_windows(q), q.strategy, q.cpu_share) for q in queries],
        cpu_budget=shedding.cpu_budget,
        budget_scope=shedding.budget_scope,
        trigger_s=cfg.pipeline.trigger_s,
        smoothing=shedding.smoothing,
        max_step=shedding.max_step,
        x_left=shedding.x_left,
        x_right=shedding.x_right,
        initial=read_control_state(control),
    )
    key = (id(spark), str(Path(cfg.paths.data_dir).resolve()))
    listener = _LISTENERS.get(key)
    if listener is None:
        listener = SheddingListener(control, results_dir(cfg, "shedding"), controller)
        spark.streams.addListener(listener)
        listener._session = spark
        _LISTENERS[key] = listener
    else:
        listener.renew(controller)
    return listener
