"""The newest rows of a per-batch result sink: the last seconds of its time column, read from the end.

A kind written per micro-batch (``pipeline.batch_sink``: ``batch-<id>/`` files named by
``_commits/<id>.json``) gets a commit per batch: the ``sys`` kind, a row per query and batch, has
86,400 of them a day per query at a 1 s trigger. :func:`read_results` reads them all; what
``netmon explain`` wants is the last minute. :func:`newest_rows` walks the commits from the newest
batch id back and stops at the first commit whose rows are all older than the span (a query's
batches are committed in batch order, each after its trigger, so batch ids and batch times rise
together); the cost follows the span, not the history.

The read is ``netmon.results_range``'s (compacted hours included, each batch once: from its commit,
or from its compacted file when a manifest covers it), walking back by the rows' own times: every
commit looked at is in the span but the one that ends the walk, so none is parsed to no purpose.
The newest commits are never compacted, so the span's end is the newest commit's time (a sink
with compacted hours only: the newest manifest's).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from netmon.results_range import (
    CommitRows,
    from_micros,
    newest_committed_us,
    newest_compacted_us,
    read_rows,
    rows_span,
    sinks,
)

__all__ = ["newest_rows", "newest_rows_by_sink"]


def newest_rows(sink: Path, seconds: float, column: str = "batch_time") -> list[dict[str, Any]]:
    """The rows of ``sink`` whose ``column`` (a timestamp) lies in the last ``seconds`` up to its
    newest row, ``[newest - seconds, newest]``, oldest first; none when nothing is committed.

    Each batch once: from its commit, or from its compacted file when a manifest covers it.
    """
    if seconds < 0:
        raise ValueError(f"seconds: expected a number >= 0, got {seconds!r}")
    sink = Path(sink)
    cache = CommitRows()  # this read's: the commits that find the span's end are not parsed again

    def newest(batch_id: int) -> int | None:
        span = rows_span(cache.get(sink, batch_id), column)
        return None if span is None else span[1]

    end_us = newest_committed_us(sink, newest)
    if end_us is None:
        end_us = newest_compacted_us(sink)  # no commit left: the newest compacted row ends the span
    if end_us is None:
        return []
    end = from_micros(end_us)
    start = end - dt.timedelta(seconds=seconds)
    rows = read_rows(sink, column, start, end, cache, to_newest=True, backward=True)
    return sorted(rows, key=lambda r: r[column])


def newest_rows_by_sink(
    directory: Path, seconds: float, column: str = "batch_time"
) -> dict[str, list[dict[str, Any]]]:
    """:func:`newest_rows` of each sink of a kind that keeps one per query (``results/sys/<query>/``),
    by sink name; a sink with no rows is left out. Each sink's span ends at its own newest row."""
    out: dict[str, list[dict[str, Any]]] = {}
    for sink in sinks(Path(directory)):
        rows = newest_rows(sink, seconds, column)
        if rows:
            out[sink.name] = rows
    return out
