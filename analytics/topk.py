"""Sliding-window frequent items from per-sub-window top-k lists (Golab, ch. 6, Algorithm 6).

The window of ``N`` packets (or ``N`` nanoseconds) is cut into ``N/b`` sub-windows of ``b``
packets (or ``b`` nanoseconds, aligned to multiples of ``b`` in event time). Each sub-window's
exact counts are reduced to its top-k list; a queue of those lists, global counters summed over
them and the threshold ``delta`` (the sum of the sub-windows' k-th counts) are all that is kept:
O(k·N/b) key–count pairs. Items whose summed count exceeds ``delta`` are reported; they are truly
above ``delta`` (no false positives) and their reported counts never exceed their true counts.

False negatives (issue 18): every item whose true window count exceeds ``2·delta`` is reported.
For an item with counts ``c_i`` in the window's sub-windows, k-th counts ``d_i`` (``delta = Σ d_i``),
``L`` the sub-windows whose top-k list holds it and ``S = Σ_L c_i`` its summed count: an unlisted
item has at most the k-th count (``c_i ≤ d_i`` off ``L``), so its true count is
``T ≤ S + Σ_{i∉L} d_i ≤ S + delta``; unreported means ``S ≤ delta``, so ``T ≤ 2·delta``. A reported
item has ``count ≤ T ≤ count + delta``. Tighter, as a listed item has ``c_i ≥ d_i``:
``T ≤ delta + Σ_L (c_i − d_i)``, which gives ``T ≤ delta`` for every item when ``k = 1`` (and
then nothing is ever reported) and for every unreported one when ``N = b``. Otherwise ``2·delta``
is attained (:func:`unreported_bound`). The counts are those of the records the query counted: a
drop box (``docs/overload.md``) makes them and ``delta`` Horvitz–Thompson estimates, and the bound
then holds for the estimates, not deterministically for the true counts.

Conventions shared by every implementation (offline, oracle, baselines, Spark), see ``docs/topk.md``:

* a sub-window's top-k: count descending, ties by the key text ascending; with fewer than k
  distinct keys, all of them and the k-th count is 0;
* ``delta`` = the sum of the k-th counts of the window's sub-windows;
* a report each time a sub-window closes and the window then holds exactly ``N/b`` sub-windows
  (the first at the end of sub-window ``N/b``); time-based, only windows that hold data (a
  nonzero count) are reported, so a gap in event time costs O(N/b) whatever its length;
* reported items: summed count strictly greater than ``delta``, by count descending then key text;
* time-based, the granularity operator Γ (:meth:`SubWindowTopK.set_granularity`, seed 004) may
  make sub-windows of ``m·b`` from an instant on: the callers sum the fine sub-windows' full
  counts into each (so its top-k list is exact), and a window holds the whole sub-windows that
  start in its last ``N``;
* a report is ``{"end": ..., "delta": int, "items": [{"key": str, "count": int}, ...]}`` where
  ``end`` is the number of records counted so far (count-based) or the window's exclusive end
  time in ISO-8601 UTC (time-based), e.g. ``"2024-05-01T12:00:10.500Z"``.
"""

from __future__ import annotations

import heapq
import struct
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from operator import itemgetter
from typing import Any, Self, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics._base import Base
from analytics.timetext import iso_utc as format_end

__all__ = ["ExactSlidingTopK", "SubWindowTopK", "format_end", "top_k", "unreported_bound"]

Report = dict[str, Any]
Items = tuple[tuple[str, int], ...]
#: A report as ``add_subwindow_top`` gives it: the closing sub-window's index, delta, the items.
TopRow = tuple[int, int, list[tuple[str, int]]]
#: ``TopRow``, the span the report's window holds (``N`` unless it grows after a resize or a
#: granularity change) and the window's end (``N``'s unit).
HeldRow = tuple[int, int, list[tuple[str, int]], int, int]
_T = TypeVar("_T")

_NS_PER_S = 1_000_000_000


def top_k(counts: Mapping[str, int], k: int) -> tuple[Items, int]:
    """A sub-window's top-k list and k-th count under the shared conventions.

    Count descending, ties by key text ascending; with fewer than ``k`` distinct keys all of them
    and a k-th count of 0. Zero counts are not items.

    >>> top_k({"b": 3, "a": 3, "c": 1}, 2)
    ((('a', 3), ('b', 3)), 3)
    >>> top_k({"a": 5}, 2)
    ((('a', 5),), 0)
    """
    if len(counts) <= k:
        # Already short (the pipeline passes each sub-window's top-k rows): all of them, ranked
        # (zero counts sort last and are cut), without nsmallest's heap, which cost more.
        ranked = _ranked(list(counts.items()))
        while ranked and not ranked[-1][1]:
            ranked.pop()
        items = tuple(ranked)
    else:
        items = tuple(heapq.nsmallest(k, ((key, c) for key, c in counts.items() if c), key=_rank))
    return items, (items[-1][1] if len(items) == k else 0)


def unreported_bound(delta: int, k: int, n_sub: int) -> int:
    """The most an item missing from a report can have counted in the window: ``2·delta``.

    ``delta`` itself when ``k == 1`` or the window is one sub-window (``n_sub = N/b == 1``); the
    module docstring has the proof. The bound is attained: with ``k = 2`` and two event-time
    sub-windows, the first holding only ``x`` (5 records, fewer than k keys: k-th count 0) and
    the second ``a``, ``b`` and ``x`` 5 times each (``x`` third: k-th count 5) give
    ``delta = 5``, ``x`` a summed count of 5 (not reported) and a true count of 10.

    >>> unreported_bound(5, 2, 2), unreported_bound(5, 1, 2), unreported_bound(5, 3, 1)
    (10, 5, 5)
    """
    return delta if k == 1 or n_sub == 1 else 2 * delta


def _rank(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


_COUNT = itemgetter(1)


def _ranked(pairs: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``pairs`` (distinct keys) sorted in place by count descending, then key text ascending.

    Two sorts without a Python key function: by key, then stably by count (``reverse`` keeps
    stability); a third faster than ``key=_rank`` on short lists (measured).
    """
    pairs.sort()
    pairs.sort(key=_COUNT, reverse=True)
    return pairs


def _to_units(name: str, value: Any, time_based: bool) -> int:
    """Validate a window parameter and return it in records (count-based) or nanoseconds."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, timedelta | np.timedelta64):
        if not time_based:
            raise ValueError(f"{name}: a duration needs time_based=True, got {value!r}")
        if isinstance(value, np.timedelta64):
            units = int(value.astype("timedelta64[ns]").astype(np.int64))
        elif hasattr(value, "value"):  # pandas.Timedelta keeps nanoseconds
            units = int(value.value)
        else:
            units = (value.days * 86_400 + value.seconds) * _NS_PER_S + value.microseconds * 1000
    elif isinstance(value, int | np.integer):
        units = int(value)
    else:
        kind = "an integer number of nanoseconds or a timedelta" if time_based else "an integer"
        raise ValueError(f"{name}: expected {kind}, got {value!r}")
    if units < 1:
        raise ValueError(f"{name}: must be positive, got {value!r}")
    return units


class _SubWindowed(Base):
    """Shared driver: parameters, the open sub-window, closing, gap filling and report framing.

    The verbs of ``analytics`` (see its docstring): ``update``/``update_many`` count records in the
    open sub-window, ``slide()`` closes it (both return ``self``), ``report()`` reads the current
    window; ``seek`` and ``add_subwindow`` are batch forms that may close several sub-windows and
    return the reports made (``add_subwindow_top``: unframed, for callers that build their own
    rows). There is no ``merge``: the top-k list of a sub-window's union is not a
    function of the parts' lists (a key k+1-th in both parts can be first in their sum), so two
    instances' summaries cannot be combined exactly; the Spark job sums exact counts per
    sub-window first and then calls ``add_subwindow``.

    Subclasses keep the window's summaries: ``_push(index, counts)`` adds a closed sub-window,
    ``_pop()`` expires the oldest, ``_delta()`` and ``_items()`` give the report's contents.
    """

    _VERSION = 1

    def __init__(self, N: int | timedelta, b: int | timedelta, k: int, *, time_based: bool = False) -> None:
        self.N = N
        self.b = b
        self.k = k
        self.time_based = time_based
        if not isinstance(time_based, bool):
            raise ValueError(f"time_based: expected True or False, got {time_based!r}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"k: must be an integer >= 1, got {k!r}")
        self._k = int(k)
        self._N = _to_units("N", N, time_based)
        self._b = _to_units("b", b, time_based)
        if self._N % self._b:
            raise ValueError(f"N: must be a multiple of b (N={N!r}, b={b!r})")
        self._n_sub = self._N // self._b
        # The span (in b) a window must have reached to be reported: N/b, until a window change
        # (resize) grows the window, whose reports then span what is held, growing to the new N/b.
        self._n_report = self._n_sub
        # What the stream has closed so far, in b, capped at _n_report: reported once it is reached.
        self._reach = 0
        # Indexes (in b: ts_ns // b) where the sub-windows in the window start, oldest first, and
        # their lengths in b (the granularity operator: 1, or m after set_granularity).
        self._indexes: deque[int] = deque()
        self._sizes: deque[int] = deque()
        # The open sub-window's length in b, and the granularity changes not yet in force
        # (start index, m), ascending: each starts at a multiple of the m before it and its own.
        self._m = 1
        self._pending: list[tuple[int, int]] = []
        # Which of them hold data (a nonzero count), and how many do: a time-based window holding
        # none is not reported, and a gap of empty sub-windows is crossed in O(N/b) steps.
        self._filled: deque[bool] = deque()
        self._n_filled = 0
        self._open: dict[str, int] = {}  # exact counts of the open sub-window
        self._open_records = 0
        # The open sub-window's index: count-based sub-windows are numbered 0, 1, ... from the start
        # of the stream; time-based ones are ts_ns // b_ns, unknown until the first seek.
        self._index: int | None = None if time_based else 0

    # -- feeding the open sub-window ---------------------------------------------------------------

    def update(self, key: str, weight: int = 1) -> Self:
        """Count one record of ``key`` (with ``weight``: 1 or its bytes) in the open sub-window."""
        self._check_open(1)
        w = int(weight)
        if w < 0:
            raise ValueError(f"weight: must be >= 0, got {weight!r}")
        self._open[key] = self._open.get(key, 0) + w
        self._open_records += 1
        return self

    def update_many(
        self, keys: Iterable[str] | pa.Array, weights: Iterable[int] | pa.Array | None = None
    ) -> Self:
        """Count many records in the open sub-window (vectorized for pyarrow arrays)."""
        if isinstance(keys, pa.Array | pa.ChunkedArray):
            n = len(keys)
            if keys.null_count:
                raise ValueError("keys: null keys must be skipped before counting")
            w = pa.array(np.ones(n, np.int64)) if weights is None else pc.cast(weights, pa.int64())
            if len(w) != n:
                raise ValueError(f"weights: expected {n} weights, got {len(w)}")
            if n and pc.min(w).as_py() < 0:
                raise ValueError("weights: must be >= 0")
            self._check_open(n)
            table = pa.table({"key": keys, "w": w})
            grouped = table.group_by("key", use_threads=False).aggregate([("w", "sum")])
            sums: dict[str, int] = dict(
                zip(grouped["key"].to_pylist(), grouped["w_sum"].to_pylist(), strict=True)
            )
            self._add_counts(sums, n)
            return self
        keys = list(keys)
        ws = [1] * len(keys) if weights is None else [int(x) for x in weights]
        if len(ws) != len(keys):
            raise ValueError(f"weights: expected {len(keys)} weights, got {len(ws)}")
        if any(x < 0 for x in ws):
            raise ValueError("weights: must be >= 0")
        self._check_open(len(keys))
        counts: dict[str, int] = {}
        for key, x in zip(keys, ws, strict=True):
            counts[key] = counts.get(key, 0) + x
        self._add_counts(counts, len(keys))
        return self

    def _add_counts(self, counts: Mapping[str, int], records: int) -> None:
        for key, c in counts.items():
            self._open[key] = self._open.get(key, 0) + int(c)
        self._open_records += records

    def _check_open(self, n: int) -> None:
        if self._index is None:
            raise ValueError("index: no open sub-window yet; call seek(ts_ns // b) first (time-based)")
        if not self.time_based and self._open_records + n > self._b:
            raise ValueError(
                f"b: the open sub-window would hold {self._open_records + n} records, more than b={self._b};"
                " call slide() after every b records"
            )

    # -- closing sub-windows -----------------------------------------------------------------------

    def slide(self) -> Self:
        """Close the open sub-window: it enters the window, the oldest beyond ``N/b`` expires.

        The next sub-window opens. Count-based, the open sub-window must hold exactly ``b``
        records. :meth:`report` then reads the window (``slide().report()`` is the report this
        closing made, or None).
        """
        if self._index is None:
            raise ValueError("index: no open sub-window yet; call seek(ts_ns // b) first (time-based)")
        if not self.time_based and self._open_records != self._b:
            raise ValueError(f"b: the open sub-window holds {self._open_records} records, not b={self._b}")
        self._close(self._open)
        return self

    def resize(self, N: int | timedelta) -> Self:
        """Change the window to ``N`` (a multiple of ``b``) from the next closing sub-window on.

        Seed 004's window knob (Cammert et al., §4.2–4.3), changed at run time at an instant ``t``,
        the end of the last sub-window closed. A shorter window is in force at once: the oldest
        top-k lists beyond the new ``N/b`` expire now (the state shrinks at ``t``; the seed's
        join keeps its tuples until ``t + min(w, w')`` because each was inserted with its
        window's validity, but a window of sub-window summaries can drop them at once). A
        longer window grows as new sub-windows close: the reports go on, each spanning what is
        held, until it holds the new ``N/b`` at ``t + (N' − N)``, the seed's adaptation delay
        (``t + max(w, w')`` counted from when the old window began). :attr:`window_held_units`
        says what a report spans; the reports' framing is unchanged.

        >>> topk = SubWindowTopK(N=4, b=2, k=2)
        >>> topk.update_many(["a", "a"]).slide().update_many(["b", "b"]).slide().report()["items"]
        [{'key': 'a', 'count': 2}, {'key': 'b', 'count': 2}]
        >>> topk.resize(2).report()["items"], topk.window_held_units
        ([{'key': 'b', 'count': 2}], 2)
        >>> _ = topk.resize(6).update_many(["b", "c"]).slide()
        >>> topk.report()["items"], topk.window_held_units  # 4 of the 6 records: growing
        ([{'key': 'b', 'count': 3}], 4)
        """
        units = _to_units("N", N, self.time_based)
        if units % self._b:
            raise ValueError(f"N: must be a multiple of b (N={N!r}, b={self.b!r})")
        n_sub = units // self._b
        if self._indexes:
            assert self._index is not None
            self._expire(self._index - n_sub)
        self.N, self._N, self._n_sub = N, units, n_sub
        self._n_report = min(self._n_report, n_sub)
        self._reach = min(self._reach, self._n_report)
        return self

    def set_granularity(self, m: int, at: int | None = None) -> Self:
        """The granularity operator Γ (seed 004, CKSV): sub-windows of ``m·b`` from index ``at`` on.

        Time-based only. ``at`` (in ``b``: ``ts_ns // b``) is where the first sub-window of
        ``m·b`` starts: at or after the open sub-window, a multiple of both the granularity in
        force just before it and ``m`` (CKSV change coarser to finer only at instants of the
        coarser granularity; the same alignment is asked both ways, so every sub-window is
        aligned to a multiple of its own length in event time). ``None``: from the start, before
        any sub-window is open. A later change replaces the pending ones at or after its ``at``.
        The callers sum the fine sub-windows' full counts into each coarse one and pass its start
        index (``add_subwindow``): summed before its top-k is taken, Alg. 6 stays exact for the
        coarse sub-window. The window keeps the whole sub-windows that lie in its last ``N``
        (``window_held_units``): after a change to a finer granularity, less than ``N`` until
        the coarse sub-windows straddling its start leave.

        >>> topk = SubWindowTopK(N=4, b=1, k=1, time_based=True)
        >>> _ = topk.add_subwindow({"a": 1}, 0), topk.set_granularity(2, at=2)
        >>> topk.add_subwindow({"a": 1}, 1), topk.add_subwindow({"b": 3}, 2)
        ([], [{'end': '1970-01-01T00:00:00.000000004Z', 'delta': 5, 'items': []}])
        >>> topk.granularity, topk.window_held_units
        (2, 4)
        """
        if not self.time_based:
            raise ValueError("m: the granularity operator is for time-based windows")
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise ValueError(f"m: must be an integer >= 1, got {m!r}")
        m = int(m)
        if at is None:
            if self._index is not None:
                raise ValueError("at: required once a sub-window is open")
            self._m, self._pending = m, []
            return self
        at = int(at)
        if self._index is not None and at < self._index:
            raise ValueError(f"at: {at} is before the open sub-window {self._index}")
        pending = [(i, x) for i, x in self._pending if i < at]
        before = pending[-1][1] if pending else self._m
        if at % before or at % m:
            raise ValueError(
                f"at: {at} must be a multiple of the granularities before it ({before}) and after ({m})"
            )
        if m != before:
            pending.append((at, m))
        self._pending = pending
        if self._index is not None and pending and pending[0][0] <= self._index:
            if self._open_records or self._open:
                raise ValueError("at: the open sub-window already has per-record updates")
            self._settle()
        return self

    def _settle(self) -> None:
        """Put the pending granularities whose start the open sub-window has reached in force."""
        assert self._index is not None
        while self._pending and self._pending[0][0] <= self._index:
            self._m = self._pending.pop(0)[1]

    def _m_at(self, index: int) -> int:
        """The granularity of the sub-window starting at ``index`` (at or after the open one)."""
        m = self._m
        for start, x in self._pending:
            if start > index:
                break
            m = x
        return m

    def _check_aligned(self, index: int) -> None:
        m = self._m_at(index) if self._pending or self._m > 1 else 1
        if index % m:
            raise ValueError(f"index: sub-window {index} does not start a sub-window of {m}·b")

    def _expire(self, floor: int) -> None:
        """Drop the sub-windows starting before ``floor`` (out of the window's last N)."""
        indexes = self._indexes
        while indexes and indexes[0] < floor:
            indexes.popleft()
            self._sizes.popleft()
            self._n_filled -= self._filled.popleft()
            self._pop()

    def seek(self, index: int, *, report: bool = True) -> list[Report]:
        """Time-based: make sub-window ``index`` (``ts_ns // b``) the open one (a batch form).

        Closes the open sub-window and every empty sub-window before ``index`` (each empty one is a
        summary with no items that counts toward ``N/b``) and returns their reports, in order:
        several windows may close, and :meth:`report` shows only the last. ``report=False`` skips
        building them (evaluations that read only some windows).
        """
        if not self.time_based:
            raise ValueError("index: seek() is for time-based windows; count-based ones use slide()")
        index = int(index)
        self._check_aligned(index)
        if self._index is None:
            self._index = index
            self._settle()
            return []
        if index < self._index:
            raise ValueError(f"index: sub-window {index} is before the open sub-window {self._index}")
        return self._close_until(index, self._frame if report else None)

    def add_subwindow(
        self, counts: Mapping[str, int], index: int | None = None, *, report: bool = True
    ) -> list[Report]:
        """Add an already-counted sub-window and close it (a batch form): the reports it made.

        ``counts`` are the sub-window's exact counts, or just its top-k rows: only the top-k list
        enters the window, so passing all counts or only the top-k rows (as
        the Spark operator does) gives the same state. ``index``: count-based, the sub-window's
        number (must be the next one; ``None`` means next); time-based, ``ts_ns // b`` — any
        skipped sub-windows are closed as empty first. Returns the reports made, in order (several
        windows may close; :meth:`report` shows only the last); ``report=False`` skips them.
        """
        return [out for _, out in self.add_subwindow_indexed(counts, index, report=report)]

    def add_subwindow_indexed(
        self, counts: Mapping[str, int], index: int | None = None, *, report: bool = True
    ) -> list[tuple[int, Report]]:
        """``add_subwindow``, each report with the index of the sub-window whose closing made it.

        Time-based, windows without data are not reported, so the reports of one call need not
        close consecutive sub-windows; callers that derive per-window values (the streaming
        merge's traffic totals) take the index from here.
        """
        return self._add_subwindow(counts, index, self._indexed_frame if report else None)

    def add_subwindow_top(self, counts: Mapping[str, int], index: int | None = None) -> list[TopRow]:
        """``add_subwindow_indexed`` without framing: each report as ``(index, delta, top())``.

        The same reports, as the tuples callers that build their own rows need (the streaming
        merge, ``analytics.topk_merge``): no report dicts and no ISO-8601 text, which cost more
        per report than the algorithm when the slide is short (a day of one-second slides).
        """
        return self._add_subwindow(counts, index, self._top_row)

    def add_subwindow_held(self, counts: Mapping[str, int], index: int | None = None) -> list[HeldRow]:
        """``add_subwindow_top`` with the span each report covers, ``(index, delta, top(), held)``:
        ``held`` is ``N`` except while a window grows after :meth:`resize` (the streaming merge
        writes it with every row)."""
        return self._add_subwindow(counts, index, self._held_row)

    def _add_subwindow(
        self, counts: Mapping[str, int], index: int | None, make: Callable[[int], _T] | None
    ) -> list[_T]:
        """The batch forms' driver: close up to ``index``, then ``counts``; ``make`` each report."""
        if self._open_records or self._open:
            raise ValueError("counts: the open sub-window already has per-record updates; call slide() first")
        if self.time_based:
            if index is None:
                raise ValueError("index: required for time-based windows (ts_ns // b)")
            index = int(index)
            if self._index is not None and index < self._index:
                raise ValueError(f"index: sub-window {index} is before the open sub-window {self._index}")
            self._check_aligned(index)
        elif index is not None and int(index) != self._index:
            raise ValueError(f"index: expected the next sub-window {self._index}, got {index}")
        opened = {key: int(c) for key, c in counts.items()}
        if opened and min(opened.values()) < 0:  # checked before any sub-window closes
            key, c = next((key, c) for key, c in counts.items() if int(c) < 0)
            raise ValueError(f"counts: must be >= 0, got {c!r} for {key!r}")
        reports: list[_T] = []
        if self.time_based:
            assert index is not None
            if self._index is None:
                self._index = index
                self._settle()
            elif index > self._index:
                reports = self._close_until(index, make)
        closing = self._index
        assert closing is not None
        if self._close(opened) and make is not None:
            reports.append(make(closing))
        return reports

    def _close_until(self, index: int, make: Callable[[int], _T] | None) -> list[_T]:
        """Close the open sub-window and the empty ones before ``index`` (time-based).

        A window that holds no data is skipped whole: once every sub-window in the window and the
        open one are empty, closing one more empty sub-window leaves the same summaries, so the
        open index jumps to ``index - N/b`` at once and only the last ``N/b`` are closed (none
        reported). A gap's cost is O(N/b), whatever its length (a capture replayed years after
        another would otherwise close ~3×10⁸ one-second sub-windows per decade). Each report is
        ``make(closing index)``, called while the window is the reported one; ``None`` makes none.
        """
        assert self._index is not None
        reports: list[_T] = []
        while self._index < index:
            if not self._n_filled and not self._has_data(self._open):
                # Closing empty sub-windows up to `target` and N/b more leaves the same (empty)
                # window as jumping there and closing the N/b: jump, to a start of the
                # granularity in force, not past a pending change (the next loop jumps on).
                target = index - self._n_sub
                if self._pending:
                    target = min(target, self._pending[0][0])
                target = self._index + (target - self._index) // self._m * self._m
                if target > self._index:
                    self._expire(target)  # every held sub-window is empty
                    self._index = target
                    self._settle()
                    continue
            closing = self._index
            if self._close(self._open) and make is not None:
                reports.append(make(closing))
        return reports

    @staticmethod
    def _has_data(counts: Mapping[str, int]) -> bool:
        return any(counts.values())

    def _close(self, counts: Mapping[str, int]) -> bool:
        """Close the open sub-window with ``counts``; whether the window is then to be reported."""
        assert self._index is not None
        index = self._index
        m = self._m
        filled = any(counts.values())  # as _has_data, without the call: this runs per sub-window
        self._push(index, counts)
        self._indexes.append(index)
        self._sizes.append(m)
        self._filled.append(filled)
        self._n_filled += filled
        self._open = {}
        self._open_records = 0
        end = self._index = index + m
        if self._pending and self._pending[0][0] <= end:
            self._settle()
        reach = self._reach + m
        self._reach = reach if reach < self._n_report else self._n_report
        # The window keeps the whole sub-windows in its last N (N/b of them without Γ).
        if self._indexes[0] < end - self._n_sub:
            self._expire(end - self._n_sub)
        # Time-based, a window without data is not reported (as distinct counts and Spark's own
        # windows do); count-based windows always hold b·N/b records.
        return self._reach >= self._n_report and (self._n_filled > 0 or not self.time_based)

    def _indexed_frame(self, index: int) -> tuple[int, Report]:
        return index, self._frame(index)

    def _top_row(self, index: int) -> TopRow:
        return index, self._delta(), self._items()

    def _held_row(self, index: int) -> HeldRow:
        assert self._index is not None
        held = (self._index - self._indexes[0]) * self._b
        return index, self._delta(), self._items(), held, self._index * self._b

    def _frame(self, index: int) -> Report:
        # made right after the closing: the window ends where the open sub-window starts
        assert self._index is not None
        units = self._index * self._b
        end: int | str = units if not self.time_based else format_end(units)
        items = [{"key": key, "count": c} for key, c in self._items()]
        return {"end": end, "delta": self._delta(), "items": items}

    # -- queries -----------------------------------------------------------------------------------

    @property
    def window_units(self) -> int:
        """``N`` as an integer: records (count-based) or nanoseconds (time-based)."""
        return self._N

    @property
    def window_held_units(self) -> int:
        """What the window holds now, in ``N``'s unit: ``N`` once full, less while it fills (at the
        start, and while it grows after :meth:`resize`; a little less after a change to a finer
        granularity, :meth:`set_granularity`)."""
        if not self._indexes:
            return 0
        assert self._index is not None
        return (self._index - self._indexes[0]) * self._b

    @property
    def granularity(self) -> int:
        """``m``: the open sub-window is ``m·b`` long (:meth:`set_granularity`; 1 by default)."""
        return self._m

    @property
    def sub_window_units(self) -> int:
        """``b`` as an integer: records (count-based) or nanoseconds (time-based)."""
        return self._b

    @property
    def index(self) -> int | None:
        """The open sub-window's index (count-based: its number; time-based: ``ts_ns // b``)."""
        return self._index

    @property
    def delta(self) -> int:
        """The threshold: the sum of the k-th counts of the sub-windows in the window."""
        return self._delta()

    def top(self) -> list[tuple[str, int]]:
        """The items above ``delta`` and their counts, by count descending then key text."""
        return self._items()

    def report(self) -> Report | None:
        """The current window's report (as its closing made it); reads only.

        None while the window holds fewer than ``N/b`` closed sub-windows, and (time-based) when
        none of them holds data.
        """
        if self._reach < self._n_report or (self.time_based and not self._n_filled):
            return None
        return self._frame(self._indexes[-1])

    # -- subclass hooks ----------------------------------------------------------------------------

    def _push(self, index: int, counts: Mapping[str, int]) -> None:
        raise NotImplementedError

    def _pop(self) -> None:
        raise NotImplementedError

    def _delta(self) -> int:
        raise NotImplementedError

    def _items(self) -> list[tuple[str, int]]:
        raise NotImplementedError


class SubWindowTopK(_SubWindowed):
    """Sliding top-k over ``N/b`` sub-windows (Golab, ch. 6, Alg. 6).

    Each closed sub-window keeps only its exact top-k list (Alg. 6 line 9); global counters hold
    the sums over the lists (lines 11–17, 21–26) and ``delta`` the sum of the k-th counts (lines 18,
    20). An item not on a sub-window's list has at most that sub-window's k-th count there, so an
    item's true count is at most its summed count plus ``delta``: every reported item (summed count
    ``> delta``) is truly above ``delta``, and reported counts never exceed true counts (§6.2.1).
    Memory: at most ``k·N/b`` summary pairs plus as many global counters (§6.2.2); ``space``.

    A report costs what changed since the last one, not a sort of the window's counters: a slide
    changes at most ``2k`` counters (one list in, one out), so once the window holds many more
    counters than that (long windows, ``N/b`` large), the counters are kept sorted (count
    descending, key ascending) and only the changed ones are moved; the report is the prefix above
    ``delta``. Short windows hold so few counters that scanning them is cheaper. The items are
    kept while no list with items enters or leaves (empty sub-windows, repeated reads).

    Departures from the pseudocode, fixed so every implementation agrees: the report is made when
    the window holds exactly ``N/b`` sub-windows (the printed ``sizeOf(Q) > N/b`` test would skip
    the first full window and keep ``N/b + 1`` lists); the top-k list is made deterministic (ties
    by key text) and a sub-window with fewer than k keys has a k-th count of 0; time-based
    windows (§6.2.1, footnote 2) use sub-windows aligned to multiples of ``b`` in event time.

    Parameters
    ----------
    N
        Window length: records (count-based) or a duration (time-based: integer nanoseconds or a
        ``timedelta``). A multiple of ``b``.
    b
        Sub-window length, in the same unit as ``N`` (the thesis' "elements per sub-window").
    k
        Length of each sub-window's top-k list, >= 1.
    time_based
        ``N`` and ``b`` are durations and sub-window ``i`` holds the records with
        ``ts_ns // b == i``; feed with ``seek``/``update``/``slide`` or ``add_subwindow``.

    Examples
    --------
    >>> topk = SubWindowTopK(N=6, b=3, k=2)
    >>> topk.update("10.0.0.1").update("10.0.0.1").update("10.0.0.2").slide()
    SubWindowTopK(N=6, b=3, k=2, time_based=False)
    >>> topk.report() is None  # one sub-window of two
    True
    >>> topk.update_many(["10.0.0.1", "10.0.0.1", "10.0.0.3"]).slide().report()
    {'end': 6, 'delta': 2, 'items': [{'key': '10.0.0.1', 'count': 4}]}
    >>> topk.space  # two lists of 2 pairs + 3 global counters
    7

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University of
       Waterloo, 2006, ch. 6, Algorithm 6 and Figure 6.3.
    """

    #: Keep the counters sorted when the window holds more than this many times the ``2k``
    #: counters a slide can change: moving one in the sorted list costs about as much as scanning
    #: 30 (measured, CPython 3.11: the two break even near 30·2k counters); below, reports scan.
    _SCAN_RATIO = 40

    def __init__(self, N: int | timedelta, b: int | timedelta, k: int, *, time_based: bool = False) -> None:
        super().__init__(N, b, k, time_based=time_based)
        self._summaries: deque[tuple[Items, int]] = deque()  # (top-k list, k-th count), oldest first
        self._global: dict[str, int] = {}
        self._delta_sum = 0
        # (-count, key) of every global counter, sorted: the report is its prefix above delta.
        # Valid while _moved is not None: the counters changed since it was sorted, each with its
        # count in _order then (0: absent). None: not kept (few counters, or rebuilt from bytes).
        self._order: list[tuple[int, str]] = []
        self._moved: dict[str, int] | None = {}
        # The last report's items, until a list with items enters or leaves the window.
        self._top: list[tuple[str, int]] | None = None

    def _push(self, index: int, counts: Mapping[str, int]) -> None:
        items, kth = top_k(counts, self._k)
        self._summaries.append((items, kth))
        if not items:  # an empty sub-window (kth is 0 too): counters, delta and report unchanged
            return
        g = self._global
        moved = self._moved
        if moved is None:
            for key, c in items:
                g[key] = g.get(key, 0) + c
        else:
            for key, c in items:
                old = g.get(key, 0)
                moved.setdefault(key, old)
                g[key] = old + c
            if len(moved) > 2 * (len(g) + self._k):  # many slides unread: sort afresh if read
                self._moved = None
        self._delta_sum += kth
        self._top = None

    def _pop(self) -> None:
        items, kth = self._summaries.popleft()
        if not items:
            return
        g = self._global
        moved = self._moved
        for key, c in items:
            old = g[key]
            if moved is not None:
                moved.setdefault(key, old)
            if old > c:
                g[key] = old - c
            else:
                del g[key]
        self._delta_sum -= kth
        self._top = None

    def _delta(self) -> int:
        return self._delta_sum

    def _items(self) -> list[tuple[str, int]]:
        if self._top is None:
            self._top = self._above_delta()
        return list(self._top)  # a copy: callers may keep or change it

    def _above_delta(self) -> list[tuple[str, int]]:
        """The counters above delta, by count descending then key text (the report's items)."""
        g, d, moved = self._global, self._delta_sum, self._moved
        if moved is not None and len(moved) * self._SCAN_RATIO < len(g):
            # Few counters changed since the last report: move just those in the sorted order.
            order = self._order
            for key, old in moved.items():
                new = g.get(key, 0)
                if new != old:
                    if old:
                        del order[bisect_left(order, (-old, key))]
                    if new:
                        insort(order, (-new, key))
            moved.clear()
        elif len(g) > self._SCAN_RATIO * 2 * self._k:
            # A long window: sort all counters once; the next reports move only what changes.
            self._order = order = sorted([(-c, key) for key, c in g.items()])
            self._moved = {}
        else:
            self._moved = None  # a short window: scanning its few counters is cheaper
            return _ranked([(key, c) for key, c in g.items() if c > d])
        out = []
        for neg, key in order:
            if -neg <= d:
                break
            out.append((key, -neg))
        return out

    def estimate(self, key: str) -> int:
        """``key``'s summed count over the window's top-k lists (a lower bound of its true count)."""
        return self._global.get(key, 0)

    @property
    def space(self) -> int:
        """Stored key–count pairs: the top-k lists plus the global counters (Figure 6.3 (e))."""
        return sum(len(items) for items, _ in self._summaries) + len(self._global)

    def to_bytes(self) -> bytes:
        """The merge state (parameters, open sub-window index, top-k lists) with a version byte.

        Layout (little-endian): ``B`` version, ``B`` time_based, ``q`` N, ``q`` b (records or ns),
        ``I`` k, ``B`` has-index, ``q`` open index, ``I`` number of lists; per list ``q`` k-th count,
        ``I`` items, per item ``I`` UTF-8 length, the key, ``q`` count; then the open sub-window the
        same way (``q`` records, ``I`` items, items). Global counters and delta are rebuilt.
        Version 2, written only while a window grows after :meth:`resize`, ends with ``I`` the
        fewest sub-windows a report holds (version 1: ``N/b``). Version 3, written only once a
        granularity other than 1 was set (:meth:`set_granularity`), ends instead with ``q`` the
        span a window must reach to be reported and ``q`` the span reached (in ``b``), ``I`` the
        granularity in force, ``I`` pending changes and per change ``q`` start, ``I`` m, then per
        list ``I`` its length in ``b`` (versions 1 and 2: every list is one ``b``).
        """
        mixed = (
            self._m != 1
            or bool(self._pending)
            or any(x != 1 for x in self._sizes)
            or self._reach != min(len(self._indexes), self._n_report)
        )
        growing = self._n_report != self._n_sub
        out = [
            struct.pack(
                "<BBqqIBqI",
                3 if mixed else 2 if growing else self._VERSION,
                self.time_based,
                self._N,
                self._b,
                self._k,
                self._index is not None,
                self._index or 0,
                len(self._summaries),
            )
        ]
        for items, kth in self._summaries:
            out.append(struct.pack("<qI", kth, len(items)))
            out.extend(_pack_items(items))
        out.append(struct.pack("<qI", self._open_records, len(self._open)))
        out.extend(_pack_items(tuple(self._open.items())))
        if mixed:
            out.append(struct.pack("<qqII", self._n_report, self._reach, self._m, len(self._pending)))
            out.extend(struct.pack("<qI", start, m) for start, m in self._pending)
            out.append(struct.pack(f"<{len(self._sizes)}I", *self._sizes))
        elif growing:
            out.append(struct.pack("<I", self._n_report))
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> SubWindowTopK:
        """Rebuild from ``to_bytes()``; ``N`` and ``b`` come back as integers (records or ns)."""
        view = memoryview(data)
        head = struct.Struct("<BBqqIBqI")
        version, time_based, n, b, k, has_index, index, n_lists = head.unpack_from(view, 0)
        if version not in (cls._VERSION, 2, 3):
            raise ValueError(f"data: unsupported SubWindowTopK state version {version}")
        pos = head.size
        self = cls(n, b, k, time_based=bool(time_based))
        lists = []
        for _ in range(n_lists):
            kth, count = struct.unpack_from("<qI", view, pos)
            items, pos = _unpack_items(view, pos + 12, count)
            lists.append((items, kth))
        open_records, count = struct.unpack_from("<qI", view, pos)
        open_items, pos = _unpack_items(view, pos + 12, count)
        sizes = [1] * n_lists
        if version == 2:
            (self._n_report,) = struct.unpack_from("<I", view, pos)
            pos += 4
        self._reach = min(n_lists, self._n_report)
        if version == 3:
            self._n_report, self._reach, self._m, n_pending = struct.unpack_from("<qqII", view, pos)
            pos += 24
            for _ in range(n_pending):
                at, m = struct.unpack_from("<qI", view, pos)
                self._pending.append((at, m))
                pos += 12
            sizes = list(struct.unpack_from(f"<{n_lists}I", view, pos))
            pos += 4 * n_lists
        if pos != len(data):
            raise ValueError(f"data: {len(data) - pos} trailing bytes after the SubWindowTopK state")
        start = (index if has_index else 0) - sum(sizes)
        for (items, kth), size in zip(lists, sizes, strict=True):
            self._summaries.append((items, kth))
            self._indexes.append(start)
            self._sizes.append(size)
            start += size
            self._filled.append(bool(items))  # a top-k list is empty exactly when its counts are
            self._n_filled += bool(items)
            for key, c in items:
                self._global[key] = self._global.get(key, 0) + c
            self._delta_sum += kth
        self._moved = None  # the counters were filled directly: sort them afresh if needed
        self._index = index if has_index else None
        self._open = dict(open_items)
        self._open_records = open_records
        return self


def _pack_items(items: Iterable[tuple[str, int]]) -> Iterator[bytes]:
    for key, c in items:
        raw = key.encode()
        yield struct.pack("<I", len(raw)) + raw + struct.pack("<q", c)


def _unpack_items(view: memoryview, pos: int, count: int) -> tuple[Items, int]:
    items = []
    for _ in range(count):
        (size,) = struct.unpack_from("<I", view, pos)
        key = bytes(view[pos + 4 : pos + 4 + size]).decode()
        (c,) = struct.unpack_from("<q", view, pos + 4 + size)
        items.append((key, c))
        pos += 12 + size
    return tuple(items), pos


class ExactSlidingTopK(_SubWindowed):
    """The exact sliding-window oracle for :class:`SubWindowTopK`: true counts, same conventions.

    Keeps every sub-window's full counts. ``delta`` is the same threshold (the sum of the
    sub-windows' exact k-th counts); the report lists every item whose *true* window count is
    strictly above ``delta`` with its true count — the set Algorithm 6 may only under-report
    (Golab §6.2.1: no false positives, possible false negatives; Figure 6.3 (b)).

    Parameters
    ----------
    N
        Window length: records (count-based) or a duration (time-based), a multiple of ``b``.
    b
        Sub-window length, in the same unit as ``N``.
    k
        Top-k list length defining ``delta``, >= 1.
    time_based
        ``N`` and ``b`` are durations (integer nanoseconds or ``timedelta``).

    Examples
    --------
    >>> exact = ExactSlidingTopK(N=4, b=2, k=1)
    >>> exact.update_many(["a", "b"]).slide().report() is None
    True
    >>> exact.update_many(["a", "a"]).slide().report()
    {'end': 4, 'delta': 3, 'items': []}
    >>> exact.update_many(["b", "b"]).slide().report()
    {'end': 6, 'delta': 4, 'items': []}
    >>> exact.estimate("a"), exact.estimate("b")
    (2, 2)

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University of
       Waterloo, 2006, ch. 6, §6.3.1 (the brute-force algorithm of the experiments).
    """

    def __init__(self, N: int | timedelta, b: int | timedelta, k: int, *, time_based: bool = False) -> None:
        super().__init__(N, b, k, time_based=time_based)
        self._windows: deque[tuple[dict[str, int], int]] = deque()  # (all counts, k-th count)
        self._counts: dict[str, int] = {}
        self._delta_sum = 0

    def _push(self, index: int, counts: Mapping[str, int]) -> None:
        kept = {key: int(c) for key, c in counts.items() if c}
        kth = top_k(kept, self._k)[1]
        self._windows.append((kept, kth))
        for key, c in kept.items():
            self._counts[key] = self._counts.get(key, 0) + c
        self._delta_sum += kth

    def _pop(self) -> None:
        kept, kth = self._windows.popleft()
        for key, c in kept.items():
            left = self._counts[key] - c
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]
        self._delta_sum -= kth

    def _delta(self) -> int:
        return self._delta_sum

    def _items(self) -> list[tuple[str, int]]:
        d = self._delta_sum
        return sorted(((key, c) for key, c in self._counts.items() if c > d), key=_rank)

    def estimate(self, key: str) -> int:
        """``key``'s true count in the window."""
        return self._counts.get(key, 0)

    @property
    def space(self) -> int:
        """Stored key–count pairs: every sub-window's full counts plus the window counts."""
        return sum(len(c) for c, _ in self._windows) + len(self._counts)
