"""The ``[alerts]`` section of ``netmon.toml``: rules, webhook targets, delivery settings.

Frozen keyword-only dataclasses, like the other sections (:mod:`netmon.config.sections`);
:class:`netmon.config.Config` composes :class:`AlertsConfig` as ``Config.alerts`` and the one
loader (:func:`netmon.config.load_config`) builds it. Rules are ``[[alerts.rules]]`` tables and
targets ``[[alerts.targets]]`` tables. Secrets (``secret``, ``routing_key``, and ``url``, since
chat webhook URLs embed a token) are ``field(repr=False)`` and can come from environment variables
(``secret_env``, ``routing_key_env``) instead of the file.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import os
import re
from dataclasses import dataclass

from netmon.config.checks import ConfigError, check_url, positive
from netmon.config.sections import RESULT_KINDS

__all__ = [
    "AGGREGATES",
    "FORMATS",
    "KINDS",
    "MODES",
    "OPS",
    "SEVERITIES",
    "SIGNATURES",
    "AlertRule",
    "AlertTarget",
    "AlertsConfig",
    "parse_comparison",
    "secret_key",
]

#: the result kinds a rule can read (topics ``<prefix><kind>``). ``features`` are the per-window
#: detection rows of :mod:`analytics.alert_features` (``netmon analyze alerts`` computes them
#: offline; the pipeline publishes them when ``[pipeline] kinds`` has ``features``, see docs/alerts.md)
KINDS = (*(kind for kind in RESULT_KINDS if kind != "features"), "features")
#: how a rule decides: a fixed ``threshold``, or a band learned per subject (``baseline``)
MODES = ("threshold", "baseline")
#: comparison operators of a condition
OPS = (">", ">=", "<", "<=", "==", "!=")
#: severities, lowest first (PagerDuty Events v2 uses the same four)
SEVERITIES = ("info", "warning", "error", "critical")
#: payload formats of a target
FORMATS = ("json", "slack", "pagerduty")
#: signature schemes of a target: Standard Webhooks (``webhook-*`` headers), netmon's own (``X-Netmon-*``)
SIGNATURES = ("standard", "netmon-v1")
#: the prefix of a Standard Webhooks secret: ``whsec_<base64 of the key>``
SECRET_PREFIX = "whsec_"
#: how the rows of one report (or window) with the same subject combine
AGGREGATES = ("max", "sum", "count", "distinct")

_COMPARISON = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?[0-9.eE+]+)\s*$")


def parse_comparison(text: str) -> tuple[str, float] | None:
    """``">= 500"`` → ``(">=", 500.0)``; None when ``text`` is not a comparison.

    >>> parse_comparison(">=1000"), parse_comparison("10.0.0.5")
    (('>=', 1000.0), None)
    """
    m = _COMPARISON.match(text)
    if not m:
        return None
    try:
        return m.group(1), float(m.group(2))
    except ValueError:
        return None


def secret_key(secret: str) -> bytes | None:
    """The HMAC key of a Standard Webhooks secret, or None if it is malformed.

    ``whsec_<base64>`` (padding optional) is the base64-decoded key, as the Standard Webhooks
    libraries read it; any other text is the key itself (its UTF-8 bytes).

    >>> secret_key("whsec_c2VjcmV0"), secret_key("raw text"), secret_key("whsec_!!")
    (b'secret', b'raw text', None)
    """
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode() or None
    text = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return key or None


@dataclass(frozen=True, kw_only=True)
class AlertRule:
    """One alert rule: ``[[alerts.rules]]``.

    A result row of kind ``source`` (and query ``query``, if given) that passes the ``where``
    filters *holds* for its subject when ``field op threshold``. The alert fires once the
    condition has held in every report for ``for_s`` seconds of event time, and resolves at the
    first report in which it no longer holds. Per (rule, subject) at most ``max_notifications``
    notifications go out in any ``cooldown_s`` seconds of event time (the rearm limit).
    """

    name: str
    #: the result kind: traffic, topk, distinct, joins, shedding, sys (or features)
    source: str
    #: the row's column or derived value compared (topk ``share``; traffic ``packets_per_s``, ...);
    #: with aggregate "distinct", the column whose distinct values are counted
    field: str = ""
    op: str = ">"
    #: required in mode "threshold"; mode "baseline" ignores it (it shows the band instead)
    threshold: float = math.nan
    #: only rows of this query (empty: every query of the kind)
    query: str = ""
    #: column(s), comma-separated, naming what the alert is about (empty: the query)
    subject: str = ""
    #: what the subject is to a reader: "victim", "scanner", "destination" (default: the column)
    subject_label: str = ""
    #: row filters: a value means equality, a string like ">= 500" a numeric comparison
    where: dict[str, str | int | float | bool] = dataclasses.field(default_factory=dict)
    #: a subject's rows of one report or window: "max" (any row holds), "sum" (their total),
    #: "count" (how many rows), "distinct" (how many distinct values of ``field``)
    aggregate: str = "max"
    #: > 0: rows are events, counted in tumbling event-time windows of this length (needed by
    #: count and distinct); 0: rows are reports that carry their own window (``window_end``)
    window_s: float = 0.0
    #: with window_s: how long after a window's end its rows may still arrive
    lateness_s: float = 5.0
    #: the column with the row's event time (default: window_end, event_time, batch_time, ts, ...)
    time_field: str = ""
    #: the condition must hold this long (event time) before the alert fires
    for_s: float = 0.0
    severity: str = "warning"
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: subjects never alerted on (an allowlist: known resolvers, load balancers, ...)
    ignore: tuple[str, ...] = ()
    #: rearm limit: at most this many notifications (firing + resolved) per subject ...
    max_notifications: int = 2
    #: ... in any window of this many seconds of event time
    cooldown_s: float = 300.0
    #: one-line text; placeholders {rule} {subject} {subject_label} {value} {threshold} {field} {query}
    summary: str = ""
    #: why the rule and its threshold (``netmon alerts rules`` shows it)
    description: str = ""
    enabled: bool = True
    #: "threshold": ``field op threshold``; "baseline": ``field`` above its own learned band
    #: (per subject: EWMA mean + ``sensitivity`` standard deviations, at least ``min_ratio`` times
    #: the mean), learned over ``warmup`` reports first
    mode: str = "threshold"
    #: the value must also reach this floor (both modes; baseline mode's only absolute number;
    #: 0, the default: no floor)
    min_value: float = 0.0
    #: baseline: how many standard deviations above the mean the band ends
    sensitivity: float = 4.0
    #: baseline: the band ends at least this many times the mean
    min_ratio: float = 2.0
    #: baseline: reports of the rule's stream learned before it can fire, and values a subject
    #: needs before its own band is used (a subject seen later starts against ``min_value`` only)
    warmup: int = 3
    #: baseline: weight of each new value once warm (memory ~ 1/alpha reports)
    alpha: float = 0.1
    #: baseline: further columns that must rise above their own band too (e.g. ``packets``)
    also: tuple[str, ...] = ()
    #: skip rows computed from a sample (their ``keep`` below 1: the resource manager's intake
    #: drop box): for values a sample inflates, e.g. failed connections, whose answers it drops
    exact_only: bool = False

    def __post_init__(self) -> None:
        where = f"[[alerts.rules]] {self.name!r}"
        for name in (
            "threshold",
            "for_s",
            "cooldown_s",
            "window_s",
            "lateness_s",
            "min_value",
            "sensitivity",
            "min_ratio",
            "alpha",
        ):  # 200 and 200.0 are the same threshold
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        if not self.name.strip():
            raise ConfigError("[[alerts.rules]]: name must not be empty")
        if not isinstance(self.exact_only, bool):
            raise ConfigError(f"{where} exact_only: expected true or false, got {self.exact_only!r}")
        if self.source not in KINDS:
            raise ConfigError(f"{where} source: expected one of {', '.join(KINDS)}, got {self.source!r}")
        if not self.field.strip() and self.aggregate != "count":
            raise ConfigError(f"{where} field: must name a result column")
        if self.op not in OPS:
            raise ConfigError(f"{where} op: expected one of {' '.join(OPS)}, got {self.op!r}")
        if self.mode == "baseline" and math.isnan(self.threshold):
            object.__setattr__(self, "threshold", float(self.min_value))
        if not math.isfinite(self.threshold):
            raise ConfigError(
                f"{where} threshold: must be a finite number (required unless mode = 'baseline'), "
                f"got {self.threshold!r}"
            )
        if self.aggregate not in AGGREGATES:
            raise ConfigError(
                f"{where} aggregate: expected one of {', '.join(AGGREGATES)}, got {self.aggregate!r}"
            )
        if self.window_s < 0 or self.lateness_s < 0:
            raise ConfigError(f"{where} window_s, lateness_s: must be >= 0")
        if self.aggregate in ("count", "distinct") and not self.window_s:
            raise ConfigError(f"{where} aggregate: {self.aggregate!r} needs window_s > 0 (rows are events)")
        growing = self.aggregate == "distinct" or (self.aggregate == "sum" and not self.window_s)
        if growing and self.op not in (">", ">="):
            raise ConfigError(f"{where} op: aggregate {self.aggregate!r} needs '>' or '>='")
        if self.severity not in SEVERITIES:
            raise ConfigError(
                f"{where} severity: expected one of {', '.join(SEVERITIES)}, got {self.severity!r}"
            )
        if self.for_s < 0:
            raise ConfigError(f"{where} for_s: must be >= 0, got {self.for_s}")
        if self.max_notifications < 1:
            raise ConfigError(f"{where} max_notifications: must be >= 1, got {self.max_notifications}")
        if self.cooldown_s < 0:
            raise ConfigError(f"{where} cooldown_s: must be >= 0, got {self.cooldown_s}")
        if not isinstance(self.where, dict) or not all(
            isinstance(v, str | int | float | bool) for v in self.where.values()
        ):
            raise ConfigError(f"{where} where: expected a table of column = value, got {self.where!r}")
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise ConfigError(f"{where} labels: expected a table of strings, got {self.labels!r}")
        if self.mode not in MODES:
            raise ConfigError(f"{where} mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        if not math.isfinite(self.min_value):
            raise ConfigError(f"{where} min_value: must be a finite number, got {self.min_value!r}")
        if not (math.isfinite(self.sensitivity) and self.sensitivity >= 0):
            raise ConfigError(f"{where} sensitivity: must be a number >= 0, got {self.sensitivity!r}")
        if not (math.isfinite(self.min_ratio) and self.min_ratio >= 1):
            raise ConfigError(f"{where} min_ratio: must be a number >= 1, got {self.min_ratio!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 1:
            raise ConfigError(f"{where} warmup: must be an integer >= 1, got {self.warmup!r}")
        if not 0 < self.alpha <= 1:
            raise ConfigError(f"{where} alpha: must be in (0, 1], got {self.alpha!r}")
        if isinstance(self.also, list):
            object.__setattr__(self, "also", tuple(self.also))
        if not all(isinstance(c, str) and c.strip() for c in self.also):
            raise ConfigError(f"{where} also: expected a list of column names, got {self.also!r}")
        if self.mode == "baseline":
            if self.window_s or self.aggregate != "max":
                raise ConfigError(
                    f"{where} mode: 'baseline' reads report rows (window_s = 0, aggregate 'max')"
                )
            if self.op not in (">", ">="):
                raise ConfigError(f"{where} op: mode 'baseline' alerts on a rise: needs '>' or '>='")
        elif self.also:
            raise ConfigError(f"{where} also: only with mode = 'baseline'")
        try:
            self.summary.format_map(_Blank())
        except (ValueError, IndexError) as exc:
            raise ConfigError(f"{where} summary: not a valid template: {exc}") from None

    @property
    def subject_columns(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.subject.split(",") if c.strip())

    @property
    def measure(self) -> str:
        """What is compared: the field, or ``count``/``distinct <field>`` for those aggregates."""
        return {"count": "count", "distinct": f"distinct {self.field}"}.get(self.aggregate, self.field)

    @property
    def label_for_subject(self) -> str:
        return self.subject_label or self.subject or "query"

    def condition(self) -> str:
        """The condition as text: ``topk[top-sources] share > 0.45 where total>=500 for 5s``."""
        src = f"{self.source}[{self.query}]" if self.query else self.source
        measure = {"sum": f"sum of {self.field}", "count": "count", "distinct": f"distinct {self.field}"}
        text = f"{src} {measure.get(self.aggregate, self.field)} {self.op} {self.threshold:g}"
        if self.where:
            text += " where " + ", ".join(f"{k}{_where_text(v)}" for k, v in sorted(self.where.items()))
        if self.subject:
            text += f" per {self.subject}"
        if self.window_s:
            text += f" per {self.window_s:g}s window"
        if self.mode == "baseline":
            measured = ", ".join((self.field, *self.also))
            text = text.replace(
                f" {self.field} {self.op} {self.threshold:g}",
                f" {measured} above baseline (mean + {self.sensitivity:g} sd, >= {self.min_ratio:g}x mean)",
                1,
            )
        if self.min_value:
            text += f" and >= {self.min_value:g}"
        if self.for_s:
            text += f" for {self.for_s:g}s"
        return text


def _where_text(value: object) -> str:
    if isinstance(value, str) and parse_comparison(value):
        return value.replace(" ", "")
    return f"={value!r}"


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return ""


@dataclass(frozen=True, kw_only=True)
class AlertTarget:
    """A webhook receiver: ``[[alerts.targets]]``."""

    name: str
    #: where to POST (http or https); kept out of reprs and logs (chat webhook URLs hold a token)
    url: str = dataclasses.field(repr=False)
    #: "json" (netmon's own), "slack" (a ``text`` payload), "pagerduty" (Events API v2)
    format: str = "json"
    #: the HMAC-SHA256 signing key: ``whsec_<base64>`` or raw text (empty and no secret_env: unsigned)
    secret: str = dataclasses.field(default="", repr=False)
    #: read the secret from this environment variable instead (unset at start: an error)
    secret_env: str = ""
    #: "standard" (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature) or
    #: "netmon-v1" (X-Netmon-Timestamp, X-Netmon-Signature: netmon's own scheme before Standard Webhooks)
    signature: str = "standard"
    #: route only alerts of at least this severity
    min_severity: str = "info"
    #: route only these rules (empty: all)
    rules: tuple[str, ...] = ()
    #: route only alerts whose labels include all of these
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_s: float = 5.0
    #: PagerDuty integration key (format "pagerduty")
    routing_key: str = dataclasses.field(default="", repr=False)
    routing_key_env: str = ""
    enabled: bool = True

    def __post_init__(self) -> None:
        where = f"[[alerts.targets]] {self.name!r}"
        if not self.name.strip():
            raise ConfigError("[[alerts.targets]]: name must not be empty")
        check_url(where, "url", self.url)
        if self.format not in FORMATS:
            raise ConfigError(f"{where} format: expected one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.min_severity not in SEVERITIES:
            raise ConfigError(
                f"{where} min_severity: expected one of {', '.join(SEVERITIES)}, got {self.min_severity!r}"
            )
        if self.timeout_s <= 0:
            raise ConfigError(f"{where} timeout_s: must be > 0, got {self.timeout_s}")
        if self.signature not in SIGNATURES:
            raise ConfigError(
                f"{where} signature: expected one of {', '.join(SIGNATURES)}, got {self.signature!r}"
            )
        if self.secret and self.signature == "standard" and secret_key(self.secret) is None:
            raise ConfigError(  # the secret itself is never echoed
                f"{where} secret: expected {SECRET_PREFIX}<base64 of at least one byte>, got <hidden>"
            )
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise ConfigError(f"{where} labels: expected a table of strings, got {self.labels!r}")
        if self.format == "pagerduty" and not (self.routing_key or self.routing_key_env):
            raise ConfigError(f"{where}: format 'pagerduty' needs routing_key or routing_key_env")

    def secret_value(self) -> str:
        """The HMAC key: ``secret``, else ``$secret_env`` (empty: requests go unsigned)."""
        return self.secret or (os.environ.get(self.secret_env, "") if self.secret_env else "")

    @property
    def signed(self) -> bool:
        """Requests to this target are meant to be signed (``secret`` or ``secret_env`` is set)."""
        return bool(self.secret or self.secret_env)

    def secret_problem(self) -> str | None:
        """Why this target cannot sign as configured (one line, never the value), or None.

        ``secret_env`` naming an unset or empty variable, or a ``whsec_`` value from it that is not
        base64, is a problem: the requests would silently go unsigned or fail every check.
        """
        where = f"[[alerts.targets]] {self.name!r}"
        if self.secret or not self.secret_env:
            return None
        value = os.environ.get(self.secret_env, "")
        if not value:
            return f"{where} secret_env: environment variable {self.secret_env} is not set (or empty)"
        if self.signature == "standard" and secret_key(value) is None:
            return (
                f"{where} secret_env: environment variable {self.secret_env} holds a {SECRET_PREFIX}"
                " value that is not base64"
            )
        return None

    def routing_key_value(self) -> str:
        if self.routing_key:
            return self.routing_key
        return os.environ.get(self.routing_key_env, "") if self.routing_key_env else ""


@dataclass(frozen=True, kw_only=True)
class AlertsConfig:
    """Alert rules and webhook delivery: the ``[alerts]`` section."""

    enabled: bool = True
    #: include the built-in rules (``alerts.defaults``); a configured rule of the same name replaces one
    builtin_rules: bool = True
    rules: tuple[AlertRule, ...] = ()
    targets: tuple[AlertTarget, ...] = ()
    #: the Kafka consumer group of ``netmon alerts run``
    group_id: str = "netmon-alerts"
    #: longest wait for new result rows per poll
    poll_s: float = 1.0
    #: first retry delay of a failed delivery; doubles per attempt up to retry_max_s
    retry_initial_s: float = 2.0
    retry_max_s: float = 300.0
    #: each delay is multiplied by a random factor in [1 - retry_jitter, 1]
    retry_jitter: float = 0.5
    #: a delivery still failing this long after its event was written becomes a dead letter
    max_age_s: float = 21600.0
    #: delivered and dead deliveries (and then their events and resolved episodes) older than this
    #: many days are deleted from the outbox; pending ones never are
    keep_days: float = 7.0
    #: detection features (kind ``features``, analytics.alert_features): their tumbling window ...
    features_window_s: float = 5.0
    #: ... how long a SYN waits for its SYN-ACK or RST before it counts as unanswered ...
    features_timeout_s: float = 3.0
    #: ... and the subjects kept per window and family, by each ranked column
    features_top: int = 100

    def __post_init__(self) -> None:
        if self.poll_s <= 0:
            raise ConfigError(f"[alerts] poll_s: must be > 0, got {self.poll_s}")
        if not 0 < self.retry_initial_s <= self.retry_max_s:
            raise ConfigError("[alerts] retry_initial_s: must be > 0 and <= retry_max_s")
        if not 0 <= self.retry_jitter <= 1:
            raise ConfigError(f"[alerts] retry_jitter: must be in [0, 1], got {self.retry_jitter}")
        if self.max_age_s <= 0:
            raise ConfigError(f"[alerts] max_age_s: must be > 0, got {self.max_age_s}")
        positive("[alerts]", "keep_days", self.keep_days, zero=True)
        positive("[alerts]", "features_window_s", self.features_window_s)
        positive("[alerts]", "features_timeout_s", self.features_timeout_s, zero=True)
        if (
            isinstance(self.features_top, bool)
            or not isinstance(self.features_top, int)
            or self.features_top < 1
        ):
            raise ConfigError(f"[alerts] features_top: must be an integer >= 1, got {self.features_top!r}")
        for kind, items in (("rules", self.rules), ("targets", self.targets)):
            names = [i.name for i in items]
            if len(set(names)) != len(names):
                raise ConfigError(f"[alerts] {kind}: names must be unique, got {names}")

    def target(self, name: str) -> AlertTarget:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "none configured"
        raise ConfigError(f"[alerts] no target named {name!r} (targets: {known})")
