"""``netmon bench distinct``: streaming sub-window HLL sketches vs Spark's ``approx_count_distinct``.

One generated capture, one run, the same Spark settings for both sides:

- **sub-window sketches**: ``pipeline.distinct.build_distinct`` unranked, the pipeline's own
  query (per micro-batch: ``hll_sketch_agg`` per sub-window b, each window from two running
  ``hll_union_agg`` unions, every group), and with ``--with-ranking`` the same query ranking
  every group;
- **baseline**: ``approx_count_distinct(item, rsd)`` per group over Spark's sliding
  ``window(ts, N, b)``, which copies every row into N/b windows;
- **exact oracle**: ``analytics.distinct.ExactSlidingDistinct`` driven offline over the same
  records (``analytics.distinct_offline``), with the same watermark.

The Spark queries read the same Parquet files (one micro-batch per file, ``availableNow``), plus
a last file holding one keyless record far enough past the end to close every window, and write
Parquet. Each query first runs once, untimed, on a one-file warm-up input, so the JVM has
compiled both plans before anything is timed. Throughput is input rows per second of wall time
(``start()`` to termination) and at steady state (batches after the first). Error is relative to
the oracle over every (window end, group) pair it reports.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netmon.config import Config, DistinctQuery

__all__ = ["SCENARIO_QUERY", "SparkRun", "bench_distinct", "format_report"]

#: The configured query each scenario is about.
SCENARIO_QUERY = {"ddos": "ddos-sources-per-destination", "port-scan": "scan-ports-per-source"}
Answers = dict[tuple[int, str], int]  # (window end ns, group) -> distinct


@dataclass
class SparkRun:
    """One Spark query's run: timing from its progress reports, and its answers."""

    name: str
    wall_s: float
    rows: int
    batches: int
    first_batch_s: float
    steady_rows: int
    steady_s: float
    state_rows: int
    answers: Answers = field(repr=False)

    def figures(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 2),
            "rows_per_s": round(self.rows / self.wall_s) if self.wall_s else None,
            "steady_rows_per_s": round(self.steady_rows / self.steady_s) if self.steady_s else None,
            "batches": self.batches,
            "first_batch_s": round(self.first_batch_s, 2),
            "state_rows": self.state_rows,
            "pairs": len(self.answers),
        }


def _write_input(records: Any, directory: Path, files: int, close_ns: int) -> int:
    """Parquet slices of the records (``ts`` as Spark's microsecond timestamp), then the closer.

    Returns the number of records written.
    """
    import os

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = records.set_column(
        records.schema.get_field_index("ts"),
        "ts",
        pc.cast(records.column("ts"), pa.timestamp("us", tz="UTC")),
    )
    directory.mkdir(parents=True)
    step = math.ceil(table.num_rows / files)
    closer = {name: pa.nulls(1, table.schema.field(name).type) for name in table.schema.names}
    closer["ts"] = pa.array([close_ns // 1000], pa.timestamp("us", tz="UTC"))
    parts = [table.slice(i * step, step) for i in range(files)] + [pa.table(closer, schema=table.schema)]
    for i, part in enumerate(parts):
        path = directory / f"part-{i:04d}.parquet"
        pq.write_table(part, path)
        os.utime(path, (1_000_000_000 + i, 1_000_000_000 + i))  # the file source reads by mtime
    return table.num_rows


def _baseline(packets: Any, q: DistinctQuery, rsd: float) -> Any:
    """``approx_count_distinct`` per group over Spark's sliding window (the issue's baseline)."""
    from pyspark.sql import functions as F

    from analytics.keys import parse_key
    from pipeline.distinct import key_text, spark_interval

    keyed = packets.select(
        "ts",
        (key_text(parse_key(q.group_by)) if q.group_by else F.lit("")).alias("group"),
        key_text(parse_key(q.count)).alias("item"),
    )
    # `ts IS NULL` keeps the optimizer from pushing the filter below the watermark, which the
    # closing keyless record must reach (ts is never null here).
    present = keyed.where(
        (F.col("group").isNotNull() & F.col("item").isNotNull() & (F.col("item") != ""))
        | F.col("ts").isNull()
    )
    windows = present.groupBy(
        F.window("ts", spark_interval(q.window_s), spark_interval(q.sub_window_s)),
        "group",
    ).agg(F.approx_count_distinct("item", rsd).alias("distinct"))
    return windows.select(F.col("window.end").alias("window_end"), "group", "distinct")


def _run_query(name: str, df: Any, work: Path) -> SparkRun:
    from netmon.results import read_results
    from pipeline.batch_sink import BatchOutput

    out, checkpoint = work / f"out-{name}", work / f"checkpoint-{name}"
    started = time.perf_counter()
    if isinstance(df, BatchOutput):
        writer, _ = df.attach(df.df.writeStream, out, checkpoint)
    else:
        writer = df.writeStream.format("parquet").option("path", str(out))
    query = (
        writer.queryName(name.replace("-", "_").replace(".", "_"))
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{name}: {query.exception()}")
    progress = [p for p in query.recentProgress if p.get("batchId") is not None]
    rows = [int(p.get("numInputRows") or 0) for p in progress]
    ms = [int((p.get("durationMs") or {}).get("triggerExecution", 0)) for p in progress]
    state = max(
        sum(int(op.get("numRowsTotal") or 0) for op in p.get("stateOperators") or []) for p in progress
    )
    table = read_results(out, columns=["window_end", "group", "distinct"])
    answers: Answers = {}
    for r in table.to_pylist() if table is not None else []:
        answers[(_ns(r["window_end"]), r["group"])] = int(r["distinct"])
    return SparkRun(
        name, wall, sum(rows), len(progress), ms[0] / 1000, sum(rows[1:]), sum(ms[1:]) / 1000, state, answers
    )


def _ns(t: Any) -> int:
    from datetime import UTC, datetime, timedelta

    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _errors(truth: Answers, got: Answers, bound: float, small_max: int) -> dict[str, Any]:
    import numpy as np

    keys = sorted(truth)
    exact = np.array([truth[k] for k in keys], dtype=float)
    est = np.array([got.get(k, 0) for k in keys], dtype=float)
    err = np.abs(est - exact) / exact
    small = exact <= small_max
    large = err[~small]
    return {
        "pairs": len(keys),
        "missing": sum(k not in got for k in keys),
        "extra": sum(k not in truth for k in got),
        "mean_rel_err": float(err.mean()) if keys else None,
        "p95_rel_err": float(np.quantile(err, 0.95)) if keys else None,
        "max_rel_err": float(err.max()) if keys else None,
        "within_bound": float((err <= bound).mean()) if keys else None,
        "large_pairs": int(large.size),
        "large_mean_rel_err": float(large.mean()) if large.size else None,
        "small_pairs": int(small.sum()),
        "small_exact": float((est[small] == exact[small]).mean()) if small.any() else None,
    }


def bench_distinct(
    cfg: Config,
    *,
    scenario: str = "ddos",
    packets: int = 500_000,
    duration_s: float = 300.0,
    seed: int = 1,
    query_name: str | None = None,
    files: int = 5,
    files_per_batch: int = 1,
    rsds: tuple[float, ...] = (0.05,),
    with_ranking: bool = False,
    repeat: int = 2,
    master: str | None = None,
    spark_conf: dict[str, str] | None = None,
    keep: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Generate a capture, run both Spark queries and the exact oracle on it, compare."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from analytics.distinct_bench import hll_bound
    from analytics.distinct_offline import exact_oracle, run_engine
    from ingest import read_records
    from ingest.generate import generate
    from pipeline.distinct import build_distinct, offline_query
    from pipeline.session import build_session

    name = query_name or SCENARIO_QUERY.get(scenario, cfg.queries.distinct[0].name)
    configured = {q.name: q for q in cfg.queries.distinct}
    if name not in configured:
        raise ValueError(f"query: {name!r} is not configured (known: {', '.join(configured)})")
    q = dataclasses.replace(configured[name], top=0)  # every group, to compare them all
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="netmon-bench-distinct-"))
    try:
        say(f"generating {packets:,} packets ({scenario}, {duration_s:g} s) ...")
        capture = work / f"{scenario}.pcap"
        generate(capture, scenario=scenario, packets=packets, seed=seed, duration_s=duration_s)
        records = pa.Table.from_batches(list(read_records(capture)))
        watermark_ns = int(cfg.pipeline.watermark_s * 1e9)
        last_ns = pc.max(records.column("ts")).value
        close_ns = last_ns + int((q.window_s + q.sub_window_s) * 1e9) + watermark_ns
        rows = _write_input(records, work / "input", files, close_ns)

        say("exact oracle (offline) ...")
        closer = {c: pa.nulls(1, records.schema.field(c).type) for c in records.schema.names}
        closer["ts"] = pa.array([close_ns], records.schema.field("ts").type)
        started = time.perf_counter()
        reports = run_engine(
            exact_oracle(offline_query(q)),
            [records, pa.table(closer, schema=records.schema)],
            offline_query(q),
            watermark_ns=watermark_ns,
        )
        truth = {(r.end_ns, g): n for r in reports for g, n in r.groups}
        oracle_s = time.perf_counter() - started

        # A small warm-up input: the JVM compiles both plans' code before anything is timed.
        _write_input(records.slice(0, max(1, rows // files)), work / "warmup", 1, close_ns)

        spark = build_session(cfg, "netmon-bench-distinct", master=master, ui=False)
        for key, value in (spark_conf or {}).items():
            spark.conf.set(key, value)
        schema = spark.read.parquet(str(work / "input")).schema

        def packets_stream(directory: str) -> Any:
            raw = (
                spark.readStream.schema(schema)
                .option("maxFilesPerTrigger", files_per_batch)
                .parquet(str(work / directory))
            )
            return raw.withWatermark("ts", f"{int(cfg.pipeline.watermark_s * 1000)} milliseconds")

        wm_s = cfg.pipeline.watermark_s
        queries: dict[str, Callable[[Any], Any]] = {
            # The pipeline's query unranked: every group of every slide, as the baseline gives them.
            "sub-window-hll": lambda packets: build_distinct(packets, [q], watermark_s=wm_s, rank=False),
        }
        if with_ranking:
            # The pipeline's whole query (stage 4 ranks; top = 0 keeps every group).
            queries["sub-window-hll+rank"] = lambda packets: build_distinct(packets, [q], watermark_s=wm_s)
        for rsd in rsds:
            queries[f"approx-rsd-{rsd:g}"] = functools.partial(_baseline, q=q, rsd=rsd)
        say("warm-up ...")
        for label, make in queries.items():
            _run_query(f"warmup-{label}", make(packets_stream("warmup")), work)
        # Rounds alternate the queries; each query's fastest round is reported (the others are
        # slowed by whatever else the machine is doing), with every round's wall time.
        rounds: dict[str, list[SparkRun]] = {label: [] for label in queries}
        for i in range(repeat):
            for label, make in queries.items():
                say(f"{label} (round {i + 1} of {repeat}) ...")
                rounds[label].append(_run_query(f"{label}-{i}", make(packets_stream("input")), work))
        runs = [
            dataclasses.replace(min(rs, key=lambda r: r.wall_s), name=label) for label, rs in rounds.items()
        ]
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)

    bound, small_max = hll_bound(q.lg_k), 2**q.lg_k // 16
    ours = runs[0]
    result: dict[str, Any] = {
        "scenario": scenario,
        "packets": packets,
        "duration_s": duration_s,
        "query": name,
        "count": q.count,
        "group_by": q.group_by,
        "window_s": q.window_s,
        "sub_window_s": q.sub_window_s,
        "n_over_b": round(q.window_s / q.sub_window_s),
        "lg_k": q.lg_k,
        "rows": rows,
        "files": files,
        "files_per_batch": files_per_batch,
        "master": spark.sparkContext.master,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "spark_conf": dict(spark_conf or {}),
        "repeat": repeat,
        "bound": bound,
        "small_max": small_max,
        "oracle_pairs": len(truth),
        "oracle_s": round(oracle_s, 2),
        "runs": {},
    }
    for run in runs:
        entry = run.figures() | {"error": _errors(truth, run.answers, bound, small_max)}
        entry["rounds_wall_s"] = [round(r.wall_s, 2) for r in rounds[run.name]]
        if run is not ours:
            # > 1: the sub-window sketches are that many times faster than this run.
            entry["ours_speedup_wall"] = round(run.wall_s / ours.wall_s, 2)
            if ours.steady_s and run.steady_s:
                mine, theirs = ours.steady_rows / ours.steady_s, run.steady_rows / run.steady_s
                entry["ours_speedup_steady"] = round(mine / theirs, 2)
        result["runs"][run.name] = entry
    return result


def format_report(r: dict[str, Any]) -> list[str]:
    """The figures as a few lines of text."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.2f}%"

    lines = [
        f"{r['scenario']}: {r['rows']:,} records, {r['duration_s']:g} s of event time, "
        f"{r['files']} files, {r['files_per_batch']} per micro-batch (+1 closing), {r['master']}, "
        f"{r['shuffle_partitions']} shuffle partitions, fastest of {r['repeat']} rounds",
        f"query {r['query']}: distinct {r['count']} per {r['group_by'] or '(all)'}, N={r['window_s']:g} s, "
        f"b={r['sub_window_s']:g} s (N/b={r['n_over_b']}), lg_k={r['lg_k']}; oracle: {r['oracle_pairs']:,} "
        f"(end, group) pairs in {r['oracle_s']:.1f} s; bound 3*1.04/sqrt(2^lg_k) = {pct(r['bound'])}",
        f"{'run':<22} {'wall s':>7} {'rows/s':>9} {'steady/s':>9} {'state':>8} {'mean err':>8} "
        f"{'p95 err':>8} {'max err':>8} {'in bound':>8} {'small=':>7} {'ours x':>10}  rounds (s)",
    ]
    for name, run in r["runs"].items():
        e = run["error"]
        ours_x = (
            ""
            if "ours_speedup_wall" not in run
            else (f"{run['ours_speedup_wall']:.2f}/{run.get('ours_speedup_steady', 0):.2f}")
        )
        lines.append(
            f"{name:<22} {run['wall_s']:>7.1f} {run['rows_per_s']:>9,} {run['steady_rows_per_s'] or 0:>9,} "
            f"{run['state_rows']:>8,} {pct(e['mean_rel_err']):>8} {pct(e['p95_rel_err']):>8} "
            f"{pct(e['max_rel_err']):>8} {pct(e['within_bound']):>8} {pct(e['small_exact']):>7} "
            f"{ours_x:>10}  {' '.join(f'{w:.1f}' for w in run['rounds_wall_s'])}"
        )
    lines.append(
        "ours x = this run's time / sub-window-hll's (wall / steady state): how many times faster the "
        f"sub-window sketches are; small= = exact share of counts <= {r['small_max']}"
    )
    return lines
