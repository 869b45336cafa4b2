"""netmon's Spark Structured Streaming application: Kafka read once, every result kind on one batch.

``start_pipeline`` starts, on one session:

- **the shared query** (``packets``): one Kafka read and one decode (``pipeline.source``); each
  micro-batch is cached and handed to every *batch kind* in turn — traffic, top-k and distinct
  counts — each of which keeps its own state beside its checkpoint and commits its rows per batch
  (``pipeline.batch_sink``), so a batch that Spark runs again after a crash rewrites the same rows;
- **stream kinds** (the joins and their shedding statistics) as their own streaming queries: the
  join keeps its per-bucket state in Spark's state store (``transformWithStateInPandas``).

``Pipeline`` follows the queries' progress (per kind: packets, malformed records, late rows, its
share of the batch time) and writes a small status file the dashboard and ``netmon demo`` read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from netmon.config import RESULT_KINDS, Config
from netmon.results import checkpoint_dir, results_dir, status_file
from pipeline import distinct, joins, topk, traffic
from pipeline.batch_sink import BatchOutput
from pipeline.partials import CountSpec, merge_partials, partial_counts
from pipeline.publish import ResultPublisher
from pipeline.source import read_packets

__all__ = ["KINDS", "SHARED_QUERY", "Pipeline", "ResultKind", "SharedBatch", "start_pipeline"]

log = logging.getLogger(__name__)


class BatchFunction(Protocol):
    """A batch kind that reads the cached rows: ``function(batch, batch_id)`` commits its rows."""

    def __call__(self, df: DataFrame, batch_id: int, /) -> None: ...


class CountingKind(Protocol):
    """A batch kind fed by the shared stage-1 counts (``pipeline.partials``)."""

    @property
    def specs(self) -> tuple[CountSpec, ...]: ...

    def apply(self, counts: pa.Table, max_us: int | None, batch_id: int, /) -> None: ...


@dataclass(frozen=True)
class ResultKind:
    """How the pipeline runs a result kind; its rows go to ``results/<name>/``.

    Exactly one of ``batch`` (a function on the shared micro-batch, built from the config and
    the kind's results and checkpoint directories) and ``stream`` (its own streaming queries,
    built from the decoded packet stream: ``{name: DataFrame | BatchOutput}``) is set.
    """

    name: str
    batch: Callable[[Config, Path, Path], BatchFunction | CountingKind] | None = None
    stream: Callable[[DataFrame, Config], dict[str, Any]] | None = None
    #: does the kind have configured queries (else it is skipped)
    configured: Callable[[Config], bool] = lambda cfg: True


#: Every result kind, in the order a shared batch runs them.
KINDS: dict[str, ResultKind] = {
    kind.name: kind
    for kind in (
        ResultKind("traffic", batch=traffic.build_traffic_batch),
        ResultKind("topk", batch=topk.build_topk_batch, configured=lambda cfg: bool(cfg.queries.topk)),
        ResultKind(
            "distinct", batch=distinct.build_distinct_batch, configured=lambda cfg: bool(cfg.queries.distinct)
        ),
        ResultKind("joins", stream=joins.build_join_outputs),
        ResultKind("shedding", stream=joins.build_shedding_outputs),
    )
}
assert tuple(KINDS) == RESULT_KINDS, "pipeline.job.KINDS and netmon.config.RESULT_KINDS name the same kinds"

#: The query name of the shared Kafka read.
SHARED_QUERY = "packets"


class SharedBatch:
    """The ``foreachBatch`` function of the shared query: one cached batch for every batch kind.

    It receives the decoded lines with malformed ones flagged (``is_malformed``) and counts
    packets, control messages and malformed lines (``totals``, over this process's batches).
    The *counting* kinds (those with ``specs`` and ``apply``: traffic, top-k) get their stage-1
    counts from one pass over the batch (``pipeline.partials``); the others (distinct counts) get
    the well-formed rows, cached. ``seconds[kind]``: the kind's time in the last batch
    (``decode`` for the Kafka read, decode and counts, ``stage1`` for the shared counting pass).
    """

    def __init__(self, functions: dict[str, Any]) -> None:
        self.functions = dict(functions)
        self.counting = {n: f for n, f in self.functions.items() if hasattr(f, "specs")}
        self.seconds: dict[str, float] = {name: 0.0 for name in self.functions}
        #: each kind's (and the shared stage 1's, the decode's) time over this process's batches
        self.total_seconds: dict[str, float] = {}
        self.totals = {"packets": 0, "control": 0, "malformed": 0, "future": 0}

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # Decoded once from Kafka, then read from memory by every kind.
        started = time.perf_counter()
        lines = df.persist()
        try:
            good = ~F.col("is_malformed") & ~F.col("is_future")
            counted = lines.agg(
                F.count(F.when(good & ~F.col("is_control"), 1)).alias("packets"),
                F.count(F.when(good & F.col("is_control"), 1)).alias("control"),
                F.count(F.when(F.col("is_malformed"), 1)).alias("malformed"),
                F.count(F.when(F.col("is_future"), 1)).alias("future"),
            ).first()
            # Counted before the kinds run: their rows are visible as soon as each commits (a batch
            # that Spark runs again after a crash is counted again).
            if counted is not None:
                for key in self.totals:
                    self.totals[key] += int(counted[key] or 0)
            batch = lines.where(good).drop("is_malformed", "is_future")
            self.seconds["decode"] = time.perf_counter() - started
            if self.counting:
                started = time.perf_counter()
                specs = [spec for f in self.counting.values() for spec in f.specs]
                counts, max_us = merge_partials(partial_counts(batch, specs))
                self.seconds["stage1"] = time.perf_counter() - started
                for name, function in self.counting.items():
                    started = time.perf_counter()
                    mine = pc.is_in(counts["query"], pa.array([s.name for s in function.specs]))
                    function.apply(counts.filter(mine), max_us, batch_id)
                    self.seconds[name] = time.perf_counter() - started
            for name, function in self.functions.items():
                if name in self.counting:
                    continue
                started = time.perf_counter()
                function(batch, batch_id)
                self.seconds[name] = time.perf_counter() - started
            for name, spent in self.seconds.items():
                self.total_seconds[name] = self.total_seconds.get(name, 0.0) + spent
        finally:
            lines.unpersist()


@dataclass
class QueryStats:
    batches: int = 0
    input_rows: int = 0
    packets: int = 0
    malformed: int = 0
    control: int = 0
    #: records and control messages dropped for an event time too far ahead ([pipeline] max_future_s)
    future: int = 0
    late_dropped: int = 0
    last_batch_ms: int = 0
    state_rows: int = 0
    last_batch_id: int = -1
    #: late rows counted by a batch function (part of late_dropped)
    late_in_batches: int = 0
    #: the progress event last folded in (its trigger time; idle events share batch ids)
    last_timestamp: str = ""
    #: a batch kind's own time in the last batch of the shared query
    kind_ms: int = 0


@dataclass
class Pipeline:
    spark: SparkSession
    cfg: Config
    queries: dict[str, StreamingQuery]
    stats: dict[str, QueryStats] = field(default_factory=dict)
    #: republishes committed results to Kafka topics ``netmon.<kind>`` (None: Parquet only)
    publisher: ResultPublisher | None = None
    #: the ``foreachBatch`` functions of ``BatchOutput`` queries; a ``late_rows`` counter of theirs
    #: is added to ``late_dropped`` (they drop late rows themselves, not a state store)
    batch_functions: dict[str, Any] = field(default_factory=dict)
    #: query name -> the kinds whose statistics its progress feeds (default: the query's own name)
    feeds: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def poll(self) -> dict[str, QueryStats]:
        """Fold the queries' new progress reports into the totals; write the status file.

        Every progress event counts once, idle ones included: Spark reports an idle trigger with
        the id of the next batch, so events are told apart by their trigger time, not batch id.
        """
        for name, query in self.queries.items():
            for kind in self.feeds.get(name, (name,)):
                st = self.stats.setdefault(kind, QueryStats())
                for progress in query.recentProgress:
                    stamp = str(progress.get("timestamp") or "")
                    if stamp <= st.last_timestamp:
                        continue
                    st.last_timestamp = stamp
                    st.last_batch_id = max(st.last_batch_id, int(progress["batchId"]))
                    durations = progress.get("durationMs") or {}
                    if "addBatch" in durations:  # a batch ran (an idle trigger has no addBatch)
                        st.batches += 1
                        st.last_batch_ms = int(durations.get("triggerExecution", 0))
                    st.input_rows += int(progress.get("numInputRows") or 0)
                    observed = (progress.get("observedMetrics") or {}).get("decode")
                    if observed:
                        st.packets += int(observed["packets"] or 0)
                        st.malformed += int(observed["malformed"] or 0)
                        st.control += int(observed["control"] or 0)
                        st.future += int(observed["future"] or 0)
                    ops = progress.get("stateOperators") or []
                    st.late_dropped += sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in ops)
                    if ops:
                        st.state_rows = sum(int(op.get("numRowsTotal") or 0) for op in ops)
                function = self.batch_functions.get(kind)
                late = int(getattr(function, "late_rows", 0))
                st.late_dropped += late - st.late_in_batches
                st.late_in_batches = late
                shared = self.batch_functions.get(name)
                if isinstance(shared, SharedBatch) and kind in shared.seconds:
                    st.kind_ms = round(shared.seconds[kind] * 1000)
                    # The shared query's decode counts (not reported through observe()).
                    st.packets, st.control, st.malformed, st.future = (
                        shared.totals["packets"],
                        shared.totals["control"],
                        shared.totals["malformed"],
                        shared.totals["future"],
                    )
        if self.publisher is not None:
            self.publisher.publish()
        self._write_status()
        return self.stats

    def _write_status(self) -> None:
        path = status_file(self.cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        body: dict[str, Any] = {
            "updated": time.time(),
            "queries": {
                name: {**vars(st), "active": self._query_of(name).isActive} for name, st in self.stats.items()
            },
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(path)

    def _query_of(self, kind: str) -> StreamingQuery:
        for name, kinds in self.feeds.items():
            if kind in kinds:
                return self.queries[name]
        return self.queries[kind]

    def failed(self) -> str | None:
        """The first query's exception message, if any query died."""
        for name, query in self.queries.items():
            exc = query.exception()
            if exc is not None:
                return f"{name}: {str(exc).splitlines()[0]}"
        return None

    @property
    def active(self) -> bool:
        return any(q.isActive for q in self.queries.values())

    def process_all_available(self) -> None:
        for query in self.queries.values():
            query.processAllAvailable()

    def await_termination(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for query in self.queries.values():
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            # pyspark annotates the timeout as int, yet takes float seconds (it waits int(timeout * 1000) ms)
            query.awaitTermination(cast(int | None, left))

    def stop(self) -> None:
        for query in self.queries.values():
            query.stop()
        self.poll()
        if self.publisher is not None:
            self.publisher.close()


def _start_query(
    df: DataFrame | BatchOutput, cfg: Config, kind: str, name: str, *, single: bool, available_now: bool
) -> tuple[StreamingQuery, Any]:
    """A stream kind's started query, and its ``foreachBatch`` function (None with Spark's file sink)."""
    out = results_dir(cfg, kind) if single else results_dir(cfg, kind) / name
    checkpoint = checkpoint_dir(cfg, kind) if single else checkpoint_dir(cfg, kind) / name
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(df, BatchOutput):
        # Its last stages run on each micro-batch and commit their own files (pipeline.batch_sink).
        writer, function = df.attach(df.df.writeStream.queryName(name).outputMode("append"), out, checkpoint)
        writer = writer.option("checkpointLocation", str(checkpoint))
    else:
        function = None
        writer = (
            df.writeStream.queryName(name)
            .format("parquet")
            .outputMode("append")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
        )
    return _triggered(writer, cfg, available_now).start(), function


def _triggered(writer: Any, cfg: Config, available_now: bool) -> Any:
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{int(cfg.pipeline.trigger_s * 1000)} milliseconds")


def start_pipeline(
    spark: SparkSession, cfg: Config, *, available_now: bool = False, kinds: tuple[str, ...] | None = None
) -> Pipeline:
    """Start the shared query (batch kinds) and the stream kinds of ``kinds`` (default ``[pipeline] kinds``).

    ``available_now`` processes what Kafka holds and stops.
    """
    Path(cfg.paths.data_dir).mkdir(parents=True, exist_ok=True)
    chosen = tuple(kinds or cfg.pipeline.kinds)
    for kind in chosen:
        if kind not in KINDS:
            raise ValueError(f"[pipeline] kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    queries: dict[str, StreamingQuery] = {}
    functions: dict[str, Any] = {}
    feeds: dict[str, tuple[str, ...]] = {}
    # The batch kinds: one Kafka read and decode, every kind on the cached batch.
    shared = {
        k.name: k.batch(cfg, _dir(results_dir(cfg, k.name)), _dir(checkpoint_dir(cfg, k.name)))
        for k in KINDS.values()
        if k.name in chosen and k.batch is not None and k.configured(cfg)
    }
    if shared:
        batch = SharedBatch(shared)
        packets = read_packets(spark, cfg, keep_control=True, keep_malformed=True)
        writer = (
            packets.writeStream.queryName(SHARED_QUERY)
            .foreachBatch(batch)
            .option("checkpointLocation", str(checkpoint_dir(cfg, SHARED_QUERY)))
        )
        queries[SHARED_QUERY] = _triggered(writer, cfg, available_now).start()
        functions |= {SHARED_QUERY: batch, **shared}
        feeds[SHARED_QUERY] = tuple(shared)
    # The stream kinds: each its own queries (the join's state lives in Spark's state store).
    for stream_kind in (k for k in KINDS.values() if k.name in chosen and k.stream is not None):
        assert stream_kind.stream is not None
        outputs = stream_kind.stream(read_packets(spark, cfg), cfg)
        single = len(outputs) == 1 and stream_kind.name in outputs
        for name, df in outputs.items():
            queries[name], function = _start_query(
                df, cfg, stream_kind.name, name, single=single, available_now=available_now
            )
            if function is not None:
                functions[name] = function
    log.info("pipeline started", extra={"queries": list(queries), "bootstrap": cfg.kafka.bootstrap})
    publisher = ResultPublisher(cfg, chosen) if cfg.pipeline.publish_results else None
    return Pipeline(spark, cfg, queries, publisher=publisher, batch_functions=functions, feeds=feeds)


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
