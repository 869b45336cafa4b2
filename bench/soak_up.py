"""``netmon bench soak-up``: a day of event time through ``netmon up --replay``, compressed (issue 21).

:mod:`bench.soak` runs the pipeline in its own process with event time following the wall clock.
This soak runs what an operator runs: ``netmon up --replay FILE --speed X --loop N --start-at T``
in a process of its own, which starts and supervises the real services as child processes (the
local broker, the pipeline, the alert service, the dashboard and the replay), with a temporary
configuration (:func:`write_config`): its own state and data directories, free ports for the
broker, the dashboard and ``/metrics``, and ``[retention]`` shortened in event-time terms.

**Compressed event time.** A generated capture (:func:`ingest.generate.generate`) spans
``loop_s`` of event time (an hour by default) with ``pps / speed × loop_s`` packets; the replay
loops it ``ceil(event_hours × 3600 / loop_s)`` times at ``--speed`` (each loop shifted by the
capture's span, so event time keeps increasing) from ``--start-at`` = the run's start − ``event_hours``:
event time runs ``speed`` times faster than the wall clock and reaches the wall clock of the run's
start when the replay ends, never the future (retention ages are event time counted back from the
sink's newest row or the wall clock, whichever is earlier: ``pipeline.retention``). The defaults,
24 h at ``--speed 48``, take 30 minutes; wall-clock packets/s = ``pps``.

**Retention** is set in event time: ``results_days = retention_hours / 24`` (6 h by default: disk
reaches its plateau once 6 h of event time are in, 7.5 minutes into the default run), with
``compact_after_s`` and ``interval_s`` short. Kafka's retention is wall-clock (the producer's
timestamps), so ``kafka_retention_s`` and the topics' ``segment.ms`` are seconds of wall time; the
topics are made with that ``segment.ms`` before ``netmon up`` starts (a broker started and stopped
on the run's state directory: :func:`prepare_topics`), since Kafka deletes closed segments only.

Every ``sample_s`` a sample (:func:`take_sample`): disk of the data directory by part
(:func:`bench.soak.data_disk`), of the broker's log dir and of the state directory's logs; the
resident memory of the pipeline's process (the driver), of Spark's JVM (the driver's ``java``
descendant) and its Python workers (summed), of the broker, the dashboard (the ``netmon dashboard``
process and the Streamlit server it runs, summed), the alert service and ``netmon up`` itself
(pids from ``netmon up``'s state file, read at every sample: a restarted service is followed);
open descriptors of the driver and the JVM; from ``/metrics`` the pipeline's Kafka lag (messages)
and the packets decoded (a progress figure: no verdict); the restarts ``netmon up`` made; the
1-minute load average.

Every ``browser_every_s`` (and once more when the replay is done) the dashboard's render times in
Chromium, against ``netmon up``'s own dashboard (:mod:`bench.dashboard_render`): every page in a
new tab (``tab <page>``, the default range: the last 15 minutes of results) and every page reached
from the sidebar with the range set to the last 24 h (``switch <page>``). These run in a thread
beside the sampling (the browser's CPU is part of what the machine does then).

The verdict per series is :mod:`bench.soak`'s (:func:`bench.soak.summarize`): a plateau when the
least-squares growth over the second half, per 10 minutes, is at most ``threshold_pct`` of the end
value or the unit's noise floor (1 MiB; 2 descriptors; two triggers' worth of messages;
``render_floor_s`` for a render time). At the end ``netmon up`` gets SIGTERM; every
process it started carries its tag (:data:`netmon.orphans.TAG_ENV`), and none may be left
(``left_after_stop``; any found is killed and the run reported as failed by the caller).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.pipeline import status_bytes
from bench.soak import data_disk, descendants, disk_bytes, human, open_fds, summarize

__all__ = [
    "SoakUpSettings",
    "format_report",
    "format_sample",
    "metrics_figures",
    "prepare_topics",
    "render_sample",
    "soak_up",
    "up_argv",
    "write_config",
]

#: a paced replay cuts a message at most every this many seconds (``ingest.pacing.Pacer``'s quantum)
_PACER_QUANTUM_S = 0.05
#: environment variables that would override the run's configuration file in its processes
_CONFIG_ENV = (
    "NETMON_CONFIG",
    "NETMON_STATE_DIR",
    "NETMON_DATA_DIR",
    "NETMON_CACHE_DIR",
    "NETMON_BOOTSTRAP_SERVERS",
)
_MB = 1e6


@dataclass(frozen=True, kw_only=True)
class SoakUpSettings:
    """The run (the ``netmon bench soak-up`` options)."""

    #: event time replayed
    event_hours: float = 24.0
    #: event time per wall-clock time (``netmon up --speed``)
    speed: float = 48.0
    #: wall-clock packets per second of the replay
    pps: int = 1000
    #: event-time span of the generated capture (one replay loop)
    loop_s: float = 3600.0
    scenario: str = "baseline"
    #: seconds between samples
    sample_s: float = 10.0
    #: seconds between two measures in Chromium (0: no browser)
    browser_every_s: float = 300.0
    #: seconds a page may take to be drawn before its measure fails (a loaded machine is slow)
    browser_timeout_s: float = 180.0
    #: ``[retention] results_days`` in hours of event time
    retention_hours: float = 6.0
    #: ``[retention] compact_after_s`` (wall clock)
    compact_after_s: float = 60.0
    #: ``[retention] interval_s``
    interval_s: float = 30.0
    #: ``[retention] kafka_retention_hours`` in seconds (wall clock: Kafka's timestamps)
    kafka_retention_s: float = 300.0
    #: the topics' ``segment.ms`` in seconds
    segment_s: float = 60.0
    #: a series is a plateau when it grows by at most this % of its final value per 10 minutes
    threshold_pct: float = 1.0
    #: growth of a render time per 10 minutes that counts as flat whatever its size
    render_floor_s: float = 0.5
    #: ``[pipeline] kinds`` (None: the configuration's default)
    kinds: tuple[str, ...] | None = None
    #: seconds ``netmon up`` gets after SIGTERM before its group is killed
    stop_timeout_s: float = 240.0

    def __post_init__(self) -> None:
        for name in ("event_hours", "speed", "loop_s", "sample_s", "retention_hours", "interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.pps < 1:
            raise ValueError(f"pps must be >= 1, got {self.pps}")
        if self.browser_every_s < 0 or self.compact_after_s < 0 or self.render_floor_s < 0:
            raise ValueError("browser_every_s, compact_after_s and render_floor_s must be >= 0")
        if not self.browser_timeout_s > 0:
            raise ValueError(f"browser_timeout_s must be > 0, got {self.browser_timeout_s}")
        if not (self.segment_s >= 1 and self.kafka_retention_s > 0 and self.threshold_pct > 0):
            raise ValueError("segment_s must be >= 1, kafka_retention_s > 0, threshold_pct > 0")
        if self.capture_packets < 1:
            raise ValueError(
                f"pps / speed x loop_s = {self.pps / self.speed * self.loop_s:g}: no packet per loop"
            )

    @property
    def minutes(self) -> float:
        """Wall-clock minutes of the replay: ``event_hours × 60 / speed``.

        >>> SoakUpSettings().minutes, SoakUpSettings(event_hours=4, speed=120).minutes
        (30.0, 2.0)
        """
        return self.event_hours * 60.0 / self.speed

    @property
    def loops(self) -> int:
        """Loops of the capture that cover ``event_hours``.

        >>> SoakUpSettings().loops, SoakUpSettings(event_hours=4, loop_s=1500).loops
        (24, 10)
        """
        return max(1, math.ceil(self.event_hours * 3600.0 / self.loop_s - 1e-9))

    @property
    def capture_packets(self) -> int:
        """Packets of the generated capture: ``pps / speed`` packets per event-time second.

        >>> SoakUpSettings().capture_packets
        75000
        """
        return round(self.pps / self.speed * self.loop_s)

    def retention(self) -> dict[str, float]:
        """The run's ``[retention]`` section."""
        return {
            "results_days": self.retention_hours / 24.0,
            "compact_after_s": self.compact_after_s,
            "interval_s": self.interval_s,
            "kafka_retention_hours": self.kafka_retention_s / 3600.0,
        }


# -- setting up ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(settings: SoakUpSettings, root: Path, cache_dir: Path) -> Path:
    """The run's configuration, ``root/netmon.toml``: state and data under ``root``, the Kafka
    distribution from ``cache_dir`` (the user's cache: nothing downloaded again), free ports for
    the broker, its controller, the dashboard and ``/metrics``, the run's ``[retention]``."""
    kinds = "" if settings.kinds is None else f"[pipeline]\nkinds = {list(settings.kinds)!r}\n"
    retention = "\n".join(f"{key} = {value!r}" for key, value in settings.retention().items())
    text = f"""# netmon bench soak-up: the run's own configuration
[paths]
state_dir = "{root / "state"}"
data_dir = "{root / "data"}"
cache_dir = "{cache_dir}"
[kafka]
port = {_free_port()}
controller_port = {_free_port()}
[dashboard]
host = "127.0.0.1"
port = {_free_port()}
[metrics]
host = "127.0.0.1"
port = {_free_port()}
[retention]
{retention}
{kinds}"""
    path = root / "netmon.toml"
    path.write_text(text)
    return path


def prepare_topics(cfg: Any, settings: SoakUpSettings) -> list[str]:
    """Make the run's topics (packets, and the result topics when results are published) with
    ``segment.ms`` and ``retention.ms`` of ``settings``: the run's broker started and stopped on
    its state directory before ``netmon up`` starts it (which then finds them made)."""
    from netmon.broker import LocalBroker
    from netmon.kafka_admin import ensure_topic
    from netmon.kafka_security import client_options
    from netmon.results import result_topic

    topics = [cfg.kafka.packets_topic]
    if cfg.pipeline.publish_results:
        topics += [result_topic(cfg, kind) for kind in cfg.pipeline.kinds]
    configs = {
        "segment.ms": str(round(settings.segment_s * 1000)),
        "retention.ms": str(round(settings.kafka_retention_s * 1000)),
    }
    broker = LocalBroker(cfg)
    broker.start()
    try:
        for topic in topics:
            ensure_topic(
                cfg.kafka.bootstrap,
                topic,
                cfg.kafka.partitions,
                cfg.kafka.replication_factor,
                security=client_options(cfg.kafka),
                configs=configs,
            )
    finally:
        broker.stop()
    return topics


def up_argv(config: Path, capture: Path, settings: SoakUpSettings, start_at: str) -> list[str]:
    """The ``netmon up`` command line of the run.

    >>> " ".join(up_argv(Path("c.toml"), Path("x.pcap"), SoakUpSettings(), "2026-01-01T00:00:00Z")[3:])
    '--config c.toml up --replay x.pcap --speed 48 --loop 24 --start-at 2026-01-01T00:00:00Z'
    """
    return [
        sys.executable,
        "-m",
        "cli.main",
        "--config",
        str(config),
        "up",
        "--replay",
        str(capture),
        "--speed",
        f"{settings.speed:g}",
        "--loop",
        str(settings.loops),
        "--start-at",
        start_at,
    ]


# -- measuring -------------------------------------------------------------------------------------


def _proc_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def metrics_figures(text: str) -> dict[str, float | None]:
    """From ``/metrics`` text: the pipeline's Kafka lag (messages) and the packets it decoded (the
    largest count among its queries: each query that reads the packets topic counts them); None
    when absent.

    >>> metrics_figures('netmon_pipeline_lag_records 12.0\\nnetmon_pipeline_packets_total{query="a"} 5.0\\n'
    ...                 'netmon_pipeline_packets_total{query="b"} 7.0\\n')
    {'lag': 12.0, 'packets': 7.0}
    """
    from prometheus_client.parser import text_string_to_metric_families

    largest: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            largest[name] = max(largest.get(name, float("-inf")), float(sample.value))
    return {
        "lag": largest.get("netmon_pipeline_lag_records"),
        "packets": largest.get("netmon_pipeline_packets"),
    }


@dataclass(frozen=True)
class _Run:
    """What one sample measures: the run's directories, state file and ``/metrics``."""

    cfg: Any
    kinds: tuple[str, ...]
    up_pid: int
    metrics_url: str
    state_path: Path
    broker: Any

    def services(self) -> dict[str, dict[str, Any]]:
        from netmon.supervisor import read_state

        state = read_state(self.state_path) or {}
        return {s["name"]: s for s in state.get("services", [])}

    def broker_pid(self) -> int | None:
        pid = self.broker.pid()
        return None if pid is None else int(pid)


def take_sample(run: _Run, elapsed_s: float) -> dict[str, Any]:
    """One sample: disk, resident memory, descriptors, ``/metrics`` figures, restarts, load."""
    data = Path(run.cfg.paths.data_dir)
    sample: dict[str, Any] = {"t": round(elapsed_s, 1), **data_disk(data, run.kinds)}
    sample["kafka log dir"] = disk_bytes(run.broker.data_dir)
    sample["logs"] = disk_bytes(Path(run.cfg.paths.state_dir) / "logs")
    services = run.services()

    def pid(name: str) -> int | None:
        entry = services.get(name) or {}
        return entry.get("pid") if entry.get("state") == "running" else None

    def tree_rss(root: int | None) -> int | None:
        """``root`` and its descendants: ``netmon dashboard`` runs the Streamlit server as a child."""
        if root is None:
            return None
        own = status_bytes(root)
        return None if own is None else own + sum(status_bytes(p) or 0 for p in descendants(root))

    driver = pid("pipeline")
    below = descendants(driver) if driver is not None else []
    jvm = next((p for p in below if _proc_name(p) == "java"), None)
    workers = descendants(jvm) if jvm is not None else []
    sample |= {
        "rss driver": status_bytes(driver),
        "rss spark jvm": status_bytes(jvm),
        "rss spark workers": sum(status_bytes(p) or 0 for p in workers) if workers else None,
        "rss broker": status_bytes(run.broker_pid()),
        "rss dashboard": tree_rss(pid("dashboard")),
        "rss alerts": tree_rss(pid("alerts")),
        "rss netmon up": status_bytes(run.up_pid),
        "fds driver": open_fds(driver),
        "fds spark jvm": open_fds(jvm),
    }
    try:
        with urllib.request.urlopen(run.metrics_url, timeout=10) as resp:
            figures = metrics_figures(resp.read().decode())
    except OSError:
        figures = {"lag": None, "packets": None}
    sample["lag"] = None if figures["lag"] is None else int(figures["lag"])
    sample["packets decoded"] = None if figures["packets"] is None else int(figures["packets"])
    sample["restarts"] = sum(int(s.get("restarts") or 0) for s in services.values())
    sample["replay"] = (services.get("replay") or {}).get("state")
    sample["load 1m"] = round(os.getloadavg()[0], 2)
    return sample


def render_sample(elapsed_s: float, tabs: Sequence[Any], switches: Sequence[Any]) -> dict[str, Any]:
    """One browser measure as a sample: ``tab <page>`` and ``switch <page>`` seconds (the first
    of each :class:`bench.dashboard_render.PageRender`'s seconds)."""
    sample: dict[str, Any] = {"t": round(elapsed_s, 1)}
    sample |= {f"tab {r.name}": round(r.seconds[0], 3) for r in tabs}
    sample |= {f"switch {r.name}": round(r.seconds[0], 3) for r in switches}
    return sample


class _Browser(threading.Thread):
    """Measures the dashboard in Chromium at the times given, in a thread of its own."""

    def __init__(
        self, url: str, began: float, every_s: float, timeout_s: float, say: Callable[[str], None]
    ) -> None:
        super().__init__(daemon=True, name="soak-up-browser")
        self.url, self.began, self.every_s, self.timeout_s, self.say = url, began, every_s, timeout_s, say
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.page_errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        due = min(60.0, self.every_s)
        while not self.stop.wait(max(0.0, self.began + due - time.time())):
            self.measure()
            due += self.every_s

    def measure(self) -> None:
        from bench.dashboard_render import navigate_times_at, render_times_at

        at = time.time() - self.began
        tabs: list[Any] = []
        switches: list[Any] = []
        # each measure on its own: one failing (a page not drawn in time) leaves the other
        for name, measure, into in (
            ("tabs", lambda: render_times_at(self.url, rounds=1, timeout_s=self.timeout_s), tabs),
            (
                "switches",
                lambda: navigate_times_at(
                    self.url, rounds=1, time_range="last 24 h", timeout_s=self.timeout_s
                ),
                switches,
            ),
        ):
            try:
                into += measure()
            except Exception as exc:  # noqa: BLE001 - one missing measure, said, not the end of the run
                self.errors.append(f"t {at:.0f} s {name}: {type(exc).__name__}: {exc}")
                self.say(f"browser at t {at:.0f} s, {name} failed: {exc}")
        if not tabs and not switches:
            return
        sample = render_sample(at, tabs, switches)
        for r in [*tabs, *switches]:
            self.page_errors += [f"t {at:.0f} s {r.name}: {e}" for e in r.exceptions]
        self.samples.append(sample)
        worst = max((v for k, v in sample.items() if k != "t"), default=0.0)
        self.say(f"browser at t {at:.0f} s: slowest page {worst:.2f} s")


# -- the run ---------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CONFIG_ENV}


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_up(run: _Run, up: subprocess.Popen[bytes], out: Path, url: str, timeout_s: float) -> str:
    """Until the state file names a running pipeline and the dashboard answers; the supervisor's
    tag. Raises ``RuntimeError`` when ``netmon up`` ends or ``timeout_s`` passes first."""
    from dashboard.server import wait_healthy
    from netmon.supervisor import read_state

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise RuntimeError(f"netmon up ended (exit {up.returncode}):\n{_tail(out)}")
        state = read_state(run.state_path) or {}
        tag = (state.get("supervisor") or {}).get("tag")
        pipeline = run.services().get("pipeline") or {}
        if tag and pipeline.get("pid") and wait_healthy(url, 2.0):
            return str(tag)
        time.sleep(1.0)
    raise RuntimeError(f"netmon up not ready within {timeout_s:g} s:\n{_tail(out)}")


def _stop(up: subprocess.Popen[bytes], tag: str, timeout_s: float) -> dict[str, Any]:
    """SIGTERM to ``netmon up``; its group killed after ``timeout_s``; then what carries its tag
    (killed: the run's own processes)."""
    from netmon.orphans import tagged

    began = time.monotonic()
    up.send_signal(signal.SIGTERM)
    try:
        code = up.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        code = up.wait(30)
    stop_s = time.monotonic() - began
    left: list[int] = []
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        left = tagged(tag)
        if not left:
            break
        time.sleep(0.5)
    named = [f"{p} {_proc_name(p)}" for p in left]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {"up_exit": code, "stop_s": round(stop_s, 1), "left_after_stop": named}


def _event_extent(cfg: Any) -> dict[str, str | None]:
    """The oldest and newest ``window_end`` of the traffic results left at the end."""
    from netmon.results import read_results, results_dir

    try:
        table = read_results(results_dir(cfg, "traffic"), columns=["window_end"])
    except Exception:  # noqa: BLE001 - no traffic kind, or no result: said as unknown
        table = None
    if table is None or table.num_rows == 0:
        return {"oldest": None, "newest": None}
    ends = table["window_end"]
    import pyarrow.compute as pc

    oldest, newest = pc.min(ends).as_py(), pc.max(ends).as_py()
    return {"oldest": oldest.isoformat(), "newest": newest.isoformat()}


def soak_up(
    settings: SoakUpSettings = SoakUpSettings(),
    *,
    say: Callable[[str], None] = lambda line: None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """Run the soak through ``netmon up``; return the settings, the samples, the render samples,
    the per-series summaries and the run's facts.

    ``work``: the run's directory (configuration, capture, state, data; ``up.out`` is ``netmon
    up``'s console), kept afterwards; by default a temporary one, removed.
    """
    from ingest.generate import generate
    from netmon.broker import LocalBroker
    from netmon.config import load_config
    from netmon.supervisor import state_file

    keep = work is not None
    root = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="netmon-bench-soak-up-"))
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"settings": asdict(settings), "retention": settings.retention()}
    out |= {"minutes": settings.minutes, "loops": settings.loops, "cpus": os.cpu_count()}
    try:
        capture = root / f"{settings.scenario}-{settings.capture_packets}.pcap"
        say(
            f"generating {settings.capture_packets:,} {settings.scenario} packets over "
            f"{settings.loop_s:g} s of event time ..."
        )
        generate(
            capture, scenario=settings.scenario, packets=settings.capture_packets, duration_s=settings.loop_s
        )
        config = write_config(settings, root, Path(load_config(None).paths.cache_dir))
        cfg = load_config(config, env={})
        kinds = tuple(cfg.pipeline.kinds)
        say(f"making the topics with segment.ms = {settings.segment_s:g} s on the run's broker ...")
        out["topics"] = prepare_topics(cfg, settings)
        broker = LocalBroker(cfg)
        now = time.time()
        start_at = datetime.fromtimestamp(now - settings.event_hours * 3600.0, UTC)
        start_text = start_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        argv = up_argv(config, capture, settings, start_text)
        out |= {"command": " ".join(argv[3:]), "start_at": start_text, "kinds": list(kinds)}
        out["dirs"] = {"root": str(root), "data": str(cfg.paths.data_dir), "state": str(cfg.paths.state_dir)}
        console = root / "up.out"
        url = f"http://{cfg.dashboard.host}:{cfg.dashboard.port}"
        say(f"netmon {out['command']}")
        with console.open("wb") as sink:
            up = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, env=_child_env(), start_new_session=True
            )
        run = _Run(
            cfg,
            kinds,
            up.pid,
            f"http://{cfg.metrics.host}:{cfg.metrics.port}/metrics",
            state_file(cfg),
            broker,
        )
        tag = ""
        try:
            tag = _wait_up(run, up, console, url, timeout_s=300.0)
            out |= _sample_run(run, up, settings, url, console, say, progress)
        finally:
            if up.poll() is None:
                say("stopping netmon up (SIGTERM) ...")
                out |= _stop(up, tag, settings.stop_timeout_s)
            else:
                out |= {"up_exit": up.returncode, "stop_s": 0.0, "left_after_stop": []}
        out["up_console"] = _tail(console, 40)
        out["end_disk"] = {
            **data_disk(Path(cfg.paths.data_dir), kinds),
            "kafka log dir": disk_bytes(broker.data_dir),
        }
        out["traffic_window_end"] = _event_extent(cfg)
        messages_per_s = max(1.0 / _PACER_QUANTUM_S, settings.pps / 1000.0)
        out["lag_floor"] = lag_floor = 2.0 * cfg.pipeline.trigger_s * messages_per_s
        out["series"] = summarize(out["samples"], threshold_pct=settings.threshold_pct, lag_floor=lag_floor)
        out["render_series"] = summarize(
            out["render_samples"],
            threshold_pct=settings.threshold_pct,
            floors={"seconds": settings.render_floor_s},
        )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return out


def _sample_run(
    run: _Run,
    up: subprocess.Popen[bytes],
    settings: SoakUpSettings,
    url: str,
    console: Path,
    say: Callable[[str], None],
    progress: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """Samples until the replay is done (or its time and a grace of 5 minutes are over); the
    browser's measures beside them, and one more at the end."""
    began = time.time()
    deadline = began + settings.minutes * 60.0 + 300.0
    browser = (
        _Browser(url, began, settings.browser_every_s, settings.browser_timeout_s, say)
        if settings.browser_every_s
        else None
    )
    if browser is not None:
        browser.start()
    samples: list[dict[str, Any]] = []
    next_sample = began
    done_at: float | None = None
    try:
        while True:
            if up.poll() is not None:
                raise RuntimeError(
                    f"netmon up ended during the run (exit {up.returncode}):\n{_tail(console)}"
                )
            now = time.time()
            if now >= next_sample:
                sample = take_sample(run, now - began)
                samples.append(sample)
                if progress is not None:
                    progress(sample)
                next_sample += settings.sample_s
                if sample["replay"] == "done":
                    done_at = now
                    break
            if now >= deadline:
                break
            time.sleep(max(0.0, min(1.0, next_sample - time.time())))
    finally:
        if browser is not None:
            browser.stop.set()
            browser.join()
    if browser is not None:
        browser.measure()  # the end: every event hour in
    last = take_sample(run, time.time() - began)
    samples.append(last)
    if progress is not None:
        progress(last)
    loads = [s["load 1m"] for s in samples]
    return {
        "samples": samples,
        "render_samples": browser.samples if browser is not None else [],
        "browser_errors": browser.errors if browser is not None else [],
        "page_errors": browser.page_errors if browser is not None else [],
        "replay_done_s": None if done_at is None else round(done_at - began, 1),
        "elapsed_s": round(time.time() - began, 1),
        "load_1m": {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads)},
        "restarts": {name: entry.get("restarts", 0) for name, entry in run.services().items()},
    }


# -- printing --------------------------------------------------------------------------------------


def format_sample(sample: dict[str, Any]) -> str:
    """One progress line: elapsed, disk, memory, lag, packets, load."""
    results = sum(v for k, v in sample.items() if k.startswith("results/"))

    def mb(key: str) -> str:
        value = sample.get(key)
        return "-" if value is None else f"{value / _MB:,.0f}"

    return (
        f"t {sample['t']:>6.0f} s  data {mb('data total')} MB (results {results / _MB:,.1f})  kafka "
        f"{mb('kafka log dir')} MB  rss MB: driver {mb('rss driver')} spark {mb('rss spark jvm')} "
        f"workers {mb('rss spark workers')} broker {mb('rss broker')} dashboard {mb('rss dashboard')}  "
        f"lag {sample.get('lag')}  packets "
        f"{sample.get('packets decoded')}  replay {sample.get('replay')}  load {sample.get('load 1m')}"
    )


def _series_rows(series: dict[str, Any]) -> list[str]:
    lines = [
        f"{'series':<24} {'start':>10} {'mid':>10} {'end':>10} {'growth/min (2nd half)':>22} "
        f"{'%/10 min':>9}  {'verdict':<9}"
    ]
    for name, e in series.items():
        unit = e["unit"]
        if unit == "load":
            continue
        pct = e.get("pct_per_10min")
        growth = e.get("growth_per_min")
        lines.append(
            f"{name:<24} {human(e['start'], unit):>10} {human(e['mid'], unit):>10} "
            f"{human(e['end'], unit):>10} {human(growth, unit):>22} "
            f"{'-' if pct is None else f'{pct:.2f}':>9}  {e.get('verdict', ''):<9}"
        )
    return lines


def format_report(result: dict[str, Any]) -> list[str]:
    """The run's settings and facts; one row per series (start, mid, end, growth, verdict); the
    render times per page at each browser measure."""
    s = result["settings"]
    r = result["retention"]
    load = result.get("load_1m") or {}
    extent = result.get("traffic_window_end") or {}
    lines = [
        f"netmon bench soak-up: {s['event_hours']:g} h of event time at --speed {s['speed']:g} "
        f"({result['minutes']:g} min), {s['pps']:,} packets/s, {s['scenario']} capture of "
        f"{s['loop_s']:g} s looped {result['loops']} times; kinds {', '.join(result.get('kinds', []))}",
        f"command: netmon {result.get('command')}",
        f"retention: results_days = {r['results_days']:.6g} ({s['retention_hours']:g} h of event time), "
        f"compact_after_s = {r['compact_after_s']:g}, interval_s = {r['interval_s']:g}, "
        f"kafka_retention_hours = {r['kafka_retention_hours']:.6g}; topics' segment.ms = "
        f"{round(s['segment_s'] * 1000)}",
        f"ran {result.get('elapsed_s')} s (replay done at {result.get('replay_done_s')} s), "
        f"{len(result.get('samples', []))} samples, {len(result.get('render_samples', []))} browser "
        f"measures; restarts {result.get('restarts')}",
        f"load average (1 min) on {result['cpus']} CPUs: min {load.get('min')}, mean {load.get('mean')}, "
        f"max {load.get('max')}",
        f"traffic results left: window_end {extent.get('oldest')} .. {extent.get('newest')} "
        f"(replay started at event time {result.get('start_at')})",
        f"stop: netmon up exit {result.get('up_exit')} after {result.get('stop_s')} s; processes left: "
        f"{result.get('left_after_stop') or 'none'}",
        "",
        *_series_rows(result.get("series", {})),
        "",
    ]
    renders = result.get("render_samples") or []
    if renders:
        names = [k for k in renders[0] if k != "t"]
        lines.append(f"{'render (s) at t (min)':<30} " + " ".join(f"{x['t'] / 60:>6.1f}" for x in renders))
        for name in names:
            values = " ".join(
                f"{x[name]:>6.2f}" if isinstance(x.get(name), int | float) else f"{'-':>6}" for x in renders
            )
            lines.append(f"{name:<30} {values}")
        lines.append("")
        lines += _series_rows(result.get("render_series", {}))
    for error in [*result.get("browser_errors", []), *result.get("page_errors", [])]:
        lines.append(f"browser: {error}")
    lines.append(
        f"plateau: least-squares growth over the second half x 10 min <= {s['threshold_pct']:g} % of the end "
        f"value, or <= the floor (1 MiB; 2 descriptors; {result.get('lag_floor', 0):g} messages "
        f"of lag; {s['render_floor_s']:g} s of render time)"
    )
    return lines
