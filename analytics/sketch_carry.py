"""Stage 3 of the distinct counts across micro-batches: each batch pays for its own sub-windows only.

:func:`analytics.sketch_windows.window_segments` answers the window ends ``lo < i <= hi`` from
every sketch those windows hold, sub-windows ``lo - k + 1 .. hi``: when the batches of a paced
stream each close a few sub-windows of a 60-sub-window window, most of that work repeats the
previous batch's (measured: 1.6M sketches read and sorted per batch to close 4 sub-windows of a
50k packets/s ``ddos`` replay). :class:`SlidingCoupons` keeps, between batches, what the next
windows need of the sub-windows already closed, and no more:

* for each (group, coupon) of a coupon-mode sketch, the latest closed sub-window holding it
  (``L``): a later window holds the coupon through a closed sub-window exactly when it holds
  ``L``. Kept sorted by ``group << 32 | coupon``, so a batch finds its coupons among them with
  one binary search each (``np.searchsorted``) and merges its own in without sorting the rest;
* the HLL-mode sketches of the last ``k`` closed sub-windows, as they are (their registers are
  not coupons).

A batch then sorts only its own coupons and the carried ones that expire within it; every other
carried coupon counts once for its group over all the batch's window ends (a ``bincount``).
Groups whose windows leave coupon mode are united the real way, as in ``window_segments``, from
the carried HLL sketches, the carried coupons rebuilt into coupon sketches per ``(group, L)``
(:func:`analytics.sketch_windows.coupon_sketches`) and the batch's own sketches. The union of
the rebuilt sketches in a window is the union of the original ones (the same coupons, each
at its latest closed sub-window), so the answers are equal, not approximately equal, to
``window_segments`` over all the sketches (``tests/analytics/test_sketch_carry.py``).

A window change at run time (:meth:`SlidingCoupons.resize`, seed 004's window knob) follows
:meth:`analytics.distinct.SubWindowDistinct.resize`: window end ``i`` holds sub-windows ``s(i) ..
i`` with a start ``s`` that never moves back (a shorter window moves it forward at once, a longer
one holds it until the window holds ``k``). A resize drops the carried state before the new
start; then every carried coupon (at ``L >= s``) still expires at ``L + k`` and every new one at
``idx + k``, so the counting above is unchanged, only ``k`` is the new one (window ``i`` holds
``max(s, i − k + 1) .. i``, and nothing before ``s`` is left to count).

This is the incremental form of the two-stacks aggregation the module above cites
(Tangwongsan, Hirzel and Schneider, "Sliding-Window Aggregation Algorithms", 2019): state
proportional to the window's live coupons, work per batch proportional to the batch's coupons
plus one pass over the carried ones' arrays.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analytics.sketch_windows import (
    _order_by,
    _united_segments,
    coupon_estimates,
    coupon_sketches,
    coupons_of,
)

__all__ = ["GroupIds", "SlidingCoupons"]

_EMPTY = np.zeros(0, np.int64)
_SHIFT = np.uint64(32)


def _segments_empty() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return _EMPTY, _EMPTY, _EMPTY, _EMPTY


class SlidingCoupons:
    """One chain's windows (``k`` sub-windows each) closed batch by batch, with carried state.

    ``update(group, idx, sketches)`` gives the sketches of sub-windows ``lo < idx``; ``seek(hi)``
    closes every window end ``lo < i <= hi`` and returns their ``(group, start, stop, distinct)``
    segments, as :func:`analytics.sketch_windows.window_segments` over all the sketches since the
    first would. ``group`` ids are stable ints below ``2**31`` (:class:`GroupIds`).

    References
    ----------
    Golab, "Sliding Window Query Processing over Data Streams", PhD thesis, 2006, §2.3.4 (basic
    interval synopses); Tangwongsan, Hirzel and Schneider, "Sliding-Window Aggregation
    Algorithms", Encyclopedia of Big Data Technologies, 2019 (incremental sliding aggregation).
    """

    def __init__(self, k: int, lg_k: int, lo: int, held: int | None = None) -> None:
        self.k, self.lg_k, self.lo = k, lg_k, lo
        #: the sub-windows window ``lo`` holds: ``k``, less while a window grows after resize()
        self.held = k if held is None else min(held, k)
        #: carried coupons, sorted: ``group << 32 | coupon`` and its latest closed sub-window
        self.keys = np.zeros(0, np.uint64)
        self.last = _EMPTY
        #: carried HLL-mode sketches of sub-windows ``lo - k < idx <= lo``
        self.hll_group = _EMPTY
        self.hll_idx = _EMPTY
        self.hll_sketch: pa.BinaryArray = pa.array([], pa.binary())
        self._pending: list[tuple[np.ndarray, np.ndarray, pa.BinaryArray]] = []

    def update(self, group: np.ndarray, idx: np.ndarray, sketches: pa.BinaryArray) -> SlidingCoupons:
        """Add sketches of sub-windows after ``lo`` (several of one sub-window and group: partials)."""
        idx = np.asarray(idx, np.int64)
        if len(idx) and int(idx.min()) <= self.lo:
            raise ValueError(
                f"SlidingCoupons.update: sub-window {int(idx.min())} is already closed ({self.lo})"
            )
        group = np.asarray(group, np.int64)
        if len(group) and (int(group.min()) < 0 or int(group.max()) >= 2**31):
            raise ValueError("SlidingCoupons.update: group ids must be in 0 .. 2**31 - 1")
        self._pending.append((group, idx, sketches))
        return self

    @property
    def groups(self) -> np.ndarray:
        """The group ids the carried state and the pending sketches hold (sorted, unique)."""
        held = [np.unique((self.keys >> _SHIFT).astype(np.int64)), self.hll_group]
        return np.unique(np.concatenate(held + [g for g, _, _ in self._pending]))

    def renumber(self, kept: np.ndarray) -> SlidingCoupons:
        """Group ids become their rank in ``kept`` (sorted, holding every carried group)."""
        kept = np.asarray(kept, np.int64)
        old = (self.keys >> _SHIFT).astype(np.int64)
        new = np.searchsorted(kept, old).astype(np.uint64)
        self.keys = (new << _SHIFT) | (self.keys & np.uint64(0xFFFFFFFF))  # monotone: still sorted
        self.hll_group = np.searchsorted(kept, self.hll_group).astype(np.int64)
        self._pending = [(np.searchsorted(kept, g).astype(np.int64), i, b) for g, i, b in self._pending]
        return self

    def resize(self, k: int) -> SlidingCoupons:
        """Windows of ``k`` sub-windows from window end ``lo + 1`` on (a shorter one at once,
        a longer one growing by a sub-window per window end): the carried state before the
        new start goes."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"SlidingCoupons.resize: expected a positive number of sub-windows, got {k!r}")
        self.k = k
        if self.held > k:
            self.held = k
            live = self.last > self.lo - k
            self.keys, self.last = self.keys[live], self.last[live]
            live_hll = np.flatnonzero(self.hll_idx > self.lo - k)
            self.hll_group, self.hll_idx = self.hll_group[live_hll], self.hll_idx[live_hll]
            self.hll_sketch = self.hll_sketch.take(pa.array(live_hll, pa.int64()))
        return self

    def held_at(self, ends: np.ndarray) -> np.ndarray:
        """The sub-windows each window end after ``lo`` holds (up to the next resize)."""
        return np.minimum(self.held + (np.asarray(ends, np.int64) - self.lo), self.k)

    def seek(self, hi: int, *, answers: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Close window ends ``lo < i <= hi`` (sketches after ``hi`` wait for a later seek).

        Returns their segments, or none with ``answers=False`` (rebuilding the state only).
        """
        if hi <= self.lo:
            return _segments_empty()
        group, idx, sketches = self._take(hi)
        k, table = self.k, coupon_estimates(self.lg_k)
        row, coupon, hll = coupons_of(sketches)
        # This batch's coupons, one row per (group, coupon, sub-window), sorted.
        key = (group[row].astype(np.uint64) << _SHIFT) | coupon.astype(np.uint64)
        at = idx[row]
        order = _order_by(key, at)
        key, at = key[order], at[order]
        fresh = np.ones(len(key), bool)
        fresh[1:] = (key[1:] != key[:-1]) | (at[1:] != at[:-1])
        key, at = key[fresh], at[fresh]
        firsts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else _EMPTY
        ends = np.r_[firsts[1:], len(key)].astype(np.int64) if len(key) else _EMPTY
        unique_key, first_at, last_at = key[firsts], at[firsts], at[ends - 1]
        # The carried coupons this batch sees again.
        pos = np.searchsorted(self.keys, unique_key)
        seen = np.zeros(len(unique_key), bool)
        if len(self.keys):
            seen = self.keys[np.minimum(pos, len(self.keys) - 1)] == unique_key
        out = _segments_empty()
        if answers:
            united = np.union1d(np.unique(group[hll]), self.hll_group)
            out = self._answers(
                key, at, unique_key, first_at, pos, seen, united, hi, table, group, idx, sketches
            )
        # Carry: the batch's coupons at their latest sub-window, HLL sketches as they are, then
        # only what a window after hi can still hold (from window hi's start: a growth holds it).
        k = self.held = min(self.held + hi - self.lo, self.k)
        last = self.last.copy()
        last[pos[seen]] = last_at[seen]
        absent = ~seen
        keys = np.insert(self.keys, pos[absent], unique_key[absent])
        last = np.insert(last, pos[absent], last_at[absent])
        live = last > hi - k
        self.keys, self.last = keys[live], last[live]
        held = np.flatnonzero(hll)
        hll_group = np.concatenate([self.hll_group, group[held]])
        hll_idx = np.concatenate([self.hll_idx, idx[held]])
        hll_sketch = pa.concat_arrays([self.hll_sketch, sketches.take(pa.array(held, pa.int64()))])
        live_hll = np.flatnonzero(hll_idx > hi - k)
        self.hll_group, self.hll_idx = hll_group[live_hll], hll_idx[live_hll]
        self.hll_sketch = hll_sketch.take(pa.array(live_hll, pa.int64()))
        self.lo = hi
        return out

    def _take(self, hi: int) -> tuple[np.ndarray, np.ndarray, pa.BinaryArray]:
        """The pending sketches of sub-windows ``<= hi``; the later ones stay pending."""
        groups = [g for g, _, _ in self._pending]
        idxs = [i for _, i, _ in self._pending]
        blobs = [s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s for _, _, s in self._pending]
        group = np.concatenate(groups) if groups else _EMPTY
        idx = np.concatenate(idxs) if idxs else _EMPTY
        sketches = (
            pa.concat_arrays([b.cast(pa.binary()) for b in blobs]) if blobs else pa.array([], pa.binary())
        )
        now = idx <= hi
        self._pending = []
        if not now.all():
            later = np.flatnonzero(~now)
            self._pending.append((group[later], idx[later], sketches.take(pa.array(later, pa.int64()))))
            taken = np.flatnonzero(now)
            return group[taken], idx[taken], sketches.take(pa.array(taken, pa.int64()))
        return group, idx, sketches

    def _answers(
        self,
        key: np.ndarray,
        at: np.ndarray,
        unique_key: np.ndarray,
        first_at: np.ndarray,
        pos: np.ndarray,
        seen: np.ndarray,
        united: np.ndarray,
        hi: int,
        table: np.ndarray,
        group: np.ndarray,
        idx: np.ndarray,
        sketches: pa.BinaryArray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        k, lo = self.k, self.lo
        limit = len(table) - 1
        carried_group = (self.keys >> _SHIFT).astype(np.int64)
        # Every carried coupon holds its group's windows from lo + 1 on (it is in window lo, and
        # lo + 1 unless it expires there) until it expires: at L + k, or earlier where this batch
        # sees it again (the new occurrence takes over from there).
        expires = self.last + k
        expires[pos[seen]] = np.minimum(expires[pos[seen]], first_at[seen])
        ending = expires <= hi
        base_group, base_n = np.unique(carried_group, return_counts=True)
        # This batch's occurrences: each holds [at, min(at + k, the next occurrence)).
        nxt = np.full(len(at), np.iinfo(np.int64).max)
        same = key[1:] == key[:-1]
        nxt[:-1][same] = at[1:][same]
        stop = np.minimum(at + k, nxt)
        new_group = (key >> _SHIFT).astype(np.int64)
        stopping = stop <= hi
        ev_group = np.concatenate([base_group, carried_group[ending], new_group, new_group[stopping]])
        ev_pos = np.concatenate(
            [np.full(len(base_group), lo + 1, np.int64), expires[ending], at, stop[stopping]]
        )
        ev_delta = np.concatenate(
            [
                base_n.astype(np.int64),
                -np.ones(int(ending.sum()), np.int64),
                np.ones(len(at), np.int64),
                -np.ones(int(stopping.sum()), np.int64),
            ]
        )
        if len(united):
            fine = ~np.isin(ev_group, united)
            ev_group, ev_pos, ev_delta = ev_group[fine], ev_pos[fine], ev_delta[fine]
        seg = _running_counts(ev_group, ev_pos, ev_delta, hi)
        over = np.unique(seg[0][seg[3] > limit])
        if len(over):
            united = np.union1d(united, over)
            fine = ~np.isin(seg[0], over)
            seg = (seg[0][fine], seg[1][fine], seg[2][fine], seg[3][fine])
        parts = [(seg[0], seg[1], seg[2], table[seg[3]])]
        if len(united):
            parts.append(self._united(united, hi, group, idx, sketches))
        g, start, stop_, n = (np.concatenate([p[j] for p in parts]) for j in range(4))
        return g, start, stop_, n

    def _united(
        self, united: np.ndarray, hi: int, group: np.ndarray, idx: np.ndarray, sketches: pa.BinaryArray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Segments of the groups united the real way, from all the sketches their windows hold."""
        carried_group = (self.keys >> _SHIFT).astype(np.int64)
        mine = np.flatnonzero(np.isin(carried_group, united))
        g, at = carried_group[mine], self.last[mine]
        coupons = (self.keys[mine] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        order = np.lexsort((at, g))
        g, at, coupons = g[order], at[order], coupons[order]
        # One coupon sketch per (group, L), split where it would pass the table (large lg_k).
        limit = len(coupon_estimates(self.lg_k)) - 1
        cut = np.r_[True, (g[1:] != g[:-1]) | (at[1:] != at[:-1])] if len(g) else np.zeros(0, bool)
        run = np.cumsum(cut) - 1
        within = np.arange(len(g)) - np.flatnonzero(cut)[run] if len(g) else _EMPTY
        piece = np.r_[True, cut[1:] | (within[1:] % limit == 0)] if len(g) else np.zeros(0, bool)
        starts = np.flatnonzero(piece)
        counts = np.diff(np.r_[starts, len(g)])
        rebuilt = coupon_sketches(counts, coupons, self.lg_k)
        new = np.flatnonzero(np.isin(group, united))
        hll = np.flatnonzero(np.isin(self.hll_group, united))
        all_group = np.concatenate([g[starts], self.hll_group[hll], group[new]])
        all_idx = np.concatenate([at[starts], self.hll_idx[hll], idx[new]])
        all_sketches = pa.concat_arrays(
            [
                rebuilt,
                self.hll_sketch.take(pa.array(hll, pa.int64())),
                sketches.take(pa.array(new, pa.int64())),
            ]
        )
        return _united_segments(all_group, all_idx, all_sketches, self.k, self.lo, hi, self.lg_k)


def _running_counts(
    group: np.ndarray, pos: np.ndarray, delta: np.ndarray, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(group, start, stop, count)`` segments of per-group running sums of ``delta`` at ``pos``."""
    if not len(group):
        return _segments_empty()
    order = _order_by(group.astype(np.uint64), pos)
    group, pos, delta = group[order], pos[order], delta[order]
    total = np.cumsum(delta)
    last = np.r_[(group[1:] != group[:-1]) | (pos[1:] != pos[:-1]), True]
    first_of_group = np.r_[True, group[1:] != group[:-1]]
    # Each group's own running sum: the total minus everything before the group's first event.
    before = (total - delta)[first_of_group]
    count = total - np.repeat(before, np.diff(np.r_[np.flatnonzero(first_of_group), len(group)]))
    group, pos, count = group[last], pos[last], count[last]
    stop = np.r_[pos[1:] - 1, hi]
    group_ends = np.r_[group[1:] != group[:-1], True]
    stop = np.where(group_ends, hi, stop)
    held = (count > 0) & (pos <= stop)
    return group[held], pos[held], stop[held], count[held]


class GroupIds:
    """Stable int ids for group labels (one row of a label table each), with their labels back.

    ``ids(keys, labels)`` gives each key its id, new keys the next ones; ``labels_of(ids)`` the
    label rows; ``keep(ids)`` drops every other id and renumbers the kept ones by rank (as
    :meth:`SlidingCoupons.renumber`), so the table stays the size of the live groups.
    """

    def __init__(self) -> None:
        self.keys: pa.Array = pa.array([], pa.string())
        self.labels: pa.Table | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def ids(self, keys: pa.Array, labels: pa.Table) -> np.ndarray:
        """The id of each of ``keys`` (``labels``: their label rows, parallel)."""
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        found = pc.index_in(keys, value_set=self.keys)
        missing = pc.is_null(found)
        if pc.any(missing).as_py():
            fresh = pc.unique(keys.filter(missing))
            rows = pc.index_in(fresh, value_set=keys)  # the first row of each new key
            taken = labels.take(rows)
            self.labels = taken if self.labels is None else pa.concat_tables([self.labels, taken])
            self.keys = pa.concat_arrays([self.keys, fresh.cast(self.keys.type)])
            found = pc.index_in(keys, value_set=self.keys)
        return found.to_numpy(zero_copy_only=False).astype(np.int64)

    def labels_of(self, ids: np.ndarray) -> pa.Table:
        """The label rows of ``ids``."""
        if self.labels is None:
            raise KeyError("GroupIds.labels_of: no id given yet")
        return self.labels.take(pa.array(np.asarray(ids, np.int64)))

    def keep(self, ids: np.ndarray) -> GroupIds:
        """Keep only ``ids`` (sorted, unique), renumbered 0.. by rank."""
        rows = pa.array(np.asarray(ids, np.int64))
        self.keys = self.keys.take(rows)
        if self.labels is not None:
            self.labels = self.labels.take(rows)
        return self
