"""A distinct-count query over packet record batches, offline: one report per closed sub-window.

This is what ``netmon analyze distinct`` runs. The conventions (``docs/distinct.md``) are the
ones the Spark job follows:

- Sub-window ``i`` covers event times ``[i*b, (i+1)*b)`` (``i = ts_ns // b_ns``), aligned like
  Spark's tumbling windows. The window closing with sub-window ``i`` covers ``[(i+1)*b - N, (i+1)*b)``
  and its report carries ``end = (i+1)*b`` (exclusive, ISO-8601 UTC).
- Sub-window ``i`` closes once the largest timestamp seen so far reaches ``(i+1)*b + watermark``
  (watermark 0: at the first record of a later sub-window), as Spark closes it. Sub-windows still
  open at the end of the input are not closed (the streaming job would not close them either),
  unless the run is given ``close_after_ns``: event time then advances to ``watermark +
  close_after_ns`` past the last record, as the pipeline's watermark does on the control message
  that ends a replay (``ingest.replay.ReplayOptions.close_windows_s``), and the sub-windows that end
  by ``close_after_ns`` after the last record close.
- A record is *late* when its timestamp is more than ``watermark`` behind the newest one seen
  before it (``ts < M_before - watermark``; every earlier record with a timestamp counts, with
  or without a key; the first record never is): counted in :class:`OfflineStats`, not in any
  window â the pipeline's one meaning of late (``docs/reliability.md``), whatever the batches.
  A record that is not late is never in a closed sub-window.
- One report per closed sub-window whose window holds at least one item. The first report comes
  at the end of the first sub-window; early windows reach back before the first packet, where
  there was no traffic. Windows with no items give no report (Spark has no rows for them).
  ``full_windows=True`` instead waits until N/b sub-windows have elapsed since the first record,
  the top-k issue's convention.
- A report lists groups by distinct count descending, then group text ascending (code-point order,
  which is also UTF-8 byte order), cut to ``top``.
- Records whose counted key or group key is null are skipped (``OfflineStats.skipped``).
- A window change at run time (seed 004's window knob, ``changes``: sub-window index -> the
  window in ns from the window ending with that sub-window on) follows
  :meth:`analytics.distinct.SubWindowDistinct.resize`: a shorter window is in force at once, a
  longer one grows by a sub-window per slide; each report's ``window_ns`` is the span it held.
- The granularity operator Γ (seed 004's CKSV granularity, ``granularity``: a schedule of
  ``analytics.granularity``, the one the pipeline made): the fine sub-windows' items are united
  into coarse sub-windows of ``m·b`` aligned to multiples of ``m·b``; one report per closed
  coarse sub-window (``sub_window_ns``), whose window holds the coarse sub-windows that end in
  its last ``N`` (:meth:`analytics.distinct.SubWindowDistinct.slide`). Not with ``changes`` yet.
- Each group's count carries the interval of the sketch's own error
  (:func:`analytics.distinct.hll_interval` of the count and ``lg_k``, what the pipeline's rows
  carry when nothing is sampled); an exact count (``exact=True``) is its own interval.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import repeat
from typing import Any, Protocol, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics.distinct import ExactSlidingDistinct, SubWindowDistinct, hll_interval
from analytics.distinct_queries import DistinctQuery
from analytics.granularity import FROM_START, coarse_starts, granularity_at
from analytics.keys import key_text
from analytics.timetext import iso_utc, parse_duration_ns

__all__ = [
    "DistinctReport",
    "Engine",
    "OfflineStats",
    "distinct_reports",
    "exact_oracle",
    "iso_utc",
    "parse_duration_ns",
    "run_engine",
    "seconds_to_ns",
]

_NEVER = -(2**62)


def seconds_to_ns(seconds: float, *, name: str = "seconds") -> int:
    """Seconds (as written, e.g. ``0.1``) to integer nanoseconds, exactly.

    >>> seconds_to_ns(0.1)
    100000000
    """
    try:
        ns = Decimal(str(seconds)) * 10**9
    except InvalidOperation:
        raise ValueError(f"{name}: not a number of seconds: {seconds!r}") from None
    if ns != ns.to_integral_value() or ns <= 0:
        raise ValueError(f"{name}: {seconds!r} s is not a positive whole number of nanoseconds")
    return int(ns)


@dataclass(frozen=True)
class DistinctReport:
    """One slide's answer: the window's exclusive end, and (group, distinct) pairs in order.

    ``lg_k`` is the HLL sketches' (their counts carry :func:`analytics.distinct.hll_interval`),
    ``None`` for exact counts. ``window_ns`` is the span the window held: the query's window,
    less while a window changed at run time grows (``distinct_reports(changes=...)``).
    """

    end_ns: int
    groups: tuple[tuple[str, int], ...]
    lg_k: int | None = None
    window_ns: int | None = None
    #: the length of the closing sub-window (ns): ``b``, or ``m·b`` under a granularity schedule
    #: (``distinct_reports(granularity=...)``)
    sub_window_ns: int | None = None

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """Each group's ``(distinct_low, distinct_high)``, in the order of :attr:`groups`."""
        counts = [n for _, n in self.groups]
        if self.lg_k is None:
            return tuple((n, n) for n in counts)
        low, high = hll_interval(counts, self.lg_k)
        return tuple(zip(low.tolist(), high.tolist(), strict=True))

    def to_json(self) -> dict[str, Any]:
        """``{"end": "<ISO-8601>", "groups": [{"group": ..., "distinct": ..., "distinct_low": ...,
        "distinct_high": ...}, ...]}``."""
        return {
            "end": iso_utc(self.end_ns),
            "groups": [
                {"group": g, "distinct": n, "distinct_low": low, "distinct_high": high}
                for (g, n), (low, high) in zip(self.groups, self.bounds, strict=True)
            ],
        }


@dataclass
class OfflineStats:
    """What a run saw: records read, counted, skipped (null key or time), late, reports made."""

    records: int = 0
    counted: int = 0
    skipped: int = 0
    late: int = 0
    slides: int = 0
    reports: int = 0
    first_ns: int | None = None
    last_ns: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return dict(self.__dict__)


class Engine(Protocol):
    """The interface shared by :class:`SubWindowDistinct` and :class:`ExactSlidingDistinct`."""

    N: int
    b: int

    def update(self, item: str, group: str = "") -> Self: ...
    def slide(self) -> Self: ...
    def estimate(self) -> dict[str, int]: ...
    def is_empty(self) -> bool: ...


@dataclass
class _Chunk:
    """One batch decoded for a query: timestamps, validity, and key texts as object arrays."""

    ts: np.ndarray  # int64 ns (0 where null)
    has_ts: np.ndarray  # bool
    valid: np.ndarray  # bool: counted key and group key present
    items: np.ndarray  # object (str | None)
    groups: np.ndarray | None  # object, or None for a global count


def _decode(batch: pa.RecordBatch | pa.Table, query: DistinctQuery) -> _Chunk:
    needed = ("ts", *query.count, *query.group_by)
    missing = [c for c in needed if c not in batch.schema.names]
    if missing:
        raise ValueError(f"batches: missing column(s) {', '.join(missing)} for query {query.name!r}")
    ts_col = batch.column("ts")
    if isinstance(ts_col, pa.ChunkedArray):
        ts_col = ts_col.combine_chunks()
    has_ts = ts_col.is_valid().to_numpy(zero_copy_only=False)
    ts = pc.cast(ts_col, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    items = key_text(batch, query.count)
    valid = items.is_valid().to_numpy(zero_copy_only=False)
    groups = None
    if query.group_by:
        g = key_text(batch, query.group_by)
        valid = valid & g.is_valid().to_numpy(zero_copy_only=False)
        groups = g.to_numpy(zero_copy_only=False)
    return _Chunk(ts, has_ts, valid, items.to_numpy(zero_copy_only=False), groups)


@dataclass
class _Driver:
    """Event time -> pending sub-windows -> engine slides -> reports (see the module docstring)."""

    engine: Engine
    watermark_ns: int = 0
    full_windows: bool = False
    top: int | None = None
    stats: OfflineStats = field(default_factory=OfflineStats)
    #: window changes: sub-window index -> the window (ns) from the window ending with it on
    changes: dict[int, int] = field(default_factory=dict)
    #: the granularity operator Γ's schedule (``analytics.granularity``): None, every sub-window b
    granularity: list[tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        engine = self.engine
        # The interval the reports state: the sketches' own error; none for exact counts.
        self.lg_k = engine.lg_k if isinstance(engine, SubWindowDistinct) and not engine.exact else None
        self.b = self.engine.b
        self.n = self.engine.N // self.engine.b
        self.pending: dict[int, dict[tuple[str, str], None]] = {}
        self.closed_through = _NEVER  # every sub-window <= this is closed
        self.next: int | None = None  # the engine's open sub-window; None while idle
        self.first: int | None = None
        self.max_ts = _NEVER
        self._changes = sorted(self.changes.items())
        if self._changes and not hasattr(engine, "resize"):
            raise ValueError(f"changes: {type(engine).__name__} cannot change its window")
        self._pos: int | None = None  # the next sub-window whose slide the engine has not seen
        schedule = list(self.granularity or [(FROM_START, 1)])
        #: Γ's schedule, None without one; the engine's next (coarse) sub-window once it slid
        self._schedule = (
            None if schedule == [(FROM_START, 1)] else [(FROM_START, schedule[0][1]), *schedule[1:]]
        )
        self._at: int | None = None
        if self._schedule is not None:
            if self._changes:
                raise ValueError("granularity: not with window changes in the offline run (yet)")
            if not isinstance(engine, SubWindowDistinct):
                raise ValueError(f"granularity: {type(engine).__name__} has sub-windows of one length")
            self._max_m = max(m for _, m in self._schedule)

    def feed(self, chunk: _Chunk) -> Iterator[DistinctReport]:
        st, b = self.stats, self.b
        st.records += len(chunk.ts)
        if not len(chunk.ts):
            return
        idx = np.floor_divide(chunk.ts, b)
        timed = np.flatnonzero(chunk.has_ts)
        if timed.size:
            if self.first is None:
                self.first = int(idx[timed[0]])
                st.first_ns = int(chunk.ts[timed[0]])
        # Closable sub-window after each record, from the running maximum timestamp.
        runmax = np.maximum.accumulate(np.where(chunk.has_ts, chunk.ts, _NEVER))
        runmax = np.maximum(runmax, self.max_ts)
        closable = np.where(runmax > _NEVER, (runmax - self.watermark_ns) // b - 1, _NEVER)
        # The newest timestamp before each record: late when more than the watermark behind it.
        newest = np.concatenate(([self.max_ts], runmax[:-1]))
        counted = chunk.has_ts & chunk.valid
        late = counted & (newest > _NEVER) & (chunk.ts < newest - self.watermark_ns)
        use = np.flatnonzero(counted & ~late)
        st.skipped += int(len(chunk.ts) - counted.sum())
        st.late += int(late.sum())
        st.counted += int(use.size)
        if use.size:
            self._stash(idx[use], chunk.items[use], None if chunk.groups is None else chunk.groups[use])
        self.max_ts = int(runmax[-1])
        if self.max_ts > _NEVER:
            st.last_ns = self.max_ts
        yield from self._close_through(int(closable[-1]))

    def finish(self, close_after_ns: int) -> Iterator[DistinctReport]:
        """The end of the input: close the sub-windows that end by ``close_after_ns`` past the last record."""
        if self.max_ts > _NEVER:
            yield from self._close_through((self.max_ts + close_after_ns) // self.b - 1)

    def _stash(self, idx: np.ndarray, items: np.ndarray, groups: np.ndarray | None) -> None:
        cuts = np.flatnonzero(np.diff(idx)) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [idx.size])), strict=True):
            i = int(idx[lo])
            g = repeat("") if groups is None else groups[lo:hi]
            # Unique (group, item) pairs in first-arrival order: HLL sketches see file order.
            self.pending.setdefault(i, {}).update(dict.fromkeys(zip(g, items[lo:hi], strict=False)))
            if self._schedule is None:
                if self.next is None or i < self.next:
                    self.next = i
            elif self.next is None:
                # Γ: the engine goes on where it stopped (the empty sub-windows since slide too)
                self.next = self._at if self._at is not None else self._start(i)
            else:
                self.next = min(self.next, self._start(i))

    def _start(self, i: int) -> int:
        """The start of the schedule's (coarse) sub-window holding fine sub-window ``i``."""
        assert self._schedule is not None
        return int(coarse_starts(self._schedule, np.array([i], np.int64))[0][0])

    def _close_through(self, c: int) -> Iterator[DistinctReport]:
        if c <= self.closed_through:
            return
        self.closed_through = c
        if self._schedule is not None:
            yield from self._close_coarse(c)
            return
        eng = self.engine
        while self.next is not None and self.next <= c:
            i = self.next
            if i not in self.pending and eng.is_empty():
                # Nothing in the window and nothing here: jump to the next sub-window with data.
                # The engine then holds only empty sub-windows, the same state as sliding there.
                ahead = [k for k in self.pending if k <= c]
                if not ahead:
                    self.next = min(self.pending) if self.pending else None
                    return
                i = min(ahead)
            if self._changes:
                self._resize_through(i)
            for g, it in self.pending.pop(i, {}):
                eng.update(it, g)
            eng.slide()
            self._pos = i + 1
            self.stats.slides += 1
            self.next = i + 1
            if eng.is_empty():
                continue
            if self.full_windows and self.first is not None and i - self.first + 1 < self.n:
                continue
            self.stats.reports += 1
            held = getattr(eng, "window_held", eng.N)
            yield DistinctReport((i + 1) * self.b, _ranked(eng.estimate(), self.top), self.lg_k, held, self.b)

    def _close_coarse(self, c: int) -> Iterator[DistinctReport]:
        """Γ: close the schedule's sub-windows that end by fine sub-window ``c``, each the union
        of its fine ones (``slide(m)``), the empty ones too: the window keeps whole sub-windows,
        so where they start matters. A gap in event time is jumped over (the engine idles) up
        to ``N + max m`` before the next data, from where the sub-windows are slid one by one."""
        eng = self.engine
        assert self._schedule is not None and isinstance(eng, SubWindowDistinct)
        while self.next is not None:
            s = self.next
            m = granularity_at(self._schedule, s)
            if s + m - 1 > c:
                return
            if eng.is_empty() and not any(i in self.pending for i in range(s, s + m)):
                if not self.pending:
                    self._at, self.next = s, None  # resumed at s by the next data (_stash)
                    return
                j = self._start(min(self.pending) - self.n - self._max_m)
                if j > s:
                    eng.idle(j - s)
                    self._at = self.next = j
                    continue
            for i in range(s, s + m):
                for g, it in self.pending.pop(i, {}):
                    eng.update(it, g)
            eng.slide(m)
            self._at = self.next = s + m
            self.stats.slides += 1
            if eng.is_empty():
                continue
            if self.full_windows and self.first is not None and s + m - self.first < self.n:
                continue
            self.stats.reports += 1
            yield DistinctReport(
                (s + m) * self.b, _ranked(eng.estimate(), self.top), self.lg_k, eng.window_held, m * self.b
            )

    def _resize_through(self, i: int) -> None:
        """The window changes up to sub-window ``i``, before it closes; the empty sub-windows a
        jump skipped (the engine held nothing) slide by as :meth:`SubWindowDistinct.idle`."""
        eng: Any = self.engine
        while self._changes and self._changes[0][0] <= i:
            at, window_ns = self._changes.pop(0)
            pos = at if self._pos is None else self._pos
            if at > pos:
                eng.idle(at - pos)
            self._pos = max(pos, at)
            eng.resize(window_ns)
        if self._pos is not None and i > self._pos:
            eng.idle(i - self._pos)


def _ranked(counts: dict[str, int], top: int | None) -> tuple[tuple[str, int], ...]:
    def key(kv: tuple[str, int]) -> tuple[int, str]:
        return (-kv[1], kv[0])

    if top is None or top >= len(counts):
        return tuple(sorted(counts.items(), key=key))
    return tuple(heapq.nsmallest(top, counts.items(), key=key))


def _check_options(top: int | None, watermark_ns: int, close_after_ns: int | None = None) -> None:
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"top: expected a positive integer or None (all groups), got {top!r}")
    checks = {"watermark_ns": watermark_ns, "close_after_ns": close_after_ns}
    for name, value in checks.items():
        if value is None and name == "close_after_ns":
            continue  # not closing at the end
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")


def run_engine(
    engine: Engine,
    batches: Iterable[pa.RecordBatch | pa.Table],
    query: DistinctQuery,
    *,
    top: int | None = None,
    watermark_ns: int = 0,
    full_windows: bool = False,
    stats: OfflineStats | None = None,
    close_after_ns: int | None = None,
    changes: dict[int, int] | None = None,
    granularity: int | Sequence[tuple[int, int]] = 1,
) -> Iterator[DistinctReport]:
    """Drive any engine with the shared interface (synopsis or oracle) over record batches.

    ``engine.N`` and ``engine.b`` are the window and sub-window in nanoseconds. Options are
    checked at once; the batches are read lazily, as the reports are consumed.
    ``close_after_ns``: at the end of the input, close the sub-windows that end at most this long
    after the last record (the pipeline at the end of a replay); ``None`` leaves them open.
    ``changes``: window changes, sub-window index -> the window in ns from the window ending
    with that sub-window on (the engine's ``resize``). ``granularity``: the granularity operator
    Γ's schedule (``analytics.granularity``: ``[(start, m), ...]``, or one ``m`` from the start),
    as the pipeline's ``netmon tune --granularity distinct/NAME`` made it (``pipeline.distinct``).
    """
    _check_options(top, watermark_ns, close_after_ns)
    stats = stats if stats is not None else OfflineStats()
    schedule = [(FROM_START, granularity)] if isinstance(granularity, int) else list(granularity)
    driver = _Driver(engine, watermark_ns, full_windows, top, stats, dict(changes or {}), schedule)
    return _run(driver, batches, query, close_after_ns)


def _run(
    driver: _Driver,
    batches: Iterable[pa.RecordBatch | pa.Table],
    query: DistinctQuery,
    close_after_ns: int | None,
) -> Iterator[DistinctReport]:
    for batch in batches:
        yield from driver.feed(_decode(batch, query))
    if close_after_ns is not None:
        yield from driver.finish(close_after_ns)


def distinct_reports(
    batches: Iterable[pa.RecordBatch | pa.Table],
    query: DistinctQuery,
    *,
    exact: bool = False,
    lg_k: int = 12,
    top: int | None = None,
    watermark_ns: int = 0,
    full_windows: bool = False,
    stats: OfflineStats | None = None,
    close_after_ns: int | None = None,
    changes: dict[int, int] | None = None,
    granularity: int | Sequence[tuple[int, int]] = 1,
) -> Iterator[DistinctReport]:
    """Run ``query`` over record batches (:data:`netmon.records.ARROW_SCHEMA`, file order).

    Yields one :class:`DistinctReport` per closed sub-window whose window holds an item, using
    a :class:`SubWindowDistinct` (HLL sketches, or exact sets with ``exact=True``).
    ``close_after_ns`` closes, at the end, the sub-windows ending at most that long after the
    last record (:func:`run_engine`). ``changes`` changes the window at run time (sub-window
    index -> window in ns, :meth:`SubWindowDistinct.resize`; module docstring); ``granularity``
    its sub-windows (Γ's schedule, as :func:`run_engine`; module docstring).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"ts": pa.array([0, 10**9, 2 * 10**9], pa.timestamp("ns", tz="UTC")),
    ...               "src_ip": ["10.0.0.1", "10.0.0.2", "10.0.0.3"], "dst_ip": ["192.0.2.7"] * 3})
    >>> q = DistinctQuery(name="ddos", count="src_ip", group_by="dst_ip", window_s=2, sub_window_s=1)
    >>> report = [r.to_json() for r in distinct_reports([t], q)][-1]  # 10.0.0.3's sub-window stays open
    >>> report["end"], report["groups"]  # a count in coupon mode: its own interval
    ('1970-01-01T00:00:02Z', [{'group': '192.0.2.7', 'distinct': 2, 'distinct_low': 2, 'distinct_high': 2}])
    >>> [r.end_ns for r in distinct_reports([t], q, close_after_ns=10**9)][-1]  # closed
    3000000000
    """
    engine = SubWindowDistinct(
        seconds_to_ns(query.window_s, name="window_s"),
        seconds_to_ns(query.sub_window_s, name="sub_window_s"),
        lg_k=lg_k,
        exact=exact,
    )
    return run_engine(
        engine, batches, query, top=top, watermark_ns=watermark_ns, full_windows=full_windows, stats=stats,
        close_after_ns=close_after_ns, changes=changes, granularity=granularity,
    )  # fmt: skip


def exact_oracle(query: DistinctQuery) -> ExactSlidingDistinct:
    """The brute-force engine for ``query`` (tests and the accuracy benchmark)."""
    return ExactSlidingDistinct(
        seconds_to_ns(query.window_s, name="window_s"), seconds_to_ns(query.sub_window_s, name="sub_window_s")
    )
