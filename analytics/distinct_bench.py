"""Accuracy and speed of the HLL sub-window synopses against the exact oracle, on the same input.

:func:`accuracy_report` decodes the batches once and drives both engines over the same decoded
records with the same driver: :class:`~analytics.distinct.SubWindowDistinct` (HLL) and
:class:`~analytics.distinct.ExactSlidingDistinct`. It times each engine and compares every
(window end, group) answer. ``netmon bench distinct`` adds Spark's ``approx_count_distinct``
to the same run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from analytics.distinct import SubWindowDistinct
from analytics.distinct_offline import (
    DistinctReport,
    OfflineStats,
    _Chunk,
    _decode,
    _Driver,
    exact_oracle,
    seconds_to_ns,
)
from analytics.distinct_queries import DistinctQuery

__all__ = ["accuracy_report", "hll_bound"]


def hll_bound(lg_k: int) -> float:
    """The issue's acceptance bound: 3 standard errors, ``3 * 1.04 / sqrt(2**lg_k)``.

    >>> round(hll_bound(12), 5)
    0.04875
    """
    return 3 * 1.04 / math.sqrt(2**lg_k)


def _drive(engine: Any, chunks: list[_Chunk]) -> tuple[list[DistinctReport], float, OfflineStats]:
    stats = OfflineStats()
    driver = _Driver(engine, stats=stats)
    t0 = time.perf_counter()
    reports: list[DistinctReport] = []
    for chunk in chunks:
        reports.extend(driver.feed(chunk))
    return reports, time.perf_counter() - t0, stats


def _summary(errors: np.ndarray, bound: float) -> dict[str, float | int | None]:
    if not errors.size:
        return dict.fromkeys(("mean_rel_err", "p95_rel_err", "max_rel_err", "within_bound"), None) | {
            "pairs": 0
        }
    return {
        "pairs": int(errors.size),
        "mean_rel_err": float(errors.mean()),
        "p95_rel_err": float(np.quantile(errors, 0.95)),
        "max_rel_err": float(errors.max()),
        "within_bound": float((errors <= bound).mean()),
    }


def accuracy_report(
    batches: Iterable[pa.RecordBatch | pa.Table],
    query: DistinctQuery,
    lg_k: int = 12,
    *,
    small_max: int | None = None,
) -> dict[str, Any]:
    """HLL vs exact over every (window end, group) of ``query`` on ``batches``.

    Returns a dict:

    - ``records``, ``counted``, ``reports``, ``pairs``: the input and the answers compared;
    - ``bound``: :func:`hll_bound`;
    - ``all`` / ``large``: mean, p95 and max relative error, and the fraction within the bound,
      over all pairs and over pairs whose exact count is above ``small_max``
      (default ``2**lg_k // 16``);
    - ``small``: pairs with exact count at most ``small_max`` and the fraction answered exactly,
      i.e. where DataSketches HLL is still in exact coupon mode;
    - ``hll_updates_per_s`` and ``exact_updates_per_s``: counted records per second through
      each engine (decode excluded, same driver), and ``speedup`` = hll / exact;
    - ``hll_state_bytes`` and ``exact_state_bytes``: ``len(to_bytes())`` at the end;
    - ``same_windows``: whether both engines reported the same (end, group) pairs (they must).
    """
    small_max = 2**lg_k // 16 if small_max is None else small_max
    window_ns = seconds_to_ns(query.window_s, name="window_s")
    sub_ns = seconds_to_ns(query.sub_window_s, name="sub_window_s")
    chunks = [_decode(b, query) for b in batches]
    hll = SubWindowDistinct(window_ns, sub_ns, lg_k=lg_k)
    oracle = exact_oracle(query)
    hll_reports, hll_s, stats = _drive(hll, chunks)
    exact_reports, exact_s, _ = _drive(oracle, chunks)

    truth = {(r.end_ns, g): n for r in exact_reports for g, n in r.groups}
    est = {(r.end_ns, g): n for r in hll_reports for g, n in r.groups}
    keys = sorted(truth)
    exact_n = np.array([truth[k] for k in keys], dtype=float)
    est_n = np.array([est.get(k, 0) for k in keys], dtype=float)
    errors = np.abs(est_n - exact_n) / exact_n if keys else np.array([])
    small = exact_n <= small_max
    bound = hll_bound(lg_k)
    return {
        "query": query.name,
        "lg_k": lg_k,
        "window_s": query.window_s,
        "sub_window_s": query.sub_window_s,
        "records": stats.records,
        "counted": stats.counted,
        "reports": len(exact_reports),
        "pairs": len(keys),
        "bound": bound,
        "small_max": small_max,
        "all": _summary(errors, bound),
        "large": _summary(errors[~small], bound),
        "small": {
            "pairs": int(small.sum()),
            "exact_fraction": float((est_n[small] == exact_n[small]).mean()) if small.any() else None,
        },
        "same_windows": set(truth) == set(est),
        "hll_updates_per_s": stats.counted / hll_s if hll_s > 0 else None,
        "exact_updates_per_s": stats.counted / exact_s if exact_s > 0 else None,
        "speedup": exact_s / hll_s if hll_s > 0 else None,
        "hll_state_bytes": len(hll.to_bytes()),
        "exact_state_bytes": len(oracle.to_bytes()),
    }
