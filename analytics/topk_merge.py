"""The streaming top-k's merge state: ``SubWindowTopK`` plus the window's traffic totals.

Stage 2 of the Spark job (``pipeline.topk_state.TopKMergeProcessor``) keeps one of these per
query in a ``ValueState``; it is plain Python, so it is tested and doctested without Spark.
The algorithm is :class:`analytics.topk.SubWindowTopK` (Golab's Algorithm 6, thesis §6); the
totals per sub-window are what the dashboard's shares of the window's traffic need.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

from analytics.topk import SubWindowTopK

__all__ = ["QueryParams", "TopKMerge"]


class QueryParams(NamedTuple):
    """A query's window in integer nanoseconds (``N``, ``b``) and its top-k length."""

    N: int
    b: int
    k: int


class TopKMerge:
    """A query's merge state: ``SubWindowTopK`` (time-based) and the window's traffic totals.

    ``add_subwindow(counts, index, total)`` is ``SubWindowTopK.add_subwindow`` (a batch form, see
    ``analytics``): it takes one closed sub-window (its top-k rows or all its counts, and the sum
    of all its counts) and returns the output rows of the reports it makes — including those of
    empty sub-windows skipped before ``index``.

    Each row ends with the span its window holds (``N``, less while a window grows after
    :meth:`resize`): ``(window_end_ns, delta, rank, key, count, total, window_ns)``.

    >>> merge = TopKMerge(QueryParams(N=2_000, b=1_000, k=2))
    >>> merge.add_subwindow({"a": 3, "b": 1}, 5, 4)
    []
    >>> merge.add_subwindow({"a": 2, "c": 2}, 7, 5)  # sub-window 6 was empty: two reports
    [(7000, 1, 1, 'a', 3, 4, 2000), (8000, 2, 0, None, None, 5, 2000)]
    """

    _VERSION = 1

    def __init__(self, params: QueryParams, algorithm: SubWindowTopK | None = None) -> None:
        self.params = params
        self._topk = algorithm or SubWindowTopK(params.N, params.b, params.k, time_based=True)
        self._totals: deque[tuple[int, int]] = deque()  # (sub-window index, total), this window only
        self._window_total = 0  # the sum of _totals: a report adds and drops one total, not N/b
        self._n_sub = params.N // params.b

    @property
    def algorithm(self) -> SubWindowTopK:
        return self._topk

    def resize(self, N: int) -> None:
        """Change the window to ``N`` ns from the next closing sub-window on
        (``SubWindowTopK.resize``); the window total drops the totals that leave it."""
        self._topk.resize(N)
        self.params = self.params._replace(N=int(N))
        self._n_sub = self.params.N // self.params.b
        if self._topk.index is not None:
            self._drop_totals(self._topk.index - self._n_sub)

    def set_granularity(self, m: int, at: int | None = None) -> None:
        """Sub-windows of ``m·b`` from index ``at`` (in ``b``) on: ``SubWindowTopK.set_granularity``
        (the granularity operator Γ; the caller passes each coarse sub-window's summed counts and
        start index to :meth:`add_subwindow`)."""
        self._topk.set_granularity(m, at)

    def _drop_totals(self, floor: int) -> None:
        """Drop the totals of the sub-windows starting before ``floor`` (they left the window)."""
        totals = self._totals
        while totals and totals[0][0] < floor:
            self._window_total -= totals.popleft()[1]

    def add_subwindow(self, counts: Mapping[str, int], index: int, total: int) -> list[tuple[Any, ...]]:
        """Merge sub-window ``index``; rows ``(window_end_ns, delta, rank, key, count, total)``."""
        # Unframed reports (closing index, delta, items): the rows need neither dicts nor ISO text.
        reports = self._topk.add_subwindow_held(counts, index)
        totals = self._totals
        total = int(total)
        n_sub = self._n_sub
        b = self.params.b
        added = False
        rows: list[tuple[Any, ...]] = []
        # Each report with the sub-window whose closing made it (windows without data make none);
        # closings ascend, so the window total moves forward: add sub-window `index`'s total when
        # its own window is reported (the last one), drop those that left each window.
        for closing, delta, items, held, end_ns in reports:
            if closing >= index and not added:
                totals.append((index, total))
                self._window_total += total
                added = True
            # the window holds the sub-windows starting at or after its end - N
            if totals and totals[0][0] < end_ns // b - n_sub:
                self._drop_totals(end_ns // b - n_sub)
            window_total = self._window_total
            if not items:
                rows.append((end_ns, delta, 0, None, None, window_total, held))
            for rank, (key, count) in enumerate(items, 1):
                rows.append((end_ns, delta, rank, key, count, window_total, held))
        if not added:
            totals.append((index, total))
            self._window_total += total
        end = self._topk.index  # the end of sub-window `index` (index + 1, or + m under Γ)
        assert end is not None
        self._drop_totals(end - n_sub)  # keep this window's totals only
        return rows

    def to_bytes(self) -> bytes:
        """The state's bytes (little-endian).

        ``B`` version, ``I`` length and ``SubWindowTopK.to_bytes()``, ``I`` number of totals and
        per total ``q`` sub-window index, ``q`` total.
        """
        topk = self._topk.to_bytes()
        totals = b"".join(struct.pack("<qq", i, t) for i, t in self._totals)
        return (
            struct.pack("<BI", self._VERSION, len(topk))
            + topk
            + struct.pack("<I", len(self._totals))
            + totals
        )

    @classmethod
    def from_bytes(cls, data: bytes, params: QueryParams) -> TopKMerge:
        """Rebuild; ``params``' sub-window and k must be those the state was made with (else a
        fresh checkpoint is needed). The window comes back as saved, which a window change
        (:meth:`resize`) may have made other than ``params.N``: the caller resizes to the one it
        wants in force."""
        version, size = struct.unpack_from("<BI", data, 0)
        if version != cls._VERSION:
            raise ValueError(f"data: unsupported TopKMerge state version {version}")
        topk = SubWindowTopK.from_bytes(data[5 : 5 + size])
        saved = QueryParams(topk.window_units, topk.sub_window_units, topk.k)
        if (saved.b, saved.k) != (params.b, params.k):
            raise ValueError(
                f"the checkpoint's top-k state has window {saved} but the query asks for {params}: "
                "delete the top-k checkpoint (and results) to change a query's sub-window or k "
                "(its window changes at run time: netmon tune --window)"
            )
        merge = cls(saved, topk)
        (n,) = struct.unpack_from("<I", data, 5 + size)
        for j in range(n):
            i, t = struct.unpack_from("<qq", data, 9 + size + 16 * j)
            merge._totals.append((i, t))
            merge._window_total += t
        return merge
