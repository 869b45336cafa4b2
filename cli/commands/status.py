"""``netmon status``: every service ``netmon up`` runs (pid, uptime, restarts), and the pipeline's lag.

Reads ``netmon up``'s state file (:func:`netmon.supervisor.state_file`), the pipeline's status file
and, for the lag, the packets topic's end offsets. Exit code 0 when ``netmon up`` runs, 3 when not
(the last state it left is shown, as systemd's ``status`` does).

A service the state file says runs (or is reused) is checked against its process: when no process
has its pid any more, or the one that has it started after the service did (the pid went to
another process), it is shown ``dead`` — what a ``netmon up`` killed outright leaves behind, or a
reused pipeline or broker that stopped.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from cli.main import pass_config
from netmon.config import Config


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON on stdout.")
@pass_config
def command(cfg: Config, as_json: bool) -> None:
    """Show the services of `netmon up`: state, pid, uptime, restarts; and the pipeline's lag."""
    from netmon.metrics import pipeline_lag
    from netmon.results import status_file
    from netmon.supervisor import read_state, running_supervisor, state_file

    state = read_state(state_file(cfg)) or {}
    if state:  # an empty state stays empty: "no state in ..." below
        state["services"] = [_checked(s) for s in state.get("services") or [] if isinstance(s, dict)]
    holder = running_supervisor(state_file(cfg))
    running = holder is not None
    pipeline = _json(status_file(cfg))
    lag = pipeline_lag(cfg, timeout_s=3.0)
    if as_json:
        body = {"running": running, **state, "pipeline_lag_records": lag, "pipeline": pipeline}
        click.echo(json.dumps(body, indent=1))
        sys.exit(0 if running else 3)
    now = time.time()
    head = f"netmon up: running (pid {holder})" if running else "netmon up: not running"
    click.echo(head if state else f"{head} (no state in {state_file(cfg).parent})")
    rows = [("SERVICE", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT")]
    for s in state.get("services") or []:
        started = s.get("started")
        rows.append(
            (
                s["name"],
                s["state"],
                str(s.get("pid") or "-"),
                _duration(now - started) if started and running and s["state"] != "dead" else "-",
                str(s.get("restarts", 0)),
                "-" if s.get("last_exit") is None else str(s["last_exit"]),
            )
        )
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    click.echo(_pipeline_line(pipeline, lag, now))
    sys.exit(0 if running else 3)


def _checked(service: dict[str, Any]) -> dict[str, Any]:
    """``service`` as the state file has it, or marked ``dead`` (its recorded state kept as
    ``recorded_state``) when it should run and its process is gone or is another one."""
    from netmon.supervisor import DEAD, REUSED, RUNNING, service_alive

    pid, started = service.get("pid"), service.get("started")
    if service.get("state") not in (RUNNING, REUSED) or not isinstance(pid, int) or pid <= 0:
        return service
    if service_alive(pid, float(started) if isinstance(started, int | float) else None):
        return service
    return {**service, "state": DEAD, "recorded_state": service["state"]}


def _pipeline_line(pipeline: dict[str, Any] | None, lag: int | None, now: float) -> str:
    lag_text = "unknown" if lag is None else f"{lag:,} records"
    if pipeline is None:
        return f"pipeline: no status yet; lag {lag_text}"
    queries = pipeline.get("queries") or {}
    traffic = queries.get("traffic") or {}
    age = now - float(pipeline.get("updated") or 0)
    return (
        f"pipeline: lag {lag_text}; {traffic.get('packets', 0):,} packets, "
        f"{traffic.get('batches', 0):,} batches, last batch {traffic.get('last_batch_ms', 0)} ms, "
        f"late {traffic.get('late_dropped', 0):,}, malformed {traffic.get('malformed', 0):,}; "
        f"status {age:.0f} s old"
    )


def _json(path: Any) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{days}d{hours:02d}h" if days else f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
    )
