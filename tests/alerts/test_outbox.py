"""The SQLite outbox: atomic batches, idempotent events, per-alert delivery order, dead letters."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from alerts.outbox import Outbox
from alerts.rules import Notification, RuleEngine
from netmon.config import AlertRule
from tests.alerts.helpers import distinct_row

RULE = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", cooldown_s=0
)


def episode(subject: str, start: int) -> list[Notification]:
    """A firing and its resolution for ``subject``."""
    engine = RuleEngine([RULE])
    out = engine.observe("distinct", distinct_row(start, subject, 300))
    out += engine.observe("distinct", distinct_row(start + 1, "x", 1))
    out += engine.observe("distinct", distinct_row(start + 2, "x", 1))
    assert [n.status for n in out] == ["firing", "resolved"]
    return out


def write(outbox: Outbox, notes: list[Notification], offsets: dict | None = None, **kw: object) -> int:
    return outbox.commit_batch(
        notifications=notes,
        routes={n.event_id: ["a", "b"] for n in notes},
        records=[],
        state=kw.pop("state", {"version": 1}),  # type: ignore[arg-type]
        offsets=offsets or {},
        **kw,  # type: ignore[arg-type]
    )


def test_batch_is_atomic_and_events_are_idempotent(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.db")
    notes = episode("10.0.0.5", 1)
    assert write(outbox, notes, {("t", 0): 7}) == 2
    assert write(outbox, notes, {("t", 0): 9}) == 0  # the same events again: nothing new, no new routes
    assert len(outbox.events()) == 2 and len(outbox.deliveries()) == 4
    assert outbox.offsets() == {("t", 0): 9}
    with pytest.raises(TypeError):  # a failure inside the transaction ...
        write(outbox, episode("10.0.0.6", 10), {("t", 0): 99}, state={"bad": object()})
    assert len(outbox.events()) == 2 and outbox.offsets() == {("t", 0): 9}  # ... leaves no trace


def test_resolution_waits_for_its_firing_but_other_alerts_do_not(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.db")
    first, second = episode("10.0.0.5", 1), episode("10.0.0.6", 1)
    write(outbox, first + second)
    due = outbox.due("a", now=1e12)
    assert [d.notification.status for d in due] == ["firing", "firing"]  # both resolutions wait
    outbox.record_attempt(first[0].event_id, "a", state="pending", now=1, error="boom", next_at=2e12)
    outbox.record_attempt(second[0].event_id, "a", state="delivered", now=1, status=200)
    assert [d.event_id for d in outbox.due("a", now=1e12)] == [second[1].event_id]
    outbox.record_attempt(first[0].event_id, "a", state="dead", now=1, error="gave up")
    assert {d.event_id for d in outbox.due("a", now=1e12)} == {first[1].event_id, second[1].event_id}


def test_requeue_and_counts(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.db")
    notes = episode("10.0.0.5", 1)
    write(outbox, notes)
    for n in notes:
        outbox.record_attempt(n.event_id, "a", state="dead", now=1, error="down")
    assert outbox.counts()["dead"] == 2 and outbox.counts()["pending"] == 2
    assert outbox.requeue(target="b") == 0
    assert outbox.requeue(target="a", event_id=notes[0].event_id, now=5) == 1
    assert outbox.requeue(now=5) == 1
    assert outbox.counts()["dead"] == 0
    assert outbox.bury_unknown_targets(["a"]) == 2  # b is no longer configured
    assert {d["target"] for d in outbox.deliveries("dead")} == {"b"}
    ro = Outbox(tmp_path / "o.db", readonly=True)
    assert ro.counts()["dead"] == 2


# --- scale: due() walks an index; the backlog drains; old rows are pruned ---------------------


def note(i: int) -> Notification:
    """Notification ``i``: of alert ``i // 2``, firing for even ``i``, resolved for odd."""
    aid = f"{i // 2:016x}"
    status = "firing" if i % 2 == 0 else "resolved"
    return Notification(
        event_id=f"{aid}:1000:{status}:{i}",
        alert_id=aid,
        episode_id=f"{aid}:1000",
        status=status,
        rule="ddos",
        source="distinct",
        query="q",
        subject=f"10.0.{i // 256 % 256}.{i % 256}",
        subject_label="victim",
        severity="critical",
        field="distinct",
        op=">",
        threshold=200.0,
        value=300.0,
        peak=300.0,
        first_seen=1714564800.0,
        last_seen=1714564800.0,
        at=1714564800.0 + i,
        summary=f"[critical] ddos: victim {i}",
    )


def backlog(path: Path, n: int, targets: tuple[str, ...] = ("a",), now: float = 1000.0) -> list[Notification]:
    notes = [note(i) for i in range(n)]
    with Outbox(path) as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={x.event_id: list(targets) for x in notes},
            records=[],
            state={},
            offsets={},
            now=now,
        )
    return notes


class StepBudget:
    """Counts SQLite virtual-machine steps of one connection; aborts a statement over budget."""

    def __init__(self, outbox: Outbox, budget: int) -> None:
        self.steps, self.budget, self.outbox = 0, budget, outbox

    def __enter__(self) -> StepBudget:
        def tick() -> int:
            self.steps += 100
            return 1 if self.steps > self.budget else 0  # non-zero: interrupt the statement

        self.outbox._db.set_progress_handler(tick, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        self.outbox._db.set_progress_handler(None, 0)


def test_due_walks_an_index_and_costs_the_same_at_20000_pending(tmp_path: Path) -> None:
    """20,000 pending deliveries (10,000 alerts, each a firing and its resolution).

    The old query ran a correlated scan of every pending delivery per candidate and sorted them:
    1.2 s at 2,000 pending, 13.8 s at 8,000. Now one index walk that stops after ``limit`` rows.
    """
    small, large = tmp_path / "small.db", tmp_path / "large.db"
    backlog(small, 2_000)
    notes = backlog(large, 20_000)
    with Outbox(large) as outbox:
        plan = [row[3] for row in outbox._db.execute("EXPLAIN QUERY PLAN " + Outbox.DUE_SQL, ("a", 1e12, 50))]
        assert any("USING INDEX deliveries_order (target=? AND state=?)" in p for p in plan), plan
        assert any("USING COVERING INDEX deliveries_alert" in p for p in plan), plan
        assert not any(p.startswith("SCAN") or "TEMP B-TREE" in p for p in plan), plan  # no scan, no sort
        steps = {}
        for path in (small, large):
            with Outbox(path) as o, StepBudget(o, 200_000) as budget:
                started = time.perf_counter()
                due = o.due("a", now=1e12)
                elapsed_ms = 1000 * (time.perf_counter() - started)
            steps[path.stem] = budget.steps
            print(f"due() with {path.stem} backlog: {elapsed_ms:.2f} ms, {budget.steps} SQLite steps")
            # the 50 oldest firings: each resolution waits for its firing
            assert [d.event_id for d in due] == [n.event_id for n in notes[0:100:2]]
        assert steps["large"] <= 1.2 * steps["small"] + 1000  # the same work at 10x the backlog


def test_due_keeps_order_and_blocking_when_deliveries_progress(tmp_path: Path) -> None:
    notes = backlog(tmp_path / "o.db", 6)
    with Outbox(tmp_path / "o.db") as outbox:
        assert [d.event_id for d in outbox.due("a", now=2000, limit=10)] == [n.event_id for n in notes[0::2]]
        outbox.record_attempt(notes[0].event_id, "a", state="delivered", now=2000, status=200)
        outbox.record_attempt(notes[2].event_id, "a", state="pending", now=2000, error="x", next_at=5000)
        # alert 0's resolution is free now; alert 1's firing waits until 5000 and its resolution with it
        assert [d.event_id for d in outbox.due("a", now=2000, limit=10)] == [
            notes[1].event_id,
            notes[4].event_id,
        ]
        assert [d.event_id for d in outbox.due("a", now=5000, limit=2)] == [
            notes[1].event_id,
            notes[2].event_id,
        ]


SCHEMA_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE offsets (topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,
    alert_id TEXT NOT NULL, episode_id TEXT NOT NULL, status TEXT NOT NULL, rule TEXT NOT NULL,
    severity TEXT NOT NULL, subject TEXT NOT NULL, at REAL NOT NULL, created REAL NOT NULL,
    payload TEXT NOT NULL);
CREATE TABLE deliveries (event_id TEXT NOT NULL REFERENCES events (event_id), target TEXT NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, requeued INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL, next_at REAL NOT NULL, last_at REAL, delivered_at REAL,
    last_status INTEGER, last_error TEXT, PRIMARY KEY (event_id, target));
CREATE INDEX deliveries_due ON deliveries (target, state, next_at);
CREATE TABLE alerts (episode_id TEXT PRIMARY KEY, alert_id TEXT NOT NULL, rule TEXT NOT NULL,
    source TEXT NOT NULL, query TEXT NOT NULL, subject TEXT NOT NULL, subject_label TEXT NOT NULL,
    severity TEXT NOT NULL, status TEXT NOT NULL, first_seen REAL, last_seen REAL, resolved_at REAL,
    value REAL, peak REAL, suppressed INTEGER NOT NULL DEFAULT 0, labels TEXT NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE problems (rule TEXT PRIMARY KEY, message TEXT NOT NULL, count INTEGER NOT NULL,
    updated REAL NOT NULL);
INSERT INTO meta VALUES ('schema', '1');
"""


def test_an_outbox_of_schema_1_keeps_working(tmp_path: Path) -> None:
    """A file written by the previous netmon: read as is read-only, brought up to date read-write."""
    import json
    import sqlite3

    path = tmp_path / "old.db"
    notes = [note(i) for i in range(4)]
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V1)
    for n in notes:
        db.execute(
            "INSERT INTO events (event_id, alert_id, episode_id, status, rule, severity, subject, at,"
            " created, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (
                n.event_id,
                n.alert_id,
                n.episode_id,
                n.status,
                n.rule,
                n.severity,
                n.subject,
                n.at,
                json.dumps(n.to_dict()),
            ),
        )
        db.execute(
            "INSERT INTO deliveries (event_id, target, state, created, next_at)"
            " VALUES (?, 'a', 'pending', 1, 1)",
            (n.event_id,),
        )
    db.commit()
    db.close()
    with Outbox(path, readonly=True) as ro:  # the dashboard before the service was upgraded
        assert ro.counts() == {
            "firing": 0,
            "resolved": 0,
            "pending": 4,
            "delivered": 0,
            "dead": 0,
            "skipped_rows": 0,
        }
        assert ro.skipped() == {}
    for _ in range(2):  # opening twice (and so migrating twice) is harmless
        Outbox(path).close()
    with Outbox(path) as outbox:
        assert [d.event_id for d in outbox.due("a", now=10)] == [notes[0].event_id, notes[2].event_id]
        indexes = {r[0] for r in outbox._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"deliveries_order", "deliveries_alert", "events_alert"} <= indexes
        assert outbox._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == "2"
        later = note(10)
        write(outbox, [later])  # new rows next to the migrated ones
        assert len(outbox.due("a", now=1e12, limit=10)) == 3


def test_prune_deletes_old_delivered_and_dead_rows_only(tmp_path: Path) -> None:
    day = 86400.0
    path = tmp_path / "o.db"
    notes = backlog(path, 8, now=0.0)  # written at t=0
    with Outbox(path) as outbox:
        outbox.record_attempt(notes[0].event_id, "a", state="delivered", now=1 * day, status=200)
        outbox.record_attempt(notes[1].event_id, "a", state="delivered", now=1 * day, status=200)
        outbox.record_attempt(notes[2].event_id, "a", state="dead", now=2 * day, error="gone")
        outbox.record_attempt(notes[4].event_id, "a", state="delivered", now=9 * day, status=200)  # recent
        outbox.record_attempt(notes[6].event_id, "a", state="pending", now=1 * day, error="x", next_at=day)
        # notes[3], [5], [7] were never attempted: pending since t=0
        assert outbox.prune(7, now=10 * day) == {"deliveries": 3, "events": 3, "alerts": 0}
        left = {d["event_id"]: d["state"] for d in outbox.deliveries()}
        assert left == {
            notes[3].event_id: "pending",
            notes[4].event_id: "delivered",
            notes[5].event_id: "pending",
            notes[6].event_id: "pending",
            notes[7].event_id: "pending",
        }
        assert {e["event_id"] for e in outbox.events()} == set(left)
        assert outbox.prune(0, now=10 * day)["deliveries"] == 1  # keep_days = 0: every finished one
        assert outbox.prune(7, now=10 * day) == {"deliveries": 0, "events": 0, "alerts": 0}


def test_prune_removes_resolved_episodes_without_events(tmp_path: Path) -> None:
    rule_notes = episode("10.0.0.5", 1)
    engine = RuleEngine([RULE])
    for row in (distinct_row(1, "10.0.0.9", 300), distinct_row(2, "x", 1), distinct_row(3, "x", 1)):
        engine.observe("distinct", row)
    resolved = engine.take_changes()
    firing_engine = RuleEngine([RULE])
    firing_engine.observe("distinct", distinct_row(1, "10.0.0.7", 300))
    firing = firing_engine.take_changes()
    with Outbox(tmp_path / "o.db") as outbox:
        outbox.commit_batch(
            notifications=rule_notes, routes={}, records=resolved + firing, state={}, offsets={}, now=0.0
        )
        assert outbox.prune(7, now=7 * 86400 + 1) == {"deliveries": 0, "events": 2, "alerts": 1}
        assert [a["status"] for a in outbox.alerts()] == ["firing"]  # a firing episode stays


def test_skipped_row_counts_add_up_across_batches_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    with Outbox(path) as outbox:
        write(outbox, [], {("t", 0): 3}, skipped={"value is not JSON": (2, "t[0]@1")}, now=10.0)
    with Outbox(path) as outbox:
        write(
            outbox,
            [],
            {("t", 0): 9},
            skipped={"value is not JSON": (1, "t[0]@7"), "x": (4, "t[0]@8")},
            now=20.0,
        )
    with Outbox(path, readonly=True) as ro:
        assert ro.skipped() == {
            "value is not JSON": {"count": 3, "first_at": 10.0, "last_at": 20.0, "last_where": "t[0]@7"},
            "x": {"count": 4, "first_at": 20.0, "last_at": 20.0, "last_where": "t[0]@8"},
        }
        assert ro.counts()["skipped_rows"] == 7
