"""netmon's Spark Structured Streaming application: Kafka in, one query per result kind, Parquet out.

``start_pipeline`` starts the queries on a session; ``Pipeline`` follows their progress (per-batch
counts of packets, malformed records and late rows dropped by the watermark) and writes a small
status file the dashboard and ``netmon demo`` read.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from netmon.config import Config
from netmon.results import checkpoint_dir, results_dir, status_file
from pipeline.batch_sink import BatchOutput
from pipeline.publish import ResultPublisher
from pipeline.source import read_packets

__all__ = ["KINDS", "Pipeline", "start_pipeline"]

#: Result kinds and their builders: ``build(packets, cfg) -> {name: DataFrame | BatchOutput}``.
#: Each becomes one streaming query writing ``results/<kind>/`` (a single output) or
#: ``results/<kind>/<name>/`` (several), with its own checkpoint beside it: a DataFrame through
#: Spark's file sink, a ``BatchOutput`` through its own ``foreachBatch`` function.
KINDS: dict[str, str] = {
    "traffic": "pipeline.traffic:build_traffic_outputs",
    "topk": "pipeline.topk:build_topk_outputs",
    "distinct": "pipeline.distinct:build_distinct_outputs",
    "joins": "pipeline.joins:build_join_outputs",
    "shedding": "pipeline.joins:build_shedding_outputs",
}

log = logging.getLogger(__name__)


@dataclass
class QueryStats:
    batches: int = 0
    input_rows: int = 0
    packets: int = 0
    malformed: int = 0
    control: int = 0
    late_dropped: int = 0
    last_batch_ms: int = 0
    state_rows: int = 0
    last_batch_id: int = -1
    #: late rows counted by a batch function (part of late_dropped)
    late_in_batches: int = 0


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

    def poll(self) -> dict[str, QueryStats]:
        """Fold the queries' new progress reports into the totals; write the status file."""
        for name, query in self.queries.items():
            st = self.stats.setdefault(name, QueryStats())
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch <= st.last_batch_id:
                    continue
                st.last_batch_id = batch
                st.batches += 1
                st.input_rows += int(progress.get("numInputRows") or 0)
                st.last_batch_ms = int((progress.get("durationMs") or {}).get("triggerExecution", 0))
                observed = (progress.get("observedMetrics") or {}).get("decode")
                if observed:
                    st.packets += int(observed["packets"] or 0)
                    st.malformed += int(observed["malformed"] or 0)
                    st.control += int(observed["control"] or 0)
                ops = progress.get("stateOperators") or []
                st.late_dropped += sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in ops)
                st.state_rows = sum(int(op.get("numRowsTotal") or 0) for op in ops)
            late = int(getattr(self.batch_functions.get(name), "late_rows", 0))
            st.late_dropped += late - st.late_in_batches
            st.late_in_batches = late
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
                name: {**vars(st), "active": self.queries[name].isActive} for name, st in self.stats.items()
            },
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(path)

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
    """The started query, and its ``foreachBatch`` function (None with Spark's file sink)."""
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
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(cfg.pipeline.trigger_s * 1000)} milliseconds")
    return writer.start(), function


def _builder(kind: str):  # noqa: ANN202
    module, _, attr = KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), attr)


def start_pipeline(
    spark: SparkSession, cfg: Config, *, available_now: bool = False, kinds: tuple[str, ...] | None = None
) -> Pipeline:
    """Start the streaming queries of ``kinds`` (default ``[pipeline] kinds``).

    ``available_now`` processes what Kafka holds and stops.
    """
    Path(cfg.paths.data_dir).mkdir(parents=True, exist_ok=True)
    queries: dict[str, StreamingQuery] = {}
    functions: dict[str, Any] = {}
    for kind in kinds or cfg.pipeline.kinds:
        if kind not in KINDS:
            raise ValueError(f"[pipeline] kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        # Each query reads Kafka on its own: its offsets live in its own checkpoint.
        build = _builder(kind)
        # A kind that tracks event time itself also needs the watermark control rows.
        packets = read_packets(spark, cfg, keep_control=getattr(build, "keeps_control_rows", False))
        outputs = build(packets, cfg)
        single = len(outputs) == 1 and kind in outputs
        for name, df in outputs.items():
            queries[name], function = _start_query(
                df, cfg, kind, name, single=single, available_now=available_now
            )
            if function is not None:
                functions[name] = function
    log.info("pipeline started", extra={"queries": list(queries), "bootstrap": cfg.kafka.bootstrap})
    chosen = tuple(kinds or cfg.pipeline.kinds)
    publisher = ResultPublisher(cfg, chosen) if cfg.pipeline.publish_results else None
    return Pipeline(spark, cfg, queries, publisher=publisher, batch_functions=functions)
