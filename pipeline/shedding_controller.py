"""The live load-shedding controller of the Spark join operator: progress in, fractions out.

The CPU budget is a fraction of each micro-batch trigger interval: with ``cpu_budget = 0.5`` and
a 1 s trigger, the join operator may spend 0.5 CPU seconds per batch. After every batch of the
join query, :meth:`SheddingController.update` takes the query's progress (the dict of
``StreamingQueryListener.onQueryProgress``, or one of ``query.recentProgress``) whose
``observedMetrics`` hold the operator's own per-batch sums (``pipeline.joins`` observes them as
``join.<query>``), and for each join query:

1. measures the batch (seed 003 §2.2): the event time it covered ``span`` (advance of the largest
   timestamp seen), ``λ_L = n_L / span``, ``λ_R``, the selectivity ``f`` from the Horvitz-Thompson
   estimate of the unshed output (eq. 9), ``C_u = update_s / inserted``, ``C_p = probe_s /
   results``. Both costs are scaled by ``busy_s / (update_s + probe_s)`` so that eq. (2) at the
   applied fractions equals the operator's measured wall time, marshalling and state
   (de)serialisation included, and are smoothed (EWMA, weight ``smoothing``);
2. turns the budget into event-time units: the next batch may use ``cpu_budget · I`` seconds
   for about ``span`` seconds of event time, so ``B = cpu_budget · I / span``, where ``I`` is the
   trigger interval, or the shared batch's duration when it was longer (the join's share of the
   pipeline's time: a batch made long by the other kinds, or by a backlog they drain, does not
   make the join shed; ``pipeline.joins.SheddingListener`` passes it as ``sharedBatchMs``)
   seconds per event second. A query with a ``share`` (``[[queries.join]] cpu_share``) gets that
   fraction of the budget; the others divide the rest in proportion to their unshed cost. With
   ``budget_scope = "batch"`` (the default) the budget bounds the joins' whole part of the
   micro-batch, not only the operator: the joins kind also stages the records, writes every
   result row and saves its state, which eq. (2) does not count (its seconds in the shared batch,
   ``pipeline.joins.SheddingListener``; before the joins ran on the shared query, the duration
   of their own query's batch, which also read and decoded every packet).
   The operator's share is then ``B / ρ`` with ``ρ`` = batch duration / operator time (EWMA), so
   that the batch, not only the join, meets the budget. This is multiplicative feedback on the
   measured batch: overhead proportional to the join's work (result rows) is met in one step, a
   fixed per-batch cost in a few (departure from seed 003, whose cost model is the join's alone;
   ``budget_scope = "operator"`` is the paper's). The first batch a controller sees carries the
   query's start-up: its ρ is used only if that batch overran the budget, and only until the
   next measurement replaces it (ignoring it let a backlog build: the next batch, unshed, read
   everything that arrived meanwhile);
3. re-solves the optimizer (:meth:`analytics.join_cost.JoinCostModel.optimum`, eqs. 10-15) for
   the query's strategy and moves the fractions toward the optimum, smoothed against
   oscillation: ``x ← x + clip(smoothing · (x* − x), −max_step, max_step)``. After a batch that
   overran the budget (by more than a quarter), a fraction above its optimum drops to it at
   once: a slow descent lets the lag, hence the next batch, grow while it lasts (shed fast,
   recover slowly).

It returns one :class:`SheddingRecord` per query and batch (the ``results/shedding/`` rows, as a
table of :data:`STATS_SCHEMA`: :func:`records_table`) and keeps the fractions for the next batch
in :attr:`fractions`. It does no I/O: the listener in ``pipeline.joins`` writes the fractions to
the control file (:func:`write_control`) that the operator reads (:func:`read_control`) at its
next batch, and commits the records.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa

from analytics.join_cost import JoinCostModel

__all__ = [
    "STATS_SCHEMA",
    "ControlledQuery",
    "SheddingController",
    "SheddingRecord",
    "observe_name",
    "read_control",
    "read_control_state",
    "records_table",
    "write_control",
]

_NS = 1_000_000_000
#: a batch more than this factor over its budget has overrun it (fast shedding, provisional ρ)
_OVERRUN = 1.25
_CONTROL_VERSION = 1


def observe_name(query: str) -> str:
    """The name of a join query's observed metrics in the progress (``join.<query>``)."""
    return f"join.{query}"


@dataclass(frozen=True)
class ControlledQuery:
    """What the controller needs of a join query: name, windows ``T_L``/``T_R``, strategy and its
    fixed share of the budget (if any)."""

    name: str
    window_left_s: float
    window_right_s: float
    strategy: str
    #: a fixed fraction of the budget, or None: a share of what the fixed ones leave
    share: float | None = None


@dataclass(frozen=True)
class SheddingRecord:
    """One join query's shedding statistics for one micro-batch (a ``results/shedding/`` row).

    ``x_left``/``x_right`` are the fractions the batch applied, ``next_x_*`` those chosen for the
    following batches and ``optimum_x_*`` the optimizer's unsmoothed answer. Rates are per second
    of event time, costs in seconds, ``utilisation = busy_s / I`` (the operator's wall time as a
    fraction of the interval ``I`` the budget is a share of: the trigger interval, or the shared
    batch when it took longer), ``batch_utilisation`` the joins' part of the batch over ``I``
    (``cpu_budget`` is the target of the one ``budget_scope`` names) and
    ``batch_factor`` the smoothed ratio ρ of batch duration to operator time the controller used.
    """

    query: str
    batch_id: int
    batch_time: str
    event_time: str | None
    strategy: str
    cpu_budget: float
    span_s: float
    n_left: int
    n_right: int
    lambda_left: float
    lambda_right: float
    selectivity: float
    cu_s: float
    cp_s: float
    x_left: float
    x_right: float
    optimum_x_left: float
    optimum_x_right: float
    next_x_left: float
    next_x_right: float
    inserted_left: int
    inserted_right: int
    results: int
    unshed_estimate: float
    expected_results: float
    busy_s: float
    join_s: float
    utilisation: float
    batch_ms: int
    batch_utilisation: float
    batch_factor: float
    state_left: int
    state_right: int
    late: int


#: The columns of ``results/shedding/``: :class:`SheddingRecord`'s fields, ``batch_time`` and
#: ``event_time`` as UTC timestamps. The types Spark's file sink wrote when a streaming query read
#: the records back from JSON files (``BIGINT``, ``DOUBLE``, ``STRING``, ``TIMESTAMP``), so a
#: directory holding rows of both is read as one table.
STATS_SCHEMA = pa.schema(
    [
        pa.field(
            f.name,
            pa.timestamp("us", tz="UTC")
            if f.name in ("batch_time", "event_time")
            else {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "str | None": pa.string()}[
                str(f.type)
            ],
        )
        for f in fields(SheddingRecord)
    ]
)


def _timestamp(text: str | None) -> dt.datetime | None:
    """An ISO-8601 time (``Z`` or an offset; none: UTC) as an aware datetime; None if unreadable."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def records_table(records: Sequence[SheddingRecord]) -> pa.Table:
    """The ``results/shedding/`` rows of ``records``, in order (:data:`STATS_SCHEMA`).

    Non-finite numbers (a cost not measured yet) become nulls.

    >>> records_table([]).schema.field("batch_time").type
    TimestampType(timestamp[us, tz=UTC])
    """
    rows = []
    for record in records:
        row = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(record).items()
        }
        row["batch_time"] = _timestamp(record.batch_time)
        row["event_time"] = _timestamp(record.event_time)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=STATS_SCHEMA)


def _nan_to(value: Any, default: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) else default


def _clip(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


class SheddingController:
    """Per-batch feedback control of the join's insert/probe fractions under a CPU budget.

    Parameters
    ----------
    queries
        The join queries it controls.
    cpu_budget
        The join's share of each trigger interval (0 < budget; 1.0 = one core for the whole
        interval).
    trigger_s
        The trigger interval (seconds).
    smoothing
        Weight in (0, 1] of the newest measurement in the cost EWMAs and of the optimum in the
        fraction update.
    max_step
        The largest change of a fraction per batch (0 < max_step ≤ 1).
    x_left, x_right
        The starting fractions (or ``initial``, per query).
    initial
        Query name -> the state a previous controller saved (:meth:`state`, kept in the control
        file): fractions, smoothed costs, selectivity and clock, so a restarted pipeline resumes
        where it stopped.

    Examples
    --------
    One PNI join at twice its budget (hand-computed in ``tests/pipeline/test_shedding_controller.py``):

    >>> c = SheddingController([ControlledQuery("hs", 2.0, 2.0, "pni")], cpu_budget=0.5, trigger_s=1.0,
    ...                        smoothing=1.0, max_step=1.0)
    >>> m = {"n_left": 100, "n_right": 100, "inserted_left": 100, "inserted_right": 100,
    ...      "results": 400, "unshed_estimate": 400.0, "update_s": 0.2, "probe_s": 0.8, "busy_s": 1.0,
    ...      "x_left": 1.0, "x_right": 1.0, "min_ts_ns": 0, "max_ts_ns": 10**9}
    >>> [r] = c.update({"batchId": 0, "observedMetrics": {"join.hs": m}})
    >>> round(r.utilisation, 2), round(r.next_x_left, 3), round(r.next_x_right, 3)
    (1.0, 0.5, 0.5)
    """

    def __init__(
        self,
        queries: Sequence[ControlledQuery],
        *,
        cpu_budget: float,
        trigger_s: float,
        smoothing: float = 0.5,
        max_step: float = 0.25,
        x_left: float = 1.0,
        x_right: float = 1.0,
        budget_scope: str = "batch",
        initial: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if not (math.isfinite(cpu_budget) and cpu_budget > 0):
            raise ValueError(
                f"cpu_budget: expected a fraction of the trigger interval > 0, got {cpu_budget!r}"
            )
        if not (math.isfinite(trigger_s) and trigger_s > 0):
            raise ValueError(f"trigger_s: expected a number of seconds > 0, got {trigger_s!r}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing: expected a weight in (0, 1], got {smoothing!r}")
        if not 0 < max_step <= 1:
            raise ValueError(f"max_step: expected a fraction in (0, 1], got {max_step!r}")
        if budget_scope not in ("batch", "operator"):
            raise ValueError(f"budget_scope: expected 'batch' or 'operator', got {budget_scope!r}")
        for name, x in (("x_left", x_left), ("x_right", x_right)):
            if not 0 <= x <= 1:
                raise ValueError(f"{name}: expected a fraction in [0, 1], got {x!r}")
        fixed = [q.share for q in queries if q.share is not None]
        if any(not (math.isfinite(v) and 0 < v <= 1) for v in fixed) or sum(fixed) > 1 + 1e-9:
            raise ValueError(f"share: expected fractions in (0, 1] that sum to at most 1, got {fixed!r}")
        self.queries = tuple(queries)
        self.cpu_budget = float(cpu_budget)
        self.trigger_s = float(trigger_s)
        self.smoothing = float(smoothing)
        self.max_step = float(max_step)
        self.x_left = float(x_left)
        self.x_right = float(x_right)
        self.budget_scope = budget_scope
        #: EWMA of batch duration / operator time (budget_scope "batch"); NaN until measured
        self._rho = math.nan
        #: ρ came from a start-up batch: the next measurement replaces it rather than averaging
        self._rho_provisional = False
        self._x: dict[str, tuple[float, float]] = {}
        self._clock: dict[str, int] = {}
        self._cu: dict[str, float] = {}
        self._cp: dict[str, float] = {}
        self._f: dict[str, float] = {}
        self._last_batch = -1
        self._seen_batches = 0
        for q in self.queries:
            saved = (initial or {}).get(q.name) or {}
            x_l = _clip(_nan_to(saved.get("x_left"), self.x_left), 0.0, 1.0)
            x_r = _clip(_nan_to(saved.get("x_right"), self.x_right), 0.0, 1.0)
            self._x[q.name] = (1.0, 1.0) if q.strategy == "none" else (x_l, x_r)
            for store, name in ((self._cu, "cu_s"), (self._cp, "cp_s"), (self._f, "selectivity")):
                value = _nan_to(saved.get(name), math.nan)
                if math.isfinite(value) and value >= 0:
                    store[q.name] = value
            if isinstance(saved.get("clock_ns"), int):
                self._clock[q.name] = saved["clock_ns"]
            rho = _nan_to(saved.get("batch_factor"), math.nan)
            if rho > 0:
                self._rho = rho

    @property
    def fractions(self) -> dict[str, tuple[float, float]]:
        """Query name -> ``(x_left, x_right)`` for the next batch."""
        return dict(self._x)

    def state(self) -> dict[str, dict[str, Any]]:
        """Per query: fractions, smoothed ``cu_s``/``cp_s``, ``selectivity``, ``clock_ns`` and the
        batch factor ρ (JSON-able)."""
        out: dict[str, dict[str, Any]] = {}
        for q in self.queries:
            x_l, x_r = self._x[q.name]
            entry: dict[str, Any] = {"x_left": x_l, "x_right": x_r}
            for store, name in ((self._cu, "cu_s"), (self._cp, "cp_s"), (self._f, "selectivity")):
                if q.name in store and math.isfinite(store[q.name]):
                    entry[name] = store[q.name]
            if q.name in self._clock:
                entry["clock_ns"] = self._clock[q.name]
            if math.isfinite(self._rho):
                entry["batch_factor"] = self._rho
            out[q.name] = entry
        return out

    def update(self, progress: Mapping[str, Any]) -> list[SheddingRecord]:
        """Fold one batch's progress in; the records of the queries that had input.

        A progress whose ``batchId`` is not newer than the last one seen is ignored (listeners
        and ``recentProgress`` may repeat a batch).
        """
        batch_id = int(progress.get("batchId", -1))
        if batch_id <= self._last_batch:
            return []
        self._last_batch = batch_id
        observed = progress.get("observedMetrics") or {}
        batch_ms = int((progress.get("durationMs") or {}).get("triggerExecution") or 0)
        batch_time = str(progress.get("timestamp") or "") or _now_iso()
        # The interval the budget is a share of: the trigger interval, or the whole batch when it
        # took longer (``sharedBatchMs``, the shared query's batch the joins ran in): the join is
        # held to its share of the pipeline's time, not blamed for the other kinds' (departure
        # from seed 003, whose operator has the CPU to itself; the drop boxes of
        # ``[resources] manage`` answer for the other kinds).
        shared_s = int(progress.get("sharedBatchMs") or 0) / 1000
        interval_s = max(self.trigger_s, shared_s)

        measured: dict[str, dict[str, float]] = {}
        for q in self.queries:
            m = observed.get(observe_name(q.name))
            if not m or int(m.get("n_left") or 0) + int(m.get("n_right") or 0) == 0:
                continue
            measured[q.name] = self._measure(q, m)

        # The budget per batch, shared in proportion to the queries' unshed cost per batch.
        allowed = self.cpu_budget * interval_s
        busy = sum(v["busy_s"] for v in measured.values())
        # An overrun: more than a quarter over the budget (at the default 0.8 of the trigger, a
        # batch longer than the trigger interval, so the lag grew). Within that, measurement noise
        # around the operating point would flip the fractions between the LP's vertices.
        overran = (batch_ms / 1000 if self.budget_scope == "batch" else busy) > _OVERRUN * allowed
        if self.budget_scope == "batch":
            if batch_ms > 0 and busy > 0:
                rho = batch_ms / 1000 / busy
                if self._seen_batches == 0:
                    # Start-up inflates ρ: take it only when the batch overran (see step 2).
                    if overran:
                        self._rho, self._rho_provisional = rho, True
                elif self._rho_provisional:
                    self._rho, self._rho_provisional = rho, False
                else:
                    self._rho = self._ewma_value(self._rho, rho)
            if math.isfinite(self._rho) and self._rho > 0:
                allowed /= self._rho
        if measured:
            self._seen_batches += 1
        full = {name: v["full_cost"] for name, v in measured.items() if math.isfinite(v["full_cost"])}
        shares = {q.name: q.share for q in self.queries if q.share is not None}
        rest = allowed * (1.0 - sum(shares.values()))
        total = sum(cost for name, cost in full.items() if name not in shares)

        records = []
        for q in self.queries:
            if q.name not in measured:
                continue
            v = measured[q.name]
            m = observed[observe_name(q.name)]
            x_l, x_r = self._x[q.name]
            opt_l, opt_r, expected = x_l, x_r, math.nan
            model: JoinCostModel | None = v.get("model")  # type: ignore[assignment]
            if model is not None and q.name in full:
                if q.share is not None:
                    share = allowed * q.share
                else:
                    share = rest if total <= rest else rest * full[q.name] / total
                alloc = model.optimum(q.strategy, share / v["span_s"])
                opt_l, opt_r = alloc.x_left, alloc.x_right
                expected = alloc.output_rate * v["span_s"]
                if q.strategy != "none":
                    x_l = self._step(x_l, opt_l, overran)
                    x_r = self._step(x_r, opt_r, overran)
                    self._x[q.name] = (x_l, x_r)
            clock = self._clock.get(q.name)
            records.append(
                SheddingRecord(
                    query=q.name,
                    batch_id=batch_id,
                    batch_time=batch_time,
                    event_time=_iso(clock) if clock is not None else None,
                    strategy=q.strategy,
                    cpu_budget=self.cpu_budget,
                    span_s=v["span_s"],
                    n_left=int(m.get("n_left") or 0),
                    n_right=int(m.get("n_right") or 0),
                    lambda_left=v["lambda_left"],
                    lambda_right=v["lambda_right"],
                    selectivity=v["selectivity"],
                    cu_s=v["cu_s"],
                    cp_s=v["cp_s"],
                    x_left=_nan_to(m.get("x_left"), 1.0),
                    x_right=_nan_to(m.get("x_right"), 1.0),
                    optimum_x_left=opt_l,
                    optimum_x_right=opt_r,
                    next_x_left=x_l,
                    next_x_right=x_r,
                    inserted_left=int(m.get("inserted_left") or 0),
                    inserted_right=int(m.get("inserted_right") or 0),
                    results=int(m.get("results") or 0),
                    unshed_estimate=_nan_to(m.get("unshed_estimate"), 0.0),
                    expected_results=expected,
                    busy_s=v["busy_s"],
                    join_s=_nan_to(m.get("total_s"), 0.0),
                    utilisation=v["busy_s"] / interval_s,
                    batch_ms=batch_ms,
                    batch_utilisation=batch_ms / 1000 / interval_s,
                    batch_factor=self._rho if self.budget_scope == "batch" else math.nan,
                    state_left=int(m.get("state_left") or 0),
                    state_right=int(m.get("state_right") or 0),
                    late=int(m.get("late") or 0),
                )
            )
        return records

    def _step(self, x: float, target: float, overran: bool) -> float:
        if overran and target < x:
            return _clip(target, 0.0, 1.0)
        move = _clip(self.smoothing * (target - x), -self.max_step, self.max_step)
        return _clip(x + move, 0.0, 1.0)

    def _ewma_value(self, old: float, value: float) -> float:
        return value if not math.isfinite(old) else old + self.smoothing * (value - old)

    def _ewma(self, store: dict[str, float], name: str, value: float) -> float:
        if not math.isfinite(value):
            return store.get(name, math.nan)
        old = store.get(name)
        store[name] = value if old is None else old + self.smoothing * (value - old)
        return store[name]

    def _measure(self, q: ControlledQuery, m: Mapping[str, Any]) -> dict[str, Any]:
        n_l, n_r = int(m.get("n_left") or 0), int(m.get("n_right") or 0)
        lo, hi = int(m["min_ts_ns"]), int(m["max_ts_ns"])
        prev = self._clock.get(q.name)
        span_ns = hi - lo if prev is None else max(hi, prev) - prev
        self._clock[q.name] = hi if prev is None else max(hi, prev)
        span = span_ns / _NS
        busy = _nan_to(m.get("busy_s"), 0.0)
        update_s, probe_s = _nan_to(m.get("update_s"), 0.0), _nan_to(m.get("probe_s"), 0.0)
        scale = busy / (update_s + probe_s) if update_s + probe_s > 0 and busy > 0 else 1.0
        ins = int(m.get("inserted_left") or 0) + int(m.get("inserted_right") or 0)
        res = int(m.get("results") or 0)
        cu = self._ewma(self._cu, q.name, update_s * scale / ins if ins else math.nan)
        cp = self._ewma(self._cp, q.name, probe_s * scale / res if res else math.nan)
        t_sum = q.window_left_s + q.window_right_s
        if span > 0 and n_l and n_r and t_sum > 0:
            unshed = _nan_to(m.get("unshed_estimate"), 0.0)
            self._f[q.name] = _clip(unshed * span / (n_l * n_r * t_sum), 0.0, 1.0)
        f = self._f.get(q.name, 0.0)
        out: dict[str, Any] = {
            "span_s": span,
            "busy_s": busy,
            "lambda_left": n_l / span if span > 0 else math.nan,
            "lambda_right": n_r / span if span > 0 else math.nan,
            "selectivity": f,
            "cu_s": cu,
            "cp_s": cp,
            "full_cost": math.nan,
        }
        # Never measured (nothing inserted yet): charge the whole busy time to the arrivals.
        cu_model = cu if math.isfinite(cu) else busy / max(1, n_l + n_r)
        # No result measured yet: C_p is unknown and matters unless there is no output at all.
        cp_model = cp if math.isfinite(cp) else (0.0 if f == 0 else math.nan)
        if span > 0 and math.isfinite(cp_model):
            model = JoinCostModel(
                n_l / span, n_r / span, q.window_left_s, q.window_right_s, f, cu_model, cp_model
            )
            out["model"] = model
            out["full_cost"] = model.cost() * span
        return out


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / _NS, dt.UTC).isoformat().replace("+00:00", "Z")


def _now_iso() -> str:
    return _iso(time.time_ns())


# -- the control file ----------------------------------------------------------------------------
def write_control(path: str | Path, state: Mapping[str, Mapping[str, Any]], *, batch_id: int) -> None:
    """Replace the control file atomically with the controller's :meth:`SheddingController.state`.

    Layout: ``{"version": 1, "batch_id": n, "updated": unix_s, "queries": {name: {"x_left": ...,
    "x_right": ..., "cu_s": ..., "cp_s": ..., "selectivity": ..., "clock_ns": ...}}}``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"version": _CONTROL_VERSION, "batch_id": batch_id, "updated": time.time(), "queries": state}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def read_control_state(path: str | Path) -> dict[str, dict[str, Any]]:
    """The saved controller state of the control file; ``{}`` if missing or unreadable."""
    try:
        body = json.loads(Path(path).read_text())
        if not isinstance(body, dict) or body.get("version") != _CONTROL_VERSION:
            return {}
        return {str(k): dict(v) for k, v in body["queries"].items() if isinstance(v, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def read_control(path: str | Path) -> dict[str, tuple[float, float]]:
    """The fractions of the control file, clamped to [0, 1]; ``{}`` if it is missing or unreadable.

    >>> read_control("/nonexistent/control.json")
    {}
    """
    return {
        name: (
            _clip(_nan_to(entry.get("x_left"), 1.0), 0.0, 1.0),
            _clip(_nan_to(entry.get("x_right"), 1.0), 0.0, 1.0),
        )
        for name, entry in read_control_state(path).items()
    }
