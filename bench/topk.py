"""``netmon bench topk``: the streaming top-k (Algorithm 6) vs Spark's exact and approximate top-k.

All contenders run in the same process and session on the same input: a generated capture
(``heavy-hitter-burst``) decoded once into time-ordered Parquet files, read as a file stream one
file per micro-batch with the pipeline's watermark — so the figures measure the top-k operators,
not Kafka or the wire-format decoder (``netmon bench ingest`` covers those).

- **sub-window top-k**: ``pipeline.topk.build_topk`` — native tumbling counts per sub-window ``b``,
  then the ``transformWithStateInPandas`` merge, written to Parquet;
- **exact sliding window**: ``pipeline.topk.build_sliding_counts`` — ``window(ts, N, b)`` counts
  per key (each packet counted in ``N/b`` windows), then ``top_k_per_window`` as a batch step in
  ``foreachBatch``, written to Parquet;
- **approx_top_k, sub-window sketches combined** (:func:`build_approx_combined`): Spark's
  ``approx_top_k_accumulate(key, k)`` per tumbling sub-window ``window(ts, b)``, then
  ``approx_top_k_combine(sketch, k·N/b)`` over the ``N/b`` sub-windows of each sliding window
  (a second streaming aggregation over ``window(window_time(sub_window), N, b)``, as
  ``pipeline.distinct`` chains its sketches) and ``approx_top_k_estimate(sketch, k)``;
- **approx_top_k over the sliding window** (:func:`build_approx_sliding`): the one-aggregation
  form, ``approx_top_k(key, k, k·N/b)`` grouped by ``window(ts, N, b)``.

Equal memory (:func:`approx_memory`): Algorithm 6 stores ``k`` key–count pairs per sub-window,
``k·N/b`` per window. The combined form gets ``maxItemsTracked = k`` per sub-window sketch and
``k·N/b`` for the window's combined sketch, the sliding form ``k·N/b`` per window. Spark sizes a
sketch's map to the next power of two >= ``maxItemsTracked / 0.75`` (DataSketches' minimum: 8
slots), which holds 0.75 of that many counters — between 1 and 2 times ``maxItemsTracked``, at
least 6: for k = 10, 12 counters per sub-window and 768 for ``k·N/b = 600``
(:func:`sketch_counters`). So each approximate contender has at least Algorithm 6's memory.

Throughput = packets / wall time from ``start()`` to the end of the run (the first batch's start-up
included, after one untimed batch aggregation over the input warms the JVM); "steady" excludes the
first batch. State = Spark's state-operator metrics.

Accuracy (:func:`window_score`): per window end that every contender reported (full windows only),
each one's first ``k`` items against the window's exact counts (numpy over the same input):
recall = true top-k items reported / min(k, keys in the window), precision = reported items that
are in the true top-k / items reported (ties at the k-th count all count as top-k), relative error
= mean ``|reported − true| / true`` of the reported counts.

``netmon bench topk-offline`` (:func:`bench_topk_offline`) times ``netmon analyze topk`` against
``tshark -q -z endpoints,ip`` on one 1M-packet capture (wall time, peak RSS), no Spark.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from netmon.config import Config, TopKQuery

__all__ = [
    "approx_memory",
    "bench_topk",
    "bench_topk_offline",
    "build_approx_combined",
    "build_approx_sliding",
    "format_offline_report",
    "format_report",
    "sketch_counters",
    "window_score",
]

_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
#: result key, label, outputs label — in the order the contenders run.
_SIDES = (
    ("subwindow", "sub-window top-k (Alg. 6)", "reports"),
    ("sliding", "exact sliding window", "windows"),
    ("approx_combined", "approx_top_k sub-windows", "windows"),
    ("approx_sliding", "approx_top_k sliding", "windows"),
)
_APPROX_MAX_ITEMS = 1_000_000  # Spark's upper limit of maxItemsTracked


def sketch_counters(max_items_tracked: int) -> int:
    """Counters a Spark ``approx_top_k*`` sketch of ``maxItemsTracked`` holds.

    Spark's map size is the next power of two >= ``ceil(maxItemsTracked / 0.75)``, at least
    DataSketches' 8 slots; a map holds 0.75 of its size in counters.

    >>> sketch_counters(1), sketch_counters(6), sketch_counters(10), sketch_counters(600)
    (6, 6, 12, 768)
    """
    if not 1 <= max_items_tracked <= _APPROX_MAX_ITEMS:
        raise ValueError(f"maxItemsTracked: must be in 1..{_APPROX_MAX_ITEMS}, got {max_items_tracked}")
    size = max(8, 1 << max(0, math.ceil(max_items_tracked / 0.75) - 1).bit_length())
    return 3 * size // 4


def approx_memory(k: int, n_sub: int) -> dict[str, int]:
    """``maxItemsTracked`` of the approximate contenders at Algorithm 6's memory (``k·N/b`` pairs).

    >>> approx_memory(10, 60)
    {'sub_window': 10, 'window': 600, 'sub_window_counters': 12, 'window_counters': 768}
    """
    window = min(k * n_sub, _APPROX_MAX_ITEMS)
    return {
        "sub_window": k,
        "window": window,
        "sub_window_counters": sketch_counters(k),
        "window_counters": sketch_counters(window),
    }


def _keyed(packets: Any, key: str) -> Any:
    """``ts, key`` of the records that have the key's fields (as ``pipeline.topk``)."""
    from pyspark.sql import functions as F

    from pipeline.topk import key_column

    keyed = packets.select("ts", key_column(key).alias("key"))
    # Naming ts keeps the filter above the watermark (see pipeline.topk).
    return keyed.where(F.col("key").isNotNull() | F.col("ts").isNull())


def _ranked(windows: Any) -> Any:
    """``window_end, rank, key, count`` from ``window_end, top`` (an approx_top_k result array).

    A window whose array is empty keeps one row with a null rank, key and count.
    """
    from pyspark.sql import functions as F

    rows = windows.select("window_end", F.posexplode_outer("top").alias("pos", "entry"))
    return rows.select(
        "window_end",
        (F.col("pos") + 1).cast("int").alias("rank"),
        F.col("entry.item").alias("key"),
        F.col("entry.count").alias("count"),
    )


def _intervals(q: TopKQuery) -> tuple[str, str, int]:
    from pipeline.topk import query_params

    params = query_params(q)
    return f"{params.N // 1000} microseconds", f"{params.b // 1000} microseconds", params.N // params.b


def build_approx_combined(packets: Any, q: TopKQuery) -> Any:
    """Spark's approx_top_k per sub-window, combined per window: ``window_end, rank, key, count``.

    Stage 1: ``approx_top_k_accumulate(key, k)`` per tumbling sub-window ``b`` (append: emitted
    once the watermark passes its end). Stage 2: each closed sub-window sketch joins the ``N/b``
    sliding windows that hold it, ``approx_top_k_combine(sketch, k·N/b)``; a closed window's
    ``approx_top_k_estimate(sketch, k)``: up to ``k`` items whose lower bound exceeds the
    sketch's maximum error (DataSketches' ``NO_FALSE_POSITIVES``), with their *estimates*.
    """
    from pyspark.sql import functions as F

    n, b, n_sub = _intervals(q)
    memory = approx_memory(q.k, n_sub)
    sketches = (
        _keyed(packets, q.key)
        .groupBy(F.window("ts", b).alias("sub_window"))
        .agg(F.expr(f"approx_top_k_accumulate(key, {memory['sub_window']})").alias("sketch"))
    )
    windows = sketches.groupBy(F.window(F.window_time("sub_window"), n, b).alias("window")).agg(
        F.expr(f"approx_top_k_combine(sketch, {memory['window']})").alias("sketch")
    )
    return _ranked(
        windows.select(
            F.col("window.end").alias("window_end"),
            F.expr(f"approx_top_k_estimate(sketch, {q.k})").alias("top"),
        )
    )


def build_approx_sliding(packets: Any, q: TopKQuery) -> Any:
    """``approx_top_k(key, k, k·N/b)`` per sliding ``window(ts, N, b)``: ``window_end, rank, key, count``.

    One sketch per open window, every packet added to the ``N/b`` windows that hold it.
    """
    from pyspark.sql import functions as F

    n, b, n_sub = _intervals(q)
    memory = approx_memory(q.k, n_sub)
    windows = (
        _keyed(packets, q.key)
        .groupBy(F.window("ts", n, b).alias("window"))
        .agg(F.expr(f"approx_top_k(key, {q.k}, {memory['window']})").alias("top"))
    )
    return _ranked(windows.select(F.col("window.end").alias("window_end"), "top"))


def _write_inputs(capture: Path, out: Path, files: int) -> int:
    """The capture's records as ``files`` time-ordered Parquet files (``ts`` µs, ``ts_ns``, columns)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ingest import read_records

    table = pa.Table.from_batches(list(read_records(capture)))
    ts_ns = pc.cast(table["ts"], pa.int64())
    table = table.drop(["ts"]).append_column("ts_ns", ts_ns)
    table = table.append_column("ts", pc.cast(pc.divide(ts_ns, 1000), pa.timestamp("us", tz="UTC")))
    out.mkdir(parents=True)
    step = -(-table.num_rows // files)
    now = time.time() - files
    for i in range(files):
        path = out / f"part-{i:04d}.parquet"
        pq.write_table(table.slice(i * step, step), path)
        os.utime(path, (now + i, now + i))  # the file source takes files in modification order
    return table.num_rows


def _run(name: str, start: Callable[[], Any]) -> dict[str, Any]:
    """Run a streaming query to the end (available-now) and summarize its progress reports."""
    began = time.perf_counter()
    query = start()
    query.awaitTermination()
    wall = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"{name}: {str(query.exception()).splitlines()[0]}")
    progress = [p for p in query.recentProgress if p["numInputRows"] or p["stateOperators"]]
    rows = [int(p["numInputRows"]) for p in progress]
    ms = [int(p["durationMs"]["triggerExecution"]) for p in progress]
    states = [p["stateOperators"] for p in progress]
    memory = [sum(int(op["memoryUsedBytes"]) for op in ops) for ops in states]
    state_rows = [sum(int(op["numRowsTotal"]) for op in ops) for ops in states]
    steady_rows, steady_ms = sum(rows[1:]), sum(ms[1:])
    return {
        "name": name,
        "wall_s": round(wall, 2),
        "packets": sum(rows),
        "packets_per_s": round(sum(rows) / wall),
        "batches": len(progress),
        "first_batch_ms": ms[0] if ms else 0,
        "mean_batch_ms": round(statistics.fmean(ms[1:])) if len(ms) > 1 else 0,
        "steady_packets_per_s": round(steady_rows / (steady_ms / 1000)) if steady_ms else 0,
        "state_rows_max": max(state_rows, default=0),
        "state_bytes_max": max(memory, default=0),
        "state_final": [
            {"operator": op["operatorName"], "rows": op["numRowsTotal"], "bytes": op["memoryUsedBytes"]}
            for op in (states[-1] if states else [])
        ],
    }


def window_score(
    reported: Sequence[tuple[str, int]], true: Mapping[str, int], k: int
) -> tuple[float, float | None, float | None]:
    """(recall, precision, mean relative error) of one window's report against its exact counts.

    ``reported``: (key, count) in rank order, the first ``k`` scored; ``true``: every key's exact
    count in the window. An item is in the true top-k if its count is at least the k-th largest
    (ties all count); recall divides by min(k, keys in the window). Precision and error are None
    for an empty report.

    >>> window_score([("a", 5), ("c", 3)], {"a": 5, "b": 4, "c": 2}, 2)
    (0.5, 0.5, 0.25)
    >>> window_score([], {"a": 1}, 3)
    (0.0, None, None)
    """
    counts = sorted((c for c in true.values() if c > 0), reverse=True)
    if not counts:
        return (1.0, None if not reported else 0.0, None)
    kth = counts[min(k, len(counts)) - 1]
    top = list(reported)[:k]
    hits = sum(1 for key, _ in top if true.get(key, 0) >= kth)
    errors = [abs(count - true[key]) / true[key] for key, count in top if true.get(key, 0) > 0]
    return (
        hits / min(k, len(counts)),
        hits / len(top) if top else None,
        statistics.fmean(errors) if errors else None,
    )


class _ExactWindows:
    """Exact per-key counts of any window ``[end − N, end)`` of the benchmark's input (numpy)."""

    def __init__(self, inputs: Path, key: str, b_us: int, n_sub: int) -> None:
        import numpy as np
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from analytics.keys import key_text, parse_key

        fields = parse_key(key)
        table = pq.read_table(inputs, columns=["ts_ns", *fields])
        keys = key_text(table, fields)
        present = pc.is_valid(keys)
        keys = keys.filter(present)
        ts_us = pc.filter(table["ts_ns"], present).to_numpy() // 1000
        encoded = pc.dictionary_encode(keys)
        sw = ts_us // b_us
        order = np.argsort(sw, kind="stable")
        self._sw = sw[order]
        self._ids = encoded.indices.to_numpy(zero_copy_only=False)[order]
        self._texts = encoded.dictionary.to_pylist()
        self._b_us, self._n_sub = b_us, n_sub
        #: the first window end whose window lies wholly after the first record's sub-window start
        self.first_full_end_us = (int(self._sw[0]) + n_sub) * b_us if len(self._sw) else 0

    def counts(self, end_us: int) -> dict[str, int]:
        import numpy as np

        last = end_us // self._b_us  # exclusive sub-window index
        lo, hi = np.searchsorted(self._sw, [last - self._n_sub, last])
        tally = np.bincount(self._ids[lo:hi], minlength=len(self._texts))
        return {self._texts[i]: int(tally[i]) for i in np.flatnonzero(tally)}


def _reports(rows: Iterable[Any]) -> dict[int, list[tuple[str, int]]]:
    """``window_end (µs), rank, key, count`` rows -> each window's (key, count) in rank order."""
    out: dict[int, list[tuple[int, str, int]]] = {}
    for end, rank, key, count in rows:
        items = out.setdefault(int(end), [])
        if key is not None and rank is not None and rank > 0:
            items.append((int(rank), str(key), int(count)))
    return {end: [(key, count) for _, key, count in sorted(items)] for end, items in out.items()}


def _accuracy(
    outputs: Mapping[str, dict[int, list[tuple[str, int]]]], exact: _ExactWindows, k: int
) -> dict[str, Any]:
    """Every contender's mean recall, precision and relative error over the windows all reported."""
    common = set.intersection(*(set(o) for o in outputs.values())) if outputs else set()
    ends = sorted(e for e in common if e >= exact.first_full_end_us)
    truth = {end: exact.counts(end) for end in ends}
    scores: dict[str, Any] = {}
    for side, reports in outputs.items():
        recall, precision, error = [], [], []
        for end in ends:
            r, p, e = window_score(reports[end], truth[end], k)
            recall.append(r)
            if p is not None:
                precision.append(p)
            if e is not None:
                error.append(e)

        def pct(values: list[float]) -> float | None:
            return round(100 * statistics.fmean(values), 2) if values else None

        scores[side] = {
            "recall_pct": pct(recall),
            "precision_pct": pct(precision),
            "rel_err_pct": pct(error),
            "empty_reports": len(ends) - len(precision),
        }
    return {"windows": len(ends), "contenders": scores}


def bench_topk(
    cfg: Config,
    *,
    packets: int = 1_000_000,
    duration_s: float = 600.0,
    sub_window_s: float = 5.0,
    ratio: int = 60,
    k: int = 10,
    key: str = "src_ip",
    files: int = 5,
    capture: str | None = None,
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
    approx: bool = True,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Measure the queries on one input; the figures as a dict (see ``format_report``).

    ``shuffle_partitions`` overrides ``[spark] shuffle_partitions``; ``conf`` sets Spark SQL
    options on the session (every query) before they start; ``approx=False`` leaves out the two
    ``approx_top_k`` contenders.
    """
    from pyspark.sql import functions as F

    from ingest.generate import generate
    from pipeline.session import build_session
    from pipeline.topk import build_sliding_counts, build_topk, top_k_per_window

    query = TopKQuery(name="bench", key=key, window_s=sub_window_s * ratio, sub_window_s=sub_window_s, k=k)
    _, _, n_sub = _intervals(query)
    memory = approx_memory(k, n_sub)
    with tempfile.TemporaryDirectory(prefix="netmon-bench-topk-") as tmp:
        work = Path(tmp)
        if capture is None:
            capture = str(work / "capture.pcap")
            say(f"generating {packets:,} packets over {duration_s:g} s (heavy-hitter-burst) ...")
            generate(capture, scenario="heavy-hitter-burst", packets=packets, duration_s=duration_s)
        n = _write_inputs(Path(capture), work / "input", files)
        say(f"{n:,} records in {files} Parquet files; starting Spark ...")
        if shuffle_partitions:
            cfg = cfg.replace(spark={"shuffle_partitions": shuffle_partitions})
        spark = build_session(cfg, "netmon-bench-topk", ui=False)
        for name, value in (conf or {}).items():
            spark.conf.set(name, value)
        changelog = spark.conf.get(_CHANGELOG, "false")
        records = spark.read.parquet(str(work / "input"))
        schema = records.schema
        # Untimed warm-up of the JVM (Parquet scan, hash aggregation), so the first query timed
        # does not pay for it alone.
        records.groupBy(F.window("ts", "5 seconds"), "src_ip").count().write.format("noop").mode(
            "overwrite"
        ).save()
        watermark = f"{int(cfg.pipeline.watermark_s * 1000)} milliseconds"

        def packets_stream() -> Any:
            stream = (
                spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(work / "input"))
            )
            return stream.withWatermark("ts", watermark)

        def to_parquet(frame: Any, name: str) -> Callable[[], Any]:
            def start() -> Any:
                return (
                    frame()
                    .writeStream.format("parquet")
                    .option("path", str(work / f"out-{name}"))
                    .option("checkpointLocation", str(work / f"ck-{name}"))
                    .trigger(availableNow=True)
                    .start()
                )

            return start

        def write_top_k(batch: Any, batch_id: int) -> None:
            top_k_per_window(batch, k).write.mode("append").parquet(str(work / "out-sliding"))

        def start_sliding() -> Any:
            return (
                build_sliding_counts(packets_stream(), query)
                .writeStream.foreachBatch(write_top_k)
                .outputMode("append")
                .option("checkpointLocation", str(work / "ck-sliding"))
                .trigger(availableNow=True)
                .start()
            )

        starts: dict[str, Callable[[], Any]] = {
            "subwindow": to_parquet(lambda: build_topk(packets_stream(), (query,)), "subwindow"),
            "sliding": start_sliding,
        }
        if approx:
            starts["approx_combined"] = to_parquet(
                lambda: build_approx_combined(packets_stream(), query), "approx_combined"
            )
            starts["approx_sliding"] = to_parquet(
                lambda: build_approx_sliding(packets_stream(), query), "approx_sliding"
            )
        say(f"N = {query.window_s:g} s, b = {sub_window_s:g} s, k = {k}, key {key}")
        runs: dict[str, dict[str, Any]] = {}
        outputs: dict[str, dict[int, list[tuple[str, int]]]] = {}
        for side, label, _ in _SIDES:
            if side not in starts:
                continue
            say(f"{label} ...")
            runs[side] = _run(label, starts[side])
            out = work / f"out-{side}"
            rows = (
                spark.read.parquet(str(out))
                .select(F.unix_micros("window_end"), "rank", "key", "count")
                .collect()
                if out.exists()  # foreachBatch writes nothing while no window has closed
                else []
            )
            outputs[side] = _reports(rows)
            runs[side]["reports" if side == "subwindow" else "windows"] = len(outputs[side])
        spark.stop()
        say("scoring against the exact counts ...")
        exact = _ExactWindows(work / "input", key, round(sub_window_s * 1e6), n_sub)
        accuracy = _accuracy(outputs, exact, k)
    ours = runs["subwindow"]
    result: dict[str, Any] = {
        "packets": n,
        "duration_s": duration_s,
        "query": {"key": key, "weight": "packets", "N_s": query.window_s, "b_s": sub_window_s, "k": k},
        "files": files,
        "shuffle_partitions": cfg.spark.shuffle_partitions,
        "master": cfg.spark.master,
        "changelog_checkpointing": changelog,
        "conf": dict(conf or {}),
        "approx_max_items_tracked": memory if approx else None,
        **runs,
        "accuracy": accuracy,
    }
    for side in runs:
        if side != "subwindow":
            base = runs[side]
            result[f"ratio_{side}"] = round(ours["packets_per_s"] / base["packets_per_s"], 2)
            result[f"steady_ratio_{side}"] = round(
                ours["steady_packets_per_s"] / max(1, base["steady_packets_per_s"]), 2
            )
    # The names of earlier versions: ours vs the exact sliding window.
    result["ratio"], result["steady_ratio"] = result["ratio_sliding"], result["steady_ratio_sliding"]
    return result


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def format_report(result: dict[str, Any]) -> list[str]:
    q = result["query"]
    sides = [(side, label, outputs) for side, label, outputs in _SIDES if side in result]
    lines = [
        f"input: {result['packets']:,} packets over {result['duration_s']:g} s of event time, "
        f"{result['files']} micro-batches; master {result['master']}, "
        f"{result['shuffle_partitions']} shuffle partitions, RocksDB changelog checkpointing "
        f"{result['changelog_checkpointing']}",
        f"query: top {q['key']} by {q['weight']}, N = {q['N_s']:g} s, b = {q['b_s']:g} s "
        f"(N/b = {q['N_s'] / q['b_s']:g}), k = {q['k']}",
    ]
    memory = result.get("approx_max_items_tracked")
    if memory:
        lines.append(
            f"approx_top_k memory: maxItemsTracked {memory['sub_window']} per sub-window "
            f"({memory['sub_window_counters']} counters), {memory['window']} per window "
            f"({memory['window_counters']} counters)"
        )
    lines += [
        "",
        f"{'':28}{'wall s':>9}{'packets/s':>12}{'steady/s':>11}{'batch ms':>10}"
        f"{'state rows':>12}{'state MB':>10}{'outputs':>9}",
    ]
    for side, _, outputs in sides:
        r = result[side]
        lines.append(
            f"{r['name']:28}{r['wall_s']:>9.1f}{r['packets_per_s']:>12,}{r['steady_packets_per_s']:>11,}"
            f"{r['mean_batch_ms']:>10,}{r['state_rows_max']:>12,}{r['state_bytes_max'] / 1e6:>10.2f}"
            f"{r[outputs]:>9,}"
        )
    lines.append("")
    for side, label, _ in sides[1:]:
        lines.append(
            f"throughput ratio (sub-window / {label}): {result[f'ratio_{side}']:.2f}x overall, "
            f"{result[f'steady_ratio_{side}']:.2f}x after the first batch"
        )
    accuracy = result.get("accuracy")
    if accuracy:
        lines += [
            "",
            f"top-k per window vs the exact counts ({accuracy['windows']} full windows every "
            f"contender reported):",
            f"{'':28}{'recall %':>10}{'precision %':>13}{'rel. err %':>12}{'empty':>7}",
        ]
        for side, label, _ in sides:
            s = accuracy["contenders"][side]
            lines.append(
                f"{label:28}{_pct(s['recall_pct']):>10}{_pct(s['precision_pct']):>13}"
                f"{_pct(s['rel_err_pct']):>12}{s['empty_reports']:>7}"
            )
    lines += ["", "state at the end, per operator (rows, bytes):"]
    for side, _, _ in sides:
        ops = ", ".join(
            f"{o['operator']} {o['rows']:,} / {o['bytes']:,}" for o in result[side]["state_final"]
        )
        lines.append(f"  {result[side]['name']}: {ops}")
    return lines


# --- netmon bench topk-offline: netmon analyze topk vs tshark -----------------------------------

_TSHARK_HINT = (
    "tshark not found: install it (Debian: apt-get install --no-install-recommends tshark) to compare"
)


def _netmon_argv() -> list[str]:
    """How to run this installation's ``netmon``: the script beside the interpreter, or ``-m``."""
    script = Path(sys.executable).with_name("netmon")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cli.main"]


#: Runs argv[2:] with stdout to argv[1]; prints its wall time and rusage as JSON. A small process of
#: its own: Linux carries the forking process's peak RSS into the child's ``ru_maxrss`` across
#: ``exec``, so the children are not forked from the benchmark (which holds a whole capture).
_LAUNCHER = """
import json, os, subprocess, sys, time
with open(sys.argv[1], "wb") as out:
    began = time.perf_counter()
    proc = subprocess.Popen(sys.argv[2:], stdout=out)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
proc.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps({"code": proc.returncode, "wall_s": wall, "max_rss_kb": usage.ru_maxrss}))
"""


def _measure(argv: Sequence[str], out: Path) -> dict[str, Any]:
    """Run ``argv`` to the end, stdout to ``out``: wall seconds, its peak RSS, output lines."""
    with tempfile.TemporaryFile() as stderr:
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(out), *argv], stdout=subprocess.PIPE, stderr=stderr
        )
        stderr.seek(0)
        errors = stderr.read().decode(errors="replace").strip().splitlines()
    try:
        figures = json.loads(done.stdout)
    except ValueError:
        figures = {"code": done.returncode or 1}
    if done.returncode or figures["code"]:
        last = errors[-1] if errors else ""
        raise RuntimeError(f"{Path(argv[0]).name} exited {figures['code']}: {last}")
    with open(out, "rb") as fh:
        lines = sum(1 for _ in fh)
    return {
        "wall_s": round(figures["wall_s"], 3),
        "max_rss_mb": round(figures["max_rss_kb"] / 1024, 1),
        "output_lines": lines,
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": runs,
        "wall_s_median": round(statistics.median(r["wall_s"] for r in runs), 3),
        "wall_s_min": min(r["wall_s"] for r in runs),
        "max_rss_mb": max(r["max_rss_mb"] for r in runs),
        "output_lines": runs[-1]["output_lines"],
    }


def bench_topk_offline(
    *,
    packets: int = 1_000_000,
    duration_s: float = 60.0,
    capture: str | None = None,
    key: str = "src_ip",
    window: str = "10s",
    sub_window: str = "1s",
    k: int = 10,
    repeat: int = 3,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """``netmon analyze topk FILE --time-based`` vs ``tshark -q -z endpoints,ip -r FILE``.

    Both run as child processes on the same capture, alternately, ``repeat`` times each; the
    figures are each run's wall time and peak resident set (``ru_maxrss`` of that child).
    Without ``tshark`` on the PATH only ours is measured (``tshark`` is None in the result).
    """
    if repeat < 1:
        raise ValueError(f"repeat: must be >= 1, got {repeat}")
    tshark = shutil.which("tshark")
    generated = capture is None
    with tempfile.TemporaryDirectory(prefix="netmon-bench-topk-offline-") as tmp:
        work = Path(tmp)
        if capture is None:
            from ingest.generate import generate

            capture = str(work / "capture.pcap")
            say(f"generating {packets:,} packets over {duration_s:g} s (heavy-hitter-burst) ...")
            generate(capture, scenario="heavy-hitter-burst", packets=packets, duration_s=duration_s)
        ours_argv = [
            *_netmon_argv(),
            *("analyze", "topk", capture, "--key", key, "--window", window, "--sub-window", sub_window),
            *("-k", str(k), "--time-based"),
        ]
        tshark_argv = [tshark, "-q", "-z", "endpoints,ip", "-r", capture] if tshark else None
        ours: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for i in range(repeat):
            say(f"run {i + 1}/{repeat}: netmon analyze topk ...")
            ours.append(_measure(ours_argv, work / "ours.jsonl"))
            if tshark_argv:
                say(f"run {i + 1}/{repeat}: tshark -z endpoints,ip ...")
                theirs.append(_measure(tshark_argv, work / "tshark.txt"))
        size = Path(capture).stat().st_size
    result: dict[str, Any] = {
        "capture_bytes": size,
        "packets": packets if generated else None,
        "ours": {
            "command": f"netmon analyze topk FILE --key {key} --window {window} --sub-window {sub_window} "
            f"-k {k} --time-based",
            **_summary(ours),
        },
        "tshark": None,
    }
    if theirs:
        result["tshark"] = {
            "command": "tshark -q -z endpoints,ip -r FILE",
            "version": _tshark_version(tshark),
            **_summary(theirs),
        }
        result["speedup"] = round(result["tshark"]["wall_s_median"] / result["ours"]["wall_s_median"], 2)
        result["rss_ratio"] = round(result["tshark"]["max_rss_mb"] / result["ours"]["max_rss_mb"], 2)
    return result


def _tshark_version(tshark: str | None) -> str:
    if not tshark:
        return ""
    try:
        text = subprocess.run([tshark, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return (text.splitlines() or [""])[0]


def format_offline_report(result: dict[str, Any]) -> list[str]:
    lines = [f"capture: {result['capture_bytes'] / 1e6:.1f} MB"]
    for side in ("ours", "tshark"):
        r = result[side]
        if r is None:
            lines.append(_TSHARK_HINT + "; skipped")
            continue
        walls = ", ".join(f"{run['wall_s']:.2f}" for run in r["runs"])
        lines.append(
            f"{r['command']}: median {r['wall_s_median']:.2f} s (runs {walls}), "
            f"peak RSS {r['max_rss_mb']:.0f} MB, {r['output_lines']:,} output lines"
        )
        if side == "tshark" and r.get("version"):
            lines.append(f"  ({r['version']})")
    if result.get("speedup") is not None:
        lines.append(
            f"netmon analyze topk is {result['speedup']:.1f}x faster than tshark (median wall time), "
            f"tshark's peak RSS {result['rss_ratio']:.1f}x ours"
        )
    return lines
