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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from netmon.results import COMMITS

__all__ = ["BatchOutput", "commit_batch", "write_batch", "write_table"]


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
