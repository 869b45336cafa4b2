"""``netmon bench join``: the streaming join under load, unshed and with CF / PNI at a CPU budget.

Each run (an item of ``--strategies``), in one process and one Spark session, on a fresh topic of
the same broker: replay a capture (default ``samples/mixed-small.pcap``, looped, timestamps
rebased to now) at ``--pps`` packets per second for ``--seconds``, while the pipeline runs the
``joins`` kind with one link query per strategy of the run (``dst_port=443`` ⋈ ``dst_port=80`` on
``src_ip``, T = ``--window``: many-to-many, the case where shedding matters) on the shared query
and the live shedding controller at ``--budget`` (the ``shedding`` kind). Every second it samples
the shared query's progress: batch durations and the Kafka lag (messages of
``--records-per-message`` packets not yet read by a finished batch); the controller's statistics
give each query's operator time and fractions.

A run named ``pni+cf`` holds both strategies as two queries of one pipeline: the same packets,
the same micro-batches, the same machine conditions and one budget, of which each query has an
equal fixed share (``cpu_share``; by default the controller would divide it in proportion to
the queries' measured unshed cost, which differs between two copies of one join by the noise of
their timings). That is
the comparison of seed 003's Theorem 3 (PNI's output ≥ CF's at the same budget) measured in one
run; separate runs one after the other differ by start-up (the first run warms the JVM) and by
whatever else the machine does meanwhile.

A rate the unshed join cannot sustain shows its batch durations and lag growing through the run;
with PNI the batch stays near the budget and the lag stays bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from netmon.kafka_security import client_options

__all__ = ["bench_join", "format_report", "query_name", "run_strategies"]

_SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "mixed-small.pcap"


def run_strategies(run: str) -> tuple[str, ...]:
    """The strategies of one ``--strategies`` item: ``"pni"`` or ``"pni+cf"`` (one pipeline).

    >>> run_strategies("pni+cf")
    ('pni', 'cf')
    """
    from analytics.join_cost import STRATEGIES

    parts = tuple(p.strip() for p in run.split("+") if p.strip())
    for p in parts:
        if p not in STRATEGIES:
            raise ValueError(f"--strategies {run!r}: expected one of {', '.join(STRATEGIES)}, got {p!r}")
    if not parts or len(set(parts)) != len(parts):
        raise ValueError(f"--strategies {run!r}: expected distinct strategies joined by '+'")
    return parts


def query_name(strategy: str) -> str:
    """The benchmark's join query of one strategy."""
    return f"web_{strategy}"


def _config(
    base: Any,
    data_dir: Path,
    topic: str,
    strategies: tuple[str, ...],
    *,
    budget: float,
    trigger_s: float,
    window_s: float,
    bootstrap: str,
    smoothing: float,
    max_step: float,
    budget_scope: str = "batch",
) -> Any:
    """``base`` with one link join query per strategy as ``[[queries.join]]`` and the benchmark's
    ``[shedding]``."""
    from netmon.config import JoinQuery, SheddingConfig

    queries = tuple(
        JoinQuery(
            name=query_name(strategy),
            query="link",
            left="dst_port=443",
            right="dst_port=80",
            key="src_ip",
            window_s=window_s,
            strategy=strategy,
            # A paired run compares the strategies at the same budget: equal, fixed shares.
            cpu_share=1 / len(strategies) if len(strategies) > 1 else None,
        )
        for strategy in strategies
    )
    cfg = base.replace(
        paths={"data_dir": data_dir},
        kafka={"packets_topic": topic, "bootstrap_servers": bootstrap},
        pipeline={"trigger_s": trigger_s, "publish_results": False},
        queries={"join": queries},
    )
    # The whole section: the defaults but for the benchmark's controller settings.
    shedding = SheddingConfig(
        cpu_budget=budget, budget_scope=budget_scope, smoothing=smoothing, max_step=max_step
    )
    return dataclasses.replace(cfg, shedding=shedding)


def _end_offsets(consumer: Any, topic: str, partitions: int) -> int:
    """Messages in ``topic`` so far (sum of the partitions' end offsets)."""
    from kafka import TopicPartition

    ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    return int(sum(ends.values()))


def _run_strategy(
    spark: Any, cfg: Any, capture: Path, *, pps: float, seconds: float, rpm: int, say: Any
) -> dict[str, Any]:
    from ingest.replay import ReplayOptions, replay
    from netmon.kafka_admin import recreate_topic
    from netmon.results import SHARED_QUERY, read_results, results_dir
    from pipeline.job import start_pipeline

    recreate_topic(
        cfg.kafka.bootstrap, cfg.kafka.packets_topic, cfg.kafka.partitions, security=client_options(cfg.kafka)
    )
    # The joins run on the shared query; the shedding kind's listener runs their controller.
    pipeline = start_pipeline(spark, cfg, kinds=("joins", "shedding"))
    shared = pipeline.batch_functions[SHARED_QUERY]
    summary: dict[str, Any] = {}

    def produce() -> None:
        opts = ReplayOptions(
            pps=pps, loop=10_000, limit=round(pps * seconds), rebase_time=True, records_per_message=rpm
        )
        summary["replay"] = replay(
            capture,
            bootstrap=cfg.kafka.bootstrap,
            topic=cfg.kafka.packets_topic,
            options=opts,
            partitions=cfg.kafka.partitions,
            progress=False,
        )

    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=cfg.kafka.bootstrap, client_id="netmon-bench-join", **client_options(cfg.kafka)
    )
    samples: list[dict[str, Any]] = []
    lag: list[tuple[float, int]] = []
    began = time.monotonic()
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        seen, consumed = -1, 0
        while time.monotonic() - began < seconds:
            time.sleep(1.0)
            error = pipeline.failed()
            if error:
                raise RuntimeError(error)
            for p in pipeline.queries[SHARED_QUERY].recentProgress:
                if int(p["batchId"]) > seen:
                    seen = int(p["batchId"])
                    consumed += int(p["numInputRows"] or 0)
                    figures = shared.figures(seen)
                    if int(p["numInputRows"] or 0):
                        samples.append(
                            {
                                "t_s": round(time.monotonic() - began, 1),
                                "batch": seen,
                                "ms": int(p["durationMs"]["triggerExecution"]),
                                "packets": figures.packets if figures is not None else None,
                            }
                        )
            # Lag: messages in the topic not yet read by a finished batch.
            end = _end_offsets(consumer, cfg.kafka.packets_topic, cfg.kafka.partitions)
            lag.append((round(time.monotonic() - began, 1), end - consumed))
    finally:
        consumer.close()
        pipeline.stop()
    table = read_results(results_dir(cfg, "joins"), columns=["query"])
    results = {q.name: 0 for q in cfg.queries.join}
    if table is not None:
        for row in table.group_by("query").aggregate([("query", "count")]).to_pylist():
            results[row["query"]] = int(row["query_count"])
    say(f"  {len(samples)} batches, results " + ", ".join(f"{q} {n:,}" for q, n in results.items()))
    produced = summary["replay"].produced if "replay" in summary else None
    return {"samples": samples, "lag": lag, "results": results, "produced": produced}


def _stats(cfg: Any) -> list[dict[str, Any]]:
    """The controller's per-batch rows (the ``shedding`` kind's committed results), oldest first;
    times as ISO text (the bench's ``--json``)."""
    from netmon.results import read_results, results_dir

    table = read_results(results_dir(cfg, "shedding"))
    if table is None:
        return []
    rows = table.sort_by("batch_id").to_pylist()
    return [{k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()} for row in rows]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _summary(
    strategy: str, run_name: str, run: dict[str, Any], all_stats: list[dict[str, Any]], budget: float
) -> dict[str, Any]:
    """One strategy's figures; a paired run's batch durations and lag are its pipeline's."""
    stats = [r for r in all_stats if r.get("query") == query_name(strategy)]
    ms = [s["ms"] for s in run["samples"]]
    third = max(1, len(ms) // 3)
    lag = [m for _, m in run["lag"]]
    lag_third = max(1, len(lag) // 3)
    util = [float(r["utilisation"]) for r in stats if r.get("utilisation") is not None]
    util_third = max(1, len(util) // 3)
    whole = [float(r["batch_utilisation"]) for r in stats if r.get("batch_utilisation") is not None]
    whole_third = max(1, len(whole) // 3)
    # Steady state: the batches of the run's second half (the first carry start-up and catch-up).
    half = stats[len(stats) // 2 :]
    return {
        "strategy": strategy,
        "run": run_name,
        "budget": budget,
        "batches": len(ms),
        "batch_ms_first_third": _median(ms[:third]),
        "batch_ms_last_third": _median(ms[-third:]),
        "batch_ms_max": max(ms) if ms else None,
        "lag_messages_first_third": _median(lag[:lag_third]),
        "lag_messages_last_third": _median(lag[-lag_third:]),
        "lag_messages_end": lag[-1] if lag else None,
        "packets_processed": sum(s["packets"] or 0 for s in run["samples"]),
        "packets_replayed": run["produced"],
        "results": run["results"][query_name(strategy)],
        "results_second_half": sum(int(r["results"] or 0) for r in half),
        "packets_second_half": sum(int(r["n_left"] or 0) + int(r["n_right"] or 0) for r in half),
        "operator_s": round(sum(float(r["busy_s"] or 0) for r in stats), 3),
        "operator_s_second_half": round(sum(float(r["busy_s"] or 0) for r in half), 3),
        # The strategies' efficiency where their operator times differ (a paired run's queries
        # have equal budget shares in the controller's model, not necessarily in fact).
        "results_per_operator_s": round(run["results"][query_name(strategy)] / busy_total)
        if (busy_total := sum(float(r["busy_s"] or 0) for r in stats)) > 0
        else None,
        "utilisation_median": _median(util),
        "utilisation_last_third": _median(util[-util_third:]),
        "batch_utilisation_median": _median(whole),
        "batch_utilisation_last_third": _median(whole[-whole_third:]),
        "x_last": [round(float(stats[-1]["next_x_left"]), 4), round(float(stats[-1]["next_x_right"]), 4)]
        if stats
        else None,
        "samples": run["samples"],
        "lag": run["lag"],
        "controller": [
            {
                k: r.get(k)
                for k in (
                    "batch_id",
                    "utilisation",
                    "busy_s",
                    "batch_utilisation",
                    "batch_factor",
                    "x_left",
                    "x_right",
                    "results",
                    "unshed_estimate",
                )
            }
            for r in stats
        ],
    }


def bench_join(
    *,
    capture: str | Path | None = None,
    bootstrap: str | None = None,
    strategies: tuple[str, ...] = ("none", "pni", "pni+cf"),
    pps: float = 3000.0,
    seconds: float = 60.0,
    budget: float = 0.8,
    trigger_s: float = 5.0,
    window_s: float = 2.0,
    records_per_message: int = 200,
    smoothing: float = 0.5,
    max_step: float = 0.25,
    budget_scope: str = "batch",
    say: Any = print,
) -> dict[str, Any]:
    """Run the pipeline's join under load once per item of ``strategies`` (``"pni+cf"``: both in
    one pipeline); one summary per strategy and run. ``capture`` None: ``samples/mixed-small.pcap``."""
    from bench.ingest import temporary_broker
    from netmon.config import load_config
    from pipeline.session import build_session

    capture = Path(capture) if capture is not None else _SAMPLE
    out: dict[str, Any] = {
        "capture": str(capture),
        "pps": pps,
        "seconds": seconds,
        "budget": budget,
        "budget_scope": budget_scope,
        "trigger_s": trigger_s,
        "window_s": window_s,
        "smoothing": smoothing,
        "max_step": max_step,
        "records_per_message": records_per_message,
        "runs": [],
    }
    runs = [(item, run_strategies(item)) for item in strategies]
    with tempfile.TemporaryDirectory(prefix="netmon-bench-join-") as tmp, contextlib.ExitStack() as stack:
        if bootstrap is None:
            say("starting a temporary Kafka broker ...")
            bootstrap = stack.enter_context(temporary_broker(Path(tmp) / "state"))
        base = load_config(None, env={})
        base = base.replace(paths={"state_dir": Path(tmp) / "state", "data_dir": Path(tmp) / "data"})
        say("starting Spark ...")
        spark = build_session(base, "netmon-bench-join", master="local[2]", ui=False)
        for item, members in runs:
            say(f"{item}: replaying {pps:,.0f} packets/s for {seconds:g} s ...")
            slug = "-".join(members)
            cfg = _config(
                base,
                Path(tmp) / slug,
                f"netmon.bench.join.{slug}",
                members,
                budget=budget,
                trigger_s=trigger_s,
                window_s=window_s,
                bootstrap=bootstrap,
                smoothing=smoothing,
                max_step=max_step,
                budget_scope=budget_scope,
            )
            run = _run_strategy(
                spark, cfg, capture, pps=pps, seconds=seconds, rpm=records_per_message, say=say
            )
            stats = _stats(cfg)
            out["runs"].extend(_summary(strategy, item, run, stats, budget) for strategy in members)
        spark.stop()
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_report(result: dict[str, Any]) -> list[str]:
    lines = [
        f"capture {result['capture']} at {result['pps']:,.0f} packets/s for {result['seconds']:g} s per "
        f"strategy; trigger {result['trigger_s']:g} s, budget {result['budget']:.0%} of it "
        f"({result.get('budget_scope', 'batch')}), T = {result['window_s']:g} s",
        f"{'strategy':<13} {'batches':>7} {'batch ms 1st/last third':>24} {'lag msgs 1st/last third':>24} "
        f"{'packets':>9} {'results':>10} {'2nd half':>10} {'op s':>7} {'op util med/last':>17} "
        f"{'batch util med/last':>20} {'x at end':>12}",
    ]
    for r in result["runs"]:
        run = r.get("run", r["strategy"])
        name = r["strategy"] if run == r["strategy"] else f"{r['strategy']} ({run})"
        x = "-" if r["x_last"] is None else f"{r['x_last'][0]:.3f}/{r['x_last'][1]:.3f}"
        batch = f"{r['batch_ms_first_third']}/{r['batch_ms_last_third']}"
        lag = f"{r['lag_messages_first_third']}/{r['lag_messages_last_third']}"
        util = f"{_fmt(r['utilisation_median'])}/{_fmt(r['utilisation_last_third'])}"
        whole = f"{_fmt(r.get('batch_utilisation_median'))}/{_fmt(r.get('batch_utilisation_last_third'))}"
        lines.append(
            f"{name:<13} {r['batches']:>7} {batch:>24} {lag:>24} {r['packets_processed']:>9,} "
            f"{r['results']:>10,} {r.get('results_second_half', 0):>10,} {r.get('operator_s', 0):>7.1f} "
            f"{util:>17} {whole:>20} {x:>12}"
        )
    return lines
