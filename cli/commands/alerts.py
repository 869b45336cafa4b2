"""``netmon alerts run|rules|list|status|retry|prune|test``: alert rules, delivered as webhooks."""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any, NoReturn

import click

from cli.main import pass_config
from netmon.config import AlertsConfig, Config, ConfigError, alerts_config, load_config

pass_alerts = click.make_pass_decorator(AlertsConfig)


@click.group("alerts")
@click.option(
    "--alerts-config",
    "alerts_path",
    type=click.Path(dir_okay=False),
    envvar="NETMON_ALERTS_CONFIG",
    help="A TOML file whose [alerts] table to use instead of netmon.toml's.",
)
@click.pass_context
def command(ctx: click.Context, alerts_path: str | None) -> None:
    """Evaluate alert rules on the result topics and deliver signed webhooks (docs/alerts.md)."""
    try:
        # `netmon` loaded the configuration; the group run on its own reads $NETMON_CONFIG
        ctx.obj = alerts_config(ctx.find_object(Config) or load_config(), alerts_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _outbox(cfg: Config, *, readonly: bool = True) -> Any:
    from alerts.outbox import Outbox, outbox_path

    path = outbox_path(cfg.paths.state_dir)
    if not path.exists():
        raise click.ClickException(f"no alert outbox yet at {path} (has `netmon alerts run` run?)")
    return Outbox(path, readonly=readonly)


def _time(t: float | None) -> str:
    from alerts.rules import iso

    return iso(t) or "-"


def _config_error(command: str, exc: ConfigError) -> NoReturn:
    """A configuration problem found at start (an unset secret_env): one line, exit 2."""
    click.echo(f"netmon alerts {command}: error: {exc}", err=True)
    sys.exit(2)


def _check_secrets(command: str, targets: list[Any]) -> None:
    for target in targets:
        problem = target.secret_problem()
        if problem:
            _config_error(command, ConfigError(problem))


def _summary(counts: dict[str, int]) -> str:
    return (
        f"alerts: {counts.get('firing', 0)} firing, {counts.get('resolved', 0)} resolved;"
        f" deliveries: {counts.get('pending', 0)} pending, {counts.get('delivered', 0)} delivered,"
        f" {counts.get('dead', 0)} dead; malformed result rows skipped: {counts.get('skipped_rows', 0)}"
    )


@command.command("run")
@click.option("--idle-exit", type=float, default=None, help="Exit after this many seconds without rows.")
@pass_alerts
@pass_config
def run(cfg: Config, alerts: AlertsConfig, idle_exit: float | None) -> None:
    """Consume the result topics, evaluate the rules, write the outbox, deliver (until Ctrl-C)."""
    from kafka.errors import KafkaError

    from alerts.service import AlertService

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        totals = AlertService(cfg, alerts).run(stop, idle_exit_s=idle_exit)
    except KafkaError as exc:
        raise click.ClickException(f"Kafka at {cfg.kafka.bootstrap}: {exc}") from None
    except ConfigError as exc:  # a target's secret_env names an unset variable
        _config_error("run", exc)
    line = f"{totals.rows} result rows, {totals.notifications} notifications"
    if totals.bad:
        line += f", {totals.bad} malformed rows skipped (netmon alerts status)"
    click.echo(line, err=True)


@command.command("rules")
@click.option("--json", "as_json", is_flag=True)
@pass_alerts
@pass_config
def rules(cfg: Config, alerts: AlertsConfig, as_json: bool) -> None:
    """The rules `netmon alerts run` evaluates (built-in and configured) and any evaluation problems.

    The built-in rules are the detection rules when the pipeline publishes the features kind
    ([pipeline] kinds has "features"), the threshold rules otherwise (docs/alerts.md, "Streaming")."""
    from alerts.defaults import DETECTION_RULES, effective_rules, service_builtin
    from alerts.outbox import outbox_path

    problems = _outbox(cfg).problems() if outbox_path(cfg.paths.state_dir).exists() else {}
    builtin = service_builtin(cfg)
    if not as_json and alerts.builtin_rules:
        detection = builtin[: len(DETECTION_RULES)] == DETECTION_RULES
        click.echo(
            "built-in rules: the detection rules (the pipeline publishes the features kind)"
            if detection
            else "built-in rules: the threshold rules ([pipeline] kinds without features)"
        )
    for r in effective_rules(alerts, builtin):
        problem = problems.get(r.name)
        if as_json:
            item: dict[str, Any] = {"name": r.name, "source": r.source, "mode": r.mode}
            item |= {"condition": r.condition(), "severity": r.severity, "enabled": r.enabled}
            click.echo(json.dumps(item | {"labels": r.labels, "problem": problem and problem[0]}))
            continue
        state = "" if r.enabled else " (disabled)"
        click.echo(f"{r.name} [{r.severity}]{state}: {r.condition()}")
        click.echo(
            f"    subject: {r.label_for_subject}; rearm: at most {r.max_notifications} notifications"
            f" per subject per {r.cooldown_s:g}s"
        )
        if problem:
            click.echo(f"    PROBLEM: {problem[0]} ({problem[1]} rows)")


@command.command("list")
@click.option("--status", type=click.Choice(["firing", "resolved"]), default=None)
@click.option("--dead", is_flag=True, help="List dead-letter deliveries instead.")
@click.option("--json", "as_json", is_flag=True)
@pass_config
def list_(cfg: Config, status: str | None, dead: bool, as_json: bool) -> None:
    """Alerts with their delivery state per target (or the dead letters)."""
    with _outbox(cfg) as outbox:
        items = outbox.deliveries("dead") if dead else outbox.alerts(status)
        counts = outbox.counts()
    for a in items:
        if as_json:
            click.echo(json.dumps(a, sort_keys=True, default=str))
        elif dead:
            click.echo(f"{a['event_id']} -> {a['target']}: {a['attempts']} attempt(s), {a['last_error']}")
        else:
            sent = ", ".join(f"{t}={s}" for t, s in sorted(a["deliveries"].items())) or "no target"
            click.echo(
                f"{a['status']:<8} {a['severity']:<8} {a['rule']}: {a['subject_label']} {a['subject']} "
                f"first {_time(a['first_seen'])} last {_time(a['last_seen'])} [{sent}]"
            )
    if not as_json and not dead:
        click.echo(_summary(counts))


@command.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_config
def status(cfg: Config, as_json: bool) -> None:
    """Counts of alerts and deliveries, and the malformed result rows skipped, per reason."""
    with _outbox(cfg) as outbox:
        counts, skipped = outbox.counts(), outbox.skipped()
    if as_json:
        click.echo(json.dumps({"counts": counts, "skipped_rows": skipped}, sort_keys=True))
        return
    click.echo(_summary(counts))
    for reason, item in skipped.items():
        click.echo(
            f"    skipped {item['count']}: {reason} (first {_time(item['first_at'])},"
            f" last {_time(item['last_at'])} at {item['last_where']})"
        )


@command.command("prune")
@click.option("--keep-days", type=click.FloatRange(min=0), default=None, help="Default: [alerts] keep_days.")
@pass_alerts
@pass_config
def prune(cfg: Config, alerts: AlertsConfig, keep_days: float | None) -> None:
    """Delete delivered and dead deliveries (and their events, resolved episodes) older than keep_days."""
    days = alerts.keep_days if keep_days is None else keep_days
    with _outbox(cfg, readonly=False) as outbox:
        pruned = outbox.prune(days)
    click.echo(
        f"pruned {pruned['deliveries']} deliveries, {pruned['events']} events,"
        f" {pruned['alerts']} resolved alerts older than {days:g} days"
    )


@command.command("retry")
@click.option("--target", "target_name", default=None, help="Only this target's dead letters.")
@click.option("--event", "event_id", default=None, help="Only this event id.")
@pass_alerts
@pass_config
def retry(cfg: Config, alerts: AlertsConfig, target_name: str | None, event_id: str | None) -> None:
    """Re-send dead letters now; those still failing go back to retrying with backoff."""
    from alerts.delivery import Deliverer, PassResult

    _check_secrets("retry", [t for t in alerts.targets if t.enabled and target_name in (None, t.name)])
    with _outbox(cfg, readonly=False) as outbox:
        requeued = outbox.requeue(target=target_name, event_id=event_id)
        deliverer, result = Deliverer(outbox.path, alerts), PassResult()
        for name in [target_name] if target_name else list(deliverer.targets):
            result += deliverer.deliver_due(outbox, name, force=True)
    click.echo(
        f"requeued {requeued}: delivered {result.delivered}, retrying {result.retrying}, dead {result.dead}"
    )


@command.command("test")
@click.option("--target", "target_name", required=True, help="A [[alerts.targets]] name.")
@pass_alerts
def test(alerts: AlertsConfig, target_name: str) -> None:
    """Send a test alert to one target now and report the answer."""
    from alerts.delivery import send_test_alert

    try:
        target = alerts.target(target_name)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    _check_secrets("test", [target])
    notification, attempt = send_test_alert(target)
    if not attempt.ok:
        raise click.ClickException(f"test alert to {target.name} failed: {attempt.error}")
    click.echo(f"delivered test alert {notification.event_id} to {target.name} (HTTP {attempt.status})")
