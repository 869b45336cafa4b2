"""The committed rows of a per-batch result sink within a time range: one reader for every caller.

A kind written per micro-batch (``pipeline.batch_sink``: ``batch-<id>/`` files named by
``_commits/<id>.json``) gets a commit per batch, 86,400 a day at a 1 s trigger, and results
maintenance (``pipeline.retention``) rewrites its older batches as one file per hour
(``_compacted/<hour>.json`` manifests, ``netmon.results``). ``netmon.results.read_results`` reads
all of it; a page's time range or ``netmon explain``'s last minute wants a few hundred rows, so
the cost of a read must follow the range, not the history. This module is that read, shared by
the dashboard's bounded reads (``dashboard.bounded``), its Resources page
(``dashboard.data_resources``) and ``netmon.recent_results``, which differ only in what they
know of a batch before reading it and in what they return (:class:`Batches`):

- **Which commits.** A sink's batches are committed in time order (a batch kind writes a window
  once its watermark, which never moves back, has passed the window's end; ``shedding`` and
  ``sys`` write a row per batch at its trigger time, and each commit is written after its
  batch). So each batch's :data:`Span` — its rows' time bounds (from Parquet footers, or from its
  rows) or an interval around its commit's file time — rises with the batch id, and
  :func:`first_reaching` finds the first batch that can reach the range's start by binary search
  (O(log n) batches looked at), or by walking back from the newest batch (when the range ends at
  the newest row and the batches looked at are read anyway). The batches from there are read up
  to the first that starts after the range's end. Batches whose span is unknown (no rows, a
  commit gone meanwhile) are stepped over. A kind whose batches are in time order only give or
  take a known *disorder* (the joins: a batch may hold rows older than an earlier batch's newest,
  by up to the caller's ``disorder_us``) is searched from ``start - disorder`` and read up to the
  first batch that starts after ``end + disorder`` (:func:`read_sink` argues why that misses no
  row); 0, every other kind, is the search above exactly.
- **Compacted hours, each batch once.** The commits are read first and the manifests second: a
  manifest is in place before the commits it covers go, so a batch whose commit or file went
  meanwhile is covered by a manifest read after. A batch a manifest covers is taken from the
  compacted file only, never also from its commit (a pass that died after writing its manifest
  leaves covered commits behind). Only the manifests of the hours the range overlaps are opened
  (``netmon.results.compactions_between``), unless the kind's hours are of another column than
  the range's (``every_manifest``). A compacted file that goes between listing and reading (the
  hour compacted again, or expired) makes the sink be listed again.

No pandas here (``netmon`` is the ground floor): the rows are pyarrow tables or row dicts, as the
caller's :class:`Batches` makes them; :func:`read_rows` is the row-dict reader.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from netmon.results import COMMITS, COMPACTED, compactions, compactions_between, covered_by, is_sink

__all__ = [
    "READ_ATTEMPTS",
    "Batches",
    "CommitRows",
    "Span",
    "commit_ids",
    "first_reaching",
    "from_micros",
    "micros",
    "newest_committed_us",
    "newest_compacted_us",
    "read_rows",
    "read_sink",
    "rows_span",
    "sinks",
]

#: times a sink is listed again when a compacted file went between listing and reading
READ_ATTEMPTS = 5
#: (oldest, newest) of where a batch's rows lie, microseconds since the epoch
Span = tuple[int, int]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)

T = TypeVar("T")


def micros(t: dt.datetime) -> int:
    """A time in microseconds since the epoch, as manifests count (naive: UTC)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return (t - _EPOCH) // _US


def from_micros(us: int) -> dt.datetime:
    """The tz-aware time of ``us`` microseconds since the epoch."""
    return _EPOCH + int(us) * _US


def sinks(directory: Path) -> list[Path]:
    """A kind's sinks: the directory itself, or (a kind with a sink per query, ``sys``, the
    joins) its subdirectories. A sink whose every batch was compacted has no commit log left."""
    directory = Path(directory)
    if _is_sink(directory):
        return [directory]
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and _is_sink(p))


def _is_sink(directory: Path) -> bool:
    return is_sink(directory) or (directory / COMPACTED).is_dir()


def commit_ids(sink: Path) -> list[int]:
    """The batch ids committed in ``sink``, ascending (names only: no file is opened)."""
    try:
        names = os.listdir(sink / COMMITS)
    except OSError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def _commit_mtime_ns(sink: Path, batch_id: int) -> int | None:
    """A commit's file time (None: it went meanwhile, compacted or expired)."""
    try:
        return (sink / COMMITS / f"{batch_id}.json").stat().st_mtime_ns
    except OSError:
        return None


def _commit_rows(sink: Path, batch_id: int) -> list[dict[str, Any]]:
    """The rows of one committed batch; none when it is being replaced or went meanwhile (then a
    manifest read after it covers it)."""
    try:
        names = json.loads((sink / COMMITS / f"{batch_id}.json").read_text())["files"]
        tables = []
        for name in names:
            # a file's own reader: ``pq.read_table``'s dataset machinery costs twice as much a
            # small file (a one-row ``sys`` file: 2.2 ms of 3.4 ms), and a day is 86,400 of them
            with pq.ParquetFile(sink / name) as parquet:
                tables.append(parquet.read())
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return []
    return [row for table in tables for row in table.to_pylist()]


class CommitRows:
    """The rows of the commits read so far, by (sink, batch id) and commit file time: a commit is
    parsed once however often a page redraws; a rewritten one (same id, newer time) again. At most
    ``max_entries``, least recently used first out. Thread-safe: the dashboard's sessions share
    one; a one-off read uses its own, so that the commits it looks at to find the range are not
    parsed again to read it."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self.max_entries = max_entries
        self._rows: OrderedDict[tuple[str, int], tuple[int, list[dict[str, Any]]]] = OrderedDict()
        self._lock = threading.Lock()
        #: commits parsed (not from the cache): a redraw parses only the new ones
        self.parsed = 0

    def get(self, sink: Path, batch_id: int) -> list[dict[str, Any]]:
        """The rows of batch ``batch_id`` of ``sink``; none when its commit is unreadable or gone."""
        mtime_ns = _commit_mtime_ns(sink, batch_id)
        version = -1 if mtime_ns is None else mtime_ns
        key = (str(sink), batch_id)
        with self._lock:
            hit = self._rows.get(key)
            if hit is not None and hit[0] == version:
                self._rows.move_to_end(key)
                return hit[1]
        rows = _commit_rows(sink, batch_id)
        with self._lock:
            self.parsed += 1
            self._rows[key] = (version, rows)
            while len(self._rows) > self.max_entries:
                self._rows.popitem(last=False)
        return rows


def rows_span(rows: list[dict[str, Any]], column: str) -> Span | None:
    """The bounds of ``rows``' ``column`` (a timestamp); None when no row has one."""
    times = [micros(r[column]) for r in rows if r.get(column) is not None]
    return (min(times), max(times)) if times else None


class Batches(Protocol[T]):
    """What a reader knows of a sink's batches, and how it reads them (rows as ``T``): one
    object a read, holding the read's range."""

    def span(self, sink: Path, batch_id: int) -> Span | None:
        """Where the batch's rows can lie (rising with the batch id, give or take the read's
        ``disorder_us``: :func:`read_sink`); None: unknown (no rows, or its commit went), the batch
        is stepped over."""
        ...

    def rows(self, sink: Path, batch_id: int) -> list[T]:
        """The committed batch's rows that may lie in the range (more is fine: the caller
        filters); none when its files went meanwhile (a manifest read after covers it)."""
        ...

    def compacted(self, path: Path) -> list[T]:
        """A compacted file's rows that may lie in the range; ``FileNotFoundError`` when it went."""
        ...


def first_reaching(
    count: int, newest: Callable[[int], int | None], start: int, *, backward: bool = False
) -> int:
    """The index of the first of ``count`` batches whose ``newest(i)`` is ``start`` or later, the
    values rising with the index (None: a batch that says nothing, stepped over); ``count`` when
    none is.

    By binary search: O(log n) values asked for, whatever the range. ``backward``: walking back
    from the last batch to the first before ``start``: as many values as batches in the range,
    for a range that ends at the newest batch whose batches are read anyway.

    >>> values = [1, None, 3, 3, None, 7]
    >>> [first_reaching(6, values.__getitem__, s) for s in (0, 2, 3, 4, 8)]
    [0, 2, 2, 5, 6]
    >>> [first_reaching(6, values.__getitem__, s, backward=True) for s in (0, 2, 3, 4, 8)]
    [0, 1, 1, 4, 6]
    """
    if backward:
        i = count
        while i > 0:
            value = newest(i - 1)
            if value is not None and value < start:
                break  # this batch and every earlier one are older than the range
            i -= 1
        return i
    lo, hi, first = 0, count, count
    while lo < hi:
        mid = (lo + hi) // 2
        j = mid
        while j < hi and newest(j) is None:
            j += 1  # a batch that says nothing of time: the next one that does
        value = newest(j) if j < hi else None
        if value is None:
            hi = mid
        elif value >= start:
            first, hi = j, mid
        else:
            lo = j + 1
    return first


def read_sink(
    sink: Path,
    batches: Batches[T],
    start_us: int,
    end_us: int,
    *,
    to_newest: bool = False,
    backward: bool = False,
    every_manifest: bool = False,
    disorder_us: int = 0,
) -> list[T]:
    """The rows of ``sink``'s committed batches and compacted hours that may lie in
    ``[start_us, end_us]`` (as ``batches`` reads them), each batch once.

    The commits from the first whose span reaches ``start_us - disorder_us``
    (:func:`first_reaching`, ``backward`` as there) up to the first whose span starts after
    ``end_us + disorder_us`` (``to_newest``: up to the newest), then the manifests of the hours
    the range overlaps (``every_manifest``: all of them, for hours of another column than the
    range's), each covered batch from its compacted file only.

    ``disorder_us``: how far the sink's batches may be out of time order (0: not at all), i.e.
    for batches ``i < j``, every row of ``j`` is at most ``disorder_us`` older than the newest
    row of ``i``: ``low(j) >= high(i) - D`` (``D = disorder_us``; a batch's span is ``(low,
    high)``). The joins' batches are so (``dashboard.bounded.batch_disorder_s``). Not to be
    confused with :func:`read_rows`' ``slack_s``, which is how far a commit's file time is from
    its rows: a span's own width. With ``D > 0`` the newest times are not monotone in the batch
    id, but no row in range is missed (the rows are filtered to ``[start_us, end_us]`` by the
    caller as ever):

    - *The search.* Let ``k`` be the first batch with ``high(k) >= start_us``: no batch before
      it holds a row in range. Every batch ``j > k`` has ``high(j) >= low(j) >= high(k) - D >=
      start_us - D``. So the predicate "``high >= start_us - D``" holds for every batch from
      ``k`` on (those with a span), whatever it is before: the binary search moves its lower
      bound past a batch only when that batch's ``high < start_us - D``, which is never ``k`` or
      a later one. It returns a batch at or before ``k`` (every batch between its result and
      ``k`` is read, more is fine), never one after. The walk back likewise stops at a batch
      ``i`` with ``high(i) < start_us - D``; every batch ``h < i`` has ``high(h) <= low(i) + D
      <= high(i) + D < start_us``.
    - *The end.* The walk stops at the first batch ``i`` with ``low(i) > end_us + D``; every
      later batch ``j`` has ``low(j) >= high(i) - D >= low(i) - D > end_us``: none holds a row in
      range, nor does ``i``.
    """
    if disorder_us < 0:
        raise ValueError(f"disorder_us: expected an integer >= 0, got {disorder_us!r}")
    attempts = READ_ATTEMPTS
    while True:
        try:
            return _read_sink_once(
                sink, batches, start_us, end_us, to_newest, backward, every_manifest, disorder_us
            )
        except FileNotFoundError:
            # The hour was compacted again (a new file, the old one gone) or expired: list again.
            attempts -= 1
            if not attempts:
                raise


def _read_sink_once(
    sink: Path,
    batches: Batches[T],
    start_us: int,
    end_us: int,
    to_newest: bool,
    backward: bool,
    every_manifest: bool,
    disorder_us: int,
) -> list[T]:
    """:func:`read_sink` from one listing; ``FileNotFoundError`` when a compacted file went."""
    # The commits first, the manifests second (the module's docstring).
    ids = commit_ids(sink)
    spans: dict[int, Span | None] = {}

    def span(batch_id: int) -> Span | None:
        if batch_id not in spans:
            spans[batch_id] = batches.span(sink, batch_id)
        return spans[batch_id]

    def newest(i: int) -> int | None:
        found = span(ids[i])
        return None if found is None else found[1]

    read: dict[int, list[T]] = {}
    # From start - D to end + D: read_sink's docstring argues that no batch holding a row in
    # [start, end] is skipped although the newest times are not monotone when D > 0.
    first = first_reaching(len(ids), newest, start_us - disorder_us, backward=backward)
    for batch_id in ids[first:]:
        found = span(batch_id)
        if found is None:
            continue
        if not to_newest and found[0] > end_us + disorder_us:
            break  # this batch and every later one are newer than the range
        read[batch_id] = batches.rows(sink, batch_id)
    if every_manifest:
        manifests = list(compactions(sink).values())
    else:
        manifests = list(compactions_between(sink, start_us, end_us).values())
    covered = covered_by(manifests)
    rows = [row for batch_id, batch_rows in read.items() if not covered(batch_id) for row in batch_rows]
    for manifest in manifests:
        for name in manifest["files"]:
            rows += batches.compacted(sink / name)
    return rows


class _RowBatches:
    """:class:`Batches` of row dicts: each commit's rows from a :class:`CommitRows`, each
    compacted file's of the range. A batch's span: its rows' ``column``, or (``slack_us``) its
    commit's file time give or take ``slack_us``, which finds the range's commits without parsing
    the ones before it."""

    def __init__(
        self, column: str, start: dt.datetime, end: dt.datetime, cache: CommitRows, slack_us: int | None
    ) -> None:
        self.column, self.start, self.end, self.cache, self.slack_us = column, start, end, cache, slack_us

    def span(self, sink: Path, batch_id: int) -> Span | None:
        if self.slack_us is None:
            return rows_span(self.cache.get(sink, batch_id), self.column)
        mtime_ns = _commit_mtime_ns(sink, batch_id)
        if mtime_ns is None:
            return None
        return mtime_ns // 1000 - self.slack_us, mtime_ns // 1000 + self.slack_us

    def rows(self, sink: Path, batch_id: int) -> list[dict[str, Any]]:
        return self.cache.get(sink, batch_id)

    def compacted(self, path: Path) -> list[dict[str, Any]]:
        filters = [(self.column, ">=", self.start), (self.column, "<=", self.end)]
        return list(pq.read_table(path, filters=filters).to_pylist())


def read_rows(
    sink: Path,
    column: str,
    start: dt.datetime,
    end: dt.datetime,
    cache: CommitRows,
    *,
    slack_s: float | None = None,
    to_newest: bool = False,
    backward: bool = False,
    disorder_s: float = 0.0,
) -> list[dict[str, Any]]:
    """The rows of ``sink`` whose ``column`` (a timestamp) lies in ``[start, end]``, as dicts,
    each batch once (:func:`read_sink`; in the sink's order, unsorted).

    The commits are found by their rows' ``column`` (each one looked at is parsed), or, with
    ``slack_s``, by their file times: a commit is written after its batch, by up to ``slack_s``
    (the Resources page's batches that took minutes), so the commits written from ``slack_s``
    before ``start`` to ``slack_s`` after ``end`` (``to_newest``: to the newest) are the ones
    parsed, found without parsing any other. A batch whose commit came later than that is missed:
    that is the price of not parsing the commits to find the range.

    ``disorder_s``: how far the sink's batches may be out of time order (:func:`read_sink`'s
    ``disorder_us``, in seconds; 0: in order), which ``slack_s`` is not.
    """
    start_us, end_us = micros(start), micros(end)
    slack_us = None if slack_s is None else round(slack_s * 1e6)
    batches = _RowBatches(column, start, end, cache, slack_us)
    rows = read_sink(
        sink,
        batches,
        start_us,
        end_us,
        to_newest=to_newest,
        backward=backward,
        disorder_us=round(disorder_s * 1e6),
    )
    return [r for r in rows if r.get(column) is not None and start_us <= micros(r[column]) <= end_us]


def newest_committed_us(
    sink: Path,
    newest: Callable[[int], int | None],
    *,
    tried: int | None = None,
    oldest: Callable[[int], int | None] | None = None,
    disorder_us: int = 0,
) -> int | None:
    """The newest time of ``sink``'s committed rows: ``newest(batch_id)`` of its newest batch that
    has one (walking back from the newest commit; at most ``tried`` of them). The batches' times
    rise with their ids, and retention never compacts a sink's newest batches.

    With ``disorder_us`` (a sink whose batches may hold rows older than an earlier batch's newest
    by up to that much: the joins, :func:`read_sink`) and ``oldest(batch_id)``, the walk goes on
    past the newest batch with rows: an earlier batch's newest row is at most the oldest row of
    every later batch plus ``disorder_us``, so once the newest found reaches the smallest oldest
    row seen plus ``disorder_us`` no earlier batch can hold a newer one.
    """
    ids = commit_ids(sink)
    best: int | None = None
    floor: int | None = None  # the oldest row of the batches walked
    for batch_id in reversed(ids if tried is None else ids[-tried:]):
        found = newest(batch_id)
        if found is None:
            continue
        if not disorder_us or oldest is None:
            return found
        best = found if best is None else max(best, found)
        low = oldest(batch_id)
        if low is not None:
            floor = low if floor is None else min(floor, low)
        if floor is not None and best >= floor + disorder_us:
            return best
    return best


def newest_compacted_us(sink: Path) -> int | None:
    """The newest time of ``sink``'s compacted hours: the newest manifest's ``max_us`` (only the
    newest manifests are opened: they are named by hour)."""
    try:
        names = sorted((n for n in os.listdir(sink / COMPACTED) if n.endswith(".json")), reverse=True)
    except OSError:
        return None
    for name in names:
        try:
            high = json.loads((sink / COMPACTED / name).read_text()).get("max_us")
        except (OSError, ValueError, AttributeError):
            continue
        if high is not None:
            return int(high)
    return None
