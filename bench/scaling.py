"""``netmon bench scaling``: one drain of the shared query on ``local[2]`` and on a local Spark
standalone cluster of 1, 2, … workers, per topic of 1, 2, 4 partitions (docs/performance.md,
"Scale-out on this machine").

The run, all on this host, in a temporary directory removed at the end:

- a cluster of its own (:class:`netmon.cluster.LocalCluster`, what ``netmon cluster up`` starts):
  one Kafka node (the drains only read the topic, and more Kafka JVMs would take CPU from Spark)
  and ``workers`` Spark workers of one core each, on free ports; it is stopped (and its storage
  removed) at the end, on an error or Ctrl-C too;
- one generated capture (:func:`ingest.generate.generate`, ``baseline``, seed 4, 60 s of event
  time) replayed into one topic per partition count, with a watermark message past its end so the
  last windows close;
- per round, per topic, per setup, one ``availableNow`` drain of the shared query (traffic,
  top-k, distinct; ``publish_results`` off; ``shuffle_partitions`` = max(2, partitions)) in a
  fresh driver process, so no setup inherits another's JVM, JIT or Python workers. The setups are
  ``local[2]`` (the baseline) and the cluster's master with ``spark.cores.max`` = k for k = 1 …
  ``workers`` ("k workers": one 1-core executor on each of k workers).

Per drain: the time from ``start_pipeline`` to the end of ``await_termination`` (the driver's
start is not in it), packets/s, the ratio of that time to ``local[2]``'s over the same topic in the
same round (above 1: slower), the 1-minute load average at the drain's start and end, the
executors the application had, and whether the traffic results counted every packet generated
(a drain that did not is flagged in the report).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BASELINE",
    "KINDS",
    "Setup",
    "add_ratios",
    "bench_scaling",
    "drain_once",
    "format_report",
    "incomplete",
    "setups",
]

#: the setup every other is compared with, in the same round over the same topic
BASELINE = "local[2]"
#: the shared query's kinds: what the drains run
KINDS = ("traffic", "topk", "distinct")
#: Spark's application name of the drains (the master's record shows it)
APP_NAME = "netmon-bench-scaling"
#: a fresh interpreter per driver: a forked one would share this process's state (and locks)
_SPAWN = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Setup:
    """Where a drain runs: a name for the report, the master URL and ``spark.cores.max``."""

    name: str
    master: str
    cores_max: int | None = None


def setups(master_url: str, workers: int) -> list[Setup]:
    """``local[2]``, then the cluster's master with 1 … ``workers`` cores (one per worker).

    >>> [s.name for s in setups("spark://127.0.0.1:7077", 2)]
    ['local[2]', '1 worker', '2 workers']
    >>> setups("spark://h:1", 1)[1]
    Setup(name='1 worker', master='spark://h:1', cores_max=1)
    """
    out = [Setup(BASELINE, BASELINE)]
    out += [Setup(f"{k} worker{'s' if k > 1 else ''}", master_url, k) for k in range(1, workers + 1)]
    return out


def add_ratios(drains: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each drain with ``ratio_to_local``: its time / the time of the ``local[2]`` drain of the
    same round and partitions (None without that drain).

    >>> rows = [{"round": 1, "partitions": 2, "setup": "local[2]", "seconds": 10.0},
    ...         {"round": 1, "partitions": 2, "setup": "1 worker", "seconds": 15.0}]
    >>> [r["ratio_to_local"] for r in add_ratios(rows)]
    [1.0, 1.5]
    """
    base = {(d["round"], d["partitions"]): d["seconds"] for d in drains if d["setup"] == BASELINE}
    out = []
    for d in drains:
        local = base.get((d["round"], d["partitions"]))
        ratio = round(d["seconds"] / local, 3) if local else None
        out.append({**d, "ratio_to_local": ratio})
    return out


def incomplete(drains: Sequence[dict[str, Any]], packets: int) -> list[dict[str, Any]]:
    """The drains whose traffic results did not count exactly ``packets``."""
    return [d for d in drains if d.get("counted") != packets]


# -- one drain, in its own driver process ----------------------------------------------------------


def drain_once(spark: Any, cfg: Any, *, timeout_s: float = 3600.0) -> dict[str, Any]:
    """Drain what the packets topic holds with ``availableNow`` into a fresh data directory:
    seconds from ``start_pipeline`` to the end of ``await_termination``, the 1-minute load average
    at both ends, the application's executors (0: the tasks ran in the driver, ``local[…]``) and
    the packets the traffic results counted."""
    from netmon.results import read_results, results_dir
    from pipeline.job import start_pipeline

    shutil.rmtree(cfg.paths.data_dir, ignore_errors=True)
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    pipeline = start_pipeline(spark, cfg, available_now=True)
    try:
        pipeline.await_termination(timeout_s)
        seconds = time.perf_counter() - started
        load_end = os.getloadavg()[0]
        failed = pipeline.failed()
        if failed:
            raise RuntimeError(f"the pipeline failed: {failed}")
        if pipeline.active:
            raise RuntimeError(f"the drain did not end within {timeout_s:g} s")
    finally:
        pipeline.stop()
    table = read_results(results_dir(cfg, "traffic"), columns=["packets"])
    counted = 0 if table is None else int(sum(table.column("packets").to_pylist()))
    return {
        "seconds": round(seconds, 3),
        "load_start": round(load_start, 2),
        "load_end": round(load_end, 2),
        "executors": _executors(spark),
        "counted": counted,
    }


def _executors(spark: Any) -> int | None:
    """Executors registered with the driver, the driver's own block manager not counted."""
    try:
        return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    except Exception:  # noqa: BLE001 - an internal API: the figure is informative only
        return None


def _driver(cfg: Any, setup: Setup, log_path: str, out: Any) -> None:
    """The body of a drain's driver process: its output (Spark's JVM's included) to ``log_path``,
    one :func:`drain_once`, its figures (or its error) on ``out``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # before the JVM starts: it inherits them
    os.dup2(fd, 2)
    os.close(fd)
    try:
        from netmon.logs import setup_logging
        from pipeline.session import build_session

        setup_logging(0)
        if setup.cores_max is not None:
            # Read by PySpark when it starts the driver's JVM; build_session has no key for it.
            os.environ["PYSPARK_SUBMIT_ARGS"] = f"--conf spark.cores.max={setup.cores_max} pyspark-shell"
        spark = build_session(cfg, APP_NAME, master=setup.master, ui=False)
        try:
            out.put(drain_once(spark, cfg))
        finally:
            spark.stop()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        out.put({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]})
        raise


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _run_driver(cfg: Any, setup: Setup, log_path: Path, timeout_s: float) -> dict[str, Any]:
    """:func:`drain_once` in a fresh driver process; its figures, or a one-line error."""
    results: Any = _SPAWN.Queue()
    proc = _SPAWN.Process(target=_driver, args=(cfg, setup, str(log_path), results), daemon=True)
    proc.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                got: dict[str, Any] = results.get(timeout=1.0)
                break
            except queue.Empty:
                if not proc.is_alive():
                    try:
                        got = results.get(timeout=1.0)  # put just before it exited
                        break
                    except queue.Empty:
                        raise RuntimeError(
                            f"the {setup.name} driver exited with code {proc.exitcode}: {_tail(log_path)}"
                        ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {setup.name} drain took over {timeout_s:g} s") from None
        proc.join(120)  # the driver stops its session: the cluster frees its executors
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if "error" in got:
        raise RuntimeError(f"the {setup.name} drain failed: {got['error']} ({_tail(log_path, 3)})")
    return got


# -- the benchmark ---------------------------------------------------------------------------------


def bench_scaling(
    *,
    packets: int = 200_000,
    partitions: Sequence[int] = (1, 2, 4),
    workers: int = 2,
    rounds: int = 1,
    seed: int = 4,
    duration_s: float = 60.0,
    scenario: str = "baseline",
    cache_dir: Path | None = None,
    keep: bool = False,
    timeout_s: float = 3600.0,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """The drains of the module docstring; figures as a JSON-able dict (:func:`format_report`).

    ``cache_dir``: where the Kafka and Spark jars are (``[paths] cache_dir``; default: the
    built-in configuration's). ``keep``: leave the temporary directory (captures, the cluster's
    and the drivers' logs, every drain's results) and report its path.
    """
    from ingest.generate import generate
    from ingest.replay import ReplayOptions, replay
    from netmon.cluster import LocalCluster
    from netmon.config import load_config
    from netmon.kafka_admin import recreate_topic

    parts = list(dict.fromkeys(partitions))  # in the given order, once each
    if packets < 1 or workers < 1 or rounds < 1 or not parts or min(parts) < 1:
        raise ValueError(
            f"expected packets, workers, rounds and every partition count >= 1; got {packets}, "
            f"{workers}, {rounds}, {parts}"
        )
    base = load_config(None, env={})
    if cache_dir is not None:
        base = base.replace(paths={"cache_dir": cache_dir})
    work = Path(tempfile.mkdtemp(prefix="netmon-bench-scaling-"))
    (work / "drivers").mkdir()
    cluster = LocalCluster(base.replace(paths={"state_dir": work / "cluster-state"}))
    report: dict[str, Any] = {
        "packets": packets,
        "scenario": scenario,
        "seed": seed,
        "duration_s": duration_s,
        "partitions": parts,
        "brokers": 1,
        "workers": workers,
        "worker_cores": 1,
        "rounds": rounds,
        "kinds": list(KINDS),
        "cpus": os.cpu_count(),
        "load_at_start": round(os.getloadavg()[0], 2),
    }
    drains: list[dict[str, Any]] = []
    try:
        capture = work / f"{scenario}.pcap"
        say(f"generating {packets:,} {scenario} packets (seed {seed}, {duration_s:g} s) ...")
        generate(capture, scenario=scenario, packets=packets, seed=seed, duration_s=duration_s)
        say(f"starting a cluster of 1 Kafka node and {workers} Spark worker(s) of 1 core ...")
        record, _ = cluster.up(brokers=1, workers=workers, worker_cores=1)
        bootstrap = record["bootstrap_servers"]
        configs: dict[int, Any] = {}
        for p in parts:
            cfg = base.replace(
                paths={"state_dir": work / "state", "data_dir": work / "data"},
                kafka={
                    "bootstrap_servers": bootstrap,
                    "packets_topic": f"bench.scaling.p{p}",
                    "partitions": p,
                },
                spark={"shuffle_partitions": max(2, p)},
                pipeline={"kinds": list(KINDS), "publish_results": False},
            )
            say(f"replaying into {cfg.kafka.packets_topic} ({p} partition{'s' if p > 1 else ''}) ...")
            recreate_topic(bootstrap, cfg.kafka.packets_topic, p)
            summary = replay(
                capture,
                bootstrap=bootstrap,
                topic=cfg.kafka.packets_topic,
                options=ReplayOptions(
                    close_windows_s=cfg.pipeline.watermark_s + cfg.pipeline.traffic_window_s
                ),
                partitions=p,
                progress=False,
            )
            if summary.acknowledged != packets:
                raise RuntimeError(
                    f"the replay into {cfg.kafka.packets_topic} had {summary.acknowledged:,} of "
                    f"{packets:,} packets acknowledged"
                )
            configs[p] = cfg
        runs = [
            (r, p, s)
            for r in range(1, rounds + 1)
            for p in parts
            for s in setups(record["master_url"], workers)
        ]
        for i, (r, p, setup) in enumerate(runs, 1):
            where = f"round {r}, {p} partition{'s' if p > 1 else ''}, {setup.name}"
            say(f"[{i}/{len(runs)}] {where}: drain ...")
            slug = f"r{r}-p{p}-{setup.name.replace(' ', '-').replace('[', '').replace(']', '')}"
            cfg = configs[p].replace(paths={"data_dir": work / "data" / slug})
            got = _run_driver(cfg, setup, work / "drivers" / f"{slug}.log", timeout_s)
            drain = {
                "round": r,
                "partitions": p,
                "setup": setup.name,
                "master": setup.master,
                "cores_max": setup.cores_max,
                **got,
                "packets_per_s": round(packets / got["seconds"]) if got["seconds"] > 0 else None,
                "complete": got["counted"] == packets,
            }
            drains.append(drain)
            say(
                f"[{i}/{len(runs)}] {where}: {drain['seconds']:.1f} s, {drain['packets_per_s']:,} packets/s, "
                f"load {drain['load_start']:.2f} -> {drain['load_end']:.2f}, "
                + ("counted all" if drain["complete"] else f"COUNTED {drain['counted']:,} of {packets:,}")
            )
    finally:
        try:
            said = cluster.down(30.0, wipe=not keep)
            if said[:1] != ["not up"]:
                say("cluster stopped")
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    report["setups"] = [asdict(s) for s in setups(record["master_url"], workers)]
    report["drains"] = add_ratios(drains)
    report["load_at_end"] = round(os.getloadavg()[0], 2)
    report["incomplete"] = len(incomplete(drains, packets))
    report["complete"] = report["incomplete"] == 0
    report["kept"] = str(work) if keep else None
    return report


# -- the report ------------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def format_report(report: dict[str, Any]) -> str:
    """The figures as text: one line per drain, the table of docs/performance.md, the load and
    whether every drain counted every packet."""
    packets = report["packets"]
    lines = [
        f"netmon bench scaling: {packets:,} {report['scenario']} packets (seed {report['seed']}, "
        f"{report['duration_s']:g} s of event time) on {report['cpus']} CPUs; a cluster of "
        f"{_plural(report['brokers'], 'Kafka node')} and {_plural(report['workers'], 'Spark worker')} "
        f"of {_plural(report['worker_cores'], 'core')}; {_plural(report['rounds'], 'round')}",
        "drain: start_pipeline to the end of await_termination, in a fresh driver process; "
        f"ratio: drain time / {BASELINE}'s over the same topic in the same round (above 1: slower)",
        f"{'partitions':>10}  {'setup':<10} {'round':>5} {'drain s':>8} {'packets/s':>10} {'ratio':>6} "
        f"{'load 1-min':>12} {'executors':>9}  counted",
    ]
    for d in report["drains"]:
        ratio = "-" if d.get("ratio_to_local") is None else f"{d['ratio_to_local']:.2f}"
        pps = "-" if d.get("packets_per_s") is None else f"{d['packets_per_s']:,}"
        executors = "-" if d.get("executors") is None else str(d["executors"])
        load = f"{d['load_start']:.2f}->{d['load_end']:.2f}"
        counted = "all" if d["counted"] == packets else f"{d['counted']:,} of {packets:,}: INCOMPLETE"
        lines.append(
            f"{d['partitions']:>10}  {d['setup']:<10} {d['round']:>5} {d['seconds']:>8.2f} {pps:>10} "
            f"{ratio:>6} {load:>12} {executors:>9}  {counted}"
        )
    lines += _table(report)
    loads = [x for d in report["drains"] for x in (d["load_start"], d["load_end"])]
    if loads:
        lines.append(
            f"load average (1 min): {report['load_at_start']:.2f} at the start, {report['load_at_end']:.2f} "
            f"at the end, {min(loads):.2f}-{max(loads):.2f} at the drains' starts and ends"
        )
    missing = incomplete(report["drains"], packets)
    if not report["drains"]:
        lines.append("no drain ran")
    elif missing:
        which = "; ".join(
            f"round {d['round']}, {_plural(d['partitions'], 'partition')}, {d['setup']}: {d['counted']:,}"
            for d in missing
        )
        lines.append(
            f"INCOMPLETE: {len(missing)} of {len(report['drains'])} drains did not count all "
            f"{packets:,} packets ({which})"
        )
    else:
        lines.append(f"every drain counted all {packets:,} packets")
    if report.get("kept"):
        lines.append(f"kept: {report['kept']}")
    return "\n".join(lines)


def _table(report: dict[str, Any]) -> list[str]:
    """docs/performance.md's table: per partitions and setup, each round's seconds (packets/s)."""
    names = [s["name"] for s in report.get("setups", [])]
    if not names or not report["drains"]:
        return []
    out = ["", "| partitions | " + " | ".join(f"`{n}`" if n == BASELINE else n for n in names) + " |"]
    out.append("|---" * (len(names) + 1) + "|")
    for p in report["partitions"]:
        cells = []
        for name in names:
            runs = sorted(
                (d for d in report["drains"] if d["partitions"] == p and d["setup"] == name),
                key=lambda d: d["round"],
            )
            if not runs:
                cells.append("-")
                continue
            seconds = " / ".join(f"{d['seconds']:.1f}" for d in runs)
            rates = " / ".join(
                "-" if not d["packets_per_s"] else f"{d['packets_per_s'] / 1000:.1f}k" for d in runs
            )
            cells.append(f"{seconds} s ({rates})")
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    out.append("")
    return out
