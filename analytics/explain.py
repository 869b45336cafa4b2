"""``netmon explain``'s report: per query its plan, estimates, feasibility, and the measured values.

:func:`explain` builds the report from the configuration, a :class:`~analytics.cost_model.Workload`
(the input rate and key populations), the calibrated constants and, when a pipeline runs, its
status file (per-kind batch seconds and state rows, written by the pipeline every batch);
:func:`format_table` prints it. Feasibility is seed 000's (AN-15)/(AN-17) with seed 004's reserve:
the total CPU and state must stay within ``(1 - reserve)·budget`` of ``[resources]``. Admission
(seed 004 §4.1) takes the queries in configuration order and refuses one that would not fit
beside those admitted before it, with a one-line reason naming the estimate and the budget. When
the whole does not fit, the report adds the drop boxes seed 000's knapsack would place before the
top-k and distinct queries (:func:`analytics.cost_model.place_sampling`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from analytics.cost_model import CostConstants, CostModel, Estimate, Workload, place_sampling
from netmon.config import Config

__all__ = ["admission", "explain", "format_table", "measured_from_status", "query_plan"]

#: A status older than this (seconds) is shown as stale: the pipeline is probably not running.
STALE_S = 120.0


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


def explain(
    cfg: Config, workload: Workload, constants: CostConstants, status: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The whole report as plain data (the ``--format json`` form)."""
    model = CostModel(constants, watermark_s=cfg.pipeline.watermark_s)
    ests = model.estimates(cfg, workload)
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
        "measured": measured_from_status(status, cfg.pipeline.trigger_s),
    }
    if cpu > res.cpu_bound:
        plan = place_sampling(model, cfg, workload, res.cpu_bound, keep_min=res.keep_min)
        report["sampling"] = {"keep": plan.keep, "cpu": plan.cpu, "feasible": plan.feasible}
    return report


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
    if "sampling" in report:
        s = report["sampling"]
        keeps = ", ".join(f"{k} {v:.2f}" for k, v in s["keep"].items())
        state = "fits" if s["feasible"] else "still over the bound at keep_min"
        lines.append(f"drop boxes (seed 000 knapsack): keep {keeps} → CPU {s['cpu']:.3g} s/s, {state}")
    m = report["measured"]
    lines.append("")
    if not m["available"]:
        lines.append("measured: no pipeline status (start `netmon pipeline` to see measured values beside)")
        return lines
    stale = " (stale: the pipeline is probably not running)" if m["stale"] else ""
    lines.append(f"measured (pipeline status, {m['age_s']:.0f} s old){stale}:")
    lines.append(
        f"{'kind':<9} {'estimated CPU':>13} {'measured CPU':>13} {'est. rows':>11} {'state rows':>11}"
    )
    by_kind: dict[str, list[float]] = {}
    for q in report["queries"]:
        acc = by_kind.setdefault(q["kind"], [0.0, 0.0])
        acc[0] += q["cpu"]
        acc[1] += q["state_rows"]
    for kind, got in m["kinds"].items():
        est = by_kind.get(kind)
        est_cpu = f"{est[0]:.4f}" if est else "-"
        est_rows = f"{est[1]:.0f}" if est else "-"
        lines.append(f"{kind:<9} {est_cpu:>13} {got['cpu']:>13.4f} {est_rows:>11} {got['state_rows']:>11.0f}")
    return lines
