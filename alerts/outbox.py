"""The durable alert outbox: SQLite at ``<state_dir>/alerts/outbox.db``.

The evaluation side writes, in **one transaction** per batch of result rows: the new
notifications (``events``), one ``deliveries`` row per (event, routed target), the changed alert
episodes (``alerts``), the rule engine's state, the next Kafka offset of every partition read
(``offsets``), rule problems and the count of malformed result rows skipped (``skipped_rows``, per
reason). Only after that commit does the service commit its Kafka offsets. A crash between
the two re-delivers rows from Kafka that the outbox already covers; the service skips them by
the stored offsets, so no alert is lost and none is written twice.

The delivery side reads due ``deliveries`` per target and records each attempt: ``pending`` (with
the next attempt time), ``delivered``, or ``dead`` (too old, or refused for good). ``retry``
puts dead letters back to ``pending``.

Each delivery row carries its event's ``seq`` and ``alert_id`` (schema 2), so :meth:`Outbox.due`
walks one index in event order and checks "an earlier event of the same alert is still pending"
with one index probe: a call costs the same with 20 or 20,000 deliveries pending. :meth:`Outbox.prune`
deletes delivered and dead deliveries older than ``[alerts] keep_days`` (then events without
deliveries and resolved episodes without events); pending ones are never deleted.

Opening a file read-write brings an older schema up to date (columns added and filled, indexes
created ``IF NOT EXISTS``) in one transaction, so an existing outbox keeps working. Read-only
opens (``netmon alerts list``, the dashboard) never change the file and read an old one as is.

Connections are per thread (SQLite WAL mode: readers never block the writer).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from alerts.rules import AlertRecord, Notification

__all__ = ["Delivery", "Outbox", "outbox_path"]

SCHEMA_VERSION = 2

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE, alert_id TEXT NOT NULL, episode_id TEXT NOT NULL,
    status TEXT NOT NULL, rule TEXT NOT NULL, severity TEXT NOT NULL, subject TEXT NOT NULL,
    at REAL NOT NULL, created REAL NOT NULL, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (
    event_id TEXT NOT NULL REFERENCES events (event_id), target TEXT NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, requeued INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL, next_at REAL NOT NULL, last_at REAL, delivered_at REAL,
    last_status INTEGER, last_error TEXT, seq INTEGER, alert_id TEXT,
    PRIMARY KEY (event_id, target));
CREATE TABLE IF NOT EXISTS alerts (
    episode_id TEXT PRIMARY KEY, alert_id TEXT NOT NULL, rule TEXT NOT NULL, source TEXT NOT NULL,
    query TEXT NOT NULL, subject TEXT NOT NULL, subject_label TEXT NOT NULL, severity TEXT NOT NULL,
    status TEXT NOT NULL, first_seen REAL, last_seen REAL, resolved_at REAL, value REAL, peak REAL,
    suppressed INTEGER NOT NULL DEFAULT 0, labels TEXT NOT NULL, updated REAL NOT NULL,
    mode TEXT, threshold REAL);
CREATE TABLE IF NOT EXISTS problems (
    rule TEXT PRIMARY KEY, message TEXT NOT NULL, count INTEGER NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS skipped_rows (
    reason TEXT PRIMARY KEY, count INTEGER NOT NULL, first_at REAL NOT NULL, last_at REAL NOT NULL,
    last_where TEXT NOT NULL);
"""

#: columns added to ``deliveries`` by schema 2 (filled from ``events`` when an older file is opened)
_DELIVERY_COLUMNS = (("seq", "INTEGER"), ("alert_id", "TEXT"))
#: columns added to ``alerts`` later: the rule's mode and what the value was compared with (null
#: in the rows of an older file)
_ALERT_COLUMNS = (("mode", "TEXT"), ("threshold", "REAL"))

_INDEXES = (
    # next_due: the earliest pending delivery per target
    "CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (target, state, next_at)",
    # due: pending deliveries per target in event order ...
    "CREATE INDEX IF NOT EXISTS deliveries_order ON deliveries (target, state, seq)",
    # ... each checked for an earlier pending event of the same alert with one probe
    "CREATE INDEX IF NOT EXISTS deliveries_alert ON deliveries (target, state, alert_id, seq)",
    # prune: the events and episodes of one alert
    "CREATE INDEX IF NOT EXISTS events_alert ON events (alert_id, seq)",
)

#: deletions per transaction while pruning (the delivery threads wait at most this long)
_PRUNE_CHUNK = 5000


def outbox_path(state_dir: str | Path) -> Path:
    """``<state_dir>/alerts/outbox.db``."""
    return Path(state_dir) / "alerts" / "outbox.db"


@dataclass(frozen=True)
class Delivery:
    """One pending delivery of one event to one target."""

    event_id: str
    target: str
    attempts: int
    created: float
    notification: Notification


class Outbox:
    """The SQLite outbox; one instance per thread.

    Parameters
    ----------
    path
        The database file (created with its directory).
    readonly
        Open an existing file read-only (``netmon alerts list``, the dashboard).
    durable
        Sync every commit of this connection to disk (``synchronous=FULL``): the evaluation side
        needs it (its batch must survive power loss before the Kafka offsets move). The delivery
        threads open with False (``synchronous=NORMAL``, still safe against a crash of the
        process): losing the last attempt records to a power cut only repeats deliveries, which
        receivers dedupe, and it halves the cost of recording an attempt.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, durable: bool = True) -> None:
        self.path = Path(path)
        if readonly:
            uri = f"file:{self.path}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed batch survives power loss; NORMAL: a crash of the process only
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._migrate()
        self._db.row_factory = sqlite3.Row

    def _migrate(self) -> None:
        """Create the schema, or bring an older file up to date, in one transaction."""
        db = self._db
        db.executescript(_TABLES)  # IF NOT EXISTS: a no-op for the tables an older file has
        db.execute("BEGIN IMMEDIATE")  # serialises with other connections opening the file
        try:
            have = {row[1] for row in db.execute("PRAGMA table_info(deliveries)")}
            for name, kind in _DELIVERY_COLUMNS:
                if name not in have:
                    db.execute(f"ALTER TABLE deliveries ADD COLUMN {name} {kind}")
            have = {row[1] for row in db.execute("PRAGMA table_info(alerts)")}
            for name, kind in _ALERT_COLUMNS:
                if name not in have:
                    db.execute(f"ALTER TABLE alerts ADD COLUMN {name} {kind}")
            # rows of schema 1 (or written by an older netmon since): take them from their event
            db.execute(
                "UPDATE deliveries SET"
                " seq = (SELECT e.seq FROM events e WHERE e.event_id = deliveries.event_id),"
                " alert_id = (SELECT e.alert_id FROM events e WHERE e.event_id = deliveries.event_id)"
                " WHERE seq IS NULL OR alert_id IS NULL"
            )
            for statement in _INDEXES:
                db.execute(statement)
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- evaluation side ----------------------------------------------------------------------

    def load_state(self) -> dict[str, Any] | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'engine'").fetchone()
        return json.loads(row["value"]) if row else None

    def offsets(self) -> dict[tuple[str, int], int]:
        """The next Kafka offset to read per (topic, partition), as of the last committed batch."""
        rows = self._db.execute("SELECT topic, partition, next_offset FROM offsets")
        return {(r["topic"], r["partition"]): r["next_offset"] for r in rows}

    def commit_batch(
        self,
        *,
        notifications: Sequence[Notification],
        routes: Mapping[str, Sequence[str]],
        records: Sequence[AlertRecord],
        state: Mapping[str, Any],
        offsets: Mapping[tuple[str, int], int],
        problems: Mapping[str, tuple[str, int]] | None = None,
        skipped: Mapping[str, tuple[int, str]] | None = None,
        now: float | None = None,
    ) -> int:
        """Write one batch atomically; return the number of new events.

        ``routes`` maps an event id to the targets it goes to. ``skipped`` maps the reason a
        result row was skipped to (rows of this batch, where the last one was): added to the
        totals kept per reason.
        """
        now = time.time() if now is None else now
        db = self._db
        new = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for n in notifications:
                cur = db.execute(
                    "INSERT OR IGNORE INTO events (event_id, alert_id, episode_id, status, rule, severity,"
                    " subject, at, created, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        n.event_id,
                        n.alert_id,
                        n.episode_id,
                        n.status,
                        n.rule,
                        n.severity,
                        n.subject,
                        n.at,
                        now,
                        json.dumps(n.to_dict(), sort_keys=True),
                    ),
                )
                if cur.rowcount != 1:
                    continue  # already written: never route an event twice
                new += 1
                db.executemany(
                    "INSERT OR IGNORE INTO deliveries (event_id, target, state, created, next_at, seq,"
                    " alert_id) VALUES (?, ?, 'pending', ?, ?, ?, ?)",
                    [
                        (n.event_id, target, now, now, cur.lastrowid, n.alert_id)
                        for target in routes.get(n.event_id, ())
                    ],
                )
            for r in records:
                data = asdict(r)
                data["labels"] = json.dumps(r.labels, sort_keys=True)
                data["updated"] = now
                columns = ", ".join(data)
                marks = ", ".join("?" for _ in data)
                updates = ", ".join(f"{c} = excluded.{c}" for c in data if c != "episode_id")
                db.execute(
                    f"INSERT INTO alerts ({columns}) VALUES ({marks})"  # noqa: S608 - our own column names
                    f" ON CONFLICT (episode_id) DO UPDATE SET {updates}",
                    tuple(data.values()),
                )
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('engine', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (json.dumps(state, sort_keys=True),),
            )
            db.executemany(
                "INSERT INTO offsets (topic, partition, next_offset) VALUES (?, ?, ?)"
                " ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
                [(t, p, o) for (t, p), o in offsets.items()],
            )
            for rule, (message, count) in (problems or {}).items():
                db.execute(
                    "INSERT INTO problems (rule, message, count, updated) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (rule) DO UPDATE SET message = excluded.message,"
                    " count = excluded.count, updated = excluded.updated",
                    (rule, message, count, now),
                )
            for reason, (count, where) in (skipped or {}).items():
                db.execute(
                    "INSERT INTO skipped_rows (reason, count, first_at, last_at, last_where)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (reason) DO UPDATE SET"
                    " count = count + excluded.count, last_at = excluded.last_at,"
                    " last_where = excluded.last_where",
                    (reason, count, now, now, where),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return new

    # --- delivery side -----------------------------------------------------------------------

    #: pending deliveries to one target in event order, each unless an earlier event of the same
    #: alert to that target is still pending; INDEXED BY makes a schema change that would lose the
    #: index an error instead of a slow plan (tests/alerts/test_outbox.py checks the plan)
    DUE_SQL = """
        SELECT d.event_id, d.target, d.attempts, d.created, e.payload
        FROM deliveries d INDEXED BY deliveries_order JOIN events e ON e.seq = d.seq
        WHERE d.target = ? AND d.state = 'pending' AND d.next_at <= ?
          AND NOT EXISTS (
            SELECT 1 FROM deliveries d2 INDEXED BY deliveries_alert
            WHERE d2.target = d.target AND d2.state = 'pending'
              AND d2.alert_id = d.alert_id AND d2.seq < d.seq)
        ORDER BY d.seq LIMIT ?
        """

    def due(self, target: str, now: float, limit: int = 50) -> list[Delivery]:
        """Pending deliveries to ``target`` due by ``now``, oldest event first.

        An event waits while an earlier event of the same alert to the same target is still
        pending, so a receiver never sees an alert resolve before it fired. The query walks the
        ``deliveries_order`` index and stops after ``limit`` rows: its cost does not grow with
        the number of pending deliveries.
        """
        rows = self._db.execute(self.DUE_SQL, (target, now, limit)).fetchall()
        return [
            Delivery(
                event_id=r["event_id"],
                target=r["target"],
                attempts=r["attempts"],
                created=r["created"],
                notification=Notification.from_dict(json.loads(r["payload"])),
            )
            for r in rows
        ]

    def next_due(self, target: str) -> float | None:
        row = self._db.execute(
            "SELECT MIN(next_at) AS t FROM deliveries WHERE target = ? AND state = 'pending'", (target,)
        ).fetchone()
        return row["t"] if row and row["t"] is not None else None

    def record_attempt(
        self,
        event_id: str,
        target: str,
        *,
        state: str,
        now: float,
        status: int | None = None,
        error: str | None = None,
        next_at: float | None = None,
    ) -> None:
        """Record one attempt: ``state`` is ``delivered``, ``pending`` (retry at ``next_at``) or ``dead``."""
        if state not in ("delivered", "pending", "dead"):
            raise ValueError(f"unknown delivery state {state!r}")
        self._db.execute(
            "UPDATE deliveries SET state = ?, attempts = attempts + 1, last_at = ?, last_status = ?,"
            " last_error = ?, next_at = COALESCE(?, next_at),"
            " delivered_at = CASE WHEN ? = 'delivered' THEN ? ELSE delivered_at END"
            " WHERE event_id = ? AND target = ?",
            (state, now, status, error, next_at, state, now, event_id, target),
        )

    def requeue(
        self, *, target: str | None = None, event_id: str | None = None, now: float | None = None
    ) -> int:
        """Dead letters (of one target / one event) back to pending, due now; how many."""
        now = time.time() if now is None else now
        clauses, params = ["state = 'dead'"], []
        if target:
            clauses.append("target = ?")
            params.append(target)
        if event_id:
            clauses.append("event_id = ?")
            params.append(event_id)
        cur = self._db.execute(
            "UPDATE deliveries SET state = 'pending', next_at = ?, created = ?, attempts = 0,"
            f" requeued = requeued + 1 WHERE {' AND '.join(clauses)}",  # noqa: S608 - fixed clauses
            (now, now, *params),
        )
        return cur.rowcount

    def bury_unknown_targets(self, known: Iterable[str], now: float | None = None) -> int:
        """Pending deliveries to targets no longer configured become dead letters."""
        names = list(known)
        marks = ", ".join("?" for _ in names) or "''"
        cur = self._db.execute(
            "UPDATE deliveries SET state = 'dead', last_error = 'target no longer configured', last_at = ?"
            f" WHERE state = 'pending' AND target NOT IN ({marks})",  # noqa: S608 - placeholders only
            (time.time() if now is None else now, *names),
        )
        return cur.rowcount

    # --- reading -----------------------------------------------------------------------------

    def alerts(self, status: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """Alert episodes, newest first, each with ``deliveries``: {target: state}."""
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        rows = self._db.execute(
            f"SELECT * FROM alerts {where} ORDER BY COALESCE(last_seen, first_seen) DESC LIMIT ?",  # noqa: S608
            (*params, limit),
        ).fetchall()
        states: dict[str, dict[str, str]] = {}
        for r in self._db.execute(
            "SELECT e.episode_id, e.status, d.target, d.state FROM deliveries d"
            " JOIN events e ON e.event_id = d.event_id ORDER BY e.seq"
        ):
            states.setdefault(r["episode_id"], {})[f"{r['target']}"] = _merge_state(
                states.get(r["episode_id"], {}).get(r["target"]), r["state"]
            )
        out = []
        for r in rows:
            item = dict(r)
            item["labels"] = json.loads(item["labels"])
            item["deliveries"] = states.get(item["episode_id"], {})
            out.append(item)
        return out

    def events(self, limit: int = 10_000) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM events ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [dict(r) for r in rows]

    def deliveries(self, state: str | None = None) -> list[dict[str, Any]]:
        """Delivery rows joined with their event (rule, subject, status), oldest first."""
        where, params = ("WHERE d.state = ?", (state,)) if state else ("", ())
        rows = self._db.execute(
            "SELECT d.*, e.rule, e.subject, e.status, e.severity, e.at, e.alert_id FROM deliveries d"
            f" JOIN events e ON e.event_id = d.event_id {where} ORDER BY e.seq, d.target",  # noqa: S608
            params,
        ).fetchall()
        return [dict(r) for r in rows]

    def prune(self, keep_days: float, now: float | None = None) -> dict[str, int]:
        """Delete what is older than ``keep_days``; how many deliveries, events and episodes.

        Delivered and dead deliveries whose last attempt is older go first; then events older
        than that with no delivery left, then resolved episodes older than that with no event
        left. Pending deliveries (and so their events and episodes) are never deleted. Deletes
        run in chunks, so the delivery threads never wait long for the database.
        """
        cutoff = (time.time() if now is None else now) - keep_days * 86400.0
        statements = {
            "deliveries": "DELETE FROM deliveries WHERE rowid IN (SELECT rowid FROM deliveries"
            " WHERE state IN ('delivered', 'dead') AND COALESCE(delivered_at, last_at, created) < ?"
            " LIMIT ?)",
            "events": "DELETE FROM events WHERE seq IN (SELECT e.seq FROM events e WHERE e.created < ?"
            " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.event_id) LIMIT ?)",
            "alerts": "DELETE FROM alerts WHERE rowid IN (SELECT a.rowid FROM alerts a"
            " WHERE a.status = 'resolved' AND a.updated < ? AND NOT EXISTS (SELECT 1 FROM events e"
            " WHERE e.alert_id = a.alert_id AND e.episode_id = a.episode_id) LIMIT ?)",
        }
        out = {}
        for name, sql in statements.items():
            out[name] = 0
            while True:
                deleted = self._db.execute(sql, (cutoff, _PRUNE_CHUNK)).rowcount
                out[name] += deleted
                if deleted < _PRUNE_CHUNK:
                    break
        return out

    def skipped(self) -> dict[str, dict[str, Any]]:
        """Malformed result rows skipped, per reason: count, first and last time, where the last was."""
        try:
            rows = self._db.execute(
                "SELECT reason, count, first_at, last_at, last_where FROM skipped_rows ORDER BY reason"
            ).fetchall()
        except sqlite3.OperationalError:  # a file of schema 1 opened read-only: nothing skipped yet
            return {}
        return {r["reason"]: {k: r[k] for k in ("count", "first_at", "last_at", "last_where")} for r in rows}

    def problems(self) -> dict[str, tuple[str, int]]:
        rows = self._db.execute("SELECT rule, message, count FROM problems ORDER BY rule")
        return {r["rule"]: (r["message"], r["count"]) for r in rows}

    def counts(self) -> dict[str, int]:
        """Firing/resolved episodes, deliveries by state, and malformed result rows skipped."""
        out = {"firing": 0, "resolved": 0, "pending": 0, "delivered": 0, "dead": 0}
        for r in self._db.execute("SELECT status, COUNT(*) AS n FROM alerts GROUP BY status"):
            out[r["status"]] = r["n"]
        for r in self._db.execute("SELECT state, COUNT(*) AS n FROM deliveries GROUP BY state"):
            out[r["state"]] = r["n"]
        out["skipped_rows"] = sum(item["count"] for item in self.skipped().values())
        return out


_RANK = {"dead": 3, "pending": 2, "delivered": 1}


def _merge_state(old: str | None, new: str) -> str:
    """An episode's delivery state per target: the worst of its events' (dead > pending > delivered)."""
    if old is None:
        return new
    return old if _RANK.get(old, 0) >= _RANK.get(new, 0) else new
