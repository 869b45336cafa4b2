"""Webhook delivery to real local HTTP receivers: signatures, formats, routing, retries, dead letters."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.delivery import Deliverer, build_test_alert, post, routes
from alerts.outbox import Outbox
from alerts.rules import Notification, RuleEngine
from alerts.verify import SIGNATURE_HEADER, TIMESTAMP_HEADER, SignatureError, sign, verify
from netmon.config import AlertRule, AlertsConfig, AlertTarget
from tests.alerts.helpers import SECRET, distinct_row
from tests.alerts.receiver import Receiver, free_port

RULE = AlertRule(
    name="ddos",
    source="distinct",
    field="distinct",
    threshold=200,
    subject="group",
    subject_label="victim",
    severity="critical",
    labels={"team": "noc"},
    cooldown_s=0,
)


def notifications(*subjects: str) -> list[Notification]:
    """A firing and a resolution per subject, as the engine makes them."""
    engine = RuleEngine([RULE])
    out = []
    for s in subjects:
        out += engine.observe("distinct", distinct_row(1, s, 300))
    out += engine.observe("distinct", distinct_row(2, "x", 1))
    out += engine.observe("distinct", distinct_row(3, "x", 1))
    return out


def fast(targets: list[AlertTarget], **kw: float) -> AlertsConfig:
    settings = {
        "retry_initial_s": 0.05,
        "retry_max_s": 0.4,
        "retry_jitter": 0.5,
        "max_age_s": 30.0,
        "poll_s": 0.1,
    }
    return AlertsConfig(targets=tuple(targets), **(settings | kw))


def enqueue(path: Path, cfg: AlertsConfig, notes: list[Notification]) -> None:
    with Outbox(path) as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={n.event_id: routes(cfg.targets, n) for n in notes},
            records=[],
            state={},
            offsets={},
        )


def read(path: Path, what: str, *args: str) -> object:
    """One read from the outbox, closing the connection."""
    with Outbox(path, readonly=True) as outbox:
        return getattr(outbox, what)(*args)


def wait_until(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_every_format_is_signed_verified_and_keyed(
    tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    generic, slack, pager = receivers(), receivers(), receivers()
    cfg = fast(
        [
            AlertTarget(name="generic", url=generic.url, secret=SECRET),
            AlertTarget(name="chat", url=slack.url, format="slack", secret=SECRET),
            AlertTarget(
                name="pager", url=pager.url, format="pagerduty", secret=SECRET, routing_key="R0UT1NG"
            ),
        ]
    )
    notes = notifications("10.0.0.5", "10.0.0.6")
    enqueue(tmp_path / "o.db", cfg, notes)
    deliverer = Deliverer(tmp_path / "o.db", cfg, seed=1)
    with Outbox(tmp_path / "o.db") as outbox:
        for name in ("generic", "chat", "pager"):
            assert deliverer.deliver_due(outbox, name).delivered == 4
    for receiver in (generic, slack, pager):
        assert len(receiver.requests) == 4 and all(r.verified for r in receiver.requests)
        assert [r.key for r in receiver.requests] == [n.event_id for n in notes]
    body = generic.requests[0].json
    assert body["version"] == 1 and body["status"] == "firing" and body["subject"] == "10.0.0.5"
    assert body["subject_label"] == "victim" and body["first_seen"] == "2024-05-01T12:00:01Z"
    assert body["event_id"] == notes[0].event_id and body["alert_id"] == notes[0].alert_id
    assert set(slack.requests[0].json) == {"text"} and "victim 10.0.0.5" in slack.requests[0].json["text"]
    trigger, resolve = pager.requests[0].json, pager.requests[2].json
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] == notes[0].alert_id
    assert trigger["routing_key"] == "R0UT1NG" and trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["source"] == "10.0.0.5" and "summary" in trigger["payload"]


def _replay(receiver: Receiver, headers: dict[str, str], body: bytes) -> int:
    request = urllib.request.Request(receiver.url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_tampered_body_old_timestamp_and_wrong_secret_are_rejected(
    receivers: Callable[..., Receiver],
) -> None:
    receiver = receivers()
    target = AlertTarget(name="r", url=receiver.url, secret=SECRET, signature="netmon-v1")
    assert post(target, notifications("10.0.0.5")[0]).ok
    genuine = receiver.requests[0]
    headers = {k: v for k, v in genuine.headers.items() if k.lower() not in ("host", "content-length")}
    assert _replay(receiver, headers, genuine.body) == 200  # the same request, still fresh
    tampered = genuine.body.replace(b"10.0.0.5", b"10.0.0.6")
    assert _replay(receiver, headers, tampered) == 401
    old = int(time.time()) - 301  # correctly signed, but older than the 300 s tolerance
    stale = headers | {TIMESTAMP_HEADER: str(old), SIGNATURE_HEADER: sign(SECRET, old, genuine.body)}
    assert _replay(receiver, stale, genuine.body) == 401
    moved = headers | {
        TIMESTAMP_HEADER: str(int(headers[TIMESTAMP_HEADER]) + 1)
    }  # signature for another time
    assert _replay(receiver, moved, genuine.body) == 401
    assert [r.error for r in receiver.requests[2:]] == [
        "signature mismatch",
        receiver.requests[3].error,
        "signature mismatch",
    ]
    assert "outside the tolerance" in (receiver.requests[3].error or "")
    with pytest.raises(SignatureError, match="outside the tolerance"):  # the genuine one, replayed later
        verify(SECRET, genuine.headers, genuine.body, now=int(headers[TIMESTAMP_HEADER]) + 301)
    wrong_secret = AlertTarget(name="w", url=receiver.url, secret="not-the-secret", signature="netmon-v1")
    wrong = post(wrong_secret, build_test_alert(target))
    assert (wrong.ok, wrong.status, wrong.permanent) == (False, 401, True)


def test_failing_receiver_is_retried_with_growing_backoff(
    tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(fail_first=4)
    cfg = fast(
        [AlertTarget(name="r", url=receiver.url, secret=SECRET)], retry_initial_s=0.1, retry_jitter=0.0
    )
    notes = notifications("10.0.0.5")
    enqueue(tmp_path / "o.db", cfg, notes)
    deliverer = Deliverer(tmp_path / "o.db", cfg, seed=1).start()
    try:
        receiver.wait_for(2)
    finally:
        deliverer.stop()
    answered = [(r.key, r.answered) for r in receiver.requests]
    assert answered[:4] == [(notes[0].event_id, 503)] * 4  # the firing is retried, the resolution waits
    assert answered[4:] == [(notes[0].event_id, 200), (notes[1].event_id, 200)]
    gaps = [b.at - a.at for a, b in zip(receiver.requests[:4], receiver.requests[1:5], strict=True)]
    assert [round(g, 1) for g in gaps] == pytest.approx([0.1, 0.2, 0.4, 0.4], abs=0.1)  # doubling, capped
    rows = read(tmp_path / "o.db", "deliveries")
    assert [(r["state"], r["attempts"]) for r in rows] == [("delivered", 5), ("delivered", 1)]


def test_unreachable_webhook_dead_letters_after_max_age_then_retry_resends(
    tmp_path: Path, receivers: Callable[..., Receiver], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks/T0KEN-IN-PATH?auth=QUERYSECRET"
    cfg = fast([AlertTarget(name="down", url=url, secret=SECRET)], max_age_s=0.6)
    notes = notifications("10.0.0.5")
    enqueue(tmp_path / "o.db", cfg, notes)
    caplog.set_level(logging.DEBUG)
    deliverer = Deliverer(tmp_path / "o.db", cfg, seed=1).start()
    try:
        wait_until(lambda: read(tmp_path / "o.db", "counts")["pending"] == 0)  # type: ignore[index]
    finally:
        deliverer.stop()
    dead, resolution = read(tmp_path / "o.db", "deliveries", "dead")  # type: ignore[misc]  # the resolution waited, then expired
    assert dead["event_id"] == notes[0].event_id and dead["attempts"] >= 3
    assert resolution["event_id"] == notes[1].event_id
    assert "max_age_s" in dead["last_error"] and "Connection refused" in dead["last_error"]
    for secret in (SECRET, "T0KEN-IN-PATH", "QUERYSECRET"):
        assert secret not in caplog.text and secret not in str(read(tmp_path / "o.db", "deliveries"))
    assert "dead-lettered" in caplog.text
    receiver = receivers(port=port)  # the receiver comes up; `netmon alerts retry` re-sends
    with Outbox(tmp_path / "o.db") as outbox:
        assert outbox.requeue(target="down") == 2
        assert Deliverer(tmp_path / "o.db", cfg).deliver_due(outbox, "down", force=True).delivered == 2
    assert [r.key for r in receiver.accepted()] == [n.event_id for n in notes]
    assert all(r.verified for r in receiver.requests)


def test_routing_by_severity_rule_and_labels() -> None:
    firing = notifications("10.0.0.5")[0]  # critical, rule ddos, labels team=noc

    def target(**kw: object) -> AlertTarget:
        return AlertTarget(name=str(kw.pop("name")), url="http://127.0.0.1:9/", **kw)  # type: ignore[arg-type]

    targets = [
        target(name="all"),
        target(name="critical-only", min_severity="critical"),
        target(name="other-rule", rules=("port-scan",)),
        target(name="noc", labels={"team": "noc"}),
        target(name="sec", labels={"team": "sec"}),
        target(name="off", enabled=False),
    ]
    assert routes(targets, firing) == ["all", "critical-only", "noc"]
    info = AlertTarget(name="x", url="http://127.0.0.1:9/", min_severity="critical")
    assert routes([info], build_test_alert(info)) == []  # a test alert is severity info


def test_secrets_stay_out_of_reprs() -> None:
    t = AlertTarget(
        name="pd", url="https://events.example/T0KEN", format="pagerduty", secret="S", routing_key="RK"
    )
    assert "T0KEN" not in repr(t) and "'S'" not in repr(t) and "RK" not in repr(t)
    assert "T0KEN" not in repr(AlertsConfig(targets=(t,)))


# --- a deadline per request; every failure is an attempt ----------------------------------------


class Trickler:
    """A raw TCP server on 127.0.0.1 that answers one byte every ``gap_s`` (for ``for_s`` at most)."""

    def __init__(self, answer: bytes, *, gap_s: float = 0.2, for_s: float = 8.0, head: bytes = b"") -> None:
        self.answer, self.gap_s, self.for_s, self.head = answer, gap_s, for_s, head
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks/slow"

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            deadline = time.monotonic() + self.for_s
            try:
                conn.sendall(self.head)
                for byte in self.answer:
                    if self.stopped.is_set() or time.monotonic() > deadline:
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.gap_s)
            except OSError:
                return  # the client gave up

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.mark.parametrize(
    ("head", "answer"),
    [
        (b"", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),  # the status line trickles
        (b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n", b"x" * 60),  # the body trickles
    ],
    ids=["status-line", "body"],
)
def test_timeout_bounds_the_whole_request_not_each_read(head: bytes, answer: bytes) -> None:
    """The old per-read timeout: each byte within 0.2 s reset it; the answer took 8+ s."""
    server = Trickler(answer, head=head)
    try:
        target = AlertTarget(name="slow", url=server.url, secret=SECRET, timeout_s=1)
        started = time.monotonic()
        attempt = post(target, notifications("10.0.0.5")[0])
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    assert (attempt.ok, attempt.permanent) == (False, False)  # a timeout: retried later
    assert attempt.error == "TimeoutError: no complete answer within timeout_s=1 s"
    assert 0.9 <= elapsed < 2.0, elapsed


def test_a_url_the_http_client_refuses_is_a_failed_attempt_not_an_escape(tmp_path: Path) -> None:
    """A host label of 64 characters passes the config check but fails IDNA encoding in the client
    (UnicodeError, outside the network errors post caught): the delivery stayed pending forever."""
    url = "http://" + "a" * 64 + ".example/hooks/T0KEN"
    target = AlertTarget(name="odd", url=url, secret=SECRET)
    attempt = post(target, notifications("10.0.0.5")[0])
    assert (attempt.ok, attempt.status, attempt.permanent) == (False, None, True)
    assert attempt.error is not None and attempt.error.startswith("UnicodeError: ")
    assert "\n" not in attempt.error and "T0KEN" not in attempt.error
    cfg = fast([target])
    notes = notifications("10.0.0.5")
    enqueue(tmp_path / "o.db", cfg, notes)
    with Outbox(tmp_path / "o.db") as outbox:
        result = Deliverer(tmp_path / "o.db", cfg, seed=1).deliver_due(outbox, "odd")
    assert (result.delivered, result.retrying, result.dead) == (0, 0, 2)  # both dead letters, at once
    with Outbox(tmp_path / "o.db", readonly=True) as outbox:
        dead = outbox.deliveries("dead")
    assert [d["event_id"] for d in dead] == [n.event_id for n in notes]
    assert all("UnicodeError" in d["last_error"] and "(cannot be sent)" in d["last_error"] for d in dead)


def test_every_exception_of_an_attempt_is_a_failed_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    import alerts.delivery

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(alerts.delivery, "encode", explode)
    attempt = post(AlertTarget(name="x", url="http://127.0.0.1:9/"), notifications("10.0.0.5")[0])
    assert (attempt.ok, attempt.permanent, attempt.error) == (False, True, "RuntimeError: boom second line")


# --- signature schemes on the wire ---------------------------------------------------------------


def test_standard_and_netmon_v1_headers_on_the_wire(receivers: Callable[..., Receiver]) -> None:
    receiver = receivers()
    firing = notifications("10.0.0.5")[0]
    standard = AlertTarget(name="std", url=receiver.url, secret="whsec_c2VjcmV0LWtleS1ieXRlcw==")
    legacy = AlertTarget(name="v1", url=receiver.url, secret=SECRET, signature="netmon-v1")
    unsigned = AlertTarget(name="none", url=receiver.url)
    receiver.verifier = lambda headers, body: None  # accept all: this test reads the headers
    for target in (standard, legacy, unsigned):
        assert post(target, firing).ok
    std, v1, plain = ({k.lower(): v for k, v in r.headers.items()} for r in receiver.requests)
    assert std["webhook-id"] == std["idempotency-key"] == firing.event_id
    assert std["webhook-timestamp"].isdigit() and std["webhook-signature"].startswith("v1,")
    assert "x-netmon-signature" not in std and "x-netmon-timestamp" not in std
    body = receiver.requests[0].body
    assert verify("whsec_c2VjcmV0LWtleS1ieXRlcw==", std, body, scheme="standard") == int(
        std["webhook-timestamp"]
    )
    with pytest.raises(SignatureError, match="signature mismatch"):  # the raw text is not the key
        verify("c2VjcmV0LWtleS1ieXRlcw==", std, body, scheme="standard")
    assert v1["x-netmon-signature"].startswith("v1=") and "webhook-signature" not in v1
    assert verify(SECRET, v1, receiver.requests[1].body, scheme="netmon-v1")
    assert v1["idempotency-key"] == firing.event_id and v1["x-netmon-event"] == "firing"
    assert "webhook-signature" not in plain and "x-netmon-signature" not in plain
    assert plain["webhook-id"] == firing.event_id


# --- a backlog drains --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_backlog_of_20000_deliveries_drains_in_bounded_time(
    tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    """10,000 alerts, each a firing and a resolution, pending for one local receiver.

    The old due() cost grew with the backlog per call (13.8 s per call at 8,000 pending): this
    drain would not end for hours. Now each call costs the same; the drain is the POSTs.
    """
    from tests.alerts.test_outbox import backlog

    receiver = receivers()
    cfg = fast([AlertTarget(name="a", url=receiver.url, secret=SECRET)])
    notes = backlog(tmp_path / "o.db", 20_000, now=time.time())
    started = time.monotonic()
    deliverer = Deliverer(tmp_path / "o.db", cfg, seed=1).start()
    try:
        receiver.wait_for(len(notes), timeout_s=600)
    finally:
        deliverer.stop()
    elapsed = time.monotonic() - started
    print(f"drained {len(notes)} deliveries in {elapsed:.1f} s ({1000 * elapsed / len(notes):.2f} ms each)")
    with Outbox(tmp_path / "o.db", readonly=True) as outbox:
        counts = outbox.counts()
    assert counts["pending"] == 0 and counts["delivered"] == 20_000
    order = {r.key: i for i, r in enumerate(receiver.accepted())}
    assert all(order[f.event_id] < order[r.event_id] for f, r in zip(notes[0::2], notes[1::2], strict=True))
    assert all(r.verified for r in receiver.requests[:200])
