"""``netmon bench calibrate``: measure the cost model's constants on this machine (seed 004 §5).

Each constant of :class:`analytics.cost_model.CostConstants` is the slope of CPU time against an
event count, fitted by least squares over a few sizes of the same operation (so fixed overheads
fall into the intercept), on synthetic uniform traffic, using netmon's own code for each event:

- ``decode_row_s``: the shared read and decode of a micro-batch's Kafka messages
  (:func:`pipeline.partials.decode_messages` over messages of 1,000 records, as ``netmon replay``
  writes them, of a generated ``baseline`` capture);
- ``count_row_s`` / ``count_group_s``: stage 1 of a counting query — the record's key text
  (:func:`analytics.keys.key_text`) and a pyarrow ``group_by`` per (sub-window, key), as the
  pipeline's one-pass stage 1 does — then the driver's merge of the partial rows; rows are
  varied with few keys (``count_row_s``), then keys at a fixed number of rows (``count_group_s``);
- ``topk_key_s``: one closed sub-window of K keys into Golab's Alg. 6 (``SubWindowTopK``);
- ``sketch_item_s`` / ``sketch_union_s``: ``SubWindowDistinct`` updates, and its report's union
  of every group's sub-window sketches;
- ``join_update_s`` / ``join_probe_s``: ``SymmetricHashJoin``'s own measured insert+expire and
  probe+produce times (seed 003's C_u and C_p, ``BatchStats``);
- ``join_stage_s`` / ``join_row_s``: the joins kind's driver part around them
  (``pipeline.joins_batch.SharedJoins.apply``) per staged tuple and per result row, over a
  ``baseline`` and a ``syn-flood`` capture (:func:`_join_driver_constants`);
- bytes: the serialized size of each state entry (pyarrow rows, Alg. 6 state, HLL_8 sketches,
  join state) divided by the entries it holds.

Every slope is printed beside its built-in default (the ratio) and, as the baseline measured in
the same run, the model is checked on a mixed batch it was not fitted to: every default counting
query's stage 1 over one batch, predicted from the constants vs timed (the ``check`` ratio).
The constants go to ``<state_dir>/calibration/cost-model.json`` (never into the repository).
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from analytics.cost_model import DEFAULT_CONSTANTS, CostConstants, save_constants
from analytics.distinct import SubWindowDistinct
from analytics.join import SymmetricHashJoin
from analytics.keys import key_text, weights
from analytics.topk import SubWindowTopK
from analytics.topk_merge import QueryParams, TopKMerge
from netmon.config import Config

__all__ = ["calibrate", "fit_driver_terms", "format_report", "stage1"]

_S = 10**9


def _cpu(fn: Callable[[], Any], repeats: int) -> float:
    """The median CPU seconds (this process, all threads) of ``fn()`` over ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope of ``ys`` on ``xs`` and the fit's R² (1: a straight line)."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0
    return max(float(slope), 0.0), r2


def _records(n: int, keys: int, seed: int = 0, seconds: float = 1.0) -> pa.Table:
    """``n`` synthetic records over ``seconds`` of event time; src/dst IPs uniform over ``keys``."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, keys, n), rng.integers(0, keys, n)
    ip = np.array([f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(keys)], object)
    return pa.table(
        {
            "ts": pa.array(np.sort(rng.integers(0, int(seconds * 1e6), n)), pa.int64()),
            "src_ip": pa.array(ip[src], pa.string()),
            "dst_ip": pa.array(ip[dst], pa.string()),
            "proto": pa.array(rng.choice([6, 17, 1], n), pa.int16()),
            "dst_port": pa.array(rng.integers(0, min(keys, 65536), n), pa.int32()),
            "wire_len": pa.array(rng.integers(60, 1500, n), pa.int64()),
        }
    )


def stage1(
    table: pa.Table, fields: Sequence[str], weight: str = "packets", sub_us: int = 1_000_000
) -> pa.Table:
    """One counting query's stage 1 and merge: rows per (sub-window, key) with records and weight.

    The same operations as the pipeline's stage 1 (``pipeline/partials.py``: key text, a pyarrow
    ``group_by`` per (sub-window, key)) followed by the driver's sum of the partial rows.
    """
    keys = key_text(table, fields)
    sw = pa.array(np.floor_divide(table.column("ts").to_numpy(), sub_us))
    part = pa.table({"sw": sw, "key": keys, "w": weights(table, weight)})
    grouped = part.group_by(["sw", "key"], use_threads=False).aggregate([([], "count_all"), ("w", "sum")])
    return grouped.group_by(["sw", "key"], use_threads=False).aggregate(
        [("count_all", "sum"), ("w_sum", "sum")]
    )


def _stage1_all(table: pa.Table, specs: Sequence[tuple[str, ...]]) -> list[pa.Table]:
    return [stage1(table, f) for f in specs]


def _specs(cfg: Config) -> list[tuple[str, ...]]:
    """The key fields of every default counting query: traffic (``proto``) and each top-k query."""
    return [("proto",)] + [tuple(q.key.split(",")) for q in cfg.queries.topk]


def _count_constants(cfg: Config, scale: float, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    # Both constants at once, on the default queries' mix of keys (one string, two strings, two
    # integers): CPU time = a + count_row_s·(records·queries) + count_group_s·groups, least squares
    # over a grid of records × keys.
    specs = _specs(cfg)
    design, times = [], []
    many: list[pa.Table] = []
    for n in (int(scale * 50_000), int(scale * 200_000)):
        for keys in (16, int(scale * 5_000), int(scale * 40_000)):
            table = _records(n, keys, seed=n + keys)
            groups = sum(stage1(table, f).num_rows for f in specs)
            design.append((1.0, float(n * len(specs)), float(groups)))
            times.append(_cpu(functools.partial(_stage1_all, table, specs), repeats))
            many.append(table)
    x, y = np.asarray(design), np.asarray(times)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    r2 = 1.0 - float((resid**2).sum()) / float(((y - y.mean()) ** 2).sum())
    row_s, group_s = max(float(coef[1]), 0.0), max(float(coef[2]), 0.0)
    r2_rows = r2_groups = r2
    merged = stage1(many[-1], ("src_ip",))
    say(f"stage 1: {row_s * 1e9:.0f} ns/record, {group_s * 1e9:.0f} ns/group")
    return {
        "count_row_s": row_s,
        "count_group_s": group_s,
        "row_bytes": merged.nbytes / max(1, merged.num_rows),
        "_fit": {"count_row_s": r2_rows, "count_group_s": r2_groups},
    }


def _decode_constants(scale: float, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    """``decode_row_s``: CPU per record of ``decode_messages``, the slope over three batch sizes."""
    import tempfile
    from pathlib import Path

    from ingest import read_records
    from ingest.generate import generate
    from ingest.wire import encode_messages
    from pipeline.partials import decode_messages

    sizes = [int(scale * n) for n in (20_000, 80_000, 200_000)]
    with tempfile.TemporaryDirectory(prefix="netmon-calibrate-") as tmp:
        capture = Path(tmp) / "decode.pcap"
        generate(capture, scenario="baseline", packets=max(sizes), duration_s=60.0)
        values = [v for b in read_records(capture) for v, _ in encode_messages(b, records_per_message=1000)]

    def batch(records: int) -> pa.Table:
        mine = values[: max(1, records // 1000)]
        n = len(mine)
        return pa.table(
            {
                "value": pa.array(mine, pa.binary()),
                "known": pa.array([True] * n),
                "control": pa.array([None] * n, pa.string()),
                "horizon_ns": pa.array([None] * n, pa.int64()),
            }
        )

    batches = [batch(n) for n in sizes]
    times = [_cpu(functools.partial(decode_messages, b, delay_ns=5 * _S), repeats) for b in batches]
    row_s, r2 = _slope([float(n) for n in sizes], times)
    say(f"decode: {row_s * 1e9:.0f} ns/record")
    return {"decode_row_s": row_s, "_fit": {"decode_row_s": r2}}


def _topk_constants(scale: float, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    sizes = [int(scale * k) for k in (2_000, 10_000, 40_000)]
    rng = np.random.default_rng(1)
    subs = [
        {f"10.0.{i >> 8}.{i & 255}-{i}": int(c) for i, c in enumerate(rng.integers(1, 50, k))} for k in sizes
    ]

    def run(counts: dict[str, int]) -> None:
        algo = SubWindowTopK(10 * _S, _S, 10, time_based=True)
        for index in range(12):
            algo.add_subwindow(counts, index)

    times = [_cpu(functools.partial(run, c), repeats) for c in subs]
    key_s, r2 = _slope([12 * k for k in sizes], times)
    merge = TopKMerge(QueryParams(N=10 * _S, b=_S, k=10))
    for index in range(12):
        merge.add_subwindow(subs[0], index, sum(subs[0].values()))
    entry_bytes = len(merge.to_bytes()) / max(1, merge.algorithm.space)
    say(f"top-k: {key_s * 1e9:.0f} ns/key, {entry_bytes:.0f} B/entry")
    return {"topk_key_s": key_s, "topk_entry_bytes": entry_bytes, "_fit": {"topk_key_s": r2}}


def _distinct_constants(scale: float, repeats: int, say: Callable[[str], None]) -> dict[str, Any]:
    sizes = [int(scale * n) for n in (5_000, 10_000, 20_000)]
    rng = np.random.default_rng(2)
    feeds = [
        [(f"i{a}", f"g{b}") for a, b in zip(rng.integers(0, 10**6, n), rng.integers(0, 50, n), strict=True)]
        for n in sizes
    ]

    def feed(pairs: list[tuple[str, str]]) -> SubWindowDistinct:
        d = SubWindowDistinct(N=4, b=1, lg_k=10)
        for item, group in pairs:
            d.update(item, group)
        return d

    t_items = [_cpu(functools.partial(feed, p), repeats) for p in feeds]
    item_s, r2_items = _slope(sizes, t_items)
    # unions: a report unites every group's N/b sub-window sketches
    n_subs = [4, 8, 16]
    states = []
    for n_sub in n_subs:
        d = SubWindowDistinct(N=n_sub, b=1, lg_k=12)  # the default queries' lg_k
        for _ in range(n_sub):
            for item, group in feeds[0][:2000]:
                d.update(item, group)
            d.slide()
        states.append(d)
    # a report caches its answers: time each repeat on a fresh copy of the state
    copies = [[SubWindowDistinct.from_bytes(d.to_bytes()) for _ in range(repeats)] for d in states]
    t_unions = [statistics.median(_cpu(c.report, 1) for c in group) for group in copies]
    union_s, r2_unions = _slope([50 * n for n in n_subs], t_unions)
    # bytes: an HLL_8 sketch's header, a sparse coupon, a dense register
    empty = len(SubWindowDistinct(N=1, b=1, lg_k=12).update("x", "g").synopsis("g"))
    sparse = SubWindowDistinct(N=1, b=1, lg_k=12)
    for i in range(100):
        sparse.update(f"i{i}", "g")
    dense = SubWindowDistinct(N=1, b=1, lg_k=10)
    for i in range(20_000):
        dense.update(f"i{i}", "g")
    header = float(empty)
    coupon = max(0.0, (len(sparse.synopsis("g")) - header) / 99)
    register = max(0.0, (len(dense.synopsis("g")) - header) / 2**10)
    say(f"distinct: {item_s * 1e9:.0f} ns/item, {union_s * 1e9:.0f} ns/union")
    return {
        "sketch_item_s": item_s,
        "sketch_union_s": union_s,
        "hll_header_bytes": header,
        "hll_coupon_bytes": coupon,
        "hll_register_bytes": register,
        "_fit": {"sketch_item_s": r2_items, "sketch_union_s": r2_unions},
    }


def _join_constants(scale: float, say: Callable[[str], None]) -> dict[str, Any]:
    rng = np.random.default_rng(4)
    rate, seconds, keys = int(scale * 4000), 20, 200
    join = SymmetricHashJoin(2.0, 2.0)
    update = probe = 0.0
    inserted = results = 0
    for second in range(seconds):
        lt = np.sort(rng.uniform(second, second + 1, rate)) * _S
        rt = np.sort(rng.uniform(second, second + 1, rate)) * _S
        join.update(
            lt.astype(np.int64),
            rng.integers(0, keys, rate).astype(str),
            rt.astype(np.int64),
            rng.integers(0, keys, rate).astype(str),
        )
        st = join.last_stats
        if st is not None and second >= 3:
            update += st.update_s
            probe += st.probe_s
            inserted += st.inserted_left + st.inserted_right
            results += st.results
    tuple_bytes = len(join.to_bytes()) / max(1, sum(join.state_size()))
    cu, cp = update / max(1, inserted), probe / max(1, results)
    say(f"join: C_u {cu * 1e9:.0f} ns/tuple, C_p {cp * 1e9:.0f} ns/result")
    return {"join_update_s": cu, "join_probe_s": cp, "join_tuple_bytes": tuple_bytes}


def fit_driver_terms(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """``(a, b)`` of ``seconds ≈ fixed + a·x + b·y`` by least squares over ``(x, y, seconds)``
    samples, each at least 0 (a term below the noise costs nothing).

    >>> sizes = [(1e3, 0), (2e3, 1e3), (0, 3e3), (4e3, 1e2)]
    >>> fit_driver_terms([(x, y, 0.01 + 2e-6 * x + 5e-6 * y) for x, y in sizes])
    (2e-06, 5e-06)
    """
    x = np.array([[1.0, a, b] for a, b, _ in samples])
    y = np.array([c for _, _, c in samples])
    (_, first, second), *_ = np.linalg.lstsq(x, y, rcond=None)
    return max(0.0, round(float(first), 12)), max(0.0, round(float(second), 12))


def _join_driver_constants(cfg: Config, scale: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The joins kind's driver part per staged tuple and per result row.

    ``SharedJoins.apply`` (``pipeline.joins_batch``) over one-second micro-batches of two generated
    captures, a ``baseline`` (most SYNs answered: ``match`` rows) and a ``syn-flood`` (most not:
    ``unmatched`` rows), its stage 1 (``partials_of``, the tasks' part) made outside the timer.
    Each batch's CPU is fitted to ``fixed + join_stage_s·staged + join_row_s·rows`` by least
    squares: what staging a tuple (Arrow to the join's arrays, its payload, the state files) and
    writing a row cost around the operator's own C_u and C_p, which a flood's unanswered SYNs
    multiply (docs/overload.md). The two captures' mixes differ, so the two terms are told apart.
    """
    import tempfile
    from pathlib import Path

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ingest import read_records
    from ingest.generate import generate
    from pipeline.joins_batch import JOINS_SPEC, build_joins_batch
    from pipeline.partials import decoded_rows, partials_of, rows_of

    samples: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="netmon-calibrate-joins-") as tmp:
        for seed, scenario in enumerate(("baseline", "syn-flood")):
            work = Path(tmp) / scenario
            capture = work / "capture.pcap"
            work.mkdir()
            generate(capture, scenario=scenario, packets=int(scale * 80_000), duration_s=20.0, seed=11 + seed)
            rows = decoded_rows(pa.Table.from_batches(list(read_records(capture))))
            kind = build_joins_batch(cfg, work / "results", work / "checkpoint")
            seconds = pc.divide(pc.cast(rows["ts"], pa.int64()), 1_000_000).to_numpy()
            first = int(seconds.min())
            for i in range(int(seconds.max()) - first + 1):
                batch = rows.filter(pa.array(seconds - first == i))
                if not batch.num_rows:
                    continue
                partials = partials_of(batch, kind.specs)
                staged, _ = rows_of(partials, JOINS_SPEC)
                max_us = pc.max(pc.cast(batch["ts"], pa.int64())).as_py()
                started = time.process_time()
                kind.apply(partials, max_us, i)
                cpu = time.process_time() - started
                out = work / "results" / f"batch-{i:06d}" / "part-00000.parquet"
                written = pq.read_metadata(out).num_rows if out.exists() else 0
                if i >= 2:  # the first batches load the modules and warm the caches
                    samples.append((0.0 if staged is None else staged.num_rows, written, cpu))
    stage_s, row_s = fit_driver_terms(samples)
    say(f"joins (driver): {stage_s * 1e6:.1f} us/staged tuple, {row_s * 1e6:.1f} us/row")
    return {"join_stage_s": stage_s, "join_row_s": row_s}


def _check(constants: CostConstants, cfg: Config, scale: float, repeats: int) -> dict[str, float]:
    """Predicted vs measured CPU of every default counting query's stage 1 over one mixed batch."""
    n, keys = int(scale * 150_000), int(scale * 5_000)
    table = _records(n, keys, seed=99, seconds=5.0)
    specs = _specs(cfg)
    measured = _cpu(functools.partial(_stage1_all, table, specs), repeats)
    groups = sum(stage1(table, f).num_rows for f in specs)
    predicted = len(specs) * n * constants.count_row_s + groups * constants.count_group_s
    return {
        "records": n,
        "queries": len(specs),
        "groups": groups,
        "measured_s": measured,
        "predicted_s": predicted,
        "ratio": predicted / measured if measured > 0 else float("nan"),
    }


def calibrate(
    cfg: Config,
    *,
    scale: float = 1.0,
    repeats: int = 3,
    write: bool = True,
    pipeline: bool = False,
    spark: Any = None,
    pipeline_options: dict[str, Any] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Measure every constant, check the model on a mixed batch, and (``write``) store the constants.

    ``pipeline``: also measure the per-batch and pipeline terms in a running pipeline (a
    temporary broker and Spark, about 2 minutes: :mod:`bench.calibrate_pipeline`); without it
    they are left at their defaults (none), so a calibration is one consistent set; ``spark``: the
    session for it (by default one is built and stopped); ``pipeline_options``: more arguments
    of :func:`bench.calibrate_pipeline.pipeline_constants` (``packets``, ``sizes``)."""
    if not 0 < scale <= 10:
        raise ValueError(f"scale: expected a number in (0, 10], got {scale!r}")
    started = time.perf_counter()
    found: dict[str, Any] = {}
    fits: dict[str, float] = {}
    for part in (
        _decode_constants(scale, repeats, say),
        _count_constants(cfg, scale, repeats, say),
        _topk_constants(scale, repeats, say),
        _distinct_constants(scale, repeats, say),
        _join_constants(scale, say),
        _join_driver_constants(cfg, scale, say),
    ):
        fits.update(part.pop("_fit", {}))
        found.update(part)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    constants = CostConstants(**found, source=f"calibrated {stamp} on {platform.node() or 'this machine'}")
    check = _check(constants, cfg, scale, repeats)
    measured: dict[str, Any] | None = None
    if pipeline:
        from bench.calibrate_pipeline import pipeline_constants

        measured = pipeline_constants(cfg, constants, spark=spark, say=say, **(pipeline_options or {}))
        constants = dataclasses.replace(constants, **measured["constants"])
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {
        "constants": constants.to_dict(),
        "defaults": DEFAULT_CONSTANTS.to_dict(),
        "fit_r2": fits,
        "check": check,
        "seconds": seconds,
        "scale": scale,
    }
    if measured is not None:
        result["pipeline"] = measured
    if write:
        extra: dict[str, Any] = {
            k: result[k] for k in ("fit_r2", "check", "scale", "pipeline") if k in result
        }
        path = save_constants(constants, cfg.paths.state_dir, extra=extra)
        result["written"] = str(path)
    return result


def format_report(result: dict[str, Any]) -> list[str]:
    """The constants beside the built-in defaults, the fits, the mixed-batch check."""
    lines = [f"{'constant':<20} {'calibrated':>12} {'default':>12} {'ratio':>7}  fit R²"]
    defaults = result["defaults"]
    for f in dataclasses.fields(CostConstants):
        if f.name == "source":
            continue
        got, base = result["constants"][f.name], defaults[f.name]
        unit = "s" if f.name.endswith("_s") else "" if f.name.endswith("_factor") else "B"
        ratio = f"{got / base:7.2f}" if base else "      -"
        r2 = result["fit_r2"].get(f.name)
        fit = "" if r2 is None else f"{r2:.3f}"
        lines.append(f"{f.name:<20} {got:>11.3g}{unit} {base:>11.3g}{unit} {ratio}  {fit}")
    c = result["check"]
    lines.append(
        f"check: {c['queries']} counting queries over {c['records']} records: "
        f"predicted {c['predicted_s']:.3f} s, "
        f"measured {c['measured_s']:.3f} s (ratio {c['ratio']:.2f}), {c['groups']} groups"
    )
    measured = result.get("pipeline")
    if measured is not None:
        lines.append(
            f"pipeline ({measured.get('method', 'drains')}): {measured['batches']} batches fitted,"
            " the capture at"
            f" {measured['rate_pps']:,.0f} packets/s of event time;"
            " per part: fixed s a batch + s a packet (formulas' s a packet)"
        )
        for part, fit in measured["fits"].items():
            formula = measured["formulas_per_packet_s"].get(part)
            lines.append(
                f"  {part:<9} {fit['fixed_s']:8.4f} s + {fit['per_packet_s']:.3g} s"
                + (f" ({formula:.3g} s)" if formula else "")
            )
        for part, note in measured["notes"].items():
            lines.append(f"  {part}: {note}")
    lines.append(
        f"took {result['seconds']:.1f} s"
        + (f"; written to {result['written']}" if "written" in result else "")
    )
    return lines
