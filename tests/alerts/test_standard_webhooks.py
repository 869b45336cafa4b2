"""A receiver built on the ``standardwebhooks`` package from PyPI accepts what netmon sends.

The receiver checks every request with ``standardwebhooks.Webhook(secret).verify`` only (no netmon
code), through the real outbox and delivery path, in every payload format; then captured requests
are replayed with a tampered body, a changed ``webhook-id`` and a stale timestamp, and refused.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from alerts.delivery import Deliverer, routes, send_test_alert
from alerts.outbox import Outbox
from alerts.rules import RuleEngine
from alerts.verify import sign_standard
from netmon.config import AlertRule, AlertsConfig, AlertTarget
from tests.alerts.helpers import WHSEC, distinct_row
from tests.alerts.receiver import Receiver

standardwebhooks = pytest.importorskip(
    "standardwebhooks",
    reason="the standardwebhooks package (a dev extra) is not installed: pip install standardwebhooks",
)

RULE = AlertRule(
    name="ddos", source="distinct", field="distinct", threshold=200, subject="group", cooldown_s=0
)


def library_receiver(receivers: Callable[..., Receiver], secret: str | bytes) -> Receiver:
    hook = standardwebhooks.Webhook(secret)
    return receivers(verifier=lambda headers, body: hook.verify(body, headers))


def replay(receiver: Receiver, headers: dict[str, str], body: bytes) -> int:
    request = urllib.request.Request(receiver.url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize(
    ("netmon_secret", "library_secret"),
    [(WHSEC, WHSEC), ("a raw secret, not base64", b"a raw secret, not base64")],
    ids=["whsec", "raw"],
)
def test_standardwebhooks_receiver_accepts_every_delivery_and_rejects_forgeries(
    netmon_secret: str, library_secret: str | bytes, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    receiver = library_receiver(receivers, library_secret)
    targets = [
        AlertTarget(name="generic", url=receiver.url, secret=netmon_secret),
        AlertTarget(name="chat", url=receiver.url, format="slack", secret=netmon_secret),
        AlertTarget(
            name="pager", url=receiver.url, format="pagerduty", secret=netmon_secret, routing_key="RK"
        ),
    ]
    cfg = AlertsConfig(targets=tuple(targets), retry_initial_s=0.05, retry_max_s=0.2, poll_s=0.1)
    engine = RuleEngine([RULE])
    notes = []
    for t, subject, value in [(1, "10.0.0.5", 300), (1, "10.0.0.6", 900), (2, "x", 1), (3, "x", 1)]:
        notes += engine.observe("distinct", distinct_row(t, subject, value))
    assert [n.status for n in notes] == ["firing", "firing", "resolved", "resolved"]
    with Outbox(tmp_path / "o.db") as outbox:
        outbox.commit_batch(
            notifications=notes,
            routes={n.event_id: routes(cfg.targets, n) for n in notes},
            records=[],
            state={},
            offsets={},
        )
        deliverer = Deliverer(tmp_path / "o.db", cfg, seed=1)
        for target in targets:
            assert deliverer.deliver_due(outbox, target.name).delivered == len(notes)
    test_notification, attempt = send_test_alert(targets[0])
    assert attempt.ok, attempt.error
    assert len(receiver.requests) == 3 * len(notes) + 1
    assert all(r.answered == 200 and r.verified for r in receiver.requests), [
        r.error for r in receiver.requests
    ]
    ids = [r.headers.get("Webhook-Id") for r in receiver.requests]
    assert ids == [n.event_id for n in notes] * 3 + [test_notification.event_id]  # the id is the event id

    genuine = receiver.requests[0]
    headers = {k: v for k, v in genuine.headers.items() if k.lower() not in ("host", "content-length")}
    assert replay(receiver, headers, genuine.body) == 200  # the same request, still fresh
    assert replay(receiver, headers, genuine.body.replace(b"10.0.0.5", b"10.0.0.7")) == 401  # tampered body
    assert replay(receiver, headers | {"Webhook-Id": notes[1].event_id}, genuine.body) == 401  # changed id
    stale = int(time.time()) - 600  # signed correctly (by netmon's signer), but 10 minutes old
    old = headers | {
        "Webhook-Timestamp": str(stale),
        "Webhook-Signature": sign_standard(netmon_secret, notes[0].event_id, stale, genuine.body),
    }
    assert replay(receiver, old, genuine.body) == 401
    errors = [r.error for r in receiver.requests[-3:]]
    assert errors == [
        "WebhookVerificationError: No matching signature found",
        "WebhookVerificationError: No matching signature found",
        "WebhookVerificationError: Message timestamp too old",
    ]


def test_a_netmon_v1_target_is_not_accepted_by_a_standard_receiver(
    receivers: Callable[..., Receiver],
) -> None:
    """The switch matters: a receiver on Standard Webhooks refuses the old scheme's requests."""
    receiver = library_receiver(receivers, WHSEC)
    target = AlertTarget(name="old", url=receiver.url, secret=WHSEC, signature="netmon-v1")
    _, attempt = send_test_alert(target)
    assert (attempt.ok, attempt.status) == (False, 401)
    assert receiver.requests[0].error == "WebhookVerificationError: Missing required headers"
