"""``netmon bench pipeline``: the whole pipeline, all default queries, through a real broker.

Three measurements on one generated capture per scenario (``baseline``, ``ddos``), in one process,
with a temporary broker on free ports:

- **drain**: the capture is replayed into Kafka, then the pipeline (every configured kind) runs
  with ``availableNow`` until it has processed everything; packets / wall time, Spark's start
  excluded (a warm-up drain runs first), and each part's share of the shared batch's time
  (decode, the counting pass, each kind) — where a batch's time goes;
- **plain-Spark baseline** (on by default, ``baseline=False`` / ``--no-baseline`` skips it): in
  the same run, on the same topic, after netmon's drain, the same questions written as a Spark
  user would without netmon (:mod:`bench.spark_baseline`: ``window()`` counts, sliding
  ``window()`` counts + ``row_number`` top-k, ``approx_count_distinct`` over sliding windows,
  Spark's stream-stream join), each its own ``availableNow`` query reading Kafka, all started
  together; packets / wall time until all have ended, timed as netmon's drain (after a warm-up
  drain, Spark's start excluded), and the ratio netmon packets/s / baseline packets/s;
- **ladder** (``--rates``): for each rate, a capture whose event time advances at that rate is
  replayed at it (``--pps``, timestamps rebased to now, so event time follows the wall clock)
  for ``--seconds`` while the pipeline runs with its processing-time trigger. Sampled every
  second: the Kafka lag (records in the topic the shared query has not read). A rate is
  *sustained* when the lag in the second half of the run does not grow by more than one trigger's
  worth of records. Latency: per committed traffic window, its commit time (the commit file's
  modification time) minus its end — the time from the last packet of the window being produced
  to its row being readable by ``read_results`` — p50 and p99. This includes the watermark delay
  and the window itself (the answer cannot exist earlier). With ``coverage`` (by default with
  ``manage``), what the pipeline read is read back from Kafka and every traffic, top-k and
  distinct row is checked against its exact answer (:mod:`bench.coverage`).
"""

from __future__ import annotations

import multiprocessing
import queue
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "bench_pipeline",
    "format_report",
    "model_check",
    "model_fields",
    "model_keys",
    "paced_run",
    "replay_into_topic",
    "status_bytes",
    "tail_workload",
]


def _lag(cfg: Any, query: Any) -> int | None:
    """Records in the packets topic the query has not read yet (None before its first progress)."""
    from kafka import KafkaConsumer, TopicPartition

    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return None
    read = progress["sources"][0].get("endOffset") or {}
    if isinstance(read, str):
        import json

        read = json.loads(read)
    done = {int(p): int(o) for p, o in (read.get(cfg.kafka.packets_topic) or {}).items()}
    from netmon.kafka_security import client_options

    consumer = KafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap, **client_options(cfg.kafka))
    try:
        parts = [TopicPartition(cfg.kafka.packets_topic, p) for p in range(cfg.kafka.partitions)]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    return sum(int(end) - done.get(tp.partition, 0) for tp, end in ends.items())


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _latencies(cfg: Any, since: float) -> list[tuple[float, float]]:
    """Per committed traffic window: its end and commit time - end (seconds), commits after ``since``."""
    import json

    import pyarrow.parquet as pq

    from netmon.results import COMMITS, results_dir

    out: list[tuple[float, float]] = []
    directory = results_dir(cfg, "traffic")
    for commit in sorted((directory / COMMITS).glob("*.json")):
        committed = commit.stat().st_mtime
        if committed < since:
            continue
        for name in json.loads(commit.read_text())["files"]:
            ends = pq.read_table(directory / name, columns=["window_end"])["window_end"].to_pylist()
            out += [(end.timestamp(), committed - end.timestamp()) for end in set(ends)]
    return out


def status_bytes(pid: int | None, field: str = "VmRSS") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` in bytes (Linux); None without the process."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return None


def _jvm_rss_mb(spark: Any) -> float | None:
    """The driver JVM's resident memory (Linux), when PySpark started it as a child process."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    rss = status_bytes(proc.pid if proc else None)
    return None if rss is None else rss / 1024**2


def _shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds.values()) or 1.0
    return {name: round(spent / total, 3) for name, spent in sorted(seconds.items())}


def replay_into_topic(cfg: Any, capture: Path) -> Any:
    """The packets topic made anew and ``capture`` replayed into it as fast as it goes, its last
    windows closed (``close_windows_s``) so a drain reports them; the replay's summary."""
    from ingest.replay import ReplayOptions, replay
    from netmon.kafka_admin import recreate_topic

    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    close = cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s
    return replay(
        capture,
        bootstrap=cfg.kafka.bootstrap,
        topic=cfg.kafka.packets_topic,
        options=ReplayOptions(close_windows_s=close),
        partitions=cfg.kafka.partitions,
        progress=False,
    )


def model_fields(cfg: Any) -> list[str]:
    """The record fields whose distinct values the cost model needs
    (``analytics.cost_model.workload_fields``)."""
    from analytics.cost_model import workload_fields

    return workload_fields(cfg)


def model_keys(cfg: Any) -> list[str]:
    """The keys the cost model counts sub-windows of (``analytics.cost_model.workload_keys``)."""
    from analytics.cost_model import workload_keys

    return workload_keys(cfg)


def _drain(
    spark: Any, cfg: Any, capture: Path, say: Callable[[str], None], *, warmup: bool, baseline: bool = True
) -> dict[str, Any]:
    from pipeline.job import SHARED_QUERY, start_pipeline

    summary = replay_into_topic(cfg, capture)
    rounds = []
    for label in ("warm-up", "timed") if warmup else ("timed",):
        shutil.rmtree(cfg.paths.data_dir, ignore_errors=True)
        say(f"drain ({label}): {summary.acknowledged:,} packets ...")
        started = time.perf_counter()
        pipeline = start_pipeline(spark, cfg, available_now=True)
        pipeline.await_termination(3600)
        wall = time.perf_counter() - started
        failed = pipeline.failed()
        pipeline.stop()
        if failed:
            raise RuntimeError(f"the pipeline failed: {failed}")
        shared = pipeline.batch_functions.get(SHARED_QUERY)
        rounds.append(
            {
                "wall_s": round(wall, 2),
                "packets_per_s": round(summary.acknowledged / wall),
                "share": _shares(getattr(shared, "total_seconds", {})),
            }
        )
    out = {"packets": summary.acknowledged, **rounds[-1], "warmup_wall_s": rounds[0]["wall_s"]}
    if baseline:
        base = _baseline_drain(spark, cfg, summary.acknowledged, say, warmup=warmup)
        out["baseline"] = base
        out["ratio"] = round(out["packets_per_s"] / max(1, base["packets_per_s"]), 2)
    return out


def _baseline_drain(
    spark: Any, cfg: Any, packets: int, say: Callable[[str], None], *, warmup: bool
) -> dict[str, Any]:
    """The plain-Spark baseline drained from the topic netmon's drain read, timed the same way."""
    from bench.spark_baseline import baseline_queries, drain_baseline

    checkpoints = Path(cfg.paths.data_dir) / "spark-baseline"
    walls = []
    for label in ("warm-up", "timed") if warmup else ("timed",):
        shutil.rmtree(checkpoints, ignore_errors=True)
        queries = baseline_queries(spark, cfg)
        say(f"plain-Spark baseline ({label}): {len(queries)} queries over {packets:,} packets ...")
        walls.append(drain_baseline(queries, checkpoints))
    return {
        "queries": [q.name for q in queries],
        "wall_s": round(walls[-1], 2),
        "packets_per_s": round(packets / walls[-1]),
        "warmup_wall_s": round(walls[0], 2),
    }


def _at_rate(
    spark: Any,
    cfg: Any,
    scenario: str,
    rate: int,
    seconds: float,
    work: Path,
    say: Callable[[str], None],
    constants: Any = None,
    coverage: bool = False,
) -> dict[str, Any]:
    import pyarrow as pa

    from bench.coverage import consumed_offsets, measure_coverage
    from ingest import read_records
    from ingest.generate import generate
    from ingest.replay import ReplayOptions
    from netmon.kafka_admin import recreate_topic
    from pipeline.job import SHARED_QUERY, start_pipeline

    packets = int(rate * seconds)
    capture = work / f"{scenario}-{rate}.pcap"
    generate(capture, scenario=scenario, packets=packets, duration_s=seconds)
    recreate_topic(cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions)
    shutil.rmtree(cfg.paths.data_dir, ignore_errors=True)
    pipeline = start_pipeline(spark, cfg)
    query = pipeline.queries[SHARED_QUERY]
    say(f"rate {rate:,} packets/s for {seconds:g} s ...")
    started_wall = time.time()
    # The producer is its own process, as a capture is in real use: in a thread it would share
    # the driver's interpreter lock with the batch functions and fall behind its rate.
    results: Any = _SPAWN.Queue()
    producer = _SPAWN.Process(
        target=_produce,
        args=(str(capture), cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions, rate),
        kwargs={"out": results},
        daemon=True,
    )
    producer.start()
    lags: list[tuple[float, int]] = []
    while producer.is_alive():
        time.sleep(1.0)
        pipeline.poll()
        lag = _lag(cfg, query)
        if lag is not None:
            lags.append((time.time() - started_wall, lag))
    produced_s = time.time() - started_wall
    producer.join(30)
    try:
        summary = results.get(timeout=30)
    except queue.Empty:
        pipeline.stop()
        raise RuntimeError(
            f"the replay at {rate:,} packets/s failed (exit code {producer.exitcode})"
        ) from None
    # Catch up: how long until everything produced is read.
    catch_up_started = time.time()
    while time.time() - catch_up_started < 120:
        pipeline.poll()
        lag = _lag(cfg, query)
        if lag == 0:
            break
        time.sleep(0.5)
    catch_up_s = time.time() - catch_up_started
    pipeline.poll()
    shared = pipeline.batch_functions.get(SHARED_QUERY)
    rss = _jvm_rss_mb(spark)
    phases = {name: _phases(q) for name, q in pipeline.queries.items()}
    pipeline.stop()
    # After the stop (the running batch committed, no other began): what the rows cover.
    offsets = consumed_offsets(pipeline.queries[SHARED_QUERY], cfg.kafka.packets_topic)
    seen = _pipeline_counts(pipeline)
    produced_pps = summary.get("acknowledged", 0) / max(produced_s, 1e-9)
    records = pa.Table.from_batches(list(read_records(capture)))  # read once: the model, the latency
    model = model_check(cfg, records, produced_pps, produced_s / 2, constants)
    growth = _lag_growth([(t, lag) for t, lag in lags if t >= produced_s / 2])
    # Lag is in Kafka messages (ReplayOptions.records_per_message packets each): bounded means
    # its least-squares growth over the second half stays within two triggers' worth of input
    # (a batch's sawtooth does not count), and what is left is read soon after the replay ends.
    per_message = ReplayOptions().records_per_message
    allowance = 2 * rate * cfg.pipeline.trigger_s / per_message
    sustained = (
        growth is not None and growth <= allowance and catch_up_s < 3 * max(1.0, cfg.pipeline.trigger_s) + 10
    )
    ended = _latencies(cfg, started_wall)
    latencies = [x for _, x in ended]
    ts_ns = np.asarray(records.column("ts").cast(pa.int64()).to_numpy(), np.int64)
    del records  # the capture's every column: gigabytes at a 5-minute rate, before the read-back
    produced = _produced_latencies(ended, ts_ns, summary, cfg.pipeline.watermark_s)
    from_sent = [x for end, x, _ in produced if end >= started_wall + WARM_S]
    from_closer = [x for end, _, x in produced if end >= started_wall + WARM_S]
    # Steady state: windows ending after the run's first WARM_S (the queries' first batches
    # carry Spark's and the JIT's start, once per pipeline start, not per load).
    steady = [x - cfg.pipeline.watermark_s for end, x in ended if end >= started_wall + WARM_S]
    processing = [x - cfg.pipeline.watermark_s for x in latencies]
    target = 3 * cfg.pipeline.trigger_s + cfg.pipeline.traffic_window_s
    # The target holds the produce-time figure beyond the watermark (the definition);
    # without the producer's record of what it sent when, the event-time one.
    p99 = _percentile(from_closer, 0.99) if from_closer else _percentile(steady, 0.99)
    stats = pipeline.stats.get("traffic")
    figures = {
        "rate": rate,
        "seconds": seconds,
        "produced": int(summary.get("acknowledged", 0)),
        "produce_s": round(produced_s, 1),
        # The rate the producer held: below ``rate``, the run measured less than it claims.
        "produced_pps": round(summary.get("acknowledged", 0) / max(produced_s, 1e-9)),
        # every record read: decoded, or skipped by the intake drop box (``sampled``)
        "processed_packets": None if stats is None else stats.packets + stats.sampled,
        "lag_samples": [(round(t, 1), lag) for t, lag in lags],
        "lag_max": max((lag for _, lag in lags), default=None),
        "lag_end": lags[-1][1] if lags else None,
        "lag_growth_second_half": None if growth is None else round(growth),
        "catch_up_s": round(catch_up_s, 1),
        "sustained": sustained,
        "latency_p50_s": _rounded(_percentile(latencies, 0.5)),
        "latency_p99_s": _rounded(_percentile(latencies, 0.99)),
        # The same without the watermark delay, a configured wait no processing can shorten:
        # what the target (3 triggers + the slide) is held against.
        "processing_p50_s": _rounded(_percentile(processing, 0.5)),
        "processing_p99_s": _rounded(_percentile(processing, 0.99)),
        "steady_p50_s": _rounded(_percentile(steady, 0.5)),
        "steady_p99_s": _rounded(_percentile(steady, 0.99)),
        # From when the producer sent the window's last record (the watermark delay included),
        # and from when it sent the record that let the watermark pass the window (after WARM_S)
        "produced_p50_s": _rounded(_percentile(from_sent, 0.5)),
        "produced_p99_s": _rounded(_percentile(from_sent, 0.99)),
        "closable_p50_s": _rounded(_percentile(from_closer, 0.5)),
        "closable_p99_s": _rounded(_percentile(from_closer, 0.99)),
        "latency_target_s": target,
        "meets_latency_target": p99 is not None and p99 <= target,
        "windows": len(latencies),
        "share": _shares(getattr(shared, "total_seconds", {})),
        "batch_phases_ms": phases,
        "driver_jvm_rss_mb": None if rss is None else round(rss),
        "model": model,
        **_drop_boxes(cfg),
    }
    if coverage:
        if offsets is None:
            figures["coverage"] = None  # no batch reported its offsets: nothing to compare
        else:
            figures["coverage"] = measure_coverage(cfg, offsets, say=say, pipeline=seen)
    return figures


def paced_run(
    spark: Any, cfg: Any, scenario: str, rate: int, seconds: float, work: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    """One paced run (the producer its own process at ``rate`` for ``seconds``, the pipeline
    live), as ``netmon bench pipeline`` makes each of its rates: its figures, and ``capture``,
    the generated capture it replayed. The pipeline's results stay under ``cfg``'s data
    directory (``bench calibrate --pipeline --paced`` reads its ``sys`` rows)."""
    figures = _at_rate(spark, cfg, scenario, rate, seconds, work, say)
    return {**figures, "capture": work / f"{scenario}-{rate}.pcap"}


def _pipeline_counts(pipeline: Any) -> dict[str, Any]:
    """What the shared query counted over the run: every record it read (decoded, or skipped by
    the intake box) and its late drops — the decode's late rule, and each kind's rows of a
    window already closed (``late_rows``)."""
    from pipeline.job import SHARED_QUERY

    shared = pipeline.batch_functions.get(SHARED_QUERY)
    totals = getattr(shared, "totals", None) or {}
    late = {"decode": int(totals.get("late", 0))}
    kinds = getattr(shared, "functions", None) or {}  # the kinds run inside the shared query
    for kind in ("traffic", "topk", "distinct"):
        function = kinds.get(kind)
        if function is not None:
            late[kind] = int(getattr(function, "late_rows", 0))
    records = totals.get("packets", 0) + totals.get("sampled", 0) if totals else None
    return {"records": records, "late": late}


def model_check(
    cfg: Any, records: Any, rate_pps: float, span_s: float, constants: Any, sys_dir: Path | None = None
) -> dict[str, Any]:
    """The cost model's estimates beside what the run measured (``netmon explain``'s comparison,
    issue 18's ±25 % check): per part — ``stage1`` (the tasks' read, decode and every kind's stage
    1) and each kind's driver part — its estimated CPU and the measured seconds per second of the
    ``sys`` rows of the last ``span_s`` seconds of batches, their ratio, and the state rows each
    way (measured: the rows each kind holds after the newest batch, the ``sys`` rows'
    ``<kind>_state_rows`` and ``join_state_rows``).

    Each estimate is asked of the traffic it is compared with (:func:`tail_workload`): the CPU at
    the workload of the capture's last ``span_s`` seconds, each kind's state at that of its last
    :func:`analytics.cost_model.fill_seconds` (the records its windows hold at the end). An
    attack scenario's mix changes over the capture; its average is not what the last window
    holds. ``sys_dir``: the run's ``sys`` results (default: ``cfg``'s; a kept run's copy, to ask a
    changed model again)."""
    from analytics.cost_model import DEFAULT_CONSTANTS, fill_seconds
    from analytics.explain import explain, part_fits
    from netmon.recent_results import newest_rows_by_sink
    from netmon.results import SHARED_QUERY, results_dir

    constants = constants or DEFAULT_CONSTANTS
    sys_rows = newest_rows_by_sink(sys_dir or results_dir(cfg, "sys"), span_s)
    # measured up to the newest batch (a kept run's rows are old: "now" would find none in span)
    times = [r["batch_time"] for rows in sys_rows.values() for r in rows if r.get("batch_time") is not None]
    now = max(times).timestamp() if times else None
    workload = tail_workload(cfg, records, rate_pps, span_s)
    report = explain(cfg, workload, constants, sys_rows=sys_rows, span_s=span_s, now=now)
    # each kind's state at the traffic it holds: its own longest window and the watermark
    at_span: dict[float, Any] = {}
    held: dict[str, Any] = {}
    for part in report["parts"]:
        span = fill_seconds(cfg, part)
        if span not in at_span:
            at_span[span] = explain(cfg, tail_workload(cfg, records, rate_pps, span), constants)["parts"]
        held[part] = at_span[span]
    measured = report["measured"].get("kinds", {})
    out: dict[str, Any] = {
        "constants": report["constants"],
        "batch_period_s": report["batch_period_s"],
        "span_s": span_s,
        "rate_pps": rate_pps,
    }
    # what a batch costs whatever it holds, per part: the term the per-tuple formulas leave out
    out["per_batch"] = part_fits(sys_rows.get(SHARED_QUERY, []))
    for part, est in report["parts"].items():
        got = measured.get(part, {})
        cpu = got.get("cpu")
        out[part] = {
            "estimated_cpu": est["cpu"],
            "measured_cpu": cpu,
            "ratio": None if cpu is None or not est["cpu"] else round(cpu / est["cpu"], 3),
            "estimated_rows": held[part].get(part, {}).get("state_rows", 0.0),
            "measured_rows": got.get("state_rows"),
        }
    return out


def tail_workload(cfg: Any, records: Any, rate_pps: float, seconds: float) -> Any:
    """The :class:`analytics.cost_model.Workload` of a paced replay's last ``seconds``: the
    capture's records of its last ``seconds`` of event time, at ``rate_pps`` (the rate the
    producer held over the whole capture) times their share of it (an attack's packets raise the
    rate of its part of the capture)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from analytics.cost_model import workload_of

    ts = pc.cast(records["ts"], pa.int64())
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    span_ns = max(1, last - first)
    cut = max(first, last - int(seconds * 1e9))
    tail = records.filter(pc.greater_equal(ts, cut))
    share = (tail.num_rows / max(1, records.num_rows)) / ((last - cut) / span_ns) if last > cut else 1.0
    return workload_of(tail, rate_pps * share, model_fields(cfg), model_keys(cfg))


def _drop_boxes(cfg: Any) -> dict[str, Any]:
    """What the resource manager applied over the run: the share of the shared query's batches
    with a drop box below 1 and the smallest fraction (from the ``sys`` rows; none without them)."""
    from netmon.results import SHARED_QUERY, read_results, results_dir

    table = read_results(results_dir(cfg, "sys"))
    if table is None or "sample_keep" not in table.column_names:
        return {}
    rows = [r for r in table.to_pylist() if r["query"] == SHARED_QUERY and r["sample_keep"] is not None]
    keeps = [r["sample_keep"] for r in rows]
    if not keeps:
        return {}
    intakes = [r.get("intake") or 1.0 for r in rows]
    return {
        "sampled_batches": round(sum(k < 1 for k in keeps) / len(keeps), 3),
        "sample_keep_min": min(keeps),
        # the intake drop box (before the decode): batches behind it and its smallest fraction
        "intake_batches": round(sum(x < 1 for x in intakes) / len(intakes), 3),
        "intake_min": min(intakes),
    }


_SPAWN = multiprocessing.get_context("spawn")
#: Seconds from a rate's start whose windows the steady-state latency leaves out.
WARM_S = 15.0


def _produce(capture: str, bootstrap: str, topic: str, partitions: int, rate: int, out: Any) -> None:
    """Replay ``capture`` at ``rate`` packets/s, timestamps rebased to now (a child process).

    Reports what was acknowledged, and when each record was handed to the producer: the wall
    time at the replay's start (``started_ns``, which the rebased timestamps start from, to the
    millisecond) and ``(seconds since, records so far)`` after every record batch.
    """
    from ingest.replay import ReplayOptions, ReplayProgress, replay

    sent: list[tuple[float, int]] = [(0.0, 0)]

    def note(p: ReplayProgress) -> None:
        sent.append((p.elapsed_s, p.packets))

    started_ns = time.time_ns()
    summary = replay(
        capture,
        bootstrap=bootstrap,
        topic=topic,
        options=ReplayOptions(pps=float(rate), rebase_time=True),
        partitions=partitions,
        progress=note,
    )
    out.put({"acknowledged": summary.acknowledged, "started_ns": started_ns, "sent": sent})


def _produced_latencies(
    ended: list[tuple[float, float]], ts: np.ndarray, summary: dict[str, Any], delay_s: float
) -> list[tuple[float, float, float]]:
    """Per committed window (``ended``: its end and commit time − end, event time in seconds;
    ``ts``: the replayed capture's timestamps, ns, in file order):
    its end, and its commit time minus the wall time the producer sent (a) the window's last
    record and (b) the first record past ``end + delay_s``, the one that let the watermark close
    it. The issue's end-to-end latency is "record produced → its result committed": measured
    from the event time instead (commit − end), it is off by how far event time runs behind the
    wall clock, which a paced replay of uneven traffic makes seconds (``ddos`` sends its attack's
    dense seconds at the same packet rate as the rest, so their event time falls behind)."""
    if not summary.get("sent") or summary.get("started_ns") is None:
        return []
    if not len(ts):
        return []
    shift_ns = int(summary["started_ns"]) - int(ts[0])  # rebase: the first record is "now"
    elapsed = np.array([t for t, _ in summary["sent"]], float)
    count = np.array([n for _, n in summary["sent"]], float)
    started_s = int(summary["started_ns"]) / 1e9
    out = []
    for end, latency in ended:
        committed = end + latency
        end_ns = round(end * 1e9) - shift_ns
        last = int(np.searchsorted(ts, end_ns, "left")) - 1  # the window's last record
        closer = int(np.searchsorted(ts, end_ns + round(delay_s * 1e9), "left"))  # moves it past
        if last < 0 or closer >= len(ts):
            continue  # closed by the replay's end, not by a record
        # record i was handed over once the producer's count passed it
        sent_last = started_s + float(np.interp(last + 1, count, elapsed))
        sent_closer = started_s + float(np.interp(closer + 1, count, elapsed))
        out.append((end, committed - sent_last, committed - sent_closer))
    return out


def _phases(query: Any) -> dict[str, float]:
    """Median milliseconds of each phase of Spark's progress reports over the query's last
    batches (``durationMs``: latestOffset, getBatch, queryPlanning, addBatch, walCommit,
    commitOffsets, triggerExecution), and how many batches they are."""
    ran = [p["durationMs"] for p in query.recentProgress if "addBatch" in (p.get("durationMs") or {})]
    out: dict[str, float] = {"batches": len(ran)}
    for phase in sorted({k for d in ran for k in d}):
        out[phase] = float(statistics.median(d.get(phase, 0) for d in ran))
    return out


def _lag_growth(samples: list[tuple[float, int]]) -> float | None:
    """How much the lag grew over ``samples`` ((seconds, lag) pairs), by a least-squares line."""
    if len(samples) < 3:
        return None
    t = np.array([x for x, _ in samples], float)
    lag = np.array([y for _, y in samples], float)
    slope = np.polyfit(t, lag, 1)[0]
    return float(slope * (t[-1] - t[0]))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def bench_pipeline(
    *,
    scenarios: tuple[str, ...] = ("baseline", "ddos"),
    packets: int = 1_000_000,
    duration_s: float = 300.0,
    rates: tuple[int, ...] = (),
    seconds: float = 60.0,
    say: Callable[[str], None] = lambda line: None,
    spark: Any = None,
    warmup: bool = True,
    baseline: bool = True,
    manage: bool = False,
    cpu_budget: float | None = None,
    constants: Any = None,
    coverage: bool | None = None,
    resources: dict[str, Any] | None = None,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Drain throughput (and the rate ladder) per scenario; see the module docstring.

    ``constants``: the cost model's (``analytics.cost_model.CostConstants``, the user's
    calibration) for each rate's estimates-vs-measured check (``model`` in its figures); the
    built-in ones by default.

    ``spark``: a session to use (and leave running); by default one is built and stopped.
    ``warmup``: drain once untimed first (the JVM's first jobs are slow).
    ``baseline``: also drain the plain-Spark baseline (:mod:`bench.spark_baseline`) after netmon.
    ``manage``: run the resource manager (``[resources] manage``; ``cpu_budget`` its budget), to
    compare lag with and without drop boxes at the same rates; each rate then reports the
    fractions its batches applied (from the ``sys`` rows).
    ``coverage``: after each rate, read back from Kafka what the pipeline consumed and check every
    traffic, top-k and distinct row against its exact answer (:mod:`bench.coverage`); None (the
    default): with ``manage`` only. ``resources``: more ``[resources]`` settings for the run
    (``keep_min``, ``intake_min``, ...). ``keep``: run in this directory and leave it: the
    captures and each rate's ``sys`` rows (``sys-<scenario>-<rate>/``).
    """
    from bench.ingest import temporary_broker
    from ingest.generate import generate
    from netmon.config import load_config
    from pipeline.session import build_session

    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    work = keep or Path(tempfile.mkdtemp(prefix="netmon-bench-pipeline-"))
    out: dict[str, Any] = {"packets": packets, "duration_s": duration_s, "scenarios": {}}
    try:
        with temporary_broker(work / "broker") as bootstrap:
            cfg = load_config(None, env={}).replace(
                paths={"state_dir": work / "state", "data_dir": work / "data"},
                kafka={"bootstrap_servers": bootstrap, "packets_topic": "bench.packets"},
                pipeline={"publish_results": False},
            )
            if manage or cpu_budget is not None or resources:
                cfg = cfg.replace(
                    resources={
                        "manage": manage,
                        **({"cpu_budget": cpu_budget} if cpu_budget is not None else {}),
                        **(resources or {}),
                    }
                )
            out["manage"] = manage
            check = manage if coverage is None else coverage
            own = spark is None
            session = build_session(cfg, "netmon-bench-pipeline", ui=False) if own else spark
            for scenario in scenarios:
                capture = work / f"{scenario}.pcap"
                say(f"generating {packets:,} {scenario} packets over {duration_s:g} s ...")
                generate(capture, scenario=scenario, packets=packets, duration_s=duration_s)
                entry: dict[str, Any] = {
                    "drain": _drain(session, cfg, capture, say, warmup=warmup, baseline=baseline)
                }
                entry["rates"] = []
                for r in rates:
                    entry["rates"].append(
                        _at_rate(session, cfg, scenario, r, seconds, work, say, constants, check)
                    )
                    if keep is not None:
                        _keep_sys(cfg, keep / f"sys-{scenario}-{r}")
                held = [r["rate"] for r in entry["rates"] if r["sustained"]]
                entry["sustained_pps"] = max(held) if held else None
                out["scenarios"][scenario] = entry
            if own:
                session.stop()
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return out


def _keep_sys(cfg: Any, to: Path) -> None:
    """A copy of the run's ``sys`` results (the next rate's run starts from an empty data dir)."""
    from netmon.results import results_dir

    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(results_dir(cfg, "sys"), to)


def format_report(result: dict[str, Any]) -> list[str]:
    """The figures as aligned text lines."""
    from bench.coverage import format_coverage

    lines = [
        f"netmon bench pipeline: {result['packets']:,} packets over {result['duration_s']:g} s per scenario"
    ]
    for scenario, entry in result["scenarios"].items():
        d = entry["drain"]
        lines.append(
            f"{scenario}: drain {d['packets']:,} packets in {d['wall_s']:.1f} s = "
            f"{d['packets_per_s']:,} packets/s (warm-up run {d['warmup_wall_s']:.1f} s)"
        )
        if "baseline" in d:
            b = d["baseline"]
            lines.append(
                f"  plain-Spark baseline: {len(b['queries'])} queries drain it in {b['wall_s']:.1f} s = "
                f"{b['packets_per_s']:,} packets/s (warm-up run {b['warmup_wall_s']:.1f} s); "
                f"netmon / baseline = {d['ratio']:.2f}x"
            )
        lines.append(
            "  share of the shared batch: " + ", ".join(f"{k} {v:.0%}" for k, v in d["share"].items())
        )
        for r in entry["rates"]:
            lines.append(
                f"  {r['rate']:>8,} packets/s for {r['seconds']:g} s (the producer held "
                f"{r['produced_pps']:,}): lag max {r['lag_max']}, "
                f"end {r['lag_end']}, growth over the second half {r['lag_growth_second_half']}, "
                f"catch-up {r['catch_up_s']} s, "
                f"{'sustained' if r['sustained'] else 'NOT sustained'}; latency p50 {r['latency_p50_s']} s, "
                f"p99 {r['latency_p99_s']} s over {r['windows']} windows (beyond the watermark delay: "
                f"p50 {r['processing_p50_s']} s, p99 {r['processing_p99_s']} s; after the first "
                f"{WARM_S:g} s: p50 {r['steady_p50_s']} s, p99 {r['steady_p99_s']} s); "
                f"from the record produced: p50 {r.get('produced_p50_s')} s, p99 "
                f"{r.get('produced_p99_s')} s, beyond the watermark p50 {r.get('closable_p50_s')} s, "
                f"p99 {r.get('closable_p99_s')} s, target {r['latency_target_s']:g} s "
                f"{'met' if r['meets_latency_target'] else 'NOT met'}; "
                f"driver JVM {r['driver_jvm_rss_mb']} MB"
                + (
                    f"; drop boxes in {r['sampled_batches']:.0%} of batches, smallest fraction "
                    f"{r['sample_keep_min']:g}; intake box in {r.get('intake_batches', 0):.0%}, "
                    f"smallest {r.get('intake_min', 1):g}"
                    if "sampled_batches" in r
                    else ""
                )
            )
            for name, phases in sorted(r.get("batch_phases_ms", {}).items()):
                parts = ", ".join(f"{k} {v:g}" for k, v in phases.items() if k != "batches")
                lines.append(f"    query {name}: {phases.get('batches', 0):g} batches, median ms: {parts}")
            model = r.get("model") or {}
            cells = [
                f"{part} {m['measured_cpu']:.3f}/{m['estimated_cpu']:.3f} = {m['ratio']:.2f}"
                for part, m in model.items()
                if isinstance(m, dict) and "ratio" in m and m["ratio"] is not None
            ]
            if cells:
                lines.append("    measured / estimated CPU s/s (cost model): " + ", ".join(cells))
            rows = [
                f"{part} {m['measured_rows']:,.0f}/{m['estimated_rows']:,.0f}"
                f" = {m['measured_rows'] / m['estimated_rows']:.2f}"
                for part, m in model.items()
                if isinstance(m, dict) and m.get("measured_rows") and m.get("estimated_rows")
            ]
            if rows:
                lines.append("    measured / estimated state rows (cost model): " + ", ".join(rows))
            fits = model.get("per_batch") or {}
            if fits:
                lines.append(
                    "    seconds per batch = fixed + per packet: "
                    + ", ".join(
                        f"{part} {f['fixed_s'] * 1000:.0f} ms + {f['per_packet_s'] * 1e9:.0f} ns"
                        for part, f in fits.items()
                    )
                )
            if r.get("coverage"):
                lines += format_coverage(r["coverage"])
            elif "coverage" in r:
                lines.append("    coverage: not measured (no batch reported the offsets it read)")
        if entry["rates"]:
            lines.append(f"  sustained: {entry['sustained_pps']}")
    return lines
