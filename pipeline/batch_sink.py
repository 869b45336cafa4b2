"""Results written by a ``foreachBatch`` function, committed per micro-batch as Spark's sink does.

Spark's file sink cannot follow a ``foreachBatch`` step, so a kind whose last stage runs on each
micro-batch (``pipeline.distinct``) writes its rows itself:

- ``<results>/batch-<id>/part-*.parquet``: the batch's rows, written with ``mode("overwrite")``, so
  a batch that Spark runs again after a crash replaces its own files instead of adding to them;
- ``<results>/_commits/<id>.json``: the names of those files, written (atomically) after them.

``netmon.results.committed_files`` reads exactly the files the commit log names, as it reads
``_spark_metadata`` for Spark's own sink: a batch that died before its commit is never read.

Spark runs a batch again after a crash with the same input (its offset log is written before the
batch runs), so a function whose rows follow from its input and its own stored state rewrites
the same rows.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQueryListener

from netmon.results import COMMITS

__all__ = ["BatchOutput", "CommittingListener", "commit_batch", "write_batch", "write_table"]

log = logging.getLogger(__name__)


#: ``(results dir, checkpoint dir) -> function(batch DataFrame, batch id)``
BatchWriterFactory = Callable[[Path, Path], Callable[[DataFrame, int], None]]


@dataclass(frozen=True)
class BatchOutput:
    """A streaming DataFrame whose micro-batches a function writes, instead of Spark's file sink."""

    df: DataFrame
    writer: BatchWriterFactory

    def attach(
        self, stream: DataStreamWriter, results: Path, checkpoint: Path
    ) -> tuple[DataStreamWriter, Callable[[DataFrame, int], None]]:
        """``stream`` with the batch function set, and the function (it may keep counters)."""
        function = self.writer(results, checkpoint)
        return stream.foreachBatch(function), function


def write_batch(df: DataFrame, results: Path, batch_id: int) -> list[str]:
    """Write one batch's rows and commit them; returns the committed file names."""
    target = Path(results) / f"batch-{batch_id:06d}"
    df.write.mode("overwrite").parquet(str(target))
    names = sorted(p.name for p in target.glob("*.parquet"))
    commit_batch(results, batch_id, [f"{target.name}/{n}" for n in names])
    return names


def write_table(table: pa.Table, results: Path, batch_id: int) -> list[str]:
    """Write one batch's rows from the driver (a few thousand rows: no Spark job) and commit them.

    The same layout as :func:`write_batch`: ``batch-<id>/part-00000.parquet``, replaced whole when
    the batch runs again; an empty table commits the batch with no file.
    """
    target = Path(results) / f"batch-{batch_id:06d}"
    if target.exists():
        for old in target.glob("*"):
            old.unlink()
    names: list[str] = []
    if table.num_rows:
        target.mkdir(parents=True, exist_ok=True)
        tmp = target / ".part-00000.parquet.tmp"
        pq.write_table(table, tmp)
        tmp.replace(target / "part-00000.parquet")
        names = ["part-00000.parquet"]
    commit_batch(results, batch_id, [f"{target.name}/{n}" for n in names])
    return names


def commit_batch(results: Path, batch_id: int, files: list[str]) -> None:
    """Record ``files`` (relative to ``results``) as batch ``batch_id``'s committed output."""
    log = Path(results) / COMMITS
    log.mkdir(parents=True, exist_ok=True)
    tmp = log / f".{batch_id}.json.tmp"
    tmp.write_text(json.dumps({"batch": batch_id, "files": files}))
    tmp.replace(log / f"{batch_id}.json")


class CommittingListener(StreamingQueryListener):
    """What the listener kinds (``pipeline.joins.SheddingListener``, ``pipeline.sys_stats.SysListener``)
    share: the counts of what they committed for the pipeline's status (``commits``, ``rows``,
    ``last_batch_id``, the time of the last commit ``seconds``), the query runs that ended (events
    arrive in order, so once a run's end was seen every progress of it was handled:
    :meth:`drained`), and unregistering from the session (:meth:`close`). A subclass handles
    ``onQueryProgress``.
    """

    #: names the listener in logs
    name = "listener"

    def __init__(self) -> None:
        self.commits = 0
        self.rows = 0
        self.last_batch_id = -1
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._ended = threading.Condition()
        self._terminated: set[str] = set()
        #: the session it is registered on, until :meth:`close`
        self._session: SparkSession | None = None

    def drained(self, run_id: str, timeout_s: float) -> bool:
        """Whether every progress of the query run ``run_id`` was handled: its end was seen
        (waits up to ``timeout_s``)."""
        with self._ended:
            return self._ended.wait_for(lambda: run_id in self._terminated, timeout_s)

    def close(self) -> None:
        """Unregister from the session: the pipeline that started the kind stops."""
        session, self._session = self._session, None
        if session is not None:
            try:
                session.streams.removeListener(self)
            except Exception:  # noqa: BLE001 - the session is going away: nothing left to stop
                log.debug("%s not removed", self.name, exc_info=True)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's API
        with self._ended:
            self._terminated.add(str(event.runId))
            self._ended.notify_all()
