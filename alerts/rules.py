"""Rule evaluation over result rows: firing, resolution, deduplication and the rearm limit.

:class:`RuleEngine` is fed result rows in their Kafka order (``observe(kind, row)``) and returns the
notifications to send. It is deterministic: its only clock is the rows' event time, so replaying
the same rows from a :meth:`RuleEngine.snapshot` gives the same notifications with the same ids.

Semantics, per rule and per stream (the rows of one query of the rule's kind):

- **Reports.** Rows carry a window time (``window_end``; ``ts``/``time``/``timestamp`` for kinds
  without windows). Rows with the same time form one report; a row with a later time closes the
  previous report. Rows older than the newest report are duplicates or late and are skipped
  (result delivery is at least once).
- **Holding.** A row holds for its subject (the rule's ``subject`` columns, or the query) when
  it passes the ``where`` filters and ``field op threshold``. With ``aggregate = "sum"`` the
  subject's rows of one report are summed first (exact duplicate rows counted once).
- **Event rows** (``window_s > 0``, e.g. the joins kind's one row per unanswered SYN): rows are
  aggregated per subject into tumbling event-time windows of ``window_s`` (count, distinct values
  of ``field``, sum or max); a window becomes a report once a row ``lateness_s`` past its end
  arrives. Only rows passing the ``where`` filters count as the rule's stream and move its clock
  (a joins row for a matched handshake says nothing about how far the unanswered SYNs, emitted a
  micro-batch later, have come). Rows of a window already evaluated are late and skipped.
- **Firing.** The condition must hold in every report for ``for_s`` seconds (from the first
  holding report's time to the current one); a report without it starts over.
- **Resolution.** A firing subject resolves at the first closed report in which it does not hold
  (absent from a top-k or distinct report means it does not hold).
- **Deduplication.** One firing notification per episode, however many reports hold.
- **Rearm limit** (a sliding-window leaky bucket per rule and subject). At most
  ``max_notifications`` notifications (firing and resolved together) in any ``cooldown_s`` of
  event time. A change that finds the bucket full is held back; when room frees up (checked at
  each closed report), the *current* state is announced if it still differs from the last one
  sent. A flapping condition therefore looks like one long alert to receivers, who always see
  firing and resolved alternate, and the number of swallowed changes is reported (``suppressed``).

Malformed rows: a row that is not a mapping, or whose time column (``window_start`` or any of
:data:`TIME_COLUMNS`, or a rule's ``time_field``) holds something that is not a time, raises
:class:`RowError` from :meth:`RuleEngine.observe` before any rule sees it (the service counts and
skips it). A rule that cannot be evaluated on a row (a missing column, a value of the wrong type,
even an unexpected error) is a per-rule problem (:attr:`RuleEngine.problems`); the other rules
go on. A non-finite number (NaN, infinity) is no value, like null: it never holds.

Identity: ``alert_id`` = a keyed BLAKE2b hash of (rule, query, subject), stable across episodes
and restarts (PagerDuty's ``dedup_key``); ``episode_id`` = ``<alert_id>:<episode start ms>``; the
idempotency key of a notification is ``event_id`` = ``<episode_id>:<status>``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from analytics.alert_baseline import EwmaBaseline
from netmon.config import AlertRule, parse_comparison

__all__ = [
    "TIME_COLUMNS",
    "AlertRecord",
    "Notification",
    "RowError",
    "RuleEngine",
    "RuleError",
    "alert_id",
    "event_time",
    "iso",
]

#: where a row's event time is looked for, in order, unless the rule names its ``time_field``
TIME_COLUMNS = ("window_end", "event_time", "batch_time", "ts", "left_ts", "time", "timestamp", "end")

_HASH_KEY = b"netmon-alerts-v1"


class RuleError(ValueError):
    """A rule cannot be evaluated on a row (unknown column, wrong type): reported per rule."""


class RowError(ValueError):
    """The row itself is malformed (a time column that is not a time): it is skipped whole.

    ``reason`` names the kind of problem without the row's values (a bounded set of texts: the
    service counts skipped rows per reason).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: the times a row may carry, beyond :data:`TIME_COLUMNS` (the start of a traffic window)
_OTHER_TIME_COLUMNS = ("window_start",)
#: the epoch seconds ``iso`` can print: years 1 to 9999
_TIME_RANGE = (-62135596800.0, 253402300799.0)


def alert_id(rule: str, query: str, subject: str) -> str:
    """The stable id of (rule, query, subject): 16 hex digits.

    >>> alert_id("ddos", "ddos-sources-per-destination", "10.0.0.5")
    '...'
    >>> len(alert_id("ddos", "", "")) == 16
    True
    """
    text = "\x00".join((rule, query, subject)).encode()
    return hashlib.blake2b(text, digest_size=8, key=_HASH_KEY).hexdigest()


def iso(t: float | None) -> str | None:
    """Epoch seconds as ISO-8601 UTC with milliseconds only when non-zero.

    >>> iso(1700000000.0), iso(1700000000.25)
    ('2023-11-14T22:13:20Z', '2023-11-14T22:13:20.250Z')
    """
    if t is None:
        return None
    stamp = dt.datetime.fromtimestamp(round(t, 3), dt.UTC)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    if stamp.microsecond:
        text += f".{stamp.microsecond // 1000:03d}"
    return text + "Z"


def _parse_time(value: Any) -> float:
    """Epoch seconds from an ISO-8601 text or epoch seconds/milliseconds; ValueError if not a time."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int | float):
        try:
            t = float(value) / 1000.0 if value > 1e11 else float(value)  # epoch ms or s
        except OverflowError:
            raise ValueError("number out of range") from None
    elif isinstance(value, str):
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        t = stamp.timestamp()
    else:
        raise ValueError(f"a {type(value).__name__} is not a time")
    if not _TIME_RANGE[0] <= t <= _TIME_RANGE[1]:  # also NaN and infinities
        raise ValueError("time out of range")
    return t


def event_time(row: Mapping[str, Any], column: str = "") -> float:
    """The row's event time in epoch seconds: ``column``, else the first of :data:`TIME_COLUMNS`."""
    if column:
        if row.get(column) is None:
            raise RuleError(f"time_field: no time in column {column!r}")
        try:
            return _parse_time(row[column])
        except ValueError:
            raise RuleError(f"column {column!r} is not a time: {str(row[column])[:40]!r}") from None
    for column in TIME_COLUMNS:
        value = row.get(column)
        if value is not None:
            try:
                return _parse_time(value)
            except ValueError:
                raise RuleError(f"column {column!r} is not a time: {str(value)[:40]!r}") from None
    raise RuleError(f"row has no time column (looked for {', '.join(TIME_COLUMNS)})")


def _number(column: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RuleError(f"column {column!r} is not a number: {str(value)[:40]!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range
        return None
    return number if math.isfinite(number) else None  # NaN, infinity: no value, like null


def _derived(column: str, row: Mapping[str, Any]) -> float | None:
    """A column of the row, or a value derived from its columns (see docs/alerts.md)."""
    if column in row:
        return _number(column, row[column])
    if column == "share":  # topk: an item's share of the window's traffic
        for need in ("count", "total"):
            if need not in row:
                raise RuleError(f"'share' needs a {need!r} column, which the row does not have")
        count, total = _number("count", row["count"]), _number("total", row["total"])
        return None if count is None or not total else count / total
    if column in ("packets_per_s", "bytes_per_s", "bits_per_s"):  # traffic rates
        base = "packets" if column == "packets_per_s" else "bytes"
        for need in (base, "window_start", "window_end"):
            if need not in row:
                raise RuleError(f"{column!r} needs a {need!r} column, which the row does not have")
        amount = _number(base, row[base])
        if amount is None or row["window_start"] is None or row["window_end"] is None:
            return None
        try:
            seconds = _parse_time(row["window_end"]) - _parse_time(row["window_start"])
        except ValueError:
            raise RuleError(f"{column!r}: window_start or window_end is not a time") from None
        if seconds <= 0:
            return None
        return amount * (8 if column == "bits_per_s" else 1) / seconds
    columns = ", ".join(sorted(row)) or "none"
    raise RuleError(f"no column {column!r} in the row (columns: {columns})")


def _compare(value: float, op: str, threshold: float) -> bool:
    if op == ">":
        return value > threshold
    if op == ">=":
        return value >= threshold
    if op == "<":
        return value < threshold
    if op == "<=":
        return value <= threshold
    if op == "==":
        return value == threshold
    return value != threshold


def _passes(rule: AlertRule, row: Mapping[str, Any]) -> bool:
    if rule.exact_only and row.get("keep") is not None and (_number("keep", row["keep"]) or 0.0) < 1:
        return False  # computed from a sample: the rule's value is not to be trusted on it
    for column, wanted in rule.where.items():
        if column not in row:
            raise RuleError(f"where: no column {column!r} in the row")
        comparison = parse_comparison(wanted) if isinstance(wanted, str) else None
        if comparison is not None:
            value = _number(column, row[column])
            if value is None or not _compare(value, *comparison):
                return False
        elif row[column] != wanted:
            return False
    return True


def _subject(rule: AlertRule, row: Mapping[str, Any], query: str) -> str | None:
    columns = rule.subject_columns
    if not columns:
        return query or rule.source
    values = []
    for column in columns:
        if column not in row:
            raise RuleError(f"subject: no column {column!r} in the row")
        if row[column] is None:
            return None  # e.g. the top-k "nothing above delta" row
        values.append(str(row[column]))
    return ",".join(values)


@dataclass(frozen=True)
class Notification:
    """One message to deliver: an alert episode starting (``firing``) or ending (``resolved``)."""

    event_id: str
    alert_id: str
    episode_id: str
    status: str
    rule: str
    source: str
    query: str
    subject: str
    subject_label: str
    severity: str
    field: str
    op: str
    threshold: float
    value: float | None
    peak: float | None
    first_seen: float | None
    last_seen: float | None
    at: float
    summary: str
    # dataclasses.field: in this class body, `field` names the rule's field (above)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: state changes of this subject swallowed by the rearm limit before this notification
    suppressed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (times as ISO-8601 UTC): netmon's generic webhook payload."""
        out = asdict(self)
        for key in ("first_seen", "last_seen", "at"):
            out[key] = iso(out[key])
        return {"version": 1, **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notification:
        values = {k: v for k, v in data.items() if k != "version"}
        for key in ("first_seen", "last_seen", "at"):
            if isinstance(values.get(key), str):
                values[key] = _parse_time(values[key])
        return cls(**values)


@dataclass(frozen=True)
class AlertRecord:
    """The current state of one announced episode, for ``netmon alerts list`` and the dashboard."""

    episode_id: str
    alert_id: str
    rule: str
    source: str
    query: str
    subject: str
    subject_label: str
    severity: str
    status: str
    first_seen: float | None
    last_seen: float | None
    resolved_at: float | None
    value: float | None
    peak: float | None
    suppressed: int
    labels: dict[str, str]
    #: the rule's mode, and what the value was compared with: the threshold, or in baseline mode
    #: the top of the learned band it rose above (the Alerts page draws the value against it)
    mode: str = "threshold"
    threshold: float | None = None


@dataclass
class _Track:
    """The state of one (rule, query, subject)."""

    alert_id: str
    rule: str
    query: str
    subject: str
    holding: bool = False
    since: float | None = None  # first report of the current holding streak
    last_hold: float | None = None  # latest report in which the condition held
    value: float | None = None
    firing: bool = False  # the truth, after for_s
    fire_since: float | None = None  # start of the streak that made it fire
    announced: bool = False  # the last state sent (True: firing)
    episode_start: float | None = None  # start of the announced (or last announced) episode
    first_seen: float | None = None
    last_seen: float | None = None
    resolved_at: float | None = None
    peak: float | None = None
    sent: list[float] = field(default_factory=list)  # times of recent notifications (the bucket)
    changes: int = 0  # truth changes so far
    changes_at_send: int = 0
    suppressed: int = 0  # of the current/last announced episode
    acc_t: float | None = None  # sum aggregate: the report being summed ...
    acc: float = 0.0  # ... its running total ...
    acc_rows: list[str] = field(default_factory=list)  # ... and the rows counted (deduplication)
    band: float | None = None  # baseline mode: the top of the learned band the value rose above


@dataclass
class _Problem:
    message: str
    count: int = 0


class RuleEngine:
    """Evaluates rules over result rows; see the module docstring for the semantics.

    Parameters
    ----------
    rules
        The rules (disabled ones are ignored).

    Examples
    --------
    >>> from netmon.config import AlertRule
    >>> rule = AlertRule(name="ddos", source="distinct", field="distinct", threshold=200,
    ...                  subject="group", subject_label="victim", cooldown_s=0)
    >>> engine = RuleEngine([rule])
    >>> row = {"query": "q", "window_end": "2024-05-01T12:00:10Z", "group": "10.0.0.5", "distinct": 305}
    >>> [n.status for n in engine.observe("distinct", row)]
    ['firing']
    >>> later = {**row, "window_end": "2024-05-01T12:00:11Z", "group": "10.0.0.9", "distinct": 3}
    >>> engine.observe("distinct", later)  # closes the 12:00:10 report, in which 10.0.0.5 held
    []
    >>> [n.status for n in engine.observe("distinct", {**later, "window_end": "2024-05-01T12:00:12Z"})]
    ['resolved']
    """

    def __init__(self, rules: Sequence[AlertRule]) -> None:
        self.rules = tuple(r for r in rules if r.enabled)
        self._by_kind: dict[str, list[AlertRule]] = {}
        for r in self.rules:
            self._by_kind.setdefault(r.source, []).append(r)
        self._by_name = {r.name: r for r in self.rules}
        # per kind, the time columns a row must not hold garbage in (checked before any rule)
        self._time_columns = {
            kind: tuple(
                dict.fromkeys(
                    (*TIME_COLUMNS, *_OTHER_TIME_COLUMNS, *(r.time_field for r in rules if r.time_field))
                )
            )
            for kind, rules in self._by_kind.items()
        }
        self._clocks: dict[tuple[str, str], float] = {}
        self._windows: dict[tuple[str, str], dict[float, dict[str, Any]]] = {}  # event rules' open windows
        self._marks: dict[tuple[str, str], float] = {}  # event rules: the newest row time per stream
        self._tracks: dict[str, _Track] = {}
        self._streams: dict[tuple[str, str], set[str]] = {}
        self._dirty: dict[str, AlertRecord] = {}
        self.problems: dict[str, _Problem] = {}
        self.rows = 0
        self.stale_rows = 0
        # baseline mode: per (rule, query, subject, column) the learned normal and the report
        # time it last learned (a re-delivered row is not learned twice), per stream its reports
        self._baselines: dict[tuple[str, str, str, str], EwmaBaseline] = {}
        self._learned: dict[tuple[str, str, str, str], float] = {}
        self._reports: dict[tuple[str, str], int] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The result kinds some rule reads."""
        return tuple(sorted(self._by_kind))

    def queries(self, kind: str) -> frozenset[str] | None:
        """The queries the rules of ``kind`` read, or None when one of them reads every query.

        A row of another query changes nothing (:meth:`observe` returns at once for it), so a
        consumer may skip it unread.
        """
        rules = self._by_kind.get(kind, ())
        if any(not r.query for r in rules):
            return None
        return frozenset(r.query for r in rules)

    # --- evaluation ---------------------------------------------------------------------------

    def observe(self, kind: str, row: Mapping[str, Any]) -> list[Notification]:
        """Evaluate every rule of ``kind`` on one result row; the notifications to send.

        Raises :class:`RowError`, with nothing changed, when the row itself is malformed (not a
        mapping, or a time column holding something that is not a time). A rule that cannot be
        evaluated on the row is counted in :attr:`problems`; the other rules go on.
        """
        rules = self._by_kind.get(kind, ())
        if not isinstance(row, Mapping):
            raise RowError("row is not a JSON object")
        for column in self._time_columns.get(kind, ()):
            value = row.get(column)
            if value is not None:
                try:
                    _parse_time(value)
                except ValueError:
                    raise RowError(f"column {column!r} is not a time") from None
        self.rows += 1
        out: list[Notification] = []
        for rule in rules:
            try:
                out += self._observe(rule, row)
            except RuleError as exc:
                self._problem(rule, str(exc))
            except Exception as exc:  # noqa: BLE001 - one rule's surprise must not stop the others
                self._problem(rule, f"unexpected {type(exc).__name__}: {str(exc)[:200]}")
        return out

    def _problem(self, rule: AlertRule, message: str) -> None:
        problem = self.problems.setdefault(rule.name, _Problem(message))
        problem.message = message
        problem.count += 1

    def _observe(self, rule: AlertRule, row: Mapping[str, Any]) -> list[Notification]:
        query = str(row.get("query") or "")
        if rule.query and query != rule.query:
            return []
        t = event_time(row, rule.time_field)
        if rule.window_s:
            return self._observe_event(rule, row, query, t)
        stream = (rule.name, query)
        clock = self._clocks.get(stream)
        out: list[Notification] = []
        if clock is not None and t < clock:
            self.stale_rows += 1
            return out
        if clock is None or t > clock:
            if clock is not None:
                out += self._close(rule, stream, clock)
            self._clocks[stream] = t
            self._reports[stream] = self._reports.get(stream, 0) + 1
        if not _passes(rule, row):
            return out
        value = _derived(rule.field, row)
        subject = _subject(rule, row, query)
        if value is None or subject is None or subject in rule.ignore:
            return out
        aid = alert_id(rule.name, query, subject)
        track = self._tracks.get(aid)
        if rule.aggregate == "sum":
            track = track or self._track(aid, rule, query, subject)
            if track.acc_t != t:
                track.acc_t, track.acc, track.acc_rows = t, 0.0, []
            digest = hashlib.blake2b(json.dumps(row, sort_keys=True, default=str).encode(), digest_size=8)
            if digest.hexdigest() in track.acc_rows:
                return out
            track.acc_rows.append(digest.hexdigest())
            track.acc += value
            value = track.acc
        band = None
        if rule.mode == "baseline":
            band = self._baseline(rule, query, subject, row, value, t)
            if band is None:
                return out
        elif not _compare(value, rule.op, rule.threshold) or (rule.min_value and value < rule.min_value):
            return out
        track = track or self._track(aid, rule, query, subject)
        track.band = band
        out += self._hold(rule, track, t, value)
        return out

    def _baseline(
        self, rule: AlertRule, query: str, subject: str, row: Mapping[str, Any], value: float, t: float
    ) -> float | None:
        """Baseline mode: the band ``value`` rose above (it holds), or None (it does not).

        It holds when the rule's stream has learned ``warmup`` reports, ``value >= min_value``,
        and ``field`` and every ``also`` column exceed their subject's band
        (:meth:`EwmaBaseline.upper`); a subject still warming up has no band yet and is held
        against ``min_value`` alone. Values that do not hold are learned, clipped to the band's top
        (winsorized); values that hold are not (an attack must not become the normal it is
        measured against).
        """
        values = {rule.field: value}
        for column in rule.also:
            other = _derived(column, row)
            if other is None:
                return None
            values[column] = other
        keys = {column: (rule.name, query, subject, column) for column in values}
        bands = {}
        for column, key in keys.items():
            base = self._baselines.get(key)
            bands[column] = (
                base.upper(rule.sensitivity, rule.min_ratio) if base is not None and base.warm else None
            )
        warm = self._reports.get((rule.name, query), 0) > rule.warmup
        holds = warm and value >= rule.min_value
        for column, v in values.items():
            top = bands[column]
            if top is not None and not (v > top if rule.op == ">" else v >= top):
                holds = False
        if holds:
            return bands[rule.field] if bands[rule.field] is not None else rule.min_value
        for column, key in keys.items():
            if self._learned.get(key) != t:
                self._learned[key] = t
                base = self._baselines.get(key)
                if base is None:
                    base = self._baselines[key] = EwmaBaseline(alpha=rule.alpha, warmup=rule.warmup)
                    base.update(values[column])
                else:
                    # winsorized: a value above the current band (even one still warming up) is
                    # learned as the band's top, so the first, partial window of an attack cannot
                    # lift the normal it is then measured against; a level that really moves is
                    # still followed, by up to min_ratio per report
                    base.update(min(values[column], base.upper(rule.sensitivity, rule.min_ratio)))
        return None

    def baseline(self, rule: str, query: str, subject: str, column: str = "") -> EwmaBaseline | None:
        """The learned normal of a (rule, query, subject) in baseline mode (``column``: the rule's field)."""
        r = self._by_name.get(rule)
        if r is None:
            return None
        return self._baselines.get((rule, query, subject, column or r.field))

    def flush(self, kind: str) -> list[Notification]:
        """Close the newest open report of every stream of ``kind``: the end of an offline input.

        Report rows close a report only when a later one arrives; at the end of a capture there is
        none, so ``netmon analyze alerts`` calls this to evaluate the last report like the others.
        """
        out: list[Notification] = []
        for rule in self._by_kind.get(kind, ()):
            if rule.window_s:
                continue
            for stream, clock in sorted(self._clocks.items()):
                if stream[0] == rule.name:
                    out += self._close(rule, stream, clock)
        return out

    def _observe_event(
        self, rule: AlertRule, row: Mapping[str, Any], query: str, t: float
    ) -> list[Notification]:
        """A row that is an event: aggregate it into its tumbling window; close ripe windows."""
        if not _passes(rule, row):
            # Only the rule's own rows move its clock: other rows of the kind may run far ahead
            # (the joins kind emits a matched pair at once, an unanswered SYN only once the
            # watermark has passed its window, a whole micro-batch later).
            return []
        stream = (rule.name, query)
        end = (math.floor(t / rule.window_s) + 1) * rule.window_s  # the window [end - window_s, end)
        closed = self._clocks.get(stream)
        self._marks[stream] = max(self._marks.get(stream, t), t)
        if closed is not None and end <= closed:
            self.stale_rows += 1  # its window was already evaluated
        else:
            subject = _subject(rule, row, query)
            if subject is not None and subject not in rule.ignore:
                self._aggregate(rule, self._windows.setdefault(stream, {}).setdefault(end, {}), subject, row)
        return self._ripen(rule, stream)

    def _aggregate(
        self, rule: AlertRule, values: dict[str, Any], subject: str, row: Mapping[str, Any]
    ) -> None:
        if rule.aggregate == "count":
            values[subject] = values.get(subject, 0.0) + 1.0
            return
        if rule.aggregate == "distinct":
            if rule.field not in row:
                raise RuleError(f"no column {rule.field!r} in the row")
            if row[rule.field] is not None:
                seen = values.setdefault(subject, set())
                if len(seen) <= rule.threshold:  # enough to decide '>' / '>=': memory stays bounded
                    seen.add(str(row[rule.field]))
            return
        value = _derived(rule.field, row)
        if value is not None:
            old = values.get(subject)
            values[subject] = (
                value if old is None else old + value if rule.aggregate == "sum" else max(old, value)
            )

    def _ripen(self, rule: AlertRule, stream: tuple[str, str]) -> list[Notification]:
        """Evaluate every window whose end plus ``lateness_s`` the stream's newest row has passed."""
        out: list[Notification] = []
        pending = self._windows.get(stream, {})
        mark = self._marks.get(stream, -math.inf)
        for end in sorted(e for e in pending if e + rule.lateness_s <= mark):
            values = pending.pop(end)
            previous = self._clocks.get(stream)
            if previous is not None and end - previous > rule.window_s * 1.000001:
                self._clocks[stream] = previous + rule.window_s  # empty windows between: nobody held
                out += self._close(rule, stream, previous + rule.window_s)
            self._clocks[stream] = end
            query = stream[1]
            for subject, raw in sorted(values.items()):
                value = float(len(raw)) if isinstance(raw, set) else float(raw)
                if _compare(value, rule.op, rule.threshold):
                    aid = alert_id(rule.name, query, subject)
                    track = self._tracks.get(aid) or self._track(aid, rule, query, subject)
                    out += self._hold(rule, track, end, value)
            out += self._close(rule, stream, end)  # the window is complete: it is its own report
        return out

    def _track(self, aid: str, rule: AlertRule, query: str, subject: str) -> _Track:
        track = _Track(alert_id=aid, rule=rule.name, query=query, subject=subject)
        self._tracks[aid] = track
        self._streams.setdefault((rule.name, query), set()).add(aid)
        return track

    def _hold(self, rule: AlertRule, tr: _Track, t: float, value: float) -> list[Notification]:
        tr.value = value
        if tr.last_hold != t:
            if not tr.holding:
                tr.holding, tr.since = True, t
            tr.last_hold = t
        if not tr.firing and tr.since is not None and t - tr.since >= rule.for_s:
            tr.firing, tr.fire_since = True, tr.since
            tr.changes += 1
        if tr.announced:
            tr.last_seen = t
            tr.peak = value if tr.peak is None else max(tr.peak, value)
            self._mark(rule, tr)
        return self._sync(rule, tr, t)

    def _close(self, rule: AlertRule, stream: tuple[str, str], closed: float) -> list[Notification]:
        """Report ``closed`` is complete: whoever did not hold in it stops holding."""
        out: list[Notification] = []
        for aid in sorted(self._streams.get(stream, ())):
            tr = self._tracks[aid]
            if tr.holding and (tr.last_hold is None or tr.last_hold < closed):
                tr.holding, tr.since = False, None
                if tr.firing:
                    tr.firing = False
                    tr.resolved_at = closed
                    tr.changes += 1
            out += self._sync(rule, tr, closed)
        self._prune(rule, stream, closed)
        return out

    def _sync(self, rule: AlertRule, tr: _Track, now: float) -> list[Notification]:
        """Announce the truth if it differs from what was last sent and the bucket has room."""
        if tr.firing == tr.announced:
            return []
        tr.sent = [s for s in tr.sent if s > now - rule.cooldown_s]
        if len(tr.sent) >= rule.max_notifications:
            return []  # held back by the rearm limit; retried at each closed report
        tr.sent.append(now)
        absorbed = max(0, tr.changes - tr.changes_at_send - 1)
        tr.changes_at_send = tr.changes
        if tr.firing:
            tr.announced = True
            tr.episode_start = tr.fire_since if tr.fire_since is not None else now
            tr.first_seen, tr.last_seen = tr.episode_start, tr.last_hold
            tr.peak, tr.resolved_at, tr.suppressed = tr.value, None, absorbed
            status = "firing"
        else:
            tr.announced = False
            tr.suppressed += absorbed
            tr.resolved_at = now if tr.resolved_at is None else tr.resolved_at
            status = "resolved"
        self._mark(rule, tr)
        return [self._notification(rule, tr, status, now)]

    def _prune(self, rule: AlertRule, stream: tuple[str, str], now: float) -> None:
        ids = self._streams.get(stream, set())
        for aid in list(ids):
            tr = self._tracks[aid]
            idle = not (tr.holding or tr.firing or tr.announced) and (tr.acc_t is None or tr.acc_t < now)
            if idle and all(s <= now - rule.cooldown_s for s in tr.sent):  # nothing left to remember
                ids.discard(aid)
                del self._tracks[aid]

    # --- output -----------------------------------------------------------------------------

    def _episode_id(self, tr: _Track) -> str:
        start = tr.episode_start if tr.episode_start is not None else 0.0
        return f"{tr.alert_id}:{round(start * 1000)}"

    def _notification(self, rule: AlertRule, tr: _Track, status: str, now: float) -> Notification:
        episode = self._episode_id(tr)
        label = rule.label_for_subject
        values = {
            "rule": rule.name,
            "subject": tr.subject,
            "subject_label": label,
            "value": "" if tr.value is None else f"{tr.value:g}",
            "threshold": f"{self._threshold(rule, tr):g}",
            "field": rule.measure,
            "query": tr.query,
        }
        if rule.summary:
            summary = rule.summary.format_map(_Defaulting(values))
        else:
            summary = (
                f"{label} {tr.subject}: {rule.measure} {values['value']} {rule.op} {values['threshold']}"
            )
            summary += f" ({tr.query})" if tr.query and tr.query != tr.subject else ""
        if status == "resolved":
            summary = f"resolved: {summary}"
        return Notification(
            event_id=f"{episode}:{status}",
            alert_id=tr.alert_id,
            episode_id=episode,
            status=status,
            rule=rule.name,
            source=rule.source,
            query=tr.query,
            subject=tr.subject,
            subject_label=label,
            severity=rule.severity,
            field=rule.measure,
            op=rule.op,
            threshold=self._threshold(rule, tr),
            value=tr.value,
            peak=tr.peak,
            first_seen=tr.first_seen,
            last_seen=tr.last_seen,
            at=now,
            summary=f"[{rule.severity}] {rule.name}: {summary}",
            labels=dict(rule.labels),
            suppressed=tr.suppressed,
        )

    @staticmethod
    def _threshold(rule: AlertRule, tr: _Track) -> float:
        """What the value was compared with: the threshold, or (baseline mode) the learned band."""
        if rule.mode == "baseline" and tr.band is not None:
            return round(tr.band, 6)
        return rule.threshold

    def _mark(self, rule: AlertRule, tr: _Track) -> None:
        """Remember the episode's current state for :meth:`take_changes` (the track may be pruned)."""
        self._dirty[tr.alert_id] = AlertRecord(
            episode_id=self._episode_id(tr),
            alert_id=tr.alert_id,
            rule=tr.rule,
            source=rule.source,
            query=tr.query,
            subject=tr.subject,
            subject_label=rule.label_for_subject,
            severity=rule.severity,
            status="firing" if tr.announced else "resolved",
            first_seen=tr.first_seen,
            last_seen=tr.last_seen,
            resolved_at=None if tr.announced else tr.resolved_at,
            value=tr.value,
            peak=tr.peak,
            suppressed=tr.suppressed,
            labels=dict(rule.labels),
            mode=rule.mode,
            threshold=self._threshold(rule, tr),
        )

    def take_changes(self) -> list[AlertRecord]:
        """The announced episodes changed since the last call (firing ones refresh last_seen)."""
        out = [record for _, record in sorted(self._dirty.items())]
        self._dirty.clear()
        return out

    # --- persistence ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The evaluation state as plain JSON data (kept in the outbox with each batch)."""
        return {
            "version": 1,
            "clocks": [[r, q, t] for (r, q), t in sorted(self._clocks.items())],
            "tracks": [asdict(t) for _, t in sorted(self._tracks.items())],
            "marks": [[r, q, t] for (r, q), t in sorted(self._marks.items())],
            "reports": [[r, q, n] for (r, q), n in sorted(self._reports.items())],
            "baselines": [
                [*key, *b.state(), self._learned.get(key)] for key, b in sorted(self._baselines.items())
            ],
            "windows": [
                [r, q, end, subject, sorted(v) if isinstance(v, set) else v]
                for (r, q), windows in sorted(self._windows.items())
                for end, values in sorted(windows.items())
                for subject, v in sorted(values.items())
            ],
        }

    @classmethod
    def restore(cls, rules: Sequence[AlertRule], snapshot: Mapping[str, Any] | None) -> RuleEngine:
        """An engine continuing from ``snapshot``; state of rules no longer configured is dropped."""
        engine = cls(rules)
        if not snapshot:
            return engine
        if snapshot.get("version") != 1:
            raise ValueError(f"unknown alert state version {snapshot.get('version')!r}")
        for r, q, t in snapshot.get("clocks", ()):
            if r in engine._by_name:
                engine._clocks[(r, q)] = float(t)
        for r, q, t in snapshot.get("marks", ()):
            if r in engine._by_name:
                engine._marks[(r, q)] = float(t)
        for r, q, end, subject, v in snapshot.get("windows", ()):
            if r in engine._by_name:
                value = set(v) if isinstance(v, list) else v
                engine._windows.setdefault((r, q), {}).setdefault(float(end), {})[subject] = value
        for r, q, n in snapshot.get("reports", ()):
            if r in engine._by_name:
                engine._reports[(r, q)] = int(n)
        for r, q, subject, column, n, mean, var, learned in snapshot.get("baselines", ()):
            rule = engine._by_name.get(r)
            if rule is not None and rule.mode == "baseline":
                key = (r, q, subject, column)
                engine._baselines[key] = EwmaBaseline.from_state(
                    [n, mean, var], alpha=rule.alpha, warmup=rule.warmup
                )
                if learned is not None:
                    engine._learned[key] = float(learned)
        for data in snapshot.get("tracks", ()):
            if data["rule"] in engine._by_name:
                tr = _Track(**data)
                engine._tracks[tr.alert_id] = tr
                engine._streams.setdefault((tr.rule, tr.query), set()).add(tr.alert_id)
        return engine

    def active(self) -> Iterable[_Track]:
        """Tracks currently holding or firing (for status output)."""
        return (t for t in self._tracks.values() if t.holding or t.firing or t.announced)

    def problem_lines(self) -> list[str]:
        return [f"{name}: {p.message} ({p.count} rows)" for name, p in sorted(self.problems.items())]


class _Defaulting(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"
