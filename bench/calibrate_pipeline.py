"""``netmon bench calibrate --pipeline``: the cost model's per-batch and pipeline terms, measured
in the running pipeline (seed 004 §5: the constants come from measurements on the machine).

``bench.calibrate`` times netmon's operations one at a time, as the seeds' formulas count them
per tuple. The running pipeline also pays, per micro-batch, whatever the batch holds (a Spark
job's scheduling and its tasks' start, each kind's commit and state version), and per record work
no formula names (the JVM's Kafka read, Arrow conversions, the join's staging on the driver).
Compared with a running pipeline those estimates were off by 0.1× to thousands of times
(docs/performance.md, "The cost model beside the measurements").

This measures both on the real thing: a temporary broker, a generated ``baseline`` capture
replayed once, then the default kinds drained (``availableNow``) several times with a different
``[pipeline] max_batch_messages`` each, so the batches hold a few sizes of input. Each part of
the shared query's ``sys`` rows (``stage1_s``, ``topk_s``, ...) is fitted to
``fixed + per_packet·packets`` by least squares (``analytics.explain.part_fits``) over every
batch but each drain's first (the first batch plans the query). Then per part:

- ``<part>_batch_s`` = the fitted ``fixed`` (clamped at 0): what a batch costs whatever it holds;
- ``<part>_factor`` = the fitted ``per_packet`` over the formulas' own estimate per packet at the
  capture's workload (the micro-benchmark constants, factors 1): what the formulas miss per
  record, as a ratio, so the formulas still carry how a cost moves with keys, windows and k;
- ``features_row_s`` = the fitted ``per_packet`` (the alert features have no formula).

**A paced ladder** (``paced``, ``netmon bench calibrate --pipeline --paced 10000,25000,40000``):
instead of drains, the pipeline runs live at each rate in turn (the producer its own process,
paced, as ``netmon bench pipeline`` runs it: :func:`bench.pipeline.paced_run`) and the fit is over
the steady batches of every rate (each run's first :data:`PACED_WARM` batches and last
:data:`PACED_TAIL` left out), so the batches hold what a trigger of each rate brings. A backlog
read from Kafka in fixed batches is not a live read of what arrived: stage 1 cost 8.2 µs a
packet in drains and 4.5 µs in paced runs (docs/performance.md), so the model's ±25 % is judged
against constants from the condition it estimates.

A departure from the seeds, which calibrate each operator's per-tuple constants alone: the
overheads around the operators here are larger than the operators (docs/overload.md).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analytics.cost_model import DEFAULT_CONSTANTS, CostConstants, CostModel, fill_seconds, workload_of
from analytics.explain import estimated_parts, part_fits
from netmon.config import Config

__all__ = [
    "PACED_TAIL",
    "PACED_WARM",
    "PARTS",
    "derive",
    "measure_batches",
    "measure_paced",
    "pipeline_constants",
    "refit",
    "steady_rows",
]

#: The parts of the shared query's ``sys`` rows, as ``analytics.explain`` names them, and ``other``
#: (a batch's time outside them: ``other_batch_s``, ``other_row_s``; no formula).
PARTS = ("stage1", "traffic", "topk", "distinct", "features", "joins", "other")
#: Messages (of 1,000 records) per batch in each drain: batches of a few sizes for the fit.
SIZES = (5, 20, 80)
#: A paced run's first batches (the query's planning, the JIT, the workers' start) and its last
#: (the drain after the producer stopped: batches of what was left, not of a trigger's input),
#: left out of the fit.
PACED_WARM, PACED_TAIL = 3, 2


def derive(
    fits: dict[str, dict[str, float]], formulas: dict[str, dict[str, float]], rate_pps: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """The constants from the fits: per part ``<part>_batch_s`` (the fit's ``fixed_s``, at least
    0) and ``<part>_factor`` (its ``per_packet_s`` over the formulas' CPU per packet at
    ``rate_pps``, ``formulas[part]["cpu"] / rate_pps``); ``features_row_s`` and ``other_row_s``
    their ``per_packet_s`` (no formula).
    A part without a fit keeps the defaults; one whose slope is not positive costs its mean seconds
    per batch (``mean_s``) as fixed, its factor left at 1 (both said in the notes).

    >>> fits = {"stage1": {"fixed_s": 0.3, "per_packet_s": 4e-6},
    ...         "topk": {"fixed_s": -0.01, "per_packet_s": 1e-7}}
    >>> found, notes = derive(fits, {"stage1": {"cpu": 0.1}, "topk": {"cpu": 0.01}}, 50_000)
    >>> found
    {'stage1_batch_s': 0.3, 'stage1_factor': 2.0, 'topk_batch_s': 0.0, 'topk_factor': 0.5}
    >>> notes["topk"]
    'fixed -0.0100 s per batch: taken as 0'
    """
    found: dict[str, float] = {}
    notes: dict[str, Any] = {}
    for part in PARTS:
        fit = fits.get(part)
        if fit is None:
            notes[part] = "no fit (fewer than three batches, or sizes too alike): defaults kept"
            continue
        fixed, slope = fit["fixed_s"], fit["per_packet_s"]
        if slope <= 0:
            # no cost per packet measurable over the batches' noise: the part costs what it costs
            # per batch (its mean), its formula (if any) as it is
            found[f"{part}_batch_s"] = max(0.0, fit.get("mean_s", 0.0))
            notes[part] = f"slope {slope:.3g} s a packet is not positive: the mean per batch taken as fixed"
            continue
        found[f"{part}_batch_s"] = max(0.0, fixed)
        if fixed < 0:
            notes[part] = f"fixed {fixed:.4f} s per batch: taken as 0"
        if part == "other":
            found["other_row_s"] = slope
            continue
        per_packet = formulas.get(part, {}).get("cpu", 0.0) / rate_pps if rate_pps > 0 else 0.0
        if per_packet > 0:
            found[f"{part}_factor"] = slope / per_packet
            if part == "features":
                found["features_row_s"] = 0.0  # an older calibration's per-packet term: replaced
        else:
            notes[part] = f"{notes.get(part, '')}; no formula cost: factor 1".lstrip("; ")
    return found, notes


def measure_batches(
    cfg: Config,
    spark: Any,
    capture: Path,
    sizes: tuple[int, ...] = SIZES,
    say: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]]:
    """The shared query's ``sys`` rows of one ``availableNow`` drain of ``capture`` per size in
    ``sizes`` (``max_batch_messages``), each drain's first batch left out; a warm-up drain first."""
    from bench.pipeline import replay_into_topic
    from netmon.results import SHARED_QUERY, read_results, results_dir
    from pipeline.job import start_pipeline

    summary = replay_into_topic(cfg, capture)
    rows: list[dict[str, Any]] = []
    for label, size in [("warm-up", max(sizes)), *((f"{m} messages a batch", m) for m in sizes)]:
        run = cfg.replace(pipeline={"max_batch_messages": size})
        shutil.rmtree(run.paths.data_dir, ignore_errors=True)
        say(f"drain ({label}): {summary.acknowledged:,} packets ...")
        started = time.perf_counter()
        pipeline = start_pipeline(spark, run, available_now=True)
        pipeline.await_termination(3600)
        failed = pipeline.failed()
        pipeline.stop()
        if failed:
            raise RuntimeError(f"the pipeline failed: {failed}")
        if label == "warm-up":
            continue
        table = read_results(results_dir(run, "sys"))
        mine = sorted(
            (r for r in (table.to_pylist() if table is not None else []) if r.get("query") == SHARED_QUERY),
            key=lambda r: r["batch_id"],
        )
        say(f"  {len(mine)} batches in {time.perf_counter() - started:.1f} s")
        rows += mine[1:]  # the first batch plans the query and starts the Python workers
    return rows


def steady_rows(rows: list[dict[str, Any]], fill_s: float) -> list[dict[str, Any]]:
    """A paced run's steady batches (``rows`` in batch order): from the first :data:`PACED_WARM`
    on, once ``fill_s`` seconds passed since its first batch, less the last :data:`PACED_TAIL`.

    >>> import datetime as dt
    >>> t0 = dt.datetime(2026, 1, 1)
    >>> rows = [{"batch_id": i, "batch_time": t0 + dt.timedelta(seconds=i)} for i in range(20)]
    >>> [r["batch_id"] for r in steady_rows(rows, 10.0)]
    [10, 11, 12, 13, 14, 15, 16, 17]
    """
    if not rows:
        return []
    start = rows[0]["batch_time"]
    body = rows[PACED_WARM : len(rows) - PACED_TAIL]
    return [r for r in body if (r["batch_time"] - start).total_seconds() >= fill_s]


def measure_paced(
    cfg: Config,
    spark: Any,
    rates: tuple[int, ...],
    seconds: float,
    work: Path,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[list[dict[str, Any]], dict[int, Path]]:
    """The shared query's steady ``sys`` rows of a paced run of a generated ``baseline`` capture
    at each of ``rates`` for ``seconds`` (module docstring), and each rate's capture."""
    from bench.pipeline import paced_run
    from netmon.results import SHARED_QUERY, read_results, results_dir

    rows: list[dict[str, Any]] = []
    captures: dict[int, Path] = {}
    for rate in rates:
        run = cfg.replace(paths={"data_dir": work / f"data-{rate}"})
        figures = paced_run(spark, run, "baseline", rate, seconds, work, say)
        captures[rate] = figures["capture"]
        table = read_results(results_dir(run, "sys"))
        mine = sorted(
            (r for r in (table.to_pylist() if table is not None else []) if r.get("query") == SHARED_QUERY),
            key=lambda r: r["batch_id"],
        )
        steady = steady_rows(mine, fill_seconds(run))
        say(
            f"  {len(steady)} steady batches of {len(mine)},"
            f" the producer at {figures['produced_pps']:,} packets/s"
        )
        rows += steady
    return rows, captures


def pipeline_constants(
    cfg: Config,
    base: CostConstants,
    *,
    packets: int = 160_000,
    duration_s: float = 4.0,
    sizes: tuple[int, ...] = SIZES,
    paced: tuple[int, ...] = (),
    paced_seconds: float = 100.0,
    spark: Any = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Measure the per-batch and pipeline terms (module docstring) on a temporary broker and
    ``spark`` (by default a session of ``cfg``'s, built and stopped): drains of ``packets`` in
    batches of ``sizes``, or, with ``paced`` rates, a paced run at each for ``paced_seconds``.
    Returns ``constants`` (to merge into ``base``), ``fits``, ``notes``, ``rate_pps``, ``batches``,
    the formulas' CPU per packet, ``formulas_per_packet_s``, and ``method`` (``drains`` or
    ``paced``)."""
    import pyarrow as pa

    from bench.ingest import temporary_broker
    from ingest import read_records
    from ingest.generate import generate
    from pipeline.session import build_session

    least = fill_seconds(cfg) + 5 * (PACED_WARM + PACED_TAIL)
    if paced and (min(paced) < 1000 or paced_seconds < least):
        raise ValueError(
            f"paced: rates of at least 1,000 packets/s for at least {least:g} s each (the longest"
            " window and the watermark, then steady batches)"
        )
    if not paced and packets < 1000 * max(sizes) * 2:
        raise ValueError(f"packets: at least {2000 * max(sizes):,} for batches of {max(sizes)} messages")
    work = Path(tempfile.mkdtemp(prefix="netmon-calibrate-pipeline-"))
    try:
        with temporary_broker(work / "broker") as bootstrap:
            run = cfg.replace(
                paths={"state_dir": work / "state", "data_dir": work / "data"},
                kafka={"bootstrap_servers": bootstrap, "packets_topic": "calibrate.packets"},
                pipeline={"publish_results": False},
                resources={"manage": False},
            )
            session = spark or build_session(run, "netmon-calibrate-pipeline", ui=False)
            try:
                if paced:
                    rows, captures = measure_paced(run, session, tuple(paced), paced_seconds, work, say)
                    # the formulas' workload: the middle rate's capture (each rate's own shape)
                    rate = float(sorted(paced)[len(paced) // 2])
                    capture = captures[int(rate)]
                else:
                    capture = work / "baseline.pcap"
                    say(f"generating {packets:,} baseline packets over {duration_s:g} s ...")
                    generate(capture, scenario="baseline", packets=packets, duration_s=duration_s, seed=7)
                    rows = measure_batches(run, session, capture, sizes, say)
                    rate = packets / duration_s  # the capture's event-time rate: what a sub-window holds
            finally:
                if spark is None:
                    session.stop()
        records = pa.Table.from_batches(list(read_records(capture)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        **refit(cfg, base, part_fits(rows), records, rate),
        "batches": len(rows),
        "method": "paced" if paced else "drains",
    }


def refit(
    cfg: Config, base: CostConstants, fits: dict[str, dict[str, float]], records: Any, rate: float
) -> dict[str, Any]:
    """The pipeline terms from ``fits`` (:func:`analytics.explain.part_fits` of a calibration's
    batches) against the formulas of ``base``'s per-operation constants at the workload of
    ``records`` replayed at ``rate``: ``constants`` (:func:`derive`), ``fits``, ``notes``,
    ``rate_pps`` and ``formulas_per_packet_s``. A change of the formulas can be fitted again
    from a calibration's saved fits and capture, without measuring again."""
    from bench.pipeline import model_fields, model_keys

    # the formulas alone: the micro-benchmark constants, without any pipeline term
    terms = [f for f in dataclasses.fields(CostConstants) if f.name.endswith(("_batch_s", "_factor"))]
    defaults: dict[str, Any] = {f.name: getattr(DEFAULT_CONSTANTS, f.name) for f in terms}
    plain = dataclasses.replace(base, **defaults, features_row_s=0.0)
    model = CostModel.for_config(cfg, plain)
    w = workload_of(records, rate, model_fields(cfg), model_keys(cfg))
    formulas = estimated_parts(model.estimates(cfg, w), model.decode(w))
    found, notes = derive(fits, formulas, rate)
    return {
        "constants": found,
        "fits": fits,
        "notes": notes,
        "rate_pps": rate,
        "formulas_per_packet_s": {p: v["cpu"] / rate for p, v in formulas.items()},
    }
