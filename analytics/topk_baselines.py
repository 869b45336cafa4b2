"""Baseline for Algorithm 6 at equal memory: a DataSketches frequent-items sketch per sub-window.

Golab (§2.3.4, §6.1) contrasts storing an exact top-k list per sub-window with the older idea of
storing a sketch per sub-window. This module is that alternative, with the same window driver,
report framing and conventions as :class:`analytics.topk.SubWindowTopK`, so the evaluation can
run both on the same input (``docs/topk.md``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Self

import datasketches as ds
import pyarrow as pa

from analytics.topk import _rank, _SubWindowed

__all__ = ["FrequentItemsTopK", "capacity_lg"]

_NO_FALSE_POSITIVES = ds.frequent_items_error_type.NO_FALSE_POSITIVES
_LG_MIN = 3  # DataSketches' smallest map: 8 slots, 6 counters
_LG_MAX = 26


def capacity_lg(counters: int) -> int:
    """The smallest ``lg_max_map_size`` whose sketch holds at least ``counters`` counters.

    A DataSketches frequent-items map of size ``2**lg`` holds ``0.75 * 2**lg`` counters.

    >>> capacity_lg(1), capacity_lg(6), capacity_lg(7), capacity_lg(5000)
    (3, 3, 4, 13)
    """
    lg = max(_LG_MIN, math.ceil(math.log2(max(counters, 1) / 0.75)))
    while 3 * (1 << lg) // 4 < counters:
        lg += 1
    return min(lg, _LG_MAX)


class FrequentItemsTopK(_SubWindowed):
    """DataSketches frequent-items sketches per sub-window, merged over the window.

    Each sub-window is summarized by a ``frequent_strings_sketch`` (Misra–Gries with an offset)
    fed its records in stream order; a report merges the window's ``N/b`` sketches. The merged
    sketch's maximum error is an upper bound on the count of any item it does not list, like
    Algorithm 6's ``delta`` (Golab §6.2.1): it is reported as ``delta``, and the items whose
    *lower bound* exceeds it are reported with that lower bound (DataSketches'
    ``NO_FALSE_POSITIVES`` mode), so here too reported items are truly above ``delta`` and reported
    counts never exceed true counts.

    Equal memory: by default each sub-window sketch has the smallest map holding at least ``k``
    counters (Algorithm 6 keeps ``k`` pairs per sub-window) and the merged sketch the smallest
    holding ``k·N/b`` (Algorithm 6's bound on its global counters). DataSketches' smallest map holds
    6 counters, so for ``k < 6`` the baseline gets more memory than Algorithm 6; ``space`` counts
    what it actually stores.

    Parameters
    ----------
    N
        Window length: records (count-based) or a duration (time-based), a multiple of ``b``.
    b
        Sub-window length, in the same unit as ``N``.
    k
        Algorithm 6's list length whose memory the sketches are given, >= 1.
    time_based
        ``N`` and ``b`` are durations (integer nanoseconds or ``timedelta``).
    lg_max_map_size
        log2 of each sub-window sketch's map size (None: ``capacity_lg(k)``).
    lg_max_window_map_size
        log2 of the merged sketch's map size (None: ``capacity_lg(k * N // b)``).

    Examples
    --------
    >>> fi = FrequentItemsTopK(N=6, b=3, k=2)
    >>> fi.update_many(["10.0.0.1", "10.0.0.1", "10.0.0.2"]).slide().report() is None
    True
    >>> fi.update_many(["10.0.0.1", "10.0.0.1", "10.0.0.3"]).slide().report()
    {'end': 6, 'delta': 0, 'items': [{'key': '10.0.0.1', 'count': 4}, {'key': '10.0.0.2', 'count': 1},
                                     {'key': '10.0.0.3', 'count': 1}]}

    References
    ----------
    .. [1] L. Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, University of
       Waterloo, 2006, §2.3.4 and ch. 6.
    .. [2] D. Anderson et al., "A high-performance algorithm for identifying frequent items in
       data streams", IMC 2017 (the DataSketches frequent-items sketch).
    """

    def __init__(
        self,
        N: int | timedelta,
        b: int | timedelta,
        k: int,
        *,
        time_based: bool = False,
        lg_max_map_size: int | None = None,
        lg_max_window_map_size: int | None = None,
    ) -> None:
        super().__init__(N, b, k, time_based=time_based)
        self.lg_max_map_size = lg_max_map_size
        self.lg_max_window_map_size = lg_max_window_map_size
        for name, value in (
            ("lg_max_map_size", lg_max_map_size),
            ("lg_max_window_map_size", lg_max_window_map_size),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= 26
            ):
                raise ValueError(f"{name}: must be an integer in 3..26 or None, got {value!r}")
        self._lg = lg_max_map_size if lg_max_map_size is not None else capacity_lg(self._k)
        self._lg_window = (
            lg_max_window_map_size
            if lg_max_window_map_size is not None
            else capacity_lg(self._k * self._n_sub)
        )
        self._sketches: deque[ds.frequent_strings_sketch] = deque()
        self._live: ds.frequent_strings_sketch | None = None
        self._merged: tuple[ds.frequent_strings_sketch, int] | None = None

    def update(self, key: str, weight: int = 1) -> Self:
        """Feed one record of ``key`` (with ``weight``) to the open sub-window's sketch."""
        self._check_open(1)
        w = int(weight)
        if w < 0:
            raise ValueError(f"weight: must be >= 0, got {weight!r}")
        if w:
            self._live_sketch().update(key, w)
        self._open_records += 1
        return self

    def update_many(
        self, keys: Iterable[str] | pa.Array, weights: Iterable[int] | pa.Array | None = None
    ) -> Self:
        """Feed many records, in order, to the open sub-window's sketch."""
        keys = keys.to_pylist() if isinstance(keys, pa.Array | pa.ChunkedArray) else list(keys)
        if weights is None:
            ws = [1] * len(keys)
        else:
            ws = weights.to_pylist() if isinstance(weights, pa.Array | pa.ChunkedArray) else list(weights)
        if len(ws) != len(keys):
            raise ValueError(f"weights: expected {len(keys)} weights, got {len(ws)}")
        if any(w is None or w < 0 for w in ws):
            raise ValueError("weights: must be >= 0")
        if any(key is None for key in keys):
            raise ValueError("keys: null keys must be skipped before counting")
        self._check_open(len(keys))
        sketch = self._live_sketch()
        for key, w in zip(keys, ws, strict=True):
            if w:
                sketch.update(key, int(w))
        self._open_records += len(keys)
        return self

    def _live_sketch(self) -> ds.frequent_strings_sketch:
        if self._live is None:
            self._live = ds.frequent_strings_sketch(self._lg)
        return self._live

    def _push(self, index: int, counts: Mapping[str, int]) -> None:
        # add_subwindow feeds a sub-window's counts as weighted updates, in the mapping's order.
        sketch = self._live_sketch()
        for key, c in counts.items():
            if c:
                sketch.update(key, int(c))
        self._sketches.append(sketch)
        self._live = None
        self._merged = None

    def _pop(self) -> None:
        self._sketches.popleft()
        self._merged = None

    def _merge(self) -> tuple[ds.frequent_strings_sketch, int]:
        if self._merged is None:
            merged = ds.frequent_strings_sketch(self._lg_window)
            for sketch in self._sketches:
                merged.merge(sketch)
            # upper - lower bound is the sketch's offset for any item, listed or not.
            max_error = merged.get_upper_bound("") - merged.get_lower_bound("")
            self._merged = (merged, int(max_error))
        return self._merged

    def _delta(self) -> int:
        return self._merge()[1]

    def _items(self) -> list[tuple[str, int]]:
        merged, max_error = self._merge()
        # threshold 0 means "the maximum error" to DataSketches, which is 0 then too.
        rows = merged.get_frequent_items(_NO_FALSE_POSITIVES, max_error)
        return sorted(
            ((item, int(lower)) for item, _est, lower, _upper in rows if lower > max_error), key=_rank
        )

    def estimate(self, key: str) -> int:
        """``key``'s lower bound in the merged window sketch (never above its true count)."""
        return int(self._merge()[0].get_lower_bound(key))

    @property
    def space(self) -> int:
        """Stored key–count pairs: active items of the sub-window sketches and the merged sketch."""
        return sum(s.num_active_items for s in self._sketches) + self._merge()[0].num_active_items
