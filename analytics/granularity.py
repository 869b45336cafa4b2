"""The granularity operator Γ (seed 004, CKSV "granularity"; issue 18): a schedule of sub-window sizes.

Stage 1 counts at the finest sub-window ``b`` (index ``ts_ns // b``). Γ sums the fine
sub-windows' full per-key counts into coarse ones of ``m·b`` (``m`` a whole factor), aligned to
multiples of ``m·b`` in event time, before each coarse sub-window's top-k is taken, so Alg. 6
(``analytics.topk``) stays exact for the coarse sub-window. The size changes at run time; a
schedule says which ``m`` holds from which fine index on::

    [(start, m), ...]   ascending starts; the first entry's start is FROM_START (-2**62)

A change from ``m_old`` to ``m_new`` requested when the first fine sub-window not yet closed is
``f`` takes effect at :func:`change_instant`: the first index ``>= f`` that is a multiple of
both ``m_old`` and ``m_new`` (CKSV allow coarser to finer only at instants of the coarser
granularity; the same alignment is asked both ways here, so every sub-window starts at a
multiple of its own length and both sides of a change are whole sub-windows).

Plain Python and numpy: the pipeline's top-k kind (``pipeline.topk``) and the offline twin
(``analytics.topk_offline``) share it, so a change at the same instant gives the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "FROM_START",
    "Schedule",
    "change_instant",
    "coarse_starts",
    "granularity_at",
    "plan_change",
    "pruned",
    "scheduled",
]

#: The start of a schedule's first entry: before every event time.
FROM_START = -(2**62)

Schedule = list[tuple[int, int]]


def change_instant(first_open: int, m_old: int, m_new: int) -> int:
    """Where a change from ``m_old`` to ``m_new`` takes effect: the first fine index at or after
    ``first_open`` that is a multiple of both.

    >>> change_instant(5, 1, 2), change_instant(5, 2, 1), change_instant(6, 2, 3), change_instant(4, 2, 4)
    (6, 6, 6, 4)
    """
    step = math.lcm(m_old, m_new)
    return -(-first_open // step) * step


def granularity_at(schedule: Sequence[tuple[int, int]], index: int) -> int:
    """``m`` for the sub-window holding fine index ``index``.

    >>> granularity_at([(FROM_START, 1), (10, 2)], 9), granularity_at([(FROM_START, 1), (10, 2)], 10)
    (1, 2)
    """
    m = schedule[0][1]
    for start, x in schedule:
        if start > index:
            break
        m = x
    return m


def scheduled(schedule: Sequence[tuple[int, int]], at: int, m: int) -> Schedule:
    """``schedule`` with ``m`` from ``at`` on (entries at or after ``at`` replaced).

    >>> scheduled([(FROM_START, 1), (10, 2)], 8, 4)
    [(-4611686018427387904, 1), (8, 4)]
    """
    kept = [(s, x) for s, x in schedule if s < at]
    if not kept:
        return [(FROM_START, m)]
    if kept[-1][1] != m:
        kept.append((at, m))
    return kept


def plan_change(schedule: Sequence[tuple[int, int]], first_open: int, m: int) -> tuple[int | None, Schedule]:
    """A change to ``m`` asked when fine index ``first_open`` is the first not yet closed: its
    instant (None: ``m`` is already the last one scheduled) and the new schedule.

    The instant is :func:`change_instant` from the last entry's granularity, at or after that
    entry's start: a change asked while another is pending comes after it, or replaces it when
    both fall at the same instant.

    >>> plan_change([(FROM_START, 1)], 5, 2)
    (6, [(-4611686018427387904, 1), (6, 2)])
    >>> plan_change([(FROM_START, 1), (6, 2)], 5, 3)
    (6, [(-4611686018427387904, 1), (6, 3)])
    >>> plan_change([(FROM_START, 1), (6, 2)], 5, 4)
    (8, [(-4611686018427387904, 1), (6, 2), (8, 4)])
    """
    last_start, last_m = schedule[-1]
    if m == last_m:
        return None, list(schedule)
    at = change_instant(max(first_open, last_start), last_m, m)
    return at, scheduled(schedule, at, m)


def pruned(schedule: Sequence[tuple[int, int]], oldest: int) -> Schedule:
    """The entries still needed to map fine indexes ``>= oldest`` (the last one starting at or
    before it becomes the first, FROM_START)."""
    out = [(s, x) for s, x in schedule if s > oldest]
    return [(FROM_START, granularity_at(schedule, oldest)), *out]


def coarse_starts(schedule: Sequence[tuple[int, int]], fine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each fine index's coarse sub-window: its start (a fine index) and its ``m``.

    Within an entry's span, start = entry start + floor((fine - entry start) / m)·m; with the
    entries aligned to their ``m`` this is floor(fine / m)·m.

    >>> s, m = coarse_starts([(FROM_START, 2), (10, 1)], np.array([7, 8, 9, 10, 11]))
    >>> s.tolist(), m.tolist()
    ([6, 8, 8, 10, 11], [2, 2, 2, 1, 1])
    """
    fine = np.asarray(fine, np.int64)
    starts = np.array([s for s, _ in schedule], np.int64)
    ms = np.array([x for _, x in schedule], np.int64)
    which = np.maximum(np.searchsorted(starts, fine, side="right") - 1, 0)
    m = ms[which]
    return (fine // m) * m, m
