"""``netmon explain``'s report: per query its plan, estimates, feasibility, and the measured values.

:func:`explain` builds the report from the configuration, a :class:`~analytics.cost_model.Workload`
(the input rate and key populations), the calibrated constants and the measured values: the
pipeline's own statistics, the ``sys`` rows of its newest batches (``results/sys/<query>/``, one
row per query and micro-batch, aggregated by :func:`measured_from_sys`), or, when there are none,
its status file (the last batch's per-kind seconds and state rows, :func:`measured_from_status`);
:func:`format_table` prints it. This module reads no file: the command hands the rows and the
status over (``cli/commands/explain.py``, ``netmon.recent_results``).

Feasibility is seed 000's (AN-15)/(AN-17) with seed 004's reserve: the total CPU and state must stay
within ``(1 - reserve)·budget`` of ``[resources]``. Admission (seed 004 §4.1) takes the queries in
configuration order and refuses one that would not fit beside those admitted before it, with a
one-line reason naming the estimate and the budget. When the whole does not fit, the report adds the
drop boxes seed 000's knapsack would place before the top-k and distinct queries
(:func:`analytics.cost_model.place_sampling`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from analytics.cost_model import CostConstants, CostModel, Estimate, Workload, place_sampling
from netmon.config import Config

__all__ = [
    "SPAN_S",
    "STALE_S",
    "admission",
    "estimated_parts",
    "explain",
    "format_table",
    "measured_from_status",
    "measured_from_sys",
    "part_fits",
    "query_plan",
]

#: A status (or a newest ``sys`` row) older than this (seconds) is shown as stale: the pipeline is
#: probably not running.
STALE_S = 120.0
#: The batch time the measured values are aggregated over by default: the newest batches of the
#: last minute.
SPAN_S = 60.0
#: The ``sys`` columns of the seconds a shared query's parts took (``pipeline.sys_stats``):
#: ``stage1`` the shared read and decode, then each batch kind's own step.
_PART_SECONDS = ("stage1", "traffic", "topk", "distinct", "features", "joins")
#: The ``sys`` columns of the state the batch kinds hold in their own files.
_STATE_ROWS = ("traffic_state_rows", "topk_state_rows", "distinct_state_rows")


def query_plan(cfg: Config, e: Estimate) -> str:
    """A one-line plan of the query behind estimate ``e`` (operators in data-flow order)."""
    if e.kind == "traffic":
        return f"count per (tumbling {cfg.pipeline.traffic_window_s:g} s, proto)"
    if e.kind == "topk":
        q = next(q for q in cfg.queries.topk if q.name == e.query)
        n_sub = round(q.window_s / q.sub_window_s)
        return f"count per ({q.sub_window_s:g} s, {q.key}) → Alg. 6 top-{q.k} over {n_sub} sub-windows"
    if e.kind == "distinct":
        d = next(q for q in cfg.queries.distinct if q.name == e.query)
        n_sub = round(d.window_s / d.sub_window_s)
        by = f" by {d.group_by}" if d.group_by.strip() else ""
        return f"HLL(lg_k {d.lg_k}) of {d.count}{by} per {d.sub_window_s:g} s → ∪ over {n_sub} sub-windows"
    if e.kind == "features":
        w = cfg.alerts.features_window_s
        return f"count per (tumbling {w:g} s, dst_ip, src_ip) + control records → features per src, dst"
    j = next(q for q in cfg.queries.join if q.name == e.query)
    if j.query == "handshake":
        return f"σ SYN ⋈[{j.window_s:g} s] σ SYN-ACK ({j.strategy})"
    return f"σ({j.left}) ⋈[±{j.window_s:g} s] σ({j.right}) on {j.key} ({j.strategy})"


def admission(estimates: list[Estimate], cpu_bound: float, memory_bound: float) -> dict[str, str]:
    """Admit in order while the running totals fit; a refused query gets a one-line reason.

    ``""`` means admitted. A refused query's estimate is not added to the totals, so a later,
    smaller query may still be admitted (seed 004 §4.1 admission control).
    """
    cpu = mem = 0.0
    out: dict[str, str] = {}
    for e in estimates:
        if cpu + e.cpu > cpu_bound * (1 + 1e-12):
            out[e.query] = (
                f"refused: estimated CPU {e.cpu:.3g} s/s beside {cpu:.3g} admitted exceeds the budget "
                f"{cpu_bound:.3g} s/s"
            )
        elif mem + e.memory_bytes > memory_bound * (1 + 1e-12):
            out[e.query] = (
                f"refused: estimated memory {_bytes(e.memory_bytes)} beside {_bytes(mem)} admitted exceeds "
                f"the budget {_bytes(memory_bound)}"
            )
        else:
            cpu, mem = cpu + e.cpu, mem + e.memory_bytes
            out[e.query] = ""
    return out


def estimated_parts(
    estimates: Sequence[Estimate], decode: Estimate, overheads: Mapping[str, float] | None = None
) -> dict[str, dict[str, float]]:
    """The estimates cut as the pipeline measures its work: ``stage1`` (the shared read and
    decode, and every query's own stage 1 in the tasks: ``Estimate.stage1_cpu``) and each kind's
    driver part (the rest of its queries' CPU), with the kind's state rows (stage 1 keeps none);
    ``overheads``: each part's CPU besides its queries' formulas (``CostModel.overheads``: the
    per-batch costs), added to it.

    The measured side (the ``sys`` rows' ``stage1_s``, ``topk_s``, ...) times exactly those
    parts, so the two are compared like for like.
    """
    parts: dict[str, dict[str, float]] = {"stage1": {"cpu": decode.cpu, "state_rows": 0.0}}
    for e in estimates:
        parts["stage1"]["cpu"] += e.stage1_cpu
        part = parts.setdefault(e.kind, {"cpu": 0.0, "state_rows": 0.0})
        part["cpu"] += e.cpu - e.stage1_cpu
        part["state_rows"] += e.state_rows
    for name, cpu in (overheads or {}).items():
        parts.setdefault(name, {"cpu": 0.0, "state_rows": 0.0})["cpu"] += cpu
    return parts


def _part_seconds(row: Mapping[str, Any], part: str) -> float | None:
    """A part's seconds in a ``sys`` row; ``other``: the batch's (``batch_ms``) outside every part."""
    if part != "other":
        value = row.get(f"{part}_s")
        return None if value is None else float(value)
    if row.get("batch_ms") is None or row.get("stage1_s") is None:
        return None
    return row["batch_ms"] / 1000 - sum(float(row.get(f"{p}_s") or 0.0) for p in _PART_SECONDS)


def part_fits(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per part of the shared query (``stage1``, ``topk``, ..., and ``other``: the batch's time
    outside every part), its seconds per batch fitted to
    ``fixed + per_packet·packets`` by least squares over ``rows`` (its ``sys`` rows): what a
    batch costs whatever it holds, and what each packet adds. The cost model's formulas are per
    tuple, as the seeds write them; the intercept is what they leave out. Parts with fewer than
    three batches, or whose batches' sizes differ by less than a factor of two, are left out: a
    paced run's batches are all of one size, and a line through them says nothing (measured:
    negative slopes).

    >>> rows = [{"packets": n, "stage1_s": 0.1 + 2e-6 * n} for n in (1000, 5000, 9000)]
    >>> fit = part_fits(rows)["stage1"]
    >>> round(fit["fixed_s"], 6), round(fit["per_packet_s"], 12), fit["batches"], round(fit["mean_s"], 6)
    (0.1, 2e-06, 3, 0.11)
    """
    import numpy as np

    out: dict[str, dict[str, float]] = {}
    for part in (*_PART_SECONDS, "other"):
        pairs = [
            (float(r["packets"]), seconds)
            for r in rows
            if r.get("packets") is not None and (seconds := _part_seconds(r, part)) is not None
        ]
        sizes = [n for n, _ in pairs]
        if len(pairs) < 3 or max(sizes) < 2 * max(1.0, min(sizes)):
            continue
        x, y = np.array(pairs).T
        per_packet, fixed = np.polyfit(x, y, 1)
        out[part] = {
            "fixed_s": float(fixed),
            "per_packet_s": float(per_packet),
            "batches": len(pairs),
            "mean_s": float(y.mean()),  # a part whose line falls: all of it is per batch
        }
    return out


def measured_from_status(
    status: Mapping[str, Any] | None, trigger_s: float, now: float | None = None
) -> dict[str, Any]:
    """Per kind, what the pipeline's status file says: CPU share of a trigger interval, state rows.

    The CPU share is the kind's own seconds in the last batch (``kind_ms``, or the batch's
    ``last_batch_ms`` for a kind with its own query) over the trigger interval: a lower bound of
    the CPU the kind uses while batches keep pace with the trigger.
    """
    if not status:
        return {"available": False, "kinds": {}}
    kinds: dict[str, dict[str, float]] = {}
    for kind, st in (status.get("queries") or {}).items():
        ms = st.get("kind_ms") or st.get("last_batch_ms") or 0
        kinds[kind] = {
            "cpu": ms / 1000.0 / trigger_s if trigger_s > 0 else math.nan,
            "batch_ms": float(st.get("last_batch_ms") or 0),
            "state_rows": float(st.get("state_rows") or 0),
            "batches": float(st.get("batches") or 0),
        }
    updated = float(status.get("updated") or 0)
    age = (time.time() if now is None else now) - updated
    return {"available": True, "age_s": age, "stale": age > STALE_S, "kinds": kinds}


def _seconds(t: Any) -> float:
    """A row's time (a ``datetime``, or seconds since the epoch) as seconds since the epoch."""
    return float(t.timestamp()) if hasattr(t, "timestamp") else float(t)


def _iso(t: Any) -> str | float:
    """A row's time as ISO 8601 text (JSON has no time type); a number as it is."""
    return str(t.isoformat()) if hasattr(t, "isoformat") else float(t)


def _sum(rows: Sequence[Mapping[str, Any]], column: str) -> float | None:
    """The sum of a column's known values; None when none is known."""
    values = [float(r[column]) for r in rows if r.get(column) is not None]
    return math.fsum(values) if values else None


def _last(rows: Sequence[Mapping[str, Any]], column: str) -> float | None:
    """The newest known value of a column (rows oldest first); None when none is known."""
    return next((float(r[column]) for r in reversed(rows) if r.get(column) is not None), None)


def _per_s(total: float | None, seconds: float) -> float | None:
    return None if total is None else total / seconds


def _query_measured(rows: Sequence[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """One query's aggregate over its rows (oldest first), :func:`measured_from_sys`."""
    gap = rows[-1]["batch_time"] - rows[0]["batch_time"]
    elapsed = float(gap.total_seconds()) if hasattr(gap, "total_seconds") else float(gap)
    trigger = _sum(rows, "trigger_s")
    batch_s = _sum(rows, "batch_ms")
    out: dict[str, Any] = {
        "batches": len(rows),
        "first_batch_id": int(rows[0]["batch_id"]),
        "last_batch_id": int(rows[-1]["batch_id"]),
        "last_batch_time": _iso(rows[-1]["batch_time"]),
        "seconds": elapsed,
        "age_s": now - _seconds(rows[-1]["batch_time"]),
        "basis": "span" if elapsed > 0 else "batch",
        "utilisation": batch_s / 1000 / trigger if batch_s is not None and trigger else None,
    }
    parts: dict[str, float | None]
    if elapsed > 0:
        # Batch i read what arrived in (t_{i-1}, t_i] and ran in [t_i, t_{i+1}): the messages of
        # the batches after the first arrived in (t_1, t_n], the seconds of those before the last
        # were spent in [t_1, t_n).
        arrived, ran = rows[1:], rows[:-1]
        out["input_messages_per_s"] = _per_s(_sum(arrived, "input_messages"), elapsed)
        out["packets_per_s"] = _per_s(_sum(arrived, "packets"), elapsed)
        out["cpu"] = _per_s(_sum(ran, "batch_ms"), elapsed * 1000)
        parts = {p: _per_s(_sum(ran, f"{p}_s"), elapsed) for p in _PART_SECONDS}
    else:
        # One batch (or all at one instant): its own rates and its share of the trigger interval.
        row = rows[-1]
        trigger_s = float(row.get("trigger_s") or 0)
        out["input_messages_per_s"] = _last(rows, "input_messages_per_s")
        out["packets_per_s"] = _last(rows, "packets_per_s")
        out["cpu"] = _last(rows, "batch_utilisation")
        parts = {
            p: (float(row[f"{p}_s"]) / trigger_s if row.get(f"{p}_s") is not None and trigger_s else None)
            for p in _PART_SECONDS
        }
    out["parts_cpu"] = {p: v for p, v in parts.items() if v is not None}
    for column in ("state_rows", "state_bytes", "join_state_rows", "lag_messages", "backlog_s", *_STATE_ROWS):
        out[column] = _last(rows, column)
    return out


def measured_from_sys(
    rows_by_query: Mapping[str, Sequence[Mapping[str, Any]]], span_s: float, now: float | None = None
) -> dict[str, Any]:
    """Per query and per kind, what the ``sys`` rows of the newest batches say.

    ``rows_by_query``: each pipeline query's ``sys`` rows (``pipeline.sys_stats``; ``packets``,
    the shared query of the batch kinds, and ``joins``) of the last ``span_s`` seconds of batch
    time up to its newest row. Per query, over its n rows ordered by batch time t_1 … t_n:

    - rates: the messages (``input_messages``, and ``packets``) of batches 2 … n, which arrived
      in (t_1, t_n], over t_n − t_1 — rows over time;
    - CPU s/s: the seconds (``batch_ms``) of batches 1 … n−1, which ran in [t_1, t_n) (each batch
      ends before the next starts), over t_n − t_1; a part of the shared query (``stage1_s``,
      ``traffic_s``, ...) likewise; ``utilisation``: all n batches' seconds over their trigger
      intervals (the mean share of the trigger a batch took);
    - state (``state_rows``, ``state_bytes``, ``join_state_rows``) and lag: the newest known value.

    With one batch (or t_1 = t_n) the rates are the batch's own (Spark's) and the CPU its share
    of the trigger interval (``basis`` ``"batch"`` instead of ``"span"``).

    Per kind (the estimates' kinds): a part of the shared query is its own kind (``stage1``, the
    shared read and decode, has no estimate), its state rows the rows the kind holds in its own
    files after the newest batch (``<kind>_state_rows``; the joins: ``join_state_rows``); a
    query without parts is one kind, its state the tuples held in the join windows
    (``join_state_rows``), else Spark's state rows.
    """
    now = time.time() if now is None else now
    queries: dict[str, dict[str, Any]] = {}
    for query, unordered in rows_by_query.items():
        rows = sorted(unordered, key=lambda r: (_seconds(r["batch_time"]), int(r["batch_id"])))
        if rows:
            queries[query] = _query_measured(rows, now)
    if not queries:
        return {"available": False, "source": "sys", "kinds": {}}
    # The shared query (with parts) first, as the estimates come: its parts, then the others.
    queries = dict(sorted(queries.items(), key=lambda item: (not item[1]["parts_cpu"], item[0])))
    kinds: dict[str, dict[str, Any]] = {}
    for query, q in queries.items():
        if q["parts_cpu"]:
            for part, cpu in q["parts_cpu"].items():
                # the joins' windows are counted on the shared query's rows (join_state_rows),
                # the other kinds' state in their own columns (an older netmon's rows: none)
                held = q["join_state_rows"] if part == "joins" else q.get(f"{part}_state_rows")
                kinds[part] = {"cpu": cpu, "state_rows": held, "query": query}
        else:
            rows_held = q["join_state_rows"] if q["join_state_rows"] is not None else q["state_rows"]
            kinds[query] = {
                "cpu": q["cpu"],
                "state_rows": rows_held,
                "state_bytes": q["state_bytes"],
                "query": query,
            }
    age = min(q["age_s"] for q in queries.values())
    return {
        "available": True,
        "source": "sys",
        "span_s": span_s,
        "age_s": age,
        "stale": age > STALE_S,
        "queries": queries,
        "kinds": kinds,
    }


def explain(
    cfg: Config,
    workload: Workload,
    constants: CostConstants,
    status: Mapping[str, Any] | None = None,
    *,
    sys_rows: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    span_s: float = SPAN_S,
    now: float | None = None,
) -> dict[str, Any]:
    """The whole report as plain data (the ``--format json`` form).

    The measured values come from ``sys_rows`` (:func:`measured_from_sys`, ``source`` ``"sys"``)
    when any query has rows, else from ``status`` (:func:`measured_from_status`, ``source``
    ``"status"``).
    """
    model = CostModel.for_config(cfg, constants)
    ests = model.estimates(cfg, workload)
    decode = model.decode(workload)
    # the formulas' work per second sets how long a batch runs, and so how often the per-batch
    # costs are paid (CostModel.batch_period)
    work = decode.cpu + sum(e.cpu for e in ests)
    period = model.batch_period(cfg.pipeline.kinds, workload, work)
    overheads = model.overheads(cfg.pipeline.kinds, workload, work)
    res = cfg.resources
    cpu, mem = CostModel.totals(ests)
    admitted = admission(ests, res.cpu_bound, res.memory_bound)
    report: dict[str, Any] = {
        "rate_pps": workload.rate_pps,
        "workload": {k: v for k, v in vars(workload).items()},
        "constants": constants.source,
        "calibrated": constants.source != "defaults",
        "budgets": {
            "cpu": res.cpu_budget,
            "memory_bytes": res.memory_bytes,
            "reserve": res.reserve,
            "cpu_bound": res.cpu_bound,
            "memory_bound": res.memory_bound,
        },
        "queries": [
            {**e.to_dict(), "plan": query_plan(cfg, e), "admission": admitted[e.query]} for e in ests
        ],
        "total": {"cpu": cpu, "memory_bytes": mem},
        "feasible": {"cpu": cpu <= res.cpu_bound, "memory": mem <= res.memory_bound},
        "decode": decode.to_dict(),
        "overheads": overheads,
        "batch_period_s": period if math.isfinite(period) else None,
        "parts": estimated_parts(ests, decode, overheads),
        "measured": _measured(cfg, status, sys_rows, span_s, now),
    }
    if cpu > res.cpu_bound:
        plan = place_sampling(model, cfg, workload, res.cpu_bound, keep_min=res.keep_min)
        report["sampling"] = {"keep": plan.keep, "cpu": plan.cpu, "feasible": plan.feasible}
    return report


def _measured(
    cfg: Config,
    status: Mapping[str, Any] | None,
    sys_rows: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    span_s: float,
    now: float | None,
) -> dict[str, Any]:
    """The ``sys`` rows' measured values, else the status file's (said so in ``source``)."""
    if sys_rows and any(sys_rows.values()):
        return measured_from_sys(sys_rows, span_s, now)
    measured = measured_from_status(status, cfg.pipeline.trigger_s, now)
    return {**measured, "source": "status" if measured["available"] else None}


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def format_table(report: Mapping[str, Any]) -> list[str]:
    """The report as aligned text lines: one row per query, then per-kind totals and the verdict."""
    b = report["budgets"]
    lines = [
        f"input {report['rate_pps']:g} packets/s; constants: {report['constants']}"
        + (
            ""
            if report["calibrated"]
            else " (built in: run `netmon bench calibrate` to measure this machine)"
        ),
        f"budgets: CPU {b['cpu']:g} s/s, memory {_bytes(b['memory_bytes'])}, reserve {b['reserve']:.0%} "
        f"→ bounds CPU {b['cpu_bound']:.3g} s/s, memory {_bytes(b['memory_bound'])}",
        "",
        f"{'kind':<9} {'query':<30} {'CPU s/s':>9} {'state rows':>11} {'memory':>11}  plan",
    ]
    for q in report["queries"]:
        lines.append(
            f"{q['kind']:<9} {q['query']:<30} {q['cpu']:>9.4f} {q['state_rows']:>11.0f} "
            f"{_bytes(q['memory_bytes']):>11}  {q['plan']}"
        )
        if q["admission"]:
            lines.append(f"{'':<9} {'':<30} {q['admission']}")
    t = report["total"]
    lines.append(f"{'total':<9} {'':<30} {t['cpu']:>9.4f} {'':>11} {_bytes(t['memory_bytes']):>11}")
    f = report["feasible"]
    verdict = "FEASIBLE" if f["cpu"] and f["memory"] else "INFEASIBLE"
    why = [n for n, ok in (("CPU", f["cpu"]), ("memory", f["memory"])) if not ok]
    lines.append(f"plan: {verdict}" + (f" ({' and '.join(why)} over the bound)" if why else ""))
    lines.append(
        f"shared read and decode (not a query; before every kind's stage 1): "
        f"{report['decode']['cpu']:.4f} CPU s/s"
    )
    if "sampling" in report:
        s = report["sampling"]
        keeps = ", ".join(f"{k} {v:.2f}" for k, v in s["keep"].items())
        state = "fits" if s["feasible"] else "still over the bound at keep_min"
        lines.append(f"drop boxes (seed 000 knapsack): keep {keeps} → CPU {s['cpu']:.3g} s/s, {state}")
    m = report["measured"]
    lines.append("")
    if not m["available"]:
        lines.append(
            "measured: no results/sys rows and no pipeline status"
            " (start `netmon pipeline` to see measured values beside)"
        )
        return lines
    stale = " (stale: the pipeline is probably not running)" if m["stale"] else ""
    if m.get("source") == "sys":
        lines.append(
            f"measured (source: results/sys, the batches of the last {m['span_s']:g} s;"
            f" newest {m['age_s']:.0f} s old){stale}:"
        )
        lines.append(
            f"{'query':<9} {'batches':>7} {'span s':>7} {'messages/s':>11} {'packets/s':>11} "
            f"{'CPU s/s':>9} {'util.':>7} {'state rows':>11} {'state bytes':>11} {'backlog s':>9}"
        )
        for name, q in m["queries"].items():
            rows_held = q["join_state_rows"] if q["join_state_rows"] is not None else q["state_rows"]
            lines.append(
                f"{name:<9} {q['batches']:>7} {q['seconds']:>7.1f} "
                f"{_num(q['input_messages_per_s'], '.2f'):>11} "
                f"{_num(q['packets_per_s'], '.1f'):>11} {_num(q['cpu'], '.4f'):>9} "
                f"{_num(q['utilisation'], '.3f'):>7} {_num(rows_held, '.0f'):>11} "
                f"{_num(q['state_bytes'], '.0f'):>11} {_num(q['backlog_s'], '.1f'):>9}"
            )
        lines.append("")
    else:
        lines.append(
            f"measured (source: pipeline status file, no results/sys rows; {m['age_s']:.0f} s old){stale}:"
        )
    # Like for like: stage 1 (the tasks' shared pass) and each kind's driver part, as measured.
    lines.append(
        f"{'part':<9} {'estimated CPU':>13} {'measured CPU':>13} {'ratio':>6} {'est. rows':>11} "
        f"{'state rows':>11}"
    )
    parts = report["parts"]
    for kind, got in m["kinds"].items():
        est = parts.get(kind)
        ratio = f"{got['cpu'] / est['cpu']:.2f}" if est and est["cpu"] > 0 and got["cpu"] is not None else "-"
        lines.append(
            f"{kind:<9} {_num(est and est['cpu'], '.4f'):>13} {_num(got['cpu'], '.4f'):>13} {ratio:>6} "
            f"{_num(est and est['state_rows'], '.0f'):>11} {_num(got['state_rows'], '.0f'):>11}"
        )
    return lines


def _num(value: float | None, spec: str) -> str:
    """A number in ``spec``, ``-`` when unknown."""
    return "-" if value is None else format(value, spec)
