"""``netmon bench soak``: disk and memory of the whole pipeline over a long run, retention on (issue 21).

Monitor mode keeps running for weeks, so what it keeps on disk must reach a plateau once
``[retention]`` starts deleting, and its processes' memory must stop growing. The soak checks both
in one run of the machinery of ``netmon bench pipeline`` (:mod:`bench.pipeline`): a temporary real
broker on free ports (:func:`bench.ingest.temporary_broker`), a generated capture
(:func:`ingest.generate.generate`, what ``netmon samples generate`` writes) whose event time
advances at the replay rate, the pipeline with the configured kinds (``[pipeline] kinds``, results
published as by default), and the producer in its own process replaying the capture at ``pps``
with timestamps rebased to now, round after round until the run's end, so event time follows the
wall clock as a live interface's would.

Retention is shortened so that a plateau is reachable within the run (:class:`SoakSettings`):
``[retention] results_days`` (a float: fractions of a day are allowed, so ``retention_s / 86400``),
``compact_after_s``, ``interval_s`` and ``kafka_retention_hours``, and the Kafka topics' own
``segment.ms`` (Kafka deletes whole closed segments only; the broker's segments are 128 MiB). The
broker looks for segments to delete every ``log.retention.check.interval.ms``, a read-only broker
setting that ``netmon.broker`` leaves at Kafka's default, 5 minutes: its log dir falls in steps.

Every ``sample_s``, one sample (:func:`take_sample`): elapsed seconds; disk bytes, allocated as
``du`` counts them (:func:`disk_bytes`), of the data directory's ``results/<kind>`` (one series per
kind), ``checkpoints``, ``control``, the rest, and the whole, of the broker's log dir and of Spark's
local directories (block manager); the resident memory (``VmRSS`` of ``/proc/<pid>/status``) of
this process (the driver), of Spark's JVM (PySpark's gateway process), of Spark's Python workers
(the JVM's descendants, summed: forked workers share pages, so the sum overstates them) and of the
broker's JVM (its pid file); open file descriptors of this process and of Spark's JVM; the Kafka
lag of the shared query (messages of ``records_per_message`` packets); the 1-minute load average.

The verdict per series (:func:`verdict`): **plateau** when its least-squares growth over the second
half of the run (:func:`second_half_growth`), extrapolated to 10 minutes, is at most
``threshold_pct`` (1 %) of its final value, or at most its noise floor (:data:`FLOORS`: 1 MiB for
bytes, 2 descriptors, two triggers' worth of messages for the lag); a falling series is a
plateau too. Otherwise **growing**; **too short** with fewer than three samples in the second half.
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.pipeline import _SPAWN, _lag, _lag_growth, _produce, status_bytes

__all__ = [
    "FLOORS",
    "SoakSettings",
    "data_disk",
    "descendants",
    "disk_bytes",
    "format_report",
    "format_sample",
    "human",
    "open_fds",
    "second_half_growth",
    "soak",
    "summarize",
    "take_sample",
    "unit_of",
    "verdict",
]

#: the broker's ``log.retention.check.interval.ms``: Kafka's default, not set by ``netmon.broker``
#: (read-only: a broker takes it from ``server.properties`` at its start)
KAFKA_RETENTION_CHECK_MS = 300_000
#: growth per 10 minutes below which a series is flat whatever its size, by unit
#: (``lag`` is set per run: two triggers' worth of messages; ``seconds``: a page's render time in a
#: browser, on a shared machine)
FLOORS: dict[str, float] = {"bytes": float(1 << 20), "count": 2.0, "seconds": 0.5}
_MB = 1e6


@dataclass(frozen=True, kw_only=True)
class SoakSettings:
    """The run and its shortened retention (the ``netmon bench soak`` options)."""

    minutes: float = 30.0
    pps: int = 20_000
    #: seconds between samples
    sample_s: float = 10.0
    scenario: str = "baseline"
    #: event-time span of the generated capture, replayed once per round
    loop_s: float = 30.0
    #: ``[retention] results_days`` in seconds
    retention_s: float = 300.0
    #: ``[retention] compact_after_s``
    compact_after_s: float = 60.0
    #: ``[retention] interval_s``
    interval_s: float = 30.0
    #: ``[retention] kafka_retention_hours`` in seconds
    kafka_retention_s: float = 300.0
    #: the topics' ``segment.ms`` in seconds (a segment is deleted whole, once closed)
    segment_s: float = 60.0
    #: a series is a plateau when it grows by at most this % of its final value per 10 minutes
    threshold_pct: float = 1.0

    def __post_init__(self) -> None:
        for name in ("minutes", "sample_s", "loop_s", "retention_s", "interval_s", "kafka_retention_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.pps < 1:
            raise ValueError(f"pps must be >= 1, got {self.pps}")
        if not (self.segment_s >= 1 and self.compact_after_s >= 0 and self.threshold_pct > 0):
            raise ValueError("segment_s must be >= 1, compact_after_s >= 0, threshold_pct > 0")

    def retention(self) -> dict[str, float]:
        """The ``[retention]`` section of the run (``results_days`` and ``kafka_retention_hours``
        are floats in the configuration: fractions of a day or an hour are allowed)."""
        return {
            "results_days": self.retention_s / 86400.0,
            "compact_after_s": self.compact_after_s,
            "interval_s": self.interval_s,
            "kafka_retention_hours": self.kafka_retention_s / 3600.0,
        }


# -- measuring -------------------------------------------------------------------------------------


def disk_bytes(path: Path) -> int:
    """Bytes allocated under ``path``, itself included, as ``du -s -B1`` counts them: ``st_blocks``
    × 512 of every file, directory and link (links not followed), each inode once; 0 when missing.
    Entries removed during the walk (retention, Spark's temporary files) are skipped."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(path)]
    while stack:
        current = stack.pop()
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue
        seen.add(key)
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(current) as entries:
                    stack.extend(entry.path for entry in entries)
            except (FileNotFoundError, NotADirectoryError):
                continue
    return total


def open_fds(pid: int | None) -> int | None:
    """Open file descriptors of ``pid`` (None: no pid, or gone)."""
    if pid is None:
        return None
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...), from ``/proc/<pid>/stat``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])  # after the command name, which may hold spaces
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _jvm_pid(spark: Any) -> int | None:
    """Spark's driver JVM: the process PySpark's gateway started (None when it did not start one)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    return getattr(proc, "pid", None)


def _spark_local_dirs(spark: Any) -> list[Path]:
    """The block manager's directories of the Spark driver (shuffle and spilled blocks)."""
    try:
        env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
        return [Path(str(d.getAbsolutePath())) for d in env.blockManager().diskBlockManager().localDirs()]
    except Exception:  # noqa: BLE001 - a Spark without them (or another layout): the series is left out
        return []


@dataclass(frozen=True)
class _Where:
    """What one sample measures: directories and processes of the run."""

    data_dir: Path
    kinds: tuple[str, ...]
    kafka_dir: Path
    spark_dirs: tuple[Path, ...]
    jvm_pid: int | None
    broker_pid: int | None


def data_disk(data_dir: Path, kinds: Sequence[str]) -> dict[str, int]:
    """The data directory by part: ``results/<kind>``, ``checkpoints``, ``control``, the rest
    (``data other``: ``status/``, the lock, the directories themselves) and the whole (their sum:
    each part walked once, so the whole is what ``du -s`` of the directory says when it is still)."""
    results = data_dir / "results"
    parts = {f"results/{kind}": results / kind for kind in kinds}
    parts |= {"checkpoints": data_dir / "checkpoints", "control": data_dir / "control"}
    out = {name: disk_bytes(path) for name, path in parts.items()}
    taken = set(parts.values())
    other = 0
    for directory in (data_dir, results):
        try:
            st = os.lstat(directory)
            entries = [Path(e.path) for e in os.scandir(directory)]
        except (FileNotFoundError, NotADirectoryError):
            continue
        other += st.st_blocks * 512
        other += sum(disk_bytes(e) for e in entries if e not in taken and e != results)
    out["data other"] = other
    out["data total"] = sum(out.values())
    return out


def take_sample(where: _Where, elapsed_s: float, lag: int | None) -> dict[str, Any]:
    """One sample: elapsed seconds, disk bytes, resident bytes, descriptors, lag and load."""
    sample: dict[str, Any] = {"t": round(elapsed_s, 1), **data_disk(where.data_dir, where.kinds)}
    sample["kafka log dir"] = disk_bytes(where.kafka_dir)
    if where.spark_dirs:
        sample["spark local dirs"] = sum(disk_bytes(d) for d in where.spark_dirs)
    workers = descendants(where.jvm_pid) if where.jvm_pid is not None else []
    sample |= {
        "rss driver": status_bytes(os.getpid()),
        "rss spark jvm": status_bytes(where.jvm_pid),
        "rss spark workers": sum(status_bytes(p) or 0 for p in workers) if workers else None,
        "rss broker": status_bytes(where.broker_pid),
        "fds driver": open_fds(os.getpid()),
        "fds spark jvm": open_fds(where.jvm_pid),
        "lag": lag,
        "load 1m": round(os.getloadavg()[0], 2),
    }
    return sample


def unit_of(series: str) -> str:
    """The unit of a series, by its name: ``count`` (``fds ...``, ``restarts``), ``messages``
    (``lag``), ``load`` (``load ...``), ``seconds`` (a page's render time: ``tab ...``, ``switch
    ...``), ``packets`` (``packets ...``: a total, for reading, with no verdict), else ``bytes``.

    >>> [unit_of(n) for n in ("fds driver", "lag", "load 1m", "tab Traffic", "packets decoded", "rss")]
    ['count', 'messages', 'load', 'seconds', 'packets', 'bytes']
    """
    if series.startswith("fds") or series == "restarts":
        return "count"
    if series == "lag":
        return "messages"
    if series.startswith("load"):
        return "load"
    if series.startswith(("tab ", "switch ")):
        return "seconds"
    if series.startswith("packets"):
        return "packets"
    return "bytes"


# -- the verdict -----------------------------------------------------------------------------------


def second_half_growth(samples: Sequence[tuple[float, float]]) -> float | None:
    """Growth per minute of a series ((elapsed s, value) pairs, in time order) over the second half
    of its time span, by a least-squares line (:func:`bench.pipeline._lag_growth`); None with
    fewer than three samples there."""
    if not samples:
        return None
    middle = (samples[0][0] + samples[-1][0]) / 2
    tail = [(t, v) for t, v in samples if t >= middle]
    grown = _lag_growth(list(tail))  # type: ignore[arg-type]  # floats fit it as well
    span = tail[-1][0] - tail[0][0] if tail else 0.0
    if grown is None or span <= 0:
        return None
    return grown / span * 60.0


def verdict(
    growth_per_min: float | None, end: float, *, threshold_pct: float = 1.0, floor: float = 0.0
) -> str:
    """``plateau`` when ``growth_per_min`` × 10 is at most ``threshold_pct`` % of ``|end|`` or at
    most ``floor`` (falling counts as a plateau); ``growing`` otherwise; ``too short`` without a
    growth.

    >>> verdict(0.9, 1000.0), verdict(1.1, 1000.0), verdict(-50.0, 1000.0), verdict(None, 1.0)
    ('plateau', 'growing', 'plateau', 'too short')
    """
    if growth_per_min is None:
        return "too short"
    allowed = max(threshold_pct / 100.0 * abs(end), floor)
    return "plateau" if growth_per_min * 10.0 <= allowed else "growing"


def _series(samples: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for sample in samples:
        names += [k for k in sample if k != "t" and k not in names]
    return names


def summarize(
    samples: list[dict[str, Any]],
    *,
    threshold_pct: float = 1.0,
    lag_floor: float = 0.0,
    floors: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Per series (every key of the samples but ``t``): its unit (:func:`unit_of`), values at the
    start, the middle (the sample nearest the middle of the time span) and the end, growth per
    minute over the second half, that growth per 10 minutes as a % of the end value, the verdict
    (:func:`verdict` with ``threshold_pct`` and the unit's floor: ``floors`` over :data:`FLOORS`,
    ``lag_floor`` for messages; none for the load average and packet totals), and for reading
    beside it the growth per minute over the last quarter (the second half of the second half:
    where a series that settled during the second half shows it)."""
    floor_of = {**FLOORS, **(floors or {}), "messages": lag_floor}
    out: dict[str, Any] = {}
    for name in _series(samples):
        unit = unit_of(name)
        present = [s for s in samples if isinstance(s.get(name), int | float)]
        if not present:
            continue
        middle_t = (float(present[0]["t"]) + float(present[-1]["t"])) / 2
        mid = min(present, key=lambda s: abs(float(s["t"]) - middle_t))
        entry: dict[str, Any] = {
            "unit": unit,
            "start": present[0][name],
            "mid": mid[name],
            "end": present[-1][name],
        }
        if unit not in ("load", "packets"):
            points = [(float(s["t"]), float(s[name])) for s in present]
            end = points[-1][1]
            growth = second_half_growth(points)
            entry["growth_per_min"] = None if growth is None else round(growth, 1)
            entry["pct_per_10min"] = (
                None if growth is None or not end else round(1000.0 * growth / abs(end), 2)
            )
            floor = floor_of.get(unit, 0.0)
            entry["verdict"] = verdict(growth, end, threshold_pct=threshold_pct, floor=floor)
            middle = (points[0][0] + points[-1][0]) / 2
            late = second_half_growth([p for p in points if p[0] >= middle])
            entry["last_quarter_per_min"] = None if late is None else round(late, 1)
        out[name] = entry
    return out


# -- the run -----------------------------------------------------------------------------------------


def _produce_until(
    capture: str, bootstrap: str, topic: str, partitions: int, rate: int, deadline: float, out: Any
) -> None:
    """Replay ``capture`` at ``rate``, rebased to now, round after round until ``deadline`` (a
    child process; SIGINT ends the round under way, flushed, and the loop)."""
    try:
        while time.time() < deadline:
            _produce(capture, bootstrap, topic, partitions, rate, out)
    except KeyboardInterrupt:
        pass


def _create_topics(cfg: Any, topics: list[str], settings: SoakSettings) -> None:
    """The run's topics, made before the pipeline makes them, with the short ``segment.ms`` (the
    pipeline then sets ``retention.ms`` on them itself, from ``kafka_retention_hours``)."""
    from netmon.kafka_admin import ensure_topic
    from netmon.kafka_security import client_options

    configs = {
        "segment.ms": str(round(settings.segment_s * 1000)),
        "retention.ms": str(round(settings.kafka_retention_s * 1000)),
    }
    for topic in topics:
        ensure_topic(
            cfg.kafka.bootstrap,
            topic,
            cfg.kafka.partitions,
            cfg.kafka.replication_factor,
            security=client_options(cfg.kafka),
            configs=configs,
        )


def _topic_configs(cfg: Any, topic: str) -> dict[str, str]:
    """The topic's retention and segment settings as the broker holds them."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from netmon.kafka_security import client_options

    admin = KafkaAdminClient(bootstrap_servers=cfg.kafka.bootstrap, **client_options(cfg.kafka))
    try:
        keys = {"retention.ms": None, "segment.ms": None}
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=keys)])
    finally:
        admin.close()
    described = (found.get("topic") or {}).get(topic) or {}
    return {k: str(v.get("value")) for k, v in described.items() if k in keys}


def soak(
    settings: SoakSettings = SoakSettings(),
    *,
    spark: Any = None,
    say: Callable[[str], None] = lambda line: None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """Run the soak; return the settings, the samples, the per-series summary and the run's facts.

    ``spark``: a session to use (and leave running); by default one is built and stopped.
    ``progress``: called with each sample. ``work``: the run's directory (broker state, data,
    capture), kept afterwards; by default a temporary one, removed.
    ``end_disk``: the same directories measured once the pipeline and the broker have stopped.
    """
    from bench.ingest import temporary_broker
    from ingest.generate import generate
    from ingest.replay import ReplayOptions
    from netmon.broker import LocalBroker
    from netmon.config import load_config
    from netmon.results import result_topic
    from pipeline.session import build_session

    keep = work is not None
    root = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="netmon-bench-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"settings": asdict(settings), "retention": settings.retention()}
    out["kafka_retention_check_ms"] = KAFKA_RETENTION_CHECK_MS
    try:
        capture = root / f"{settings.scenario}-{settings.pps}.pcap"
        packets = int(settings.pps * settings.loop_s)
        say(f"generating {packets:,} {settings.scenario} packets over {settings.loop_s:g} s ...")
        generate(capture, scenario=settings.scenario, packets=packets, duration_s=settings.loop_s)
        broker_state = root / "broker"
        with temporary_broker(broker_state) as bootstrap:
            # The handle temporary_broker made, seen again: its pid file and its log dir.
            broker = LocalBroker(
                load_config(None, env={}).replace(
                    paths={"state_dir": broker_state, "data_dir": broker_state / "data"}
                )
            )
            cfg = load_config(None, env={}).replace(
                paths={"state_dir": root / "state", "data_dir": root / "data"},
                kafka={"bootstrap_servers": bootstrap, "packets_topic": "bench.packets"},
                retention=settings.retention(),
            )
            kinds = tuple(cfg.pipeline.kinds)
            topics = [cfg.kafka.packets_topic]
            if cfg.pipeline.publish_results:
                topics += [result_topic(cfg, kind) for kind in kinds]
            _create_topics(cfg, topics, settings)
            out |= {"kinds": list(kinds), "publish_results": cfg.pipeline.publish_results}
            own = spark is None
            session = build_session(cfg, "netmon-bench-soak", ui=False) if own else spark
            try:
                out |= _run(session, cfg, settings, capture, broker, kinds, say, progress)
                out["topic_configs"] = _topic_configs(cfg, cfg.kafka.packets_topic)
            finally:
                if own:
                    session.stop()
        data = Path(cfg.paths.data_dir)
        out["end_disk"] = {**data_disk(data, kinds), "kafka log dir": disk_bytes(broker.data_dir)}
        out["dirs"] = {"data": str(cfg.paths.data_dir), "kafka log dir": str(broker.data_dir)}
        per_message = ReplayOptions().records_per_message
        lag_floor = 2 * settings.pps * cfg.pipeline.trigger_s / per_message
        out["lag_floor"] = lag_floor
        out["series"] = summarize(out["samples"], threshold_pct=settings.threshold_pct, lag_floor=lag_floor)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return out


def _run(
    spark: Any,
    cfg: Any,
    settings: SoakSettings,
    capture: Path,
    broker: Any,
    kinds: tuple[str, ...],
    say: Callable[[str], None],
    progress: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """The pipeline and the producer for ``settings.minutes``, sampled every ``sample_s``."""
    from netmon.results import SHARED_QUERY
    from pipeline.job import start_pipeline

    pipeline = start_pipeline(spark, cfg)
    query = pipeline.queries[SHARED_QUERY]
    where = _Where(
        Path(cfg.paths.data_dir),
        kinds,
        broker.data_dir,
        tuple(_spark_local_dirs(spark)),
        _jvm_pid(spark),
        broker.pid(),
    )
    say(
        f"soak: {settings.pps:,} packets/s for {settings.minutes:g} min, a sample every "
        f"{settings.sample_s:g} s (Spark JVM pid {where.jvm_pid}, broker pid {where.broker_pid})"
    )
    results: Any = _SPAWN.Queue()
    started = time.time()
    deadline = started + settings.minutes * 60.0
    producer = _SPAWN.Process(
        target=_produce_until,
        args=(
            str(capture),
            cfg.kafka.bootstrap,
            cfg.kafka.packets_topic,
            cfg.kafka.partitions,
            settings.pps,
            deadline,
        ),
        kwargs={"out": results},
        daemon=True,
    )
    producer.start()
    samples: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    next_sample = started
    try:
        while True:
            now = time.time()
            if now >= deadline or not producer.is_alive():
                break
            pipeline.poll()
            failed = pipeline.failed()
            if failed:
                raise RuntimeError(f"the pipeline failed: {failed}")
            if now >= next_sample:
                sample = take_sample(where, now - started, _lag_or_none(cfg, query))
                samples.append(sample)
                if progress is not None:
                    progress(sample)
                next_sample += settings.sample_s
            _drain(results, summaries)
            time.sleep(max(0.0, min(1.0, next_sample - time.time(), deadline - time.time())))
        ended = time.time()
        if producer.is_alive() and producer.pid is not None:
            os.kill(producer.pid, 2)  # SIGINT: the replay under way flushes, closes and reports
        producer.join(60)
        if producer.is_alive():
            producer.terminate()
            producer.join(10)
        pipeline.poll()
        last = take_sample(where, ended - started, _lag_or_none(cfg, query))
        samples.append(last)
        if progress is not None:
            progress(last)
    finally:
        _drain(results, summaries, wait_s=2.0)
        pipeline.stop()
    stats = pipeline.stats.get("traffic")
    processed = getattr(stats, "packets", None)
    produced = sum(int(s.get("acknowledged", 0)) for s in summaries)
    elapsed = ended - started
    loads = [s["load 1m"] for s in samples]
    return {
        "samples": samples,
        "elapsed_s": round(elapsed, 1),
        "rounds": len(summaries),
        "produced_packets": produced,
        "produced_pps": round(produced / max(elapsed, 1e-9)),
        "processed_packets": processed,
        "late_dropped": getattr(stats, "late_dropped", None),
        "load_1m": {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads)},
        "cpus": os.cpu_count(),
    }


def _lag_or_none(cfg: Any, query: Any) -> int | None:
    """The shared query's lag (:func:`bench.pipeline._lag`); None when the broker did not answer
    in time (one missing point, not the end of a long run)."""
    from kafka.errors import KafkaError

    try:
        return _lag(cfg, query)
    except KafkaError:
        return None


def _drain(results: Any, into: list[dict[str, Any]], wait_s: float = 0.0) -> None:
    """Move the producer's per-round summaries from its queue into ``into``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            into.append(results.get(timeout=max(0.01, deadline - time.monotonic())))
        except (queue.Empty, EOFError, OSError):
            return


# -- printing ----------------------------------------------------------------------------------------


def human(value: float | None, unit: str) -> str:
    """``value`` for reading: bytes as kB, MB or GB; seconds with two decimals; counts with
    thousands separators.

    >>> human(1_234_567, "bytes"), human(2.346, "seconds"), human(12345, "count"), human(None, "bytes")
    ('1.2 MB', '2.35 s', '12,345', '-')
    """
    if value is None:
        return "-"
    if unit == "bytes":
        if abs(value) >= 1e9:
            return f"{value / 1e9:,.2f} GB"
        text = f"{value / _MB:,.1f} MB" if abs(value) >= _MB else f"{value / 1e3:,.0f} kB"
        return text.removeprefix("-") if text in ("-0 kB", "-0.0 MB") else text
    if unit == "load":
        return f"{value:g}"
    if unit == "seconds":
        return f"{value:,.2f} s"
    return f"{value:,.0f}"


def format_sample(sample: dict[str, Any]) -> str:
    """One progress line: elapsed, data dir (results, checkpoints), Kafka, memory, fds, lag, load."""
    results = sum(v for k, v in sample.items() if k.startswith("results/"))

    def mb(key: str) -> str:
        value = sample.get(key)
        return "-" if value is None else f"{value / _MB:,.0f}"

    return (
        f"t {sample['t']:>6.0f} s  data {mb('data total')} MB (results {results / _MB:,.1f}, "
        f"checkpoints {mb('checkpoints')})  kafka {mb('kafka log dir')} MB  rss MB: driver "
        f"{mb('rss driver')} spark {mb('rss spark jvm')} workers {mb('rss spark workers')} broker "
        f"{mb('rss broker')}  fds {sample.get('fds driver')}/{sample.get('fds spark jvm')}  "
        f"lag {sample.get('lag')}  load {sample.get('load 1m')}"
    )


def format_report(result: dict[str, Any]) -> list[str]:
    """The run's settings and facts, then one row per series: end value, growth, verdict."""
    s = result["settings"]
    r = result["retention"]
    load = result["load_1m"]
    lines = [
        f"netmon bench soak: {s['scenario']} at {s['pps']:,} packets/s for {s['minutes']:g} min "
        f"(ran {result['elapsed_s']:g} s, {len(result['samples'])} samples every {s['sample_s']:g} s; "
        f"kinds {', '.join(result['kinds'])}; results published: {result['publish_results']})",
        f"retention: [retention] results_days = {r['results_days']:.6g} ({s['retention_s']:g} s), "
        f"compact_after_s = {r['compact_after_s']:g}, interval_s = {r['interval_s']:g}, "
        f"kafka_retention_hours = {r['kafka_retention_hours']:.6g} ({s['kafka_retention_s']:g} s); "
        f"topics' segment.ms = {round(s['segment_s'] * 1000)}; broker log.retention.check.interval.ms = "
        f"{result['kafka_retention_check_ms']} (Kafka's default, read-only); packets topic as the broker "
        f"holds it: {result.get('topic_configs')}",
        f"produced {result['produced_packets']:,} packets in {result['rounds']} rounds of "
        f"{s['loop_s']:g} s ({result['produced_pps']:,} packets/s held); the pipeline decoded "
        f"{result['processed_packets']:,} packets; late dropped {result['late_dropped']}",
        f"load average (1 min) during the run on {result['cpus']} CPUs: min {load['min']}, "
        f"mean {load['mean']}, max {load['max']}",
        f"{'series':<20} {'end':>10} {'growth/min (2nd half)':>22} {'%/10 min':>9}  {'verdict':<9} "
        f"{'growth/min (last quarter)':>26}",
    ]

    def shown(value: float | None, unit: str) -> str:
        return "-" if value is None else (human(value, unit) if unit == "bytes" else f"{value:,.1f}")

    for name, e in result["series"].items():
        unit = e["unit"]
        pct = e.get("pct_per_10min")
        lines.append(
            f"{name:<20} {human(e['end'], unit):>10} {shown(e.get('growth_per_min'), unit):>22} "
            f"{'-' if pct is None else f'{pct:.2f}':>9}  {e.get('verdict', ''):<9} "
            f"{shown(e.get('last_quarter_per_min'), unit):>26}"
        )
    lines.append(
        f"plateau: least-squares growth over the second half x 10 min <= {s['threshold_pct']:g} % of the "
        f"end value, or <= the noise floor (1 MiB; 2 descriptors; {result['lag_floor']:g} messages of lag)"
    )
    return lines
