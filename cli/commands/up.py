"""``netmon up``: every service of a monitor, supervised, until Ctrl-C or SIGTERM.

Starts (or reuses when running) the local broker (none when ``[kafka] bootstrap_servers`` names
an external Kafka, e.g. ``netmon cluster up``'s), then the pipeline, the alert service, the
dashboard and the sources — one ``netmon capture`` per ``--iface``, or ``netmon replay FILE`` —
as child processes (:mod:`netmon.supervisor`), serves ``/metrics`` (:mod:`netmon.metrics`) and
prints one line per service. A child that dies is restarted with backoff, and a line says so; the
broker it started is watched and restarted the same way. SIGINT/SIGTERM stop the children in
reverse order (sources first, pipeline last), then the broker it started. Killed outright
(SIGKILL), it leaves no process running either (:mod:`netmon.orphans`); a ``netmon up`` that finds
processes a killed one left stops them before it starts anything.

Exit codes: 0 stopped by a signal; 1 another ``netmon up`` runs here, the broker or the metrics
port failed; 2 bad options.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from cli.commands.produced import fail
from cli.main import pass_config
from netmon.config import Config


@click.command("up")
@click.option("--iface", "ifaces", multiple=True, metavar="IF", help="Capture on IF (repeatable; root).")
@click.option("--replay", "replay_file", type=click.Path(dir_okay=False, exists=True), help="Replay FILE.")
@click.option("--speed", type=float, help="--replay: pacing scaled (1 = as captured; default: fast).")
@click.option("--pps", type=float, help="--replay: a fixed rate, packets per second (not with --speed).")
@click.option("--loop", type=int, help="--replay: replay N times, event time increasing.")
@click.option(
    "--start-at",
    metavar="TIME",
    help="--replay: shift timestamps so the first packet is at TIME (ISO-8601, e.g. 2024-05-01T12:00:00Z).",
)
@click.option("--rebase-time", is_flag=True, help="--replay: shift timestamps so the first packet is now.")
@click.option("--filter", "filter_", metavar="EXPR", help='Records to keep: "proto=udp and dst_port=53".')
@click.option("--bpf", metavar="EXPR", help="--iface: kernel filter, tcpdump syntax (needs libpcap).")
@click.option("--no-dashboard", is_flag=True, help="Do not run the dashboard.")
@click.option("--no-alerts", is_flag=True, help="Do not run the alert service.")
@pass_config
def command(
    cfg: Config,
    ifaces: tuple[str, ...],
    replay_file: str | None,
    speed: float | None,
    pps: float | None,
    loop: int | None,
    start_at: str | None,
    rebase_time: bool,
    filter_: str | None,
    bpf: str | None,
    no_dashboard: bool,
    no_alerts: bool,
) -> None:
    """Run broker, capture or replay, pipeline, dashboard and alerts; restart what dies.

    Each service runs as a child process logging to <state>/logs/<service>.log; a line is printed
    when one dies or restarts. /metrics is served on [metrics] host:port. Ctrl-C or SIGTERM stops
    them in order: sources first, pipeline last (docs/operations.md).
    """
    from netmon.supervisor import Supervisor, SupervisorRunning, monitor_services

    if bool(ifaces) == bool(replay_file):
        fail("up", "give --iface IF (one or more) or --replay FILE", 2)
    problem = _replay_problem(
        replay_file, speed=speed, pps=pps, loop=loop, start_at=start_at, rebase=rebase_time
    )
    if problem:
        fail("up", problem, 2)
    cfg = cfg.replace(services={"dashboard": cfg.services.dashboard and not no_dashboard})
    cfg = cfg.replace(services={"alerts": cfg.services.alerts and not no_alerts})
    filters = ("--filter", filter_) if filter_ else ()
    replay_args = (
        *filters,
        *(("--speed", str(speed)) if speed else ()),
        *(("--pps", str(pps)) if pps else ()),
        *(("--loop", str(loop)) if loop else ()),
        *(("--start-at", start_at) if start_at else ()),
        *(("--rebase-time",) if rebase_time else ()),
    )
    capture_args = (*filters, *(("--bpf", bpf) if bpf else ()))
    sup = Supervisor.from_config(cfg, [])
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        sup.lock()  # before the broker: a second `netmon up` starts nothing
    except SupervisorRunning as exc:
        fail("up", str(exc), 1)
    # what a `netmon up` killed outright left (a pipeline holding the data directory's lock would
    # otherwise be taken for one to reuse)
    for line in sup.clean_leftovers():
        click.echo(line, err=True)
    services, reused = monitor_services(
        cfg, ifaces=ifaces, replay=replay_file, replay_args=replay_args, capture_args=capture_args
    )
    sup.add(services, reused)
    broker, broker_pid = _broker(cfg, sup)
    watch = _BrokerWatch(broker, broker_pid, sup, cfg)
    metrics = None
    try:
        sup.start()
        metrics = _metrics(cfg)
        for s in sup.states():
            pid = f"pid {s.pid}" if s.pid else "already running"
            click.echo(f"{s.name}: {'reused, ' if s.state == 'reused' else ''}{pid}", err=True)
        if cfg.services.dashboard:
            click.echo(f"dashboard: http://{cfg.dashboard.host}:{cfg.dashboard.port}", err=True)
        if metrics is not None:
            click.echo(f"metrics: {metrics.url}", err=True)
        click.echo(f"logs: {cfg.paths.state_dir}/logs; Ctrl-C stops everything", err=True)
        while not stop.wait(cfg.services.poll_s):
            for line in [*sup.poll(), *watch.check()]:
                click.echo(line, err=True)
            if metrics is not None:
                metrics.collector.observe()
    finally:
        click.echo("stopping: sources first, pipeline last...", err=True)
        for line in sup.stop():
            click.echo(line, err=True)
        if metrics is not None:
            metrics.close()
        if broker is not None:
            click.echo(f"broker: {broker.stop()}", err=True)
            watch.state.state, watch.state.pid, watch.state.started = "stopped", None, None
            sup.write_state()


def _replay_problem(
    replay_file: str | None,
    *,
    speed: float | None,
    pps: float | None,
    loop: int | None,
    start_at: str | None,
    rebase: bool,
) -> str | None:
    """What is wrong with the replay options (as ``netmon replay`` would say it, but before any
    service starts), or None."""
    given = [
        name
        for name, value in (("--speed", speed), ("--pps", pps), ("--loop", loop), ("--start-at", start_at))
        if value is not None
    ] + (["--rebase-time"] if rebase else [])
    if given and replay_file is None:
        return f"{', '.join(given)}: only with --replay FILE"
    if speed is not None and pps is not None:
        return "--speed and --pps are exclusive: choose one pacing"
    for name, value in (("--speed", speed), ("--pps", pps)):
        if value is not None and not value > 0:
            return f"{name} must be > 0, got {value:g}"
    if loop is not None and loop < 1:
        return f"--loop must be >= 1, got {loop}"
    if start_at is not None and rebase:
        return "--rebase-time and --start-at are exclusive: choose one time base"
    if start_at is not None:
        from ingest.generate import parse_start

        try:
            parse_start(start_at, "--start-at")
        except ValueError as exc:
            return str(exc)
    return None


def _broker(cfg: Config, sup: Any) -> tuple[Any, int | None]:
    """Start the local broker unless it runs (then reuse it) or Kafka is external.

    Returns the broker when ``netmon up`` started it (else None), and its pid.
    """
    if cfg.kafka.bootstrap_servers:
        # Nothing of ours to start or watch; say which Kafka the services use, the first thing to
        # check when they keep restarting.
        servers = cfg.kafka.bootstrap_servers
        click.echo(f"kafka: {servers} ([kafka] bootstrap_servers; no local broker)", err=True)
        return None, None
    from netmon.broker import BrokerError, LocalBroker
    from netmon.jvm_deps import JvmDepsError

    broker = LocalBroker(cfg)
    was_running = broker.status(with_topics=False).running
    try:
        line = broker.start(supervised=None if was_running else sup.child_env()).line()
    except (BrokerError, JvmDepsError) as exc:
        sup.stop()
        fail("up", f"broker: {exc}", 1)
    click.echo(f"broker: {'reused, ' if was_running else ''}{line}", err=True)
    pid = broker.pid()
    if not was_running and pid is not None:
        sup.track(pid)
    return (None if was_running else broker), pid


def _metrics(cfg: Config) -> Any:
    if not cfg.metrics.enabled:
        return None
    from netmon.metrics import serve

    try:
        return serve(cfg, alert_counts=lambda: _alert_counts(cfg))
    except OSError as exc:
        fail("up", f"metrics on {cfg.metrics.host}:{cfg.metrics.port}: {exc} (see [metrics] port)", 1)


def _alert_counts(cfg: Config) -> dict[str, int] | None:
    from alerts.outbox import Outbox, outbox_path

    path = outbox_path(cfg.paths.state_dir)
    if not path.exists():
        return None
    outbox = Outbox(path, readonly=True)
    try:
        return outbox.counts()
    finally:
        outbox.close()


class _BrokerWatch:
    """Restart the broker ``netmon up`` started when it dies, with the supervisor's backoff.

    A local broker that was running already is shown as reused (and left alone).
    """

    def __init__(self, broker: Any, pid: int | None, sup: Any, cfg: Config) -> None:
        from netmon.supervisor import Backoff, ServiceState

        self.broker = broker
        self.sup = sup
        self.state = ServiceState("broker", "local Kafka broker", state="running" if broker else "reused")
        self.state.pid = pid
        self.state.started = time.time() if broker else None
        s = cfg.services
        self.backoff = Backoff(s.restart_backoff_s, s.restart_backoff_max_s, stable_s=s.stable_s)
        self.due: float | None = None
        self.since = time.monotonic()
        if pid is not None:
            sup.reused.insert(0, self.state)

    def check(self) -> list[str]:
        if self.broker is None:
            pid = self.state.pid
            if pid is not None and self.state.state == "reused" and not Path(f"/proc/{pid}").exists():
                self.state.state, self.state.pid = "stopped", None
                return [f"broker: the broker netmon up reused (pid {pid}) is gone; it does not restart it"]
            return []
        from netmon.broker import BrokerError

        now = time.monotonic()
        if self.due is None:
            if self.broker.pid() is not None:
                return []
            wait_s = self.backoff.next(now - self.since)
            self.due = now + wait_s
            if self.state.pid is not None:
                self.sup.untrack(self.state.pid)
            self.state.state, self.state.pid, self.state.started = "waiting", None, None
            return [f"broker: died; restarting in {wait_s:g} s"]
        if now < self.due:
            return []
        self.due = None
        try:
            self.broker.start(supervised=self.sup.child_env())
        except BrokerError as exc:
            self.due = now + self.backoff.next(0.0)
            return [f"broker: restart failed: {exc}"]
        self.since = time.monotonic()
        self.state.restarts += 1
        self.state.state, self.state.pid, self.state.started = "running", self.broker.pid(), time.time()
        if self.state.pid is not None:
            self.sup.track(self.state.pid)
        return [f"broker: restarted (pid {self.state.pid}, restart {self.state.restarts})"]
