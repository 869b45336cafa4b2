"""The newest rows of a per-batch result sink: the last seconds of its time column, read from the end.

A kind written per micro-batch (``pipeline.batch_sink``: ``batch-<id>/`` files named by
``_commits/<id>.json``) gets a commit per batch: the ``sys`` kind, a row per query and batch, has
86,400 of them a day per query at a 1 s trigger. :func:`read_results` reads them all; what
``netmon explain`` wants is the last minute. :func:`newest_rows` walks the commits from the newest
batch id back and stops at the first commit whose rows are all older than the span (a query's
batches are committed in batch order, each after its trigger, so batch ids and batch times rise
together); the cost follows the span, not the history.

Results maintenance (``pipeline.retention``) rewrites older batches as one file per hour and
removes their commits. As :func:`netmon.results.committed_files` does, the commits are read
first and the compaction manifests second (a manifest is in place before the commits it covers
go), and a batch a manifest covers is taken from its compacted file only: the manifests of the
hours the span overlaps (:func:`netmon.results.compactions_between`), their files filtered to the
span. The newest commits are never compacted, so the span's end is the newest commit's time (a
sink with compacted hours only: the newest manifest's).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from netmon.results import COMMITS, COMPACTED, compactions, compactions_between, covered_by

__all__ = ["newest_rows", "newest_rows_by_sink"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
#: times a read starts again when a compacted file went between listing and reading
_READ_ATTEMPTS = 5


def _commit_ids(sink: Path) -> list[int]:
    """The batch ids committed in ``sink``, ascending (names only: no file is opened)."""
    try:
        names = os.listdir(sink / COMMITS)
    except OSError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def _commit_rows(sink: Path, batch_id: int) -> list[dict[str, Any]]:
    """The rows of one committed batch; none when it is being replaced or went meanwhile (then a
    manifest read after it covers it)."""
    try:
        names = json.loads((sink / COMMITS / f"{batch_id}.json").read_text())["files"]
        tables = [pq.read_table(sink / name) for name in names]
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return []
    return [row for table in tables for row in table.to_pylist()]


def _micros(t: dt.datetime) -> int:
    return (t - _EPOCH) // _US


def _time(us: int) -> dt.datetime:
    return _EPOCH + int(us) * _US


def _read(sink: Path, seconds: float, column: str) -> list[dict[str, Any]]:
    span = dt.timedelta(seconds=seconds)
    batches: dict[int, list[dict[str, Any]]] = {}
    end: dt.datetime | None = None
    for batch_id in reversed(_commit_ids(sink)):
        rows = _commit_rows(sink, batch_id)
        times = [r[column] for r in rows if r.get(column) is not None]
        if not times:
            continue  # a batch without rows, or one being replaced
        newest = max(times)
        if end is None:
            end = newest
        if newest < end - span:
            break  # this batch and every earlier one are older than the span
        batches[batch_id] = rows
    if end is None:
        # No commit left: the newest compacted hour's newest row ends the span.
        ends = [m["max_us"] for m in compactions(sink).values() if m.get("max_us") is not None]
        if not ends:
            return []
        end = _time(max(int(us) for us in ends))
    start = end - span
    manifests = list(compactions_between(sink, _micros(start), _micros(end)).values())
    covered = covered_by(manifests)
    rows = [row for batch_id, batch_rows in batches.items() if not covered(batch_id) for row in batch_rows]
    for manifest in manifests:
        for name in manifest["files"]:
            table = pq.read_table(sink / name, filters=[(column, ">=", start), (column, "<=", end)])
            rows += table.to_pylist()
    kept = [r for r in rows if r.get(column) is not None and start <= r[column] <= end]
    return sorted(kept, key=lambda r: r[column])


def newest_rows(sink: Path, seconds: float, column: str = "batch_time") -> list[dict[str, Any]]:
    """The rows of ``sink`` whose ``column`` (a timestamp) lies in the last ``seconds`` up to its
    newest row, ``[newest - seconds, newest]``, oldest first; none when nothing is committed.

    Each batch once: from its commit, or from its compacted file when a manifest covers it.
    """
    if seconds < 0:
        raise ValueError(f"seconds: expected a number >= 0, got {seconds!r}")
    attempts = _READ_ATTEMPTS
    while True:
        try:
            return _read(Path(sink), seconds, column)
        except FileNotFoundError:
            # An hour compacted again (a new file, the old one gone) or expired: list again.
            attempts -= 1
            if not attempts:
                raise


def newest_rows_by_sink(
    directory: Path, seconds: float, column: str = "batch_time"
) -> dict[str, list[dict[str, Any]]]:
    """:func:`newest_rows` of each sink of a kind that keeps one per query (``results/sys/<query>/``),
    by sink name; a sink with no rows is left out. Each sink's span ends at its own newest row."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for sink in sorted(p for p in directory.iterdir() if (p / COMMITS).is_dir() or (p / COMPACTED).is_dir()):
        rows = newest_rows(sink, seconds, column)
        if rows:
            out[sink.name] = rows
    return out
