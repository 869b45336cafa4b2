"""Alert rules over netmon's results, and signed, retried, durable webhook delivery.

``netmon alerts run`` consumes the result topics (``netmon.<kind>``) in a consumer group,
evaluates the rules (:mod:`alerts.rules`), writes every firing and resolution to a SQLite outbox
(:mod:`alerts.outbox`) before it commits its Kafka offsets, and delivers them to webhook targets
(:mod:`alerts.delivery`), signed as Standard Webhooks (or netmon's older ``netmon-v1`` scheme).
Receivers check the signature with :func:`alerts.verify.verify` or any Standard Webhooks library.
See ``docs/alerts.md``.

The ``[alerts]`` section's classes live on the ground floor (:mod:`netmon.config.alerts`, one
loader for every section) and are re-exported here.

Floor 3 of the house (README, "Architecture"): it stands on ``netmon`` only; ``pipeline``
shares the floor and neither imports the other.
"""

from __future__ import annotations

from alerts.verify import SignatureError, sign, sign_standard, verify
from netmon.config import AlertRule, AlertsConfig, AlertTarget

__all__ = ["AlertRule", "AlertTarget", "AlertsConfig", "SignatureError", "sign", "sign_standard", "verify"]
