"""netmon's Spark Structured Streaming application: Kafka read once, every result kind on one batch.

``start_pipeline`` starts, on one session:

- **the shared query** (``packets``): one Kafka read and one decode (``pipeline.source``); each
  micro-batch is handed to every *batch kind* in turn — traffic, top-k and distinct counts, the
  detection features and the window joins — each of which keeps its own state beside its
  checkpoint and commits its rows per batch (``pipeline.batch_sink``), so a batch that Spark runs
  again after a crash rewrites the same rows;
- **stream kinds** as their own streaming queries (none by default since the joins joined the
  shared query, ``pipeline.joins_batch``; the registry keeps the variant);
- **listener kinds** without a query: a listener on the driver follows the queries of other
  kinds and commits its rows per micro-batch of each — the joins' shedding statistics
  (``pipeline.joins.SheddingListener``), the pipeline's own statistics ``sys`` (every query,
  ``pipeline.sys_stats``).

``Pipeline`` follows the queries' progress (per kind: packets, malformed records, late rows, its
share of the batch time) and writes a small status file the dashboard and ``netmon demo`` read.

Operations (docs/reliability.md, section 2):

- **broker outage**: Spark's Kafka source waits out a short one by itself (about three minutes of
  retries). A query that dies of a longer one (its error names Kafka's client: a timeout, a lost
  connection) is started again from its checkpoint by :meth:`Pipeline.poll` as soon as the broker
  answers again, counted in ``restarts`` and logged; meanwhile :meth:`Pipeline.failed` does not
  report it. A query that keeps dying without a batch in between is a failure after
  :data:`MAX_OUTAGE_RESTARTS` restarts.
- **stop**: :meth:`Pipeline.stop` lets a running batch function finish (up to ``grace_s``) before
  it stops the queries; a batch cut short fails with a short :class:`BatchStopped` that Spark takes
  for the stop it is (:class:`StoppableBatch` says why a long error would not do).
- **reset**: :func:`reset_kinds` removes a kind's results and state (``netmon pipeline --reset``);
  one pipeline at a time runs on a data directory (a lock, ``<data>/pipeline.lock``), and a reset
  waits for none.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from netmon import pidlock
from netmon.config import RESULT_KINDS, Config
from netmon.results import PIPELINE_LOCK, SHARED_QUERY, checkpoint_dir, results_dir, status_file
from pipeline import distinct, features, joins, joins_batch, sys_stats, topk, traffic
from pipeline.batch_sink import BatchOutput
from pipeline.batch_state import BatchState
from pipeline.partials import INTAKE, TOTALS, Spec, merge_partials, newest_of, raw_partials, totals_of
from pipeline.publish import ResultPublisher
from pipeline.resource_manager import ResourceManager, admit
from pipeline.retention import Maintainer, apply_topic_retention
from pipeline.source import kafka_stream, raw_messages

__all__ = [
    "ALL",
    "KINDS",
    "LISTENER_DRAIN_S",
    "LOCK_FILE",
    "MAX_OUTAGE_RESTARTS",
    "SHARED_QUERY",
    "STOP_GRACE_S",
    "BatchStopped",
    "KindListener",
    "Pipeline",
    "PipelineRunning",
    "ResultKind",
    "SharedBatch",
    "StoppableBatch",
    "file_sink_options",
    "is_broker_outage",
    "reset_kinds",
    "reset_set",
    "reset_plan",
    "start_pipeline",
]

log = logging.getLogger(__name__)


class KindListener(Protocol):
    """What the pipeline reads of a listener kind's listener (``pipeline.joins.SheddingListener``,
    ``pipeline.sys_stats.SysListener``)."""

    #: batches committed, their rows, the id of the last, the time the last commit took
    commits: int
    rows: int
    last_batch_id: int
    seconds: float

    def follow(self, query: str, batch: Any = None, /) -> None:
        """Handle the progress of ``query`` from now on (told before it starts); ``batch``: its
        batch function, when it is the shared query (``SharedBatch.figures``)."""
        ...

    def drained(self, run_id: str, timeout_s: float, /) -> bool:
        """Whether every progress of that run of the followed query was handled (waits)."""
        ...

    def close(self) -> None:
        """Stop following (unregister from the session)."""
        ...


class CountingKind(Protocol):
    """A batch kind fed by the shared stage 1 (``pipeline.partials``): its specs' partial rows."""

    @property
    def specs(self) -> tuple[Spec, ...]: ...

    def apply(self, counts: pa.Table, max_us: int | None, batch_id: int, /) -> None: ...


@dataclass(frozen=True)
class ResultKind:
    """How the pipeline runs a result kind; its rows go to ``results/<name>/``.

    Exactly one of these is set:

    - ``batch``: a function on the shared micro-batch, built from the config and the kind's
      results and checkpoint directories;
    - ``stream``: its own streaming queries, built from the session and the config, reading
      Kafka itself (``{name: DataFrame | BatchOutput}``);
    - ``listener``: no query of its own. A ``StreamingQueryListener``, registered on the session
      before any query starts, follows the queries that run the kinds it ``follows`` (a batch
      kind's is the shared query; told by ``follow`` before each starts) and commits rows at each
      progress of those queries: one commit per micro-batch and query, named by that query's
      batch id (``pipeline.batch_sink``; one sink per query in a subdirectory when it follows
      several). It runs only when some kind it follows runs; its status line is its commits, and
      it is ``active`` while a query it follows is.
    """

    name: str
    batch: Callable[[Config, Path, Path], CountingKind] | None = None
    stream: Callable[[SparkSession, Config], dict[str, Any]] | None = None
    listener: Callable[[SparkSession, Config], KindListener] | None = None
    #: the kinds whose queries a listener kind follows
    follows: tuple[str, ...] = ()
    #: does the kind have configured queries (else it is skipped)
    configured: Callable[[Config], bool] = lambda cfg: True

    def __post_init__(self) -> None:
        if sum(f is not None for f in (self.batch, self.stream, self.listener)) != 1:
            raise ValueError(f"kind {self.name!r}: exactly one of batch, stream and listener")
        if (self.listener is None) != (not self.follows):
            raise ValueError(f"kind {self.name!r}: a listener kind, and only one, follows kinds")


#: The kinds that run a query: the batch kinds (on the shared query) and the stream kinds.
_QUERY_KINDS = (
    ResultKind("traffic", batch=traffic.build_traffic_batch),
    ResultKind("topk", batch=topk.build_topk_batch, configured=lambda cfg: bool(cfg.queries.topk)),
    ResultKind(
        "distinct", batch=distinct.build_distinct_batch, configured=lambda cfg: bool(cfg.queries.distinct)
    ),
    # The alert rules' detection rows (docs/alerts.md, "Streaming"); settings from [alerts].
    ResultKind("features", batch=features.build_features_batch),
    # The window joins and their shedding (pipeline.joins_batch): the records on a join side only.
    ResultKind("joins", batch=joins_batch.build_joins_batch, configured=lambda cfg: bool(cfg.queries.join)),
)

#: Every result kind, in the order a shared batch runs them; the listener kinds last.
KINDS: dict[str, ResultKind] = {
    kind.name: kind
    for kind in (
        *_QUERY_KINDS,
        ResultKind(
            "shedding",
            listener=joins.start_shedding,
            follows=("joins",),
            configured=lambda cfg: bool(cfg.queries.join),
        ),
        # The pipeline's own statistics: every query, whichever kinds run.
        ResultKind("sys", listener=sys_stats.start_sys, follows=tuple(k.name for k in _QUERY_KINDS)),
    )
}
assert tuple(KINDS) == RESULT_KINDS, "pipeline.job.KINDS and netmon.config.RESULT_KINDS name the same kinds"


#: How long :meth:`Pipeline.stop` lets a running batch function finish before it cancels it.
STOP_GRACE_S = 30.0

#: Restarts of a query after broker outages with no batch in between, before its error counts.
MAX_OUTAGE_RESTARTS = 3

#: How long :meth:`Pipeline.poll` waits for the broker's answer before restarting a query.
BROKER_CHECK_S = 2.0

#: How long :meth:`Pipeline.stop` waits for a listener kind to handle its query's last progress.
LISTENER_DRAIN_S = 10.0

#: The lock a running pipeline holds on its data directory (``<data>/pipeline.lock``).
LOCK_FILE = PIPELINE_LOCK

#: The Spark property naming the job group of a stream thread's jobs (the query's run id).
_JOB_GROUP = "spark.jobGroup.id"

#: How long a batch that began after a stop was asked for waits for the stop itself.
_STOP_WAIT_S = 120.0


class BatchStopped(RuntimeError):
    """A batch function cut short because its query is being stopped.

    Its message is short and reads as a cancelled Spark job of the query's job group, which is
    what Spark's stream thread looks for to take an error for the stop (module docstring).
    """


class StoppableBatch:
    """A ``foreachBatch`` function that a stop lets finish, and that ends in a short error if cut.

    Why: when a query is stopped while its Python batch function runs a Spark job, the job is
    cancelled and the function raises; py4j hands the whole Python traceback to the JVM (tens of
    kB: a ``Py4JJavaError`` carries the Java stack trace), and Spark's stream thread, to tell a stop
    from a failure, matches that text against ``PROXY_ERROR`` in ``StreamExecution`` — a regular
    expression whose ``(.|\\r\\n|\\r|\\n)*`` recurses once per character: the thread dies of a
    ``java.lang.StackOverflowError`` (1000+ lines of ``java.util.regex`` frames on stderr).

    So: :meth:`Pipeline.stop` sets ``stopping`` and waits until the function is ``idle`` (the
    running batch commits normally); a batch that begins after that waits until the query is
    stopped and then fails; and any error raised while stopping, or after the query was stopped
    by someone else, is replaced by a short :class:`BatchStopped` naming the query's job group
    (``org.apache.spark.SparkException ... cancelled ... <group>``), which Spark takes for the
    stop. A batch that fails this way never committed: Spark runs it again, with the same
    offsets, when the query starts again. Any other error is raised unchanged.

    ``function`` is the wrapped function (kinds' counters such as ``late_rows`` stay on it);
    ``query`` is set once the query is started.
    """

    def __init__(self, name: str, function: Callable[[DataFrame, int], None]) -> None:
        self.name = name
        self.function = function
        self.query: StreamingQuery | None = None
        self.stopping = threading.Event()
        #: set by the stop just before it stops the query (a batch waiting at its start goes on)
        self.released = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        #: a batch began after the stop was asked for, and waits for it
        self.refusing = threading.Event()
        #: the id of the last batch the function ran to its end (Spark commits it next)
        self.returned: int | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        group = _job_group(df)
        if self.stopping.is_set():
            self._refuse(batch_id, group)
        self.idle.clear()
        try:
            self.function(df, batch_id)
            self.returned = batch_id
        except Exception as exc:
            if self._stopped(exc):
                raise BatchStopped(self._message(batch_id, group)) from None
            raise
        finally:
            self.idle.set()

    def committed(self, timeout_s: float) -> bool:
        """Wait until Spark committed the batch the function last ran to its end (its progress is
        reported after the commit), or the next batch began, or the query ended."""
        deadline = time.monotonic() + timeout_s
        while self.returned is not None and not self.refusing.is_set() and self._active():
            progress: dict[str, Any] = (self.query.lastProgress if self.query is not None else None) or {}
            reported = int(progress.get("batchId", -1))
            # An idle trigger reports the id of the batch to come: only a batch's own counts.
            if reported > self.returned or (
                reported == self.returned and "addBatch" in (progress.get("durationMs") or {})
            ):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def settle(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until the stream thread is where a stop interrupts no work:
        parked in this function at the start of a batch, or waiting for the next trigger.

        Interrupted elsewhere — writing the next batch's offsets, say — Spark stops cleanly too, but
        Hadoop's local file system logs the interrupted ``readlink`` it runs with a stack trace.
        """
        deadline = time.monotonic() + timeout_s
        while not self.refusing.is_set() and self.query is not None and time.monotonic() < deadline:
            try:
                if not self.query.isActive or not self.query.status.get("isTriggerActive", True):
                    return
            except Exception:  # noqa: BLE001 - the JVM is going away: nothing to wait for
                return
            time.sleep(0.02)

    def _refuse(self, batch_id: int, group: str | None) -> None:
        """A batch that began after the stop was asked for: fail it once the query is stopped."""
        self.refusing.set()
        self.released.wait(_STOP_WAIT_S)
        deadline = time.monotonic() + 30.0
        while self._active() and time.monotonic() < deadline:
            time.sleep(0.05)
        log.debug("batch not run: the query is stopping", extra={"query": self.name, "batch": batch_id})
        raise BatchStopped(self._message(batch_id, group))

    def _stopped(self, exc: Exception) -> bool:
        """Whether ``exc`` comes from a stop: asked for, done by someone else, or about to come.

        PySpark's own Ctrl-C handler cancels every job *before* the interrupted program gets to
        stop its queries: a cancelled job waits a moment for that stop.
        """
        if self.stopping.is_set() or not self._active():
            return True
        if "cancelled" in str(exc):
            self.stopping.wait(10.0)
            return self.stopping.is_set() or not self._active()
        return False

    def _active(self) -> bool:
        try:
            return self.query is None or bool(self.query.isActive)
        except Exception:  # noqa: BLE001 - the JVM is going away: as good as stopped
            return False

    def _message(self, batch_id: int, group: str | None) -> str:
        return (
            f"org.apache.spark.SparkException: batch {batch_id} of query {self.name} cancelled: "
            f"the query was stopped (job group {group})"
        )


def _job_group(df: DataFrame) -> str | None:
    """The job group of the stream thread running this batch (py4j runs the call on that thread)."""
    try:
        return df.sparkSession.sparkContext.getLocalProperty(_JOB_GROUP)
    except Exception:  # noqa: BLE001 - only for the message of a stop
        return None


#: Text of a query's error (or of one of its causes) that says the Kafka broker was out of reach.
_OUTAGE_MARKERS = (
    "org.apache.kafka.common.errors.TimeoutException",
    "org.apache.kafka.common.errors.DisconnectException",
    "org.apache.kafka.common.errors.NetworkException",
    "org.apache.kafka.common.errors.BrokerNotAvailableException",
    "org.apache.kafka.common.errors.LeaderNotAvailableException",
    "org.apache.kafka.common.errors.NotLeaderOrFollowerException",
    "Timed out waiting for a node assignment",
    "Cannot fetch record for offset",
    "Failed to get records for",
)


def is_broker_outage(error: Any) -> bool:
    """Whether a query's error (``query.exception()``) is Kafka's client giving up on the broker.

    Read from the error's message and those of its Java causes.
    """
    texts = [str(error)]
    origin = getattr(error, "_origin", None)  # PySpark's captured Java exception
    with contextlib.suppress(Exception):
        for _ in range(20):
            if origin is None:
                break
            texts.append(str(origin.toString()))
            origin = origin.getCause()
    return any(marker in text for text in texts for marker in _OUTAGE_MARKERS)


class SharedBatch:
    """The ``foreachBatch`` function of the shared query: one pass over the raw batch for every kind.

    It receives the batch's raw Kafka messages (``pipeline.source.raw_messages``). One
    ``mapInArrow`` decodes them with pyarrow and computes every kind's stage 1 in the same pass
    (``pipeline.partials.raw_partials``), so the decoded packets never go back into the JVM; the
    driver merges the partials and hands each kind its own. It counts packets, control messages,
    malformed lines, records from the future and late packets (``totals``, over this process's
    batches). Late has one meaning for every kind and for the offline commands: a packet more
    than the watermark delay behind the newest event time of its Kafka partition before it
    (``pipeline.partials.decode_messages``); each partition's newest event time is kept per batch
    in ``state`` (``pipeline.batch_state``), so the rule does not depend on where batches begin.
    A kind with a ``prepare(batch_id, spark)`` method reads its state before its specs are
    taken (the distinct kind's late bound depends on it). ``seconds[kind]``: the kind's time in
    the last batch (``stage1`` for the shared pass: Kafka read, decode and every partial).
    :meth:`figures` keeps what the ``sys`` kind records of each of the last
    :data:`FIGURES_KEPT` batches (its listener handles a batch after the next may have begun).
    """

    #: batches whose figures are kept for the ``sys`` kind
    FIGURES_KEPT = 64

    def __init__(
        self,
        functions: dict[str, Any],
        *,
        state: Path | None = None,
        delay_ns: int | None = None,
        manager: ResourceManager | None = None,
    ) -> None:
        self.functions = dict(functions)
        #: chooses the drop boxes' fractions per batch (``[resources] manage``), None: all exact
        self.manager = manager
        #: each Kafka partition's newest event time after each batch (the late rule's start)
        self.state = BatchState(state) if state is not None else None
        self.delay_ns = delay_ns
        self.seconds: dict[str, float] = {name: 0.0 for name in self.functions}
        #: each kind's (and the shared stage 1's) time over this process's batches
        self.total_seconds: dict[str, float] = {}
        self.totals = dict.fromkeys(TOTALS, 0)
        self._figures: OrderedDict[int, sys_stats.BatchFigures] = OrderedDict()
        #: the query's last progress (``StreamingQuery.lastProgress``; set once the query starts):
        #: the Kafka backlog the manager plans with (:meth:`_tell_backlog`)
        self.progress: Callable[[], Mapping[str, Any] | None] | None = None

    def _tell_backlog(self) -> None:
        """The manager learns the Kafka backlog of the newest batch Spark reported (the records
        left when it was planned: its lag in messages times its own records per message)."""
        assert self.manager is not None
        try:
            raw = self.progress() if self.progress is not None else None
            # Spark's progress as the ``sys`` kind reads it: its JSON (PySpark's object nests
            # its own types; the JSON is the same in every version)
            text = getattr(raw, "json", None)
            progress = json.loads(text) if isinstance(text, str) else dict(raw or {})
        except Exception:  # noqa: BLE001 - a query stopping: plan without the backlog
            return
        batch_id = progress.get("batchId")
        if not isinstance(batch_id, int):
            return
        figures = self._figures.get(batch_id)
        messages = progress.get("numInputRows")
        if figures is None or not isinstance(messages, int) or messages <= 0:
            return  # an idle trigger, or a batch of another process
        lag = sys_stats.kafka_lag(list(progress.get("sources") or []))
        stamp = progress.get("timestamp")
        if lag is None or not isinstance(stamp, str):
            return
        try:
            at = dt.datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            return
        self.manager.observe_backlog(batch_id, lag * figures.packets / messages, at)

    def figures(self, batch_id: int) -> sys_stats.BatchFigures | None:
        """Packets, newest event time and each kind's seconds of batch ``batch_id`` (if kept)."""
        return self._figures.get(batch_id)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        began = started = time.perf_counter()
        if self.manager is not None:
            self._tell_backlog()
        keep = self.manager.decide(batch_id) if self.manager is not None else {}
        # The intake drop box (before the decode: only the lines it keeps are parsed); the kinds
        # learn its fraction from ``keep`` beside their own boxes' and scale by both.
        intake = float(keep.get(INTAKE, 1.0))
        for function in self.functions.values():
            prepare = getattr(function, "prepare", None)
            if prepare is not None:
                prepare(batch_id, df.sparkSession)
            sample = getattr(function, "sample", None)
            if sample is not None:
                sample(keep)
            limit = getattr(function, "limit_windows", None)
            if limit is not None:  # window reduction (the manager's; none without one)
                limit(self.manager.windows if self.manager is not None else {})
            coarsen = getattr(function, "coarsen", None)
            if coarsen is not None:  # the manager's coarse step (seed 004 §4.3; top-k and distinct)
                coarsen(self.manager.granularity if self.manager is not None else {})
        specs = [spec for f in self.functions.values() for spec in f.specs]
        before = (self.state.load(batch_id) if self.state is not None else None) or {}
        newest = {int(p): int(ns) for p, ns in before.items()}
        partials, max_us = merge_partials(
            raw_partials(
                df, specs, newest_ns=newest, delay_ns=self.delay_ns if self.state else None, intake=intake
            )
        )
        read = newest_of(partials)
        if self.state is not None:
            # Saved before the kinds run: a rerun of this batch reads the version before it.
            self.state.save(batch_id, {str(p): ns for p, ns in (newest | read).items()})
        # Counted before the kinds run: their rows are visible as soon as each commits (a batch
        # that Spark runs again after a crash is counted again).
        counts = totals_of(partials)
        for key, count in counts.items():
            self.totals[key] += count
        self.seconds["stage1"] = time.perf_counter() - started
        queries = partials["query"]
        for name, function in self.functions.items():
            started = time.perf_counter()
            mine = pc.is_in(queries, pa.array([s.name for s in function.specs]))
            function.apply(partials.filter(mine), max_us, batch_id)
            self.seconds[name] = time.perf_counter() - started
        for name, spent in self.seconds.items():
            self.total_seconds[name] = self.total_seconds.get(name, 0.0) + spent
        state = {
            name: int(rows)
            for name, function in self.functions.items()
            if (rows := getattr(function, "state_rows", None)) is not None
        }
        if self.manager is not None:
            # the records the batch read, the intake box's skipped ones included: the input rate;
            # the state the kinds hold: the memory estimate's correction
            self.manager.observe(
                batch_id,
                counts["packets"] + counts["sampled"],
                time.perf_counter() - began,
                sum(state.values()) if state else None,
            )
        observed = None
        for function in self.functions.values():
            by_batch = getattr(function, "observed", None)  # the joins kind's statistics
            if by_batch is not None:
                observed = {**(observed or {}), **by_batch.get(batch_id, {})}
        self._figures[batch_id] = sys_stats.BatchFigures(
            packets=counts["packets"] + counts["sampled"],
            sampled=counts["sampled"],
            newest_ns=max(read.values(), default=None),
            seconds=dict(self.seconds),
            keep=dict(keep),
            observed=observed,
            state=state,
        )
        while len(self._figures) > self.FIGURES_KEPT:
            self._figures.popitem(last=False)


def _own_state_rows(function: Any) -> int | None:
    """The state rows a batch kind holds after its last batch: its ``state_rows`` (traffic, top-k,
    distinct), or the tuples in the joins' windows (``observed``: each join query's
    ``state_left + state_right`` of the newest batch); None for another function, or before a
    batch."""
    rows = getattr(function, "state_rows", None)
    if rows is not None:
        return int(rows)
    observed = getattr(function, "observed", None)
    if isinstance(observed, Mapping) and observed:
        newest = observed[max(observed)]
        return sum(int(m.get("state_left") or 0) + int(m.get("state_right") or 0) for m in newest.values())
    return None


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
    #: times the kind's query was started again from its checkpoint after a broker outage
    restarts: int = 0
    #: records the intake drop box skipped before the decode (not in ``packets``)
    sampled: int = 0


@dataclass
class Pipeline:
    spark: SparkSession
    cfg: Config
    queries: dict[str, StreamingQuery]
    stats: dict[str, QueryStats] = field(default_factory=dict)
    #: republishes committed results to Kafka topics ``netmon.<kind>`` (None: Parquet only)
    publisher: ResultPublisher | None = None
    #: compacts and expires committed results every ``[retention] interval_s`` (``pipeline.retention``)
    maintainer: Maintainer | None = None
    #: the ``foreachBatch`` functions of ``BatchOutput`` queries; a ``late_rows`` counter of theirs
    #: is added to ``late_dropped`` (they drop late rows themselves, not a state store)
    batch_functions: dict[str, Any] = field(default_factory=dict)
    #: query name -> the kinds whose statistics its progress feeds (default: the query's own name)
    feeds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: query name -> starts the query again from its checkpoint (after a broker outage)
    starters: dict[str, Callable[[], StreamingQuery]] = field(default_factory=dict)
    #: query name -> its ``foreachBatch`` function's stop guard (queries with a batch function)
    guards: dict[str, StoppableBatch] = field(default_factory=dict)
    #: listener kind -> (the queries it follows, its listener)
    listeners: dict[str, tuple[tuple[str, ...], KindListener]] = field(default_factory=dict)
    #: query name -> restarts after broker outages
    restarts: dict[str, int] = field(default_factory=dict)
    #: query name -> why admission control refused it (``[resources] admission_rate_pps``)
    refused: dict[str, str] = field(default_factory=dict)
    #: the lock on the data directory, held until :meth:`stop`
    lock: IO[str] | None = None
    #: query name -> when its query was found dead of a broker outage (it waits for the broker)
    _outages: dict[str, float] = field(default_factory=dict)
    #: query name -> restarts since its last batch
    _streak: dict[str, int] = field(default_factory=dict)
    #: queries that died of outages too often in a row: their error is a failure
    _given_up: set[str] = field(default_factory=set)
    _stopping: bool = False

    def poll(self) -> dict[str, QueryStats]:
        """Fold the queries' new progress reports into the totals; write the status file.

        Every progress event counts once, idle ones included: Spark reports an idle trigger with
        the id of the next batch, so events are told apart by their trigger time, not batch id.
        A query that died of a broker outage is started again once the broker answers.
        """
        if not self._stopping:
            self._recover()
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
                shared = self.batch_functions.get(name)
                # A batch kind keeps its state in its own files, not Spark's state store: the rows
                # it holds after its last batch (the sys rows' <kind>_state_rows), or the joins'
                # windows (their statistics of the last batch)
                own = _own_state_rows(function)
                if own is not None:
                    st.state_rows = own
                late = int(getattr(function, "late_rows", 0))
                if isinstance(shared, SharedBatch):
                    late += shared.totals["late"]  # the late rule of the shared decode, for every kind
                st.late_dropped += late - st.late_in_batches
                st.late_in_batches = late
                st.restarts = self.restarts.get(name, 0)
                if isinstance(shared, SharedBatch) and kind in shared.seconds:
                    st.kind_ms = round(shared.seconds[kind] * 1000)
                    # The shared query's decode counts (not reported through observe()).
                    st.packets, st.control, st.malformed, st.future, st.sampled = (
                        shared.totals["packets"],
                        shared.totals["control"],
                        shared.totals["malformed"],
                        shared.totals["future"],
                        shared.totals["sampled"],
                    )
        for kind, (_, listener) in self.listeners.items():
            # No query of its own: its batches are the followed query's batches it committed.
            st = self.stats.setdefault(kind, QueryStats())
            st.batches, st.input_rows = listener.commits, listener.rows
            st.last_batch_id = listener.last_batch_id
            st.kind_ms = round(listener.seconds * 1000)
        if self.publisher is not None:
            self.publisher.publish()
        if self.maintainer is not None and not self._stopping:
            # After the publisher, in the same thread: compaction only takes published files and
            # both rewrite the publish mark.
            try:
                self.maintainer.run_if_due()
            except Exception as exc:  # noqa: BLE001 - results stay as they are; retried next interval
                log.warning("results maintenance failed", extra={"error": _first_line(exc)})
        self._write_status()
        return self.stats

    def _write_status(self) -> None:
        path = status_file(self.cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        body: dict[str, Any] = {
            "updated": time.time(),
            "queries": {name: {**vars(st), "active": self._active(name)} for name, st in self.stats.items()},
            **({"refused": dict(self.refused)} if self.refused else {}),
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1))
        tmp.replace(path)

    def _active(self, kind: str) -> bool:
        """Whether the query of ``kind`` is active (a listener kind: any query it follows)."""
        if kind in self.listeners:
            return any(self.queries[name].isActive for name in self.listeners[kind][0])
        for name, kinds in self.feeds.items():
            if kind in kinds:
                return bool(self.queries[name].isActive)
        return bool(self.queries[kind].isActive)

    def _recover(self) -> None:
        """Start again, from its checkpoint, each query that died of a broker outage, once the
        broker answers; give up on one that died again (or did not start) with no batch since
        its last restart, :data:`MAX_OUTAGE_RESTARTS` times in a row (its error is then reported
        by :meth:`failed`)."""
        for name, query in list(self.queries.items()):
            if name not in self.starters or name in self._given_up or query.isActive:
                continue
            if name not in self._outages:
                error = query.exception()
                if error is None or not is_broker_outage(error):
                    continue  # stopped, finished, or a failure of another kind
                if any("addBatch" in (p.get("durationMs") or {}) for p in query.recentProgress):
                    self._streak[name] = 0  # it ran batches since its last (re)start
                if self._streak.get(name, 0) >= MAX_OUTAGE_RESTARTS:
                    self._given_up.add(name)
                    continue
                self._outages[name] = time.monotonic()
                log.warning(
                    "query lost the Kafka broker; it restarts from its checkpoint when the broker answers",
                    extra={"query": name, "bootstrap": self.cfg.kafka.bootstrap, "error": _first_line(error)},
                )
            if not self._broker_answers():
                continue
            down_s = time.monotonic() - self._outages[name]
            self._streak[name] = self._streak.get(name, 0) + 1
            try:
                restarted = self.starters[name]()
            except Exception as exc:  # noqa: BLE001 - e.g. the broker went away again: wait again
                log.warning("query not restarted", extra={"query": name, "error": _first_line(exc)})
                if self._streak[name] >= MAX_OUTAGE_RESTARTS:
                    self._given_up.add(name)
                    del self._outages[name]
                continue
            del self._outages[name]
            self.queries[name] = restarted
            if name in self.guards:
                self.guards[name].query = restarted
            self.restarts[name] = self.restarts.get(name, 0) + 1
            log.warning(
                "query restarted from its checkpoint after a broker outage",
                extra={"query": name, "restarts": self.restarts[name], "waited_s": round(down_s, 1)},
            )

    def _broker_answers(self) -> bool:
        from netmon.kafka_admin import KafkaUnreachable, check_reachable
        from netmon.kafka_security import client_options

        try:
            check_reachable(self.cfg.kafka.bootstrap, BROKER_CHECK_S, security=client_options(self.cfg.kafka))
        except KafkaUnreachable:
            return False
        return True

    def failed(self) -> str | None:
        """The first query's exception message, if any query died (and is not waiting for the
        broker to start again, see :meth:`poll`)."""
        for name, query in self.queries.items():
            if name in self._outages:
                continue
            exc = query.exception()
            if exc is not None:
                return f"{name}: {_first_line(exc)}"
        return None

    @property
    def waiting_for_broker(self) -> tuple[str, ...]:
        """The queries that died of a broker outage and start again once it answers."""
        return tuple(self._outages)

    @property
    def active(self) -> bool:
        return bool(self._outages) or any(q.isActive for q in self.queries.values())

    def process_all_available(self) -> None:
        for query in self.queries.values():
            query.processAllAvailable()

    def await_termination(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for query in self.queries.values():
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            # pyspark annotates the timeout as int, yet takes float seconds (it waits int(timeout * 1000) ms)
            query.awaitTermination(cast(int | None, left))

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every query; a batch function running now may finish first (up to ``grace_s``).

        The running batch commits as usual; a batch that begins meanwhile, or one still running
        after ``grace_s``, is cut short and runs again (same offsets) at the next start
        (:class:`StoppableBatch`). A listener kind then handles the last progress of the query it
        follows (up to :data:`LISTENER_DRAIN_S`) and is unregistered. Then the status file is
        written and the data directory's lock released.
        """
        self._stopping = True
        try:
            for guard in self.guards.values():
                guard.stopping.set()
            deadline = time.monotonic() + max(0.0, grace_s)

            def left() -> float:
                return max(0.0, deadline - time.monotonic())

            for guard in self.guards.values():
                if guard.idle.wait(left()) and guard.committed(left()):
                    guard.settle(min(left(), self.cfg.pipeline.trigger_s + 2.0))
                else:
                    log.warning(
                        "a batch outlasted the stop's grace: cancelled, it runs again at the next start",
                        extra={"query": guard.name, "grace_s": grace_s},
                    )
            for name, query in self.queries.items():
                if name in self.guards:
                    self.guards[name].released.set()
                query.stop()
            self._drain_listeners()
            self._outages.clear()
            self.poll()
        finally:
            for _, listener in self.listeners.values():
                listener.close()
            if self.publisher is not None:
                self.publisher.close()
            self._unlock()

    def _drain_listeners(self) -> None:
        """Wait until each listener kind has handled every progress of the (stopped) queries it follows."""
        for kind, (names, listener) in self.listeners.items():
            for name in names:
                try:
                    run_id = str(self.queries[name].runId)
                except Exception:  # noqa: BLE001 - the JVM is going away: nothing more will come
                    continue
                if not listener.drained(run_id, LISTENER_DRAIN_S):
                    log.warning(
                        "a listener kind did not handle the last progress of its query in time",
                        extra={"kind": kind, "query": name, "waited_s": LISTENER_DRAIN_S},
                    )

    def _unlock(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
            _release(lock)


def _query_starter(
    df: DataFrame | BatchOutput, cfg: Config, kind: str, name: str, *, single: bool, available_now: bool
) -> tuple[Callable[[], StreamingQuery], Any, StoppableBatch | None]:
    """A stream kind's query: what starts it (again, from its checkpoint), its ``foreachBatch``
    function (None with Spark's file sink) and that function's stop guard."""
    out = results_dir(cfg, kind) if single else results_dir(cfg, kind) / name
    checkpoint = checkpoint_dir(cfg, kind) if single else checkpoint_dir(cfg, kind) / name
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(df, BatchOutput):
        # Its last stages run on each micro-batch and commit their own files (pipeline.batch_sink).
        function: Any = df.writer(out, checkpoint)
        batch_guard = StoppableBatch(name, function)
        guard: StoppableBatch | None = batch_guard

        def writer() -> Any:
            return (
                df.df.writeStream.queryName(name)
                .outputMode("append")
                .foreachBatch(batch_guard)
                .option("checkpointLocation", str(checkpoint))
            )

    else:
        function = guard = None

        def writer() -> Any:
            return (
                df.writeStream.queryName(name)
                .format("parquet")
                .outputMode("append")
                .options(**file_sink_options(cfg))
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
            )

    return _starter(writer, cfg, available_now, guard, name), function, guard


def file_sink_options(cfg: Config) -> dict[str, str]:
    """Spark's file sink options of a stream kind (the joins), beside its path and checkpoint.

    ``retention``: Spark's sink log (``_spark_metadata``) compacts itself every
    ``spark.sql.streaming.fileSink.log.compactInterval`` batches (10) into one file that names
    every file the sink ever wrote; with this option (Spark 3.1+) a compaction leaves out the
    files written longer than ``[retention] results_days`` ago (by their modification time), so
    the log stays bounded. The files themselves stay: ``pipeline.retention`` deletes those of
    expired rows, and those the log no longer names once they are that old. None with
    ``results_days = 0`` (results kept forever).

    >>> from netmon.config import load_config
    >>> file_sink_options(load_config(None, env={}).replace(retention={"results_days": 7}))
    {'retention': '604800000ms'}
    """
    results_s = cfg.retention.results_s
    return {} if results_s is None else {"retention": f"{max(1, round(results_s * 1000))}ms"}


def _starter(
    writer: Callable[[], Any], cfg: Config, available_now: bool, guard: StoppableBatch | None, pool: str
) -> Callable[[], StreamingQuery]:
    def start() -> StreamingQuery:
        triggered = _triggered(writer(), cfg, available_now)
        # The query's thread inherits the pool (Spark's FAIR scheduler, pipeline.session).
        context = triggered._spark.sparkContext
        before = context.getLocalProperty(POOL)
        context.setLocalProperty(POOL, pool)
        try:
            query = triggered.start()
        finally:
            context.setLocalProperty(POOL, before)
        if guard is not None:
            guard.query = query
        return query

    return start


#: The local property naming a job's FAIR scheduler pool.
POOL = "spark.scheduler.pool"


def _triggered(writer: Any, cfg: Config, available_now: bool) -> Any:
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{int(cfg.pipeline.trigger_s * 1000)} milliseconds")


def start_pipeline(
    spark: SparkSession, cfg: Config, *, available_now: bool = False, kinds: tuple[str, ...] | None = None
) -> Pipeline:
    """Start the shared query (batch kinds) and the stream kinds of ``kinds`` (default ``[pipeline] kinds``).

    ``available_now`` processes what Kafka holds and stops. Raises :class:`PipelineRunning` when
    another pipeline runs on the data directory (this process's included, until its ``stop``).
    """
    chosen = tuple(kinds or cfg.pipeline.kinds)
    for kind in chosen:
        if kind not in KINDS:
            raise ValueError(f"[pipeline] kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    # Admission control: queries whose estimate at [resources] admission_rate_pps does not fit
    # the budgets are left out, each with a one-line reason (logged and in the status file).
    cfg, refused = admit(cfg, chosen)
    for reason in refused.values():
        log.warning(reason)
    lock = _lock(cfg)
    queries: dict[str, StreamingQuery] = {}
    listeners: dict[str, KindListener] = {}
    try:
        started = _start(spark, cfg, chosen, available_now, lock, queries, listeners)
        started.refused = refused
        return started
    except BaseException:
        for query in queries.values():
            with contextlib.suppress(Exception):  # stopping on the way out: nothing more to do
                query.stop()
        for listener in listeners.values():
            with contextlib.suppress(Exception):
                listener.close()
        _release(lock)
        raise


def _start(
    spark: SparkSession,
    cfg: Config,
    chosen: tuple[str, ...],
    available_now: bool,
    lock: IO[str],
    queries: dict[str, StreamingQuery],
    listeners: dict[str, KindListener],
) -> Pipeline:
    functions: dict[str, Any] = {}
    feeds: dict[str, tuple[str, ...]] = {}
    starters: dict[str, Callable[[], StreamingQuery]] = {}
    guards: dict[str, StoppableBatch] = {}
    # The batch kinds: one Kafka read and decode, every kind on the cached batch.
    shared = {
        k.name: k.batch(cfg, _dir(results_dir(cfg, k.name)), _dir(checkpoint_dir(cfg, k.name)))
        for k in KINDS.values()
        if k.name in chosen and k.batch is not None and k.configured(cfg)
    }
    # The listener kinds: registered before any query starts (they see its first batch), each
    # told which queries to follow before they start.
    followers: dict[str, tuple[str, ...]] = {}
    for kind in (k for k in KINDS.values() if k.name in chosen and k.listener is not None):
        assert kind.listener is not None
        configured = [f for f in kind.follows if KINDS[f].configured(cfg)]
        if not (kind.configured(cfg) and configured):
            continue  # nothing to follow (no join queries)
        runs = tuple(f for f in configured if f in chosen)
        if not runs:
            log.warning(
                "kind not run without a kind it follows", extra={"kind": kind.name, "follows": kind.follows}
            )
            continue
        listeners[kind.name] = kind.listener(spark, cfg)
        followers[kind.name] = runs
    followed: dict[str, list[str]] = {kind: [] for kind in followers}

    def follow(query: str, kind: str, batch: Any = None) -> None:
        """Tell each listener kind that follows ``kind`` to follow ``query`` (before it starts)."""
        for listening, follows in followers.items():
            if kind in follows and query not in followed[listening]:
                listeners[listening].follow(query, batch)
                followed[listening].append(query)

    if shared:
        batch = SharedBatch(
            shared,
            state=_dir(checkpoint_dir(cfg, SHARED_QUERY)) / "event-time",
            delay_ns=round(cfg.pipeline.watermark_s * 1e9),
            manager=(
                ResourceManager(cfg, checkpoint_dir(cfg, SHARED_QUERY) / "resources", kinds=tuple(shared))
                if cfg.resources.manage
                else None
            ),
        )
        guard = guards[SHARED_QUERY] = StoppableBatch(SHARED_QUERY, batch)
        batch.progress = lambda: guard.query.lastProgress if guard.query is not None else None
        packets = raw_messages(
            kafka_stream(
                spark,
                cfg,
                max_offsets=cfg.spark.max_offsets_per_trigger or cfg.pipeline.max_batch_messages,
            ),
            cfg.pipeline.max_future_s,
        )

        def shared_writer() -> Any:
            return (
                packets.writeStream.queryName(SHARED_QUERY)
                .foreachBatch(guard)
                .option("checkpointLocation", str(checkpoint_dir(cfg, SHARED_QUERY)))
            )

        for name in shared:
            follow(SHARED_QUERY, name, batch)
        starters[SHARED_QUERY] = _starter(shared_writer, cfg, available_now, guard, SHARED_QUERY)
        queries[SHARED_QUERY] = starters[SHARED_QUERY]()
        functions |= {SHARED_QUERY: batch, **shared}
        feeds[SHARED_QUERY] = tuple(shared)
    # The stream kinds: each its own queries (the join's state lives in Spark's state store).
    for stream_kind in (k for k in KINDS.values() if k.name in chosen and k.stream is not None):
        assert stream_kind.stream is not None
        outputs = stream_kind.stream(spark, cfg)
        single = len(outputs) == 1 and stream_kind.name in outputs
        for name, df in outputs.items():
            starters[name], function, stream_guard = _query_starter(
                df, cfg, stream_kind.name, name, single=single, available_now=available_now
            )
            follow(name, stream_kind.name)
            queries[name] = starters[name]()
            if function is not None:
                functions[name] = function
            if stream_guard is not None:
                guards[name] = stream_guard
    # A listener kind none of whose queries runs (no join queries, say) stops at once.
    for listening, names in followed.items():
        if not names:
            listeners.pop(listening).close()
    following = {kind: (tuple(names), listeners[kind]) for kind, names in followed.items() if names}
    log.info(
        "pipeline started",
        extra={"queries": list(queries), "listeners": list(following), "bootstrap": cfg.kafka.bootstrap},
    )
    publisher = ResultPublisher(cfg, chosen) if cfg.pipeline.publish_results else None
    try:
        # [retention] kafka_retention_hours on the packets and result topics (Kafka keeps it).
        apply_topic_retention(cfg, chosen)
    except Exception as exc:  # noqa: BLE001 - a broker that refuses topic configs must not stop the pipeline
        log.warning("topic retention not set", extra={"error": _first_line(exc)})
    return Pipeline(
        spark,
        cfg,
        queries,
        publisher=publisher,
        maintainer=Maintainer(cfg, chosen),
        batch_functions=functions,
        feeds=feeds,
        starters=starters,
        guards=guards,
        listeners=following,
        lock=lock,
    )


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- one pipeline per data directory, and resets ---------------------------------------------------


class PipelineRunning(RuntimeError):
    """Another pipeline runs on the data directory (one line: where, and the holder's pid)."""


def _lock(cfg: Config) -> IO[str]:
    """Take the data directory's lock (``<data>/pipeline.lock``, holding the holder's pid)."""
    data = Path(cfg.paths.data_dir)
    try:
        return pidlock.take(data / LOCK_FILE)
    except pidlock.LockHeld as held:
        raise PipelineRunning(
            f"a pipeline is running on the data directory {data} (pid {held.holder}); stop it first"
        ) from None


def _release(lock: IO[str]) -> None:
    pidlock.release(lock)


#: Every kind a reset of ``all`` means (``all`` also resets the shared query).
ALL = "all"


def reset_set(kinds: Iterable[str]) -> tuple[list[str], bool]:
    """The kinds a reset of ``kinds`` touches (joins bring shedding), and whether it is ``all``."""
    asked = list(dict.fromkeys(kinds))
    for kind in asked:
        if kind != ALL and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)}, {ALL})")
    everything = ALL in asked
    chosen = set(KINDS) if everything else set(asked)
    if "joins" in chosen:
        # The controller's fractions and costs were learnt on the join state that goes.
        chosen |= {"shedding"}
    return [k for k in KINDS if k in chosen], everything


def reset_plan(cfg: Config, kinds: Iterable[str]) -> list[Path]:
    """What :func:`reset_kinds` would remove for ``kinds`` (result kinds, or ``"all"``): the paths
    that exist, in order.

    Per kind: ``results/<kind>/``, ``checkpoints/<kind>/`` (a batch kind's state; a stream kind's
    Spark checkpoint and state store; ``shedding`` has none, but a data directory of an older
    netmon may hold its query's) and its publish mark ``checkpoints/publish/<kind>.json``;
    ``shedding`` also the controller's directory ``control/joins/`` (its fractions, and an older
    netmon's statistics files); ``joins`` brings ``shedding``. ``all``: every kind,
    the shared query's checkpoint ``checkpoints/packets/`` and every publish mark.
    """
    chosen, everything = reset_set(kinds)
    publish = checkpoint_dir(cfg, "publish")
    paths: list[Path] = []
    for kind in chosen:
        paths += [results_dir(cfg, kind), checkpoint_dir(cfg, kind)]
        if not everything:
            paths.append(publish / f"{kind}.json")
        if kind == "shedding":
            paths.append(joins.control_file(cfg).parent)
    if everything:
        paths += [checkpoint_dir(cfg, SHARED_QUERY), publish]
    return [p for p in dict.fromkeys(paths) if p.exists() or p.is_symlink()]


def reset_kinds(cfg: Config, kinds: Iterable[str]) -> list[Path]:
    """Remove the results and state of ``kinds`` (see :func:`reset_plan`); return what was removed.

    What the pipeline then does, per kind (docs/reliability.md, "Resetting a kind"):

    - a batch kind (traffic, topk, distinct, features, joins) starts from empty state at the
      shared query's next batch: it reads what the shared query reads from then on — the other
      batch kinds are not replayed, and records read before the reset are not read again for it
      (windows open at the reset are written with the packets read after it only);
    - shedding (a listener on the shared query) commits its rows from the next batch with join
      input on, its controller starting from the static ``[shedding]`` fractions;
    - sys (a listener on every query) commits its rows from each query's next batch on;
    - ``all``: every query starts afresh, from the earliest offsets the topic still holds.

    Raises :class:`PipelineRunning` while a pipeline runs on the data directory (the reset holds
    the same lock while it removes, so none starts meanwhile).
    """
    kinds = tuple(kinds)
    lock = _lock(cfg)
    try:
        removed = reset_plan(cfg, kinds)
        for path in removed:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        log.info("pipeline reset", extra={"kinds": list(kinds), "removed": [str(p) for p in removed]})
        return removed
    finally:
        _release(lock)
