"""The ``sys`` result kind: the pipeline's own statistics, published as data (seed 002 §6.1).

STREAM keeps every plan element's statistics in a Control Table and monitored itself with
continuous queries over an internal system stream. Here every micro-batch of every pipeline
query — the shared query ``packets``, which runs every kind — becomes one row of
``results/sys/<query>/``, republished on the Kafka topic ``<prefix>sys`` like every kind, so
alert rules can watch the pipeline itself (the built-in ``pipeline-lag``: ``backlog_s > 30`` for
a minute) and the dashboard's Resources page plots it beside the cost model's estimates.

A :class:`SysListener` on the driver (no query of its own) turns each progress event of a
followed query into one row (:func:`sys_row`) and commits it with ``pipeline.batch_sink``:
``results/sys/<query>/batch-<id>/part-00000.parquet``, then ``_commits/<id>.json``, ``<id>`` the
query's own batch id. A batch Spark runs again after a crash is reported again (by a new
listener) and rewrites its commit whole: one row per (query, batch).

What a row holds (``docs/results.md`` names every column and its unit):

- from the progress: the trigger time, input messages and Spark's input and processed rates,
  the batch's duration, the state store's rows and bytes, and the Kafka lag — per source, the
  ``latestOffset`` Spark saw minus the batch's ``endOffset``, summed over partitions
  (:func:`kafka_lag`);
- for the shared query, from its batch function (:class:`BatchFigures`, which
  ``pipeline.job.SharedBatch`` keeps per batch id): the packets decoded, the newest event time
  read and each batch kind's own seconds;
- for the join queries, from the joins kind's statistics of the batch (``join.<query>``, in
  :attr:`BatchFigures.observed`; the observed metrics of an older netmon's joins query are read
  the same way): the newest event time, the tuples held in the join's windows and the shedding
  fractions the batch applied (the control file's, ``pipeline.joins.control_file``, or the
  static ``[shedding]`` ones, for a join query without input in the batch);
- the knobs in force: ``[pipeline] trigger_s``, ``watermark_s`` and the Kafka messages a batch
  may read.

Idle triggers are skipped: a progress without ``addBatch`` in ``durationMs`` ran no batch and
carries the id of the batch to come; committed, it would be replaced by that batch's row (or
stand for a batch that never ran), and an idle pipeline would write a file per query every
trigger to say nothing happened. A malformed progress (no query name, batch id, trigger time or
durations; a value of the wrong type) is skipped and counted (``malformed``; the first one is
logged with its error): a listener must never take the pipeline down. A progress that lacks
other figures gives nulls in their columns.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import SparkSession

from netmon.config import Config
from netmon.results import SHARED_QUERY, results_dir
from pipeline.batch_sink import CommittingListener, write_table
from pipeline.joins import control_file
from pipeline.partials import INTAKE
from pipeline.shedding_controller import observe_name, read_control

__all__ = [
    "BATCH_KIND_SECONDS",
    "SYS_SCHEMA",
    "BatchFigures",
    "FiguresSource",
    "Knobs",
    "SysListener",
    "kafka_lag",
    "start_sys",
    "sys_row",
    "sys_table",
]

log = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
_UTC_US = pa.timestamp("us", tz="UTC")

#: The shared query's parts whose seconds a row carries (``SharedBatch.seconds``): ``stage1`` (the
#: Kafka read, decode and every kind's stage 1) and each batch kind's own step.
BATCH_KIND_SECONDS = ("stage1", "traffic", "topk", "distinct", "features", "joins")
#: The batch kinds whose state rows the ``sys`` rows record (the joins': ``join_state_rows``).
STATE_KINDS = ("traffic", "topk", "distinct")

#: The columns of ``results/sys/`` (``docs/results.md``, "sys").
SYS_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("batch_id", pa.int64()),
        ("batch_time", _UTC_US),
        ("max_event_time", _UTC_US),
        ("lag_s", pa.float64()),
        ("lag_messages", pa.int64()),
        ("backlog_s", pa.float64()),
        ("input_messages", pa.int64()),
        ("packets", pa.int64()),
        ("input_messages_per_s", pa.float64()),
        ("processed_messages_per_s", pa.float64()),
        ("packets_per_s", pa.float64()),
        ("batch_ms", pa.int64()),
        ("batch_utilisation", pa.float64()),
        *((f"{part}_s", pa.float64()) for part in BATCH_KIND_SECONDS),
        ("state_rows", pa.int64()),
        ("state_bytes", pa.int64()),
        ("join_state_rows", pa.int64()),
        ("trigger_s", pa.float64()),
        ("watermark_s", pa.float64()),
        ("max_batch_messages", pa.int64()),
        ("shed_x_left", pa.float64()),
        ("shed_x_right", pa.float64()),
        ("shed_fractions", pa.string()),
        ("sample_keep", pa.float64()),
        ("sample_fractions", pa.string()),
        # the intake drop box (before the decode): its fraction and the records it skipped
        ("intake", pa.float64()),
        ("sampled", pa.int64()),
        # the state each batch kind holds in its own files after the batch (the cost model's
        # state rows, compared by ``netmon explain``)
        *((f"{kind}_state_rows", pa.int64()) for kind in STATE_KINDS),
    ]
)


@dataclass(frozen=True)
class BatchFigures:
    """What the shared query's batch function measured of one micro-batch.

    ``packets``: the records it read (late ones included, and those the intake drop box skipped:
    ``sampled``, so that the rate is the input's); ``newest_ns``: the newest event time
    of the Kafka partitions it read (records and watermark control messages; None without any);
    ``seconds``: each part's own time (:data:`BATCH_KIND_SECONDS`).
    """

    packets: int
    newest_ns: int | None
    seconds: Mapping[str, float] = field(default_factory=dict)
    #: the drop boxes' fractions the batch applied, per top-k query (``pipeline.resource_manager``)
    keep: Mapping[str, float] = field(default_factory=dict)
    #: the join queries' statistics of the batch (``observe_name(query)`` -> sums), when the
    #: joins kind ran on it (``pipeline.joins_batch``); None when it did not
    observed: Mapping[str, Mapping[str, Any]] | None = None
    #: records the intake drop box skipped before the decode (a part of ``packets``)
    sampled: int = 0
    #: rows of state each kind holds after the batch (:data:`STATE_KINDS`; absent: not run)
    state: Mapping[str, int] = field(default_factory=dict)


class FiguresSource(Protocol):
    """A query's batch function that keeps :class:`BatchFigures` per batch id (``SharedBatch``)."""

    def figures(self, batch_id: int, /) -> BatchFigures | None: ...


@dataclass(frozen=True)
class Knobs:
    """The settings in force, recorded on every row so a change between runs shows over time.

    ``shared_batch_messages``: the Kafka messages a batch of the shared query may read (``[spark]
    max_offsets_per_trigger``, else ``[pipeline] max_batch_messages``); ``stream_batch_messages``:
    those of a stream kind's query (``[spark] max_offsets_per_trigger``); 0: no cap. For the
    joins' fractions: each join query's strategy, the static ``[shedding]`` fractions and the
    controller's control file.
    """

    trigger_s: float
    watermark_s: float
    shared_batch_messages: int
    stream_batch_messages: int = 0
    join_strategies: Mapping[str, str] = field(default_factory=dict)
    static_fractions: tuple[float, float] = (1.0, 1.0)
    control: Path | None = None

    @classmethod
    def of(cls, cfg: Config) -> Knobs:
        """The knobs of ``cfg``."""
        cap = cfg.spark.max_offsets_per_trigger
        return cls(
            trigger_s=cfg.pipeline.trigger_s,
            watermark_s=cfg.pipeline.watermark_s,
            shared_batch_messages=cap or cfg.pipeline.max_batch_messages,
            stream_batch_messages=cap,
            join_strategies={q.name: q.strategy for q in cfg.queries.join},
            static_fractions=(cfg.shedding.x_left, cfg.shedding.x_right),
            control=control_file(cfg),
        )

    def batch_cap(self, query: str) -> int:
        """The messages a batch of ``query`` may read (0: no cap)."""
        return self.shared_batch_messages if query == SHARED_QUERY else self.stream_batch_messages


class _Malformed(ValueError):
    """The progress lacks what a row needs, or holds a value of the wrong type."""


def _time(value: Any, what: str) -> dt.datetime:
    if not isinstance(value, str):
        raise _Malformed(f"{what}: expected an ISO-8601 time, got {type(value).__name__}")
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _Malformed(f"{what}: not a time: {value[:40]!r}") from None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.UTC)


def _timestamp(ns: int) -> dt.datetime | None:
    """Nanoseconds since the epoch as a UTC time (microseconds); None beyond year 9999."""
    try:
        return _EPOCH + ns // 1000 * _US
    except OverflowError:
        return None


def _int(value: Any, what: str) -> int | None:
    """An integer count (None: absent); a float is taken when whole, a numeric string too (the
    JSON of Spark's ``metrics`` maps holds strings)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Malformed(f"{what}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise _Malformed(f"{what}: expected an integer, got {str(value)[:40]!r}")


def _float(value: Any, what: str) -> float | None:
    """A finite number (None: absent, NaN or infinite)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Malformed(f"{what}: expected a number, got {str(value)[:40]!r}")
    try:
        number = float(value)
    except ValueError:
        raise _Malformed(f"{what}: expected a number, got {str(value)[:40]!r}") from None
    return number if math.isfinite(number) else None


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Malformed(f"{what}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{what}: expected a list, got {type(value).__name__}")
    return value


def _offsets(value: Any) -> dict[tuple[str, str], int] | None:
    """A Kafka source's offsets (``{topic: {partition: offset}}``, an object or its JSON text) by
    (topic, partition); None when it is absent or not Kafka's form."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    out: dict[tuple[str, str], int] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping):
            return None
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                return None
            out[(str(topic), str(partition))] = offset
    return out


def kafka_lag(sources: list[Any]) -> int | None:
    """Kafka messages left behind by a batch: over every source and partition, ``latestOffset``
    (the newest offset Spark saw when it planned the batch) minus the batch's ``endOffset``, at
    least 0; None when no source reports both in Kafka's form.

    A partition only one of them names (one added meanwhile) is not counted.

    >>> kafka_lag([{"endOffset": {"t": {"0": 10, "1": 7}}, "latestOffset": '{"t": {"0": 25, "1": 7}}'}])
    15
    >>> kafka_lag([{"endOffset": {"t": {"0": 10}}, "latestOffset": None}]) is None
    True
    """
    total: int | None = None
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        total = (total or 0) + sum(max(0, latest[tp] - end[tp]) for tp in end.keys() & latest.keys())
    return total


def _join_metrics(observed: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The join queries' observed sums of the batch, by join query name."""
    prefix = observe_name("")
    return {
        name.removeprefix(prefix): _mapping(m, f"observedMetrics.{name}")
        for name, m in observed.items()
        if name.startswith(prefix)
    }


def _fractions(joins: Mapping[str, Mapping[str, Any]], knobs: Knobs) -> dict[str, tuple[float, float]]:
    """The shedding fractions each join query applied in the batch: its observed ``x_left`` /
    ``x_right`` (an older netmon's joins query: the mean over its buckets), else — no
    input in the batch — the control file's, else the static ``[shedding]`` ones; 1 without
    shedding (strategy ``none``)."""
    control: dict[str, tuple[float, float]] | None = None
    out: dict[str, tuple[float, float]] = {}
    for name, strategy in knobs.join_strategies.items():
        if strategy == "none":
            out[name] = (1.0, 1.0)
            continue
        m = joins.get(name) or {}
        x_left, x_right = _float(m.get("x_left"), "x_left"), _float(m.get("x_right"), "x_right")
        if x_left is not None and x_right is not None:
            out[name] = (x_left, x_right)
            continue
        if control is None:
            control = read_control(knobs.control) if knobs.control is not None else {}
        out[name] = control.get(name, knobs.static_fractions)
    return out


def sys_row(
    progress: Mapping[str, Any], knobs: Knobs, figures: BatchFigures | None = None
) -> dict[str, Any] | None:
    """The ``sys`` row of one progress event (``json.loads`` of Spark's progress JSON); None for
    an idle trigger (no ``addBatch`` in ``durationMs``).

    ``figures``: the shared query's own measurements of that batch. Raises ``ValueError`` when
    the progress lacks its query name, batch id, trigger time or durations, or holds a value of
    the wrong type.
    """
    if not isinstance(progress, Mapping):
        raise _Malformed(f"progress: expected an object, got {type(progress).__name__}")
    query = progress.get("name")
    if not isinstance(query, str) or not query:
        raise _Malformed("name: the progress names no query")
    batch_id = _int(progress.get("batchId"), "batchId")
    if batch_id is None or batch_id < 0:
        raise _Malformed("batchId: missing")
    batch_time = _time(progress.get("timestamp"), "timestamp")
    if "durationMs" not in progress:
        raise _Malformed("durationMs: missing")
    durations = _mapping(progress.get("durationMs"), "durationMs")
    if "addBatch" not in durations:
        return None  # an idle trigger: no batch ran
    batch_ms = _int(durations.get("triggerExecution"), "durationMs.triggerExecution")
    messages = _int(progress.get("numInputRows"), "numInputRows")
    input_rate = _float(progress.get("inputRowsPerSecond"), "inputRowsPerSecond")
    processed_rate = _float(progress.get("processedRowsPerSecond"), "processedRowsPerSecond")
    sources = _list(progress.get("sources"), "sources")
    lag_messages = kafka_lag(sources)
    ops = [_mapping(op, "stateOperators[]") for op in _list(progress.get("stateOperators"), "stateOperators")]
    state_rows = state_bytes = None
    if ops:
        state_rows = sum(_int(op.get("numRowsTotal"), "numRowsTotal") or 0 for op in ops)
        state_bytes = sum(_int(op.get("memoryUsedBytes"), "memoryUsedBytes") or 0 for op in ops)
    joins = _join_metrics(_mapping(progress.get("observedMetrics"), "observedMetrics"))
    joins_here = figures is not None and figures.observed is not None
    if figures is not None and figures.observed:
        joins |= _join_metrics(figures.observed)

    # The newest event time the batch read: the batch function's, Spark's (a watermarked
    # query), the join operator's.
    newest: list[int] = []
    if figures is not None and figures.newest_ns is not None:
        newest.append(int(figures.newest_ns))
    spark_max = _mapping(progress.get("eventTime"), "eventTime").get("max")
    if spark_max is not None:
        newest.append((_time(spark_max, "eventTime.max") - _EPOCH) // _US * 1000)
    for name, m in joins.items():
        ns = _int(m.get("max_ts_ns"), f"join.{name}.max_ts_ns")
        if ns is not None:
            newest.append(ns)
    max_event_time = _timestamp(max(newest)) if newest else None
    packets = figures.packets if figures is not None else None
    # Spark's input rate is the batch's messages over the time since the previous trigger: the
    # packets over that same time. A query's first batch has no previous trigger (Spark says 0).
    packets_per_s = None
    if packets is not None and input_rate is not None:
        if not messages:
            packets_per_s = 0.0
        elif input_rate > 0:
            packets_per_s = packets * input_rate / messages
    join_state = None
    if joins:
        join_state = sum(
            (_int(m.get("state_left"), "state_left") or 0) + (_int(m.get("state_right"), "state_right") or 0)
            for m in joins.values()
        )
    shedding_here = (query != SHARED_QUERY or joins_here) and knobs.join_strategies
    fractions = _fractions(joins, knobs) if shedding_here else {}
    seconds = dict(figures.seconds) if figures is not None else {}
    sampled = {name: float(x) for name, x in figures.keep.items() if x < 1} if figures is not None else {}
    return {
        "query": query,
        "batch_id": batch_id,
        "batch_time": batch_time.astimezone(dt.UTC),
        "max_event_time": max_event_time,
        "lag_s": (batch_time - max_event_time).total_seconds() if max_event_time is not None else None,
        "lag_messages": lag_messages,
        "backlog_s": (
            lag_messages / processed_rate
            if lag_messages is not None and processed_rate
            else (0.0 if lag_messages == 0 else None)
        ),
        "input_messages": messages,
        "packets": packets,
        "input_messages_per_s": input_rate,
        "processed_messages_per_s": processed_rate,
        "packets_per_s": packets_per_s,
        "batch_ms": batch_ms,
        "batch_utilisation": batch_ms / 1000 / knobs.trigger_s if batch_ms is not None else None,
        **{f"{part}_s": _float(seconds.get(part), part) for part in BATCH_KIND_SECONDS},
        "state_rows": state_rows,
        "state_bytes": state_bytes,
        "join_state_rows": join_state,
        "trigger_s": knobs.trigger_s,
        "watermark_s": knobs.watermark_s,
        "max_batch_messages": knobs.batch_cap(query),
        "shed_x_left": min(x for x, _ in fractions.values()) if fractions else None,
        "shed_x_right": min(x for _, x in fractions.values()) if fractions else None,
        "shed_fractions": (
            json.dumps({name: list(x) for name, x in sorted(fractions.items())}, separators=(",", ":"))
            if fractions
            else None
        ),
        "sample_keep": min(sampled.values(), default=1.0) if figures is not None else None,
        "sample_fractions": (
            json.dumps(dict(sorted(sampled.items())), separators=(",", ":")) if sampled else None
        ),
        "intake": float(figures.keep.get(INTAKE, 1.0)) if figures is not None else None,
        "sampled": figures.sampled if figures is not None else None,
        **{
            f"{kind}_state_rows": (figures.state.get(kind) if figures is not None else None)
            for kind in STATE_KINDS
        },
    }


def sys_table(rows: list[dict[str, Any]]) -> pa.Table:
    """``sys`` rows as a table of :data:`SYS_SCHEMA`.

    >>> sys_table([]).schema.field("batch_time").type
    TimestampType(timestamp[us, tz=UTC])
    """
    return pa.Table.from_pylist(rows, schema=SYS_SCHEMA)


class SysListener(CommittingListener):
    """The ``sys`` kind: one row per micro-batch of each followed query, committed per batch.

    The pipeline tells it which queries to follow (:meth:`follow`, before each starts); other
    queries' events are ignored. Per followed query, a progress is committed into
    ``results/<query>/`` (``pipeline.batch_sink.write_table``) under the query's batch id:

    - a progress whose batch this listener already committed (the same event handed over
      twice) is ignored;
    - a batch handled again by a new listener (a restarted driver, a batch Spark ran again after
      a crash) rewrites its commit whole, never adds to it;
    - idle triggers are skipped (``idle``) and malformed progress is skipped and counted
      (``malformed``), the first one logged.

    Like ``pipeline.joins.SheddingListener`` it counts its commits for the pipeline's status
    (``commits``, ``rows``, ``last_batch_id``, the time of the last commit ``seconds``) and
    records the query runs that ended (:meth:`drained`).
    """

    name = "sys listener"

    def __init__(self, results: Path, knobs: Knobs) -> None:
        super().__init__()
        self.results = Path(results)
        self.knobs = knobs
        #: progress events skipped: idle triggers, malformed ones
        self.idle = 0
        self.malformed = 0
        self._following: dict[str, FiguresSource | None] = {}
        #: query -> the newest batch id committed
        self._committed: dict[str, int] = {}

    def follow(self, query: str, batch: FiguresSource | None = None) -> None:
        """Commit the batches of ``query`` from now on; ``batch``: its batch function's figures."""
        with self._lock:
            self._following[query] = batch

    @property
    def queries(self) -> tuple[str, ...]:
        """The queries it follows."""
        return tuple(self._following)

    def handle(self, progress: Mapping[str, Any]) -> dict[str, Any] | None:
        """Fold one progress in; the row committed, or None (another query's progress, an idle
        trigger, a batch committed before, a malformed progress)."""
        started = time.perf_counter()
        with self._lock:
            try:
                if not isinstance(progress, Mapping):
                    raise _Malformed(f"progress: expected an object, got {type(progress).__name__}")
                query = progress.get("name")
                if query not in self._following:
                    return None
                batch_id = _int(progress.get("batchId"), "batchId")
                if batch_id is not None and batch_id <= self._committed.get(str(query), -1):
                    return None
                source = self._following[str(query)]
                figures = source.figures(batch_id) if source is not None and batch_id is not None else None
                row = sys_row(progress, self.knobs, figures)
                # A value out of its column's range (an integer beyond int64) is malformed too.
                table = sys_table([row]) if row is not None else None
            except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as exc:
                self._skip(exc)
                return None
            if row is None or table is None:
                self.idle += 1
                return None
            write_table(table, self.results / row["query"], row["batch_id"])
            self._committed[row["query"]] = row["batch_id"]
            self.commits += 1
            self.rows += 1
            self.last_batch_id = row["batch_id"]
            self.seconds = time.perf_counter() - started
            return row

    def _skip(self, exc: Exception) -> None:
        self.malformed += 1
        if self.malformed == 1:
            log.warning("sys: a malformed progress skipped (later ones are counted)", exc_info=exc)
        else:
            log.debug("sys: a malformed progress skipped", extra={"malformed": self.malformed})

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's API
        try:
            progress = json.loads(event.progress.json)
        except Exception as exc:  # noqa: BLE001 - a listener must never take the query down
            with self._lock:
                self._skip(exc)
            return
        try:
            self.handle(progress)
        except Exception:  # a full disk, say: never take the query down
            log.exception("sys: progress not committed")


def start_sys(spark: SparkSession, cfg: Config) -> SysListener:
    """Register the listener of the ``sys`` result kind on ``spark``: rows into ``results/sys/``.

    It follows no query until the pipeline names them (:meth:`SysListener.follow`).
    """
    listener = SysListener(results_dir(cfg, "sys"), Knobs.of(cfg))
    spark.streams.addListener(listener)
    listener._session = spark
    return listener
