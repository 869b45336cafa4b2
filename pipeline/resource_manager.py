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
joins shed by PNI.

6. **Window reduction** (:meth:`ResourceManager._windows`, seed 004 §4.3's bisection on one
   shared f, ``analytics.window_plan``): when the estimated state of the shared kinds is over
   ``[resources] memory_budget`` less the reserve, the top-k and distinct queries that have a
   QoS range (``window_range_s``) get shorter windows, down to the range's minimum; they grow
   back when it fits. Each kind applies them at the next batch boundary
   (``pipeline.window_knobs``: the same mechanism as ``netmon tune --window``, and every row
   says the window it held).
   Before it, seed 004's coarse step (``[resources] granularity_steps`` = p): the ranged top-k
   and distinct queries' sub-windows of the first ``f = (p − j)/p`` that fits are fixed, with one
   shared f (:meth:`_reduce`), and each kind's granularity operator takes them as floors
   (``SlidingTopK.coarsen``, ``SlidingDistinct.coarsen``: a distinct query's ``distinct/<name>``).

5. **The intake box, last** (:meth:`ResourceManager._intake`): when every query's box at its
   floor is still estimated over the bound — the Kafka read and the decode of every record are
   most of the batch, which no box after the decode removes — a drop box *before* the decode
   keeps a fraction of the records (``analytics.sampling.intake_lines``, ``INTAKE`` in the
   fractions; ``[resources] intake_min``). Every kind then reads a sample: traffic, top-k and
   the features' counts are scaled, distinct counts widen their intervals, the joins see fewer
   pairs (each row says its fraction). It is the first knob reversed when the load falls: the
   queries' fractions rise only once it is back at 1.

   **The backlog** (:meth:`ResourceManager.observe_backlog`): while the query is behind, its
   batches run back to back and the rate it measures is the rate it *processes*, not the rate
   that arrives, so the load alone only says "more" (the box used to halve once per batch: with
   4 s batches, a minute to reach 1/16). The Kafka backlog says how much more: the rate to plan
   for is the arrival rate (processed + the backlog's growth per second, between the planning
   instants of two batches) plus the backlog drained over :data:`DRAIN_S`, and the intake box
   falls at once to the fraction that rate needs (a power of two, not below ``intake_min``);
   it rises again only while that rate, which counts what is left to drain, fits. This is our
   addition: seeds 004 and 000 measure the input rate directly, a query behind a log cannot.

Exactly once: a decision is saved under the batch's id *before* the batch runs
(``pipeline.batch_state``), and a batch that Spark runs again finds it and applies the same
fractions, so it writes the same rows. After a restart the manager starts from the last decision
saved and the correction it had.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from analytics.cost_model import CostModel, Workload, load_constants, place_sampling
from analytics.explain import admission
from analytics.window_plan import DISTINCT_PREFIX, estimated, plan_windows, ranged_queries
from netmon.config import Config
from netmon.config.checks import ConfigError
from netmon.config.resources import ResourcesConfig
from pipeline.batch_state import BatchState
from pipeline.partials import INTAKE

__all__ = [
    "DRAIN_S",
    "TUNABLE",
    "ResourceManager",
    "admit",
    "control_file",
    "eligible_queries",
    "in_force",
    "quantize",
    "read_overrides",
    "write_overrides",
]

log = logging.getLogger(__name__)

#: the kinds of the shared query (the joins run in their own query, shed by PNI)
SHARED_KINDS = ("traffic", "topk", "distinct")
#: weight of the newest measurement in the smoothed correction
ALPHA = 0.5
#: the intake box plans to drain a Kafka backlog within this many seconds (module docstring)
DRAIN_S = 60.0


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
        self.model = model or CostModel.for_config(cfg, load_constants(cfg.paths.state_dir))
        self.clock = clock
        self.names = eligible_queries(cfg, kinds)
        if len(set(self.names)) < len(self.names):
            shared_names = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(
                f"[resources] manage: a top-k and a distinct query share the name {shared_names[0]!r}:"
                " their drop boxes would be one; rename one of them"
            )
        self.control = control_file(cfg)
        self.resources = cfg.resources
        self._control_seen: tuple[float, int] | None = None
        self.trigger_s = max(float(cfg.pipeline.trigger_s), 1e-3)
        shared = tuple(k for k in (cfg.pipeline.kinds if kinds is None else kinds) if k in SHARED_KINDS)
        self._cfg = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=shared))
        self._started: float | None = None
        self._measured: dict[str, float] | None = None
        #: the Kafka backlog (records) at the planning instant (s) of the newest batches seen:
        #: batch id -> (records, seconds); :meth:`observe_backlog`
        self._backlog: dict[int, tuple[float, float]] = {}
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
        self.resources = self._in_force()
        decision = self._choose(before, self._measured)
        self._measured = None
        self.state.save(batch_id, {"batch_id": batch_id, **decision})
        self.last = decision
        if decision["keep"] != before.get("keep"):
            log.info(
                "drop boxes",
                extra={"batch": batch_id, "keep": decision["keep"], "load": decision["load"]},
            )
        if decision.get("windows", {}) != before.get("windows", {}):
            log.info("window reduction", extra={"batch": batch_id, "windows": decision.get("windows", {})})
        if decision.get("granularity", {}) != before.get("granularity", {}):
            log.info("coarse step", extra={"batch": batch_id, "granularity": decision.get("granularity", {})})
        return dict(decision["keep"])

    def observe(self, batch_id: int, packets: int, seconds: float, state_rows: int | None = None) -> None:
        """What batch ``batch_id`` took: its packets and wall seconds (its interval at the next),
        and the state rows its kinds hold after it (``sys`` ``<kind>_state_rows``; None: unknown)."""
        self._measured = {"packets": float(packets), "seconds": float(seconds), "interval_s": self.trigger_s}
        if state_rows is not None:
            self._measured["state_rows"] = float(state_rows)

    def observe_backlog(self, batch_id: int, records: float, at_s: float) -> None:
        """The records left in Kafka when batch ``batch_id`` was planned (its progress's lag in
        messages times its records per message), at that instant ``at_s`` (seconds, any epoch):
        the rate to plan for while behind (module docstring). The newest two batches are kept."""
        self._backlog[int(batch_id)] = (max(float(records), 0.0), float(at_s))
        for old in sorted(self._backlog)[:-2]:
            del self._backlog[old]

    def _needed_rate(self, rate: float) -> float:
        """The records per second the query must take: the measured ``rate`` when no backlog is
        known; else the arrival rate (``rate`` plus the backlog's growth per second between the
        two newest batches seen, at least 0) plus the backlog drained over :data:`DRAIN_S`.

        While the query keeps up, the backlog is what arrived during a batch and its growth is
        noise: a backlog of at most one trigger's worth of records (``rate · trigger_s``) is
        taken for that, and this is ``rate``.
        """
        if not self._backlog:
            return rate
        ids = sorted(self._backlog)
        records, at = self._backlog[ids[-1]]
        if records <= rate * self.trigger_s:
            return rate
        growth = 0.0
        if len(ids) == 2:
            before, then = self._backlog[ids[0]]
            if at > then:
                growth = (records - before) / (at - then)
        return max(rate + growth, 0.0) + records / DRAIN_S

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

    def _state_correction(
        self, before: Mapping[str, Any], m: Mapping[str, float], rate: float, keep: Mapping[str, float]
    ) -> float | None:
        """The measured state rows over the model's at the windows and fractions in force, smoothed
        as the CPU correction (an EWMA): the memory bound is divided by it, so the model says how
        state moves with the windows and the measurement how much there is. None until measured.
        A window still filling holds less than the model's full window: the correction starts
        low and rises to the steady state."""
        correction = before.get("state_correction")
        measured = m.get("state_rows")
        if measured is None or rate <= 0:
            return correction
        in_force = dict(before.get("windows") or {})
        grain = {str(n): int(x) for n, x in (before.get("granularity") or {}).items()}
        rows, _, _ = estimated(self.model, self._cfg, Workload(rate_pps=rate), in_force, keep, grain)
        if rows <= 0:
            return correction
        ratio = measured / rows
        return ratio if correction is None else ALPHA * ratio + (1 - ALPHA) * correction

    def _reduce(
        self, rate: float, keep: Mapping[str, float], state_correction: float | None = None
    ) -> dict[str, Any]:
        """Seed 004 §4.3 under the memory bound: ``{"windows": ..., "granularity": ...}``.

        The coarse step first (``[resources] granularity_steps`` = p, ``analytics.window_plan``):
        the ranged top-k and distinct queries' sub-window factors (``window_key`` -> m > 1, up to
        ``sub_window_max_factor``) of the first ``f = (p − j)/p`` whose estimate fits; then the
        window bisection with them fixed (:meth:`_windows`). Both empty while everything fits at
        the configured knobs: they go back as soon as the estimate at them fits again. The top-k and
        distinct kinds take the factors as floors of their granularity operators (``pipeline.topk``,
        ``pipeline.distinct``).
        """
        windows, grain = self._windows(rate, keep, state_correction, with_granularity=True)
        return {"windows": windows, "granularity": grain}

    def _windows(
        self,
        rate: float,
        keep: Mapping[str, float],
        state_correction: float | None = None,
        *,
        with_granularity: bool = False,
    ) -> Any:
        """Window reduction (seed 004 §4.3, ``analytics.window_plan``): the top-k and distinct
        queries with a QoS range (``window_range_s``; ``distinct/<name>`` for a distinct query,
        ``window_plan.window_key``) whose window the memory bound needs shorter than
        configured, at the largest shared f whose estimated state fits; each at most its
        configured ``window_s`` (the window asked for is the QoS target, the range's minimum
        the floor). Empty while everything fits: the windows go back as soon as the estimate
        at them fits again (state is not CPU: no measured correction, no damping needed).
        """
        kinds = self._cfg.pipeline.kinds
        # keyed as the control file: a top-k query's name, distinct/<name> (window_key)
        ranged = {
            key: q
            for key, q in ranged_queries(self._cfg).items()
            if ("distinct" if key.startswith(DISTINCT_PREFIX) else "topk") in kinds
        }
        if not ranged:
            return ({}, {}) if with_granularity else {}
        bound = self.resources.memory_bound / (state_correction or 1.0)
        steps = self.resources.granularity_steps if {"topk", "distinct"} & set(kinds) else 0
        plan = plan_windows(
            self.model,
            self._cfg,
            Workload(rate_pps=rate),
            bound,
            keep=keep,
            p=steps,
            max_factor=self.resources.sub_window_max_factor,
        )
        windows = {key: s for key, s in plan.windows.items() if key in ranged and s < ranged[key].window_s}
        if not with_granularity:
            return windows
        return windows, {key: m for key, m in plan.granularity.items() if key in ranged}

    @property
    def granularity(self) -> dict[str, int]:
        """The sub-window factors the last decided batch's coarse step sets (``window_key`` -> m)."""
        return {str(n): int(m) for n, m in (self.last.get("granularity") or {}).items()}

    @property
    def windows(self) -> dict[str, float]:
        """The windows the last decided batch shortens (query -> seconds; empty: none)."""
        return {str(n): float(s) for n, s in (self.last.get("windows") or {}).items()}

    def _intake(
        self, intake: float, rate: float, keep: Mapping[str, float], correction: float, feasible: bool
    ) -> float:
        """The intake box's next fraction: the last resort, and the first knob reversed.

        It falls (at once, to a power of two ≥ ``intake_min``) only when every query's box at
        its floor is estimated over the bound (``feasible`` False), to the largest power of two
        whose corrected estimate at ``rate`` fits (the floor if none); it rises one step (×2)
        per batch while the estimate at that step stays under the bound. The Kafka read before
        it does not scale with it, so the correction grows as it falls and the rise is judged
        on the larger correction: conservative, it does not oscillate. ``rate``: the rate to
        plan for (:meth:`_needed_rate`).
        """
        estimate = self._estimate(rate * intake, keep) * correction
        if estimate > self.bound and not feasible:
            # the largest power of two below it whose estimate fits (the model is not linear in
            # the rate: per-batch costs stay), else the floor
            x = min(intake, quantize(intake * self.bound / estimate, self.intake_floor))
            while x > self.intake_floor and self._estimate(rate * x, keep) * correction > self.bound:
                x = quantize(x / 2, self.intake_floor)
            return x
        if intake < 1:
            up = min(intake * 2, 1.0)
            if self._estimate(rate * up, keep) * correction <= self.bound:
                return up
        return intake

    @property
    def intake_floor(self) -> float:
        """The intake box's floor: the power of two at or above ``intake_min`` in force."""
        return quantize(0.0, self.resources.intake_min)

    @property
    def bound(self) -> float:
        """The CPU the shared kinds may use: ``(1 − reserve)·cpu_budget`` in force."""
        return self.resources.cpu_bound

    def lower(self, name: str) -> float:
        """Query ``name``'s floor: the power of two at or above its ``keep_min`` in force."""
        return quantize(0.0, self.resources.keep_min_of(name))

    def _in_force(self) -> ResourcesConfig:
        """``[resources]`` with the control file's overrides (re-read when it changes)."""
        try:
            st = self.control.stat()
            seen: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            seen = None
        if seen == self._control_seen:
            return self.resources
        self._control_seen = seen
        try:
            res = in_force(self.cfg, read_overrides(self.control))
        except ConfigError as exc:
            log.warning(
                "resources control file ignored", extra={"file": str(self.control), "error": str(exc)}
            )
            return self.cfg.resources
        unknown = sorted((set(res.importance) | set(res.keep_min_by_query)) - set(self.names))
        if unknown:
            log.warning("resources: no drop box for these queries", extra={"queries": unknown})
        log.info("resources in force", extra={"file": str(self.control), "cpu_budget": res.cpu_budget})
        return res

    def _choose(self, before: Mapping[str, Any], m: Mapping[str, float] | None) -> dict[str, Any]:
        keep = {n: float(x) for n, x in (before.get("keep") or {}).items() if n in self.names}
        # A floor raised at run time applies at once.
        keep = {n: max(x, self.lower(n)) for n, x in keep.items() if max(x, self.lower(n)) < 1}
        intake = max(float((before.get("keep") or {}).get(INTAKE, 1.0)), self.intake_floor)
        correction = before.get("correction")
        windows = dict(before.get("windows") or {})
        if m is None or not self.names:
            return {
                "keep": _with_intake(keep, intake),
                "windows": windows,
                "granularity": dict(before.get("granularity") or {}),
                "correction": correction,
                "state_correction": before.get("state_correction"),
                "load": before.get("load"),
            }
        interval = max(m["interval_s"], self.trigger_s)
        # rate: the records read, those the intake box skipped included; reach: those decoded
        rate, load = m["packets"] / interval, m["seconds"] / interval
        reach = rate * intake
        state_correction = self._state_correction(before, m, reach, keep)
        cpu_estimate = self._estimate(reach, keep)
        if cpu_estimate > 0 and rate > 0:
            ratio = load / cpu_estimate
            correction = ratio if correction is None else ALPHA * ratio + (1 - ALPHA) * correction
        if not correction:
            return {
                "keep": _with_intake(keep, intake),
                **self._reduce(reach, keep, state_correction),
                "correction": correction,
                "state_correction": state_correction,
                "load": load,
            }
        # the rate to plan for: the measured one, or, while a Kafka backlog is known, what arrives
        # and what is left to drain (the correction stays the measured load's, at ``reach``)
        need = self._needed_rate(rate)
        plan = place_sampling(
            self.model,
            self._cfg,
            Workload(rate_pps=need * intake),
            self.bound / correction,
            keep_min={n: self.resources.keep_min_of(n) for n in self.names},
            weights={n: float(w) for n, w in self.resources.importance.items()},
            eligible=self.names,
        )
        chosen: dict[str, float] = {}
        for name in self.names:
            target = quantize(plan.keep.get(name, 1.0), self.resources.keep_min_of(name))
            now = keep.get(name, 1.0)
            if target < now:
                chosen[name] = target
            elif target > now and intake >= 1:
                # one step up at a time, and only if the load at that step stays under the bound
                # (while the intake box samples, it is reversed first)
                up = min(now * 2, 1.0)
                trial = {**keep, **chosen, name: up}
                chosen[name] = up if self._estimate(need * intake, trial) * correction <= self.bound else now
            else:
                chosen[name] = now
        intake = self._intake(intake, need, chosen, correction, plan.feasible)
        return {
            "keep": _with_intake({n: x for n, x in chosen.items() if x < 1}, intake),
            **self._reduce(rate * intake, chosen, state_correction),
            "correction": correction,
            "state_correction": state_correction,
            "load": load,
            # False: even every drop box at its floor is estimated over the bound (the shared
            # query's Kafka read and decode, and the queries without a drop box, remain)
            "feasible": plan.feasible,
            "cpu_budget": self.resources.cpu_budget,
        }


def _with_intake(keep: dict[str, float], intake: float) -> dict[str, float]:
    """The queries' fractions and, below 1, the intake box's under ``INTAKE``."""
    return {**keep, INTAKE: intake} if intake < 1 else keep


# -- knobs changed at run time -------------------------------------------------------------------
#: the ``[resources]`` keys the control file may override while the pipeline runs
TUNABLE = ("cpu_budget", "reserve", "keep_min", "importance", "keep_min_by_query", "intake_min")


def control_file(cfg: Config) -> Path:
    """The resource manager's overrides, read at every batch (``netmon tune`` writes them)."""
    return Path(cfg.paths.data_dir) / "control" / "resources.json"


def read_overrides(path: Path) -> dict[str, Any]:
    """The control file's overrides; ``{}`` when it is missing. Raises ``ConfigError`` on a
    file that is not a JSON object of :data:`TUNABLE` keys (the values are checked by
    :func:`in_force`)."""
    try:
        body = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a JSON object of overrides ({exc})") from None
    if not isinstance(body, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(TUNABLE))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (tunable: {', '.join(TUNABLE)})")
    return body


def in_force(cfg: Config, overrides: Mapping[str, Any]) -> ResourcesConfig:
    """``[resources]`` with ``overrides`` applied, checked as the config file's values are."""
    for key in ("importance", "keep_min_by_query"):
        if key in overrides and not isinstance(overrides[key], dict):
            raise ConfigError(f"{key}: expected an object of query names, got {overrides[key]!r}")
    return dataclasses.replace(cfg.resources, **dict(overrides))


def write_overrides(path: Path, overrides: Mapping[str, Any]) -> None:
    """Replace the control file atomically (the manager reads the old or the new, never a part)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(overrides), indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


# -- admission control ---------------------------------------------------------------------------
def admit(cfg: Config, kinds: Collection[str] | None = None) -> tuple[Config, dict[str, str]]:
    """Seed 004 §4.1's admission control at the pipeline's start.

    At ``[resources] admission_rate_pps`` (0: every query admitted), the cost model's estimate of
    each configured query of the ``kinds`` that run, in the configuration's order (traffic first),
    is admitted while the running totals fit ``(1 − reserve)·`` the CPU and memory budgets
    (``analytics.explain.admission``). Returns the configuration without the refused top-k,
    distinct and join queries, and per refused query its one-line reason naming the estimate
    and the budget. Traffic and the alert features always run (every page and alert needs them).
    """
    rate = cfg.resources.admission_rate_pps
    if rate <= 0:
        return cfg, {}
    running = tuple(cfg.pipeline.kinds if kinds is None else kinds)
    scoped = dataclasses.replace(cfg, pipeline=dataclasses.replace(cfg.pipeline, kinds=running))
    model = CostModel.for_config(cfg, load_constants(cfg.paths.state_dir))
    verdicts = admission(
        model.estimates(scoped, Workload(rate_pps=rate)), cfg.resources.cpu_bound, cfg.resources.memory_bound
    )
    refused = {name: why for name, why in verdicts.items() if why and name not in ("traffic", "features")}
    if not refused:
        return cfg, {}
    queries = dataclasses.replace(
        cfg.queries,
        topk=tuple(q for q in cfg.queries.topk if q.name not in refused),
        distinct=tuple(q for q in cfg.queries.distinct if q.name not in refused),
        join=tuple(q for q in cfg.queries.join if q.name not in refused),
    )
    reasons = {name: f"query {name!r} {why} at {rate:g} packets/s" for name, why in refused.items()}
    return dataclasses.replace(cfg, queries=queries), reasons
