"""Reads of a result kind bounded to a time range: only the files whose rows can lie in it.

``netmon.results.read_results`` reads every committed file of a kind; after a replayed day (8.5M
top-k rows in 86,400 batches) a page that did so on every redraw took a minute. The dashboard's
pages read a time range instead (``dashboard.time_range``), and the cost of a read follows the
range, not the history. A kind's rows can be in three layouts (``docs/results.md``), each pruned
its own way:

- **per-batch commits** (``pipeline.batch_sink``: ``batch-<id>/`` files named by
  ``_commits/<id>.json``; traffic, topk, distinct, shedding, sys, joins). A commit names its files
  and nothing else, so a batch's time range is its files' Parquet statistics (the row groups' min
  and max of the time column, from the footer: no data is read). The batches of a sink are
  written in time order: a batch kind writes a window once the kind's watermark, which never
  moves back, has passed its end, so every row of batch ``n + 1`` is newer than every row of
  batch ``n`` (``pipeline.traffic``, ``pipeline.topk``, ``pipeline.distinct``); ``shedding`` and
  ``sys`` write one row per batch at the batch's trigger time. So the batches' bounds rise with
  their ids, and a binary search over the commit ids (footers of O(log n) batches) finds the
  first batch whose newest row reaches the range's start; the batches from there on are read
  until the first whose oldest row is past the range's end. Walking back from the newest batch
  would also be valid, but would open every batch newer than the range: an absolute range a day
  back would cost a day of footers. Batches without rows (no file, or no row with a time) are
  stepped over. The joins (``pipeline.joins_batch``) are in time order only give or take a
  *disorder* ``S`` (:func:`batch_disorder_s`, from the config): a match is written when its
  right side arrives, its ``left_ts`` up to the query's window before it, and an unanswered SYN
  once the join's clock has passed ``left_ts + window_s + watermark_s``, so a batch may hold
  rows up to ``S`` older than an earlier batch's newest (within the limits
  :func:`batch_disorder_s` names). Their search looks for the first batch
  whose newest row reaches ``start - S`` and reads up to the first whose oldest is past
  ``end + S`` (``netmon.results_range.read_sink`` argues why no row in range is missed); the
  rows are still filtered to the range exactly. Every other kind's ``S`` is 0.
- **compacted hours** (``pipeline.retention``: ``_compacted/<hour>.json`` manifests): only the
  manifests of the hours the range overlaps are opened (``netmon.results.compactions_between``),
  and a batch a manifest covers is read from its compacted file, never from its commit. As every
  reader does, the commits are read first and the manifests second: a manifest is in place before
  the commits and files it covers go, so a batch whose commit or file went meanwhile is covered
  by a manifest read after it.
- **Spark's file sink** (``_spark_metadata``; the joins of an older netmon, which ran them as a
  Spark query of their own: a data directory it wrote is still read): its log names the
  committed files, with no order of event time between batches (a join wrote a match when its
  second side arrived, an unanswered SYN once the watermark passed its window). Each file is
  pruned by its Parquet statistics; the footers read are cached by path, size and modification
  time (the sink never rewrites a file), so a redraw opens only the files written since.

Of the files kept, the rows are filtered to the range, so the rows returned are exactly those of
``read_results`` whose time lies in ``[start, end]`` (rows without a time are in no range).
:data:`TIME_COLUMNS` names the column each kind's range is in, :data:`COMPACTION_COLUMNS` the one
compaction bounds its hours by (the first of ``pipeline.publish.TIME_COLUMNS`` its rows have);
they differ for ``shedding`` only.

A file's rows are read once per version of it and kept (:class:`Rows`, beside the footers in
:class:`Footers`; by path, size and modification time, at most :data:`MAX_ROW_BYTES` of them,
counted as the memory they hold: :func:`table_cost`; text dictionary-encoded: :func:`encoded`): the
pages' reads
expire every few seconds (``dashboard.data.cached``) and a relative range moves with the newest
row, so without them every redraw read the whole range's files again (the last 24 h of
one-minute batches: 1,440 files a kind, 1–5 s a read on a loaded machine); with them a redraw
reads only the files committed since, and lists and stats the others. A file that is gone
(compacted, expired) is never served: every use stats it first, and only the files that a commit,
manifest or log names now are asked for.

The search over the commits and the compacted hours, each batch once, is
``netmon.results_range.read_sink``, the reader ``netmon explain`` and the Resources page share;
what is this module's is the footer statistics a batch's span and the pruning come from
(:class:`Footers`), each kind's disorder (:func:`batch_disorder_s`), and Spark's file sink.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from netmon.results import COMMITS, compactions, sink_files
from netmon.results_range import (
    from_micros,
    micros,
    newest_committed_us,
    newest_compacted_us,
    read_sink,
    sinks,
)

if TYPE_CHECKING:
    from netmon.config import Config

__all__ = [
    "COLUMN_OVERHEAD_BYTES",
    "COMPACTION_COLUMNS",
    "MAX_ROW_BYTES",
    "TIME_COLUMNS",
    "Footers",
    "Rows",
    "batch_disorder_s",
    "decoded",
    "encoded",
    "footers",
    "newest",
    "read_range",
    "sinks",
    "table_cost",
    "where_equal",
]

#: Each kind's time column, the one its pages' ranges are in: event time, except ``shedding`` and
#: ``sys``, whose rows are the pipeline's batches, at their trigger time (``batch_time``: the
#: controller's ``event_time`` is the newest a join query read, missing for a query without input
#: and not in batch order across queries).
TIME_COLUMNS: dict[str, str] = {
    "traffic": "window_end",
    "topk": "window_end",
    "distinct": "window_end",
    "joins": "left_ts",
    "shedding": "batch_time",
    "sys": "batch_time",
}
#: The column compaction (``pipeline.retention``) groups each kind's hours by: the first of
#: ``pipeline.publish.TIME_COLUMNS`` its rows have.
COMPACTION_COLUMNS: dict[str, str] = {**TIME_COLUMNS, "shedding": "event_time"}

#: (oldest, newest) time of a file's or batch's rows, microseconds since the epoch
Bounds = tuple[int, int]


def batch_disorder_s(cfg: Config, kind: str) -> float:
    """How far ``kind``'s batches may be out of time order, in seconds: the ``disorder_s`` of
    :func:`read_range` (a batch holds no row older than an earlier batch's newest by more).

    0 for every kind but the joins, whose batches (``pipeline.joins_batch``) hold a match when its
    second side arrives, its ``left_ts`` at most the query's left window before the right side's
    time (a link query's windows are both ``window_s``, a handshake's left window is
    ``window_s``), a side at most ``[pipeline] watermark_s`` behind the newest time before it;
    and an unanswered SYN once the query's clock has passed ``left_ts + window_s +
    watermark_s``. Every query's clock is moved to the batch's event time at the end of each
    batch (the slowest Kafka partition's newest), and a record reaches the join only if it is at
    most ``watermark_s`` behind its partition's newest before it, hence behind that clock. So
    ``S = max(window_s of [[queries.join]]) + watermark_s``, from the dashboard's config, which
    is the pipeline's; ``watermark_s`` alone without a join query.

    What ``S`` does not bound (rows beyond it may be missed by a bounded read): rows written
    while the config had a longer window or watermark than now.
    """
    if kind != "joins":
        return 0.0
    windows = [q.window_s for q in cfg.queries.join]
    return max(windows, default=0.0) + cfg.pipeline.watermark_s


def _merge(a: Bounds | None, b: Bounds | None) -> Bounds | None:
    if a is None or b is None:
        return a if b is None else b
    return min(a[0], b[0]), max(a[1], b[1])


def _overlaps(b: Bounds, start_us: int, end_us: int) -> bool:
    return b[0] <= end_us and b[1] >= start_us


def _column_index(meta: pq.FileMetaData, column: str) -> int | None:
    """The index of ``column`` among a file's leaf columns (None: no rows, or no such column)."""
    if not meta.num_row_groups:
        return None
    first = meta.row_group(0)
    return next((j for j in range(meta.num_columns) if first.column(j).path_in_schema == column), None)


def _group_bounds(parquet: pq.ParquetFile, g: int, index: int, column: str) -> Bounds | None:
    """A row group's time bounds from its statistics (None: every time is null); without usable
    statistics, from its times themselves (that column only)."""
    group = parquet.metadata.row_group(g)
    stats = group.column(index).statistics
    if stats is not None and stats.has_min_max:
        low, high = stats.min, stats.max
        if isinstance(low, dt.datetime) and isinstance(high, dt.datetime):
            return micros(low), micros(high)
    elif stats is not None and stats.null_count == group.num_rows:
        return None  # every row's time is null
    extremes = pc.min_max(parquet.read_row_group(g, columns=[column]).column(0)).as_py()
    if extremes["min"] is None:
        return None
    return micros(extremes["min"]), micros(extremes["max"])


def _footer_bounds(path: Path, column: str) -> Bounds | None:
    """The time bounds of a file's rows from its row groups' statistics (its footer only); None
    when no row has a time."""
    with pq.ParquetFile(path) as parquet:
        index = _column_index(parquet.metadata, column)
        if index is None:
            return None
        found: Bounds | None = None
        for g in range(parquet.metadata.num_row_groups):
            found = _merge(found, _group_bounds(parquet, g, index, column))
        return found


#: The memory the kept rows may hold (:class:`Rows`). A day of every kind the pages read, as the
#: 12-minute soak's day writes it (``netmon bench soak-up``: per-second top-k and distinct
#: reports), is about 540 MiB with its text dictionary-encoded (top-k 355, distinct 143, joins 11,
#: traffic 10, shedding 7, and the ``sys`` rows): at 512 MiB the pages' last-24-h reads evicted
#: each other's files on every switch (a read of the day's files again each time, 1-2 s).
MAX_ROW_BYTES = 1 << 30


#: What a cached table costs beyond its Arrow buffers (``pa.Table.nbytes``), per column chunk:
#: the C++ objects of each column (array, its data, buffers' handles, field), allocated outside
#: Arrow's memory pool. Measured with pyarrow 26 over a day of per-minute results: a one-row
#: ``sys`` file (36 columns, 320 bytes of buffers) took 47 KB of the process's memory once read
#: and kept, a 98-row top-k file (7 columns, 6 KB of buffers) 17 KB: 1.2-1.5 KB a column.
COLUMN_OVERHEAD_BYTES = 1536


def table_cost(table: pa.Table) -> int:
    """The memory a kept table holds, as :class:`Rows` counts it against its bound: its Arrow
    buffers and :data:`COLUMN_OVERHEAD_BYTES` per column chunk (which, for the small per-batch
    files, is most of it: ``nbytes`` alone said 20 MB where the process held 330 MB).

    >>> t = pa.table({"a": [1, 2], "b": ["x", "y"]})
    >>> table_cost(t) == t.nbytes + 2 * COLUMN_OVERHEAD_BYTES
    True
    """
    chunks = sum(max(1, column.num_chunks) for column in table.columns)
    return int(table.nbytes) + COLUMN_OVERHEAD_BYTES * chunks


def encoded(table: pa.Table) -> pa.Table:
    """``table`` with its text columns dictionary-encoded, as :class:`Rows` keeps them: a day of
    top-k and distinct rows repeats a few query names and keys millions of times (559 and 309 MiB
    as text over the 12-minute soak's day, about 250 and 110 MiB so), so the day fits the cache
    and a read of one query compares its dictionary's indices (:func:`where_equal`).
    :func:`decoded` gives the text back.

    >>> t = encoded(pa.table({"q": ["a", "b", "a"], "n": [1, 2, 3]}))
    >>> t.schema.field("q").type, t.column("q").to_pylist()
    (DictionaryType(dictionary<values=string, indices=int32, ordered=0>), ['a', 'b', 'a'])
    """
    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            table = table.set_column(i, f.name, pc.dictionary_encode(table.column(i)))
    return table


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns as plain values again (:func:`encoded`)."""
    fields = [
        pa.field(f.name, f.type.value_type, f.nullable) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    ]
    target = pa.schema(fields)
    return table if target == table.schema else table.cast(target)


def where_equal(table: pa.Table, name: str, value: str) -> pa.Table:
    """The rows of ``table`` whose ``name`` is ``value``; a dictionary-encoded column is compared
    by its indices, chunk by chunk (comparing the values would decode every row first)."""
    column = table.column(name)
    if not pa.types.is_dictionary(column.type):
        return table.filter(pc.equal(column, value))
    # index -1 (not in a chunk's dictionary) matches no index; a null matches nothing
    masks = [
        pc.fill_null(pc.equal(c.indices, c.dictionary.index(value).as_py()), False) for c in column.chunks
    ]
    return table.filter(pa.chunked_array(masks, pa.bool_()))


class _Flights:
    """Single flight: the first thread to ask for a key loads it, the others asking meanwhile wait
    for it and then look in the cache again (the dashboard's warm-up, ``dashboard.warmup``, and a
    page may ask for the same file at once: it is read once). Used under the owner's lock."""

    def __init__(self) -> None:
        self._loading: dict[object, threading.Event] = {}

    def claim(self, key: object) -> threading.Event | None:
        """None: this thread loads ``key`` (it must :meth:`release` it); else the event to wait
        for (another thread is loading it)."""
        if key in self._loading:
            return self._loading[key]
        self._loading[key] = threading.Event()
        return None

    def release(self, key: object) -> None:
        self._loading.pop(key).set()


class Rows:
    """Each committed file's rows (the columns asked), cached by path, columns, size and
    modification time, so a redraw after a cache expiry reads only the files written since: a
    committed file is never changed in place (a batch run again, or a compaction, writes a new
    file or replaces it: new size or time, so its rows are read again), and a file gone
    (compacted or expired) is never served from here, since every lookup first stats the
    path and the readers only ask for the files a commit, manifest or Spark log names now.

    At most ``max_bytes`` of memory (:func:`table_cost`: the Arrow buffers and each column's
    objects), least recently used out first: a range larger than that reads its oldest files
    again each time. Thread-safe: the sessions and the warm-up share it, and a file asked for by
    two threads at once is read once (the second waits for the first)."""

    def __init__(self, max_bytes: int = MAX_ROW_BYTES) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[
            tuple[str, tuple[str, ...] | None], tuple[tuple[int, int], pa.Table, int]
        ] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._flights = _Flights()
        #: files whose rows were read (not from the cache)
        self.read = 0
        #: tables dropped to stay within ``max_bytes``
        self.evicted = 0

    @property
    def bytes(self) -> int:
        """The memory the kept tables hold (:func:`table_cost`), at most ``max_bytes``."""
        return self._bytes

    def table(self, path: Path, columns: tuple[str, ...] | None) -> pa.Table:
        """``path``'s rows (``columns`` only; None: all); raises ``FileNotFoundError`` when it is
        gone."""
        st = os.stat(path)
        key, version = (str(path), columns), (st.st_size, st.st_mtime_ns)
        while True:
            with self._lock:
                hit = self._tables.get(key)
                if hit is not None and hit[0] == version:
                    self._tables.move_to_end(key)
                    return hit[1]
                waiting = self._flights.claim((key, version))
            if waiting is None:
                break
            waiting.wait()  # being read by another thread: then from the cache (or read here)
        try:
            # Read after the stat: a file replaced in between is stored under the older version,
            # which no later stat matches, so it is read again rather than served stale.
            with pq.ParquetFile(path) as parquet:
                table = encoded(parquet.read(columns=None if columns is None else list(columns)))
            cost = table_cost(table)
            with self._lock:
                self.read += 1
                old = self._tables.pop(key, None)
                if old is not None:
                    self._bytes -= old[2]
                self._tables[key] = (version, table, cost)
                self._bytes += cost
                while self._bytes > self.max_bytes and self._tables:
                    _, (_, _, dropped) = self._tables.popitem(last=False)
                    self._bytes -= dropped
                    self.evicted += 1
        finally:
            with self._lock:
                self._flights.release((key, version))
        return table

    def forget(self, path: Path) -> None:
        """Drop ``path``'s rows (it is gone: no use keeping them)."""
        with self._lock:
            for key in [k for k in self._tables if k[0] == str(path)]:
                self._bytes -= self._tables.pop(key)[2]


class Footers:
    """Each file's time bounds (:func:`_footer_bounds`), cached by path, column, size and
    modification time (a batch run again rewrites its file: new time, new bounds); at most
    ``max_entries``, least recently used first out; and the files' rows (:attr:`rows`, a
    :class:`Rows` of ``max_row_bytes``). Thread-safe: the sessions share it."""

    def __init__(self, max_entries: int = 100_000, max_row_bytes: int = MAX_ROW_BYTES) -> None:
        self.max_entries = max_entries
        self._bounds: OrderedDict[tuple[str, str], tuple[tuple[int, int], Bounds | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._flights = _Flights()
        #: footers read (not from the cache)
        self.opened = 0
        #: the files' rows, read once per version of a file
        self.rows = Rows(max_row_bytes)

    def bounds(self, path: Path, column: str) -> Bounds | None:
        """The bounds of ``path``'s rows; raises ``FileNotFoundError`` when it is gone. A footer
        asked for by two threads at once is opened once."""
        st = os.stat(path)
        key, version = (str(path), column), (st.st_size, st.st_mtime_ns)
        while True:
            with self._lock:
                hit = self._bounds.get(key)
                if hit is not None and hit[0] == version:
                    self._bounds.move_to_end(key)
                    return hit[1]
                waiting = self._flights.claim((key, version))
            if waiting is None:
                break
            waiting.wait()
        try:
            found = _footer_bounds(path, column)
            with self._lock:
                self.opened += 1
                self._bounds[key] = (version, found)
                while len(self._bounds) > self.max_entries:
                    self._bounds.popitem(last=False)
        finally:
            with self._lock:
                self._flights.release((key, version))
        return found


_FOOTERS = Footers()


def footers() -> Footers:
    """The process's footers and rows, shared by every page's read and the warm-up."""
    return _FOOTERS


@dataclass
class _Batch:
    """One committed batch: its files that still exist with their bounds, and the batch's."""

    files: list[tuple[Path, Bounds]] = field(default_factory=list)
    bounds: Bounds | None = None


def _batch(sink: Path, batch_id: int, column: str, footers: Footers) -> _Batch:
    """A committed batch's files and bounds; no files when its commit or files went meanwhile
    (compacted or expired: a manifest read afterwards covers it) or are being replaced."""
    out = _Batch()
    try:
        names = json.loads((sink / COMMITS / f"{batch_id}.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return out
    for name in names:
        path = sink / str(name)
        try:
            bounds = footers.bounds(path, column)
        except (OSError, pa.ArrowException):
            continue  # gone (a manifest read after covers it) or being replaced
        if bounds is not None:
            out.files.append((path, bounds))
            out.bounds = _merge(out.bounds, bounds)
    return out


def _read(
    path: Path,
    column: str,
    start: dt.datetime,
    end: dt.datetime,
    columns: list[str] | None,
    footers: Footers,
    bounds: Bounds | None = None,
) -> pa.Table:
    """The rows of one file whose ``column`` lies in ``[start, end]``: its rows (from
    ``footers.rows``, read once per version of the file) filtered in memory (a dataset read with
    a row filter costs several times more per small file). ``bounds``: the file's (from its
    footer), when known: a file wholly in the range is returned as it is, without copying."""
    wanted = None if columns is None else tuple(dict.fromkeys([*columns, column]))
    try:
        table = footers.rows.table(path, wanted)
    except FileNotFoundError:
        footers.rows.forget(path)
        raise
    # wholly inside: the footer's bounds in the range and no row without a time (in no range)
    inside = (
        bounds is not None
        and micros(start) <= bounds[0]
        and bounds[1] <= micros(end)
        and table.num_rows > 0
        and table.column(column).null_count == 0
    )
    if table.num_rows and not inside:
        times = table.column(column)
        low, high = pa.scalar(start, type=times.type), pa.scalar(end, type=times.type)
        table = table.filter(pc.and_(pc.greater_equal(times, low), pc.less_equal(times, high)))
    return table if columns is None else table.select(columns)


class _Tables:
    """The batches of one :func:`read_range` of a sink (``netmon.results_range.Batches``), as
    tables: a batch's span is its files' footer statistics (cached in ``footers``), its rows
    those of its files whose statistics overlap the range; a compacted file's rows likewise (its
    statistics asked first when the hours are of another column than the range's)."""

    def __init__(
        self,
        column: str,
        compacted_by: str,
        start: dt.datetime,
        end: dt.datetime,
        columns: list[str] | None,
        footers: Footers,
    ) -> None:
        self.column, self.compacted_by, self.columns, self.footers = column, compacted_by, columns, footers
        self.start, self.end = start, end
        self.start_us, self.end_us = micros(start), micros(end)
        self._batches: dict[tuple[Path, int], _Batch] = {}

    def _batch(self, sink: Path, batch_id: int) -> _Batch:
        key = (sink, batch_id)
        if key not in self._batches:
            self._batches[key] = _batch(sink, batch_id, self.column, self.footers)
        return self._batches[key]

    def span(self, sink: Path, batch_id: int) -> Bounds | None:
        return self._batch(sink, batch_id).bounds

    def rows(self, sink: Path, batch_id: int) -> list[pa.Table]:
        tables = []
        for path, bounds in self._batch(sink, batch_id).files:
            if _overlaps(bounds, self.start_us, self.end_us):
                try:
                    tables.append(
                        _read(path, self.column, self.start, self.end, self.columns, self.footers, bounds)
                    )
                except FileNotFoundError:
                    continue  # compacted or expired meanwhile: covered by a manifest read after
        return tables

    def compacted(self, path: Path) -> list[pa.Table]:
        # Its statistics (cached per version of the file) even when its hour is of the range's
        # column: an hour wholly in the range is then taken as it is, not filtered row by row
        # (a day's 24 hours of top-k rows: 0.2 s a read).
        bounds = self.footers.bounds(path, self.column)
        if bounds is None or not _overlaps(bounds, self.start_us, self.end_us):
            return []
        return [_read(path, self.column, self.start, self.end, self.columns, self.footers, bounds)]

    def spark_files(self, sink: Path) -> list[pa.Table]:
        """The rows of Spark's file sink (the joins; a directory an older netmon wrote): each
        logged file by its statistics."""
        tables = []
        for path in sink_files(sink):
            try:
                bounds = self.footers.bounds(path, self.column)
                if bounds is not None and _overlaps(bounds, self.start_us, self.end_us):
                    tables.append(
                        _read(path, self.column, self.start, self.end, self.columns, self.footers, bounds)
                    )
            except FileNotFoundError:
                continue  # expired meanwhile (retention leaves Spark's log as it is)
        return tables


def read_range(
    directory: Path,
    column: str,
    start: dt.datetime,
    end: dt.datetime,
    columns: list[str] | None = None,
    *,
    compacted_by: str | None = None,
    footers: Footers | None = None,
    disorder_s: float = 0.0,
    encoded_text: bool = False,
) -> pa.Table | None:
    """The committed rows of a result directory whose ``column`` lies in ``[start, end]``
    (tz-aware), read from the files that can hold them only; None when no file can.

    The rows are exactly those of ``netmon.results.read_results(directory, columns)`` whose time
    is in the range (the files' order: no sorting). ``columns`` need not include ``column``.
    ``compacted_by``: the column compaction groups the kind's hours by (:data:`COMPACTION_COLUMNS`;
    default ``column``); when it is another one, every manifest is read and its files pruned by
    their statistics. ``disorder_s``: how far the batches of a per-batch sink may be out of time
    order (:func:`batch_disorder_s`; 0: in order), which widens the search over its commits by as
    much on both sides (``netmon.results_range.read_sink``), not the range. ``encoded_text``: the
    text columns as the cache keeps them, dictionary-encoded (:func:`encoded`; each file's chunk
    its own dictionary), for a reader that filters before it decodes (:func:`where_equal`,
    :func:`decoded`); by default plain text, the types of ``read_results``.
    """
    footers = _FOOTERS if footers is None else footers
    by = column if compacted_by is None else compacted_by
    disorder_us = round(disorder_s * 1e6)
    tables: list[pa.Table] = []
    for sink in sinks(Path(directory)):
        batches = _Tables(column, by, start, end, columns, footers)
        tables += read_sink(
            sink,
            batches,
            batches.start_us,
            batches.end_us,
            every_manifest=by != column,
            disorder_us=disorder_us,
        )
        tables += batches.spark_files(sink)
    if not tables:
        return None
    table = pa.concat_tables(tables, promote_options="default")
    return table if encoded_text else decoded(table)


def newest(
    directory: Path,
    column: str,
    *,
    compacted_by: str | None = None,
    footers: Footers | None = None,
    disorder_s: float = 0.0,
) -> dt.datetime | None:
    """The newest ``column`` of a result directory's committed rows (None: no row has one).

    Per sink: its newest batch with rows (walking back from the newest commit: the batches'
    times rise with their ids, and retention never compacts a sink's newest batches); without
    one, its compacted hours (the newest manifest's ``max_us``, or for hours of another column,
    ``compacted_by``, their files' statistics); and for Spark's file sink every logged file's
    statistics (cached: a redraw opens the new files' footers only). ``disorder_s``: how far the
    sink's batches may be out of time order (:func:`batch_disorder_s`; the walk back then goes on
    until no earlier batch can hold a newer row, ``netmon.results_range.newest_committed_us``).
    """
    footers = _FOOTERS if footers is None else footers
    by = column if compacted_by is None else compacted_by
    found: int | None = None
    for sink in sinks(Path(directory)):

        def newest_in_batch(batch_id: int, sink: Path = sink) -> int | None:
            bounds = _batch(sink, batch_id, column, footers).bounds
            return None if bounds is None else bounds[1]

        def oldest_in_batch(batch_id: int, sink: Path = sink) -> int | None:
            bounds = _batch(sink, batch_id, column, footers).bounds
            return None if bounds is None else bounds[0]

        candidates: list[int | None] = [
            newest_committed_us(
                sink, newest_in_batch, oldest=oldest_in_batch, disorder_us=round(disorder_s * 1_000_000)
            )
        ]
        if candidates[0] is None and by == column:
            candidates.append(newest_compacted_us(sink))
        elif candidates[0] is None:
            for manifest in compactions(sink).values():
                for name in manifest["files"]:
                    candidates.append(_newest_in(sink / name, column, footers))
        candidates += [_newest_in(path, column, footers) for path in sink_files(sink)]
        for us in candidates:
            if us is not None and (found is None or us > found):
                found = us
    return None if found is None else from_micros(found)


def _newest_in(path: Path, column: str, footers: Footers) -> int | None:
    try:
        bounds = footers.bounds(path, column)
    except FileNotFoundError:
        return None
    return None if bounds is None else bounds[1]
