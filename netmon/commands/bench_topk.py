"""``netmon bench topk``: the streaming top-k (Algorithm 6) vs Spark's exact sliding window.

Both run in the same process and session on the same input: a generated capture
(``heavy-hitter-burst``) decoded once into time-ordered Parquet files, read as a file stream one
file per micro-batch with the pipeline's watermark — so the figures measure the top-k operators,
not Kafka or the wire-format decoder (``netmon bench ingest`` covers those).

- **sub-window top-k**: ``pipeline.topk.build_topk`` — native tumbling counts per sub-window ``b``,
  then the ``transformWithStateInPandas`` merge, written to Parquet;
- **sliding baseline**: ``pipeline.topk.build_sliding_counts`` — ``window(ts, N, b)`` counts per
  key (each packet counted in ``N/b`` windows), then ``top_k_per_window`` as a batch step in
  ``foreachBatch``, written to Parquet.

Throughput = packets / wall time from ``start()`` to the end of the run (the first batch's start-up
included, after one untimed batch aggregation over the input warms the JVM); "steady" excludes the
first batch. State = Spark's state-operator metrics.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from netmon.config import Config, TopKQuery

__all__ = ["bench_topk", "command", "format_report"]

_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


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
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Measure both queries on one input; the figures as a dict (see ``format_report``).

    ``shuffle_partitions`` overrides ``[spark] shuffle_partitions``; ``conf`` sets Spark SQL
    options on the session (both queries) before they start.
    """
    from pyspark.sql import functions as F

    from ingest.generate import generate
    from pipeline.session import build_session
    from pipeline.topk import build_sliding_counts, build_topk, top_k_per_window

    query = TopKQuery(name="bench", key=key, window_s=sub_window_s * ratio, sub_window_s=sub_window_s, k=k)
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

        def start_subwindow() -> Any:
            return (
                build_topk(packets_stream(), (query,))
                .writeStream.format("parquet")
                .option("path", str(work / "out-subwindow"))
                .option("checkpointLocation", str(work / "ck-subwindow"))
                .trigger(availableNow=True)
                .start()
            )

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

        say(f"sub-window top-k: N = {query.window_s:g} s, b = {sub_window_s:g} s, k = {k}, key {key} ...")
        ours = _run("sub-window top-k (Alg. 6)", start_subwindow)
        say("sliding-window baseline ...")
        base = _run("exact sliding window", start_sliding)
        reports = spark.read.parquet(str(work / "out-subwindow")).select("window_end").distinct().count()
        windows = spark.read.parquet(str(work / "out-sliding")).select("window_end").distinct().count()
        spark.stop()
    return {
        "packets": n,
        "duration_s": duration_s,
        "query": {"key": key, "weight": "packets", "N_s": query.window_s, "b_s": sub_window_s, "k": k},
        "files": files,
        "shuffle_partitions": cfg.spark.shuffle_partitions,
        "master": cfg.spark.master,
        "changelog_checkpointing": changelog,
        "conf": dict(conf or {}),
        "subwindow": {**ours, "reports": reports},
        "sliding": {**base, "windows": windows},
        "ratio": round(ours["packets_per_s"] / base["packets_per_s"], 2),
        "steady_ratio": round(ours["steady_packets_per_s"] / max(1, base["steady_packets_per_s"]), 2),
    }


def format_report(result: dict[str, Any]) -> list[str]:
    q = result["query"]
    lines = [
        f"input: {result['packets']:,} packets over {result['duration_s']:g} s of event time, "
        f"{result['files']} micro-batches; master {result['master']}, "
        f"{result['shuffle_partitions']} shuffle partitions, RocksDB changelog checkpointing "
        f"{result['changelog_checkpointing']}",
        f"query: top {q['key']} by {q['weight']}, N = {q['N_s']:g} s, b = {q['b_s']:g} s "
        f"(N/b = {q['N_s'] / q['b_s']:g}), k = {q['k']}",
        "",
        f"{'':28}{'wall s':>9}{'packets/s':>12}{'steady/s':>11}{'batch ms':>10}"
        f"{'state rows':>12}{'state MB':>10}{'outputs':>9}",
    ]
    for side, outputs in (("subwindow", "reports"), ("sliding", "windows")):
        r = result[side]
        lines.append(
            f"{r['name']:28}{r['wall_s']:>9.1f}{r['packets_per_s']:>12,}{r['steady_packets_per_s']:>11,}"
            f"{r['mean_batch_ms']:>10,}{r['state_rows_max']:>12,}{r['state_bytes_max'] / 1e6:>10.2f}"
            f"{r[outputs]:>9,}"
        )
    lines += [
        "",
        f"throughput ratio (sub-window / sliding): {result['ratio']:.2f}x overall, "
        f"{result['steady_ratio']:.2f}x after the first batch",
        "state at the end, per operator (rows, bytes):",
    ]
    for side in ("subwindow", "sliding"):
        ops = ", ".join(
            f"{o['operator']} {o['rows']:,} / {o['bytes']:,}" for o in result[side]["state_final"]
        )
        lines.append(f"  {result[side]['name']}: {ops}")
    return lines


@click.command("topk")
@click.option("--packets", type=int, default=1_000_000, show_default=True, help="Generated capture's size.")
@click.option("--duration", "duration_s", type=float, default=600.0, show_default=True, help="Its span, s.")
@click.option("--sub-window", "sub_window_s", type=float, default=5.0, show_default=True, help="b, seconds.")
@click.option("--ratio", type=int, default=60, show_default=True, help="N/b: sub-windows per window.")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Top-k list length per sub-window.")
@click.option("--key", default="src_ip", show_default=True, help="Record field(s) of the key.")
@click.option("--files", type=int, default=5, show_default=True, help="Input files = micro-batches.")
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Use this capture.")
@click.option("--shuffle-partitions", type=int, help="Override [spark] shuffle_partitions.")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark SQL option (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.pass_obj
def command(cfg: Config, as_json: bool, file_: str | None, conf: tuple[str, ...], **options: Any) -> None:
    """Packets/s of the sub-window top-k in Spark vs Spark's exact sliding window, same input."""
    pairs = dict(item.partition("=")[::2] for item in conf)
    if any(not key or not value for key, value in pairs.items()):
        raise click.BadParameter("expected KEY=VALUE", param_hint="--conf")
    try:
        result = bench_topk(
            cfg, capture=file_, conf=pairs, say=lambda line: click.echo(line, err=True), **options
        )
    except Exception as exc:  # noqa: BLE001 - one line, whatever failed (Spark, file)
        click.echo(f"netmon bench topk: error: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(format_report(result)))
