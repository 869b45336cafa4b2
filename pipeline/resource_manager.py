"""The resource manager of the shared query: drop boxes before its top-k and distinct queries.

Seed 004 (Cammert et al., §4) adapts running queries in two steps: the cost model says how much
each query costs at the measured input, a manager turns knobs until the estimate fits the budget,
and reverses them when the load falls; seed 000 (Ayad & Naughton, §5.2) places drop boxes by a
fractional knapsack — keep fraction x per box, each query worth ``weight·x``. This module is that
loop for the shared query (``pipeline.job.SharedBatch``), once per micro-batch:

1. **Measure** (:meth:`ResourceManager.observe`): the batch's packets and wall seconds, and the
   time since the previous batch began (at least the trigger interval). The batch's *load* is its
   seconds over that interval: the share of the stream's time the query needed, 1.0 when batches
   run back to back (the query has fallen behind).
2. **Correct the model**: the cost model (``analytics.cost_model``, calibrated constants) gives the
   shared kinds' CPU at the measured rate and the fractions in force; the ratio measured/estimated
   (smoothed, an EWMA) scales every estimate, so the model says *where* time goes and the
   measurement *how much* there is of it.
3. **Choose** (:meth:`ResourceManager.decide`): ``analytics.cost_model.place_sampling`` over the
   sampled queries with the room ``bound / correction``, ``bound = (1 − reserve)·cpu_budget``
   (``[resources]``), each fraction at least ``keep_min``.
4. **Quantize and damp**: a fraction is rounded *down* to a power of two (1, ½, ¼, …), so the
   Horvitz–Thompson counts ``n / x`` are whole numbers and a rerun's answer has no rounding; it
   may fall at once but rises one step (×2) per batch, and only while the load at the higher
   fraction is estimated below the bound — the reversal seed 004 asks for, without oscillating.

Which queries have drop boxes: top-k queries weighted by ``packets`` (a Bernoulli sample of
records, counts scaled by 1/x) and distinct counts (a sample of *items* by their hash,
``pipeline.partials.item_kept``; a window's count is scaled by its fractions,
``pipeline.distinct``). A ``bytes`` top-k query's interval needs each key's packet sizes, which
the sub-window lists do not keep; traffic stays exact (it is cheap: one group per protocol); the
joins shed by PNI. Seed 004's other knobs, window and granularity, are not turned here.

Exactly once: a decision is saved under the batch's id *before* the batch runs
(``pipeline.batch_state``), and a batch that Spark runs again finds it and applies the same
fractions, so it writes the same rows. After a restart the manager starts from the last decision
saved and the correction it had.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from analytics.cost_model import CostModel, Workload, load_constants, place_sampling
from netmon.config import Config
from pipeline.batch_state import BatchState

__all__ = ["ResourceManager", "eligible_queries", "quantize"]

log = logging.getLogger(__name__)

#: the kinds of the shared query (the joins run in their own query, shed by PNI)
SHARED_KINDS = ("traffic", "topk", "distinct")
#: weight of the newest measurement in the smoothed correction
ALPHA = 0.5


def eligible_queries(cfg: Config, kinds: Collection[str] | None = None) -> tuple[str, ...]:
    """The queries with a drop box: top-k weighted by packets, and distinct counts (module
    docstring), of the ``kinds`` that run (default: ``[pipeline] kinds``)."""
    running = set(cfg.pipeline.kinds if kinds is None else kinds)
    topk = [q.name for q in cfg.queries.topk if q.weight == "packets"] if "topk" in running else []
    distinct = [q.name for q in cfg.queries.distinct] if "distinct" in running else []
    return (*topk, *distinct)


def quantize(keep: float, keep_min: float) -> float:
    """``keep`` rounded down to a power of two, and not below the smallest power of two ≥ ``keep_min``.

    >>> quantize(0.7, 0.1), quantize(0.3, 0.1), quantize(0.01, 0.1), quantize(1.0, 0.1)
    (0.5, 0.25, 0.125, 1.0)
    """
    floor = 2.0 ** math.ceil(math.log2(keep_min))
    if keep >= 1:
        return 1.0
    return max(2.0 ** math.floor(math.log2(max(keep, 1e-12))), floor)


class ResourceManager:
    """Chooses each micro-batch's drop-box fractions from the measured load (module docstring).

    Parameters
    ----------
    cfg
        The configuration: ``[resources]`` budgets and ``keep_min``, the queries, the trigger.
    directory
        Where the decisions are kept, one version per batch (beside the query's checkpoint).
    model
        The cost model; by default the calibrated constants of ``[pipeline] state_dir``.
    clock
        Seconds, monotonic (tests give their own).
    """

    def __init__(
        self,
        cfg: Config,
        directory: Path,
        *,
        model: CostModel | None = None,
        clock: Any = time.perf_counter,
        kinds: Collection[str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.state = BatchState(Path(directory))
        self.model = model or CostModel(load_constants(cfg.paths.state_dir), cfg.pipeline.watermark_s)
        self.clock = clock
        self.names = eligible_queries(cfg, kinds)
        if len(set(self.names)) < len(self.names):
            shared_names = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(
                f"[resources] manage: a top-k and a distinct query share the name {shared_names[0]!r}:"
                " their drop boxes would be one; rename one of them"
            )
        res = cfg.resources
        self.bound = res.cpu_bound
        self.keep_min = res.keep_min
        self.trigger_s = max(float(cfg.pipeline.trigger_s), 1e-3)
        shared = tuple(k for k in (cfg.pipeline.kinds if kinds is None else kinds) if k in SHARED_KINDS)
        self._cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=shared))
        self._started: float | None = None
        self._measured: dict[str, float] | None = None
        #: the last decision: fractions, the smoothed correction, the load measured before it
        self.last: dict[str, Any] = {"keep": {}, "correction": None, "load": None}

    def decide(self, batch_id: int) -> dict[str, float]:
        """The fractions batch ``batch_id`` applies (saved before it runs; a rerun reads them)."""
        now = self.clock()
        if self._started is not None and self._measured is not None:
            self._measured["interval_s"] = max(now - self._started, self.trigger_s)
        self._started = now
        mine = self.state.load(batch_id + 1)
        if mine is not None and mine.get("batch_id") == batch_id:
            self.last = mine  # Spark runs the batch again: the same fractions, the same rows
            return dict(mine["keep"])
        before = self.state.load(batch_id) or self.last
        decision = self._choose(before, self._measured)
        self._measured = None
        self.state.save(batch_id, {"batch_id": batch_id, **decision})
        self.last = decision
        if decision["keep"] != before.get("keep"):
            log.info(
                "drop boxes",
                extra={"batch": batch_id, "keep": decision["keep"], "load": decision["load"]},
            )
        return dict(decision["keep"])

    def observe(self, batch_id: int, packets: int, seconds: float) -> None:
        """What batch ``batch_id`` took: its packets and wall seconds (its interval at the next)."""
        self._measured = {"packets": float(packets), "seconds": float(seconds), "interval_s": self.trigger_s}

    def _estimate(self, rate: float, keep: Mapping[str, float]) -> float:
        """The cost model's CPU (s/s) of the shared kinds at ``rate`` and the fractions ``keep``."""
        w = Workload(rate_pps=rate)
        topk = {q.name: q for q in self._cfg.queries.topk}
        distinct = {q.name: q for q in self._cfg.queries.distinct}
        total = 0.0
        for e in self.model.estimates(self._cfg, w):
            x = keep.get(e.query, 1.0)
            if x < 1 and e.kind == "topk" and e.query in topk:
                total += self.model.topk(w, topk[e.query], keep=x).cpu
            elif x < 1 and e.kind == "distinct" and e.query in distinct:
                total += self.model.distinct(w, distinct[e.query], keep=x).cpu
            else:
                total += e.cpu
        return total

    def _choose(self, before: Mapping[str, Any], m: Mapping[str, float] | None) -> dict[str, Any]:
        keep = {n: float(x) for n, x in (before.get("keep") or {}).items() if n in self.names}
        correction = before.get("correction")
        if m is None or not self.names:
            return {"keep": keep, "correction": correction, "load": before.get("load")}
        interval = max(m["interval_s"], self.trigger_s)
        rate, load = m["packets"] / interval, m["seconds"] / interval
        estimated = self._estimate(rate, keep)
        if estimated > 0 and rate > 0:
            ratio = load / estimated
            correction = ratio if correction is None else ALPHA * ratio + (1 - ALPHA) * correction
        if not correction:
            return {"keep": keep, "correction": correction, "load": load}
        plan = place_sampling(
            self.model,
            self._cfg,
            Workload(rate_pps=rate),
            self.bound / correction,
            keep_min=self.keep_min,
            eligible=self.names,
        )
        chosen: dict[str, float] = {}
        for name in self.names:
            target = quantize(plan.keep.get(name, 1.0), self.keep_min)
            now = keep.get(name, 1.0)
            if target < now:
                chosen[name] = target
            elif target > now:
                # one step up at a time, and only if the load at that step stays under the bound
                up = min(now * 2, 1.0)
                trial = {**keep, **chosen, name: up}
                chosen[name] = up if self._estimate(rate, trial) * correction <= self.bound else now
            else:
                chosen[name] = now
        return {
            "keep": {n: x for n, x in chosen.items() if x < 1},
            "correction": correction,
            "load": load,
            # False: even every drop box at keep_min is estimated over the bound (the shared
            # query's Kafka read and decode, and the queries without a drop box, remain)
            "feasible": plan.feasible,
        }
