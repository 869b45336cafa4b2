"""The SQLite outbox: atomic batches, idempotent events, per-alert delivery order, dead letters."""

from __future__ import annotations

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
